//===- runtime/train/Checkpoint.cpp - Training checkpoints on disk --------===//
//
// This file implements the checkpoint layout of Checkpoint.h: names,
// checkpoint.json, verification, choosing the newest complete checkpoint,
// pruning, and the optimizer and generator state files.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/SafeRead.h"
#include "lib/TensorIO.h"
#include "runtime/platform/TorchCompat.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <set>

namespace ppc {

namespace {
constexpr const char *kFormat = "ppc-checkpoint";
constexpr int kVersion = 1;
/// The most bytes checkpoint.json may have.
constexpr uint64_t kMaxInfoBytes = 16 << 20;

std::string join(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

/// The entries of `dir` (names), sorted; empty when it cannot be listed.
std::vector<std::string> entriesOf(llvm::StringRef dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec, /*follow=*/false), end;
       !ec && it != end; it.increment(ec))
    out.push_back(llvm::sys::path::filename(it->path()).str());
  llvm::sort(out);
  return out;
}

/// Whether `name` is "PREFIX<digits>SUFFIX".
bool isNumbered(llvm::StringRef name, llvm::StringRef prefix,
                llvm::StringRef suffix) {
  if (!name.consume_front(prefix) || !name.consume_back(suffix) || name.empty())
    return false;
  return llvm::all_of(name, llvm::isDigit);
}

/// Whether `name` is a staged part of a step directory
/// ("step-00000004.tmp-...", StagedDirectory's name).
bool isStagedStepName(llvm::StringRef name) {
  auto [head, rest] = name.split(".tmp-");
  return !rest.empty() && parseCheckpointDirName(head).has_value();
}

/// Whether `path` is a directory itself, not a symbolic link to one:
/// removing through a link would empty a directory outside the checkpoints.
bool isRealDirectory(llvm::StringRef path) {
  llvm::sys::fs::file_status status;
  return !llvm::sys::fs::status(path, status, /*follow=*/false) &&
         status.type() == llvm::sys::fs::file_type::directory_file;
}

/// The complete-looking step directories of `dir` (their checkpoint.json
/// loads), newest first.
std::vector<std::pair<int, std::string>> stepDirectories(llvm::StringRef dir) {
  std::vector<std::pair<int, std::string>> out;
  for (const std::string &name : entriesOf(dir))
    if (std::optional<int> step = parseCheckpointDirName(name))
      if (isRealDirectory(join(dir, name)))
        out.emplace_back(*step, join(dir, name));
  llvm::sort(out,
             [](const auto &a, const auto &b) { return a.first > b.first; });
  return out;
}

bool hasInfo(llvm::StringRef stepDir) {
  return llvm::sys::fs::is_regular_file(join(stepDir, kCheckpointFile));
}
} // namespace

std::string checkpointDirName(int step) {
  return llvm::formatv("step-{0:d8}", step).str();
}

std::optional<int> parseCheckpointDirName(llvm::StringRef name) {
  if (!name.consume_front("step-") || name.size() != 8 ||
      !llvm::all_of(name, llvm::isDigit))
    return std::nullopt;
  int step = 0;
  if (name.getAsInteger(10, step))
    return std::nullopt;
  return step;
}

std::string optimizerFileName(int stage) {
  return "optim.stage" + std::to_string(stage) + ".pt";
}

std::string rngFileName(int rank) {
  return "rng.rank" + std::to_string(rank) + ".pt";
}

std::string checkpointJSON(const CheckpointInfo &info) {
  llvm::json::Object files;
  for (const auto &[name, hash] : info.files)
    files[name] = hash;
  llvm::json::Object doc{
      {"format", kFormat},
      {"version", kVersion},
      {"step", info.step},
      {"batches_done", info.dataIndex},
      {"stages", info.stages},
      {"world_size", info.worldSize},
      {"optimizer", llvm::json::Object{{"kind", optimizerName(info.optimizer)},
                                       {"lr", info.lr},
                                       {"momentum", info.momentum},
                                       {"weight_decay", info.weightDecay}}},
      {"files", std::move(files)}};
  return llvm::formatv("{0:2}", llvm::json::Value(std::move(doc))).str() + "\n";
}

namespace {
/// checkpoint.json's "optimizer" into `info`; "" or what is wrong.
std::string readOptimizerFields(const llvm::json::Object &doc,
                                CheckpointInfo &info) {
  const llvm::json::Object *opt = doc.getObject("optimizer");
  auto kind = opt ? opt->getString("kind") : llvm::None;
  std::optional<OptimizerKind> parsedKind =
      kind ? parseOptimizerName(*kind) : std::nullopt;
  auto finite = [&](llvm::StringRef key) {
    auto v = opt->getNumber(key);
    return v && std::isfinite(*v);
  };
  if (!parsedKind || !finite("lr") || !finite("momentum") ||
      !finite("weight_decay"))
    return "lacks the optimizer's kind, lr, momentum or weight_decay";
  info.optimizer = *parsedKind;
  info.lr = *opt->getNumber("lr");
  info.momentum = *opt->getNumber("momentum");
  info.weightDecay = *opt->getNumber("weight_decay");
  return "";
}

/// checkpoint.json's "files" into `info`; "" or what is wrong.
std::string readFileList(const llvm::json::Object &doc, CheckpointInfo &info) {
  const llvm::json::Object *files = doc.getObject("files");
  if (!files || files->empty())
    return "lists no files";
  for (const auto &[name, hash] : *files) {
    auto h = hash.getAsString();
    llvm::StringRef n(name);
    // Files of the checkpoint: relative paths that stay inside it.
    if (!h || h->size() != 64 || n.empty() || llvm::sys::path::is_absolute(n) ||
        n.contains(".."))
      return "lists a malformed file entry '" + printable(n) + "'";
    info.files[n.str()] = h->str();
  }
  if (!info.files.count("manifest.json"))
    return "does not list manifest.json";
  return "";
}
} // namespace

llvm::Expected<CheckpointInfo> readCheckpointInfo(llvm::StringRef dir) {
  std::string path = join(dir, kCheckpointFile);
  auto buffer = readFileBounded(path, kMaxInfoBytes, "checkpoint file");
  if (!buffer)
    return buffer.takeError();
  auto bad = [&](llvm::StringRef why) {
    return makeError("checkpoint file '" + path + "' " + why);
  };
  auto parsed = parseJSONBounded((*buffer)->getBuffer(), kMaxJSONDepth,
                                 "checkpoint file '" + path + "'");
  if (!parsed)
    return parsed.takeError();
  const llvm::json::Object *doc = parsed->getAsObject();
  auto format = doc ? doc->getString("format") : llvm::None;
  if (!format || *format != kFormat)
    return bad("is not a ppc checkpoint");
  auto version = doc->getInteger("version");
  if (!version || *version != kVersion)
    return bad("has an unknown version (this ppc reads version 1)");
  CheckpointInfo info;
  auto integer = [&](llvm::StringRef key, auto &out) -> bool {
    auto v = doc->getInteger(key);
    if (!v || *v < 0 || *v > std::numeric_limits<int>::max())
      return false;
    out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
    return true;
  };
  if (!integer("step", info.step) || !integer("batches_done", info.dataIndex) ||
      !integer("stages", info.stages) ||
      !integer("world_size", info.worldSize) || info.stages < 1 ||
      info.worldSize < 1)
    return bad("lacks step, batches_done, stages or world_size (integers "
               "from 0 to 2147483647)");
  std::string problem = readOptimizerFields(*doc, info);
  if (problem.empty())
    problem = readFileList(*doc, info);
  if (!problem.empty())
    return bad(problem);
  return info;
}

namespace {
/// The files checkpoint `dir` must hold, from its manifest (verified
/// already), its optimizer and its ranks: the manifest, each stage file,
/// the optimizer state of each stage with parameters (a rank with
/// parameters has an optimizer and writes one per stage) and each rank's
/// generators. Stops at the first one `info` does not list, so that a
/// hostile world_size costs nothing.
llvm::Expected<std::vector<std::string>>
requiredFiles(llvm::StringRef dir, const CheckpointInfo &info) {
  auto manifest = Manifest::load(join(dir, "manifest.json"));
  if (!manifest)
    return manifest.takeError();
  if (static_cast<int>(manifest->stages.size()) != info.stages)
    return makeError(llvm::formatv("its checkpoint.json says {0} stages, its "
                                   "manifest {1}",
                                   info.stages, manifest->stages.size())
                         .str());
  std::vector<std::string> out = {"manifest.json"};
  for (const StageInfo &stage : manifest->stages) {
    out.push_back(stage.file);
    if (stage.parameterCount > 0)
      out.push_back(optimizerFileName(stage.index));
  }
  for (int rank = 0; rank < info.worldSize; ++rank) {
    out.push_back(rngFileName(rank));
    if (!info.files.count(out.back()))
      break;
  }
  return out;
}
} // namespace

llvm::Error verifyCheckpoint(llvm::StringRef dir, const CheckpointInfo &info) {
  std::string prefix = "the checkpoint '" + dir.str() + "' is corrupt: ";
  if (std::optional<int> step =
          parseCheckpointDirName(llvm::sys::path::filename(dir)))
    if (*step != info.step)
      return makeError(prefix + "its checkpoint.json says step " +
                       std::to_string(info.step));
  for (const auto &[name, hash] : info.files) {
    std::string path = join(dir, name);
    if (!llvm::sys::fs::is_regular_file(path))
      return makeError(prefix + "'" + path + "' is missing");
    auto got = sha256File(path);
    if (!got)
      return makeError(prefix + llvm::toString(got.takeError()));
    if (*got != hash)
      return makeError(prefix + "'" + path +
                       "' does not match its sha256 in checkpoint.json");
  }
  // checkpoint.json's list says what was hashed, not what must be there.
  auto required = requiredFiles(dir, info);
  if (!required)
    return makeError(prefix + llvm::toString(required.takeError()));
  for (const std::string &name : *required)
    if (!info.files.count(name)) {
      std::string path = join(dir, name);
      return makeError(prefix + "'" + path + "' " +
                       (llvm::sys::fs::exists(path)
                            ? "is not listed in checkpoint.json"
                            : "is missing"));
    }
  return llvm::Error::success();
}

namespace {
/// Checkpoint `path`'s checkpoint.json, read and verified.
llvm::Expected<CheckpointInfo> verifiedInfo(llvm::StringRef path) {
  auto info = readCheckpointInfo(path);
  if (!info)
    return info.takeError();
  if (llvm::Error err = verifyCheckpoint(path, *info))
    return err;
  return info;
}
} // namespace

std::string olderCheckpointNote(llvm::StringRef dir, llvm::StringRef refused) {
  if (hasInfo(dir))
    return "";
  std::optional<int> below =
      parseCheckpointDirName(llvm::sys::path::filename(refused));
  for (const auto &[step, path] : stepDirectories(dir)) {
    if (!hasInfo(path) || (below && step >= *below))
      continue;
    if (auto info = verifiedInfo(path))
      return "; the newest complete one is '" + path +
             "': remove the corrupt one to resume from it";
    else
      llvm::consumeError(info.takeError());
  }
  return "; no older checkpoint is complete";
}

llvm::Expected<ChosenCheckpoint> findNewestCheckpoint(llvm::StringRef dir,
                                                      llvm::StringRef option) {
  std::string named = option.str() + " '" + dir.str() + "'";
  if (!llvm::sys::fs::is_directory(dir))
    return makeError(named + " is not a directory");
  // A step directory itself.
  if (hasInfo(dir)) {
    auto info = verifiedInfo(dir);
    if (!info)
      return info.takeError();
    return ChosenCheckpoint{dir.str(), std::move(*info)};
  }
  for (const auto &[step, path] : stepDirectories(dir)) {
    if (!hasInfo(path))
      continue; // a part, never a checkpoint
    auto info = verifiedInfo(path);
    if (!info)
      return makeError(llvm::toString(info.takeError()) +
                       olderCheckpointNote(dir, path));
    return ChosenCheckpoint{path, std::move(*info)};
  }
  return makeError(named + " holds no complete checkpoint");
}

llvm::Error checkCheckpointContents(llvm::StringRef dir) {
  std::set<std::string> allowed = {"manifest.json", kCheckpointFile};
  std::set<std::string> dirs;
  if (auto manifest = Manifest::load(join(dir, "manifest.json"))) {
    for (const StageInfo &stage : manifest->stages) {
      allowed.insert(stage.file);
      for (llvm::StringRef parent = llvm::sys::path::parent_path(stage.file);
           !parent.empty(); parent = llvm::sys::path::parent_path(parent))
        dirs.insert(parent.str());
    }
  } else {
    llvm::consumeError(manifest.takeError());
  }
  // Every file below `dir`, relative to it.
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(dir, ec, false), end;
       !ec && it != end; it.increment(ec)) {
    llvm::StringRef rel = llvm::StringRef(it->path()).drop_front(dir.size());
    rel = rel.ltrim('/');
    llvm::StringRef name = llvm::sys::path::filename(rel);
    bool ok =
        it->type() == llvm::sys::fs::file_type::directory_file
            ? dirs.count(rel.str()) > 0
            : allowed.count(rel.str()) > 0 ||
                  (rel == name && (isNumbered(name, "optim.stage", ".pt") ||
                                   isNumbered(name, "rng.rank", ".pt") ||
                                   isNumbered(name, "stage_", ".pt")));
    if (!ok)
      return makeError("'" + join(dir, rel) +
                       "' is not a file of a ppc checkpoint");
  }
  if (ec)
    return makeError("cannot read '" + dir + "': " + ec.message());
  return llvm::Error::success();
}

llvm::Error checkCheckpointDirectory(llvm::StringRef dir,
                                     llvm::StringRef option) {
  if (!llvm::sys::fs::exists(dir))
    return llvm::Error::success();
  std::string named = option.str() + " '" + dir.str() + "'";
  if (!llvm::sys::fs::is_directory(dir))
    return makeError(named + " exists and is not a directory");
  for (const std::string &name : entriesOf(dir)) {
    std::string path = join(dir, name);
    bool isDir = isRealDirectory(path);
    if (isDir && isStagedStepName(name))
      continue;
    if (isDir && parseCheckpointDirName(name)) {
      if (llvm::Error err = checkCheckpointContents(path))
        return makeError(named + ": " + llvm::toString(std::move(err)) +
                         "; refusing to write checkpoints there");
      continue;
    }
    return makeError(named + " holds '" + printable(name) +
                     "', which is not a ppc checkpoint; refusing to write "
                     "checkpoints there");
  }
  return llvm::Error::success();
}

void removeCheckpointParts(llvm::StringRef dir) {
  std::set<std::string> destinations;
  for (const std::string &name : entriesOf(dir)) {
    std::string path = join(dir, name);
    if (!isRealDirectory(path))
      continue;
    if (isStagedStepName(name))
      destinations.insert(
          join(dir, llvm::StringRef(name).split(".tmp-").first));
    else if (parseCheckpointDirName(name) && !hasInfo(path)) {
      if (llvm::Error err = checkCheckpointContents(path))
        llvm::consumeError(std::move(err)); // not ours: left alone
      else
        llvm::sys::fs::remove_directories(path);
    }
  }
  // StagedDirectory::create removes the staged directories beside its
  // destination whose process died (of this host); the one it makes is
  // discarded at once.
  for (const std::string &dest : destinations) {
    auto staged = StagedDirectory::create(dest);
    if (staged)
      staged->discard();
    else
      llvm::consumeError(staged.takeError());
  }
}

std::vector<std::string> pruneCheckpoints(llvm::StringRef dir, int keep,
                                          int newest) {
  std::vector<std::string> removed;
  int kept = 1; // the new one
  for (const auto &[step, path] : stepDirectories(dir)) {
    if (step == newest || !hasInfo(path))
      continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    if (llvm::Error err = checkCheckpointContents(path)) {
      llvm::consumeError(std::move(err)); // not only ours: left alone
      continue;
    }
    // checkpoint.json first: a removal cut short leaves a part.
    if (llvm::sys::fs::remove(join(path, kCheckpointFile)))
      continue;
    llvm::sys::fs::remove_directories(path);
    removed.push_back(path);
  }
  return removed;
}

namespace {
/// Where `path` is on disk: its real path, or for a path not there yet the
/// real location of its directory joined with its name.
std::string realLocation(llvm::StringRef path) {
  llvm::SmallString<256> abs(path), real;
  llvm::sys::fs::make_absolute(abs);
  llvm::sys::path::remove_dots(abs, /*remove_dot_dot=*/false);
  if (!llvm::sys::fs::real_path(abs, real))
    return std::string(real);
  llvm::StringRef parent = llvm::sys::path::parent_path(abs);
  if (parent.empty() || parent == abs)
    return std::string(abs);
  llvm::SmallString<256> out(realLocation(parent));
  llvm::sys::path::append(out, llvm::sys::path::filename(abs));
  return std::string(out);
}

/// Whether `path` is `dir` or lies below it (both real locations).
bool isWithin(llvm::StringRef path, llvm::StringRef dir) {
  return path == dir || (path.startswith(dir) && dir.endswith("/")) ||
         (path.startswith(dir) && path.drop_front(dir.size()).startswith("/"));
}

/// The checkpoint files below `root` that the existing file `path` is (a
/// hard link); "" when none.
std::string sameFileBelow(llvm::StringRef root, llvm::StringRef path) {
  llvm::sys::fs::file_status out;
  if (llvm::sys::fs::status(path, out) ||
      out.type() != llvm::sys::fs::file_type::regular_file)
    return "";
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(root, ec, false), end;
       !ec && it != end; it.increment(ec)) {
    llvm::sys::fs::file_status st;
    if (!llvm::sys::fs::status(it->path(), st, /*follow=*/false) &&
        st.getUniqueID() == out.getUniqueID())
      return it->path();
  }
  return "";
}
} // namespace

llvm::Error
checkOutputsOutsideCheckpoints(llvm::StringRef source, llvm::StringRef what,
                               llvm::ArrayRef<CommandOutput> outputs) {
  // What `source` names: one checkpoint or a directory of them, or a file
  // of one checkpoint; nothing else (a --save directory) is kept here.
  if (source.empty())
    return llvm::Error::success();
  std::string shown = source.str();
  if (!llvm::sys::fs::is_directory(source)) {
    llvm::StringRef parent = llvm::sys::path::parent_path(source);
    shown = parent.empty() ? "." : parent.str();
    if (!hasInfo(shown))
      return llvm::Error::success();
  } else if (!hasInfo(shown) && stepDirectories(shown).empty()) {
    return llvm::Error::success();
  }
  std::string root = realLocation(shown);
  std::string named = what.str() + " '" + shown + "'";
  for (const CommandOutput &out : outputs) {
    if (out.path.empty())
      continue;
    std::string mine = realLocation(out.path);
    std::string prefix = out.option + " '" + out.path + "' ";
    if (isWithin(mine, root))
      return makeError(prefix + "is inside " + named +
                       "; refusing to write into a checkpoint");
    if (out.isDirectory && isWithin(root, mine))
      return makeError(prefix + "holds " + named +
                       "; refusing to write into a checkpoint");
    std::string linked = out.isDirectory ? "" : sameFileBelow(root, out.path);
    if (!linked.empty())
      return makeError(prefix + "is a link to '" + linked + "' of " + named +
                       "; refusing to write into a checkpoint");
  }
  return llvm::Error::success();
}

llvm::Expected<std::string> manifestForJoin(llvm::StringRef path) {
  if (!llvm::sys::fs::is_directory(path))
    return path.str();
  if (!hasInfo(path) && llvm::sys::fs::exists(join(path, "manifest.json")))
    return join(path, "manifest.json");
  auto chosen = findNewestCheckpoint(path, "the checkpoint directory");
  if (!chosen)
    return chosen.takeError();
  return join(chosen->path, "manifest.json");
}

namespace {
/// The state fields of each optimizer kind, in order.
const std::vector<std::string> &fieldsOf(OptimizerKind kind) {
  static const std::vector<std::string> sgd = {"momentum_buffer"};
  static const std::vector<std::string> adam = {"step", "exp_avg", "exp_avg_sq",
                                                "max_exp_avg_sq"};
  return kind == OptimizerKind::SGD ? sgd : adam;
}

/// Puts the state of an Adam-family parameter (Adam and AdamW keep the
/// same fields in classes of their own) through `put`.
template <typename State, typename Put>
void putAdamState(const State &s, const std::string &path, Put &put) {
  put(path, "step", at::scalar_tensor(s.step(), at::kLong));
  put(path, "exp_avg", s.exp_avg());
  put(path, "exp_avg_sq", s.exp_avg_sq());
  put(path, "max_exp_avg_sq", s.max_exp_avg_sq());
}

/// The state of an Adam-family parameter from its checkpointed `fields`.
template <typename State, typename OnDevice>
std::unique_ptr<State>
adamState(const std::map<std::string, at::Tensor> &fields, OnDevice &onDevice) {
  auto s = std::make_unique<State>();
  auto step = fields.find("step");
  s->step(step == fields.end() ? 0 : step->second.item<int64_t>());
  s->exp_avg(onDevice("exp_avg"));
  s->exp_avg_sq(onDevice("exp_avg_sq"));
  s->max_exp_avg_sq(onDevice("max_exp_avg_sq"));
  return s;
}
} // namespace

llvm::Expected<c10::Dict<std::string, at::Tensor>> optimizerStateOf(
    const torch::optim::Optimizer &optimizer, OptimizerKind kind,
    const std::vector<std::pair<std::string, at::Tensor>> &params) {
  return torchCall("cannot read the optimizer state", [&] {
    c10::Dict<std::string, at::Tensor> out;
    const auto &state = optimizer.state();
    auto put = [&](const std::string &path, const char *field,
                   const at::Tensor &t) {
      if (t.defined())
        out.insert(path + "#" + field, t.detach().cpu().clone());
    };
    for (const auto &[path, param] : params) {
      auto it = state.find(compat::optimizerStateKey(param));
      if (it == state.end())
        continue;
      if (kind == OptimizerKind::SGD) {
        const auto &s =
            static_cast<const torch::optim::SGDParamState &>(*it->second);
        put(path, "momentum_buffer", s.momentum_buffer());
      } else if (kind == OptimizerKind::AdamW) {
        putAdamState(
            static_cast<const torch::optim::AdamWParamState &>(*it->second),
            path, put);
      } else {
        putAdamState(
            static_cast<const torch::optim::AdamParamState &>(*it->second),
            path, put);
      }
    }
    return out;
  });
}

namespace {
/// The fields a parameter with state must have: ppc never sets amsgrad, so
/// Adam's max_exp_avg_sq may be absent.
std::vector<std::string> requiredFieldsOf(OptimizerKind kind) {
  if (kind == OptimizerKind::SGD)
    return {"momentum_buffer"};
  return {"step", "exp_avg", "exp_avg_sq"};
}

/// Whether the storage of `t` (contiguous) holds all of its elements.
bool storageHolds(const at::Tensor &t) {
  uint64_t end = static_cast<uint64_t>(t.storage_offset()) +
                 static_cast<uint64_t>(t.numel());
  return t.storage_offset() >= 0 &&
         end <= t.storage().nbytes() / static_cast<uint64_t>(t.element_size());
}

/// Whether the tensor of state field `field` fits `param` as it is: the
/// step an int64 scalar from 0, any other field a dense, contiguous tensor
/// of the parameter's dtype and shape whose storage holds it.
llvm::Error checkStateTensor(const at::Tensor &t, llvm::StringRef field,
                             const at::Tensor &param, llvm::StringRef key,
                             llvm::StringRef what) {
  std::string named = what.str() + ": '" + printable(key) + "' ";
  if (!t.defined() || t.layout() != at::kStrided || !t.is_contiguous())
    return makeError(named + "is not a dense contiguous tensor");
  if (field == "step") {
    if (t.scalar_type() != at::kLong || t.dim() != 0 || !storageHolds(t) ||
        t.item<int64_t>() < 0)
      return makeError(named + "is not an int64 scalar of at least 0");
    return llvm::Error::success();
  }
  if (t.scalar_type() != param.scalar_type())
    return makeError(
        named + "has dtype " + std::string(c10::toString(t.scalar_type())) +
        ", its parameter " + std::string(c10::toString(param.scalar_type())));
  if (t.sizes() != param.sizes())
    return makeError(named + "does not have the shape of its parameter");
  if (!storageHolds(t))
    return makeError(named + "views more bytes than its storage holds");
  return llvm::Error::success();
}

/// Every entry of `state` checked and sorted by parameter path and field.
llvm::Expected<std::map<std::string, std::map<std::string, at::Tensor>>>
checkedState(OptimizerKind kind,
             const std::map<std::string, at::Tensor> &byPath,
             const c10::Dict<std::string, at::Tensor> &state, bool expectState,
             llvm::StringRef what) {
  std::map<std::string, std::map<std::string, at::Tensor>> fields;
  for (const auto &entry : state) {
    llvm::StringRef key(entry.key());
    auto [path, field] = key.rsplit('#');
    auto param = byPath.find(path.str());
    if (param == byPath.end())
      return makeError(what + " holds the state of '" + printable(path) +
                       "', which is no parameter of the stage");
    if (!llvm::is_contained(fieldsOf(kind), field.str()))
      return makeError(what + " holds '" + printable(key) +
                       "', which is not state of " + optimizerName(kind));
    if (llvm::Error err =
            checkStateTensor(entry.value(), field, param->second, key, what))
      return err;
    fields[path.str()][field.str()] = entry.value();
  }
  if (expectState && fields.empty() && !byPath.empty())
    return makeError(what + " holds no optimizer state");
  for (const auto &[path, f] : fields)
    for (const std::string &field : requiredFieldsOf(kind))
      if (!f.count(field))
        return makeError(what + " holds no '" + printable(path) + "#" + field +
                         "'");
  return fields;
}
} // namespace

llvm::Error
setOptimizerState(torch::optim::Optimizer &optimizer, OptimizerKind kind,
                  const std::vector<std::pair<std::string, at::Tensor>> &params,
                  const c10::Dict<std::string, at::Tensor> &state,
                  bool expectState, llvm::StringRef what) {
  std::map<std::string, at::Tensor> byPath(params.begin(), params.end());
  // Every key first: PATH#FIELD of a parameter of this stage, a field of
  // this optimizer, a tensor that fits as it is.
  auto checked = checkedState(kind, byPath, state, expectState, what);
  if (!checked)
    return checked.takeError();
  auto &fields = *checked;
  return torchCall("cannot set the optimizer state from " + what, [&] {
    auto &out = optimizer.state();
    for (auto &entry : fields) {
      // Named copies: lambdas cannot capture structured bindings in C++17.
      const std::map<std::string, at::Tensor> &f = entry.second;
      const at::Tensor &param = byPath.at(entry.first);
      auto onDevice = [&](const char *name) {
        auto it = f.find(name);
        // Only moved to the parameter's device: checkedState made sure
        // that dtype and layout are the parameter's already.
        return it == f.end() ? at::Tensor()
                             : it->second.to(param.device())
                                   .clone(at::MemoryFormat::Contiguous);
      };
      if (kind == OptimizerKind::SGD) {
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(onDevice("momentum_buffer"));
        out[compat::optimizerStateKey(param)] = std::move(s);
      } else if (kind == OptimizerKind::AdamW) {
        out[compat::optimizerStateKey(param)] =
            adamState<torch::optim::AdamWParamState>(f, onDevice);
      } else {
        out[compat::optimizerStateKey(param)] =
            adamState<torch::optim::AdamParamState>(f, onDevice);
      }
    }
  });
}

c10::Dict<std::string, at::Tensor> rngStateOf(const c10::Device &device) {
  c10::Dict<std::string, at::Tensor> out;
  auto put = [&](const std::string &name, at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    out.insert(name, gen.get_state());
  };
  put("cpu", at::detail::getDefaultCPUGenerator());
  if (!device.is_cpu())
    put(device.str(), at::globalContext().defaultGenerator(device));
  return out;
}

llvm::Error setRngState(const c10::Dict<std::string, at::Tensor> &state) {
  for (const auto &entry : state) {
    const std::string &name = entry.key();
    if (llvm::Error err =
            torchCall("cannot set the random generator '" + name + "'", [&] {
              c10::Device device(name);
              at::Generator gen =
                  device.is_cpu()
                      ? at::detail::getDefaultCPUGenerator()
                      : at::globalContext().defaultGenerator(device);
              std::lock_guard<std::mutex> lock(gen.mutex());
              gen.set_state(entry.value());
            }))
      return err;
  }
  return llvm::Error::success();
}

llvm::Error saveTensorDict(llvm::StringRef path,
                           const c10::Dict<std::string, at::Tensor> &state) {
  return saveValue(path, c10::IValue(state));
}

llvm::Expected<c10::Dict<std::string, at::Tensor>>
loadTensorDict(llvm::StringRef path) {
  return loadNamedTensors(path, "checkpoint file");
}

} // namespace ppc
