//===- runtime/schedule/AutoSchedule.cpp - Picking the fastest schedule ---===//
//
// This file implements chooseSchedule, --schedule auto (see
// AutoSchedule.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/AutoSchedule.h"

#include "lib/Error.h"
#include "lib/NumberRules.h"
#include "lib/OptionName.h"
#include "runtime/schedule/Build.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace ppc {

llvm::Expected<ScheduleChoice>
chooseSchedule(const Manifest &manifest, int worldSize, int microbatches,
               const std::vector<StageCost> &costs, llvm::StringRef costsFrom,
               std::optional<int> maxActivations, llvm::StringRef costUnit) {
  // What every kind would refuse alike is the caller's error, said once.
  int numStages = static_cast<int>(manifest.stages.size());
  if (llvm::Error err =
          checkOption("microbatches",
                      IntegerRule{1, kMaxMicrobatches}.problem(microbatches)))
    return err;
  if (auto edges = boundaryEdges(manifest); !edges)
    return edges.takeError();
  if (auto loop = Placement::create(numStages, worldSize); !loop)
    return loop.takeError();
  auto peakOf = [](const ScheduleStats &stats) {
    return *std::max_element(stats.peakActivations.begin(),
                             stats.peakActivations.end());
  };
  ScheduleChoice choice;
  std::optional<size_t> best;
  for (ScheduleKind kind : kAllScheduleKinds) {
    ScheduleCandidate candidate{kind, "", {}};
    auto schedule =
        buildSimulatedTrainingSchedule(manifest, kind, worldSize, microbatches);
    llvm::Expected<ScheduleStats> stats =
        schedule ? scheduleStats(*schedule, costs)
                 : llvm::Expected<ScheduleStats>(schedule.takeError());
    if (!stats) {
      candidate.refusal = llvm::toString(stats.takeError());
    } else {
      candidate.stats = *stats;
      int peak = peakOf(*stats);
      if (maxActivations && peak > *maxActivations)
        candidate.refusal =
            llvm::formatv("{0} activations > {2} {1}", peak, *maxActivations,
                          optionName(Option::MaxActivations))
                .str();
      else if (!best ||
               stats->makespan < choice.candidates[*best].stats.makespan) {
        best = choice.candidates.size();
        choice.schedule = std::move(*schedule);
      }
    }
    choice.candidates.push_back(std::move(candidate));
  }
  std::string others;
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    const ScheduleCandidate &c = choice.candidates[i];
    if (best && i == *best)
      continue;
    others += (others.empty() ? "" : ", ") + scheduleName(c.kind).str() + " ";
    others += c.refusal.empty() ? shortNumber(c.stats.makespan) + " (" +
                                      std::to_string(peakOf(c.stats)) + ")"
                                : "n/a (" + c.refusal + ")";
  }
  if (!best)
    return makeError(optionName(Option::Schedule) +
                     " auto: no schedule fits: " + others);
  const ScheduleCandidate &picked = choice.candidates[*best];
  choice.explanation =
      llvm::formatv("{6} auto picked {0}: simulated step {1} {7} (bubble "
                    "{2:f1}%, at most {3} microbatches' activations per rank) "
                    "with {4}; the others (step, activations): {5}",
                    scheduleName(picked.kind),
                    shortNumber(picked.stats.makespan),
                    100 * picked.stats.bubble, peakOf(picked.stats), costsFrom,
                    others, optionName(Option::Schedule), costUnit)
          .str();
  return choice;
}

} // namespace ppc
