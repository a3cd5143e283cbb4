//===- lib/Pt2Stage.cpp - The program of one stage ------------------------===//
//
// A stage graph of a lowered program (Pt2Lower.cpp) written back as an
// ExportedProgram:
//
//  - placeholders: the stage's tensors lifted under their FQNs, with the
//    model's placeholder names and kinds (parameter, buffer, constant), then
//    the stage's inputs;
//  - nodes: each aten node in graph order, its arguments named by its
//    schema, constants and lists written inline, the node's name and
//    metadata (nn_module_stack, stack_trace) the model's;
//  - tensor_values and sym_int_values: the model's entries for every value
//    the stage names (all of them are model values: the lowering kept the
//    names), range_constraints the model's;
//  - the in-place copies the lowering made of buffer and input mutations
//    written back as mutation outputs;
//  - the call signature a flat tuple in, a flat tuple out.
//
//===----------------------------------------------------------------------===//
#ifdef PPC_HAVE_PT2

#include "lib/Pt2Program.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <optional>
#include <set>

using torch::jit::Node;
using torch::jit::Value;

namespace ppc::pt2 {

namespace {

using json = nlohmann::json;

json leafSpec() {
  return json{{"type", nullptr},
              {"context", nullptr},
              {"children_spec", json::array()}};
}

json tupleSpec(size_t n) {
  json children = json::array();
  for (size_t i = 0; i < n; ++i)
    children.push_back(leafSpec());
  return json{{"type", "builtins.tuple"},
              {"context", "null"},
              {"children_spec", std::move(children)}};
}

c10::TypePtr unwrapOptional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>())
    return o->getElementType();
  return t;
}

class StageWriter {
public:
  StageWriter(const Pt2Program &model, const torch::jit::Graph &graph,
              const std::vector<Pt2Tensor> &tensors, int index)
      // The walk only reads the graph; its node lists are not const-iterable.
      : model(model), graph(const_cast<torch::jit::Graph &>(graph)),
        tensors(tensors), index(index),
        modelGraph(model.json.at("graph_module").at("graph")) {}

  llvm::Expected<json> run() {
    indexModel();
    if (llvm::Error err = walkAttributes())
      return err;
    json inputs = json::array(), inputSpecs = json::array();
    for (const Pt2Tensor &t : tensors) {
      auto it = liftedByFqn.find(t.fqn);
      if (it == liftedByFqn.end())
        return fail("holds '" + t.fqn + "', which the model does not lift");
      const std::string &name = it->second.first;
      inputs.push_back(json{{"as_tensor", {{"name", name}}}});
      inputSpecs.push_back(it->second.second);
      if (llvm::Error err = noteValue(name))
        return err;
    }
    std::vector<std::string> argNames;
    for (size_t i = 1; i < graph.inputs().size(); ++i) {
      Value *v = graph.inputs()[i];
      auto arg = valueArgument(v);
      if (!arg)
        return arg.takeError();
      inputs.push_back(*arg);
      inputSpecs.push_back(json{{"user_input", {{"arg", *arg}}}});
      argNames.push_back(v->debugName());
    }
    json nodes = json::array();
    for (Node *n : graph.nodes()) {
      auto node = writeNode(n);
      if (!node)
        return node.takeError();
      if (!node->is_null())
        nodes.push_back(std::move(*node));
    }
    Value *ret = graph.outputs().at(0);
    std::vector<Value *> results;
    if (ret->node()->kind() == c10::prim::TupleConstruct)
      results.assign(ret->node()->inputs().begin(),
                     ret->node()->inputs().end());
    else
      results.push_back(ret);
    // Mutations first, as export orders them.
    json outputs = json::array(), outputSpecs = json::array();
    for (const json &m : mutations) {
      outputs.push_back(
          json{{"as_tensor", {{"name", m.begin()->at("arg").at("name")}}}});
      outputSpecs.push_back(m);
    }
    for (Value *v : results) {
      auto arg = valueArgument(v);
      if (!arg)
        return arg.takeError();
      outputs.push_back(*arg);
      outputSpecs.push_back(json{{"user_output", {{"arg", *arg}}}});
    }

    json tables = namedValueTables();
    json in = tupleSpec(2);
    in["children_spec"][0] = tupleSpec(argNames.size());
    in["children_spec"][1] = json{{"type", "builtins.dict"},
                                  {"context", "[]"},
                                  {"children_spec", json::array()}};
    json signature = {
        {"inputs", json::array()},
        {"outputs", json::array()},
        {"in_spec", json::array({1, in}).dump()},
        {"out_spec", json::array({1, tupleSpec(results.size())}).dump()},
        {"forward_arg_names", argNames}};
    json program = {
        {"graph_module",
         {{"graph",
           {{"inputs", inputs},
            {"outputs", outputs},
            {"nodes", nodes},
            {"tensor_values", tables["tensor_values"]},
            {"sym_int_values", tables["sym_int_values"]},
            {"sym_bool_values", tables["sym_bool_values"]},
            {"is_single_tensor_return", false},
            {"custom_obj_values", json::object()},
            {"sym_float_values", json::object()}}},
          {"signature",
           {{"input_specs", inputSpecs}, {"output_specs", outputSpecs}}},
          {"module_call_graph",
           json::array({json{{"fqn", ""}, {"signature", signature}}})},
          {"metadata", json::object()},
          {"treespec_namedtuple_fields", json::object()}}}};
    for (const char *field :
         {"opset_version", "range_constraints", "schema_version", "verifiers",
          "torch_version", "guards_code"})
      if (model.json.contains(field))
        program[field] = model.json[field];
    return program;
  }

private:
  /// The model graph's value tables (tensor, SymInt and SymBool values),
  /// each kept to the values this stage names.
  json namedValueTables() const {
    json tables = json::object();
    for (const char *field :
         {"tensor_values", "sym_int_values", "sym_bool_values"}) {
      json &into = tables[field] = json::object();
      auto table = modelGraph.find(field);
      if (table == modelGraph.end())
        continue;
      for (const std::string &name : named)
        if (table->contains(name))
          into[name] = (*table)[name];
    }
    return tables;
  }

  llvm::Error fail(const llvm::Twine &what) {
    return makeError("stage " + std::to_string(index) + " " + what);
  }

  /// The model's nodes by their outputs' names, and its lifted tensors by
  /// FQN (placeholder name, input spec).
  void indexModel() {
    for (const json &n : modelGraph.at("nodes")) {
      for (const json &out : n.at("outputs")) {
        std::string name;
        if (out.contains("as_tensor"))
          name = out["as_tensor"].value("name", "");
        else if (out.contains("as_sym_int"))
          name = out["as_sym_int"].value("as_name", "");
        else if (out.contains("as_tensors"))
          for (const json &t : out["as_tensors"])
            nodeOfValue[t.value("name", "")] = &n;
        if (!name.empty())
          nodeOfValue[name] = &n;
      }
    }
    const json &specs =
        model.json.at("graph_module").at("signature").at("input_specs");
    for (const json &spec : specs) {
      for (auto [kind, field] :
           {std::pair{"parameter", "parameter_name"},
            std::pair{"buffer", "buffer_name"},
            std::pair{"tensor_constant", "tensor_constant_name"}}) {
        if (!spec.contains(kind))
          continue;
        const json &s = spec[kind];
        liftedByFqn.emplace(s.value(field, ""),
                            std::pair{s.at("arg").value("name", ""), spec});
      }
    }
  }

  /// The FQN of every prim::GetAttr result reading a tensor.
  llvm::Error walkAttributes() {
    std::map<const Value *, std::string> paths{{graph.inputs().at(0), ""}};
    for (Node *n : graph.nodes()) {
      if (n->kind() != c10::prim::GetAttr)
        continue;
      auto base = paths.find(n->input());
      if (base == paths.end())
        return fail("reads an attribute of a value that is not the module");
      const std::string &name = n->s(c10::attr::name);
      std::string fqn = base->second.empty() ? name : base->second + "." + name;
      paths[n->output()] = fqn;
      if (n->output()->type()->isSubtypeOf(*c10::TensorType::get())) {
        auto it = liftedByFqn.find(fqn);
        if (it == liftedByFqn.end())
          return fail("reads '" + fqn + "', which the model does not lift");
        attributeNames[n->output()] = it->second.first;
        attributePaths[n->output()] = fqn;
      }
    }
    return llvm::Error::success();
  }

  /// Records that the program names `name`, which must be a model value.
  llvm::Error noteValue(const std::string &name) {
    if (!named.insert(name).second)
      return llvm::Error::success();
    for (const char *field :
         {"tensor_values", "sym_int_values", "sym_bool_values"}) {
      auto table = modelGraph.find(field);
      if (table != modelGraph.end() && table->contains(name))
        return llvm::Error::success();
    }
    return fail("computes '" + name +
                "', a value the model does not have (a pass changed it)");
  }

  /// The name a value has in the program.
  llvm::Expected<std::string> nameOf(const Value *v) {
    if (auto it = attributeNames.find(v); it != attributeNames.end())
      return it->second;
    if (!v->hasDebugName())
      return fail("computes an unnamed value of node " +
                  std::string(v->node()->kind().toQualString()) +
                  " (a pass made it)");
    std::string name = v->debugName();
    if (llvm::Error err = noteValue(name))
      return err;
    return name;
  }

  /// A non-constant value as an argument by its type.
  llvm::Expected<json> valueArgument(const Value *v) {
    auto name = nameOf(v);
    if (!name)
      return name.takeError();
    c10::TypePtr t = v->type();
    if (t->isSubtypeOf(*c10::TensorType::get()))
      return json{{"as_tensor", {{"name", *name}}}};
    if (t->kind() == c10::TypeKind::IntType)
      return json{{"as_sym_int", {{"as_name", *name}}}};
    if (t->kind() == c10::TypeKind::BoolType)
      return json{{"as_sym_bool", {{"as_name", *name}}}};
    if (t->kind() == c10::TypeKind::FloatType)
      return json{{"as_sym_float", {{"as_name", *name}}}};
    return fail("passes '" + *name + "' of type " + t->repr_str() +
                ", which a program cannot hold");
  }

  llvm::Expected<json> constantArgument(const c10::Argument &formal,
                                        const c10::IValue &iv) {
    c10::TypePtr real = unwrapOptional(formal.real_type());
    if (iv.isNone())
      return json{{"as_none", true}};
    if (iv.isInt()) {
      int64_t i = iv.toInt();
      switch (real->kind()) {
      case c10::TypeKind::ScalarTypeType:
        if (auto s = schemaScalarType(static_cast<c10::ScalarType>(i)))
          return json{{"as_scalar_type", static_cast<int>(*s)}};
        return fail("passes a dtype a program cannot hold");
      case c10::TypeKind::LayoutType:
        return json{{"as_layout", static_cast<int>(schema::Layout::Strided)}};
      case c10::TypeKind::MemoryFormatType: {
        schema::MemoryFormat f = schema::MemoryFormat::ContiguousFormat;
        switch (static_cast<c10::MemoryFormat>(i)) {
        case c10::MemoryFormat::Preserve:
          f = schema::MemoryFormat::PreserveFormat;
          break;
        case c10::MemoryFormat::ChannelsLast:
          f = schema::MemoryFormat::ChannelsLast;
          break;
        case c10::MemoryFormat::ChannelsLast3d:
          f = schema::MemoryFormat::ChannelsLast3d;
          break;
        default:
          break;
        }
        return json{{"as_memory_format", static_cast<int>(f)}};
      }
      default:
        return json{{"as_int", i}};
      }
    }
    if (iv.isDouble())
      return json{{"as_float", iv.toDouble()}};
    if (iv.isBool())
      return json{{"as_bool", iv.toBool()}};
    if (iv.isString())
      return json{{"as_string", iv.toStringRef()}};
    if (iv.isIntList())
      return json{{"as_ints", iv.toIntVector()}};
    if (iv.isDoubleList())
      return json{{"as_floats", iv.toDoubleVector()}};
    if (iv.isBoolList()) {
      std::vector<bool> b;
      for (bool x : iv.toBoolList())
        b.push_back(x);
      return json{{"as_bools", b}};
    }
    if (iv.isDevice()) {
      c10::Device d = iv.toDevice();
      json index = nullptr;
      if (d.has_index())
        index = d.index();
      return json{
          {"as_device",
           {{"type", c10::DeviceTypeName(d.type(), /*lower_case=*/true)},
            {"index", index}}}};
    }
    return fail("passes a constant " + iv.tagKind() + " to argument '" +
                formal.name() +
                "', which a program cannot hold (a pass folded it)");
  }

  llvm::Expected<json> argument(const c10::Argument &formal, Value *v) {
    if (auto iv = torch::jit::toIValue(v))
      return constantArgument(formal, *iv);
    if (v->node()->kind() == c10::prim::ListConstruct) {
      auto elem = v->type()->expectRef<c10::ListType>().getElementType();
      json items = json::array();
      for (Value *e : v->node()->inputs()) {
        auto c = torch::jit::toIValue(e);
        if (elem->kind() == c10::TypeKind::IntType) {
          if (c) {
            items.push_back(json{{"as_int", c->toInt()}});
            continue;
          }
          auto name = nameOf(e);
          if (!name)
            return name.takeError();
          items.push_back(json{{"as_name", *name}});
        } else if (unwrapOptional(elem)->isSubtypeOf(*c10::TensorType::get())) {
          if (c && c->isNone()) {
            items.push_back(json{{"as_none", true}});
            continue;
          }
          auto name = nameOf(e);
          if (!name)
            return name.takeError();
          items.push_back(elem->kind() == c10::TypeKind::OptionalType
                              ? json{{"as_tensor", {{"name", *name}}}}
                              : json{{"name", *name}});
        } else {
          return fail("passes a list of " + elem->repr_str() +
                      ", which ppc does not write");
        }
      }
      if (elem->kind() == c10::TypeKind::IntType)
        return json{{"as_sym_ints", items}};
      if (elem->kind() == c10::TypeKind::OptionalType)
        return json{{"as_optional_tensors", items}};
      return json{{"as_tensors", items}};
    }
    return valueArgument(v);
  }

  /// The output spec (buffer_mutation or user_input_mutation) of a copy the
  /// lowering made of one (an aten::copy_ into a buffer or an input whose
  /// result is unnamed and unused; a program's own copy_ nodes are named),
  /// or nullopt for every other node.
  std::optional<llvm::Expected<json>> mutationOf(Node *n) {
    if (n->kind() != c10::aten::copy_ || n->inputs().size() < 2 ||
        n->output()->hasDebugName() || !n->output()->uses().empty())
      return std::nullopt;
    Value *into = n->input(0);
    bool isInput = into->node()->kind() == c10::prim::Param;
    if (!isInput && !attributeNames.count(into))
      return std::nullopt;
    auto value = nameOf(n->input(1));
    if (!value)
      return value.takeError();
    json arg = {{"name", *value}};
    if (isInput)
      return json{{"user_input_mutation",
                   {{"arg", arg}, {"user_input_name", into->debugName()}}}};
    return json{{"buffer_mutation",
                 {{"arg", arg}, {"buffer_name", attributePaths.at(into)}}}};
  }

  /// One node as the program's, or null for what is written inline.
  llvm::Expected<json> writeNode(Node *n) {
    c10::Symbol kind = n->kind();
    if (kind == c10::prim::Constant || kind == c10::prim::GetAttr ||
        kind == c10::prim::ListConstruct || kind == c10::prim::ListUnpack)
      return json();
    if (kind == c10::prim::TupleConstruct && n->outputs().size() == 1 &&
        n->output()->uses().size() == 1 &&
        n->output()->uses()[0].user == graph.return_node())
      return json();
    if (auto mutation = mutationOf(n)) {
      if (!*mutation)
        return mutation->takeError();
      mutations.push_back(std::move(**mutation));
      return json();
    }
    const c10::FunctionSchema *s = n->maybeSchema();
    if (!s)
      return fail(std::string("has a ") + kind.toQualString() +
                  " node, which a program cannot hold");
    std::string qualified =
        s->name() +
        (s->overload_name().empty() ? "" : "." + s->overload_name());
    std::string target;
    const auto *symInt = llvm::find_if(
        kSymIntOps, [&](const SymIntOp &o) { return o.jit == qualified; });
    if (symInt != std::end(kSymIntOps)) {
      target = symInt->target.str();
    } else {
      auto [ns, name] = llvm::StringRef(s->name()).split("::");
      target = ("torch.ops." + ns + "." + name + "." +
                (s->overload_name().empty() ? "default" : s->overload_name()))
                   .str();
    }
    json inputs = json::array();
    for (size_t i = 0; i < s->arguments().size(); ++i) {
      const c10::Argument &formal = s->arguments()[i];
      auto arg = argument(formal, n->input(i));
      if (!arg)
        return arg.takeError();
      inputs.push_back(json{{"name", formal.name()},
                            {"arg", *arg},
                            {"kind", formal.kwarg_only() ? 2 : 1}});
    }
    json outputs = json::array();
    for (Value *out : n->outputs()) {
      if (out->type()->cast<c10::ListType>()) {
        const auto &uses = out->uses();
        if (uses.size() != 1 || uses[0].user->kind() != c10::prim::ListUnpack)
          return fail("uses the list result of " + target +
                      " other than by unpacking it");
        json items = json::array();
        for (Value *item : uses[0].user->outputs()) {
          auto name = nameOf(item);
          if (!name)
            return name.takeError();
          items.push_back(json{{"name", *name}});
        }
        outputs.push_back(json{{"as_tensors", items}});
        continue;
      }
      if (!out->hasDebugName() && out->uses().empty()) {
        outputs.push_back(json{{"as_none", true}});
        continue;
      }
      auto arg = valueArgument(out);
      if (!arg)
        return arg.takeError();
      outputs.push_back(*arg);
    }
    std::string name;
    json metadata = json::object();
    if (!n->outputs().empty() && n->output(0)->hasDebugName()) {
      auto it = nodeOfValue.find(n->output(0)->debugName());
      if (it != nodeOfValue.end()) {
        name = it->second->value("name", "");
        metadata = it->second->value("metadata", json::object());
      }
    }
    if (name.empty())
      name = "ppc_node_" + std::to_string(unnamed++);
    return json{{"target", target},
                {"inputs", inputs},
                {"outputs", outputs},
                {"metadata", metadata},
                {"is_hop_single_tensor_return", nullptr},
                {"name", name}};
  }

  const Pt2Program &model;
  torch::jit::Graph &graph;
  const std::vector<Pt2Tensor> &tensors;
  int index;
  const json &modelGraph;
  std::map<std::string, const json *> nodeOfValue;
  std::map<std::string, std::pair<std::string, json>> liftedByFqn;
  std::map<const Value *, std::string> attributeNames, attributePaths;
  std::vector<json> mutations;
  std::set<std::string> named;
  int unnamed = 0;
};

} // namespace

llvm::Expected<json> stageProgram(const Pt2Program &model,
                                  const torch::jit::Graph &graph,
                                  const std::vector<Pt2Tensor> &tensors,
                                  int index) {
  try {
    return StageWriter(model, graph, tensors, index).run();
  } catch (const std::exception &e) {
    return makeError("cannot write stage " + std::to_string(index) +
                     "'s program: " + firstLine(e.what()));
  }
}

} // namespace ppc::pt2

#endif // PPC_HAVE_PT2
