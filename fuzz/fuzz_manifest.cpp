//===- fuzz/fuzz_manifest.cpp - Fuzz the manifest reader ------------------===//
//
// Feeds bytes to Manifest::load, the entry `ppc run`, `verify` and `inspect`
// use on manifest.json. A manifest it accepts must (1) only hold references
// the runtime may index without further checks (stages, outputs, model inputs,
// consumers, tied parameters) and (2) survive save and load unchanged.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "lib/Manifest.h"

using namespace ppc;

static void checkIndices(const Manifest &m) {
  int stageCount = static_cast<int>(m.stages.size());
  auto checkRef = [&](const ValueRef &ref, int before, const std::string &at) {
    if (ref.isModelInput()) {
      if (ref.modelInput >= static_cast<int>(m.modelInputs.size()))
        fuzz::fail(at + " names a missing model input");
      return;
    }
    if (ref.stage < 0 || ref.stage >= before || ref.output < 0 ||
        ref.output >= static_cast<int>(m.stages[ref.stage].outputs.size()))
      fuzz::fail(at + " names a missing output");
  };
  for (int i = 0; i < stageCount; ++i) {
    const StageInfo &s = m.stages[i];
    if (s.index != i)
      fuzz::fail("stage index out of order");
    for (size_t j = 0; j < s.inputs.size(); ++j)
      checkRef(s.inputs[j].source, i,
               "stage " + std::to_string(i) + " input " + std::to_string(j));
    for (const StageOutput &o : s.outputs)
      for (int c : o.consumers)
        if (c <= i || c >= stageCount)
          fuzz::fail("stage " + std::to_string(i) +
                     " lists a consumer that is not a later stage");
  }
  for (const ValueRef &ref : m.modelOutputs)
    checkRef(ref, stageCount, "a model output");
  for (const TiedParameter &t : m.tiedParameters)
    for (const TiedParameter::Use &u : t.uses)
      if (u.stage < 0 || u.stage >= stageCount)
        fuzz::fail("a tied parameter names missing stage " +
                   std::to_string(u.stage));
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input("manifest.json");
  static fuzz::InputFile saved("manifest.saved.json");
  auto manifest = Manifest::load(input.write(data, size));
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return 0;
  }
  checkIndices(*manifest);
  if (llvm::Error err = manifest->save(saved.path()))
    fuzz::fail("cannot save an accepted manifest: " +
               llvm::toString(std::move(err)));
  auto again = Manifest::load(saved.path());
  if (!again)
    fuzz::fail("a saved manifest does not load again: " +
               llvm::toString(again.takeError()));
  if (again->toJSON() != manifest->toJSON())
    fuzz::fail("a saved manifest loads back different");
  return 0;
}
