//===- ppc/ppc.h - libppc_runtime's public API, all of it -------*- C++ -*-===//
//
// The one header a program linking ppc::runtime (find_package(ppc))
// includes, as a LibTorch program includes <torch/torch.h>:
//   ppc/Pipeline.h  ppc::api::Pipeline: inference, as `ppc run`
//   ppc/Trainer.h   ppc::api::Trainer: training, as `ppc train`
//   ppc/IO.h        inputs, outputs and training data as torch.save files
//   ppc/Error.h     ppc::api::Error, the exception every failure throws
// The API lives in namespace ppc::api (namespace ppc holds ppc's internals,
// which are not installed). docs/library.md describes it.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_PUBLIC_PPC_H
#define PPC_PUBLIC_PPC_H

#include "ppc/Error.h"
#include "ppc/Generator.h"
#include "ppc/IO.h"
#include "ppc/Pipeline.h"
#include "ppc/Trainer.h"

#endif // PPC_PUBLIC_PPC_H
