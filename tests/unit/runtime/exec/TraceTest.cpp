//===- tests/unit/runtime/exec/TraceTest.cpp - Recording and writing -----===//
#include "runtime/exec/Trace.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include "tests/unit/ScratchDirTest.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace ppc;

namespace {

std::string fixture(llvm::StringRef name) {
  return std::string(PPC_FIXTURES_DIR) + "/trace/" + name.str();
}

std::string contents(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : "<unreadable>";
}

class TraceTest : public test::ScratchDirTest {};

/// The events of a two-rank run with fixed times: rank 0 runs stage 0 and
/// sends microbatch 0 to rank 1, which runs stage 1 and collects.
std::vector<TraceRecorder> twoRanks() {
  std::vector<TraceRecorder> ranks{TraceRecorder(0), TraceRecorder(1)};
  int64_t id = messageFlowId(0, 0, 1, 0);
  ranks[0].add({"F", "compute", 0, 0, 1000, 500});
  ranks[0].add({"SEND_F", "send", 0, 0, 1500, 20, id, true});
  ranks[1].add({"wait", "wait", -1, -1, 1000, 400});
  ranks[1].add({"RECV_F", "recv", 1, 0, 1400, 150, id, false});
  ranks[1].add({"F", "compute", 1, 0, 1550, 700});
  ranks[1].add({"OUT", "other", 1, 0, 2250, 10});
  return ranks;
}

std::vector<std::string> texts(const std::vector<TraceRecorder> &ranks) {
  std::vector<std::string> out;
  for (const TraceRecorder &r : ranks)
    out.push_back(r.eventsJSON());
  return out;
}

std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : "";
}

} // namespace

TEST(TraceRecorderTest, ClockIsMonotonicMicroseconds) {
  int64_t a = TraceRecorder::nowUs();
  int64_t b = TraceRecorder::nowUs();
  EXPECT_GT(a, 0);
  EXPECT_LE(a, b);
}

TEST(TraceRecorderTest, FlowIdsAreStableDistinctAndExactInJavaScript) {
  EXPECT_EQ(messageFlowId(3, 0, 1, 7), messageFlowId(3, 0, 1, 7));
  std::set<int64_t> ids;
  for (int channel = 0; channel < 8; ++channel)
    for (int64_t seq = 0; seq < 64; ++seq)
      for (int from = 0; from < 3; ++from) {
        int64_t id = messageFlowId(channel, from, from + 1, seq);
        EXPECT_GE(id, 0);
        EXPECT_LE(id, kMaxFlowId);
        ids.insert(id);
      }
  EXPECT_EQ(ids.size(), 8u * 64 * 3);
}

TEST(TraceRecorderTest, EventsJSONHasCompleteAndFlowEvents) {
  TraceRecorder recorder(3);
  recorder.reserve(4);
  recorder.add({"F", "compute", 2, 5, 100, 40});
  recorder.add({"SEND_F", "send", 2, 5, 140, 3, 77, true});
  recorder.add({"RECV_B", "recv", 2, 5, 150, 9, 78, false});
  ASSERT_EQ(recorder.events().size(), 3u);
  EXPECT_EQ(recorder.events()[0].name, "F");

  auto parsed = llvm::json::parse(recorder.eventsJSON());
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  const llvm::json::Array *events = parsed->getAsArray();
  ASSERT_TRUE(events);
  ASSERT_EQ(events->size(), 5u); // 3 complete events, 2 flow events.
  const llvm::json::Object &f = *(*events)[0].getAsObject();
  EXPECT_EQ(f.getString("ph"), llvm::StringRef("X"));
  EXPECT_EQ(f.getString("name"), llvm::StringRef("F"));
  EXPECT_EQ(f.getString("cat"), llvm::StringRef("compute"));
  EXPECT_EQ(f.getInteger("ts"), int64_t(100));
  EXPECT_EQ(f.getInteger("dur"), int64_t(40));
  EXPECT_EQ(f.getInteger("pid"), int64_t(3));
  EXPECT_EQ(f.getInteger("tid"), int64_t(0));
  EXPECT_EQ(f.getObject("args")->getInteger("stage"), int64_t(2));
  EXPECT_EQ(f.getObject("args")->getInteger("microbatch"), int64_t(5));

  const llvm::json::Object &start = *(*events)[2].getAsObject();
  EXPECT_EQ(start.getString("ph"), llvm::StringRef("s"));
  EXPECT_EQ(start.getInteger("id"), int64_t(77));
  EXPECT_EQ(start.getInteger("ts"), int64_t(140));
  EXPECT_EQ(start.getString("bp"), llvm::None);
  const llvm::json::Object &end = *(*events)[4].getAsObject();
  EXPECT_EQ(end.getString("ph"), llvm::StringRef("f"));
  EXPECT_EQ(end.getString("bp"), llvm::StringRef("e"));
  EXPECT_EQ(end.getInteger("id"), int64_t(78));
  EXPECT_EQ(end.getInteger("ts"), int64_t(150));
  EXPECT_EQ(start.getString("cat"), end.getString("cat"));
  EXPECT_EQ(start.getString("name"), end.getString("name"));
}

TEST_F(TraceTest, WrittenFileHasLanesEventsAndMatchedFlows) {
  std::string p = path("trace.json");
  ASSERT_EQ(errorOf(writeTraceFile(p, texts(twoRanks()))), "");

  auto parsed = llvm::json::parse(contents(p));
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  const llvm::json::Object *top = parsed->getAsObject();
  ASSERT_TRUE(top);
  EXPECT_EQ(top->getString("displayTimeUnit"), llvm::StringRef("ms"));
  ASSERT_TRUE(top->getObject("otherData"));
  EXPECT_EQ(top->getObject("otherData")->getInteger("ranks"), int64_t(2));
  const llvm::json::Array *events = top->getArray("traceEvents");
  ASSERT_TRUE(events);

  std::map<int64_t, std::string> laneNames;
  std::map<int64_t, std::vector<std::string>> complete;
  std::map<int64_t, std::pair<int, int>> flows; // id -> (s count, f count)
  for (const llvm::json::Value &value : *events) {
    const llvm::json::Object &e = *value.getAsObject();
    ASSERT_TRUE(e.getString("ph"));
    ASSERT_TRUE(e.getInteger("pid"));
    ASSERT_TRUE(e.getInteger("tid"));
    ASSERT_TRUE(e.getNumber("ts"));
    llvm::StringRef ph = *e.getString("ph");
    int64_t pid = *e.getInteger("pid");
    if (ph == "M" && e.getString("name") == llvm::StringRef("process_name"))
      laneNames[pid] = e.getObject("args")->getString("name")->str();
    if (ph == "X") {
      EXPECT_GE(*e.getNumber("dur"), 0);
      complete[pid].push_back(e.getString("name")->str());
    }
    if (ph == "s" || ph == "f") {
      EXPECT_EQ(e.getString("cat"), llvm::StringRef("flow"));
      auto &[starts, ends] = flows[*e.getInteger("id")];
      ++(ph == "s" ? starts : ends);
      if (ph == "f") {
        EXPECT_EQ(e.getString("bp"), llvm::StringRef("e"));
      }
    }
  }
  EXPECT_EQ(laneNames,
            (std::map<int64_t, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(complete[0], (std::vector<std::string>{"F", "SEND_F"}));
  EXPECT_EQ(complete[1],
            (std::vector<std::string>{"wait", "RECV_F", "F", "OUT"}));
  ASSERT_EQ(flows.size(), 1u);
  EXPECT_EQ(flows.begin()->first, messageFlowId(0, 0, 1, 0));
  EXPECT_EQ(flows.begin()->second, std::make_pair(1, 1));
}

// tests/cli/test_trace.py checks this file against the trace event format,
// so the format check covers what writeTraceFile writes. After a deliberate
// change of the format, regenerate it with PPC_UPDATE_TRACE_FIXTURES=1.
TEST_F(TraceTest, WrittenFileMatchesTheFixture) {
  std::string p = path("trace.json");
  ASSERT_EQ(errorOf(writeTraceFile(p, texts(twoRanks()))), "");
  if (std::getenv("PPC_UPDATE_TRACE_FIXTURES")) {
    ASSERT_EQ(
        errorOf(writeTraceFile(fixture("written.json"), texts(twoRanks()))),
        "");
  }
  EXPECT_EQ(contents(p), contents(fixture("written.json")));
}

TEST_F(TraceTest, WriterStampsEachEventWithItsRank) {
  // Rank 1's text claims pid 0: the index wins.
  TraceRecorder wrong(0);
  wrong.add({"F", "compute", 1, 0, 10, 5});
  std::string p = path("trace.json");
  ASSERT_EQ(errorOf(writeTraceFile(
                p, {TraceRecorder(0).eventsJSON(), wrong.eventsJSON()})),
            "");
  auto parsed = llvm::json::parse(contents(p));
  ASSERT_TRUE(static_cast<bool>(parsed)) << llvm::toString(parsed.takeError());
  const llvm::json::Array *events =
      parsed->getAsObject()->getArray("traceEvents");
  ASSERT_TRUE(events);
  std::vector<int64_t> complete;
  std::set<int64_t> lanes;
  for (const llvm::json::Value &value : *events) {
    const llvm::json::Object &e = *value.getAsObject();
    if (e.getString("ph") == llvm::StringRef("X"))
      complete.push_back(*e.getInteger("pid"));
    if (e.getString("name") == llvm::StringRef("process_name"))
      lanes.insert(*e.getInteger("pid"));
  }
  EXPECT_EQ(complete, std::vector<int64_t>{1});
  EXPECT_EQ(lanes, (std::set<int64_t>{0, 1}));
}

TEST_F(TraceTest, WriterRefusesBadRankTexts) {
  std::string p = path("trace.json");
  std::string ok = TraceRecorder(0).eventsJSON();
  EXPECT_EQ(errorOf(writeTraceFile(p, {ok, "{\"a\": 1}"})),
            "the trace of rank 1 is not a JSON array");
  EXPECT_EQ(errorOf(writeTraceFile(p, {ok, "[1]"})),
            "the trace of rank 1: event 0 is not an object");
  std::string bad = errorOf(writeTraceFile(p, {"[", ok}));
  EXPECT_EQ(bad.rfind("the trace of rank 0 is not valid JSON: ", 0), 0u) << bad;
  EXPECT_FALSE(llvm::sys::fs::exists(p));
}
