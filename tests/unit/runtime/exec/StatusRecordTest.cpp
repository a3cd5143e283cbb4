//===- tests/unit/runtime/exec/StatusRecordTest.cpp - Where a rank waits --===//
//
// A lost rank's status record, as the launcher reads it back
// (tools/ppc/StuckReport.h), and its line.
//
//===----------------------------------------------------------------------===//
#include "runtime/exec/StatusRecord.h"

#include "runtime/link/Link.h"
#include "tools/ppc/StuckReport.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

namespace ppc {
namespace {

/// PPC_STATUS_DIR set to a fresh directory for the test's life.
class StatusRecordTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-status", dir));
    ::setenv("PPC_STATUS_DIR", dir.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("PPC_STATUS_DIR");
    llvm::sys::fs::remove_directories(dir);
  }
  std::string record(int rank) {
    auto buffer = llvm::MemoryBuffer::getFile(std::string(dir) + "/rank-" +
                                              std::to_string(rank) + ".json");
    return buffer ? (*buffer)->getBuffer().str() : std::string();
  }
  llvm::SmallString<128> dir;
};

TEST_F(StatusRecordTest, ARankWaitingBeforeARunSaysSo) {
  llvm::Error err = beforeRun(
      lostRankTimedOut(1, std::chrono::seconds(3), "the microbatch signatures"),
      0);
  EXPECT_EQ(llvm::toString(std::move(err)),
            "lost rank 1 (no answer within 3 s while waiting for the "
            "microbatch signatures; before a run of its schedule)");
  auto report = parseRankReport(record(0), 0, 2);
  ASSERT_TRUE(report) << record(0);
  EXPECT_EQ(report->waitingFor, 1);
  EXPECT_TRUE(report->timedOut);
  EXPECT_EQ(positionText(*report), "before a run of its schedule");
}

TEST_F(StatusRecordTest, ALostPeerKeepsItsCauseAndOtherErrorsPass) {
  // A peer that closed its connection: the record says it did not time
  // out, and the line keeps its cause without a position.
  llvm::Error err = beforeRun(lostRank(2, "it closed the connection"), 1);
  EXPECT_EQ(llvm::toString(std::move(err)),
            "lost rank 2 (it closed the connection)");
  auto report = parseRankReport(record(1), 1, 3);
  ASSERT_TRUE(report) << record(1);
  EXPECT_FALSE(report->timedOut);
  // Not a lost rank: no record.
  llvm::Error other = beforeRun(
      llvm::createStringError(llvm::inconvertibleErrorCode(), "no"), 2);
  EXPECT_EQ(llvm::toString(std::move(other)), "no");
  EXPECT_EQ(record(2), "");
}

} // namespace
} // namespace ppc
