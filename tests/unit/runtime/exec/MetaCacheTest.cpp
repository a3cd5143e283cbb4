//===- tests/unit/runtime/exec/MetaCacheTest.cpp - The meta cache ---------===//
#include "runtime/exec/MetaCache.h"
#include "tests/unit/runtime/exec/MetaBuilders.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
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
  // Only --precision: said so, not "the placement changed" (issue #44).
  changed = key;
  changed.precision = "bf16";
  MetaCache::load(path, changed, warning);
  EXPECT_EQ(warning,
            "meta cache '" + path + "' is stale (the precision changed)");
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

namespace {
/// tests/unit/fixtures/meta/NAME, written by hand from docs/runtime.md.
std::string fixture(llvm::StringRef name) {
  llvm::SmallString<256> path(PPC_FIXTURES_DIR);
  llvm::sys::path::append(path, "meta", name);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(static_cast<bool>(buffer)) << path.str().str();
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

/// The fixture's two entries, built by hand.
std::map<std::string, MetaTable> fixtureTables() {
  std::map<std::string, MetaTable> tables;
  ValueMeta i, t, list, tuple;
  i.kind = ValueKind::Int;
  t.tensors = {tensorMeta(c10::ScalarType::Float, {1, 8}, {8, 1}, false)};
  list.kind = ValueKind::IntList;
  list.length = 3;
  tuple.kind = ValueKind::TensorTuple;
  tuple.tensors = {tensorMeta(c10::ScalarType::Long, {2}, {1}, false),
                   tensorMeta(c10::ScalarType::BFloat16, {8, 2}, {1, 8}, true)};
  tables["float32[1,8]"] = {{{0, 1}, i}, {{1, 0}, t}};
  tables["float32[2,8]"] = {{{0, 1}, list}, {{1, 0}, tuple}};
  return tables;
}
} // namespace

TEST_F(MetaCacheTest, ReadsTheDocumentedLayout) {
  write(fixture("meta_cache.rank1of2.json"));
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  EXPECT_EQ(warning, "");
  ASSERT_EQ(cache.size(), 2u);
  for (const auto &[signature, expected] : fixtureTables()) {
    const MetaTable *found = cache.find(signature, required);
    ASSERT_NE(found, nullptr) << signature;
    ASSERT_EQ(found->size(), expected.size());
    for (const auto &[k, meta] : expected) {
      const ValueMeta &got = found->at(k);
      EXPECT_EQ(got.kind, meta.kind);
      EXPECT_EQ(got.length, meta.length);
      ASSERT_EQ(got.tensors.size(), meta.tensors.size());
      for (size_t n = 0; n < meta.tensors.size(); ++n) {
        EXPECT_EQ(got.tensors[n].dtype, meta.tensors[n].dtype);
        EXPECT_EQ(got.tensors[n].sizes, meta.tensors[n].sizes);
        EXPECT_EQ(got.tensors[n].strides, meta.tensors[n].strides);
        EXPECT_EQ(got.tensors[n].requiresGrad, meta.tensors[n].requiresGrad);
      }
    }
  }
}

TEST_F(MetaCacheTest, WritesTheDocumentedLayout) {
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  for (auto &[signature, table] : fixtureTables())
    cache.put(signature, table);
  auto expected = llvm::json::parse(fixture("meta_cache.rank1of2.json"));
  ASSERT_TRUE(static_cast<bool>(expected));
  EXPECT_EQ(cache.toJSON(), *expected)
      << llvm::formatv("{0:2}", cache.toJSON()).str();
}

TEST_F(MetaCacheTest, EditedEntriesAreNotTrusted) {
  // The same edit on every rank's file would pass the start-up agreement;
  // the checksum beside the entries catches it.
  std::string text = fixture("meta_cache.rank1of2.json");
  size_t at = text.find("\"sizes\": [1, 8]");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "\"sizes\": [1, 9]");
  write(text);
  std::string warning;
  MetaCache cache = MetaCache::load(path, key, warning);
  EXPECT_EQ(warning, "meta cache '" + path +
                         "' is corrupt (the entries do not match "
                         "'entries_sha256')");
  EXPECT_EQ(cache.size(), 0u);
}

TEST_F(MetaCacheTest, DeepNestingIsCorruptNotACrash) {
  write(std::string(100000, '[') + std::string(100000, ']'));
  std::string warning;
  MetaCache::load(path, key, warning);
  EXPECT_EQ(warning, "meta cache '" + path +
                         "' is corrupt (JSON nests deeper than 256 levels)");
}
