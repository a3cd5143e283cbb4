//===- tests/unit/ScratchDirTest.h - A fresh directory per test -*- C++ -*-===//
//
// A GoogleTest fixture that gives each test its own empty directory under
// the system's temporary directory, removed with everything in it after the
// test. Derive a suite's fixture from it: class FooTest : public
// ppc::test::ScratchDirTest {}.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_SCRATCHDIRTEST_H
#define PPC_TESTS_UNIT_SCRATCHDIRTEST_H

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <string>

namespace ppc::test {

class ScratchDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  /// `name` inside the test's directory.
  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  llvm::SmallString<256> dir;
};

} // namespace ppc::test

#endif // PPC_TESTS_UNIT_SCRATCHDIRTEST_H
