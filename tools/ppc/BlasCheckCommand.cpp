//===- tools/ppc/BlasCheckCommand.cpp - ppc blas-check (hidden) -----------===//
//
// `ppc blas-check CORE`: the child process of ppc launch's self-check of an
// OpenBLAS core type (tools/ppc/BlasCheck.h, checkCoreType()). ppc launch
// starts it with OPENBLAS_CORETYPE=CORE; it runs the products of
// checkLoadedKernel() and prints one kernelCheckLine(). Not in --help: nothing
// but ppc launch needs it.
//
//===----------------------------------------------------------------------===//
#include "tools/ppc/Commands.h"

#include "tools/ppc/BlasCheck.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace ppc {

Command addBlasCheckCommand(CLI::App &parent) {
  auto core = std::make_shared<std::string>();
  CLI::App *app = parent.add_subcommand(
      "blas-check", "Check OpenBLAS core type CORE numerically (run with "
                    "OPENBLAS_CORETYPE=CORE; used by ppc launch)");
  app->group("");
  app->add_option("core", *core, "The OpenBLAS core type expected")->required();
  return {app, [core]() -> llvm::Expected<int> {
            KernelCheck check = checkLoadedKernel(*core);
            llvm::outs() << kernelCheckLine(check) << "\n";
            llvm::outs().flush();
            // 1: ran fine, but the answer is no (Commands.h).
            return check.passed ? 0 : 1;
          }};
}

} // namespace ppc
