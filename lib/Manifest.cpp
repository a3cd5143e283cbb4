//===- lib/Manifest.cpp - The stage manifest written by ppc split ---------===//
//
// This file implements the JSON form of the manifest (see docs/manifest.md)
// and its consistency checks.
//
//===----------------------------------------------------------------------===//
#include "lib/Manifest.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

using llvm::json::Array;
using llvm::json::Object;
using llvm::json::Value;

namespace ppc {

namespace {
struct KindSpelling {
  ValueKind kind;
  const char *name;
};
constexpr KindSpelling kKinds[] = {
    {ValueKind::Tensor, "Tensor"},
    {ValueKind::TensorList, "Tensor[]"},
    {ValueKind::TensorTuple, "Tuple[Tensor]"},
    {ValueKind::Int, "int"},
    {ValueKind::Float, "float"},
    {ValueKind::Bool, "bool"},
    {ValueKind::IntList, "int[]"},
};
} // namespace

llvm::StringRef kindName(ValueKind kind) {
  for (const auto &k : kKinds)
    if (k.kind == kind)
      return k.name;
  llvm_unreachable("unknown ValueKind");
}

std::optional<ValueKind> parseKind(llvm::StringRef name) {
  for (const auto &k : kKinds)
    if (name == k.name)
      return k.kind;
  return std::nullopt;
}

static Value refToJSON(const ValueRef &ref) {
  if (ref.isModelInput())
    return Object{{"model_input", ref.modelInput}};
  return Object{{"stage", ref.stage}, {"output", ref.output}};
}

Value Manifest::toJSON() const {
  Array inputs;
  for (const ModelInput &in : modelInputs)
    inputs.push_back(Object{{"name", in.name}, {"type", kindName(in.kind)}});

  Array stageArray;
  for (const StageInfo &s : stages) {
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
      outs.push_back(Object{{"name", out.name},
                            {"type", kindName(out.kind)},
                            {"consumers", std::move(consumers)}});
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
    if (s.meta)
      so["meta"] = *s.meta;
    stageArray.push_back(std::move(so));
  }

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

namespace {
/// Reads fields of one JSON object, naming the object's path in errors.
class Reader {
public:
  Reader(const Value &v, std::string where) : where(std::move(where)) {
    obj = v.getAsObject();
    if (!obj)
      fail("expected an object");
  }

  const Value *field(llvm::StringRef key) {
    if (!obj)
      return nullptr;
    const Value *v = obj->get(key);
    if (!v)
      fail("missing '" + key.str() + "'");
    return v;
  }
  std::string str(llvm::StringRef key) {
    if (const Value *v = field(key)) {
      if (auto s = v->getAsString())
        return s->str();
      fail("'" + key.str() + "' must be a string");
    }
    return {};
  }
  int64_t integer(llvm::StringRef key) {
    if (const Value *v = field(key)) {
      if (auto i = v->getAsInteger())
        return *i;
      fail("'" + key.str() + "' must be an integer");
    }
    return 0;
  }
  double number(llvm::StringRef key) {
    if (const Value *v = field(key)) {
      if (auto d = v->getAsNumber())
        return *d;
      fail("'" + key.str() + "' must be a number");
    }
    return 0;
  }
  bool boolean(llvm::StringRef key, bool fallback) {
    if (!obj || !obj->get(key))
      return fallback;
    if (auto b = obj->get(key)->getAsBoolean())
      return *b;
    fail("'" + key.str() + "' must be a boolean");
    return fallback;
  }
  const Array *array(llvm::StringRef key) {
    if (const Value *v = field(key)) {
      if (const Array *a = v->getAsArray())
        return a;
      fail("'" + key.str() + "' must be an array");
    }
    return nullptr;
  }
  ValueKind kind(llvm::StringRef key) {
    std::string name = str(key);
    if (auto k = parseKind(name))
      return *k;
    if (!error)
      fail("unknown type '" + name + "'");
    return ValueKind::Tensor;
  }
  ValueRef ref(const Value &v, const std::string &at) {
    Reader r(v, at);
    ValueRef out;
    if (r.obj && r.obj->get("model_input"))
      out.modelInput = static_cast<int>(r.integer("model_input"));
    else {
      out.stage = static_cast<int>(r.integer("stage"));
      out.output = static_cast<int>(r.integer("output"));
    }
    absorb(r);
    return out;
  }

  void fail(const std::string &message) {
    if (!error)
      error = where + ": " + message;
  }
  void absorb(Reader &child) {
    if (child.error && !error)
      error = child.error;
  }

  std::string where;
  const Object *obj = nullptr;
  std::optional<std::string> error;
};
} // namespace

llvm::Expected<Manifest> Manifest::fromJSON(const Value &json) {
  Manifest m;
  Reader top(json, "manifest");
  m.schemaVersion = static_cast<int>(top.integer("schema_version"));
  if (!top.error && m.schemaVersion != kSchemaVersion)
    return makeError(llvm::formatv("manifest: unsupported schema_version {0} "
                                   "(this ppc reads version {1})",
                                   m.schemaVersion, kSchemaVersion)
                         .str());
  if (const Value *src = top.field("source")) {
    Reader r(*src, "manifest: source");
    m.sourcePath = r.str("path");
    m.sourceSize = static_cast<uint64_t>(r.integer("size"));
    m.sourceSha256 = r.str("sha256");
    top.absorb(r);
  }
  m.costModel = top.str("cost_model");
  m.outputIsTuple = top.boolean("output_is_tuple", false);

  if (const Array *inputs = top.array("inputs")) {
    for (size_t i = 0; i < inputs->size(); ++i) {
      Reader r((*inputs)[i], llvm::formatv("manifest: inputs[{0}]", i));
      m.modelInputs.push_back({r.str("name"), r.kind("type")});
      top.absorb(r);
    }
  }
  if (const Array *stages = top.array("stages")) {
    for (size_t i = 0; i < stages->size(); ++i) {
      std::string at = llvm::formatv("manifest: stages[{0}]", i);
      Reader r((*stages)[i], at);
      StageInfo s;
      s.index = static_cast<int>(r.integer("index"));
      s.file = r.str("file");
      s.sha256 = r.str("sha256");
      s.parameterCount = r.integer("parameter_count");
      s.parameterBytes = r.integer("parameter_bytes");
      s.bufferBytes = r.integer("buffer_bytes");
      s.predictedCost = r.number("predicted_cost");
      if (r.obj) {
        if (auto b = r.obj->getString("begins_at"))
          s.beginsAt = b->str();
        if (const Value *meta = r.obj->get("meta"))
          s.meta = *meta;
      }
      if (const Array *ins = r.array("inputs")) {
        for (size_t j = 0; j < ins->size(); ++j) {
          std::string inAt = llvm::formatv("{0}.inputs[{1}]", at, j);
          Reader ri((*ins)[j], inAt);
          StageInput in;
          in.name = ri.str("name");
          in.kind = ri.kind("type");
          if (const Value *src = ri.field("source"))
            in.source = ri.ref(*src, inAt + ".source");
          in.mutated = ri.boolean("mutated", false);
          s.inputs.push_back(std::move(in));
          r.absorb(ri);
        }
      }
      if (const Array *outs = r.array("outputs")) {
        for (size_t j = 0; j < outs->size(); ++j) {
          Reader ro((*outs)[j], llvm::formatv("{0}.outputs[{1}]", at, j));
          StageOutput out;
          out.name = ro.str("name");
          out.kind = ro.kind("type");
          if (const Array *cs = ro.array("consumers"))
            for (const Value &c : *cs) {
              if (auto ci = c.getAsInteger())
                out.consumers.push_back(static_cast<int>(*ci));
              else
                ro.fail("'consumers' must hold integers");
            }
          s.outputs.push_back(std::move(out));
          r.absorb(ro);
        }
      }
      m.stages.push_back(std::move(s));
      top.absorb(r);
    }
  }
  if (const Array *outputs = top.array("outputs"))
    for (size_t i = 0; i < outputs->size(); ++i)
      m.modelOutputs.push_back(
          top.ref((*outputs)[i], llvm::formatv("manifest: outputs[{0}]", i)));
  if (top.obj && top.obj->get("tied_parameters")) {
    if (const Array *tied = top.array("tied_parameters")) {
      for (size_t i = 0; i < tied->size(); ++i) {
        std::string at = llvm::formatv("manifest: tied_parameters[{0}]", i);
        Reader r((*tied)[i], at);
        TiedParameter t;
        t.bytes = r.integer("bytes");
        if (const Array *uses = r.array("uses"))
          for (size_t j = 0; j < uses->size(); ++j) {
            Reader ru((*uses)[j], llvm::formatv("{0}.uses[{1}]", at, j));
            t.uses.push_back(
                {static_cast<int>(ru.integer("stage")), ru.str("path")});
            r.absorb(ru);
          }
        m.tiedParameters.push_back(std::move(t));
        top.absorb(r);
      }
    }
  }
  if (top.error)
    return makeError(*top.error);
  if (llvm::Error err = m.verify())
    return std::move(err);
  return m;
}

llvm::Error Manifest::verify() const {
  if (stages.empty())
    return makeError("manifest: no stages");
  auto checkRef = [&](const ValueRef &ref, int beforeStage,
                      const std::string &at) -> llvm::Error {
    if (ref.isModelInput()) {
      if (ref.modelInput >= static_cast<int>(modelInputs.size()))
        return makeError(
            llvm::formatv("manifest: {0} refers to model input {1}, "
                          "but the model has {2} inputs",
                          at, ref.modelInput, modelInputs.size()));
      return llvm::Error::success();
    }
    if (ref.stage < 0 || ref.stage >= beforeStage || ref.output < 0 ||
        ref.output >= static_cast<int>(stages[ref.stage].outputs.size()))
      return makeError(llvm::formatv("manifest: {0} refers to a missing output "
                                     "{1} of stage {2}",
                                     at, ref.output, ref.stage));
    return llvm::Error::success();
  };

  for (size_t i = 0; i < stages.size(); ++i) {
    const StageInfo &s = stages[i];
    if (s.index != static_cast<int>(i))
      return makeError(
          llvm::formatv("manifest: stages[{0}] has index {1}", i, s.index));
    for (size_t j = 0; j < s.inputs.size(); ++j) {
      const StageInput &in = s.inputs[j];
      if (llvm::Error err =
              checkRef(in.source, static_cast<int>(i),
                       llvm::formatv("stages[{0}].inputs[{1}]", i, j)))
        return err;
      if (!in.source.isModelInput()) {
        const auto &consumers = output(in.source).consumers;
        if (std::find(consumers.begin(), consumers.end(),
                      static_cast<int>(i)) == consumers.end())
          return makeError(
              llvm::formatv("manifest: stages[{0}].inputs[{1}] takes output "
                            "{2} of stage {3}, "
                            "which does not list stage {0} as a consumer",
                            i, j, in.source.output, in.source.stage));
      }
    }
    for (size_t j = 0; j < s.outputs.size(); ++j)
      for (int c : s.outputs[j].consumers) {
        bool found =
            c > static_cast<int>(i) && c < static_cast<int>(stages.size());
        if (found) {
          found = false;
          for (const StageInput &in : stages[c].inputs)
            found |= in.source == ValueRef::fromStage(static_cast<int>(i),
                                                      static_cast<int>(j));
        }
        if (!found)
          return makeError(
              llvm::formatv("manifest: stages[{0}].outputs[{1}] lists "
                            "consumer {2}, which does not take it",
                            i, j, c));
      }
  }
  if (modelOutputs.empty())
    return makeError("manifest: no model outputs");
  for (size_t i = 0; i < modelOutputs.size(); ++i)
    if (llvm::Error err =
            checkRef(modelOutputs[i], static_cast<int>(stages.size()),
                     llvm::formatv("outputs[{0}]", i)))
      return err;
  return llvm::Error::success();
}

llvm::Expected<Manifest> Manifest::load(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError("cannot read manifest '" + path +
                     "': " + buffer.getError().message());
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return makeError("'" + path + "' is not a valid manifest: " +
                     llvm::toString(json.takeError()));
  auto manifest = fromJSON(*json);
  if (!manifest)
    return withContext(manifest.takeError(), path);
  return manifest;
}

llvm::Error Manifest::save(llvm::StringRef path) const {
  return writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os << llvm::formatv("{0:2}", toJSON()) << "\n";
    return llvm::Error::success();
  });
}

} // namespace ppc
