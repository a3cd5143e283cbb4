//===- fuzz/fuzz_schedule_csv.cpp - Fuzz the schedule CSV reader ----------===//
//
// Feeds bytes to placementFromCSV and trainingScheduleFromCSV, the entry
// `ppc train --schedule-csv` and `ppc schedule --from-csv` use on PyTorch's
// compute_only and compute_comms layouts. The first byte picks the job: 1-8
// stages of a chain (with a skip from stage 0 to the last from 3 stages on),
// a rank count that divides them, 1-8 microbatches; the rest is the file. An
// error must be one line; a schedule it accepts must (1) simulate cleanly
// and (2) come back action for action through both writers and the reader.
//
//===----------------------------------------------------------------------===//
#include "FuzzCheck.h"

#include "runtime/schedule/Schedule.h"
#include "runtime/schedule/ScheduleCSV.h"
#include "runtime/schedule/Simulate.h"
#include "tests/unit/runtime/schedule/ScheduleBuilders.h"

#include <string>
#include <vector>

using namespace ppc;

namespace {
void checkOneLine(llvm::Error err) {
  std::string text = llvm::toString(std::move(err));
  if (text.empty() || text.find('\n') != std::string::npos)
    fuzz::fail("an error that is not one line: " + text);
}

std::vector<std::vector<std::string>> actions(const Schedule &s) {
  std::vector<std::vector<std::string>> out;
  for (const std::vector<Action> &rank : s.ranks) {
    out.emplace_back();
    for (const Action &a : rank)
      out.back().push_back(a.str(s.edges));
  }
  return out;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  int stages = 1 + data[0] % 8;
  std::vector<int> divisors;
  for (int r = 1; r <= stages; ++r)
    if (stages % r == 0)
      divisors.push_back(r);
  int ranks = divisors[(data[0] / 8) % divisors.size()];
  int microbatches = 1 + data[1] % 8;
  std::string text(reinterpret_cast<const char *>(data + 2), size - 2);
  Manifest m = test::chain(
      stages, stages >= 3 ? std::vector<std::pair<int, int>>{{0, stages - 1}}
                          : std::vector<std::pair<int, int>>{});
  auto placement = placementFromCSV(text, stages, ranks, "fuzz.csv");
  if (!placement) {
    checkOneLine(placement.takeError());
    return 0;
  }
  auto schedule =
      trainingScheduleFromCSV(m, *placement, text, microbatches, "fuzz.csv");
  if (!schedule) {
    checkOneLine(schedule.takeError());
    return 0;
  }
  if (llvm::Error err = simulateSchedule(*schedule))
    fuzz::fail("an accepted schedule does not simulate: " +
               llvm::toString(std::move(err)));
  for (CSVLayout layout : {CSVLayout::ComputeOnly, CSVLayout::ComputeComms}) {
    std::string written = scheduleToCSV(*schedule, layout);
    auto back = trainingScheduleFromCSV(m, *placement, written, microbatches,
                                        "fuzz.csv");
    if (!back)
      fuzz::fail(csvLayoutName(layout) + " output is not read back: " +
                 llvm::toString(back.takeError()));
    // compute_only derives the messages, so only compute_comms (or a file
    // without messages) keeps every action where it was.
    std::vector<std::vector<std::string>> got = actions(*back);
    if (layout == CSVLayout::ComputeComms && got != actions(*schedule))
      fuzz::fail("compute_comms output reads back to other actions");
  }
  return 0;
}
