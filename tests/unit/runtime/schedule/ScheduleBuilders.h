//===- tests/unit/runtime/schedule/ScheduleBuilders.h ---------------------===//
//
// Schedule test inputs.
//
// What the schedule tests and the schedule CSV fuzz target build their
// schedules from: a chain manifest with optional skip edges, the fixture
// files, and a schedule's compute order as text.
//
//===----------------------------------------------------------------------===//
#ifndef PPC_TESTS_UNIT_RUNTIME_SCHEDULE_SCHEDULEBUILDERS_H
#define PPC_TESTS_UNIT_RUNTIME_SCHEDULE_SCHEDULEBUILDERS_H

#include "runtime/schedule/Schedule.h"

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace ppc::test {

/// A chain of `n` stages (stage s takes output 0 of stage s-1), plus skip
/// edges (from, to): stage `to` also takes output 1 of stage `from`.
inline Manifest chain(int n, std::vector<std::pair<int, int>> skips = {}) {
  Manifest m = Manifest::chain(n);
  for (StageInfo &info : m.stages)
    info.outputs.push_back({"skip", ValueKind::Tensor, {}, "", {}});
  for (auto [from, to] : skips) {
    StageInput in;
    in.name = "skip";
    in.source = ValueRef::fromStage(from, 1);
    m.stages[to].inputs.push_back(in);
    m.stages[from].outputs[1].consumers.push_back(to);
  }
  return m;
}

/// Each rank's compute actions as cells, in order: "0F0 0F1 0B0 ...".
inline std::vector<std::string> computeOrder(const Schedule &s) {
  std::vector<std::string> out;
  for (const std::vector<Action> &actions : s.ranks) {
    std::string text;
    for (const Action &a : actions)
      if (a.isCompute())
        text += (text.empty() ? "" : " ") + a.cell();
    out.push_back(text);
  }
  return out;
}

#ifdef PPC_FIXTURES_DIR
/// The text of tests/unit/fixtures/schedule/NAME ("" when it is missing).
inline std::string fixture(const std::string &name) {
  std::ifstream in(std::string(PPC_FIXTURES_DIR) + "/schedule/" + name,
                   std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
#endif

} // namespace ppc::test

#endif // PPC_TESTS_UNIT_RUNTIME_SCHEDULE_SCHEDULEBUILDERS_H
