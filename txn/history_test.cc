#include "txn/history.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace farm {
namespace txn {
namespace {

constexpr TxnOutcome kCommitted = TxnOutcome::kCommitted;
constexpr TxnOutcome kAborted = TxnOutcome::kAborted;
constexpr TxnOutcome kUnknown = TxnOutcome::kUnknown;

TxnOp R(uint64_t key, uint64_t value) { return TxnOp::Read(key, value); }
TxnOp W(uint64_t key, uint64_t value, uint64_t prev) { return TxnOp::Write(key, value, prev); }

TxnRecord Txn(int64_t start, int64_t end, std::vector<TxnOp> ops, TxnOutcome outcome = kCommitted) {
  return {"c", start, end, outcome, std::move(ops)};
}

HistoryCheck Check(const History& h) {
  absl::StatusOr<HistoryCheck> c = CheckStrictSerializability(h);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return *c;
}

// The history's first anomaly, which must be of `kind`; its description is printed on failure.
Anomaly Expect(const History& h, AnomalyKind kind) {
  HistoryCheck c = Check(h);
  REQUIRE_FALSE(c.ok());
  INFO(c.anomalies[0].description);
  CHECK(AnomalyName(c.anomalies[0].kind) == std::string(AnomalyName(kind)));
  return c.anomalies[0];
}

bool Mentions(const Anomaly& a, absl::string_view text) {
  return a.description.find(std::string(text)) != std::string::npos;
}

// Edge kinds of a reported cycle, in order, e.g. "rw wr".
std::string CycleKinds(const Anomaly& a) {
  std::string out;
  for (const Dependency& d : a.cycle) {
    const char* k = d.kind == DependencyKind::kWW   ? "ww"
                    : d.kind == DependencyKind::kWR ? "wr"
                    : d.kind == DependencyKind::kRW ? "rw"
                                                    : "rt";
    absl::StrAppend(&out, out.empty() ? "" : " ", k);
  }
  return out;
}

TEST_CASE("a serial history and an empty one are strictly serializable", "[history]") {
  CHECK(Check({}).ok());
  History h = {
      Txn(0, 10, {R(1, 0), W(1, 11, 0)}),
      Txn(20, 30, {R(1, 11), W(1, 12, 11), R(2, 0), W(2, 21, 0)}),
      Txn(40, 50, {R(1, 12), R(2, 21)}),
  };
  HistoryCheck c = Check(h);
  CHECK(c.ok());
  CHECK(c.transactions == 3);
  CHECK(c.committed == 3);
}

TEST_CASE("concurrent transactions may serialize in either order", "[history]") {
  // T1 and T2 overlap in time: T2 may read the old x (before T1) or the new one (after T1).
  for (uint64_t seen : {0, 1}) {
    History h = {Txn(0, 100, {R(1, 0), W(1, 1, 0)}), Txn(50, 150, {R(1, seen)})};
    CHECK(Check(h).ok());
  }
  // Real-time edges with equal times: an end equal to a start orders nothing.
  History h = {Txn(0, 100, {R(1, 0), W(1, 1, 0)}), Txn(100, 150, {R(1, 0)})};
  CHECK(Check(h).ok());
  // Read-modify-writes on many keys, interleaved but in one version chain per key.
  History rmw = {
      Txn(0, 100, {R(1, 0), W(1, 1, 0), R(2, 0)}),
      Txn(10, 90, {R(2, 0), W(2, 1, 0)}),
      Txn(95, 200, {R(1, 1), W(1, 2, 1), R(2, 1), W(2, 2, 1)}),
  };
  CHECK(Check(rmw).ok());
}

TEST_CASE("a transaction sees its own writes", "[history]") {
  CHECK(Check({Txn(0, 10, {W(1, 1, 0), R(1, 1), W(1, 2, 1), R(1, 2)})}).ok());
  Anomaly a = Expect({Txn(0, 10, {W(1, 1, 0), R(1, 0)})}, AnomalyKind::kInternalInconsistency);
  CHECK(Mentions(a, "after writing 1"));
  // Reading its own write before making it.
  Expect({Txn(0, 10, {R(1, 5), W(1, 5, 0)})}, AnomalyKind::kInternalInconsistency);
  // A second write whose prev is not the transaction's own first write.
  Expect({Txn(0, 10, {W(1, 1, 0), W(1, 2, 0)})}, AnomalyKind::kInternalInconsistency);
}

TEST_CASE("lost update: two writes overwrote the same version", "[history]") {
  History h = {
      Txn(0, 100, {R(1, 0), W(1, 1, 0)}),
      Txn(10, 110, {R(1, 0), W(1, 2, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kLostUpdate);
  CHECK(a.txns == std::vector<size_t>{0, 1});
  CHECK(Mentions(a, "both overwrote version 0 of key 1"));
}

TEST_CASE("write skew is G2", "[history]") {
  // Each reads both keys at 0 and writes one: each missed the other's write.
  History h = {
      Txn(0, 100, {R(1, 0), R(2, 0), W(1, 1, 0)}),
      Txn(10, 110, {R(1, 0), R(2, 0), W(2, 1, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kG2);
  CHECK(CycleKinds(a) == "rw rw");
}

TEST_CASE("read skew is G-single", "[history]") {
  // T0 reads x before T1 and y after it.
  History h = {
      Txn(0, 100, {R(1, 0), R(2, 1)}),
      Txn(10, 90, {W(1, 1, 0), W(2, 1, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kGSingle);
  std::string kinds = CycleKinds(a);
  CHECK((kinds == "rw wr" || kinds == "wr rw"));
  CHECK(a.cycle.size() == 2);
  CHECK(a.cycle.front().from == a.cycle.back().to);
}

TEST_CASE("G-single with a ww edge, and a non-repeatable read", "[history]") {
  // T0 read x before T1's write but overwrote T1's y.
  History h = {
      Txn(0, 100, {R(1, 0), W(2, 2, 1)}),
      Txn(10, 90, {W(1, 1, 0), W(2, 1, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kGSingle);
  std::string kinds = CycleKinds(a);
  CHECK((kinds == "rw ww" || kinds == "ww rw"));
  // Two reads of x in one transaction see different versions.
  History fuzzy = {Txn(0, 100, {R(1, 0), R(1, 1)}), Txn(10, 90, {W(1, 1, 0)})};
  Expect(fuzzy, AnomalyKind::kGSingle);
}

TEST_CASE("G0: two transactions overwrote each other", "[history]") {
  History h = {
      Txn(0, 100, {W(1, 1, 0), W(2, 1, 2)}),
      Txn(10, 110, {W(1, 2, 1), W(2, 2, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kG0);
  CHECK(CycleKinds(a) == "ww ww");
}

TEST_CASE("G1a: a committed transaction read an aborted write", "[history]") {
  History h = {
      Txn(0, 10, {W(1, 1, 0)}, kAborted),
      Txn(20, 30, {R(1, 1)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kAbortedRead);
  CHECK(Mentions(a, "which aborted"));
  // Reads by aborted transactions are not checked.
  CHECK(Check({Txn(0, 10, {R(1, 77)}, kAborted)}).ok());
}

TEST_CASE("G1b: a read of an intermediate value", "[history]") {
  History h = {
      Txn(0, 10, {W(1, 1, 0), W(1, 2, 1)}),
      Txn(20, 30, {R(1, 1)}),
  };
  Expect(h, AnomalyKind::kIntermediateRead);
}

TEST_CASE("G1c: information flows in a cycle", "[history]") {
  History h = {
      Txn(0, 100, {W(1, 1, 0), R(2, 1)}),
      Txn(10, 110, {R(1, 1), W(2, 1, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kG1c);
  CHECK(CycleKinds(a) == "wr wr");
}

TEST_CASE("a stale read after a committed write violates real time", "[history]") {
  // T0 commits x=1 and ends at 100; T1 starts at 200 and still reads x=0.
  History h = {
      Txn(0, 100, {R(1, 0), W(1, 1, 0)}),
      Txn(200, 300, {R(1, 0)}),
  };
  Anomaly a = Expect(h, AnomalyKind::kRealTime);
  CHECK(Mentions(a, "stale read"));
  std::string kinds = CycleKinds(a);
  CHECK((kinds == "rt rw" || kinds == "rw rt"));
  CHECK(Mentions(a, "completed at 100 ns, before T1 was invoked at 200 ns"));
}

TEST_CASE("real time through a chain of frontiers", "[history]") {
  // T0 ... T9 run one after another; T9 then reads x as it was before T0's write.
  History h = {Txn(0, 10, {R(1, 0), W(1, 1, 0)})};
  for (int i = 1; i < 9; ++i) h.push_back(Txn(20 * i, 20 * i + 10, {R(2, 0)}));
  h.push_back(Txn(500, 510, {R(1, 0)}));
  Anomaly a = Expect(h, AnomalyKind::kRealTime);
  CHECK(a.cycle.size() == 2);  // the frontier hops collapse into one rt edge T0 -> T9
  // A read of the new value from the future violates real time too: T1 ended before T0 began.
  History future = {Txn(100, 110, {W(1, 1, 0)}), Txn(0, 50, {R(1, 1)})};
  Expect(future, AnomalyKind::kRealTime);
}

TEST_CASE("a read of a value never written", "[history]") {
  Anomaly a = Expect({Txn(0, 10, {R(1, 5)})}, AnomalyKind::kReadOfUnwrittenValue);
  CHECK(Mentions(a, "read version 5 of key 1, a value no transaction wrote"));
  // Overwriting one (prev) is the same anomaly.
  Expect({Txn(0, 10, {W(1, 1, 9)})}, AnomalyKind::kReadOfUnwrittenValue);
}

TEST_CASE("bad input is rejected, not reported as an anomaly", "[history]") {
  auto rejected = [](const History& h, absl::string_view text) {
    absl::StatusOr<HistoryCheck> c = CheckStrictSerializability(h);
    INFO(c.status().ToString());
    REQUIRE_FALSE(c.ok());
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK(c.status().message().find(std::string(text)) != std::string::npos);
  };
  // The same value written twice to one key, even by an aborted transaction.
  rejected({Txn(0, 10, {W(1, 1, 0)}), Txn(20, 30, {W(1, 1, 0)}, kAborted)},
           "value 1 is written to key 1 twice");
  rejected({Txn(0, 10, {W(1, 0, 0)})}, "writes 0 to key 1");
  rejected({Txn(10, 0, {})}, "before start");
  // Two committed blind writes without prev: no version order.
  rejected({Txn(0, 10, {TxnOp::Write(1, 1)}), Txn(20, 30, {TxnOp::Write(1, 2)})},
           "version order cannot be derived");
  // The same values on different keys are fine.
  CHECK(Check({Txn(0, 10, {W(1, 1, 0), W(2, 1, 0)})}).ok());
}

TEST_CASE("prev can be left out when the transaction read the key first", "[history]") {
  History h = {
      Txn(0, 10, {R(1, 0), TxnOp::Write(1, 1)}),
      Txn(20, 30, {R(1, 1), TxnOp::Write(1, 2)}),
      Txn(40, 50, {R(1, 2)}),
  };
  CHECK(Check(h).ok());
  h.push_back(Txn(60, 70, {R(1, 0), TxnOp::Write(1, 3)}));  // forks off the initial version
  Expect(h, AnomalyKind::kLostUpdate);
  // A key's only committed write needs no prev at all.
  CHECK(Check({Txn(0, 10, {TxnOp::Write(1, 1)}), Txn(20, 30, {R(1, 1)})}).ok());
}

TEST_CASE("unknown outcomes count as committed only when observed", "[history]") {
  // Nobody saw T0's write: dropped, as if it aborted (so T1's read of 0 afterwards is fine).
  History dropped = {Txn(0, 10, {W(1, 1, 0)}, kUnknown), Txn(20, 30, {R(1, 0)})};
  HistoryCheck c = Check(dropped);
  CHECK(c.ok());
  CHECK(c.unknown_dropped == 1);
  CHECK(c.committed == 1);
  // T1 read it: T0 committed, then T2's later read of 0 is stale...
  History seen = {Txn(0, 10, {W(1, 1, 0)}, kUnknown), Txn(20, 30, {R(1, 1)}),
                  Txn(40, 50, {R(1, 0)})};
  c = Check(seen);
  CHECK(c.unknown_included == 1);
  REQUIRE_FALSE(c.ok());
  CHECK(c.anomalies[0].kind == AnomalyKind::kRealTime);
  // An unknown transaction may have committed after its client gave up: its end orders nothing.
  History after = {Txn(0, 10, {W(1, 1, 0)}, kUnknown), Txn(40, 50, {R(1, 0)}),
                   Txn(60, 70, {R(1, 1)})};
  CHECK(Check(after).ok());  // T0 committed between T1 and T2
  // Observation is transitive: T2 read T1, which overwrote T0.
  History chain = {Txn(0, 10, {W(1, 1, 0)}, kUnknown), Txn(20, 30, {W(1, 2, 1)}, kUnknown),
                   Txn(40, 50, {R(1, 2)})};
  c = Check(chain);
  CHECK(c.ok());
  CHECK(c.unknown_included == 2);
}

TEST_CASE("descriptions name transactions by index, line and client", "[history]") {
  History h = {Txn(0, 100, {R(1, 0), W(1, 1, 0)}), Txn(200, 300, {R(1, 0)})};
  h[1].line = 7;
  h[1].client = "3";
  CHECK(DescribeTxn(h, 1) == "T1 (line 7, client 3, 200..300 ns, committed)");
  Anomaly a = Expect(h, AnomalyKind::kRealTime);
  CHECK(Mentions(a, "T1 (line 7, client 3"));
}

// ---------------------------------------------------------------------------------------------
// The JSON-lines format.

TEST_CASE("JSON lines parse into records", "[history][json]") {
  absl::StatusOr<History> h = ParseHistoryJsonLines(
      "{\"client\":3,\"start\":100,\"end\":250,\"outcome\":\"committed\","
      "\"ops\":[[\"r\",7,0],[\"w\",7,11,0]]}\n"
      "\n"
      "  { \"ops\" : [ [\"w\", 8, 18446744073709551615] , "
      "[\"w\",9,1,null]],\"outcome\":\"unknown\","
      "\"client\":\"worker \\\"a\\\" \\u00e9\", \"start\":-5, \"end\":7 }\r\n");
  INFO(h.status().ToString());
  REQUIRE(h.ok());
  REQUIRE(h->size() == 2);
  const TxnRecord& a = (*h)[0];
  CHECK(a.client == "3");
  CHECK(a.start_ns == 100);
  CHECK(a.end_ns == 250);
  CHECK(a.outcome == kCommitted);
  CHECK(a.ops == std::vector<TxnOp>{R(7, 0), W(7, 11, 0)});
  CHECK(a.line == 1);
  const TxnRecord& b = (*h)[1];
  CHECK(b.client == "worker \"a\" \xc3\xa9");
  CHECK(b.start_ns == -5);
  CHECK(b.outcome == kUnknown);
  CHECK(b.ops == std::vector<TxnOp>{TxnOp::Write(8, UINT64_MAX), TxnOp::Write(9, 1)});
  CHECK(b.line == 3);
  // Round trip.
  for (const TxnRecord& t : *h) {
    absl::StatusOr<TxnRecord> back = ParseTxnRecordJson(TxnRecordToJson(t));
    REQUIRE(back.ok());
    CHECK(back->client == t.client);
    CHECK(back->start_ns == t.start_ns);
    CHECK(back->end_ns == t.end_ns);
    CHECK(back->outcome == t.outcome);
    CHECK(back->ops == t.ops);
  }
}

TEST_CASE("malformed lines are rejected with their line number", "[history][json]") {
  const std::string good = R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[]})";
  auto rejected = [&](const std::string& line, absl::string_view text) {
    absl::StatusOr<History> h = ParseHistoryJsonLines(good + "\n" + line + "\n" + good);
    INFO(line);
    INFO(h.status().ToString());
    REQUIRE_FALSE(h.ok());
    CHECK(absl::IsInvalidArgument(h.status()));
    std::string message(h.status().message());
    CHECK(message.rfind("line 2: ", 0) == 0);
    CHECK(message.find(std::string(text)) != std::string::npos);
  };
  rejected("{", "expected a member name");
  rejected("[1,2]", "expected a JSON object");
  rejected(good + " x", "unexpected text after the JSON value");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted"})", "missing field \"ops\"");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"done","ops":[]})", "outcome");
  rejected(R"({"client":1,"start":0.5,"end":1,"outcome":"aborted","ops":[]})",
           "start: expected an integer");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[],"x":2})",
           "unknown field \"x\"");
  rejected(R"({"client":1,"client":2,"start":0,"end":1,"outcome":"aborted","ops":[]})",
           "appears twice");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[["r",1]]})", "ops[0]");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[["x",1,2]]})", "ops[0]");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[["r",1,2,3]]})", "ops[0]");
  rejected(R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[["w",1,-2]]})",
           "ops[0] value: expected an unsigned integer");
  rejected(
      R"({"client":1,"start":0,"end":1,"outcome":"aborted","ops":[["w",1,18446744073709551616]]})",
      "out of range");
  rejected(R"({"client":true,"start":0,"end":1,"outcome":"aborted","ops":[]})", "client");
  rejected(R"({"client":"\q","start":0,"end":1,"outcome":"aborted","ops":[]})", "bad escape");
  rejected(R"({"client":"abc)", "unterminated string");
  rejected(std::string(100, '['), "nested too deeply");
  rejected(R"({"client":01,"start":0,"end":1,"outcome":"aborted","ops":[]})",
           "expected ',' or '}'");
}

// ---------------------------------------------------------------------------------------------
// Random serial executions: always strictly serializable; one stale read makes them not.

struct RandomWorkload {
  int clients = 4;
  int keys = 8;
  int max_ops = 4;
  bool with_failures = true;  // some aborted and unknown-outcome transactions
};

// A serial execution in which transaction i runs at time 1000 i; each one's invocation and
// completion are drawn around that point, so neighbours overlap but real time never contradicts
// the serial order (for i < j, end_j > 1000 j > start_i). Writes are read-modify-writes.
History RandomSerialHistory(std::mt19937_64& rng, int txns, const RandomWorkload& w) {
  std::vector<uint64_t> current(w.keys, 0);
  std::vector<uint64_t> next_value(w.keys, 1);
  auto pick = [&rng](int n) { return static_cast<int>(rng() % n); };
  History h;
  for (int i = 0; i < txns; ++i) {
    TxnRecord t;
    t.client = std::to_string(pick(w.clients));
    t.start_ns = int64_t{1000} * i - pick(1500);
    t.end_ns = int64_t{1000} * i + 1 + pick(1500);
    int fate = w.with_failures ? pick(100) : 99;
    t.outcome = fate < 8 ? kAborted : fate < 15 ? kUnknown : kCommitted;
    bool applies = t.outcome == kCommitted || (t.outcome == kUnknown && fate % 2 == 0);
    std::map<int, uint64_t> own;  // this transaction's view of the keys it wrote
    for (int n = 1 + pick(w.max_ops); n > 0; --n) {
      int k = pick(w.keys);
      uint64_t seen = own.count(k) ? own[k] : current[k];
      t.ops.push_back(R(k, seen));
      if (pick(2) == 0) {
        own[k] = next_value[k]++;
        t.ops.push_back(W(k, own[k], seen));
      }
    }
    if (applies) {
      for (const auto& [k, v] : own) current[k] = v;
    }
    h.push_back(std::move(t));
  }
  return h;
}

// Finds a committed transaction's external read of a non-initial version that satisfies `want`
// (given the reader, the op index and the version's writer) and makes it observe the version
// before. Returns the reader, or -1 if there is none.
template <typename Want>
int MakeOneReadStale(History* h, std::mt19937_64& rng, Want want) {
  // (key, value) -> (writer, the version its transaction's first write to the key overwrote)
  std::map<std::pair<uint64_t, uint64_t>, std::pair<size_t, uint64_t>> writes;
  for (size_t t = 0; t < h->size(); ++t) {
    std::map<uint64_t, uint64_t> first_prev;
    for (const TxnOp& op : (*h)[t].ops) {
      if (op.kind != TxnOp::Kind::kWrite) continue;
      first_prev.emplace(op.key, *op.prev);
      writes[{op.key, op.value}] = {t, first_prev[op.key]};
    }
  }
  std::vector<std::pair<size_t, size_t>> candidates;  // (txn, op)
  for (size_t t = 0; t < h->size(); ++t) {
    const TxnRecord& txn = (*h)[t];
    if (txn.outcome != kCommitted) continue;
    for (size_t i = 0; i < txn.ops.size(); ++i) {
      const TxnOp& op = txn.ops[i];
      bool own_write_before = std::any_of(txn.ops.begin(), txn.ops.begin() + i, [&](auto& o) {
        return o.kind == TxnOp::Kind::kWrite && o.key == op.key;
      });
      if (op.kind != TxnOp::Kind::kRead || op.value == 0 || own_write_before) continue;
      if (want(txn, i, (*h)[writes.at({op.key, op.value}).first])) candidates.push_back({t, i});
    }
  }
  if (candidates.empty()) return -1;
  auto [t, i] = candidates[rng() % candidates.size()];
  TxnOp& op = (*h)[t].ops[i];
  op.value = writes.at({op.key, op.value}).second;
  return static_cast<int>(t);
}

bool WritesKeyAfter(const TxnRecord& t, size_t i) {
  return std::any_of(t.ops.begin() + i, t.ops.end(), [&](const TxnOp& o) {
    return o.kind == TxnOp::Kind::kWrite && o.key == t.ops[i].key;
  });
}

TEST_CASE("random serial histories pass; one stale read in them is caught", "[history][random]") {
  std::mt19937_64 rng(GENERATE(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  RandomWorkload w;
  w.keys = 2 + static_cast<int>(rng() % 10);
  History h = RandomSerialHistory(rng, 200, w);
  HistoryCheck c = Check(h);
  INFO((c.ok() ? "" : c.anomalies[0].description));
  REQUIRE(c.ok());

  SECTION("a read-modify-write that read an older version: G-single") {
    // It still overwrites the version it should have read (prev), so the cycle is
    // reader -rw-> writer of that version -ww-> reader.
    int reader = MakeOneReadStale(&h, rng, [](const TxnRecord& t, size_t i, const TxnRecord&) {
      return WritesKeyAfter(t, i);
    });
    REQUIRE(reader >= 0);
    Anomaly a = Expect(h, AnomalyKind::kGSingle);
    CHECK(std::count(a.txns.begin(), a.txns.end(), static_cast<size_t>(reader)) == 1);
  }
  SECTION("a read-only access of an older version after its overwrite completed") {
    int reader =
        MakeOneReadStale(&h, rng, [](const TxnRecord& t, size_t i, const TxnRecord& writer) {
          return !WritesKeyAfter(t, i) && writer.outcome == kCommitted &&
                 writer.end_ns < t.start_ns;
        });
    REQUIRE(reader >= 0);
    HistoryCheck bad = Check(h);
    REQUIRE_FALSE(bad.ok());
    const Anomaly& a = bad.anomalies[0];
    INFO(a.description);
    CHECK((a.kind == AnomalyKind::kRealTime || a.kind == AnomalyKind::kGSingle ||
           a.kind == AnomalyKind::kG2));
    CHECK(std::count(a.txns.begin(), a.txns.end(), static_cast<size_t>(reader)) == 1);
  }
}

// The definition, by brute force: some order of the committed transactions that respects real
// time replays every operation from all-zero keys, each read returning the current value and each
// write's prev being the value it replaces. For small histories of committed and aborted
// transactions only (the unknown outcome is the checker's own rule).
bool BruteForceStrictlySerializable(const History& h) {
  std::vector<size_t> order;
  for (size_t t = 0; t < h.size(); ++t) {
    if (h[t].outcome == kCommitted) order.push_back(t);
  }
  auto replays = [&h](const std::vector<size_t>& order) {
    for (size_t i = 0; i < order.size(); ++i) {
      for (size_t j = i + 1; j < order.size(); ++j) {
        if (h[order[j]].end_ns < h[order[i]].start_ns) return false;
      }
    }
    std::map<uint64_t, uint64_t> state;  // absent: 0
    for (size_t t : order) {
      for (const TxnOp& op : h[t].ops) {
        uint64_t& current = state[op.key];
        if (op.kind == TxnOp::Kind::kRead && op.value != current) return false;
        if (op.kind == TxnOp::Kind::kWrite) {
          if (op.prev && *op.prev != current) return false;
          current = op.value;
        }
      }
    }
    return true;
  };
  do {
    if (replays(order)) return true;
  } while (std::next_permutation(order.begin(), order.end()));
  return false;
}

// A small random serial history with a few random changes: a read or a prev naming another
// version (or one never written), a transaction moved in time, or aborted.
History RandomSmallHistory(std::mt19937_64& rng) {
  RandomWorkload w;
  w.clients = 3;
  w.keys = 1 + static_cast<int>(rng() % 3);
  w.max_ops = 3;
  w.with_failures = false;
  History h = RandomSerialHistory(rng, 2 + static_cast<int>(rng() % 4), w);
  std::map<uint64_t, std::vector<uint64_t>> versions;  // key -> every value written, and 0
  for (const TxnRecord& t : h) {
    for (const TxnOp& op : t.ops) {
      versions[op.key].push_back(0);
      if (op.kind == TxnOp::Kind::kWrite) versions[op.key].push_back(op.value);
    }
  }
  for (int changes = static_cast<int>(rng() % 3); changes > 0; --changes) {
    TxnRecord& t = h[rng() % h.size()];
    TxnOp& op = t.ops[rng() % t.ops.size()];
    const std::vector<uint64_t>& vs = versions[op.key];
    uint64_t other = rng() % 16 == 0 ? 999 : vs[rng() % vs.size()];
    switch (rng() % 4) {
      case 0:
        if (op.kind == TxnOp::Kind::kRead) op.value = other;
        if (op.kind == TxnOp::Kind::kWrite && other != op.value) op.prev = other;
        break;
      case 1:
        t.start_ns = static_cast<int64_t>(rng() % 6000) - 1500;
        t.end_ns = t.start_ns + static_cast<int64_t>(rng() % 2000);
        break;
      case 2:
        t.outcome = kAborted;
        break;
      default:
        break;  // unchanged: serializable histories stay well represented
    }
  }
  return h;
}

TEST_CASE("the checker agrees with brute force on small random histories", "[history][random]") {
  std::mt19937_64 rng(7);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 5000; ++i) {
    History h = RandomSmallHistory(rng);
    absl::StatusOr<HistoryCheck> c = CheckStrictSerializability(h);
    std::string text;
    for (const TxnRecord& t : h) absl::StrAppend(&text, TxnRecordToJson(t), "\n");
    INFO(text);
    REQUIRE(c.ok());
    INFO((c->ok() ? "" : c->anomalies[0].description));
    REQUIRE(c->ok() == BruteForceStrictlySerializable(h));
    ++(c->ok() ? accepted : rejected);
  }
  // Both answers are well represented.
  CHECK(accepted > 1000);
  CHECK(rejected > 1000);
}

TEST_CASE("100k transactions check quickly", "[history][performance]") {
  std::mt19937_64 rng(42);
  RandomWorkload w;
  w.clients = 16;
  w.keys = 1000;
  History h = RandomSerialHistory(rng, 100000, w);
  auto start = std::chrono::steady_clock::now();
  HistoryCheck c = Check(h);
  double ok_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(c.ok());
  CHECK(c.transactions == 100000);
  // And with a stale read somewhere in it, which needs the cycle search.
  int reader = MakeOneReadStale(
      &h, rng, [](const TxnRecord& t, size_t i, const TxnRecord&) { return WritesKeyAfter(t, i); });
  REQUIRE(reader >= 0);
  start = std::chrono::steady_clock::now();
  c = Check(h);
  double bad_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(c.ok());
  CHECK(c.anomalies[0].kind == AnomalyKind::kGSingle);
  WARN("100k transactions: " << ok_s << " s to accept, " << bad_s << " s to find the anomaly");
}

}  // namespace
}  // namespace txn
}  // namespace farm
