//===- tests/unit/runtime/MetaCacheTest.cpp - The meta cache --------------===//
#include "runtime/MetaCache.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

using namespace ppc;

namespace {
class MetaCacheTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(
        llvm::sys::fs::createUniqueDirectory("ppc-meta-cache-test", dir));
    path = MetaCache::filePath(dir, 1, 2);
    key.manifestSha256 = "aa";
    key.stages = {{1, "bb"}, {3, "cc"}};
    key.layout = "4 stages on 2 ranks: rank 0 [0,2], rank 1 [1,3]";
    table[{1, 0}] = ValueMeta::of(at::zeros({2, 8}), ValueKind::Tensor);
    table[{0, 1}] = ValueMeta::of(c10::IValue(int64_t(3)), ValueKind::Int);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  void write(llvm::StringRef text) {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    os << text;
  }

  llvm::SmallString<128> dir;
  std::string path;
  MetaCacheKey key;
  MetaTable table;
  std::vector<std::pair<int, int>> required{{0, 1}, {1, 0}};
};
} // namespace

TEST_F(MetaCacheTest, MissingFileWarns) {
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  EXPECT_EQ(warning, "no meta cache at '" + path + "'");
  EXPECT_EQ(cache.find("float32[2,8]", required), nullptr);
  EXPECT_TRUE(llvm::StringRef(path).endswith("meta_cache.rank1of2.json"));
}

TEST_F(MetaCacheTest, SaveLoadSeveralSignatures) {
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  cache.put("float32[2,8]", table);
  MetaTable small = table;
  small[{1, 0}] = ValueMeta::of(at::zeros({1, 8}), ValueKind::Tensor);
  cache.put("float32[1,8]", small);
  ASSERT_FALSE(static_cast<bool>(cache.save()));

  MetaCache again = MetaCache::load(path, key, warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(again.size(), 2u);
  const MetaTable *found = again.find("float32[1,8]", required);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->at({1, 0}).str(), "float32[1,8]");
  // An entry that lacks a required value does not count.
  std::vector<std::pair<int, int>> more = required;
  more.push_back({3, 0});
  EXPECT_EQ(again.find("float32[2,8]", more), nullptr);
}

TEST_F(MetaCacheTest, StaleKeyWarns) {
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  cache.put("float32[2,8]", table);
  ASSERT_FALSE(static_cast<bool>(cache.save()));

  MetaCacheKey changed = key;
  changed.stages[1].second = "dd";
  MetaCache stale = MetaCache::load(path, changed, warning);
  EXPECT_EQ(warning,
            "meta cache '" + path + "' is stale (a stage file changed)");
  EXPECT_EQ(stale.size(), 0u);
  changed = key;
  changed.manifestSha256 = "ff";
  MetaCache::load(path, changed, warning);
  EXPECT_EQ(warning,
            "meta cache '" + path + "' is stale (the manifest changed)");
  changed = key;
  changed.layout = "4 stages on 4 ranks";
  MetaCache::load(path, changed, warning);
  EXPECT_EQ(warning,
            "meta cache '" + path + "' is stale (the placement changed)");
}

TEST_F(MetaCacheTest, CorruptFileWarns) {
  write("{\"format\": \"ppc-meta-cache\", \"ver");
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  EXPECT_EQ(warning.rfind("meta cache '" + path + "' is corrupt (", 0), 0u)
      << warning;
  EXPECT_EQ(cache.size(), 0u);

  write("[1, 2]");
  MetaCache::load(path, key, warning);
  EXPECT_EQ(warning,
            "meta cache '" + path + "' is corrupt (not a ppc meta cache)");
}
