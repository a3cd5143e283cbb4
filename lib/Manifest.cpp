//===- lib/Manifest.cpp - The stage manifest written by ppc split ---------===//
//
// This file implements the JSON form of the manifest (see docs/manifest.md)
// and its consistency checks.
//
//===----------------------------------------------------------------------===//
#include "lib/Manifest.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/ModelFormat.h"
#include "lib/NumberRules.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <limits>
#include <set>

using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace ppc {

llvm::StringRef kindName(ValueKind kind) {
  switch (kind) {
#define PPC_VALUE_KIND(Kind, Name)                                             \
  case ValueKind::Kind:                                                        \
    return Name;
#include "lib/ValueKinds.def"
  }
  llvm_unreachable("unknown ValueKind");
}

std::optional<ValueKind> parseKind(llvm::StringRef name) {
  return llvm::StringSwitch<std::optional<ValueKind>>(name)
#define PPC_VALUE_KIND(Kind, Name) .Case(Name, ValueKind::Kind)
#include "lib/ValueKinds.def"
      .Default(std::nullopt);
}

static Value refToJSON(const ValueRef &ref) {
  if (ref.isModelInput())
    return Object{{"model_input", ref.modelInput}};
  return Object{{"stage", ref.stage}, {"output", ref.output}};
}

static Array shapeToJSON(const std::vector<int64_t> &shape) {
  Array out;
  for (int64_t d : shape)
    out.push_back(d);
  return out;
}

/// One stage's entry of the manifest's "stages".
static Value stageToJSON(const StageInfo &s) {
  Array ins, outs;
  for (const StageInput &in : s.inputs) {
    Object o{{"name", in.name},
             {"type", kindName(in.kind)},
             {"source", refToJSON(in.source)}};
    if (in.mutated)
      o["mutated"] = true;
    ins.push_back(std::move(o));
  }
  for (const StageOutput &out : s.outputs) {
    Array consumers;
    for (int c : out.consumers)
      consumers.push_back(c);
    Object o{{"name", out.name},
             {"type", kindName(out.kind)},
             {"consumers", std::move(consumers)}};
    if (!out.label.empty())
      o["label"] = out.label;
    if (!out.shape.empty())
      o["shape"] = shapeToJSON(out.shape);
    outs.push_back(std::move(o));
  }
  Object so{{"index", s.index},
            {"file", s.file},
            {"sha256", s.sha256},
            {"parameter_count", s.parameterCount},
            {"parameter_bytes", s.parameterBytes},
            {"buffer_bytes", s.bufferBytes},
            {"predicted_cost", s.predictedCost},
            {"inputs", std::move(ins)},
            {"outputs", std::move(outs)}};
  if (!s.beginsAt.empty())
    so["begins_at"] = s.beginsAt;
  if (s.modules) {
    Array modules;
    for (const std::string &path : *s.modules)
      modules.push_back(path);
    so["modules"] = std::move(modules);
  }
  if (!s.state.empty()) {
    Array state;
    for (const StateTensor &t : s.state) {
      Object o{{"name", t.name},
               {"dtype", t.dtype},
               {"shape", shapeToJSON(t.shape)}};
      if (t.indexDim >= 0)
        o["index_dim"] = t.indexDim;
      state.push_back(std::move(o));
    }
    so["state"] = std::move(state);
  }
  if (s.weights) {
    Array weights;
    for (const StageWeight &w : *s.weights) {
      Object o{{"name", w.name},
               {"dtype", w.dtype},
               {"shape", shapeToJSON(w.shape)},
               {"parameter", w.isParameter}};
      if (!w.tied.empty())
        o["tied"] = Array(w.tied);
      weights.push_back(std::move(o));
    }
    so["weights"] = std::move(weights);
  }
  if (s.meta)
    so["meta"] = *s.meta;
  return so;
}

Manifest Manifest::chain(int n) {
  Manifest m;
  m.modelInputs.push_back({"x", ValueKind::Tensor, {}, {}});
  for (int s = 0; s < n; ++s) {
    StageInfo info;
    info.index = s;
    info.file = "stage_" + std::to_string(s) + ".pt";
    StageInput in;
    in.name = "x";
    in.source =
        s == 0 ? ValueRef::fromModelInput(0) : ValueRef::fromStage(s - 1, 0);
    info.inputs.push_back(in);
    StageOutput out;
    out.name = "y";
    if (s + 1 < n)
      out.consumers.push_back(s + 1);
    info.outputs.push_back(out);
    m.stages.push_back(info);
  }
  m.modelOutputs.push_back(ValueRef::fromStage(n - 1, 0));
  return m;
}

Value Manifest::toJSON() const {
  Array inputs;
  for (const ModelInput &in : modelInputs) {
    Object o{{"name", in.name}, {"type", kindName(in.kind)}};
    if (!in.shape.empty())
      o["shape"] = shapeToJSON(in.shape);
    if (!in.maxShape.empty())
      o["max_shape"] = shapeToJSON(in.maxShape);
    inputs.push_back(std::move(o));
  }

  Array stageArray;
  for (const StageInfo &s : stages)
    stageArray.push_back(stageToJSON(s));

  Array outputs;
  for (const ValueRef &ref : modelOutputs)
    outputs.push_back(refToJSON(ref));

  Array tied;
  for (const TiedParameter &t : tiedParameters) {
    Array uses;
    for (const auto &u : t.uses)
      uses.push_back(Object{{"stage", u.stage}, {"path", u.path}});
    tied.push_back(Object{{"bytes", t.bytes}, {"uses", std::move(uses)}});
  }

  return Object{{"schema_version", schemaVersion},
                {"format", format},
                {"source", Object{{"path", sourcePath},
                                  {"size", static_cast<int64_t>(sourceSize)},
                                  {"sha256", sourceSha256}}},
                {"cost_model", costModel},
                {"inputs", std::move(inputs)},
                {"stages", std::move(stageArray)},
                {"outputs", std::move(outputs)},
                {"output_is_tuple", outputIsTuple},
                {"tied_parameters", std::move(tied)}};
}

// Reading: one fromJSON per manifest struct, in llvm::json's ObjectMapper
// idiom, so every error names its JSON path ("missing value at
// manifest.stages[1].inputs[0].source"). They are found by argument-dependent
// lookup from ObjectMapper::map, so they live in namespace ppc (or, for the
// reader's own helper types, beside those types).

namespace {
/// An integer field in [0, max(T)]. llvm::json's fromJSON(int&) narrows an
/// int64 silently (2^32 would read as 0) and accepts negative counts, so
/// every integer in the manifest is read through this.
template <typename T> struct NonNegative { T value = 0; };

template <typename T>
bool fromJSON(const Value &v, NonNegative<T> &out, llvm::json::Path p) {
  std::optional<int64_t> i;
  if (auto n = v.getAsInteger())
    i = *n;
  if (!i || *i < 0 ||
      static_cast<uint64_t>(*i) >
          static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    if constexpr (sizeof(T) < sizeof(int64_t))
      p.report("expected an integer from 0 to 2147483647");
    else
      p.report("expected a non-negative integer");
    return false;
  }
  out.value = static_cast<T>(*i);
  return true;
}

/// The "source" object: the model that was split.
struct SourceInfo {
  std::string path;
  NonNegative<int64_t> size;
  std::string sha256;
};

bool fromJSON(const Value &v, SourceInfo &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  return o && o.map("path", out.path) && o.map("size", out.size) &&
         o.map("sha256", out.sha256);
}
} // namespace

static bool fromJSON(const Value &v, ValueKind &out, llvm::json::Path p) {
  auto name = v.getAsString();
  std::optional<ValueKind> kind = name ? parseKind(*name) : std::nullopt;
  if (!kind) {
    // Path::report keeps a literal: the names of ValueKinds.def, in order.
    p.report("expected one of Tensor, Tensor[], Tuple[Tensor], int, float, "
             "bool, int[]");
    return false;
  }
  out = *kind;
  return true;
}

static bool fromJSON(const Value &v, ValueRef &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  if (!o)
    return false;
  const Object &obj = *v.getAsObject();
  NonNegative<int> a, b;
  if (obj.get("model_input")) {
    if (obj.get("stage") || obj.get("output")) {
      p.report("expected either 'model_input' or 'stage' and 'output', not "
               "both");
      return false;
    }
    if (!o.map("model_input", a))
      return false;
    out = ValueRef::fromModelInput(a.value);
    return true;
  }
  if (!o.map("stage", a) || !o.map("output", b))
    return false;
  out = ValueRef::fromStage(a.value, b.value);
  return true;
}

/// An optional "shape": at most kMaxShapeDims integers, each -1 (dynamic)
/// or more.
static bool mapShape(llvm::json::ObjectMapper &o, const Value &v,
                     std::vector<int64_t> &out, llvm::json::Path p) {
  if (!v.getAsObject()->get("shape"))
    return true;
  if (!o.map("shape", out))
    return false;
  if (out.size() > kMaxShapeDims ||
      llvm::any_of(out, [](int64_t d) { return d < -1; })) {
    p.field("shape").report("expected at most 64 dimensions, each -1 "
                            "(dynamic) or more");
    return false;
  }
  return true;
}

/// An optional "max_shape" beside "shape": one size per dimension of
/// "shape", equal to it where it is static, -1 (unbounded) or at least 1
/// where it is dynamic.
static bool mapMaxShape(llvm::json::ObjectMapper &o, const Value &v,
                        const std::vector<int64_t> &shape,
                        std::vector<int64_t> &out, llvm::json::Path p) {
  if (!v.getAsObject()->get("max_shape"))
    return true;
  if (!o.map("max_shape", out))
    return false;
  bool fits = out.size() == shape.size();
  for (size_t d = 0; fits && d < out.size(); ++d)
    fits = shape[d] >= 0 ? out[d] == shape[d] : out[d] == -1 || out[d] >= 1;
  if (!fits) {
    p.field("max_shape")
        .report("expected one size per dimension of "
                "\"shape\": its size where static, -1 "
                "(unbounded) or at least 1 where dynamic");
    return false;
  }
  return true;
}

static bool fromJSON(const Value &v, ModelInput &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  return o && o.map("name", out.name) && o.map("type", out.kind) &&
         mapShape(o, v, out.shape, p) &&
         mapMaxShape(o, v, out.shape, out.maxShape, p);
}

static bool fromJSON(const Value &v, StageInput &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  return o && o.map("name", out.name) && o.map("type", out.kind) &&
         o.map("source", out.source) && o.mapOptional("mutated", out.mutated);
}

static bool fromJSON(const Value &v, StageOutput &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  std::vector<NonNegative<int>> consumers;
  if (!(o && o.map("name", out.name) && o.map("type", out.kind) &&
        o.map("consumers", consumers) && o.mapOptional("label", out.label) &&
        mapShape(o, v, out.shape, p)))
    return false;
  out.consumers.clear();
  for (const auto &c : consumers)
    out.consumers.push_back(c.value);
  return true;
}

/// Bytes of one element of a dtype of lib/DTypes.def, or 0 for a name
/// that is none of them.
static int64_t dtypeBytes(llvm::StringRef name) {
#define PPC_DTYPE(Name, Type)                                                  \
  if (name == Name)                                                            \
    return static_cast<int64_t>(c10::elementSize(c10::ScalarType::Type));
#include "lib/DTypes.def"
  return 0;
}

/// The "name", "dtype" and "shape" of a state tensor or a weight: a dtype
/// of DTypes.def and non-negative dimensions.
static bool mapTensorFields(llvm::json::ObjectMapper &o, llvm::json::Path p,
                            std::string &name, std::string &dtype,
                            std::vector<int64_t> &shape) {
  std::vector<NonNegative<int64_t>> dims;
  if (!(o && o.map("name", name) && o.map("dtype", dtype) &&
        o.map("shape", dims)))
    return false;
  if (dtypeBytes(dtype) == 0) {
    // Path::report keeps a literal: the names of DTypes.def, in order.
    p.field("dtype").report(
        "expected one of uint8, int8, int16, int32, int64, float16, float32, "
        "float64, complex64, complex128, bool, bfloat16");
    return false;
  }
  shape.clear();
  for (const auto &d : dims)
    shape.push_back(d.value);
  return true;
}

static bool fromJSON(const Value &v, StateTensor &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  return mapTensorFields(o, p, out.name, out.dtype, out.shape) &&
         o.mapOptional("index_dim", out.indexDim);
}

static bool fromJSON(const Value &v, StageWeight &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  return mapTensorFields(o, p, out.name, out.dtype, out.shape) &&
         o.map("parameter", out.isParameter) && o.mapOptional("tied", out.tied);
}

static bool fromJSON(const Value &v, StageInfo &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  NonNegative<int> index;
  NonNegative<int64_t> count, parameterBytes, bufferBytes;
  if (!(o && o.map("index", index) && o.map("file", out.file) &&
        o.map("sha256", out.sha256) && o.map("parameter_count", count) &&
        o.map("parameter_bytes", parameterBytes) &&
        o.map("buffer_bytes", bufferBytes) &&
        o.map("predicted_cost", out.predictedCost) &&
        o.mapOptional("begins_at", out.beginsAt) &&
        o.map("inputs", out.inputs) && o.map("outputs", out.outputs) &&
        o.mapOptional("state", out.state)))
    return false;
  if (out.predictedCost < 0) {
    p.field("predicted_cost").report("expected a non-negative number");
    return false;
  }
  if (!RealRule::cost().problem(out.predictedCost).empty()) {
    // report() keeps a literal: RealRule::cost()'s bound, spelt out.
    p.field("predicted_cost").report("expected a number in 0..1e+30");
    return false;
  }
  out.index = index.value;
  out.parameterCount = count.value;
  out.parameterBytes = parameterBytes.value;
  out.bufferBytes = bufferBytes.value;
  if (v.getAsObject()->get("weights")) {
    std::vector<StageWeight> weights;
    if (!o.map("weights", weights))
      return false;
    out.weights = std::move(weights);
  }
  if (v.getAsObject()->get("modules")) {
    std::vector<std::string> modules;
    if (!o.map("modules", modules))
      return false;
    out.modules = std::move(modules);
  }
  // The runtime interprets "meta" (docs/runtime.md); it is carried as is.
  if (const Value *meta = v.getAsObject()->get("meta"))
    out.meta = *meta;
  return true;
}

static bool fromJSON(const Value &v, TiedParameter::Use &out,
                     llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  NonNegative<int> stage;
  if (!(o && o.map("stage", stage) && o.map("path", out.path)))
    return false;
  out.stage = stage.value;
  return true;
}

static bool fromJSON(const Value &v, TiedParameter &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  NonNegative<int64_t> bytes;
  if (!(o && o.map("bytes", bytes) && o.map("uses", out.uses)))
    return false;
  out.bytes = bytes.value;
  return true;
}

static bool fromJSON(const Value &v, Manifest &out, llvm::json::Path p) {
  llvm::json::ObjectMapper o(v, p);
  SourceInfo source;
  if (!(o && o.map("source", source) && o.map("cost_model", out.costModel) &&
        o.map("inputs", out.modelInputs) && o.map("stages", out.stages) &&
        o.map("outputs", out.modelOutputs) &&
        o.mapOptional("output_is_tuple", out.outputIsTuple) &&
        o.mapOptional("tied_parameters", out.tiedParameters)))
    return false;
  out.sourcePath = std::move(source.path);
  out.sourceSize = static_cast<uint64_t>(source.size.value);
  out.sourceSha256 = std::move(source.sha256);
  return true;
}

/// The schema version comes first: a manifest of another version may
/// differ in any other field, so that is the one error worth reporting.
/// Version 1 predates the format field; its stages are TorchScript.
static llvm::Expected<std::string> checkVersionAndFormat(const Value &json) {
  llvm::json::Path::Root root("manifest");
  llvm::json::ObjectMapper o(json, root);
  NonNegative<int> version;
  if (!o || !o.map("schema_version", version))
    return root.getError();
  if (version.value < 1 || version.value > Manifest::kSchemaVersion)
    return makeError(llvm::formatv("manifest: unsupported schema_version {0} "
                                   "(this ppc reads versions 1 to {1})",
                                   version.value, Manifest::kSchemaVersion)
                         .str());
  if (version.value == 1)
    return std::string("torchscript");
  std::string format;
  if (!o.map("format", format))
    return root.getError();
  if (!findModelFormat(format)) {
    std::vector<std::string> known;
    for (const ModelFormat *f : modelFormats())
      known.push_back(f->name().str());
    return makeError(llvm::formatv("manifest: unknown format '{0}' (this ppc "
                                   "reads {1})",
                                   format, llvm::join(known, ", "))
                         .str());
  }
  return format;
}

llvm::Expected<Manifest> Manifest::fromJSON(const Value &json) {
  auto format = checkVersionAndFormat(json);
  if (!format)
    return format.takeError();
  Manifest m;
  m.format = std::move(*format);
  llvm::json::Path::Root root("manifest");
  if (!ppc::fromJSON(json, m, root))
    return root.getError();
  if (llvm::Error err = m.verify())
    return err;
  return m;
}

// Checking: verify() runs one check per rule of docs/manifest.md, each
// naming the first offending entry.

static std::string at(const char *what, size_t i) {
  return llvm::formatv("{0}[{1}]", what, i);
}

/// Stage files are resolved against the manifest's directory and must stay
/// in it: the manifest is untrusted and must not name arbitrary files.
std::string contentMismatch(uint64_t size, llvm::StringRef sha256,
                            std::optional<uint64_t> expectedSize,
                            llvm::StringRef expectedSha256) {
  if (expectedSize && size != *expectedSize)
    return llvm::formatv("{0} bytes, the manifest says {1}", size,
                         *expectedSize)
        .str();
  size_t same = 0;
  while (same < sha256.size() && same < expectedSha256.size() &&
         sha256[same] == expectedSha256[same])
    ++same;
  size_t shown = std::max<size_t>(12, same + 1);
  return "sha256 " + printable(sha256.take_front(shown), shown) +
         " != " + printable(expectedSha256.take_front(shown), shown);
}

/// Splits "features.12" into "features" and 12; false without a numeric
/// last component.
static bool splitIndex(llvm::StringRef path, llvm::StringRef &parent,
                       unsigned &index) {
  size_t dot = path.rfind('.');
  if (dot == llvm::StringRef::npos)
    return false;
  parent = path.take_front(dot);
  llvm::StringRef last = path.drop_front(dot + 1);
  return !last.empty() && llvm::all_of(last, llvm::isDigit) &&
         !last.getAsInteger(10, index);
}

std::string describeModules(const std::vector<std::string> &modules) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < modules.size();) {
    llvm::StringRef parent;
    unsigned first = 0;
    size_t end = i + 1;
    if (splitIndex(modules[i], parent, first)) {
      for (llvm::StringRef p; end < modules.size(); ++end) {
        unsigned index = 0;
        if (!splitIndex(modules[end], p, index) || p != parent ||
            index != first + (end - i))
          break;
      }
    }
    if (end - i >= 3) {
      parts.push_back(modules[i] + " ... " + modules[end - 1]);
    } else {
      end = i + 1;
      parts.push_back(modules[i]);
    }
    i = end;
  }
  return llvm::join(parts, ", ");
}

llvm::Error checkStageFile(const StageInfo &s) {
  llvm::StringRef file = s.file;
  size_t i = static_cast<size_t>(s.index);
  if (file.empty())
    return makeError("manifest: " + at("stages", i) + ".file is empty");
  if (llvm::sys::path::is_absolute(file))
    return makeError(llvm::formatv("manifest: {0}.file '{1}' is absolute; "
                                   "stage files must be relative to the "
                                   "manifest's directory",
                                   at("stages", i), file)
                         .str());
  for (auto part = llvm::sys::path::begin(file),
            end = llvm::sys::path::end(file);
       part != end; ++part)
    if (*part == "..")
      return makeError(llvm::formatv("manifest: {0}.file '{1}' leaves the "
                                     "manifest's directory",
                                     at("stages", i), file)
                           .str());
  return llvm::Error::success();
}

static llvm::Error checkCounts(const StageInfo &s, size_t i) {
  if (s.parameterCount < 0 || s.parameterBytes < 0 || s.bufferBytes < 0 ||
      s.predictedCost < 0)
    return makeError("manifest: " + at("stages", i) +
                     " has a negative count, size or cost");
  if (std::string problem = RealRule::cost().problem(s.predictedCost);
      !problem.empty())
    return makeError("manifest: " + at("stages", i) + ".predicted_cost " +
                     problem);
  return llvm::Error::success();
}

/// `ref` must name a model input, or an output of a stage before
/// `beforeStage`; `kind`, if given, must be the kind of what it names.
static llvm::Error checkRef(const Manifest &m, const ValueRef &ref,
                            int beforeStage, const std::string &where,
                            std::optional<ValueKind> kind) {
  if (ref.isModelInput()) {
    if (ref.stage >= 0 || ref.output >= 0)
      return makeError("manifest: " + where +
                       " names both a model input and a stage output");
    if (ref.modelInput >= static_cast<int>(m.modelInputs.size()))
      return makeError(llvm::formatv("manifest: {0} refers to model input "
                                     "{1}, but the model has {2} inputs",
                                     where, ref.modelInput,
                                     m.modelInputs.size())
                           .str());
    ValueKind made = m.modelInputs[ref.modelInput].kind;
    if (kind && *kind != made)
      return makeError(llvm::formatv("manifest: {0} is a {1} but model "
                                     "input {2} is a {3}",
                                     where, kindName(*kind), ref.modelInput,
                                     kindName(made))
                           .str());
    return llvm::Error::success();
  }
  if (ref.stage < 0 || ref.stage >= beforeStage || ref.output < 0 ||
      ref.output >= static_cast<int>(m.stages[ref.stage].outputs.size()))
    return makeError(llvm::formatv("manifest: {0} refers to a missing output "
                                   "{1} of stage {2}",
                                   where, ref.output, ref.stage)
                         .str());
  ValueKind made = m.output(ref).kind;
  if (kind && *kind != made)
    return makeError(llvm::formatv("manifest: {0} is a {1} but output {2} "
                                   "of stage {3} is a {4}",
                                   where, kindName(*kind), ref.output,
                                   ref.stage, kindName(made))
                         .str());
  return llvm::Error::success();
}

/// Every input names an earlier value of its own kind, and the producer
/// lists this stage as a consumer.
static llvm::Error checkInputs(const Manifest &m, size_t i) {
  const StageInfo &s = m.stages[i];
  for (size_t j = 0; j < s.inputs.size(); ++j) {
    const StageInput &in = s.inputs[j];
    std::string where = at("stages", i) + at(".inputs", j);
    if (llvm::Error err =
            checkRef(m, in.source, static_cast<int>(i), where, in.kind))
      return err;
    if (in.source.isModelInput())
      continue;
    if (!llvm::is_contained(m.output(in.source).consumers, static_cast<int>(i)))
      return makeError(
          llvm::formatv("manifest: {0} takes output {1} of stage {2}, which "
                        "does not list stage {3} as a consumer",
                        where, in.source.output, in.source.stage, i)
              .str());
  }
  return llvm::Error::success();
}

/// Every consumer list is strictly ascending and names exactly later
/// stages that take the output.
static llvm::Error checkConsumers(const Manifest &m, size_t i) {
  const StageInfo &s = m.stages[i];
  for (size_t j = 0; j < s.outputs.size(); ++j) {
    std::string where = at("stages", i) + at(".outputs", j);
    const std::vector<int> &consumers = s.outputs[j].consumers;
    for (size_t k = 1; k < consumers.size(); ++k)
      if (consumers[k] <= consumers[k - 1])
        return makeError(
            consumers[k] == consumers[k - 1]
                ? llvm::formatv("manifest: {0} lists consumer {1} twice", where,
                                consumers[k])
                      .str()
                : llvm::formatv("manifest: {0} lists its consumers out of "
                                "order ({1} after {2})",
                                where, consumers[k], consumers[k - 1])
                      .str());
    ValueRef self =
        ValueRef::fromStage(static_cast<int>(i), static_cast<int>(j));
    for (int c : consumers) {
      bool takes =
          c > static_cast<int>(i) && c < static_cast<int>(m.stages.size()) &&
          llvm::any_of(m.stages[c].inputs,
                       [&](const StageInput &in) { return in.source == self; });
      if (!takes)
        return makeError(llvm::formatv("manifest: {0} lists consumer {1}, "
                                       "which does not take it",
                                       where, c)
                             .str());
    }
  }
  return llvm::Error::success();
}

/// One state tensor: named, of a known dtype, of a size that fits.
static llvm::Error checkStateTensor(const StateTensor &t,
                                    const std::string &where) {
  if (t.name.empty())
    return makeError("manifest: " + where + " has an empty name");
  int64_t bytes = dtypeBytes(t.dtype);
  if (bytes == 0)
    return makeError("manifest: " + where + " has an unknown dtype");
  if (t.shape.size() > kMaxShapeDims)
    return makeError(llvm::formatv("manifest: {0} has {1} dimensions, more "
                                   "than {2}",
                                   where, t.shape.size(), kMaxShapeDims)
                         .str());
  if (t.indexDim < -1 || t.indexDim >= static_cast<int64_t>(t.shape.size()))
    return makeError(llvm::formatv("manifest: {0} has index_dim {1}, not a "
                                   "dimension of its {2}",
                                   where, t.indexDim, t.shape.size())
                         .str());
  for (int64_t d : t.shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes))
      return makeError("manifest: " + where +
                       " has a negative dimension or more bytes than fit in "
                       "63 bits");
  return llvm::Error::success();
}

/// Every state tensor is valid and named once in its stage; so is every
/// weight, each of its names (tied ones included) once.
static llvm::Error checkState(const StageInfo &s, size_t i) {
  std::set<std::string> names;
  for (size_t j = 0; j < s.state.size(); ++j) {
    std::string where = at("stages", i) + at(".state", j);
    if (llvm::Error err = checkStateTensor(s.state[j], where))
      return err;
    if (!names.insert(s.state[j].name).second)
      return makeError("manifest: " + where +
                       " repeats the name of an earlier state tensor");
  }
  if (!s.weights)
    return llvm::Error::success();
  std::set<std::string> weightNames;
  for (size_t j = 0; j < s.weights->size(); ++j) {
    const StageWeight &w = (*s.weights)[j];
    std::string where = at("stages", i) + at(".weights", j);
    if (llvm::Error err =
            checkStateTensor({w.name, w.dtype, w.shape, -1}, where))
      return err;
    std::vector<std::string> all = w.tied;
    all.push_back(w.name);
    for (const std::string &name : all)
      if (name.empty() || !weightNames.insert(name).second)
        return makeError("manifest: " + where +
                         " repeats the name of an earlier weight, or has an "
                         "empty one");
  }
  return llvm::Error::success();
}

static llvm::Error checkTiedParameters(const Manifest &m) {
  for (size_t i = 0; i < m.tiedParameters.size(); ++i) {
    const TiedParameter &t = m.tiedParameters[i];
    if (t.bytes < 0)
      return makeError("manifest: " + at("tied_parameters", i) +
                       " has negative bytes");
    if (t.uses.size() < 2)
      return makeError("manifest: " + at("tied_parameters", i) +
                       " must list at least two uses");
    for (size_t j = 0; j < t.uses.size(); ++j)
      if (t.uses[j].stage < 0 ||
          t.uses[j].stage >= static_cast<int>(m.stages.size()))
        return makeError(llvm::formatv("manifest: {0}.uses[{1}] names stage "
                                       "{2}, but there are {3} stages",
                                       at("tied_parameters", i), j,
                                       t.uses[j].stage, m.stages.size())
                             .str());
  }
  return llvm::Error::success();
}

llvm::Error Manifest::verify() const {
  if (stages.empty())
    return makeError("manifest: no stages");
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].index != static_cast<int>(i))
      return makeError(llvm::formatv("manifest: stages[{0}] has index {1}", i,
                                     stages[i].index)
                           .str());
    if (llvm::Error err = checkStageFile(stages[i]))
      return err;
    if (llvm::Error err = checkCounts(stages[i], i))
      return err;
    if (llvm::Error err = checkInputs(*this, i))
      return err;
    if (llvm::Error err = checkConsumers(*this, i))
      return err;
    if (llvm::Error err = checkState(stages[i], i))
      return err;
  }
  if (modelOutputs.empty())
    return makeError("manifest: no model outputs");
  for (size_t i = 0; i < modelOutputs.size(); ++i)
    if (llvm::Error err =
            checkRef(*this, modelOutputs[i], static_cast<int>(stages.size()),
                     at("outputs", i), std::nullopt))
      return err;
  return checkTiedParameters(*this);
}

llvm::Expected<Manifest> Manifest::parse(llvm::StringRef text,
                                         llvm::StringRef name) {
  auto json =
      parseJSONBounded(text, kMaxJSONDepth, ("manifest '" + name + "'").str());
  if (!json)
    return json.takeError();
  auto manifest = fromJSON(*json);
  if (!manifest)
    return withContext(manifest.takeError(), name);
  return manifest;
}

llvm::Expected<Manifest> Manifest::load(llvm::StringRef path,
                                        std::string *sha256) {
  auto buffer = readFileBounded(path, kMaxManifestBytes, "manifest");
  if (!buffer)
    return buffer.takeError();
  // Parsed and hashed from the same bytes: a manifest rewritten between a
  // read and a hash would otherwise pass as the file it replaced.
  llvm::StringRef bytes = (*buffer)->getBuffer();
  auto manifest = parse(bytes, path);
  if (manifest && sha256)
    *sha256 = sha256Hex(bytes);
  return manifest;
}

llvm::Error Manifest::save(llvm::StringRef path) const {
  return writeJSONFileAtomically(path, toJSON());
}

} // namespace ppc
