//===- tests/unit/runtime/platform/ThreadsTest.cpp - Default threads ------===//
//
// Tests how a rank reads the cores' idle time for its default thread count
// (runtime/platform/Threads.h): /proc/stat's per-CPU lines, never the
// machine-wide one, and an idle count within the process's cores.
//
//===----------------------------------------------------------------------===//
#include "runtime/platform/Threads.h"

#include <gtest/gtest.h>

using namespace ppc;

namespace {

TEST(ThreadsTest, ProcStatPerCpuLinesOnly) {
  // As a 2-CPU Linux writes it: the machine-wide line first, then per CPU
  // user nice system idle iowait irq softirq steal guest guest_nice.
  const char *text = "cpu  4705 150 1120 16250 520 0 15 0 0 0\n"
                     "cpu0 2000 100 500 8000 260 0 10 0 0 0\n"
                     "cpu1 2705 50 620 8250 260 0 5 0 0 0\n"
                     "intr 114930548 113199788 3 0 5 263 0 4 [...]\n"
                     "cpu7\n"
                     "ctxt 1990473\n";
  std::map<int, CpuTime> times = parseCpuTimes(text);
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[0].idle, 8260u);
  EXPECT_EQ(times[0].total, 10870u);
  EXPECT_EQ(times[1].idle, 8510u);
  EXPECT_EQ(times[1].total, 11890u);
}

TEST(ThreadsTest, IdleCoresAreWithinThisProcesssCores) {
  std::optional<double> idle = idleCores(std::chrono::milliseconds(50));
  ASSERT_TRUE(idle.has_value()) << "/proc/stat has no per-CPU lines";
  EXPECT_GE(*idle, 0.0);
  EXPECT_LE(*idle, availableCores() + 1e-9);
  int threads = rankDefaultThreads(1);
  EXPECT_GE(threads, 1);
  EXPECT_LE(threads, defaultThreads(1));
}

} // namespace
