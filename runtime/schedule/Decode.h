//===- runtime/schedule/Decode.h - The decode schedule ----------*- C++ -*-===//
//
// Autoregressive decoding as a schedule. Groups of sequences, each a
// microbatch of the program's static batch, wait in a queue; K slots (one
// copy of every stage's state each) run them, a slot its groups one after
// another, so that a group enters as soon as its slot's previous group
// leaves and the pipeline never drains. Group j runs S_j = P_j + N_j - 1
// steps: P_j prompt steps, each feeding one chunk of its prompt (chunked
// prefill: one token, or up to C on a program with a dynamic sequence
// dimension), then N_j - 1 picked tokens; its last prompt step's logits
// give its first new token and its last step's pick the N_j-th.
//
// Slots and numbering: each group goes, in queue order, to the slot with
// the fewest steps so far (the one that frees first when every slot takes
// one step a round); microbatches are numbered round by round, slot by
// slot, so a group's steps ascend and, with as many slots as groups of one
// shape, microbatch m is step m / G of group m % G. The collector picks the
// next tokens of a group's steps from its last prompt step on and returns
// them to every other rank (SEND_TOK / RECV_TOK, Schedule::tokens): the
// ranks whose stages read the token input feed them to the group's next
// step, and every rank sees from them when a group has ended (its rows all
// picked the end-of-sequence token: ExecutorStep::endToken), whose later
// steps it then skips. So a group's next step waits for its own previous
// one only, and with at least as many slots as stages the pipeline stays
// full: stage 0 runs one slot's step while stage 1 runs another's.
//
// The order: every F and OUT gets the time it starts in a unit-time model
// (an F takes one unit; a stage runs its microbatches in order, after its
// inputs' producers, and a step that reads picked tokens after the
// collector's pick of the same group's previous step); each rank runs its
// actions in that order. Every dependency goes from an earlier time to a
// later one, so the order is free of deadlock on any placement;
// simulateSchedule() checks it like any other.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_DECODE_H
#define PPC_RUNTIME_SCHEDULE_DECODE_H

#include "lib/Manifest.h"
#include "runtime/schedule/Placement.h"
#include "runtime/schedule/Schedule.h"

#include "llvm/Support/Error.h"

namespace ppc {

/// One group of sequences of a decode.
struct DecodeGroup {
  int promptSteps = 1; ///< Prompt steps (chunks of its prompt).
  int newTokens = 1;   ///< Tokens to pick per sequence.
};

/// What a decode run is made of.
struct DecodeShape {
  /// The groups, in queue order.
  std::vector<DecodeGroup> groups;
  /// K: groups in flight at once (0: all of them).
  int slots = 0;
  int tokenInput = 0; ///< The model input that carries the token ids.

  /// `groups` groups of one shape, all in flight.
  static DecodeShape uniform(int groups, int promptSteps, int newTokens,
                             int tokenInput);
};

/// The decode schedule of `manifest` on `placement` (see above), with its
/// messages. Errors: a shape out of range (no group, prompt steps or new
/// tokens below 1, slots below 0, more than kMaxMicrobatches microbatches
/// in all), no stage reads the token input, boundaryEdges()'s.
llvm::Expected<Schedule> buildDecodeSchedule(const Manifest &manifest,
                                             const Placement &placement,
                                             const DecodeShape &shape);

/// Every rank of `schedule` but the collector's, ascending: where the
/// collector's SEND_TOKs go.
std::vector<int> tokenReturnRanks(const Schedule &schedule);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_DECODE_H
