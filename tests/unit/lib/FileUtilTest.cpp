//===- tests/unit/lib/FileUtilTest.cpp - Atomic writes --------------------===//
#include "lib/FileUtil.h"

#include "lib/Error.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <csignal>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ppc;

namespace {
class FileUtilTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-fileutil", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec))
      out.push_back(llvm::sys::path::filename(it->path()).str());
    std::sort(out.begin(), out.end());
    return out;
  }
  static std::string contents(const std::string &p) {
    auto buffer = llvm::MemoryBuffer::getFile(p);
    return buffer ? (*buffer)->getBuffer().str() : "<unreadable>";
  }
  static llvm::Error writeText(const std::string &p, llvm::StringRef text) {
    return writeFileAtomically(p, [&](llvm::raw_ostream &os) {
      os << text;
      return llvm::Error::success();
    });
  }

  llvm::SmallString<256> dir;
};
} // namespace

TEST_F(FileUtilTest, WritesAndReplacesARegularFile) {
  std::string p = path("out.txt");
  ASSERT_FALSE(writeText(p, "one"));
  ASSERT_FALSE(writeText(p, "two"));
  EXPECT_EQ(contents(p), "two");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.txt"});
  // The mode of any new file: 0666 less the umask, never executable.
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

TEST_F(FileUtilTest, RefusesWhatIsNotARegularFile) {
  std::string fifo = path("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string sub = path("sub");
  ASSERT_FALSE(llvm::sys::fs::create_directory(sub));
  for (const std::string &p : {fifo, sub, std::string("/dev/null")}) {
    llvm::Error err = writeText(p, "x");
    ASSERT_TRUE(static_cast<bool>(err)) << p;
    EXPECT_EQ(llvm::toString(std::move(err)),
              "cannot write '" + p + "': it exists and is not a regular file");
  }
  llvm::sys::fs::file_status status;
  ASSERT_FALSE(llvm::sys::fs::status(fifo, status));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::fifo_file);
  ASSERT_FALSE(llvm::sys::fs::status("/dev/null", status));
  EXPECT_EQ(status.type(), llvm::sys::fs::file_type::character_file);
  EXPECT_EQ(entries(), (std::vector<std::string>{"fifo", "sub"}));
}

TEST_F(FileUtilTest, AFailedWriteKeepsTheOldFileAndLeavesNothing) {
  std::string p = path("out.txt");
  ASSERT_FALSE(writeText(p, "old"));
  llvm::Error err = writeFileAtomically(p, [](llvm::raw_ostream &os) {
    os << "half";
    return makeError("the writer gave up");
  });
  EXPECT_EQ(llvm::toString(std::move(err)), "the writer gave up");
  EXPECT_EQ(contents(p), "old");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.txt"});
}

TEST_F(FileUtilTest, AMissingDirectoryIsOneError) {
  std::string p = path("no/such/out.txt");
  EXPECT_EQ(llvm::toString(writeText(p, "x")),
            "cannot write '" + p + "': No such file or directory");
}

namespace {
/// Runs `body` in a child process; returns its wait status.
template <typename Body> int statusOfChild(Body body) {
  pid_t child = fork();
  if (child == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}
} // namespace

TEST_F(FileUtilTest, ASignalRemovesAStagedDirectoryAnotherProcessOwns) {
  // A rank writing its stages into rank 0's staged directory: SIGTERM
  // takes the whole tree, then ends the process as SIGTERM means to.
  std::string staged = path("out.tmp-x");
  ASSERT_FALSE(llvm::sys::fs::create_directories(staged + "/sub"));
  ASSERT_FALSE(writeText(staged + "/sub/stage_1.pt", "rank 1"));
  // Once the guard is gone, nothing is removed.
  int status = statusOfChild([&] {
    { RemovedOnSignal removed(staged); }
    ::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(llvm::sys::fs::exists(staged + "/sub/stage_1.pt"));

  status = statusOfChild([&] {
    RemovedOnSignal removed(staged);
    ::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(entries(), std::vector<std::string>{});
}

TEST_F(FileUtilTest, AReleasedStagedDirectoryStaysOnASignal) {
  // A rank that has reported its part: rank 0 may be committing the
  // directory, so a signal must leave it alone.
  std::string staged = path("out.tmp-x");
  ASSERT_FALSE(llvm::sys::fs::create_directories(staged));
  ASSERT_FALSE(writeText(staged + "/stage_1.pt", "rank 1"));
  int status = statusOfChild([&] {
    RemovedOnSignal removed(staged);
    removed.release();
    ::raise(SIGTERM);
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(contents(staged + "/stage_1.pt"), "rank 1");
}
