//===- tools/ppc/main.cpp - The ppc command-line driver -------------------===//
//
// Thin: parses the command line with CLI11, runs the chosen subcommand, and
// is the only place that prints errors.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "lib/Error.h"
#include "lib/OptionName.h"
#include "runtime/link/Link.h"
#include "runtime/platform/Blas.h"
#include "runtime/platform/TorchCompat.h"
#include "tools/ppc/Launcher.h"
#include "tools/ppc/StdStreams.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <c10/util/Exception.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

/// Prints "error: MESSAGE" as one write: a rank stopped by its launcher
/// right after (another rank failed first) never leaves half a line. An
/// error is one line, so whatever text from outside it carries (a path, a
/// peer's name, a worker's error line the launcher reports) is shown with
/// its control bytes escaped (terminalText()).
static void printError(const std::string &message) {
  std::string line = "error: " + ppc::terminalText(message) + "\n";
  llvm::errs().write(line.data(), line.size());
  llvm::errs().flush();
}

/// The message of `err` as the command line says it: an option the
/// library names by its field is named by its flag; a rank that stops only
/// because it lost another says so (tools/ppc/Launcher.h, consequenceNote()),
/// so that its line does not read as the cause under any launcher.
static std::string cliMessage(llvm::Error err) {
  err = llvm::handleErrors(
      std::move(err),
      [](std::unique_ptr<ppc::OptionError> option) {
        return ppc::makeError(option->context() +
                              ppc::flagOfField(option->field()) + " " +
                              option->problem());
      },
      [](std::unique_ptr<ppc::LostRankError> lost) {
        return ppc::makeError(lost->context() + lost->describe() +
                              ppc::consequenceNote(lost->rank()));
      });
  return llvm::toString(std::move(err));
}

/// "ppc SUB --help" for the (sub)command being parsed, so that a usage
/// error points to the help that explains it.
static std::string helpCommand(const CLI::App &app) {
  std::string command = "ppc";
  for (const CLI::App *at = &app; !at->get_subcommands().empty();) {
    at = at->get_subcommands().front();
    command += " " + at->get_name();
  }
  return command + " --help";
}

/// `ppc --version`: ppc's version, then what this binary was built against
/// (a system LibTorch 1.13 build and a PyTorch 2.x build look alike
/// otherwise):
///   ppc 0.1.0
///   LibTorch 2.15.0
///   CUDA: yes
///   NCCL: yes
/// and the BLAS it computes with, with the CPU's features and the best
/// OpenBLAS kernel for them (runtime/platform/Blas.h):
///   blas: openblas 0.3.21 Cooperlake (DYNAMIC_ARCH)
///   cpu: avx avx2 avx512f avx512bw avx512vl avx512dq avx512_bf16 (best
///        OpenBLAS core type: Cooperlake)
static std::string versionText() {
  auto yesNo = [](bool b) { return b ? "yes" : "no"; };
  ppc::CpuFeatures cpu = ppc::hostCpuFeatures();
  return std::string("ppc ") + PPC_VERSION_STRING + "\nLibTorch " +
         ppc::compat::kTorchVersion +
         "\nCUDA: " + yesNo(ppc::compat::kHaveCuda) +
         "\nNCCL: " + yesNo(ppc::compat::kHaveNccl) + "\n" +
         ppc::blasVersionLine(ppc::loadedBlas()) + "\ncpu: " + cpu.names() +
         " (best OpenBLAS core type: " + ppc::bestOpenBlasCore(cpu) + ")";
}

/// Runs the subcommand `command`: its exit status, or 2 after its error
/// line.
static int runCommand(ppc::Command &command) {
  // Library code turns exceptions into llvm::Error; anything that still
  // escapes is a bug, reported like any error rather than as an abort.
  try {
    llvm::Expected<int> code = command.run();
    if (!code) {
      printError(cliMessage(code.takeError()));
      return ppc::kErrorExitCode;
    }
    return *code;
  } catch (const c10::Error &e) {
    printError(ppc::firstLine(e.what_without_backtrace()));
  } catch (const std::exception &e) {
    printError(ppc::firstLine(e.what()));
  } catch (...) {
    printError("unknown exception");
  }
  return ppc::kErrorExitCode;
}

int main(int argc, char **argv) {
  // Before anything opens a file or a socket (StdStreams.h).
  ppc::prepareStandardStreams();
  // The runtime's messages and the ranks' agreement name options as flags.
  ppc::nameOptions(ppc::OptionNaming::Flag);
  CLI::App app{
      "ppc: a pipeline-parallel compiler and runtime for PyTorch models "
      "(torch.export programs and TorchScript).\n\nCompile a model into "
      "stages with 'ppc split', check them with 'ppc verify', look at them "
      "with 'ppc inspect', and run, train or decode them on several ranks "
      "with 'ppc launch -- ppc run|train|generate'."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::function<std::string()>(versionText),
                       "Print ppc's version, the LibTorch it was built "
                       "against and the BLAS it runs, then exit");

  std::vector<ppc::Command> commands;
#define PPC_COMMAND(fn) commands.push_back(ppc::fn(app));
#include "tools/ppc/Commands.def"
  // Set after the commands are added: CLI11 copies a parent's footer into
  // each subcommand added later, and this one is about ppc as a whole.
  app.footer("Exit status: 0 on success, 1 when 'ppc verify' finds a mismatch, "
             "2 on any error (reported as one 'error: ...' line). A reader "
             "of stdout that stops early ('ppc schedule ... | head -1') "
             "is no error.");
  // `ppc nosuch --help` would print this help and exit 0: CLI11 reads
  // --help before it finds no command named `nosuch`.
  if (argc > 1 && argv[1][0] != '-' &&
      llvm::none_of(commands, [&](const ppc::Command &c) {
        return c.app->check_name(argv[1]);
      })) {
    printError("unknown command '" + ppc::printable(argv[1]) + "' (see " +
               helpCommand(app) + ")");
    return ppc::kErrorExitCode;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    printError(std::string(e.what()) + " (see " + helpCommand(app) + ")");
    return ppc::kErrorExitCode;
  }

  for (ppc::Command &command : commands)
    if (command.app->parsed())
      return ppc::finishStandardStreams(runCommand(command));
  return ppc::kErrorExitCode;
}
