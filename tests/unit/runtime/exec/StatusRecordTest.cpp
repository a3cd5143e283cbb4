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
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

namespace ppc {
namespace {

/// The status directory (LaunchEnv::statusDir, PPC_STATUS_DIR) set to a
/// fresh private directory for the test's life.
class StatusRecordTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-status", dir));
    // Private whatever the umask: a rank writes only into such a directory.
    ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
    setStatusDirectory(std::string(dir));
  }
  void TearDown() override {
    setStatusDirectory("");
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

/// The record a rank that lost rank 1 writes as rank 0, and what it printed.
std::string loseRankOne() {
  ::testing::internal::CaptureStderr();
  llvm::consumeError(beforeRun(lostRank(1, "it closed the connection"), 0));
  return ::testing::internal::GetCapturedStderr();
}

std::string readAll(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string("(unreadable)");
}

TEST_F(StatusRecordTest, APlantedLinkIsNotWrittenThrough) {
  // Tests that a link planted at the temporary name (a shared directory,
  // ranks started by hand) is replaced, not followed: its target keeps its
  // bytes, and the record is written.
  std::string victim = std::string(dir) + ".victim";
  { std::ofstream(victim) << "victim's bytes"; }
  std::string partial = std::string(dir) + "/rank-0.json.partial";
  ASSERT_EQ(::symlink(victim.c_str(), partial.c_str()), 0);
  EXPECT_EQ(loseRankOne(), "");
  EXPECT_EQ(readAll(victim), "victim's bytes");
  EXPECT_TRUE(parseRankReport(record(0), 0, 2)) << record(0);
  EXPECT_FALSE(llvm::sys::fs::exists(partial));
  ::unlink(victim.c_str());
}

TEST_F(StatusRecordTest, AFifoAtTheTemporaryNameDoesNotBlock) {
  // Tests that a FIFO without a reader at the temporary name neither blocks
  // the rank (it would, forever) nor keeps the record from being written.
  std::string partial = std::string(dir) + "/rank-0.json.partial";
  ASSERT_EQ(::mkfifo(partial.c_str(), 0600), 0);
  EXPECT_EQ(loseRankOne(), "");
  EXPECT_TRUE(parseRankReport(record(0), 0, 2)) << record(0);
}

TEST_F(StatusRecordTest, OnlyAPrivateDirectoryOfThisUserIsWrittenInto) {
  // Tests that a directory others may write into, or a link to a directory,
  // gets no record, and that the rank says why in one line.
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  EXPECT_EQ(loseRankOne(),
            "warning: not writing this rank's status record into "
            "PPC_STATUS_DIR '" +
                std::string(dir) +
                "': its group or other users may write into it\n");
  EXPECT_EQ(record(0), "");
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  std::string link = std::string(dir) + ".link";
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  setStatusDirectory(link);
  EXPECT_EQ(loseRankOne(), "warning: not writing this rank's status record "
                           "into PPC_STATUS_DIR '" +
                               link + "': it is a symbolic link\n");
  EXPECT_EQ(record(0), "");
  ::unlink(link.c_str());
}

} // namespace
} // namespace ppc
