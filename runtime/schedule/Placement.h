//===- runtime/schedule/Placement.h - Which rank runs which stage ---------===//
//
// A placement is a stage -> rank table. It is made by a named style (the
// registry in Placement.cpp: "loop", stage k on rank k mod WORLD_SIZE, and
// "v", the zig-zag of V-shaped schedules), or read from the rows of a
// schedule CSV (placementFromCSV() in ScheduleCSV.h). In inference the
// model's outputs are collected on the rank of the last stage, the output
// rank; schedules address that collector as the pseudo-stage numStages().
//
//===----------------------------------------------------------------------===//
#ifndef PPC_RUNTIME_SCHEDULE_PLACEMENT_H
#define PPC_RUNTIME_SCHEDULE_PLACEMENT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace ppc {

/// The rank counts (WORLD_SIZE of one pipeline) that `numStages` stages
/// can be placed on, every divisor of it: "1, 2 or 4 ranks", "1 rank".
std::string rankCountsText(int numStages);

class Placement {
public:
  /// One stage on one rank.
  Placement() = default;

  /// `numStages` stages on `worldSize` ranks in the style `style` (one of
  /// placementStyleNames()). Errors: a stage count that is not WORLD_SIZE or
  /// a multiple of it (the message lists the rank counts that fit,
  /// rankCountsText()), an unknown style.
  static llvm::Expected<Placement> create(int numStages, int worldSize,
                                          llvm::StringRef style = "loop");

  /// The placement that puts stage k on rank `ranks[k]`, named `style` in
  /// messages. The caller has checked that every rank in 0..worldSize-1
  /// runs at least one stage and no other rank appears.
  static Placement fromRanks(std::vector<int> ranks, int worldSize,
                             std::string style);

  int numStages() const { return static_cast<int>(ranks.size()); }
  int worldSize() const { return worldSize_; }
  /// "loop", "v", or where a table came from ("csv").
  llvm::StringRef style() const { return style_; }

  /// The rank of stage `stage`; the collector (stage == numStages()) lives
  /// on the output rank.
  int rankOf(int stage) const {
    return stage >= numStages() ? outputRank() : ranks[stage];
  }
  /// The rank of the last stage.
  int outputRank() const { return ranks.back(); }
  /// Rank `rank`'s stages, ascending.
  std::vector<int> stagesOf(int rank) const;
  /// Whether stage k is on rank k mod worldSize() for every k, whatever
  /// made the table.
  bool isLoop() const { return is("loop"); }
  /// Whether every stage is where the style `style` (one of
  /// placementStyleNames()) puts it, whatever made the table.
  bool is(llvm::StringRef style) const;
  /// The rule that places the stages, for messages: "stage k on rank k mod
  /// 2" for a loop placement, else "placement v" (or csv).
  std::string rule() const;
  /// "4 stages on 2 ranks: rank 0 [0,2], rank 1 [1,3]"; part of the meta
  /// cache key.
  std::string describe() const;

private:
  std::vector<int> ranks{0};
  int worldSize_ = 1;
  std::string style_ = "loop";
};

/// The placement styles create() takes, in registry order ("loop", "v").
std::vector<llvm::StringRef> placementStyleNames();
/// A style's note for --help.
llvm::StringRef placementStyleHelp(llvm::StringRef style);

} // namespace ppc

#endif // PPC_RUNTIME_SCHEDULE_PLACEMENT_H
