//===- fuzz/fuzz_checkpoint.cpp - Fuzz the checkpoint readers -------------===//
//
// Feeds bytes to what a resume and `ppc join` read from a checkpoint
// (runtime/train/Checkpoint.h). The first byte picks the reader, the rest
// is the file:
//   even: checkpoint.json (readCheckpointInfo, then verifyCheckpoint over a
//         directory holding nothing else). What it accepts must be in range
//         and survive the round trip through checkpointJSON;
//   odd:  an optimizer or generator state file (loadTensorDict), then
//         setOptimizerState for a small stage under Adam and SGD and, for a
//         dict with "cpu", setRngState. Accepted optimizer state must fit
//         its parameters as it is, so that a step runs on it.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "runtime/train/Checkpoint.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <ATen/ATen.h>
#include <c10/util/Logging.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <limits>

using namespace ppc;

namespace {
/// The directory checkpoint.json is written into, one per process and
/// removed at exit.
struct CheckpointDir {
  CheckpointDir() {
    llvm::SmallString<128> d;
    if (llvm::sys::fs::createUniqueDirectory("ppc-fuzz-checkpoint", d))
      fuzz::fail("cannot create a directory for checkpoint.json");
    path = std::string(d);
  }
  ~CheckpointDir() { llvm::sys::fs::remove_directories(path); }
  std::string path;
};

/// checkpoint.json with `bytes`, read back.
llvm::Expected<CheckpointInfo> readInfo(const std::string &dir,
                                        llvm::StringRef bytes) {
  llvm::SmallString<128> path(dir);
  llvm::sys::path::append(path, kCheckpointFile);
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      fuzz::fail("cannot write '" + path + "'");
    os << bytes;
  }
  return readCheckpointInfo(dir);
}

void fuzzInfo(llvm::StringRef bytes) {
  static CheckpointDir dir;
  auto info = readInfo(dir.path, bytes);
  if (!info) {
    llvm::consumeError(info.takeError());
    return;
  }
  if (info->step < 0 || info->dataIndex < 0 ||
      info->dataIndex > std::numeric_limits<int>::max() || info->stages < 1 ||
      info->worldSize < 1 || info->files.empty())
    fuzz::fail("readCheckpointInfo accepted counts out of range");
  for (const auto &entry : info->files)
    if (llvm::sys::path::is_absolute(entry.first) ||
        llvm::StringRef(entry.first).contains(".."))
      fuzz::fail("readCheckpointInfo accepted a file outside the checkpoint");
  llvm::consumeError(verifyCheckpoint(dir.path, *info));
  std::string text = checkpointJSON(*info);
  auto again = readInfo(dir.path, text);
  if (!again)
    fuzz::fail("checkpointJSON wrote what readCheckpointInfo refuses: " +
               llvm::toString(again.takeError()));
  if (checkpointJSON(*again) != text)
    fuzz::fail("checkpoint.json changed in a round trip");
}

/// A stage of two parameters, as the trainer keeps them.
std::vector<std::pair<std::string, at::Tensor>> stageParams() {
  return {{"fc.weight", at::zeros({3, 4}).requires_grad_()},
          {"fc.bias", at::zeros({3}).requires_grad_()}};
}

/// setOptimizerState under `kind`; when it accepts, one step runs on it.
template <typename Optimizer, typename Options>
void fuzzOptimizer(OptimizerKind kind, Options options,
                   const c10::Dict<std::string, at::Tensor> &state) {
  auto params = stageParams();
  std::vector<at::Tensor> tensors = {params[0].second, params[1].second};
  Optimizer optimizer(tensors, options);
  if (llvm::Error err =
          setOptimizerState(optimizer, kind, params, state, true, "state"))
    return llvm::consumeError(std::move(err));
  for (at::Tensor &t : tensors)
    t.mutable_grad() = at::ones_like(t);
  optimizer.step();
}

void fuzzState(const uint8_t *data, size_t size) {
  static fuzz::InputFile input("state.pt");
  auto state = loadTensorDict(input.write(data, size));
  if (!state) {
    llvm::consumeError(state.takeError());
    return;
  }
  fuzzOptimizer<torch::optim::Adam>(OptimizerKind::Adam,
                                    torch::optim::AdamOptions(0.1), *state);
  fuzzOptimizer<torch::optim::SGD>(
      OptimizerKind::SGD, torch::optim::SGDOptions(0.1).momentum(0.9), *state);
  if (state->contains("cpu"))
    llvm::consumeError(setRngState(*state));
}
} // namespace

// Every c10::Error captures and symbolizes a C++ backtrace, which costs more
// than the rest of an execution; the readers keep only the message.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  c10::SetStackTraceFetcher([] { return std::string(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  if (data[0] % 2 == 0)
    fuzzInfo(
        llvm::StringRef(reinterpret_cast<const char *>(data) + 1, size - 1));
  else
    fuzzState(data + 1, size - 1);
  return 0;
}
