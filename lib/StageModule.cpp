//===- lib/StageModule.cpp - A stage graph as a module --------------------===//
#include "lib/StageModule.h"

#include "lib/Error.h"
#include "lib/TorchScriptStage.h"

#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/ir/ir.h>

#include <map>

using torch::jit::Block;
using torch::jit::Module;
using torch::jit::Node;
using torch::jit::Value;

namespace ppc {

namespace {
class Builder {
public:
  Builder(const Module &original, int index)
      : original(original), cu(std::make_shared<torch::jit::CompilationUnit>()),
        prefix("__torch__.ppc.stage" + std::to_string(index)) {}

  llvm::Expected<StageModule> build(std::shared_ptr<torch::jit::Graph> graph) {
    if (graph->inputs().empty() ||
        !graph->inputs()[0]->type()->cast<c10::ClassType>())
      return makeError("stage graph has no module input");
    Value *self = graph->inputs()[0];
    paths[self] = "";
    Module root = mirror("");
    self->setType(root.type());
    if (llvm::Error err = walk(graph->block()))
      return err;

    auto fn = cu->create_function(
        c10::QualifiedName(*root.type()->name(), "forward"), std::move(graph));
    root.type()->addMethod(fn);
    return StageModule{root, std::move(tensors)};
  }

private:
  /// The mirror module for `path`, created (with its parents) on first use.
  Module mirror(const std::string &path) {
    if (auto it = mirrors.find(path); it != mirrors.end())
      return it->second;
    Module source = original;
    std::string parentPath, name;
    if (!path.empty()) {
      size_t dot = path.rfind('.');
      parentPath = dot == std::string::npos ? "" : path.substr(0, dot);
      name = dot == std::string::npos ? path : path.substr(dot + 1);
      source = attributeAt(original, path).toModule();
    }
    std::string className =
        prefix + (path.empty() ? ".Stage" : ".m_" + sanitize(path));
    auto type = c10::ClassType::create(c10::QualifiedName(className), cu,
                                       /*is_module=*/true);
    cu->register_type(type);
    Module m(cu, type);
    m.register_attribute("training", c10::BoolType::get(),
                         source.is_training());
    if (!path.empty())
      mirror(parentPath).register_module(name, m);
    mirrors.emplace(path, m);
    return m;
  }

  static std::string sanitize(const std::string &path) {
    std::string out = path;
    for (char &c : out)
      if (!isalnum(static_cast<unsigned char>(c)))
        c = '_';
    return out;
  }

  /// Steps 1 and 3: record paths of GetAttr results and mirror them.
  llvm::Error walk(Block *block) {
    for (Node *n : block->nodes()) {
      if (n->kind() == c10::prim::GetAttr) {
        auto base = paths.find(n->input());
        if (base != paths.end()) {
          const std::string &name = n->s(c10::attr::name);
          std::string path =
              base->second.empty() ? name : base->second + "." + name;
          paths[n->output()] = path;
          if (llvm::Error err =
                  addAttribute(base->second, name, path, n->output()))
            return err;
        }
      }
      for (Block *b : n->blocks())
        if (llvm::Error err = walk(b))
          return err;
    }
    return llvm::Error::success();
  }

  llvm::Error addAttribute(const std::string &parentPath,
                           const std::string &name, const std::string &path,
                           Value *result) {
    c10::IValue value = attributeAt(original, path);
    if (value.isModule()) {
      result->setType(mirror(path).type());
      return llvm::Error::success();
    }
    if (value.isObject())
      return makeError("attribute '" + path + "' is an object of class " +
                       value.type()->repr_str() +
                       ", which ppc cannot copy into a stage");
    Module parent = mirror(parentPath);
    if (parent.type()->hasAttribute(name))
      return llvm::Error::success();
    const c10::ClassTypePtr &sourceType =
        attributeAt(original, parentPath).toObjectRef().type();
    size_t slot = sourceType->getAttributeSlot(name);
    bool isParameter = sourceType->is_parameter(slot);
    bool isBuffer = sourceType->is_buffer(slot);
    parent.type()->addAttribute(name, sourceType->getAttribute(slot),
                                isParameter, isBuffer);
    parent._ivalue()->setAttr(name, value);
    if (value.isTensor())
      tensors.push_back({path, value.toTensor(), isParameter});
    return llvm::Error::success();
  }

  const Module &original;
  std::shared_ptr<torch::jit::CompilationUnit> cu;
  std::string prefix;
  std::map<std::string, Module> mirrors;
  std::map<Value *, std::string> paths;
  std::vector<StageModule::TensorAttribute> tensors;
};
} // namespace

llvm::Expected<StageModule>
buildStageModule(const Module &original,
                 std::shared_ptr<torch::jit::Graph> graph, int index) {
  auto result =
      torchCall("cannot build stage " + std::to_string(index),
                [&]() -> llvm::Expected<StageModule> {
                  return Builder(original, index).build(std::move(graph));
                });
  if (!result)
    return result.takeError();
  return std::move(*result);
}

} // namespace ppc
