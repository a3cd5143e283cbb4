//===- lib/TorchScriptStage.cpp - A TorchScript stage executable ----------===//
//
// This file implements TorchScriptStage, the TorchScript loader and
// attributeAt(). Every call maps onto one torch::jit::Module call.
//
//===----------------------------------------------------------------------===//
#include "lib/TorchScriptStage.h"

#include "lib/Error.h"
#include "lib/SafeRead.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <torch/csrc/api/include/torch/version.h>
#include <torch/script.h>

namespace ppc {

c10::IValue TorchScriptStage::forward(std::vector<c10::IValue> inputs) {
  return module_.forward(std::move(inputs));
}

std::vector<at::Tensor> TorchScriptStage::parameters() const {
  std::vector<at::Tensor> out;
  for (const at::Tensor &t : module_.parameters())
    out.push_back(t);
  return out;
}

std::vector<NamedTensor> TorchScriptStage::namedParameters() const {
  std::vector<NamedTensor> out;
  for (const auto &p : module_.named_parameters(/*recurse=*/true))
    out.push_back({p.name, p.value});
  return out;
}

std::vector<NamedTensor> TorchScriptStage::namedBuffers() const {
  std::vector<NamedTensor> out;
  for (const auto &b : module_.named_buffers(/*recurse=*/true))
    out.push_back({b.name, b.value});
  return out;
}

/// The tensor attributes of `object` and its submodules, under `prefix`.
static void collectTensors(const c10::ivalue::Object &object,
                           const std::string &prefix,
                           std::vector<NamedTensor> &out) {
  const c10::ClassTypePtr &type = object.type();
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const c10::IValue &value = object.getSlot(i);
    std::string path = prefix + type->getAttributeName(i);
    if (value.isTensor())
      out.push_back({path, value.toTensor()});
    else if (value.isObject() && value.toObjectRef().type()->is_module())
      collectTensors(value.toObjectRef(), path + ".", out);
  }
}

std::vector<NamedTensor> TorchScriptStage::namedTensors() const {
  std::vector<NamedTensor> out;
  collectTensors(*module_._ivalue(), "", out);
  return out;
}

at::Tensor TorchScriptStage::tensorAt(llvm::StringRef path) const {
  return attributeAt(module_, path).toTensor();
}

/// Sets the tensor attribute at `path`; `parameters` says whether a
/// parameter may be set, `what` names the kind in the error.
static void setTensorAttribute(const torch::jit::Module &module,
                               llvm::StringRef path, at::Tensor value,
                               bool parameters, const char *what) {
  size_t dot = path.rfind('.');
  llvm::StringRef name =
      dot == llvm::StringRef::npos ? path : path.substr(dot + 1);
  c10::IValue owner = attributeAt(
      module, dot == llvm::StringRef::npos ? "" : path.take_front(dot));
  TORCH_CHECK(owner.isObject(), "'", path.str(), "' names no ", what);
  c10::ivalue::Object &object = owner.toObjectRef();
  const c10::ClassTypePtr &type = object.type();
  auto slot = type->findAttributeSlot(name.str());
  TORCH_CHECK(slot && (parameters || !type->is_parameter(*slot)) &&
                  type->getAttribute(*slot)->kind() ==
                      c10::TypeKind::TensorType,
              "'", path.str(), "' names no ", what);
  object.setSlot(*slot, std::move(value));
}

void TorchScriptStage::setBuffer(llvm::StringRef path, at::Tensor value) {
  setTensorAttribute(module_, path, std::move(value), false, "buffer");
}

void TorchScriptStage::setWeight(llvm::StringRef path, at::Tensor value) {
  setTensorAttribute(module_, path, std::move(value), true,
                     "parameter or buffer");
}

bool TorchScriptStage::isTraining() const { return module_.is_training(); }

void TorchScriptStage::setTraining(bool on) { module_.train(on); }

void TorchScriptStage::to(const c10::Device &device) { module_.to(device); }

void TorchScriptStage::save(std::ostream &out) const { module_.save(out); }

/// A model scripted by a newer PyTorch than the LibTorch ppc is built
/// against (TORCH_VERSION) may call operators this LibTorch lacks: that
/// error names the operator and the way out. Every TorchScript archive ppc
/// loads (models, stage files, the original of a join) comes through here,
/// and its records are checked against what its bytes can inflate to before
/// LibTorch's reader inflates any.
llvm::Expected<torch::jit::Module> loadTorchScriptModule(llvm::StringRef bytes,
                                                         llvm::StringRef path) {
  if (llvm::Error err = checkZipInflation(bytes))
    return makeError("'" + path + "': " + llvm::toString(std::move(err)));
  auto module = torchCall("'" + path + "' is not a TorchScript module", [&] {
    return torch::jit::load(makeArchiveReader(bytes));
  });
  if (module)
    return module;
  std::string message = llvm::toString(module.takeError());
  llvm::StringRef marker = "Unknown builtin op: ";
  size_t at = message.find(marker.str());
  if (at == std::string::npos)
    return makeError(message);
  llvm::StringRef op = llvm::StringRef(message)
                           .substr(at + marker.size())
                           .split(' ')
                           .first.rtrim('.');
  return makeError(llvm::formatv(
      "'{0}' uses operator {1}, which this ppc's LibTorch {2} lacks (the "
      "model was scripted by a newer PyTorch; build ppc against that "
      "PyTorch's LibTorch: docs/build.md)",
      path, op, TORCH_VERSION));
}

c10::IValue attributeAt(const torch::jit::Module &module,
                        llvm::StringRef path) {
  c10::IValue v = module._ivalue();
  if (path.empty())
    return v;
  llvm::SmallVector<llvm::StringRef, 8> parts;
  path.split(parts, '.');
  for (llvm::StringRef part : parts)
    v = v.toObjectRef().getAttr(part.str());
  return v;
}

} // namespace ppc
