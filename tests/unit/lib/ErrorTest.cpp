//===- tests/unit/lib/ErrorTest.cpp - One-line diagnostics ----------------===//
#include "lib/Error.h"

#include <gtest/gtest.h>

using namespace ppc;

TEST(ErrorTest, KeepsTheFirstLineOfAPlainMessage) {
  EXPECT_EQ(firstLine("  bad thing happened  \nException raised from f at "
                      "x.cpp:1\nframe #0"),
            "bad thing happened");
  EXPECT_EQ(firstLine("\n \n"), "unknown error");
}

TEST(ErrorTest, KeepsTheCauseOfAnInterpreterError) {
  // What LibTorch 1.13 throws for a shape mismatch inside a stage.
  EXPECT_EQ(firstLine("The following operation failed in the TorchScript "
                      "interpreter.\n"
                      "Traceback of TorchScript (most recent call last):\n"
                      "  File \"code/__torch__.py\", line 9, in forward\n"
                      "    y = torch.matmul(x, w)\n"
                      "        ~~~~~~~~~~~~ <--- HERE\n"
                      "RuntimeError: mat1 and mat2 shapes cannot be "
                      "multiplied (2x5 and 3x4)\n"),
            "mat1 and mat2 shapes cannot be multiplied (2x5 and 3x4)");
  // A loaded module shows the serialized and the original code.
  EXPECT_EQ(firstLine("The following operation failed in the TorchScript "
                      "interpreter.\n"
                      "Traceback of TorchScript, serialized code (most recent "
                      "call last):\n"
                      "  File \"code/__torch__.py\", line 9, in forward\n"
                      "Traceback of TorchScript, original code (most recent "
                      "call last):\n"
                      "  File \"m.py\", line 4, in forward\n"
                      "builtins.ValueError: positive input\n"),
            "ValueError: positive input");
}
