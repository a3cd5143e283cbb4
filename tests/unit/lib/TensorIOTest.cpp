//===- tests/unit/lib/TensorIOTest.cpp - Reading torch.save files ---------===//
//
// The fixtures under tests/unit/fixtures/tensorio/ were written by Python's
// torch.save (make_fixtures.py there says how), including hand-edited ones.
//
//===----------------------------------------------------------------------===//
#include "lib/TensorIO.h"

#include "llvm/Support/FileSystem.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/api/include/torch/version.h>

using namespace ppc;

namespace {
std::string fixture(llvm::StringRef name) {
  return (llvm::Twine(PPC_FIXTURES_DIR) + "/tensorio/" + name).str();
}

std::string loadError(const std::string &path) {
  auto values = loadTensors(path);
  if (values)
    return "";
  return llvm::toString(values.takeError());
}

at::Tensor x() { return at::arange(6, at::kFloat).reshape({2, 3}); }
} // namespace

TEST(TensorIOTest, ReadsAListOfOneTensor) {
  // Python pickles a one-element list with APPEND, which LibTorch 1.13's
  // unpickler does not know ("Unknown opcode for unpickling at 0x61").
  auto values = loadTensors(fixture("list_of_one.pt"));
  ASSERT_TRUE(static_cast<bool>(values)) << llvm::toString(values.takeError());
  ASSERT_EQ(values->size(), 1u);
  EXPECT_TRUE(at::equal((*values)[0].toTensor(), x()));
}

TEST(TensorIOTest, ReadsListsAndTuplesWithViews) {
  auto list = loadTensors(fixture("list_of_three.pt"));
  ASSERT_TRUE(static_cast<bool>(list)) << llvm::toString(list.takeError());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_TRUE(at::equal((*list)[2].toTensor(), x() + 2));
  auto tuple = loadTensors(fixture("tuple_of_two.pt"));
  ASSERT_TRUE(static_cast<bool>(tuple)) << llvm::toString(tuple.takeError());
  ASSERT_EQ(tuple->size(), 2u);
  EXPECT_TRUE(at::equal((*tuple)[1].toTensor(), x().t()));
  EXPECT_EQ((*tuple)[1].toTensor().strides(), at::IntArrayRef({1, 3}));
}

TEST(TensorIOTest, NamesADictInOneLine) {
  std::string path = fixture("dict_of_one.pt");
  EXPECT_EQ(loadError(path), "input '" + path +
                                 "' holds a dict; expected a tensor or a "
                                 "tuple/list of tensors (one per model input)");
}

TEST(TensorIOTest, RefusesAViewPastItsStorage) {
  std::string path = fixture("view_past_storage.pt");
#if TORCH_VERSION_MAJOR >= 2
  // LibTorch 2.x's unpickler checks the view against its storage first.
  EXPECT_EQ(loadError(path),
            "cannot read input '" + path +
                "': Tensor: sizes 5 64, strides 64 1, storage offset 0 and "
                "itemsize 4 require a storage of at least 1280 bytes, but "
                "storage only has 40 bytes");
#else
  EXPECT_EQ(loadError(path), "input '" + path +
                                 "' tensor 0 is malformed: its view needs "
                                 "1280 bytes but its storage holds 40");
#endif
}

TEST(TensorIOTest, RefusesAStoragePastItsRecord) {
  std::string path = fixture("storage_past_record.pt");
  EXPECT_EQ(loadError(path), "input '" + path +
                                 "' tensor 0 is malformed: its storage "
                                 "claims 4000 bytes but the file holds 40");
}

TEST(TensorIOTest, RoundTripsWhatItWrites) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("ppc-tensorio", "pt", path));
  ASSERT_FALSE(static_cast<bool>(
      saveTensors(path, {x(), x().t().contiguous()}, /*asTuple=*/true)));
  auto values = loadTensors(path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(static_cast<bool>(values)) << llvm::toString(values.takeError());
  ASSERT_EQ(values->size(), 2u);
  EXPECT_TRUE(at::equal((*values)[1].toTensor(), x().t()));
}

TEST(TensorIOTest, RefusesMalformedPicklesBeforeUnpickling) {
  std::string underflow = fixture("pickle_underflow.pt");
  EXPECT_EQ(loadError(underflow),
            "cannot read input '" + underflow +
                "': a pickle opcode pops an empty stack at byte 2 of data.pkl");
  std::string noStop = fixture("pickle_no_stop.pt");
  EXPECT_EQ(loadError(noStop), "cannot read input '" + noStop +
                                   "': the pickle has no STOP at byte 4 of "
                                   "data.pkl");
  EXPECT_EQ(loadError("/nonexistent/x.pt"),
            "cannot read input '/nonexistent/x.pt': No such file or "
            "directory");
}
