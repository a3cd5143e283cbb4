//===- tests/unit/tools/TraceReaderTest.cpp - Reading a trace back --------===//
#include "tools/ppc/TraceReader.h"

#include "tests/unit/tools/TraceBuilders.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "tests/unit/ScratchDirTest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <unistd.h>

using namespace ppc;
using namespace ppc::test;

namespace {

class TraceFileTest : public test::ScratchDirTest {};

std::string parseError(llvm::StringRef text) {
  return errorOf(parseTrace(text, "trace 't.json'"));
}

} // namespace

// The writer's own file (the fixture WrittenFileMatchesTheFixture keeps
// equal to what writeTraceFile writes) reads back as written.
TEST(TraceParseTest, ReadsWhatTheWriterWrites) {
  std::string p = traceFixture("written.json");
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

TEST_F(TraceFileTest, ReadsTheRanksTheWriterStamps) {
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

TEST_F(TraceFileTest, FileErrorsNameTheFile) {
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
