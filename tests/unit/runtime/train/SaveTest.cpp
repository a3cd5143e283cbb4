//===- tests/unit/runtime/train/SaveTest.cpp ------------------------------===//
//
// Trainer::save in-process.
//
// Tests runtime/train/Save.h's save of a trained two-stage job (TrainJob.h)
// whose two ranks are threads of this process: the directory holds the
// stage files and a manifest whose hashes are theirs, the stages hold the
// trained parameters, and training goes on after a save; a second save
// replaces the first; refusals on every rank with their texts (the job's
// own directory, a non-empty directory that is no earlier output), leaving
// the destination as it was and no staged directory behind.
//
//===----------------------------------------------------------------------===//
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "runtime/train/Trainer.h"
#include "tests/unit/runtime/train/TrainJob.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/script.h>

#include <algorithm>
#include <mutex>
#include <set>

using namespace ppc;

namespace {

/// The names in directory `dir`, sorted.
std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    names.push_back(llvm::sys::path::filename(it->path()).str());
  std::sort(names.begin(), names.end());
  return names;
}

class SaveTest : public ppc::testing::TrainJob {
protected:
  /// One step of the batch on `tr`.
  static llvm::Error stepOnce(Trainer &tr, int rows = 4) {
    return tr
        .step(inputsFor(tr, batch(rows)),
              tr.needsTargets() ? target(rows) : at::Tensor())
        .takeError();
  }

  /// Parameter `name` of stage file `file`.
  static at::Tensor savedParameter(const std::string &file,
                                   const std::string &name) {
    torch::jit::Module m = torch::jit::load(file);
    return m.attr(name).toTensor();
  }

  const std::vector<std::string> jobFiles = {"manifest.json", "stage0.pt",
                                             "stage1.pt"};
};

} // namespace

TEST_F(SaveTest, SaveWritesEachStageAndAManifestOfTheirHashes) {
  std::string out = path("out");
  auto errors = onRanks(2, options(1), [&](Trainer &tr, int) -> llvm::Error {
    if (llvm::Error err = stepOnce(tr))
      return err;
    keepParameters(tr);
    return tr.save(out);
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(listDir(out), jobFiles);
  auto saved = Manifest::load(out + "/manifest.json");
  ASSERT_TRUE(static_cast<bool>(saved)) << llvm::toString(saved.takeError());
  ASSERT_EQ(saved->stages.size(), 2u);
  for (const StageInfo &stage : saved->stages) {
    auto sha = sha256File(out + "/" + stage.file);
    ASSERT_TRUE(static_cast<bool>(sha));
    EXPECT_EQ(stage.sha256, *sha) << stage.file;
    // The job's layout, the trained bytes.
    EXPECT_EQ(stage.file, manifest.stages[stage.index].file);
    EXPECT_NE(stage.sha256, manifest.stages[stage.index].sha256);
  }
  EXPECT_EQ(saved->modelOutputs.size(), 1u);
  // The stages hold the trained parameters, not the initial ones.
  EXPECT_TRUE(at::equal(savedParameter(out + "/stage0.pt", "w0"),
                        trained["stage 0: w0"]));
  EXPECT_TRUE(at::equal(savedParameter(out + "/stage1.pt", "w1"),
                        trained["stage 1: w1"]));
  EXPECT_TRUE(at::equal(savedParameter(out + "/stage1.pt", "b1"),
                        trained["stage 1: b1"]));
  EXPECT_FALSE(at::equal(trained["stage 0: w0"], initialW0()));
  // Nothing staged is left beside it.
  std::vector<std::string> expected = jobFiles;
  expected.push_back("out");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listDir(std::string(dir)), expected);
}

TEST_F(SaveTest, TrainingGoesOnAfterASaveAndASecondSaveReplacesTheFirst) {
  std::string out = path("out");
  auto errors = onRanks(2, options(1), [&](Trainer &tr, int) -> llvm::Error {
    if (llvm::Error err = stepOnce(tr))
      return err;
    if (llvm::Error err = tr.save(out))
      return err;
    auto before = parametersOf(tr);
    // The optimizer still holds the stages' parameters: a step moves them.
    if (llvm::Error err = stepOnce(tr))
      return err;
    for (const auto &[name, value] : tr.namedParameters())
      EXPECT_FALSE(at::equal(value, before[name])) << name;
    keepParameters(tr);
    return tr.save(out);
  });
  ASSERT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(listDir(out), jobFiles);
  EXPECT_TRUE(at::equal(savedParameter(out + "/stage0.pt", "w0"),
                        trained["stage 0: w0"]));
  EXPECT_TRUE(at::equal(savedParameter(out + "/stage1.pt", "w1"),
                        trained["stage 1: w1"]));
}

TEST_F(SaveTest, SavingOverTheJobsOwnManifestIsRefusedOnEveryRank) {
  std::string job(dir);
  auto errors = onRanks(2, options(1), [&](Trainer &tr, int) -> llvm::Error {
    return tr.save(job);
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(errors[r], "save '" + job + "' holds the manifest ('" +
                             path("manifest.json") +
                             "'); refusing to overwrite it")
        << "rank " << r;
  EXPECT_EQ(listDir(job), jobFiles);
}

TEST_F(SaveTest, ANonEmptyDirectoryThatIsNoEarlierOutputIsLeftAsItWas) {
  std::string out = path("out");
  ASSERT_FALSE(llvm::sys::fs::create_directory(out));
  {
    std::error_code ec;
    llvm::raw_fd_ostream notes(out + "/notes.txt", ec);
    ASSERT_FALSE(ec);
    notes << "mine\n";
  }
  auto errors = onRanks(2, options(1), [&](Trainer &tr, int) -> llvm::Error {
    if (llvm::Error err = stepOnce(tr))
      return err;
    return tr.save(out);
  });
  std::string why =
      "save '" + out +
      "' is not empty and holds no manifest.json; refusing to replace it";
  // Every rank checks the destination before anything is written.
  EXPECT_EQ(errors[0], why);
  EXPECT_EQ(errors[1], why);
  EXPECT_EQ(listDir(out), std::vector<std::string>{"notes.txt"});
  // No staged directory is left beside it.
  std::vector<std::string> expected = jobFiles;
  expected.push_back("out");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(listDir(std::string(dir)), expected);
}
