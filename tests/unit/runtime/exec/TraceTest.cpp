//===- tests/unit/runtime/exec/TraceTest.cpp - Timeline traces ------------===//
#include "runtime/exec/Trace.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

using namespace ppc;

namespace {

std::string fixture(llvm::StringRef name) {
  return std::string(PPC_FIXTURES_DIR) + "/trace/" + name.str();
}

std::string contents(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : "<unreadable>";
}

class TraceTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("ppc-trace", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  llvm::SmallString<256> dir;
};

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

template <typename T> std::string errorOf(llvm::Expected<T> value) {
  return value ? "" : llvm::toString(value.takeError());
}

std::string parseError(llvm::StringRef text) {
  return errorOf(parseTrace(text, "trace 't.json'"));
}

/// A trace of one complete event with `fields` replacing or adding to a
/// valid event's (a null value removes the field).
std::string oneEvent(const std::map<std::string, std::string> &fields) {
  std::map<std::string, std::string> event{
      {"name", "\"F\""}, {"cat", "\"compute\""}, {"ph", "\"X\""}, {"ts", "10"},
      {"dur", "5"},      {"pid", "0"},           {"tid", "0"}};
  for (const auto &[key, value] : fields) {
    if (value == "null")
      event.erase(key);
    else
      event[key] = value;
  }
  std::string text = "{\"traceEvents\": [{\"name\": \"process_name\", "
                     "\"ph\": \"M\", \"pid\": 0}, {";
  bool first = true;
  for (const auto &[key, value] : event) {
    text += (first ? "\"" : ", \"") + key + "\": " + value;
    first = false;
  }
  return text + "}]}";
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

  // And ppc reads its own file back.
  auto timeline = readTraceFile(p);
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  EXPECT_EQ(timeline->ranks, (std::vector<int>{0, 1}));
  ASSERT_EQ(timeline->events.size(), 6u);
  const TimelineEvent &recv = timeline->events[3];
  EXPECT_EQ(recv.rank, 1);
  EXPECT_EQ(recv.name, "RECV_F");
  EXPECT_EQ(recv.category, "recv");
  EXPECT_EQ(recv.stage, 1);
  EXPECT_EQ(recv.microbatch, 0);
  EXPECT_EQ(recv.startUs, 1400);
  EXPECT_EQ(recv.durationUs, 150);
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
  auto timeline = readTraceFile(p);
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  ASSERT_EQ(timeline->events.size(), 1u);
  EXPECT_EQ(timeline->events[0].rank, 1);
  EXPECT_EQ(timeline->ranks, (std::vector<int>{0, 1}));
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

// Numbers worked out by hand in fixtures/trace/summary.json's "otherData":
// rank 0 computes 1000 + 1000 + 2000 + 2000 us and is blocked for a
// 1800 us wait and receives of 200 and 800 us; rank 1 computes 1500 + 1250
// + 1500 + 1250 us and is blocked over [0, 1150) (a wait [0, 1050)
// overlapping a receive [1000, 1150): once, not 1200 us) and 100 us; the
// trace spans [0, 10000) us.
TEST(TraceSummaryTest, HandComputedNumbers) {
  auto timeline = readTraceFile(fixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  EXPECT_DOUBLE_EQ(s.spanUs, 10000);
  EXPECT_DOUBLE_EQ(s.startUs, 5e9);
  ASSERT_EQ(s.ranks.size(), 2u);
  const RankSummary &r0 = s.ranks[0], &r1 = s.ranks[1];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_DOUBLE_EQ(r0.busyUs, 6000);
  EXPECT_DOUBLE_EQ(r0.waitUs, 2800);
  EXPECT_DOUBLE_EQ(r0.bubble, 0.4);
  EXPECT_EQ(r1.rank, 1);
  EXPECT_DOUBLE_EQ(r1.busyUs, 5500);
  EXPECT_DOUBLE_EQ(r1.waitUs, 1250);
  EXPECT_DOUBLE_EQ(r1.bubble, 0.45);
  EXPECT_DOUBLE_EQ(s.bubble, 0.425);
  for (const RankSummary &r : s.ranks) {
    EXPECT_EQ(r.events, 10);
    EXPECT_EQ(r.compute, 4);
    EXPECT_EQ(r.send, 2);
    EXPECT_EQ(r.recv, 2);
    EXPECT_EQ(r.wait, 1);
    EXPECT_EQ(r.other, 1);
  }
  ASSERT_TRUE(s.slowestForward);
  EXPECT_EQ(s.slowestForward->stage, 1);
  EXPECT_DOUBLE_EQ(s.slowestForward->meanUs, 1500);
  EXPECT_EQ(s.slowestForward->count, 2);
  ASSERT_TRUE(s.slowestBackward);
  EXPECT_EQ(s.slowestBackward->stage, 0);
  EXPECT_DOUBLE_EQ(s.slowestBackward->meanUs, 2000);

  std::string text;
  llvm::raw_string_ostream os(text);
  printTraceSummary(s, os);
  os.flush();
  EXPECT_NE(text.find("trace: rank=0 busy_ms=6.000 wait_ms=2.800 "
                      "bubble=0.4000 events=10 compute=4 send=2 recv=2 "
                      "wait=1 other=1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trace: rank=1 busy_ms=5.500 wait_ms=1.250 "
                      "bubble=0.4500 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("trace: span_ms=10.000 ranks=2 bubble=0.4250 "
                      "slowest_f_stage=1 slowest_f_ms=1.500 "
                      "slowest_b_stage=0 slowest_b_ms=2.000\n"),
            std::string::npos)
      << text;
}

TEST(TraceSummaryTest, ForwardOnlyHasNoBackwardStage) {
  auto timeline = parseTrace(oneEvent({{"args", "{\"stage\": 4}"}}), "t");
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  ASSERT_TRUE(s.slowestForward);
  EXPECT_EQ(s.slowestForward->stage, 4);
  EXPECT_FALSE(s.slowestBackward);
  EXPECT_DOUBLE_EQ(s.ranks[0].bubble, 0);
}

TEST(TraceParseTest, HostileTracesGiveOneLineErrors) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"{\"traceEvents\": 5}",
       "trace 't.json': expected an object with an array \"traceEvents\", "
       "or an array"},
      {"\"text\"", "trace 't.json': expected an object with an array "
                   "\"traceEvents\", or an array"},
      {"[1]", "trace 't.json': event 0 is not an object"},
      {"[{}]", "trace 't.json': event 0: missing \"ph\""},
      {"[{\"ph\": 88}]", "trace 't.json': event 0: \"ph\" must be a string"},
      {oneEvent({{"name", "null"}}),
       "trace 't.json': event 1: missing \"name\""},
      {oneEvent({{"dur", "null"}}), "trace 't.json': event 1: missing \"dur\""},
      {oneEvent({{"dur", "-5"}}),
       "trace 't.json': event 1: \"dur\" must be a number in [0, 1e+15] "
       "(got -5)"},
      {oneEvent({{"dur", "\"5\""}}),
       "trace 't.json': event 1: \"dur\" must be a number in [0, 1e+15]"},
      {oneEvent({{"ts", "1e300"}}),
       "trace 't.json': event 1: \"ts\" must be a number in [0, 1e+15] "
       "(got 1e+300)"},
      {oneEvent({{"pid", "65536"}}),
       "trace 't.json': event 1: \"pid\" must be an integer in [0, 65535] "
       "(got 65536)"},
      {oneEvent({{"pid", "0.5"}}),
       "trace 't.json': event 1: \"pid\" must be an integer in [0, 65535] "
       "(got 0.5)"},
      {oneEvent({{"tid", "1e19"}}),
       "trace 't.json': event 1: \"tid\" must be an integer in "
       "[-2147483648, 2147483647] (got 1e+19)"},
      {oneEvent({{"cat", "\"gpu\""}}),
       "trace 't.json': event 1: unknown category 'gpu' (expected compute, "
       "send, recv, wait or other)"},
      // The category is the file's text: one line, and short.
      {oneEvent({{"cat", "\"a\\nb\\u00e9\""}}),
       "trace 't.json': event 1: unknown category 'a\\x0ab\\xc3\\xa9' "
       "(expected compute, send, recv, wait or other)"},
      {oneEvent({{"cat", "\"" + std::string(100, 'c') + "\""}}),
       "trace 't.json': event 1: unknown category '" + std::string(32, 'c') +
           "...' (expected compute, send, recv, wait or other)"},
      {oneEvent({{"args", "[]"}}),
       "trace 't.json': event 1: \"args\" must be an object"},
      {oneEvent({{"args", "{\"stage\": \"2\"}"}}),
       "trace 't.json': event 1: \"args.stage\" must be an integer in [-1, "
       "2147483647]"},
      {oneEvent({{"args", "{\"microbatch\": -2}"}}),
       "trace 't.json': event 1: \"args.microbatch\" must be an integer in "
       "[-1, 2147483647] (got -2)"},
      {"[{\"ph\": \"s\", \"name\": \"m\", \"cat\": \"flow\", \"pid\": 0, "
       "\"tid\": 0, \"ts\": 1}]",
       "trace 't.json': event 0: missing \"id\""},
      {"[{\"ph\": \"f\", \"name\": \"m\", \"cat\": \"flow\", \"pid\": 0, "
       "\"tid\": 0, \"ts\": 1, \"id\": -1}]",
       "trace 't.json': event 0: \"id\" must be an integer in [0, "
       "9007199254740991] (got -1)"},
      {"[{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0}]",
       "trace 't.json' has no complete events (ph \"X\")"},
      {"[]", "trace 't.json' has no complete events (ph \"X\")"},
  };
  for (const auto &[text, expected] : cases) {
    SCOPED_TRACE(text);
    std::string error = parseError(text);
    EXPECT_EQ(error, expected);
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
}

TEST(TraceParseTest, NotJSONAndDeepNesting) {
  std::string error = parseError("{\"traceEvents\": [");
  EXPECT_EQ(error.rfind("trace 't.json' is not valid JSON: ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
  EXPECT_EQ(parseError(std::string(100000, '[') + std::string(100000, ']')),
            "trace 't.json' nests deeper than 256 levels");
}

TEST(TraceParseTest, HugeArraysAreRefusedBeforeUse) {
  std::string text = "[";
  for (size_t i = 0; i <= kMaxTraceEvents; ++i)
    text += i ? ",{}" : "{}";
  text += "]";
  EXPECT_EQ(parseError(text), "trace 't.json' has 1000001 events, over the "
                              "limit of 1000000");
}

TEST(TraceParseTest, IgnoresPhasesItDoesNotDraw) {
  auto timeline = parseTrace(
      "[{\"ph\": \"i\", \"name\": \"mark\", \"pid\": 9, \"tid\": 0, \"ts\": "
      "3}, {\"ph\": \"C\", \"name\": \"mem\", \"pid\": 0, \"ts\": 1, "
      "\"args\": {\"v\": 1}}, {\"ph\": \"X\", \"name\": \"F\", \"cat\": "
      "\"compute\", \"pid\": 2, \"tid\": 0, \"ts\": 0, \"dur\": 1.5}]",
      "t");
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  EXPECT_EQ(timeline->ranks, std::vector<int>{2});
  ASSERT_EQ(timeline->events.size(), 1u);
  EXPECT_EQ(timeline->events[0].durationUs, 1.5);
  EXPECT_EQ(timeline->events[0].stage, -1);
}

TEST_F(TraceTest, FileErrorsNameTheFile) {
  std::string missing = path("missing.json");
  EXPECT_EQ(errorOf(readTraceFile(missing)),
            "cannot read trace '" + missing + "': No such file or directory");
  EXPECT_EQ(errorOf(readTraceFile(std::string(dir))),
            "trace '" + std::string(dir) +
                "' is not a regular file (a "
                "directory)");
  // A sparse file over the cap is refused before a byte is read.
  std::string big = path("big.json");
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(big, ec);
    ASSERT_FALSE(ec);
  }
  ASSERT_EQ(::truncate(big.c_str(), kMaxTraceBytes + 1), 0);
  EXPECT_EQ(errorOf(readTraceFile(big)),
            "trace '" + big + "' is " + std::to_string(kMaxTraceBytes + 1) +
                " bytes, over the limit of " + std::to_string(kMaxTraceBytes));
}

TEST(TraceSVGTest, RowsBoxesLabelsAndEscaping) {
  auto timeline = readTraceFile(fixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  timeline->events[0].name = "<F&>";
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(*timeline, os);
  os.flush();
  auto count = [&](llvm::StringRef needle) {
    return llvm::StringRef(svg).count(needle);
  };
  EXPECT_EQ(count("<g class=\"rank\""), 2u);
  EXPECT_EQ(count(">rank 0</text>"), 1u);
  EXPECT_EQ(count(">rank 1</text>"), 1u);
  EXPECT_EQ(count("<rect class=\"compute "), 8u);
  EXPECT_EQ(count("<rect class=\"compute B\""), 4u);
  EXPECT_EQ(count("<rect class=\"compute other\""), 1u); // the renamed one
  EXPECT_EQ(count("&lt;F&amp;&gt;"), 2u);                // its title and label
  EXPECT_EQ(count("<F&>"), 0u);
  EXPECT_EQ(count(">1F0</text>"), 1u);
  EXPECT_EQ(count(">time (ms)</text>"), 1u);
  // Each event is drawn as itself.
  EXPECT_EQ(count("merged"), 0u);
}

// parseTrace parses a trace one value at a time; a malformed text must still
// get the error llvm::json::parse gives for the whole text (the naive
// reference), with the same line, column and byte.
TEST(TraceParseTest, SyntaxErrorsAreThoseOfTheWholeText) {
  std::string bigOther = "{\"traceEvents\": [], \"otherData\": [";
  for (int i = 0; i < 30000; ++i)
    bigOther += "[1, 2, 3],\n";
  std::string bigEvent = "[{\"ph\": \"i\", \"args\": [";
  for (int i = 0; i < 30000; ++i)
    bigEvent += "\"aaaa\", ";
  const std::vector<std::string> cases{
      "",
      "  \n ",
      "[1,]",
      "[{} x]",
      "[{}\n, {}\n,\n {] ",
      "[{\"ph\": \"X\"} {\"ph\": \"X\"}]",
      "{\"traceEvents\": [{\"ph\": tru}]}",
      "{\"traceEvents\": [{\"ph\": nul",
      "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1e}]}",
      "{\"traceEvents\": [], \"x\" 1}",
      "{\"traceEvents\": [], 1: 2}",
      "{\"traceEvents\": []]",
      "{\"traceEvents\": [] ,}",
      "{\"traceEvents\": [{\"name\": \"\\u12\"}]}",
      "[\"\\u12\"]]",
      "[\"\\x\"]",
      "[\"a\x01\"]",
      "[\"unterminated",
      "[n\xC3\xA9\xC3\xA9]",
      "[\xC3\xA9]",
      "[\xC3(]",
      "[{\"a\": [1, 2}]",
      "[{}] x",
      "\"text\" x",
      "-",
      bigOther + "[1, 2,, 3]]}",
      bigOther + "[1, 2, 3]}",
      bigEvent + "\"a\" \"b\"]}]",
      // A JSON error comes before any problem of an event.
      "[{\"ph\": 5}, {\"ph\": \"X\"} x]",
      "{\"traceEvents\": 5, \"otherData\": [1e]}",
  };
  for (const std::string &text : cases) {
    SCOPED_TRACE(text.substr(0, 60));
    auto whole = llvm::json::parse(text);
    ASSERT_FALSE(static_cast<bool>(whole));
    EXPECT_EQ(parseError(text), "trace 't.json' is not valid JSON: " +
                                    llvm::toString(whole.takeError()));
  }
}

TEST(TraceParseTest, TheLastTraceEventsMemberHoldsTheEvents) {
  // As in llvm::json::Object, the last of a repeated key wins.
  std::string good =
      oneEvent({}).substr(std::string("{\"traceEvents\": ").size());
  good.pop_back();
  auto timeline =
      parseTrace("{\"traceEvents\": [1], \"traceEvents\": " + good + "}", "t");
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  EXPECT_EQ(timeline->events.size(), 1u);
  EXPECT_EQ(parseError("{\"traceEvents\": " + good + ", \"traceEvents\": 5}"),
            "trace 't.json': expected an object with an array "
            "\"traceEvents\", or an array");
}

TEST(TraceParseTest, EventsAndNamesAreBounded) {
  // The size is checked on the event's text, before it is parsed.
  std::string big = "{\"ph\": \"X\", \"args\": {\"pad\": \"" +
                    std::string(kMaxTraceEventBytes, 'x') + "\"}}";
  EXPECT_EQ(parseError("[" + big + "]"),
            "trace 't.json': event 0 is " + std::to_string(big.size()) +
                " bytes, over the limit of " +
                std::to_string(kMaxTraceEventBytes));
  std::string name(kMaxTraceNameBytes, 'n');
  EXPECT_EQ(parseError(oneEvent({{"name", "\"" + name + "\""}})), "");
  EXPECT_EQ(parseError(oneEvent({{"name", "\"" + name + "n\""}})),
            "trace 't.json': event 1: \"name\" is 65 bytes, over the limit of "
            "64");
}

TEST(TraceParseTest, OverTheEventLimitBeforeAnyEventIsRead) {
  // Events that are not even objects: the count is all that is checked.
  std::string text = "{\"traceEvents\": [";
  for (size_t i = 0; i < kMaxTraceEvents + 5; ++i)
    text += i ? ",1" : "1";
  text += "], \"otherData\": {}}";
  EXPECT_EQ(parseError(text), "trace 't.json' has 1000005 events, over the "
                              "limit of 1000000");
}

// A dense trace is drawn with merged boxes: at most kMaxPlotBoxes of them,
// every event in exactly one, no labels on merged ones.
TEST(TraceSVGTest, DenseTracesAreMergedIntoBoundedBoxes) {
  Timeline timeline;
  timeline.ranks = {0, 1};
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    bool send = i % 3 == 0;
    timeline.events.push_back({i % 2, send ? "SEND_F" : "F",
                               send ? "send" : "compute", 0, i,
                               static_cast<double>(i), 1});
  }
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(timeline, os);
  os.flush();
  size_t boxes = 0, events = 0, merged = 0;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(svg).split(lines, '\n');
  for (llvm::StringRef line : lines) {
    if (!line.startswith("<rect class=\"compute") &&
        !line.startswith("<rect class=\"send"))
      continue;
    ++boxes;
    size_t at = line.find("data-events=\"");
    uint64_t count = 1;
    if (at != llvm::StringRef::npos) {
      ++merged;
      llvm::StringRef digits = line.drop_front(at + 13);
      ASSERT_FALSE(digits.take_until([](char c) { return c == '"'; })
                       .getAsInteger(10, count))
          << line.str();
    }
    events += count;
  }
  EXPECT_EQ(events, static_cast<size_t>(n));
  EXPECT_GT(merged, 0u);
  EXPECT_LE(boxes, kMaxPlotBoxes);
  EXPECT_EQ(llvm::StringRef(svg).count("<text class=\"event\""), 0u);
  EXPECT_LT(svg.size(), size_t(4) << 20);
}

namespace {
/// A timeline of `ranks` ranks from events (rank, name, category, stage,
/// microbatch, start, duration).
Timeline timelineOf(std::vector<TimelineEvent> events) {
  Timeline t;
  std::set<int> ranks;
  for (const TimelineEvent &e : events)
    ranks.insert(e.rank);
  t.ranks.assign(ranks.begin(), ranks.end());
  t.events = std::move(events);
  return t;
}

/// Two ranks, three steps of 100 us starting at 1000, 1200 and 1400 (rank
/// 1's 10 us later, and 10 us longer), one F of 50 us at the start of each.
Timeline threeSteps(llvm::StringRef kind = kStepEventName) {
  std::vector<TimelineEvent> events;
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 2; ++r) {
      double start = 1000 + 200 * k + 10 * r;
      events.push_back({r, kind.str(), "other", -1, -1, start, 100.0 + 10 * r});
      events.push_back({r, "F", "compute", r, k, start + 5, 50});
    }
  return timelineOf(std::move(events));
}

std::string svgOf(const Timeline &timeline, const PlotOptions &options = {}) {
  std::string svg;
  llvm::raw_string_ostream os(svg);
  renderTimelineSVG(timeline, os, options);
  os.flush();
  return svg;
}
} // namespace

TEST(TraceRangeTest, TimePoints) {
  auto ms = parseTimePoint("120ms");
  ASSERT_TRUE(static_cast<bool>(ms)) << llvm::toString(ms.takeError());
  EXPECT_EQ(ms->kind, TimePoint::Kind::Ms);
  EXPECT_DOUBLE_EQ(ms->ms, 120);
  auto half = parseTimePoint("0.5ms");
  ASSERT_TRUE(static_cast<bool>(half));
  EXPECT_DOUBLE_EQ(half->ms, 0.5);
  auto step = parseTimePoint("step:3");
  ASSERT_TRUE(static_cast<bool>(step));
  EXPECT_EQ(step->kind, TimePoint::Kind::Step);
  EXPECT_EQ(step->index, 3);
  auto batch = parseTimePoint("batch:12");
  ASSERT_TRUE(static_cast<bool>(batch));
  EXPECT_EQ(batch->kind, TimePoint::Kind::Batch);
  EXPECT_EQ(batch->index, 12);
  const std::string bad = "' is not a time (e.g. 120ms, step:3, batch:2)";
  for (const char *text :
       {"120", "ms", "step:", "steps:3", "12 ms", "infms", "nanms", "-1ms",
        "1e400ms", "step:1.5", "batch:x", "STEP:1", ""})
    EXPECT_EQ(errorOf(parseTimePoint(text)), "'" + std::string(text) + bad)
        << text;
  EXPECT_EQ(errorOf(parseTimePoint("step:0")),
            "'step:0" + bad + ": steps count from 1");
  EXPECT_EQ(errorOf(parseTimePoint("batch:-2")),
            "'batch:-2" + bad + ": batches count from 1");
  EXPECT_EQ(errorOf(parseTimePoint("1\x01ms")), "'1\\x01ms" + bad);
}

TEST(TraceRangeTest, MarksAreTheKthEventOfEachRank) {
  std::vector<TimelineMark> marks = timelineMarks(threeSteps());
  ASSERT_EQ(marks.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(marks[k].kind, "step");
    EXPECT_EQ(marks[k].index, k + 1);
    EXPECT_DOUBLE_EQ(marks[k].startUs, 1000 + 200 * k);     // rank 0's start
    EXPECT_DOUBLE_EQ(marks[k].endUs, 1000 + 200 * k + 120); // rank 1's end
  }
  EXPECT_EQ(timelineMarks(threeSteps(kBatchEventName))[1].kind, "batch");
  // A "step" of another category is not a mark.
  Timeline t = threeSteps();
  for (TimelineEvent &e : t.events)
    e.category = e.category == "other" ? "wait" : e.category;
  EXPECT_TRUE(timelineMarks(t).empty());
}

TEST(TraceRangeTest, ResolvesAndRefusesRanges) {
  Timeline t = threeSteps();
  auto range = [&](std::optional<TimePoint> from, std::optional<TimePoint> to) {
    return resolveTimeRange(t, from, to, "--from X", "--to Y");
  };
  TimePoint step2{TimePoint::Kind::Step, 0, 2};
  TimePoint step3{TimePoint::Kind::Step, 0, 3};
  auto r = range(step2, step3);
  ASSERT_TRUE(static_cast<bool>(r)) << llvm::toString(r.takeError());
  EXPECT_DOUBLE_EQ(r->startUs, 1200);
  EXPECT_DOUBLE_EQ(r->endUs, 1520);
  auto whole = range(std::nullopt, std::nullopt);
  ASSERT_TRUE(static_cast<bool>(whole));
  EXPECT_DOUBLE_EQ(whole->startUs, 1000);
  EXPECT_DOUBLE_EQ(whole->endUs, 1520);
  auto ms = range(TimePoint{TimePoint::Kind::Ms, 0.25, 0}, std::nullopt);
  ASSERT_TRUE(static_cast<bool>(ms));
  EXPECT_DOUBLE_EQ(ms->startUs, 1250);
  EXPECT_EQ(errorOf(range(TimePoint{TimePoint::Kind::Step, 0, 4}, {})),
            "--from X: the trace has 3 steps");
  EXPECT_EQ(errorOf(range({}, TimePoint{TimePoint::Kind::Batch, 0, 1})),
            "--to Y: the trace has no batch events (it has step events)");
  EXPECT_EQ(errorOf(range(TimePoint{TimePoint::Kind::Ms, 0.52, 0}, {})),
            "--from X: the trace ends at 0.520 ms");
  EXPECT_EQ(errorOf(range(step3, step2)), "--from X is not before --to Y");
  // Even where step 3 starts on one rank before step 2 ends on another.
  Timeline overlapping = threeSteps();
  for (TimelineEvent &e : overlapping.events)
    if (e.rank == 1 && e.name == "step")
      e.durationUs += 300;
  EXPECT_EQ(errorOf(resolveTimeRange(overlapping, step3, step2, "--from X",
                                     "--to Y")),
            "--from X is not before --to Y");
  EXPECT_EQ(errorOf(range({}, TimePoint{TimePoint::Kind::Ms, 0, 0})),
            "the trace's start is not before --to Y");
  Timeline old = timelineOf({{0, "F", "compute", 0, 0, 10, 5}});
  EXPECT_EQ(errorOf(resolveTimeRange(old, step2, {}, "--from step:2", "")),
            "--from step:2: the trace has no step events (traces of ppc "
            "older than its step and batch marks have none)");
}

TEST(TraceRangeTest, SkippingSteps) {
  Timeline t = threeSteps();
  auto kept = skipFirstSteps(t, 1);
  ASSERT_TRUE(static_cast<bool>(kept)) << llvm::toString(kept.takeError());
  ASSERT_EQ(kept->events.size(), 8u);
  for (const TimelineEvent &e : kept->events)
    EXPECT_GE(e.startUs, 1200 + 10 * e.rank);
  TraceSummary s = summarizeTrace(*kept);
  EXPECT_DOUBLE_EQ(s.startUs, 1200);
  EXPECT_DOUBLE_EQ(s.spanUs, 320);
  EXPECT_DOUBLE_EQ(s.ranks[0].busyUs, 100);
  auto all = skipFirstSteps(t, 0);
  ASSERT_TRUE(static_cast<bool>(all));
  EXPECT_EQ(all->events.size(), t.events.size());
  EXPECT_EQ(errorOf(skipFirstSteps(t, 3)),
            "the trace has 3 steps; skipping 3 leaves none");
  EXPECT_EQ(errorOf(skipFirstSteps(threeSteps(kBatchEventName), 5)),
            "the trace has 3 batches; skipping 5 leaves none");
  EXPECT_EQ(
      errorOf(skipFirstSteps(timelineOf({{0, "F", "compute", 0, 0, 1, 1}}), 1)),
      "the trace has no step or batch events to skip (traces of ppc "
      "older than its step and batch marks have none)");
}

// The fixture's stages (see HandComputedNumbers): stage 0 on rank 0 runs F
// 1000 + 1000, B 2000 + 2000, sends 100 + 100 and receives 200 + 800 us;
// stage 1 on rank 1 F 1500 + 1500, B 1250 + 1250, sends 100 + 100 and
// receives 150 + 100 us.
TEST(TraceSummaryTest, PerStageTimes) {
  auto timeline = readTraceFile(fixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(timeline))
      << llvm::toString(timeline.takeError());
  TraceSummary s = summarizeTrace(*timeline);
  ASSERT_EQ(s.stages.size(), 2u);
  const StageSummary &s0 = s.stages[0], &s1 = s.stages[1];
  EXPECT_EQ(s0.stage, 0);
  EXPECT_EQ(s0.rank, 0);
  EXPECT_DOUBLE_EQ(s0.forwardUs, 2000);
  EXPECT_DOUBLE_EQ(s0.backwardUs, 4000);
  EXPECT_DOUBLE_EQ(s0.sendUs, 200);
  EXPECT_DOUBLE_EQ(s0.recvUs, 1000);
  EXPECT_EQ(s0.forwards, 2);
  EXPECT_EQ(s1.stage, 1);
  EXPECT_EQ(s1.rank, 1);
  EXPECT_DOUBLE_EQ(s1.forwardUs, 3000);
  EXPECT_DOUBLE_EQ(s1.backwardUs, 2500);
  EXPECT_DOUBLE_EQ(s1.sendUs, 200);
  EXPECT_DOUBLE_EQ(s1.recvUs, 250);
  EXPECT_DOUBLE_EQ(s1.inputUs + s1.weightUs + s0.inputUs + s0.weightUs, 0);
  std::string text;
  llvm::raw_string_ostream os(text);
  printTraceSummary(s, os);
  os.flush();
  EXPECT_NE(text.find("trace: stage=0 f_ms=2.000 b_ms=4.000 i_ms=0.000 "
                      "w_ms=0.000 send_ms=0.200 recv_ms=1.000 forwards=2\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nstage    rank        F_ms        B_ms     send_ms "
                      "    recv_ms forwards\n0           0       2.000 "
                      "      4.000       0.200       1.000        2\n"),
            std::string::npos)
      << text;
}

TEST(TraceSVGTest, RangeWidthMarkersAndLegend) {
  Timeline t = threeSteps();
  std::string whole = svgOf(t);
  auto count = [](const std::string &svg, llvm::StringRef needle) {
    return llvm::StringRef(svg).count(needle);
  };
  EXPECT_EQ(count(whole, "<rect class=\"compute F\""), 6u);
  EXPECT_EQ(count(whole, "<g class=\"marker step\""), 3u);
  EXPECT_EQ(count(whole, ">step 1</text>"), 1u);
  EXPECT_EQ(count(whole, ">step 3</text>"), 1u);
  EXPECT_EQ(count(whole, "width=\"1200\" height="), 1u);
  // Only F is drawn: the legend has F alone, and marks are not boxes.
  EXPECT_EQ(count(whole, "<rect class=\"legend\""), 1u);
  EXPECT_EQ(count(whole, "data-kind=\"F\""), 1u);
  EXPECT_EQ(count(whole, "<rect class=\"other"), 0u);

  PlotOptions options;
  options.width = 600;
  options.range = TimeRange{1200, 1400};
  std::string part = svgOf(t, options);
  EXPECT_EQ(count(part, "width=\"600\" height="), 1u);
  EXPECT_EQ(count(part, "<rect class=\"compute F\""), 2u);
  EXPECT_EQ(count(part, "<g class=\"marker step\" data-index=\"2\""), 1u);
  EXPECT_EQ(count(part, "<g class=\"marker"), 1u); // step 3 starts at the end
  // Rank 0's F of step 2 starts 5 us into the 200 us range of a 510-pixel
  // chart.
  EXPECT_EQ(count(part, "class=\"compute F\" x=\"82.75\""), 1u);
  // The axis: 0.2 .. 0.4 ms from the trace's start.
  EXPECT_EQ(count(part, "class=\"tick\" x=\"70.00\""), 1u);
  EXPECT_EQ(count(part, ">0.2</text>"), 1u);
  EXPECT_EQ(count(part, ">0.4</text>"), 1u);
  EXPECT_EQ(count(part, ">0.1</text>"), 0u);

  auto fixtureTimeline = readTraceFile(fixture("summary.json"));
  ASSERT_TRUE(static_cast<bool>(fixtureTimeline));
  std::string svg = svgOf(*fixtureTimeline);
  for (const char *kind : {"F", "B", "message", "wait", "other-event"})
    EXPECT_EQ(count(svg, std::string("data-kind=\"") + kind + "\""), 1u)
        << kind;
  EXPECT_EQ(count(svg, "<rect class=\"legend\""), 5u);
}
