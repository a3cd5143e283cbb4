//===- lib/WeightBinding.cpp - Weights bound from a checkpoint ------------===//
#include "lib/WeightBinding.h"

#include "lib/Error.h"
#include "lib/MappedTensor.h"
#include "lib/SafeRead.h"
#include "lib/Safetensors.h"
#include "lib/StageExecutable.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <ATen/ATen.h>

#include <cstring>

namespace ppc {

namespace {

/// safetensors' dtype spellings and LibTorch's types.
struct DTypePair {
  llvm::StringLiteral name;
  c10::ScalarType type;
};
constexpr DTypePair kDTypes[] = {
    {"F64", c10::ScalarType::Double}, {"F32", c10::ScalarType::Float},
    {"F16", c10::ScalarType::Half},   {"BF16", c10::ScalarType::BFloat16},
    {"I64", c10::ScalarType::Long},   {"I32", c10::ScalarType::Int},
    {"I16", c10::ScalarType::Short},  {"I8", c10::ScalarType::Char},
    {"U8", c10::ScalarType::Byte},    {"BOOL", c10::ScalarType::Bool},
};

std::optional<c10::ScalarType> scalarType(llvm::StringRef name) {
  for (const DTypePair &d : kDTypes)
    if (d.name == name)
      return d.type;
  return std::nullopt;
}

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::vector<std::string> dims;
  for (int64_t d : shape)
    dims.push_back(std::to_string(d));
  return "[" + llvm::join(dims, ", ") + "]";
}

/// A name or path from a file or the command line, escaped for a message.
std::string shown(llvm::StringRef text) { return printable(text, 512); }

/// The dotted prefixes of `name` ("a.", "a.b." for "a.b.c").
std::vector<std::string> dottedPrefixes(llvm::StringRef name) {
  std::vector<std::string> out;
  for (size_t dot = name.find('.'); dot != llvm::StringRef::npos;
       dot = name.find('.', dot + 1))
    out.push_back(name.take_front(dot + 1).str());
  return out;
}

/// A config.json larger than this is not one transformers wrote.
constexpr uint64_t kMaxConfigBytes = 1 << 20;

/// The vocabulary size of the checkpoint's config.json (the file beside its
/// shards, as save_pretrained writes it) when it ties word embeddings
/// ("tie_word_embeddings": true and a "vocab_size"); nullopt when there is
/// no config.json or it does not. The file is untrusted: bounded read and
/// depth, and a config that is not a JSON object is one line.
llvm::Expected<std::optional<int64_t>>
tiedVocabulary(llvm::StringRef checkpoint) {
  llvm::SmallString<256> path(checkpoint);
  if (!llvm::sys::fs::is_directory(path))
    llvm::sys::path::remove_filename(path);
  llvm::sys::path::append(path, "config.json");
  if (!llvm::sys::fs::exists(path))
    return std::nullopt;
  auto buffer = readFileBounded(path, kMaxConfigBytes, "checkpoint config");
  if (!buffer)
    return buffer.takeError();
  auto json = parseJSONBounded((*buffer)->getBuffer(), kMaxJSONDepth,
                               "checkpoint config '" + shown(path) + "'");
  if (!json)
    return json.takeError();
  const llvm::json::Object *top = json->getAsObject();
  if (!top)
    return makeError("checkpoint config '" + shown(path) +
                     "' is not a JSON object");
  llvm::Optional<bool> ties = top->getBoolean("tie_word_embeddings");
  llvm::Optional<int64_t> vocabulary = top->getInteger("vocab_size");
  if (!ties || !*ties || !vocabulary || *vocabulary <= 0)
    return std::nullopt;
  return std::optional<int64_t>(*vocabulary);
}

} // namespace

llvm::Error parseTiedPair(llvm::StringRef text, WeightOptions &options) {
  auto [dst, src] = text.split('=');
  if (dst.empty() || src.empty() || !text.contains('=') || src.contains('='))
    return makeError("--weights-tied '" + shown(text) +
                     "': expected DST=SRC, two checkpoint tensor names");
  options.tied[dst.str()] = src.str();
  return llvm::Error::success();
}

WeightSource::~WeightSource() = default;

llvm::Expected<std::shared_ptr<WeightSource>>
WeightSource::open(const WeightOptions &options,
                   const std::vector<std::string> &programNames) {
  auto checkpoint = safetensors::Checkpoint::open(options.path);
  if (!checkpoint)
    return checkpoint.takeError();
  std::shared_ptr<WeightSource> out(new WeightSource());
  out->options_ = options;
  out->checkpoint_ =
      std::make_unique<safetensors::Checkpoint>(std::move(*checkpoint));
  std::vector<std::string> names = out->checkpoint_->names();
  std::set<std::string> held(names.begin(), names.end());

  if (options.prefix) {
    out->prefix_ = *options.prefix;
    if (!programNames.empty() &&
        llvm::none_of(programNames, [&](const std::string &n) {
          return llvm::StringRef(n).startswith(*options.prefix);
        }))
      return makeError(
          "--weights-prefix '" + shown(*options.prefix) +
          "' is the prefix of no weight of the program (such as '" +
          shown(programNames.front()) + "')");
  } else {
    // The prefix under which most program weights are found (names without
    // it, such as a decoder wrapper's caches, are looked up as they are);
    // ties go to the shorter, so a program named as the checkpoint keeps its
    // names. Candidates: each name's first one or two dotted components.
    std::set<std::string> candidates{""};
    for (const std::string &name : programNames) {
      std::vector<std::string> prefixes = dottedPrefixes(name);
      for (size_t i = 0; i < prefixes.size() && i < 2; ++i)
        candidates.insert(prefixes[i]);
    }
    size_t best = 0;
    for (const std::string &p : candidates) {
      size_t found = llvm::count_if(programNames, [&](const std::string &n) {
        llvm::StringRef stripped = n;
        stripped.consume_front(p);
        return held.count(stripped.str()) > 0;
      });
      if (found > best ||
          (found == best && found > 0 && p.size() < out->prefix_.size())) {
        best = found;
        out->prefix_ = p;
      }
    }
  }

  if (!options.ignoreExtra && !programNames.empty()) {
    std::set<std::string> wanted;
    for (const std::string &name : programNames)
      wanted.insert(out->checkpointName(name));
    for (const auto &[dst, src] : options.tied)
      wanted.insert(src);
    for (const std::string &name : names)
      if (!wanted.count(name))
        return makeError(llvm::formatv(
            "checkpoint '{0}': tensor '{1}' (in {2}) is not a weight of the "
            "program{3} (--weights-extra ignore skips it)",
            shown(options.path), shown(name),
            shown(out->checkpoint_->shardOf(name)),
            out->prefix_.empty()
                ? std::string()
                : " (whose names carry the prefix '" + out->prefix_ + "')"));
  }
  return out;
}

llvm::Expected<std::string> WeightSource::configTie(const WeightSlot &slot) {
  if (!tiedVocabulary_) {
    auto vocabulary = tiedVocabulary(options_.path);
    if (!vocabulary)
      return vocabulary.takeError();
    tiedVocabulary_ = std::move(*vocabulary);
  }
  const std::optional<int64_t> &vocabulary = *tiedVocabulary_;
  const at::Tensor &current = slot.current;
  // transformers ties the output embeddings to the input embeddings: the
  // checkpoint's one other [vocab_size, hidden] tensor of the same dtype.
  std::vector<std::string> candidates;
  bool ties =
      vocabulary && current.dim() == 2 && current.size(0) == *vocabulary;
  std::vector<std::string> names;
  if (ties)
    names = checkpoint_->names();
  for (const std::string &name : names) {
    auto entry = checkpoint_->find(name);
    if (!entry)
      return entry.takeError();
    const safetensors::TensorEntry *tensor = entry->second;
    if (scalarType(tensor->dtype) == current.scalar_type() &&
        llvm::ArrayRef<int64_t>(tensor->shape) ==
            llvm::ArrayRef<int64_t>(current.sizes().data(),
                                    current.sizes().size()))
      candidates.push_back(name);
  }
  if (candidates.size() == 1)
    return candidates.front();
  std::string why;
  if (ties) {
    std::vector<std::string> listed;
    for (size_t i = 0; i < candidates.size() && i < 4; ++i)
      listed.push_back("'" + shown(candidates[i]) + "'");
    why = llvm::formatv(
        "; its config.json ties word embeddings, but {0} tensors have its "
        "dtype and shape{1}{2}",
        candidates.empty() ? "no" : std::to_string(candidates.size()),
        candidates.empty() ? "" : ": ",
        llvm::join(listed, ", ") + (candidates.size() > 4 ? ", ..." : ""));
  }
  const std::string &primary = slot.names.front();
  return makeError(llvm::formatv(
      "weight '{0}' is not in checkpoint '{1}' (the program carries no data "
      "for it{2}; if it shares another weight's tensor, name that one with "
      "--weights-tied {3}=SOURCE)",
      shown(primary), shown(options_.path), why,
      shown(checkpointName(primary))));
}

std::string WeightSource::checkpointName(llvm::StringRef name) const {
  llvm::StringRef stripped = name;
  stripped.consume_front(prefix_);
  return stripped.str();
}

uint64_t WeightSource::bytesServed() const {
  return checkpoint_->bytesServed();
}

llvm::Expected<WeightReport> WeightSource::bind(
    const std::vector<WeightSlot> &slots,
    const std::function<void(const std::string &, at::Tensor)> &set,
    bool inPlace) {
  WeightReport report;
  std::set<std::string> held;
  for (const std::string &name : checkpoint_->names())
    held.insert(name);
  for (const WeightSlot &slot : slots) {
    if (slot.names.empty())
      continue;
    const std::string &primary = slot.names.front();
    std::string found;
    for (const std::string &name : slot.names) {
      std::string c = checkpointName(name);
      if (held.count(c)) {
        found = c;
        break;
      }
      auto tied = options_.tied.find(c);
      if (tied != options_.tied.end() && held.count(tied->second)) {
        found = tied->second;
        break;
      }
    }
    const at::Tensor &current = slot.current;
    if (found.empty() && current.is_meta() && !slot.isState) {
      auto source = configTie(slot);
      if (!source)
        return source.takeError();
      found = *source;
      report.configTies.emplace_back(checkpointName(primary), found);
    }
    at::Tensor value;
    if (found.empty()) {
      if (!current.is_meta())
        continue;
      auto zeros =
          torchCall("cannot make state buffer '" + shown(primary) + "'", [&] {
            return at::zeros(current.sizes(),
                             current.options().device(at::kCPU));
          });
      if (!zeros)
        return zeros.takeError();
      value = std::move(*zeros);
      ++report.zeroedState;
    } else {
      auto entry = checkpoint_->find(found);
      if (!entry)
        return entry.takeError();
      safetensors::ShardFile *shard = entry->first;
      const safetensors::TensorEntry *tensor = entry->second;
      auto type = scalarType(tensor->dtype);
      if (!type || *type != current.scalar_type() ||
          llvm::ArrayRef<int64_t>(tensor->shape) !=
              llvm::ArrayRef<int64_t>(current.sizes().vec()))
        return makeError(llvm::formatv(
            "checkpoint '{0}': tensor '{1}' in {2} is {3} {4}, but the "
            "program's '{5}' is {6} {7}",
            shown(options_.path), shown(found),
            shown(checkpoint_->shardOf(found)), shown(tensor->dtype),
            shapeText(tensor->shape), shown(primary),
            manifestDTypeName(current.scalar_type())
                .value_or(c10::toString(current.scalar_type())),
            shapeText(current.sizes().vec())));
      llvm::StringRef bytes = shard->bytes(*tensor);
      auto options = at::TensorOptions().dtype(*type);
      bool mapped = inPlace && canViewInPlace(bytes, *type);
      auto made = torchCall("cannot read '" + shown(found) + "'", [&] {
        // The mapping lives as long as this source; the tensor keeps it.
        if (mapped)
          return viewInPlace(bytes, *type, shared_from_this())
              .view(tensor->shape);
        at::Tensor copy = at::empty(tensor->shape, options);
        if (!bytes.empty())
          std::memcpy(copy.data_ptr(), bytes.data(), bytes.size());
        return copy;
      });
      if (!made)
        return made.takeError();
      value = std::move(*made);
      (mapped ? report.mappedBytes : report.copiedBytes) += bytes.size();
      ++report.boundTensors;
    }
    if (slot.isParameter && current.requires_grad())
      value.requires_grad_(true);
    for (const std::string &name : slot.names)
      set(name, value);
  }
  return report;
}

llvm::Expected<WeightReport> bindInto(StageExecutable &target,
                                      const std::vector<WeightSlot> &slots,
                                      WeightSource *weights, bool inPlace,
                                      llvm::StringRef who) {
  std::string what = ("cannot bind " + who + "'s weights").str();
  llvm::Error failed = llvm::Error::success();
  auto set = [&](const std::string &name, at::Tensor value) {
    if (!failed)
      failed = torchCall(what, [&] { target.setWeight(name, value); });
  };
  WeightReport report;
  if (weights) {
    auto bound = weights->bind(slots, set, inPlace);
    if (!bound)
      return llvm::joinErrors(bound.takeError(), std::move(failed));
    report = *bound;
  } else {
    for (const WeightSlot &slot : slots) {
      if (!slot.current.is_meta())
        continue;
      if (!slot.isState) {
        llvm::consumeError(std::move(failed));
        return makeError(llvm::formatv(
            "{0}'s weight '{1}' holds no data (its program was exported "
            "without weights): give the checkpoint with --weights",
            who, shown(slot.names.front())));
      }
      auto zeros = torchCall(what, [&] {
        return at::zeros(slot.current.sizes(),
                         slot.current.options().device(at::kCPU));
      });
      if (!zeros) {
        llvm::consumeError(std::move(failed));
        return zeros.takeError();
      }
      for (const std::string &name : slot.names)
        set(name, *zeros);
      ++report.zeroedState;
    }
  }
  if (failed)
    return failed;
  return report;
}

std::vector<WeightSlot> stageSlots(const Manifest &manifest,
                                   const StageInfo &info,
                                   const StageExecutable &stage) {
  std::set<std::string> state;
  for (const StateTensor &t : info.state)
    state.insert(t.name);
  if (!info.weights)
    return moduleSlots(stage, state);
  std::vector<WeightSlot> out;
  for (const StageWeight &w : *info.weights) {
    WeightSlot slot;
    slot.names.push_back(w.name);
    slot.names.insert(slot.names.end(), w.tied.begin(), w.tied.end());
    // The same tensor in other stages (a checkpoint saves it once, under
    // any of its names).
    for (const TiedParameter &tied : manifest.tiedParameters)
      if (llvm::any_of(tied.uses, [&](const TiedParameter::Use &u) {
            return u.stage == info.index &&
                   llvm::is_contained(slot.names, u.path);
          }))
        for (const TiedParameter::Use &u : tied.uses)
          if (!llvm::is_contained(slot.names, u.path))
            slot.names.push_back(u.path);
    slot.current = stage.tensorAt(w.name);
    slot.isParameter = w.isParameter;
    slot.isState = state.count(w.name) > 0;
    out.push_back(std::move(slot));
  }
  return out;
}

std::vector<WeightSlot> moduleSlots(const StageExecutable &model,
                                    const std::set<std::string> &stateNames) {
  std::set<std::string> parameters;
  for (const NamedTensor &t : model.namedParameters())
    parameters.insert(t.name);
  std::vector<WeightSlot> out;
  std::map<const void *, size_t> byTensor;
  for (const NamedTensor &t : model.namedTensors()) {
    auto [it, fresh] =
        byTensor.try_emplace(t.value.unsafeGetTensorImpl(), out.size());
    if (!fresh) {
      out[it->second].names.push_back(t.name);
      continue;
    }
    out.push_back({{t.name},
                   t.value,
                   parameters.count(t.name) > 0,
                   stateNames.count(t.name) > 0});
  }
  return out;
}

std::vector<std::string> manifestWeightNames(const Manifest &manifest) {
  std::vector<std::string> out;
  for (const StageInfo &s : manifest.stages) {
    if (!s.weights)
      return {};
    for (const StageWeight &w : *s.weights) {
      out.push_back(w.name);
      out.insert(out.end(), w.tied.begin(), w.tied.end());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<std::string> manifestDTypeName(c10::ScalarType type) {
  switch (type) {
#define PPC_DTYPE(Name, Type)                                                  \
  case c10::ScalarType::Type:                                                  \
    return std::string(Name);
#include "lib/DTypes.def"
  default:
    return std::nullopt;
  }
}

std::string safetensorsDType(c10::ScalarType type) {
  for (const DTypePair &d : kDTypes)
    if (d.type == type)
      return d.name.str();
  return "";
}

bool hasMetaTensors(const std::vector<WeightSlot> &slots) {
  return llvm::any_of(
      slots, [](const WeightSlot &slot) { return slot.current.is_meta(); });
}

} // namespace ppc
