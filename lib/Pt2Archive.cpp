//===- lib/Pt2Archive.cpp - Reading and writing .pt2 archives -------------===//
//
// A .pt2 archive (torch/csrc/export/pt2_archive_constants.h) is a PyTorch
// zip whose records, below the archive's root directory, are:
//
//   archive_format                      "pt2"
//   archive_version                     "0"
//   models/NAME.json                    the ExportedProgram
//   data/weights/NAME_weights_config.json   FQN -> {path_name, is_param,
//                                            use_pickle, tensor_meta}
//   data/weights/weight_K               raw storage bytes
//   data/constants/NAME_constants_config.json, data/constants/tensor_K
//
// Everything is checked before it is allocated or trusted: the sizes the
// zip's central directory declares against the archive's own size, record
// names, byte counts against tensor metadata (with overflow-checked
// arithmetic), JSON depth, the schema version, the range constraints. A
// weight is a view of its record: of the archive's bytes in place when the
// record is stored and aligned (always, for what PyTorch writes), else of a
// copy. It is written back as that same storage with its strides, never
// expanded.
//
//===----------------------------------------------------------------------===//
#ifdef PPC_HAVE_PT2

#include "lib/Pt2Program.h"

#include "lib/Error.h"
#include "lib/MappedTensor.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <map>

namespace ppc::pt2 {

namespace {

constexpr llvm::StringLiteral kWeightsDir = "data/weights/";
constexpr llvm::StringLiteral kConstantsDir = "data/constants/";

/// An error about the archive: "'m.pt2': WHAT".
llvm::Error fail(llvm::StringRef path, const llvm::Twine &what) {
  return makeError("'" + path + "': " + what);
}

std::string dtypeName(c10::ScalarType t) { return c10::toString(t); }

/// The record `name`'s bytes as a string; the caller checked it exists.
std::string readString(caffe2::serialize::PyTorchStreamReader &reader,
                       const std::string &name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char *>(data.get()), size);
}

/// `text` parsed, at most kMaxJSONDepth deep (nlohmann's parser is
/// iterative, but the schema types' from_json recurse).
llvm::Expected<nlohmann::json>
parseJSON(llvm::StringRef path, llvm::StringRef record, llvm::StringRef text) {
  if (nestsDeeperThan(text, kMaxJSONDepth))
    return fail(path, llvm::formatv("{0} nests deeper than {1} levels", record,
                                    kMaxJSONDepth));
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception &e) {
    return fail(path, record + " is not valid JSON: " + e.what());
  }
}

/// Elements a strided tensor reaches in its storage (0 when empty), or
/// nullopt when sizes or strides are negative or the count overflows.
std::optional<int64_t> elementsReached(llvm::ArrayRef<int64_t> sizes,
                                       llvm::ArrayRef<int64_t> strides,
                                       int64_t offset) {
  if (offset < 0 || sizes.size() != strides.size())
    return std::nullopt;
  int64_t last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || strides[i] < 0)
      return std::nullopt;
    if (sizes[i] == 0)
      return 0;
    int64_t step;
    if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &step) ||
        __builtin_add_overflow(last, step, &last))
      return std::nullopt;
  }
  return last + 1;
}

/// Static sizes (or strides) of `meta`; nullopt when one is symbolic.
std::optional<std::vector<int64_t>>
staticInts(const std::vector<schema::SymInt> &values) {
  std::vector<int64_t> out;
  for (const schema::SymInt &v : values) {
    if (v.tag() != schema::SymInt::Tag::AS_INT)
      return std::nullopt;
    out.push_back(v.get_as_int());
  }
  return out;
}

std::string shapeText(llvm::ArrayRef<int64_t> sizes) {
  return "[" +
         llvm::join(llvm::map_range(
                        sizes, [](int64_t s) { return std::to_string(s); }),
                    ", ") +
         "]";
}

/// The example value (hint) the program records for each bare symbol among
/// its tensors' sizes, strides and offsets and its symbolic ints.
std::map<std::string, int64_t> symbolHints(const schema::Graph &graph) {
  std::map<std::string, int64_t> out;
  auto note = [&](const schema::SymInt &v) {
    if (v.tag() != schema::SymInt::Tag::AS_EXPR)
      return;
    const schema::SymExpr &e = v.get_as_expr();
    llvm::StringRef symbol = bareSymbol(e.get_expr_str());
    if (!symbol.empty() && e.get_hint() &&
        e.get_hint()->tag() == schema::SymExprHint::Tag::AS_INT)
      out.emplace(symbol.str(), e.get_hint()->get_as_int());
  };
  for (const auto &[name, meta] : graph.get_tensor_values()) {
    llvm::for_each(meta.get_sizes(), note);
    llvm::for_each(meta.get_strides(), note);
    note(meta.get_storage_offset());
  }
  for (const auto &[name, value] : graph.get_sym_int_values())
    note(value);
  return out;
}

/// Whether `symbol` names a size (PyTorch's SymT.SIZE: "s" and digits),
/// which PyTorch's shape environment never lets below 0.
bool isSizeSymbol(llvm::StringRef symbol) {
  return symbol.consume_front("s") && !symbol.empty() &&
         llvm::all_of(symbol, llvm::isDigit);
}

/// Checks range_constraints as torch.export.load does (ValueRanges refuses
/// min > max, the shape environment a recorded example value outside its
/// symbol's range), and that no size may be negative, so that a stage
/// program that copies them loads too.
llvm::Error checkRanges(const schema::ExportedProgram &program,
                        llvm::StringRef path) {
  auto hints = symbolHints(program.get_graph_module().get_graph());
  std::map<std::string, schema::RangeConstraint> ranges(
      program.get_range_constraints().begin(),
      program.get_range_constraints().end());
  for (const auto &[symbol, range] : ranges) {
    const std::optional<int64_t> &lo = range.get_min_val();
    const std::optional<int64_t> &hi = range.get_max_val();
    std::string text = "[" + (lo ? std::to_string(*lo) : "-inf") + ", " +
                       (hi ? std::to_string(*hi) : "inf") + "]";
    std::string what = "its range constraint for symbol '" + printable(symbol) +
                       "', " + text + ", ";
    if (lo && hi && *lo > *hi)
      return fail(path, what + "has its minimum above its maximum");
    if (((lo && *lo < 0) || (hi && *hi < 0)) && isSizeSymbol(symbol))
      return fail(path, what + "admits negative values for a size");
    auto hint = hints.find(symbol);
    if (hint != hints.end() &&
        ((lo && hint->second < *lo) || (hi && hint->second > *hi)))
      return fail(path, what + "excludes the symbol's example value " +
                            std::to_string(hint->second));
  }
  return llvm::Error::success();
}

/// Reads one payload config (weights or constants) and its tensors.
class PayloadReader {
public:
  PayloadReader(caffe2::serialize::PyTorchStreamReader &reader,
                llvm::StringRef bytes, std::shared_ptr<const void> owner,
                llvm::StringRef path)
      : reader(reader), bytes(bytes), owner(std::move(owner)), path(path) {}

  llvm::Error read(llvm::StringRef dir, const std::string &configRecord,
                   llvm::StringRef what, std::vector<Pt2Tensor> &out) {
    if (!reader.hasRecord(configRecord))
      return fail(path, "the archive has no " + configRecord);
    auto config =
        parseJSON(path, configRecord, readString(reader, configRecord));
    if (!config)
      return config.takeError();
    if (!config->is_object() || !config->contains("config") ||
        !(*config)["config"].is_object())
      return fail(path, configRecord + " has no \"config\" object");
    for (auto &[fqn, entry] : (*config)["config"].items()) {
      auto tensor = readEntry(dir, configRecord, what, fqn, entry);
      if (!tensor)
        return tensor.takeError();
      out.push_back(std::move(*tensor));
    }
    return llvm::Error::success();
  }

private:
  llvm::Expected<Pt2Tensor> readEntry(llvm::StringRef dir,
                                      const std::string &configRecord,
                                      llvm::StringRef what,
                                      const std::string &fqn,
                                      const nlohmann::json &entry) {
    std::string label = (what + " '" + fqn + "'").str();
    schema::PayloadMeta meta;
    try {
      meta = entry.get<schema::PayloadMeta>();
    } catch (const std::exception &e) {
      return fail(path, configRecord + ": " + label +
                            " does not match the schema: " + e.what());
    }
    if (fqn.empty() ||
        llvm::any_of(llvm::split(fqn, '.'),
                     [](llvm::StringRef p) { return p.empty(); }))
      return fail(path, label + " is not a dotted name");
    if (meta.get_use_pickle())
      return fail(path, label + " is pickled (a tensor subclass or a script "
                                "object), which ppc does not read");
    if (!meta.get_tensor_meta())
      return fail(path, label + " has no tensor_meta");
    const schema::TensorMeta &tm = *meta.get_tensor_meta();
    const std::string &file = meta.get_path_name();
    if (file.empty() || llvm::StringRef(file).contains('/') ||
        llvm::StringRef(file).contains(".."))
      return fail(path, label + " names the file '" + file +
                            "', which is not a plain record name");
    auto dtype = torchScalarType(tm.get_dtype());
    if (!dtype)
      return fail(path, llvm::formatv("{0} has dtype {1}, which ppc does not "
                                      "read",
                                      label, static_cast<int>(tm.get_dtype())));
    if (tm.get_layout() != schema::Layout::Strided)
      return fail(path, label + " is not a strided (dense) tensor");
    auto sizes = staticInts(tm.get_sizes());
    auto strides = staticInts(tm.get_strides());
    if (!sizes || !strides ||
        tm.get_storage_offset().tag() != schema::SymInt::Tag::AS_INT)
      return fail(path, label + " has symbolic sizes");
    int64_t offset = tm.get_storage_offset().get_as_int();
    auto reached = elementsReached(*sizes, *strides, offset);
    if (!reached)
      return fail(path, label + " has negative or overflowing sizes, strides "
                                "or offset");
    std::string record = (dir + file).str();
    if (!reader.hasRecord(record))
      return fail(path, label + "'s data " + record + " is missing");
    size_t elementSize = c10::elementSize(*dtype);
    size_t bytes = reader.getRecordSize(record);
    // A program exported on the meta device (torch.device("meta"),
    // accelerate.init_empty_weights()) records the weight's shape and dtype
    // and no bytes; every such weight names the same empty record, so each
    // FQN gets a tensor of its own (the archive cannot say which share one).
    if (tm.get_device().get_type() == "meta") {
      if (bytes != 0)
        return fail(path, llvm::formatv("{0} is on the meta device, but its "
                                        "data {1} holds {2} bytes",
                                        label, record, bytes));
      at::Tensor empty = at::empty_strided(
          *sizes, *strides,
          at::TensorOptions().dtype(*dtype).device(at::kMeta));
      if (meta.get_is_param() && tm.get_requires_grad())
        empty.requires_grad_(true);
      return Pt2Tensor{fqn, empty, meta.get_is_param()};
    }
    int64_t needed;
    if (__builtin_mul_overflow(*reached, static_cast<int64_t>(elementSize),
                               &needed) ||
        static_cast<uint64_t>(needed) > bytes)
      return fail(path, llvm::formatv("{0}'s data {1} holds {2} bytes, but its "
                                      "config ({3} {4}) needs {5}",
                                      label, record, bytes, dtypeName(*dtype),
                                      shapeText(*sizes),
                                      needed > 0 ? std::to_string(needed)
                                                 : std::string("more")));
    at::Tensor storage = storageOf(record, *dtype, bytes / elementSize);
    // One tensor per (storage, view): the FQNs of a tied weight share it.
    auto key = std::make_tuple(record, *sizes, *strides, offset, *dtype);
    auto [it, fresh] = views.try_emplace(key);
    if (fresh) {
      it->second = storage.as_strided(*sizes, *strides, offset);
      if (meta.get_is_param() && tm.get_requires_grad())
        it->second.requires_grad_(true);
    }
    return Pt2Tensor{fqn, it->second, meta.get_is_param()};
  }

  /// The record's elements as a flat tensor, made once per record: the
  /// archive's own bytes in place where they can be, a copy otherwise.
  at::Tensor storageOf(const std::string &record, c10::ScalarType dtype,
                       size_t numel) {
    auto key = std::make_pair(record, dtype);
    if (auto it = storages.find(key); it != storages.end())
      return it->second;
    std::optional<llvm::StringRef> stored = storedBytes(record);
    if (owner && stored && canViewInPlace(*stored, dtype)) {
      at::Tensor flat = viewInPlace(*stored, dtype, owner)
                            .narrow(0, 0, static_cast<int64_t>(numel));
      storages.emplace(key, flat);
      return flat;
    }
    // Inflated straight into the tensor (no second copy); a trailing
    // partial element is read but lies outside the flat view.
    size_t elementSize = c10::elementSize(dtype);
    size_t bytes = reader.getRecordSize(record);
    at::Tensor whole = at::empty(
        {static_cast<int64_t>((bytes + elementSize - 1) / elementSize)},
        at::TensorOptions().dtype(dtype));
    if (bytes > 0)
      reader.getRecord(record, whole.data_ptr(), bytes);
    at::Tensor flat = whole.narrow(0, 0, static_cast<int64_t>(numel));
    storages.emplace(key, flat);
    return flat;
  }

  /// The bytes of `record` when the archive stores it uncompressed (as
  /// PyTorch writes every record) wholly inside itself; nullopt for a
  /// deflated record, which the reader inflates.
  std::optional<llvm::StringRef> storedBytes(const std::string &record) {
    auto little = [&](size_t at, unsigned width) {
      uint32_t v = 0;
      for (unsigned i = 0; i < width; ++i)
        v |= uint32_t(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
      return v;
    };
    // The local header: signature, then the compression method at 8.
    size_t header = reader.getRecordHeaderOffset(record);
    if (header > bytes.size() || bytes.size() - header < 30 ||
        little(header, 4) != 0x04034b50 || little(header + 8, 2) != 0)
      return std::nullopt;
    size_t offset = reader.getRecordOffset(record);
    size_t size = reader.getRecordSize(record);
    if (offset > bytes.size() || bytes.size() - offset < size)
      return std::nullopt;
    return bytes.substr(offset, size);
  }

  caffe2::serialize::PyTorchStreamReader &reader;
  /// The archive, and what keeps it alive for tensors that view it in place
  /// (null: every tensor is a copy).
  llvm::StringRef bytes;
  std::shared_ptr<const void> owner;
  llvm::StringRef path;
  std::map<std::pair<std::string, c10::ScalarType>, at::Tensor> storages;
  std::map<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>,
                      int64_t, c10::ScalarType>,
           at::Tensor>
      views;
};

llvm::Expected<Pt2Program> read(llvm::StringRef bytes, llvm::StringRef path,
                                std::shared_ptr<const void> owner) {
  if (llvm::Error err = checkZipInflation(bytes))
    return fail(path, llvm::toString(std::move(err)));
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::vector<std::string> records;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(
        makeArchiveReader(bytes));
    records = reader->getAllRecords();
  } catch (const std::exception &e) {
    return fail(path, llvm::StringRef("is not a readable zip archive: ") +
                          firstLine(e.what()));
  }
  if (!reader->hasRecord("archive_format") ||
      llvm::StringRef(readString(*reader, "archive_format")).trim() != "pt2")
    return fail(path, "is not a torch.export archive (no archive_format "
                      "'pt2')");
  std::string version =
      llvm::StringRef(reader->hasRecord("archive_version")
                          ? readString(*reader, "archive_version")
                          : std::string("(none)"))
          .trim()
          .str();
  if (version != kArchiveVersion)
    return fail(path, llvm::formatv("archive version '{0}' is not one ppc "
                                    "reads ({1}, as torch.export.save writes)",
                                    version.substr(0, 32), kArchiveVersion));
  std::vector<std::string> models;
  for (llvm::StringRef r : records)
    if (r.consume_front("models/") && r.consume_back(".json") &&
        !r.contains('/'))
      models.push_back(r.str());
  if (models.size() != 1)
    return fail(path, models.empty()
                          ? llvm::Twine("holds no program (models/*.json)")
                          : llvm::Twine("holds ") +
                                std::to_string(models.size()) + " programs (" +
                                llvm::join(models, ", ") +
                                "); ppc reads archives of one");
  Pt2Program out;
  out.name = models[0];
  std::string record = "models/" + out.name + ".json";
  auto json = parseJSON(path, record, readString(*reader, record));
  if (!json)
    return json.takeError();
  out.json = std::move(*json);
  try {
    out.program = out.json.get<schema::ExportedProgram>();
  } catch (const std::exception &e) {
    return fail(path,
                record + " is not an ExportedProgram: " + firstLine(e.what()));
  }
  const schema::SchemaVersion &sv = out.program.get_schema_version();
  if (sv.get_major() != kSchemaMajor)
    return fail(path,
                llvm::formatv("its schema version {0}.{1} is {2} than the "
                              "one ppc reads ({3}.x, torch 2.x's); export it "
                              "with a torch whose schema is {3}.x",
                              sv.get_major(), sv.get_minor(),
                              sv.get_major() > kSchemaMajor ? "newer" : "older",
                              kSchemaMajor));
  if (llvm::Error err = checkRanges(out.program, path))
    return err;
  PayloadReader payloads(*reader, bytes, std::move(owner), path);
  if (llvm::Error err = payloads.read(
          kWeightsDir, (kWeightsDir + out.name + "_weights_config.json").str(),
          "weight", out.weights))
    return err;
  std::string constants =
      (kConstantsDir + out.name + "_constants_config.json").str();
  if (reader->hasRecord(constants))
    if (llvm::Error err =
            payloads.read(kConstantsDir, constants, "constant", out.constants))
      return err;
  return out;
}

/// The bytes of `t`'s whole storage, on the CPU.
at::Tensor storageBytes(const at::Tensor &t) {
  at::Tensor bytes = at::empty({0}, t.options().dtype(at::kByte));
  bytes.set_(t.storage(), 0, {static_cast<int64_t>(t.storage().nbytes())}, {1});
  return bytes.to(at::kCPU);
}

std::vector<schema::SymInt> symInts(c10::IntArrayRef values) {
  std::vector<schema::SymInt> out;
  for (int64_t s : values) {
    schema::SymInt v;
    v.set_as_int(s);
    out.push_back(v);
  }
  return out;
}

/// The payload config and the records of `tensors`: each storage once, as
/// it is (an expanded or strided view keeps its storage and strides, as
/// torch.export.save writes it, rather than growing to its full size).
nlohmann::json writePayloads(caffe2::serialize::PyTorchStreamWriter &writer,
                             llvm::StringRef dir, llvm::StringRef prefix,
                             const std::vector<Pt2Tensor> &tensors) {
  nlohmann::json config = nlohmann::json::object();
  std::map<std::pair<const void *, c10::ScalarType>, std::string> files;
  for (const Pt2Tensor &t : tensors) {
    at::Tensor view = t.tensor.detach();
    auto [it, fresh] = files.try_emplace(
        {view.storage().unsafeGetStorageImpl(), view.scalar_type()},
        prefix.str() + std::to_string(files.size()));
    if (fresh) {
      // A weight without data (exported on meta, or a stage of such a
      // program) is written as torch.export.save writes it: an empty record.
      at::Tensor bytes =
          view.is_meta() ? at::empty({0}, at::kByte) : storageBytes(view);
      writer.writeRecord((dir + it->second).str(), bytes.data_ptr(),
                         bytes.numel());
      // Written: a weight viewed in a mapped archive need not stay
      // resident (ppc split streams a model through a record at a time).
      pageOut(view.storage());
    }
    schema::TensorMeta meta;
    std::vector<schema::SymInt> sizes = symInts(view.sizes());
    std::vector<schema::SymInt> strides = symInts(view.strides());
    schema::SymInt offset;
    offset.set_as_int(view.storage_offset());
    schema::Device device;
    device.set_type(std::string(view.is_meta() ? "meta" : "cpu"));
    meta.set_dtype(*schemaScalarType(view.scalar_type()));
    meta.set_sizes(std::move(sizes));
    meta.set_strides(std::move(strides));
    meta.set_storage_offset(std::move(offset));
    meta.set_requires_grad(t.isParameter && t.tensor.requires_grad());
    meta.set_device(std::move(device));
    meta.set_layout(schema::Layout::Strided);
    schema::PayloadMeta payload;
    payload.set_path_name(it->second);
    payload.set_is_param(t.isParameter);
    payload.set_use_pickle(false);
    payload.set_tensor_meta(std::move(meta));
    config[t.fqn] = payload;
  }
  return nlohmann::json{{"config", std::move(config)}};
}

} // namespace

llvm::StringRef bareSymbol(llvm::StringRef expr) {
  if (expr.consume_front("Symbol('")) {
    if (!expr.endswith(")") || expr.count('(') != 0)
      return {};
    expr = expr.take_until([](char c) { return c == '\''; });
  }
  bool identifier =
      !expr.empty() && !llvm::isDigit(expr.front()) &&
      llvm::all_of(expr, [](char c) { return llvm::isAlnum(c) || c == '_'; });
  return identifier ? expr : llvm::StringRef();
}

std::optional<c10::ScalarType> torchScalarType(schema::ScalarType t) {
  using S = schema::ScalarType;
  switch (t) {
  case S::BYTE:
    return at::kByte;
  case S::CHAR:
    return at::kChar;
  case S::SHORT:
    return at::kShort;
  case S::INT:
    return at::kInt;
  case S::LONG:
    return at::kLong;
  case S::HALF:
    return at::kHalf;
  case S::FLOAT:
    return at::kFloat;
  case S::DOUBLE:
    return at::kDouble;
  case S::COMPLEXHALF:
    return at::kComplexHalf;
  case S::COMPLEXFLOAT:
    return at::kComplexFloat;
  case S::COMPLEXDOUBLE:
    return at::kComplexDouble;
  case S::BOOL:
    return at::kBool;
  case S::BFLOAT16:
    return at::kBFloat16;
  default:
    return std::nullopt;
  }
}

std::optional<schema::ScalarType> schemaScalarType(c10::ScalarType t) {
  using S = schema::ScalarType;
  for (S s : {S::BYTE, S::CHAR, S::SHORT, S::INT, S::LONG, S::HALF, S::FLOAT,
              S::DOUBLE, S::COMPLEXHALF, S::COMPLEXFLOAT, S::COMPLEXDOUBLE,
              S::BOOL, S::BFLOAT16})
    if (torchScalarType(s) == t)
      return s;
  return std::nullopt;
}

llvm::Expected<Pt2Program> readPt2(llvm::StringRef bytes, llvm::StringRef path,
                                   std::shared_ptr<const void> owner) {
  // LibTorch's reader and the schema types throw; every throw is an error
  // about the file.
  try {
    return read(bytes, path, std::move(owner));
  } catch (const std::exception &e) {
    return fail(path, firstLine(e.what()));
  }
}

void writePt2(std::ostream &out, const std::string &name,
              const nlohmann::json &programJson,
              const std::vector<Pt2Tensor> &weights,
              const std::vector<Pt2Tensor> &constants) {
  caffe2::serialize::PyTorchStreamWriter writer(
      [&](const void *data, size_t size) -> size_t {
        out.write(static_cast<const char *>(data),
                  static_cast<std::streamsize>(size));
        return out ? size : 0;
      });
  auto text = [&](const std::string &record, const std::string &value) {
    writer.writeRecord(record, value.data(), value.size());
  };
  text("archive_format", "pt2");
  text("archive_version", kArchiveVersion.str());
  text("byteorder", "little");
  text("models/" + name + ".json", programJson.dump());
  // No example inputs (torch.export.load reads an empty record as none);
  // the record itself must be there.
  text("data/sample_inputs/" + name + ".pt", "");
  text((kWeightsDir + name + "_weights_config.json").str(),
       writePayloads(writer, kWeightsDir, "weight_", weights).dump());
  text((kConstantsDir + name + "_constants_config.json").str(),
       writePayloads(writer, kConstantsDir, "tensor_", constants).dump());
  writer.writeEndOfFile();
  TORCH_CHECK(out.good(), "cannot write the archive");
}

} // namespace ppc::pt2

#endif // PPC_HAVE_PT2
