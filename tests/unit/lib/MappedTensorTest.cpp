//===- tests/unit/lib/MappedTensorTest.cpp - Tensors over a file, in place ===//
#include "lib/FileUtil.h"
#include "lib/MappedTensor.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace ppc;

namespace {
/// This process's resident pages of mapped files, in KiB; -1 where
/// /proc/self/status does not say.
long rssFileKiB() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("RssFile:", 0) == 0)
      return std::stol(line.substr(8));
  return -1;
}
} // namespace

TEST(MappedTensorTest, ViewsBytesInPlaceAndKeepsTheirOwner) {
  auto owner = std::make_shared<std::vector<float>>(
      std::vector<float>{1, 2, 3, 4, 5});
  llvm::StringRef bytes(reinterpret_cast<const char *>(owner->data()),
                        owner->size() * sizeof(float) + 2);
  ASSERT_TRUE(canViewInPlace(bytes, at::kFloat));
  EXPECT_FALSE(canViewInPlace(bytes.drop_front(1), at::kFloat));
  at::Tensor t = viewInPlace(bytes, at::kFloat, owner);
  // The trailing partial element is left out; the elements are the bytes.
  EXPECT_EQ(t.numel(), 5);
  EXPECT_EQ(t.data_ptr(), owner->data());
  std::weak_ptr<std::vector<float>> watch = owner;
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(t[4].item<float>(), 5.0f);
  at::Tensor view = t.narrow(0, 1, 2);
  t = at::Tensor();
  EXPECT_FALSE(watch.expired()); // a view keeps the storage
  view = at::Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(MappedTensorTest, PageOutGivesBackCleanPagesAndKeepsEveryValue) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-mapped", dir));
  std::string path = (dir + "/w.bin").str();
  const int64_t n = 16 << 18; // 16 MiB of floats
  at::Tensor values = at::arange(n, at::kFloat);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    ASSERT_FALSE(ec);
    os.write(static_cast<const char *>(values.data_ptr()), n * sizeof(float));
  }
  auto file = mapFileBounded(path, uint64_t(1) << 30, "weights");
  ASSERT_TRUE(static_cast<bool>(file)) << llvm::toString(file.takeError());
  at::Tensor mapped = viewInPlace((*file)->getBuffer(), at::kFloat, *file);
  long before = rssFileKiB();
  EXPECT_TRUE(at::equal(mapped, values)); // touches every page
  long touched = rssFileKiB();
  mapped[7] = -1.0f; // a page written in place, copy-on-write
  pageOut(mapped.storage());
  long after = rssFileKiB();
  EXPECT_EQ(mapped[7].item<float>(), -1.0f);
  mapped[7] = 7.0f;
  EXPECT_TRUE(at::equal(mapped, values)); // read again from the file
  if (before >= 0) {
    EXPECT_GE(touched - before, 12 << 10) << "the mapping was not resident";
    EXPECT_LE(after, touched - (12 << 10)) << "pageOut kept the pages";
  }
  // Hashing pages out as it goes and hashes what sha256Hex hashes, across
  // its 64 MiB chunks too.
  EXPECT_EQ(sha256PagingOut((*file)->getBuffer()),
            sha256Hex((*file)->getBuffer()));
  std::string large((64 << 20) + 4097, 'x');
  large[64 << 20] = 'y';
  EXPECT_EQ(sha256PagingOut(large), sha256Hex(large));
  // An ordinary tensor: nothing happens.
  at::Tensor copy = values.clone();
  pageOut(copy.storage());
  EXPECT_TRUE(at::equal(copy, values));
  llvm::sys::fs::remove_directories(dir);
}
