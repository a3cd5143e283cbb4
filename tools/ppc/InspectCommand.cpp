//===- tools/ppc/InspectCommand.cpp - ppc inspect -------------------------===//
#include "tools/ppc/Commands.h"
#include "tools/ppc/OptionChecks.h"

#include "lib/Error.h"
#include "lib/FileUtil.h"
#include "lib/Manifest.h"
#include "lib/OutputGuard.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

namespace ppc {

static std::string refString(const Manifest &m, const ValueRef &ref) {
  if (ref.isModelInput())
    return "input " + std::to_string(ref.modelInput) + " (" +
           terminalText(m.modelInputs[ref.modelInput].name) + ")";
  return llvm::formatv("stage {0}.{1} ({2})", ref.stage, ref.output,
                       terminalText(m.output(ref).displayName()));
}

/// The readable name of a stage input: its source output's label, shown
/// as a terminal line may show it (a manifest is untrusted text).
static std::string inputName(const Manifest &m, const StageInput &in) {
  return terminalText(
      in.source.isModelInput() ? in.name : m.output(in.source).displayName());
}

/// Where an input comes from, without repeating its name.
static std::string sourceString(const ValueRef &ref) {
  if (ref.isModelInput())
    return "input " + std::to_string(ref.modelInput);
  return llvm::formatv("stage {0}.{1}", ref.stage, ref.output);
}

/// Each stage's state buffers ("steps int64 [], cache float32 [2, 8]"),
/// when any stage has some.
static void printState(const Manifest &m, llvm::raw_ostream &os) {
  if (llvm::all_of(m.stages,
                   [](const StageInfo &s) { return s.state.empty(); }))
    return;
  os << "\nstate (buffers written in place):\n";
  for (const StageInfo &s : m.stages) {
    std::vector<std::string> tensors;
    for (const StateTensor &t : s.state) {
      std::vector<std::string> dims;
      for (int64_t d : t.shape)
        dims.push_back(std::to_string(d));
      tensors.push_back(terminalText(t.name) + " " + terminalText(t.dtype) +
                        " [" + llvm::join(dims, ", ") + "]");
    }
    os << llvm::formatv("  stage {0}: {1}\n", s.index,
                        tensors.empty() ? "none" : llvm::join(tensors, ", "));
  }
}

static void printTable(const Manifest &m, llvm::raw_ostream &os) {
  os << llvm::formatv("model: {0} ({1} bytes, sha256 {2})\n",
                      terminalText(m.sourcePath), m.sourceSize,
                      terminalText(m.sourceSha256.substr(0, 12)));
  double total = 0;
  for (const StageInfo &s : m.stages)
    total += s.predictedCost;
  os << llvm::formatv("{0,-6} {1,-12} {2,12} {3,12} {4,8} {5,7} {6,8}\n",
                      "stage", "file", "parameters", "bytes", "cost%", "inputs",
                      "outputs");
  for (const StageInfo &s : m.stages)
    os << llvm::formatv("{0,-6} {1,-12} {2,12} {3,12} {4,7:f1}% {5,7} {6,8}\n",
                        s.index, terminalText(s.file), s.parameterCount,
                        s.parameterBytes + s.bufferBytes,
                        total > 0 ? 100 * s.predictedCost / total : 0.0,
                        s.inputs.size(), s.outputs.size());
  os << "\nstage contents (module paths):\n";
  for (const StageInfo &s : m.stages) {
    std::string shown =
        !s.modules           ? "not recorded (written by an older ppc split)"
        : s.modules->empty() ? "only code of the top-level forward"
                             : terminalText(describeModules(*s.modules));
    os << llvm::formatv("  stage {0}: {1}\n", s.index, shown);
  }
  printState(m, os);
  os << "\nboundary values:\n";
  for (const StageInfo &s : m.stages)
    for (size_t i = 0; i < s.inputs.size(); ++i)
      os << llvm::formatv("  stage {0} input {1}: {2} {3} <- {4}{5}\n", s.index,
                          i, kindName(s.inputs[i].kind),
                          inputName(m, s.inputs[i]),
                          sourceString(s.inputs[i].source),
                          s.inputs[i].mutated ? " [written in place]" : "");
  std::vector<std::string> outputs;
  for (const ValueRef &ref : m.modelOutputs)
    outputs.push_back(refString(m, ref));
  os << "model outputs: " << llvm::join(outputs, " ") << "\n";
  for (const TiedParameter &t : m.tiedParameters) {
    std::vector<std::string> uses;
    for (const auto &u : t.uses)
      uses.push_back(
          llvm::formatv("stage {0}:{1}", u.stage, terminalText(u.path)));
    os << llvm::formatv("tied ({0} bytes): ", t.bytes) << llvm::join(uses, " ")
       << "\n";
  }
}

/// `text` inside a double-quoted Graphviz string, control bytes escaped as
/// on a terminal line.
static std::string dotEscape(llvm::StringRef text) {
  std::string out;
  for (char c : terminalText(text)) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

static void writeDot(const Manifest &m, llvm::raw_ostream &os) {
  os << "digraph stages {\n  rankdir=LR;\n  node [shape=box];\n";
  for (size_t i = 0; i < m.modelInputs.size(); ++i)
    os << llvm::formatv("  in{0} [shape=ellipse, label=\"{1}\"];\n", i,
                        dotEscape(m.modelInputs[i].name));
  for (const StageInfo &s : m.stages)
    os << llvm::formatv("  s{0} [label=\"stage {0}\\n{1}{2} params\"];\n",
                        s.index,
                        s.modules && !s.modules->empty()
                            ? dotEscape(describeModules(*s.modules)) + "\\n"
                            : std::string(),
                        s.parameterCount);
  os << "  out [shape=ellipse, label=\"output\"];\n";
  for (const StageInfo &s : m.stages)
    for (const StageInput &in : s.inputs) {
      std::string from = in.source.isModelInput()
                             ? "in" + std::to_string(in.source.modelInput)
                             : "s" + std::to_string(in.source.stage);
      os << llvm::formatv("  {0} -> s{1} [label=\"{2}: {3}\"];\n", from,
                          s.index, dotEscape(inputName(m, in)),
                          kindName(in.kind));
    }
  for (const ValueRef &ref : m.modelOutputs)
    os << llvm::formatv("  {0} -> out;\n",
                        ref.isModelInput()
                            ? "in" + std::to_string(ref.modelInput)
                            : "s" + std::to_string(ref.stage));
  os << "}\n";
}

Command addInspectCommand(CLI::App &parent) {
  auto manifestPath = std::make_shared<std::string>();
  auto dotPath = std::make_shared<std::string>();
  CLI::App *app = parent.add_subcommand(
      "inspect", "Print the stages of a manifest and the values between them");
  app->add_option("manifest", *manifestPath,
                  "manifest.json written by ppc split")
      ->required()
      ->check(pathOption());
  app->add_option(
         "--dot", *dotPath,
         "Also write the stage graph as Graphviz to this file (render with "
         "dot -Tpng)")
      ->check(pathOption());
  return {app, [=]() -> llvm::Expected<int> {
            auto m = Manifest::load(*manifestPath);
            if (!m)
              return m.takeError();
            if (!dotPath->empty()) {
              OutputGuard guard;
              keepManifestFiles(guard, *manifestPath);
              if (llvm::Error err = guard.claimFile("--dot", *dotPath))
                return err;
            }
            printTable(*m, llvm::outs());
            if (!dotPath->empty()) {
              if (llvm::Error err =
                      writeFileAtomically(*dotPath, [&](llvm::raw_ostream &os) {
                        writeDot(*m, os);
                        return llvm::Error::success();
                      }))
                return err;
              llvm::outs() << "wrote " << terminalText(*dotPath) << "\n";
            }
            return 0;
          }};
}

} // namespace ppc
