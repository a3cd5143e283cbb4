//===- tools/ppc/DecodeFlags.h - The flags of a decode ----------*- C++ -*-===//
//
// The flags `ppc generate` and `ppc serve` share: how the prompt goes in
// (--prefill-chunk), the groups in flight (--slots), how tokens are picked
// (--temperature, --top-k, --top-p, --seed, --eos-id: for serve, the
// defaults of a request) and the program's input names. One table, so that
// the two commands spell, check and record them alike.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TOOLS_PPC_DECODEFLAGS_H
#define PPC_TOOLS_PPC_DECODEFLAGS_H

#include "runtime/generate/Generator.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace ppc {

struct DecodeFlags {
  int64_t prefillChunk = 0;
  int slots = 0;
  SamplingOptions sampling;
  std::string tokenInput = "input_ids", positionInput = "cache_position";

  /// Adds --prefill-chunk, --slots, --temperature, --top-k, --top-p, --seed,
  /// --eos-id, --token-input and --position-input to `app`.
  void addTo(CLI::App &app);
  /// Copies them into `options`, and records them in its run's agreement
  /// (what every rank must have alike).
  void applyTo(GenerateOptions &options) const;
};

} // namespace ppc

#endif // PPC_TOOLS_PPC_DECODEFLAGS_H
