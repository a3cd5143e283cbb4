//===- runtime/schedule/Placement.cpp - Which rank runs which stage -------===//
//
// This file implements placements (Placement.h) and their registry of
// styles: a style is one row of kStyles, a name and a function from (stage,
// world size) to rank.
//
//===----------------------------------------------------------------------===//
#include "runtime/schedule/Placement.h"

#include "lib/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <iterator>

namespace ppc {

namespace {
/// Stage k on rank k mod W: consecutive stages on consecutive ranks.
int loopRank(int stage, int worldSize) { return stage % worldSize; }

/// Down the ranks and back up: stage k on rank k for k < W, on rank 2W-1-k
/// for W <= k < 2W, and so on, so a rank's two stages of a V meet at the
/// last rank (PyTorch's generate_stage_to_rank_mapping(style="v")).
int vRank(int stage, int worldSize) {
  int round = stage / worldSize, offset = stage % worldSize;
  return round % 2 == 0 ? offset : worldSize - 1 - offset;
}

struct PlacementStyle {
  llvm::StringRef name;
  llvm::StringRef help;
  int (*rankOf)(int stage, int worldSize);
};

/// The registry: a new style is one row and one function.
constexpr PlacementStyle kStyles[] = {
    {"loop", "stage k on rank k mod the rank count", loopRank},
    {"v", "stage k on rank k, then back from the last rank: a V per rank",
     vRank},
};

const PlacementStyle *findStyle(llvm::StringRef name) {
  for (const PlacementStyle &style : kStyles)
    if (style.name == name)
      return &style;
  return nullptr;
}
} // namespace

std::vector<llvm::StringRef> placementStyleNames() {
  std::vector<llvm::StringRef> names;
  for (const PlacementStyle &style : kStyles)
    names.push_back(style.name);
  return names;
}

llvm::StringRef placementStyleHelp(llvm::StringRef style) {
  const PlacementStyle *found = findStyle(style);
  return found ? found->help : "";
}

std::string rankCountsText(int numStages) {
  std::vector<std::string> counts;
  for (int r = 1; r <= numStages; ++r)
    if (numStages % r == 0)
      counts.push_back(std::to_string(r));
  if (counts.size() <= 1)
    return "1 rank";
  std::string last = counts.back();
  counts.pop_back();
  return llvm::join(counts, ", ") + " or " + last + " ranks";
}

llvm::Expected<Placement> Placement::create(int numStages, int worldSize,
                                            llvm::StringRef style) {
  if (worldSize < 1 || numStages < worldSize || numStages % worldSize != 0)
    return makeError(
        llvm::formatv("{0} stage{1} cannot be placed on WORLD_SIZE={2} "
                      "rank{3}: the stage count must equal WORLD_SIZE or "
                      "be a multiple of it ({0} stage{1} run{4} on {5})",
                      numStages, numStages == 1 ? "" : "s", worldSize,
                      worldSize == 1 ? "" : "s", numStages == 1 ? "s" : "",
                      rankCountsText(numStages))
            .str());
  const PlacementStyle *found = findStyle(style);
  if (!found) {
    std::string names;
    for (size_t i = 0; i < std::size(kStyles); ++i)
      names += (i == 0                        ? ""
                : i + 1 == std::size(kStyles) ? " or "
                                              : ", ") +
               kStyles[i].name.str();
    return makeError(
        ("unknown placement '" + style + "' (expected " + names + ")").str());
  }
  std::vector<int> ranks(numStages);
  for (int s = 0; s < numStages; ++s)
    ranks[s] = found->rankOf(s, worldSize);
  return fromRanks(std::move(ranks), worldSize, style.str());
}

Placement Placement::fromRanks(std::vector<int> ranks, int worldSize,
                               std::string style) {
  Placement p;
  p.ranks = std::move(ranks);
  p.worldSize_ = worldSize;
  p.style_ = std::move(style);
  return p;
}

std::vector<int> Placement::stagesOf(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < numStages(); ++s)
    if (ranks[s] == rank)
      out.push_back(s);
  return out;
}

bool Placement::is(llvm::StringRef style) const {
  const PlacementStyle *found = findStyle(style);
  if (!found)
    return false;
  for (int s = 0; s < numStages(); ++s)
    if (ranks[s] != found->rankOf(s, worldSize_))
      return false;
  return true;
}

std::string Placement::rule() const {
  if (isLoop())
    return llvm::formatv("stage k on rank k mod {0}", worldSize_).str();
  return "placement " + style_;
}

std::string Placement::describe() const {
  std::string out =
      llvm::formatv("{0} stages on {1} ranks:", numStages(), worldSize_);
  for (int r = 0; r < worldSize_; ++r) {
    out += llvm::formatv("{0} rank {1} [", r ? "," : "", r);
    std::vector<int> stages = stagesOf(r);
    for (size_t i = 0; i < stages.size(); ++i)
      out += (i ? "," : "") + std::to_string(stages[i]);
    out += "]";
  }
  return out;
}

} // namespace ppc
