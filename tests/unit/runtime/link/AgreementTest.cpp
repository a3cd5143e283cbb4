//===- tests/unit/runtime/link/AgreementTest.cpp --------------------------===//
//
// The start-up agreement: records, their encoding from untrusted bytes,
// the first difference, and the exchange over an in-process c10d HashStore.
//
//===----------------------------------------------------------------------===//
#include "runtime/link/Agreement.h"

#include "lib/Error.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <future>
#include <thread>

using namespace ppc;

namespace {
Agreement record(double lr, int microbatches) {
  Agreement a;
  a.setNumber("--lr", lr);
  a.set("--microbatches", std::to_string(microbatches));
  return a;
}

std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string();
}

std::string decodeError(llvm::StringRef bytes) {
  auto decoded = Agreement::decode(bytes);
  return decoded ? std::string() : llvm::toString(decoded.takeError());
}
} // namespace

TEST(AgreementTest, NumbersReadAsWritten) {
  Agreement a;
  a.setNumber("a", 0.01);
  a.setNumber("b", 1e-5);
  a.setNumber("c", 0);
  a.setNumber("d", 0.1 + 0.2);
  EXPECT_EQ(a.entries()[0].shown, "0.01");
  EXPECT_EQ(a.entries()[1].shown, "1e-05");
  EXPECT_EQ(a.entries()[2].shown, "0");
  EXPECT_EQ(a.entries()[3].shown, "0.30000000000000004");
}

TEST(AgreementTest, RoundTrips) {
  Agreement a = record(0.5, 3);
  a.setPresence("--checkpoint-dir", std::string("ck\npt"));
  a.setPresence("--resume", std::nullopt);
  a.setFileDigest("--data", "/nonexistent/data.pt");
  auto b = Agreement::decode(a.encode());
  ASSERT_TRUE(bool(b)) << llvm::toString(b.takeError());
  ASSERT_EQ(b->entries().size(), a.entries().size());
  for (size_t i = 0; i < a.entries().size(); ++i) {
    EXPECT_EQ(b->entries()[i].name, a.entries()[i].name);
    EXPECT_EQ(b->entries()[i].value, a.entries()[i].value);
    EXPECT_EQ(b->entries()[i].shown, a.entries()[i].shown);
    EXPECT_EQ(b->entries()[i].known, a.entries()[i].known);
  }
  EXPECT_FALSE(b->entries().back().known);
}

TEST(AgreementTest, RefusesMalformedRecords) {
  std::string good = record(0.5, 3).encode();
  EXPECT_EQ(decodeError("garbage"),
            "malformed start-up record (not a ppc-agree-1 record: another "
            "ppc version?)");
  for (size_t cut = 12; cut < good.size(); ++cut)
    EXPECT_EQ(decodeError(llvm::StringRef(good).take_front(cut)),
              "malformed start-up record (truncated)")
        << cut;
  EXPECT_EQ(decodeError(good + "x"),
            "malformed start-up record (bytes after its last entry)");
  // An entry count far over the bound, before anything is allocated.
  std::string huge = good.substr(0, 12) + std::string("\xff\xff\xff\x7f", 4);
  EXPECT_EQ(decodeError(huge),
            "malformed start-up record (2147483647 entries, over 4096)");
  // A string length past the end.
  std::string longName =
      good.substr(0, 17) + std::string("\xff\xff\xff\xff", 4);
  EXPECT_EQ(decodeError(longName), "malformed start-up record (truncated)");
  // The same name twice.
  Agreement twice = record(0.5, 3);
  std::string bytes = twice.encode();
  std::string doubled = bytes;
  doubled[12] = 4; // 4 entries: the two again
  doubled += bytes.substr(16);
  EXPECT_EQ(decodeError(doubled), "malformed start-up record ('--lr' twice)");
  EXPECT_EQ(decodeError(std::string(Agreement::kMaxBytes + 1, 'p')),
            "malformed start-up record (1048577 bytes, over 1048576)");
}

TEST(AgreementTest, NamesTheFirstDifferenceAgainstRankZero) {
  // Rank 1 agrees; rank 2 differs in --microbatches and rank 3 in --lr:
  // rank 2 comes first, and within a record rank 0's order decides.
  std::vector<Agreement> records = {record(0.01, 2), record(0.01, 2),
                                    record(0.01, 4), record(0.5, 2)};
  EXPECT_EQ(firstDisagreement(records),
            "ranks disagree on --microbatches: rank 0 has 2, rank 2 has 4");
  records[2] = record(0.25, 4);
  EXPECT_EQ(firstDisagreement(records),
            "ranks disagree on --lr: rank 0 has 0.01, rank 2 has 0.25");
  records[2] = records[3] = record(0.01, 2);
  EXPECT_EQ(firstDisagreement(records), "");
}

TEST(AgreementTest, NamesEntriesOneRankLacks) {
  Agreement a = record(0.01, 2), b = record(0.01, 2);
  b.set("--extra", "1");
  EXPECT_EQ(firstDisagreement({a, b}),
            "ranks disagree on --extra: rank 0 has none, rank 1 has 1");
  EXPECT_EQ(firstDisagreement({b, a}),
            "ranks disagree on --extra: rank 0 has 1, rank 1 has none");
  a.setPresence("--save", std::string("out"));
  b.setPresence("--save", std::nullopt);
  EXPECT_EQ(firstDisagreement({a, b}),
            "ranks disagree on --save: rank 0 has out, rank 1 has none");
  // Presence only: another path agrees.
  b.setPresence("--save", std::string("elsewhere"));
  a.set("--extra", "1");
  EXPECT_EQ(firstDisagreement({a, b}), "");
}

TEST(AgreementTest, ComparesContentsNotPathsAndSkipsUnknown) {
  Agreement a, b, c;
  a.setBytesDigest("--data", "a.pt", "same bytes");
  b.setBytesDigest("--data", "elsewhere/b.pt", "same bytes");
  c.setBytesDigest("--data", "c.pt", "other bytes");
  EXPECT_EQ(firstDisagreement({a, b}), "");
  std::string line = firstDisagreement({a, c});
  EXPECT_EQ(line.rfind("ranks disagree on --data: rank 0 has a.pt (xxh64 ", 0),
            0u)
      << line;
  EXPECT_NE(line.find(", 10 bytes), rank 1 has c.pt (xxh64 "),
            std::string::npos)
      << line;
  Agreement unknown;
  unknown.setFileDigest("--data", "/nonexistent/data.pt");
  EXPECT_EQ(firstDisagreement({a, unknown}), "");
}

TEST(AgreementTest, PrintsPeerBytesSafely) {
  Agreement a, b;
  a.set("--device", "cpu");
  b.set("--device", "cpu\x1b[2J\n");
  EXPECT_EQ(firstDisagreement({a, b}),
            "ranks disagree on --device: rank 0 has cpu, rank 1 has "
            "cpu\\x1b[2J\\x0a");
}

TEST(AgreementTest, EveryRankGetsTheSameAnswerOverAStore) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<Agreement> records = {record(0.01, 2), record(0.01, 2),
                                    record(0.5, 2)};
  std::vector<std::future<std::string>> answers;
  for (int r = 0; r < 3; ++r)
    answers.push_back(std::async(std::launch::async, [&, r] {
      return errorOf(
          agreeAcrossRanks(*store, r, 3, records[r], std::chrono::seconds(10)));
    }));
  for (auto &answer : answers)
    EXPECT_EQ(answer.get(),
              "ranks disagree on --lr: rank 0 has 0.01, rank 2 has 0.5");
}

TEST(AgreementTest, AgreeingRanksPass) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::future<std::string>> answers;
  for (int r = 0; r < 2; ++r)
    answers.push_back(std::async(std::launch::async, [&, r] {
      return errorOf(agreeAcrossRanks(*store, r, 2, record(0.01, 2),
                                      std::chrono::seconds(10)));
    }));
  for (auto &answer : answers)
    EXPECT_EQ(answer.get(), "");
}

TEST(AgreementTest, AMissingRecordIsALostRankWithinTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  EXPECT_EQ(errorOf(agreeAcrossRanks(*store, 0, 3, record(0.01, 2),
                                     std::chrono::milliseconds(200))),
            "lost rank 1 (sent no start-up record within 0.2 s)");
}

TEST(AgreementTest, AMalformedPeerRecordIsNamed) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->set("ppc/agree/1", std::vector<uint8_t>{'x'});
  EXPECT_EQ(errorOf(agreeAcrossRanks(*store, 0, 2, record(0.01, 2),
                                     std::chrono::milliseconds(300))),
            "ranks disagree: rank 1 sent a malformed start-up record (not a "
            "ppc-agree-1 record: another ppc version?)");
}
