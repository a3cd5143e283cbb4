//===- tests/unit/runtime/train/CheckpointTest.cpp ------------------------===//
//
// runtime/train/Checkpoint.h: which directory a resume takes among complete,
// staged, unfinished and corrupt ones; --keep's pruning; the optimizer and
// generator state round trips.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"

#include "lib/FileUtil.h"
#include "lib/Manifest.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <fstream>

using namespace ppc;

namespace {
class CheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    llvm::SmallString<128> d;
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-checkpoint", d));
    dir = std::string(d);
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string at(llvm::StringRef a, llvm::StringRef b = "") const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, a);
    if (!b.empty())
      llvm::sys::path::append(p, b);
    return std::string(p);
  }
  static void write(const std::string &path, const std::string &bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }
  /// A complete checkpoint after `step` (fake stage bytes), with its hashes.
  std::string checkpoint(int step, bool withInfo = true) {
    std::string d = at(checkpointDirName(step));
    EXPECT_FALSE(llvm::sys::fs::create_directory(d));
    CheckpointInfo info;
    info.step = step;
    info.dataIndex = step;
    info.stages = 2;
    info.worldSize = 2;
    info.lr = 0.5;
    for (std::string name :
         {"manifest.json", "stage_0.pt", "stage_1.pt", "optim.stage0.pt",
          "rng.rank0.pt", "rng.rank1.pt"}) {
      std::string bytes = name == "manifest.json" ? manifestText()
                                                  : name + std::to_string(step);
      write(at(checkpointDirName(step), name), bytes);
      info.files[name] = sha256Hex(bytes);
    }
    if (withInfo)
      write(at(checkpointDirName(step), kCheckpointFile), checkpointJSON(info));
    return d;
  }
  /// A manifest of two stages, stage 0 with parameters.
  static std::string manifestText() {
    Manifest m;
    m.sourcePath = "/m.pt";
    m.sourceSize = 10;
    m.sourceSha256 = "ab";
    m.costModel = "params";
    m.modelInputs = {{"x", ValueKind::Tensor, {-1, 8}, {}}};
    StageInfo s0, s1;
    s0.index = 0;
    s0.file = "stage_0.pt";
    s0.parameterCount = 8;
    s0.inputs = {{"x", ValueKind::Tensor, ValueRef::fromModelInput(0), false}};
    s0.outputs = {{"h", ValueKind::Tensor, {1}, "", {-1, 16}}};
    s1.index = 1;
    s1.file = "stage_1.pt";
    s1.inputs = {{"h", ValueKind::Tensor, ValueRef::fromStage(0, 0), true}};
    s1.outputs = {{"y", ValueKind::Tensor, {}, "", {}}};
    m.stages = {s0, s1};
    m.modelOutputs = {ValueRef::fromStage(1, 0)};
    return llvm::formatv("{0:2}", m.toJSON()).str();
  }
  std::string newest() {
    auto chosen = findNewestCheckpoint(dir, "--resume");
    return chosen ? chosen->path
                  : "error: " + llvm::toString(chosen.takeError());
  }
  std::string dir;
};
} // namespace

TEST_F(CheckpointTest, Names) {
  EXPECT_EQ(checkpointDirName(4), "step-00000004");
  EXPECT_EQ(parseCheckpointDirName("step-00000123"), 123);
  for (llvm::StringRef bad :
       {"step-123", "step-0000000x", "step-00000001.tmp-1", "Step-00000001",
        "step-000000001"})
    EXPECT_EQ(parseCheckpointDirName(bad), std::nullopt) << bad.str();
}

TEST_F(CheckpointTest, InfoRoundTrip) {
  std::string d = checkpoint(7);
  auto info = readCheckpointInfo(d);
  ASSERT_TRUE(bool(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->step, 7);
  EXPECT_EQ(info->dataIndex, 7);
  EXPECT_EQ(info->stages, 2);
  EXPECT_EQ(info->lr, 0.5);
  EXPECT_EQ(info->files.size(), 6u);
  EXPECT_FALSE(bool(verifyCheckpoint(d, *info)));
  write(at(checkpointDirName(7), kCheckpointFile), "{\"format\": \"other\"}");
  auto bad = readCheckpointInfo(d);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "checkpoint file '" + at(checkpointDirName(7), kCheckpointFile) +
                "' is not a ppc checkpoint");
}

TEST_F(CheckpointTest, NewestCompleteAmongParts) {
  EXPECT_EQ(newest(),
            "error: --resume '" + dir + "' holds no complete checkpoint");
  checkpoint(2);
  std::string four = checkpoint(4);
  // A staged directory and a step directory without checkpoint.json (a
  // removal cut short) are never taken, however new.
  std::string staged = at("step-00000009.tmp-ab12-999999-Abc123");
  ASSERT_FALSE(llvm::sys::fs::create_directory(staged));
  write(at("step-00000009.tmp-ab12-999999-Abc123", kCheckpointFile), "{}");
  checkpoint(8, /*withInfo=*/false);
  EXPECT_EQ(newest(), four);
  // One step directory itself.
  auto two = findNewestCheckpoint(at(checkpointDirName(2)), "--resume");
  ASSERT_TRUE(bool(two));
  EXPECT_EQ(two->info.step, 2);
  // A user's directory is refused as a place to write.
  EXPECT_FALSE(bool(checkCheckpointDirectory(dir, "--checkpoint-dir")));
  write(at("notes.txt"), "mine");
  llvm::Error err = checkCheckpointDirectory(dir, "--checkpoint-dir");
  EXPECT_EQ(llvm::toString(std::move(err)),
            "--checkpoint-dir '" + dir +
                "' holds 'notes.txt', which is not a ppc checkpoint; refusing "
                "to write checkpoints there");
}

TEST_F(CheckpointTest, CorruptNewestIsRefused) {
  std::string two = checkpoint(2);
  std::string four = checkpoint(4);
  write(at(checkpointDirName(4), "stage_1.pt"), "flipped");
  EXPECT_EQ(newest(), "error: the checkpoint '" + four + "' is corrupt: '" +
                          at(checkpointDirName(4), "stage_1.pt") +
                          "' does not match its sha256 in checkpoint.json; "
                          "the newest complete one is '" +
                          two + "': remove the corrupt one to resume from it");
  llvm::sys::fs::remove(at(checkpointDirName(2), "rng.rank1.pt"));
  EXPECT_EQ(newest(), "error: the checkpoint '" + four + "' is corrupt: '" +
                          at(checkpointDirName(4), "stage_1.pt") +
                          "' does not match its sha256 in checkpoint.json; "
                          "no older checkpoint is complete");
  auto older = findNewestCheckpoint(two, "--resume");
  ASSERT_FALSE(bool(older));
  EXPECT_EQ(llvm::toString(older.takeError()),
            "the checkpoint '" + two + "' is corrupt: '" +
                at(checkpointDirName(2), "rng.rank1.pt") + "' is missing");
}

TEST_F(CheckpointTest, PruneKeepsTheNewestAndUsersFiles) {
  for (int s = 1; s <= 5; ++s)
    checkpoint(s);
  write(at(checkpointDirName(2), "notes.txt"), "mine");
  std::vector<std::string> removed = pruneCheckpoints(dir, 2, 5);
  EXPECT_EQ(removed, (std::vector<std::string>{at(checkpointDirName(3)),
                                               at(checkpointDirName(1))}));
  for (int s : {2, 4, 5})
    EXPECT_TRUE(llvm::sys::fs::is_directory(at(checkpointDirName(s)))) << s;
  // keep 1: only the new one, even when an older one has a higher step.
  llvm::sys::fs::remove(at(checkpointDirName(2), "notes.txt"));
  removed = pruneCheckpoints(dir, 1, 4);
  EXPECT_EQ(removed, (std::vector<std::string>{at(checkpointDirName(5)),
                                               at(checkpointDirName(2))}));
  EXPECT_TRUE(llvm::sys::fs::is_directory(at(checkpointDirName(4))));
}

TEST_F(CheckpointTest, RefusesHostileInfo) {
  std::string d = checkpoint(3);
  std::string file = at(checkpointDirName(3), kCheckpointFile);
  auto errorOf = [&](const std::string &text) {
    write(file, text);
    auto info = readCheckpointInfo(d);
    return info ? std::string("ok") : llvm::toString(info.takeError());
  };
  EXPECT_EQ(errorOf(std::string(300, '{')),
            "checkpoint file '" + file + "' nests deeper than 256 levels");
  auto info = checkpoint(1);
  std::string text = checkpointJSON(*readCheckpointInfo(info));
  std::string big = text;
  big.replace(big.find("\"step\": 1"), 9, "\"step\": 2147483653");
  EXPECT_EQ(errorOf(big), "checkpoint file '" + file +
                              "' lacks step, batches_done, stages or "
                              "world_size (integers from 0 to 2147483647)");
}

TEST_F(CheckpointTest, RequiredFilesFollowFromTheManifestAndRanks) {
  std::string one = checkpoint(1);
  std::string two = checkpoint(2);
  // rng.rank0.pt gone from the directory and from checkpoint.json.
  CheckpointInfo info = *readCheckpointInfo(two);
  info.files.erase("rng.rank0.pt");
  llvm::sys::fs::remove(at(checkpointDirName(2), "rng.rank0.pt"));
  write(at(checkpointDirName(2), kCheckpointFile), checkpointJSON(info));
  EXPECT_EQ(newest(), "error: the checkpoint '" + two + "' is corrupt: '" +
                          at(checkpointDirName(2), "rng.rank0.pt") +
                          "' is missing; the newest complete one is '" + one +
                          "': remove the corrupt one to resume from it");
  // optim.stage0.pt present but not listed.
  info.files.erase("optim.stage0.pt");
  write(at(checkpointDirName(2), kCheckpointFile), checkpointJSON(info));
  auto err = findNewestCheckpoint(two, "--resume");
  ASSERT_FALSE(bool(err));
  EXPECT_EQ(llvm::toString(err.takeError()),
            "the checkpoint '" + two + "' is corrupt: '" +
                at(checkpointDirName(2), "optim.stage0.pt") +
                "' is not listed in checkpoint.json");
}

TEST_F(CheckpointTest, PruningNeverFollowsALink) {
  for (int s = 1; s <= 3; ++s)
    checkpoint(s);
  // A step directory that is a link to a directory outside.
  llvm::SmallString<128> outside;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-outside", outside));
  std::string kept = std::string(outside) + "/keep.txt";
  write(kept, "mine");
  write(std::string(outside) + "/" + kCheckpointFile, "{}");
  ASSERT_FALSE(llvm::sys::fs::create_link(outside, at(checkpointDirName(0))));
  EXPECT_EQ(pruneCheckpoints(dir, 1, 3),
            (std::vector<std::string>{at(checkpointDirName(2)),
                                      at(checkpointDirName(1))}));
  removeCheckpointParts(dir);
  EXPECT_TRUE(llvm::sys::fs::exists(kept));
  EXPECT_EQ(llvm::toString(checkCheckpointDirectory(dir, "--checkpoint-dir")),
            "--checkpoint-dir '" + dir +
                "' holds 'step-00000000', which is not a ppc checkpoint; "
                "refusing to write checkpoints there");
  llvm::sys::fs::remove_directories(outside);
}

TEST_F(CheckpointTest, OutputsStayOutsideTheCheckpoints) {
  std::string two = checkpoint(2);
  auto check = [&](llvm::StringRef source, CommandOutput out) {
    return llvm::toString(
        checkOutputsOutsideCheckpoints(source, "--resume", {std::move(out)}));
  };
  std::string optim = at(checkpointDirName(2), "optim.stage0.pt");
  EXPECT_EQ(check(dir, {"--trace", optim}),
            "--trace '" + optim + "' is inside --resume '" + dir +
                "'; refusing to write into a checkpoint");
  std::string fresh = at(checkpointDirName(2), "new.json");
  EXPECT_EQ(check(two, {"--stats-json", fresh}),
            "--stats-json '" + fresh + "' is inside --resume '" + two +
                "'; refusing to write into a checkpoint");
  std::string parent(llvm::sys::path::parent_path(dir));
  EXPECT_EQ(check(dir, {"--save", parent, true}),
            "--save '" + parent + "' holds --resume '" + dir +
                "'; refusing to write into a checkpoint");
  // A hard link elsewhere to a file of the checkpoint.
  llvm::SmallString<128> link;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-link", link));
  std::string linked = std::string(link) + "/log.json";
  ASSERT_FALSE(llvm::sys::fs::create_hard_link(optim, linked));
  EXPECT_EQ(check(dir, {"--log-file", linked}),
            "--log-file '" + linked + "' is a link to '" + optim +
                "' of --resume '" + dir +
                "'; refusing to write into a checkpoint");
  // Its manifest names the checkpoint it is in; any other output is fine.
  EXPECT_NE(
      check(at(checkpointDirName(2), "manifest.json"), {"--trace", optim}), "");
  EXPECT_EQ(check(dir, {"--trace", std::string(link) + "/t.json"}), "");
  llvm::sys::fs::remove_directories(link);
}

TEST_F(CheckpointTest, RemovesUnfinishedParts) {
  checkpoint(1);
  checkpoint(2, /*withInfo=*/false);
  checkpoint(3, /*withInfo=*/false);
  write(at(checkpointDirName(3), "notes.txt"), "mine");
  removeCheckpointParts(dir);
  EXPECT_TRUE(llvm::sys::fs::is_directory(at(checkpointDirName(1))));
  EXPECT_FALSE(llvm::sys::fs::exists(at(checkpointDirName(2))));
  EXPECT_TRUE(llvm::sys::fs::exists(at(checkpointDirName(3), "notes.txt")));
}

namespace {
/// Two steps of `opt` over `params` with gradients from `seed`.
void twoSteps(torch::optim::Optimizer &opt, std::vector<at::Tensor> &params,
              int seed) {
  for (int k = 0; k < 2; ++k) {
    at::manual_seed(seed + k);
    for (at::Tensor &p : params)
      p.mutable_grad() = at::randn_like(p);
    opt.step();
  }
}

std::vector<std::pair<std::string, at::Tensor>>
named(const std::vector<at::Tensor> &params) {
  return {{"fc.weight", params[0]}, {"fc.bias", params[1]}};
}

void expectRoundTrip(OptimizerKind kind) {
  auto make = [&](std::vector<at::Tensor> &params)
      -> std::unique_ptr<torch::optim::Optimizer> {
    if (kind == OptimizerKind::SGD)
      return std::make_unique<torch::optim::SGD>(
          params, torch::optim::SGDOptions(0.1).momentum(0.9));
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(0.1).amsgrad(true));
  };
  at::manual_seed(0);
  std::vector<at::Tensor> a = {at::randn({3, 4}).requires_grad_(),
                               at::randn({3}).requires_grad_()};
  auto optA = make(a);
  twoSteps(*optA, a, 10);
  auto state = optimizerStateOf(*optA, kind, named(a));
  ASSERT_TRUE(bool(state)) << llvm::toString(state.takeError());
  EXPECT_EQ(state->size(), kind == OptimizerKind::SGD ? 2u : 8u);
  // Through a file, into a fresh optimizer over copies of the parameters.
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("ppc-optim", "pt", path));
  ASSERT_FALSE(bool(saveTensorDict(path, *state)));
  auto loaded = loadTensorDict(path);
  llvm::sys::fs::remove(path);
  ASSERT_TRUE(bool(loaded)) << llvm::toString(loaded.takeError());
  std::vector<at::Tensor> b = {a[0].detach().clone().requires_grad_(),
                               a[1].detach().clone().requires_grad_()};
  auto optB = make(b);
  ASSERT_FALSE(
      bool(setOptimizerState(*optB, kind, named(b), *loaded, true, "f")));
  twoSteps(*optA, a, 20);
  twoSteps(*optB, b, 20);
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(at::equal(a[i], b[i])) << optimizerName(kind).str() << i;

  // Keys of no parameter, of another optimizer, of another shape.
  c10::Dict<std::string, at::Tensor> bad;
  bad.insert("fc.other#exp_avg", at::zeros({3}));
  EXPECT_EQ(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f")),
      "f holds the state of 'fc.other', which is no parameter of the "
      "stage");
  bad.clear();
  bad.insert("fc.bias#velocity", at::zeros({3}));
  EXPECT_EQ(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f")),
      "f holds 'fc.bias#velocity', which is not state of " +
          optimizerName(kind).str());
  bad.clear();
  bad.insert(kind == OptimizerKind::SGD ? "fc.bias#momentum_buffer"
                                        : "fc.bias#exp_avg",
             at::zeros({4}));
  EXPECT_NE(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f"))
          .find("does not have the shape of its parameter"),
      std::string::npos);
  // Another dtype is refused, not converted; so are no state and a
  // parameter without one of its fields.
  std::string field =
      kind == OptimizerKind::SGD ? "momentum_buffer" : "exp_avg_sq";
  bad.clear();
  bad.insert("fc.bias#" + field, at::zeros({3}, at::kDouble));
  EXPECT_EQ(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f")),
      "f: 'fc.bias#" + field + "' has dtype Double, its parameter Float");
  bad.clear();
  EXPECT_EQ(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f")),
      "f holds no optimizer state");
  if (kind == OptimizerKind::SGD)
    return;
  bad.insert("fc.bias#step", at::scalar_tensor(2, at::kLong));
  bad.insert("fc.bias#exp_avg", at::zeros({3}));
  EXPECT_EQ(
      llvm::toString(setOptimizerState(*optB, kind, named(b), bad, true, "f")),
      "f holds no 'fc.bias#exp_avg_sq'");
}
} // namespace

TEST_F(CheckpointTest, OptimizerStateRoundTripSGD) {
  expectRoundTrip(OptimizerKind::SGD);
}

TEST_F(CheckpointTest, OptimizerStateRoundTripAdam) {
  expectRoundTrip(OptimizerKind::Adam);
}

TEST_F(CheckpointTest, GeneratorRoundTrip) {
  at::manual_seed(3);
  c10::Dict<std::string, at::Tensor> state = rngStateOf(c10::Device(c10::kCPU));
  at::Tensor first = at::rand({5});
  at::rand({7});
  ASSERT_FALSE(bool(setRngState(state)));
  EXPECT_TRUE(at::equal(at::rand({5}), first));
}
