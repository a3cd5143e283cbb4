//===- lib/Pt2Lower.cpp - Lowering a .pt2 program into ppc's graph --------===//
//
// One pass over the program, in its node order:
//
//  1. The module: every weight and constant registered under its FQN (a
//     submodule per dotted prefix), tied FQNs sharing one tensor.
//  2. Inputs: the lifted parameters, buffers and constants of input_specs
//     become prim::GetAttr chains from `self` (emitted at first use), user
//     inputs graph inputs (keyword inputs too, after the positional ones, in
//     the signature's order, under their names), constant inputs constants.
//  3. Nodes: each names an operator overload ("torch.ops.aten.add.Tensor")
//     that LibTorch's JIT operator registry resolves; its named arguments
//     are placed by the overload's schema (absent ones take the schema's
//     defaults) and become values, constants or prim::ListConstructs; list
//     results are unpacked. SymInt arithmetic (`_operator.mul`) becomes the
//     JIT's int ops, so symbolic sizes are computed from the real inputs
//     and a dynamic batch dimension follows the microbatch.
//  4. Outputs: buffer and user-input mutations become in-place copies,
//     placed after the last read of the old value; the user outputs are
//     returned as the module returned them (a tensor or a tuple; out_spec of
//     module_call_graph).
//
// Every value and node keeps its program name as its debug name, which is
// how Pt2Stage.cpp finds a stage's nodes and values in the program again.
//
//===----------------------------------------------------------------------===//
#ifdef PPC_HAVE_PT2

#include "lib/Pt2Program.h"

#include "lib/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <map>

using torch::jit::Graph;
using torch::jit::Module;
using torch::jit::Node;
using torch::jit::Value;

namespace ppc::pt2 {

namespace {

using Tag = schema::Argument::Tag;

/// The JIT operator for "ns::name.overload" ("" overload: the default).
std::shared_ptr<torch::jit::Operator>
findOperator(const std::string &name, const std::string &overload) {
  for (const auto &op :
       torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name)))
    if (op->schema().overload_name() == overload)
      return op;
  return nullptr;
}

std::optional<c10::MemoryFormat> memoryFormat(schema::MemoryFormat f) {
  switch (f) {
  case schema::MemoryFormat::ContiguousFormat:
    return c10::MemoryFormat::Contiguous;
  case schema::MemoryFormat::ChannelsLast:
    return c10::MemoryFormat::ChannelsLast;
  case schema::MemoryFormat::ChannelsLast3d:
    return c10::MemoryFormat::ChannelsLast3d;
  case schema::MemoryFormat::PreserveFormat:
    return c10::MemoryFormat::Preserve;
  default:
    return std::nullopt;
  }
}

/// A pytree spec (module_call_graph's in_spec/out_spec, JSON in a string:
/// [version, {"type", "context", "children_spec"}]).
struct Spec {
  std::string type;    // "" for a leaf
  std::string context; // a dict's keys, a ModelOutput's fields (JSON text)
  std::vector<Spec> children;
};

std::optional<Spec> parseSpec(const nlohmann::json &j, unsigned depth = 0) {
  if (!j.is_object() || depth > 64)
    return std::nullopt;
  Spec s;
  auto type = j.find("type");
  if (type != j.end() && type->is_string())
    s.type = type->get<std::string>();
  auto context = j.find("context");
  if (context != j.end() && context->is_string())
    s.context = context->get<std::string>();
  auto children = j.find("children_spec");
  if (children != j.end() && children->is_array())
    for (const auto &c : *children) {
      auto child = parseSpec(c, depth + 1);
      if (!child)
        return std::nullopt;
      s.children.push_back(std::move(*child));
    }
  return s;
}

std::optional<Spec> parseSpecText(const std::string &text) {
  try {
    auto j = nlohmann::json::parse(text);
    if (!j.is_array() || j.size() != 2)
      return std::nullopt;
    return parseSpec(j[1]);
  } catch (const nlohmann::json::exception &) {
    return std::nullopt;
  }
}

bool allLeaves(const Spec &s) {
  return llvm::all_of(s.children, [](const Spec &c) { return c.type.empty(); });
}

/// Whether a spec of type `type` returns its leaves by position alone (a
/// tuple, list or namedtuple); a dict or a ModelOutput names them.
bool positional(const std::string &type) {
  return type.empty() || type == "builtins.tuple" || type == "builtins.list" ||
         type == "collections.namedtuple";
}

/// The keys a dict or ModelOutput spec names, printable and comma-separated
/// ("logits, past_key_values"); "" when its context is no list of strings.
std::string specKeys(const Spec &s) {
  try {
    auto j = nlohmann::json::parse(s.context);
    std::vector<std::string> keys;
    if (!j.is_array())
      return "";
    for (const auto &key : j) {
      if (!key.is_string())
        return "";
      keys.push_back(printable(key.get<std::string>(), 32));
      if (keys.size() == 8 && j.size() > 8) {
        keys.push_back("...");
        break;
      }
    }
    return llvm::join(keys, ", ");
  } catch (const nlohmann::json::exception &) {
    return "";
  }
}

class Lowering {
public:
  Lowering(const Pt2Program &program, llvm::StringRef path)
      : program(program), path(path),
        cu(std::make_shared<torch::jit::CompilationUnit>()),
        graph(std::make_shared<Graph>()) {}

  llvm::Expected<Lowered> run() {
    if (llvm::Error err = buildModule())
      return err;
    self = graph->addInput("self");
    self->setType(module("").type());
    if (llvm::Error err = lowerInputs())
      return err;
    const auto &nodes =
        program.program.get_graph_module().get_graph().get_nodes();
    for (const schema::Node &n : nodes)
      if (llvm::Error err = lowerNode(n))
        return err;
    if (llvm::Error err = lowerOutputs())
      return err;
    Module root = module("");
    auto fn = cu->create_function(
        c10::QualifiedName(*root.type()->name(), "forward"), graph->copy());
    root.type()->addMethod(fn);
    return Lowered{root, graph};
  }

private:
  llvm::Error fail(const llvm::Twine &what) {
    return makeError("'" + path + "': " + what);
  }
  llvm::Error failNode(const schema::Node &n, const llvm::Twine &what) {
    return fail("node '" + n.get_name().value_or("?") + "' (" + n.get_target() +
                "): " + what);
  }

  /// The module at dotted `prefix`, created with its parents.
  Module module(const std::string &prefix) {
    if (auto it = modules.find(prefix); it != modules.end())
      return it->second;
    std::string className = "__torch__.ppc.pt2.Model";
    if (!prefix.empty()) {
      std::string sanitized = prefix;
      for (char &c : sanitized)
        if (!isalnum(static_cast<unsigned char>(c)))
          c = '_';
      className += ".m_" + sanitized;
    }
    auto type = c10::ClassType::create(c10::QualifiedName(className), cu,
                                       /*is_module=*/true);
    cu->register_type(type);
    Module m(cu, type);
    m.register_attribute("training", c10::BoolType::get(), false);
    if (!prefix.empty()) {
      size_t dot = prefix.rfind('.');
      std::string parent =
          dot == std::string::npos ? "" : prefix.substr(0, dot);
      module(parent).register_module(prefix.substr(dot + 1), m);
    }
    modules.emplace(prefix, m);
    return m;
  }

  /// Step 1.
  llvm::Error buildModule() {
    auto add = [&](const Pt2Tensor &t, int kind) -> llvm::Error {
      size_t dot = t.fqn.rfind('.');
      std::string prefix = dot == std::string::npos ? "" : t.fqn.substr(0, dot);
      std::string name = t.fqn.substr(dot + 1);
      if (modules.count(t.fqn) || leaves.count(prefix) || leaves.count(t.fqn) ||
          name == "training")
        return fail("weight '" + t.fqn + "' clashes with another name");
      leaves.insert(t.fqn);
      Module m = module(prefix);
      if (kind == 0)
        m.register_parameter(name, t.tensor, /*is_buffer=*/false);
      else if (kind == 1)
        m.register_buffer(name, t.tensor);
      else
        m.register_attribute(name, c10::TensorType::get(), t.tensor);
      return llvm::Error::success();
    };
    for (const Pt2Tensor &t : program.weights)
      if (llvm::Error err = add(t, t.isParameter ? 0 : 1))
        return err;
    for (const Pt2Tensor &t : program.constants)
      if (llvm::Error err = add(t, 2))
        return err;
    return llvm::Error::success();
  }

  /// The GetAttr chain for `fqn` (emitted at first use, where the graph's
  /// insertion point is).
  Value *attribute(const std::string &fqn) {
    if (auto it = attributes.find(fqn); it != attributes.end())
      return it->second;
    size_t dot = fqn.rfind('.');
    Value *base =
        dot == std::string::npos ? self : attribute(fqn.substr(0, dot));
    Value *v = graph->insertGetAttr(base, fqn.substr(dot + 1));
    attributes.emplace(fqn, v);
    return v;
  }

  llvm::Error define(const std::string &name, Value *v) {
    if (name.empty() || llvm::all_of(name, ::isdigit) ||
        llvm::StringRef(name).contains('.'))
      return fail("the value name '" + name + "' is not an identifier");
    if (!defined.insert(name).second)
      return fail("value '" + name + "' is defined twice");
    values[name] = v;
    if (v->node()->kind() != c10::prim::Constant)
      v->setDebugName(name);
    return llvm::Error::success();
  }

  /// Step 2.
  llvm::Error lowerInputs() {
    const auto &specs =
        program.program.get_graph_module().get_signature().get_input_specs();
    const auto &inputs =
        program.program.get_graph_module().get_graph().get_inputs();
    if (specs.size() != inputs.size())
      return fail(llvm::formatv("the signature has {0} inputs, the graph {1}",
                                specs.size(), inputs.size()));
    std::set<std::string> fqns;
    for (const Pt2Tensor &t : program.weights)
      fqns.insert(t.fqn);
    for (const Pt2Tensor &t : program.constants)
      fqns.insert(t.fqn);
    using S = schema::InputSpec::Tag;
    for (const schema::InputSpec &spec : specs) {
      switch (spec.tag()) {
      case S::USER_INPUT: {
        // Tensors, and the symbolic ints a stage program takes from an
        // earlier stage.
        const schema::Argument &a = spec.get_user_input().get_arg();
        bool isInt =
            a.tag() == Tag::AS_SYM_INT &&
            a.get_as_sym_int().tag() == schema::SymIntArgument::Tag::AS_NAME;
        if (a.tag() != Tag::AS_TENSOR && !isInt)
          return fail("a user input is not a tensor; ppc lowers tensor "
                      "inputs only");
        const std::string &name = isInt ? a.get_as_sym_int().get_as_name()
                                        : a.get_as_tensor().get_name();
        Value *v = graph->addInput();
        v->setType(isInt ? c10::TypePtr(c10::IntType::get())
                         : c10::TypePtr(c10::TensorType::get()));
        if (llvm::Error err = define(name, v))
          return err;
        userInputs.push_back(v);
        break;
      }
      case S::PARAMETER:
      case S::BUFFER:
      case S::TENSOR_CONSTANT: {
        std::string name, fqn;
        if (spec.tag() == S::PARAMETER) {
          name = spec.get_parameter().get_arg().get_name();
          fqn = spec.get_parameter().get_parameter_name();
        } else if (spec.tag() == S::BUFFER) {
          name = spec.get_buffer().get_arg().get_name();
          fqn = spec.get_buffer().get_buffer_name();
        } else {
          name = spec.get_tensor_constant().get_arg().get_name();
          fqn = spec.get_tensor_constant().get_tensor_constant_name();
        }
        if (!fqns.count(fqn))
          return fail("input '" + name + "' lifts '" + fqn +
                      "', which the archive's weights and constants lack");
        if (!defined.insert(name).second)
          return fail("value '" + name + "' is defined twice");
        lifted[name] = fqn;
        break;
      }
      case S::CONSTANT_INPUT: {
        const auto &c = spec.get_constant_input();
        const schema::ConstantValue &value = c.get_value();
        c10::IValue iv;
        using C = schema::ConstantValue::Tag;
        switch (value.tag()) {
        case C::AS_INT:
          iv = value.get_as_int();
          break;
        case C::AS_FLOAT:
          iv = value.get_as_float().get();
          break;
        case C::AS_STRING:
          iv = value.get_as_string();
          break;
        case C::AS_BOOL:
          iv = value.get_as_bool();
          break;
        default:
          break; // None
        }
        if (llvm::Error err = define(c.get_name(), graph->insertConstant(iv)))
          return err;
        break;
      }
      default:
        return fail("its signature has an input of a kind ppc does not lower "
                    "(a script object or an effect token)");
      }
    }
    if (auto spec = callSpec(/*out=*/false)) {
      // (args tuple, kwargs dict)
      if (spec->children.size() == 2 && !allLeaves(spec->children[1]))
        return fail("it takes nested keyword inputs (a list, tuple or dict "
                    "of tensors); ppc takes tensors");
      if (spec->children.size() == 2 && !allLeaves(spec->children[0]))
        return fail("it takes nested inputs (a list, tuple or dict of "
                    "tensors); ppc takes tensors");
    }
    return llvm::Error::success();
  }

  std::optional<Spec> callSpec(bool out) {
    const auto &entries =
        program.program.get_graph_module().get_module_call_graph();
    if (entries.empty() || !entries[0].get_signature())
      return std::nullopt;
    const auto &sig = *entries[0].get_signature();
    return parseSpecText(out ? sig.get_out_spec() : sig.get_in_spec());
  }

  llvm::Expected<Value *> lookup(const schema::Node &n,
                                 const std::string &name) {
    if (auto it = lifted.find(name); it != lifted.end())
      return attribute(it->second);
    auto it = values.find(name);
    if (it == values.end())
      return failNode(n, "uses '" + name + "', which is not defined before it");
    return it->second;
  }

  template <typename T, typename Get>
  llvm::Expected<Value *> list(const schema::Node &n,
                               const std::vector<T> &items, c10::TypePtr elem,
                               Get get) {
    std::vector<Value *> elements;
    for (const T &item : items) {
      auto v = get(item);
      if (!v)
        return v.takeError();
      elements.push_back(*v);
    }
    return graph->insertNode(graph->createList(elem, elements))->output();
  }

  llvm::Expected<Value *> symInt(const schema::Node &n,
                                 const schema::SymIntArgument &a) {
    if (a.tag() == schema::SymIntArgument::Tag::AS_INT)
      return graph->insertConstant(a.get_as_int());
    return lookup(n, a.get_as_name());
  }

  /// One argument as a value.
  llvm::Expected<Value *> argument(const schema::Node &n,
                                   const std::string &name,
                                   const schema::Argument &a) {
    switch (a.tag()) {
    case Tag::AS_NONE:
      (void)a.get_as_none(); // an unknown kind throws here
      return graph->insertConstant(c10::IValue());
    case Tag::AS_TENSOR:
      return lookup(n, a.get_as_tensor().get_name());
    case Tag::AS_TENSORS:
      return list(n, a.get_as_tensors(), c10::TensorType::get(),
                  [&](const schema::TensorArgument &t) {
                    return lookup(n, t.get_name());
                  });
    case Tag::AS_OPTIONAL_TENSOR:
    case Tag::AS_OPTIONAL_TENSORS: {
      auto one = [&](const schema::OptionalTensorArgument &t)
          -> llvm::Expected<Value *> {
        if (t.tag() == schema::OptionalTensorArgument::Tag::AS_TENSOR)
          return lookup(n, t.get_as_tensor().get_name());
        return graph->insertConstant(c10::IValue());
      };
      if (a.tag() == Tag::AS_OPTIONAL_TENSOR)
        return one(a.get_as_optional_tensor());
      return list(n, a.get_as_optional_tensors(), c10::OptionalType::ofTensor(),
                  one);
    }
    case Tag::AS_INT:
      return graph->insertConstant(a.get_as_int());
    case Tag::AS_INTS:
      return graph->insertConstant(a.get_as_ints());
    case Tag::AS_FLOAT:
      return graph->insertConstant(a.get_as_float().get());
    case Tag::AS_FLOATS: {
      std::vector<double> v;
      for (const auto &f : a.get_as_floats())
        v.push_back(f.get());
      return graph->insertConstant(v);
    }
    case Tag::AS_BOOL:
      return graph->insertConstant(a.get_as_bool());
    case Tag::AS_BOOLS: {
      c10::List<bool> v;
      for (bool b : a.get_as_bools())
        v.push_back(b);
      return graph->insertConstant(v);
    }
    case Tag::AS_STRING:
      return graph->insertConstant(a.get_as_string());
    case Tag::AS_SYM_INT:
      return symInt(n, a.get_as_sym_int());
    case Tag::AS_SYM_INTS: {
      const auto &items = a.get_as_sym_ints();
      if (llvm::all_of(items, [](const schema::SymIntArgument &s) {
            return s.tag() == schema::SymIntArgument::Tag::AS_INT;
          })) {
        std::vector<int64_t> v;
        for (const auto &s : items)
          v.push_back(s.get_as_int());
        return graph->insertConstant(v);
      }
      return list(
          n, items, c10::IntType::get(),
          [&](const schema::SymIntArgument &s) { return symInt(n, s); });
    }
    case Tag::AS_SYM_BOOL: {
      const auto &b = a.get_as_sym_bool();
      if (b.tag() == schema::SymBoolArgument::Tag::AS_BOOL)
        return graph->insertConstant(b.get_as_bool());
      return lookup(n, b.get_as_name());
    }
    case Tag::AS_SYM_FLOAT: {
      const auto &f = a.get_as_sym_float();
      if (f.tag() == schema::SymFloatArgument::Tag::AS_FLOAT)
        return graph->insertConstant(f.get_as_float().get());
      return lookup(n, f.get_as_name());
    }
    case Tag::AS_SCALAR_TYPE: {
      auto t = torchScalarType(a.get_as_scalar_type());
      if (!t)
        return failNode(n, "argument '" + name +
                               "' is a dtype ppc does not "
                               "read");
      return graph->insertConstant(static_cast<int64_t>(*t));
    }
    case Tag::AS_MEMORY_FORMAT: {
      auto f = memoryFormat(a.get_as_memory_format());
      if (!f)
        return failNode(n, "argument '" + name +
                               "' is an unknown memory "
                               "format");
      return graph->insertConstant(static_cast<int64_t>(*f));
    }
    case Tag::AS_LAYOUT:
      if (a.get_as_layout() != schema::Layout::Strided)
        return failNode(n,
                        "argument '" + name +
                            "' is a sparse layout, which ppc does not lower");
      return graph->insertConstant(static_cast<int64_t>(c10::kStrided));
    case Tag::AS_DEVICE: {
      const schema::Device &d = a.get_as_device();
      std::string text = d.get_type();
      // A program exported on the meta device moves values to the model's
      // device, meta (`x.to(self.weight.device)`): it runs where its
      // weights are bound, the CPU (docs/weights.md).
      if (text == "meta")
        return graph->insertConstant(c10::Device(c10::kCPU));
      if (d.get_index())
        text += ":" + std::to_string(*d.get_index());
      try {
        return graph->insertConstant(c10::Device(text));
      } catch (const std::exception &) {
        return failNode(n, "argument '" + name + "' names the device '" + text +
                               "', which this LibTorch does not know");
      }
    }
    default:
      return failNode(n, llvm::formatv("argument '{0}' is a {1}, which ppc "
                                       "does not lower",
                                       name, printEnum(a.tag()).data()));
    }
  }

  /// The innermost module path of a node's nn_module_stack metadata
  /// ("KEY,PATH,TYPE;..." outermost first; "" for the root module), as the
  /// scope the TorchScript inliner gives the nodes of a submodule's call,
  /// which --split-at and the manifest's module lists read (ItemGraph).
  /// Entries that name no module path are passed over: Dynamo records a
  /// function called through a global as one
  /// ("G['__import_transformers_dot_...'].apply_rotary_pos_emb"), and its
  /// nodes belong to the module that called it.
  static torch::jit::ScopePtr scopeOf(const schema::Node &n) {
    auto root = c10::make_intrusive<torch::jit::Scope>();
    auto it = n.get_metadata().find("nn_module_stack");
    if (it == n.get_metadata().end())
      return root;
    llvm::SmallVector<llvm::StringRef, 8> entries;
    llvm::StringRef(it->second).split(entries, ';');
    for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
      llvm::SmallVector<llvm::StringRef, 3> fields;
      entry->split(fields, ',');
      if (fields.size() < 3 || fields[1].empty() ||
          fields[1] == "_empty_nn_module_stack_from_metadata_hook")
        return root;
      if (fields[1].find_first_of("[]'\"") != llvm::StringRef::npos)
        continue;
      return root->push(c10::Symbol::scope(fields[1].str()));
    }
    return root;
  }

  /// Step 3.
  llvm::Error lowerNode(const schema::Node &n) {
    torch::jit::WithCurrentScope scope(*graph, scopeOf(n));
    const std::string &target = n.get_target();
    std::shared_ptr<torch::jit::Operator> op;
    bool positional = false;
    const auto *symInt = llvm::find_if(
        kSymIntOps, [&](const SymIntOp &o) { return o.target == target; });
    if (symInt != std::end(kSymIntOps)) {
      auto [name, overload] = symInt->jit.split('.');
      op = findOperator(name.str(), overload.str());
      positional = true;
    } else if (llvm::StringRef t = target; t.consume_front("torch.ops.")) {
      auto [ns, rest] = t.split('.');
      auto [name, overload] = rest.split('.');
      if (!ns.empty() && !name.empty() && !overload.empty() &&
          !overload.contains('.'))
        op = findOperator((ns + "::" + name).str(),
                          overload == "default" ? "" : overload.str());
      if (!op && ns == "higher_order")
        return failNode(n, "is a higher-order operator (control flow, "
                           "checkpointing, ...), which ppc does not lower");
    }
    if (!op)
      return failNode(n, llvm::formatv("is not an operator of this LibTorch "
                                       "{0}",
                                       TORCH_VERSION));
    const c10::FunctionSchema &s = op->schema();
    const auto &given = n.get_inputs();
    std::map<std::string, const schema::NamedArgument *> byName;
    for (size_t i = 0; i < given.size(); ++i) {
      const std::string &name = positional && i < s.arguments().size()
                                    ? s.arguments()[i].name()
                                    : given[i].get_name();
      if (!s.argumentIndexWithName(name))
        return failNode(
            n, "has argument '" + name + "', which " + s.name() +
                   (s.overload_name().empty() ? "" : "." + s.overload_name()) +
                   " does not take");
      if (!byName.emplace(name, &given[i]).second)
        return failNode(n, "has argument '" + name + "' twice");
    }
    std::vector<Value *> inputs;
    for (const c10::Argument &formal : s.arguments()) {
      auto it = byName.find(formal.name());
      if (it == byName.end()) {
        if (!formal.default_value())
          return failNode(n, "lacks argument '" + formal.name() + "'");
        inputs.push_back(graph->insertConstant(*formal.default_value()));
        continue;
      }
      auto v = argument(n, formal.name(), it->second->get_arg());
      if (!v)
        return v.takeError();
      inputs.push_back(*v);
    }
    Node *node = graph->insertNode(graph->create(
        c10::Symbol::fromQualString(s.name()), inputs, s.returns().size()));
    for (size_t i = 0; i < s.returns().size(); ++i)
      node->output(i)->setType(s.returns()[i].type());
    if (!node->maybeOperator())
      return failNode(n, "its arguments do not match " + c10::str(s));
    return lowerResults(n, node);
  }

  llvm::Error lowerResults(const schema::Node &n, Node *node) {
    const auto &outputs = n.get_outputs();
    if (outputs.size() > node->outputs().size())
      return failNode(n, llvm::formatv("has {0} results, its operator {1}",
                                       outputs.size(), node->outputs().size()));
    for (size_t i = 0; i < outputs.size(); ++i) {
      const schema::Argument &a = outputs[i];
      Value *v = node->output(i);
      switch (a.tag()) {
      case Tag::AS_TENSOR:
        if (llvm::Error err = define(a.get_as_tensor().get_name(), v))
          return err;
        break;
      case Tag::AS_SYM_INT:
        if (a.get_as_sym_int().tag() != schema::SymIntArgument::Tag::AS_NAME)
          return failNode(n, "has a constant result");
        if (llvm::Error err = define(a.get_as_sym_int().get_as_name(), v))
          return err;
        break;
      case Tag::AS_SYM_BOOL:
        if (a.get_as_sym_bool().tag() != schema::SymBoolArgument::Tag::AS_NAME)
          return failNode(n, "has a constant result");
        if (llvm::Error err = define(a.get_as_sym_bool().get_as_name(), v))
          return err;
        break;
      case Tag::AS_TENSORS: {
        if (!v->type()->cast<c10::ListType>())
          return failNode(n, "has a list result its operator does not return");
        const auto &items = a.get_as_tensors();
        Node *unpack = graph->insertNode(
            graph->create(c10::prim::ListUnpack, {v}, items.size()));
        for (size_t k = 0; k < items.size(); ++k) {
          unpack->output(k)->setType(c10::TensorType::get());
          if (llvm::Error err = define(items[k].get_name(), unpack->output(k)))
            return err;
        }
        break;
      }
      case Tag::AS_NONE:
        (void)a.get_as_none();
        break;
      default:
        return failNode(n, llvm::formatv("has a result of kind {0}, which ppc "
                                         "does not lower",
                                         printEnum(a.tag()).data()));
      }
    }
    return llvm::Error::success();
  }

  /// Writes `value` into `into` (a buffer or an input) where the program's
  /// functional semantics allow: after `value` is computed and after the
  /// last read of `into`'s old value, so that a cut may fall between a
  /// buffer's update and the end of the model.
  void copyInto(Value *into, Value *value) {
    // Graph inputs are defined by the block's param node, before every node.
    Node *after = graph->param_node();
    for (Node *n : {value->node(), into->node()})
      if (n != graph->param_node() &&
          (after == graph->param_node() || n->isAfter(after)))
        after = n;
    for (const torch::jit::Use &use : into->uses())
      if (after == graph->param_node() || use.user->isAfter(after))
        after = use.user;
    torch::jit::WithInsertPoint point(after->next());
    graph->insert(c10::aten::copy_, {into, value});
  }

  /// Step 4.
  llvm::Error lowerOutputs() {
    const auto &specs =
        program.program.get_graph_module().get_signature().get_output_specs();
    const auto &outputs =
        program.program.get_graph_module().get_graph().get_outputs();
    if (specs.size() != outputs.size())
      return fail(llvm::formatv("the signature has {0} outputs, the graph {1}",
                                specs.size(), outputs.size()));
    std::vector<Value *> results;
    using S = schema::OutputSpec::Tag;
    schema::Node outputNode;
    outputNode.set_name("output");
    outputNode.set_target("output");
    for (size_t i = 0; i < specs.size(); ++i) {
      const schema::OutputSpec &spec = specs[i];
      const schema::Argument &a = outputs[i];
      // Tensors, and the symbolic ints a stage program passes on.
      bool isInt =
          a.tag() == Tag::AS_SYM_INT &&
          a.get_as_sym_int().tag() == schema::SymIntArgument::Tag::AS_NAME;
      if (a.tag() != Tag::AS_TENSOR && !isInt)
        return fail("an output is not a tensor; ppc lowers tensor outputs "
                    "only");
      auto v = lookup(outputNode, isInt ? a.get_as_sym_int().get_as_name()
                                        : a.get_as_tensor().get_name());
      if (!v)
        return v.takeError();
      switch (spec.tag()) {
      case S::USER_OUTPUT:
      case S::LOSS_OUTPUT:
        results.push_back(*v);
        break;
      case S::BUFFER_MUTATION:
      case S::USER_INPUT_MUTATION: {
        Value *into;
        if (spec.tag() == S::BUFFER_MUTATION) {
          const std::string &fqn = spec.get_buffer_mutation().get_buffer_name();
          if (!llvm::is_contained(leaves, fqn))
            return fail("it mutates buffer '" + fqn + "', which it lacks");
          into = attribute(fqn);
        } else {
          auto in = lookup(
              outputNode, spec.get_user_input_mutation().get_user_input_name());
          if (!in)
            return in.takeError();
          into = *in;
        }
        copyInto(into, *v);
        break;
      }
      default:
        return fail("it has gradient, parameter-mutation or token outputs "
                    "(a joint or effectful program); ppc lowers programs "
                    "from torch.export.export");
      }
    }
    auto spec = callSpec(/*out=*/true);
    bool single = spec && spec->type.empty() && results.size() == 1;
    if (spec && !spec->type.empty() && !allLeaves(*spec))
      return fail("it returns a nested " + printable(spec->type) +
                  "; ppc takes a tensor or a flat tuple of tensors");
    // A dict's or ModelOutput's names would be dropped: the stages and the
    // run's output are positional.
    if (spec && !positional(spec->type)) {
      std::string keys = specKeys(*spec);
      return fail("it returns a " + printable(spec->type) +
                  (keys.empty() ? "" : " (" + keys + ")") +
                  ", whose names ppc would drop; return a tensor or a tuple "
                  "(in Python: the field itself, out.logits, or "
                  "tuple(out.values()))");
    }
    if (single) {
      graph->registerOutput(results[0]);
    } else {
      graph->registerOutput(
          graph->insertNode(graph->createTuple(results))->output());
    }
    return llvm::Error::success();
  }

  const Pt2Program &program;
  llvm::StringRef path;
  std::shared_ptr<torch::jit::CompilationUnit> cu;
  std::shared_ptr<Graph> graph;
  Value *self = nullptr;
  std::map<std::string, Module> modules;
  std::set<std::string> leaves;
  std::map<std::string, Value *> attributes;
  /// Placeholder name -> FQN of the lifted tensors.
  std::map<std::string, std::string> lifted;
  std::map<std::string, Value *> values;
  std::set<std::string> defined;
  std::vector<Value *> userInputs;
};

} // namespace

llvm::Expected<Lowered> lowerPt2(const Pt2Program &program,
                                 llvm::StringRef path) {
  try {
    return Lowering(program, path).run();
  } catch (const std::exception &e) {
    return makeError("'" + path +
                     "': cannot lower its program: " + firstLine(e.what()));
  }
}

} // namespace ppc::pt2

#endif // PPC_HAVE_PT2
