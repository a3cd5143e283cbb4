//===- runtime/schedule/Decode.h - The decode schedule ----------*- C++ -*-===//
//
// Autoregressive decoding as a schedule: G groups of sequences, each a
// microbatch of the program's static batch, run S = P + N - 1 steps (P
// prompt tokens fed one a step, then N - 1 picked tokens; the last step's
// pick is the N-th new token). Microbatch m = step * G + group. Each stage
// runs its microbatches in order; the collector picks the next tokens of
// microbatch m (steps P-1 on) and returns them to the ranks whose stages
// read the token input, which feed them as microbatch m + G (SEND_TOK /
// RECV_TOK, Schedule::tokens). So a group's next step waits for its own
// previous one only, and with G at least the number of stages the pipeline
// stays full: stage 0 runs group g+1's step while stage 1 runs group g's.
//
// The order: every F and OUT gets the time it starts in a unit-time model
// (an F takes one unit; a stage runs its microbatches in order, after its
// inputs' producers, and a reader of the token input after the collector's
// pick of the same group's previous step); each rank runs its actions in
// that order. Every dependency goes from an earlier time to a later one,
// so the order is free of deadlock on any placement; simulateSchedule()
// checks it like any other.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_DECODE_H
#define PPC_RUNTIME_SCHEDULE_DECODE_H

#include "lib/Manifest.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// What a decode run is made of.
struct DecodeShape {
  int groups = 1;      ///< G: groups of sequences in flight.
  int promptSteps = 1; ///< P: prompt tokens, fed one a step.
  int newTokens = 1;   ///< N: tokens to pick per sequence.
  int tokenInput = 0;  ///< The model input that carries the token ids.
};

/// The decode schedule of `manifest` on `placement` (see above), with its
/// messages. Errors: a shape out of range (groups, prompt or new tokens
/// below 1, more than kMaxMicrobatches microbatches in all), no stage reads
/// the token input, boundaryEdges()'s.
llvm::Expected<Schedule> buildDecodeSchedule(const Manifest &manifest,
                                             const Placement &placement,
                                             const DecodeShape &shape);

/// The ranks of `schedule`'s token readers (TokenReturn::readers) other
/// than `except`, ascending: where SEND_TOK goes from that rank.
std::vector<int> tokenReaderRanks(const Schedule &schedule, int except);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_DECODE_H
