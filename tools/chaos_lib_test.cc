#include "tools/chaos_lib.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "tools/bench_driver.h"

namespace farm {
namespace chaos {
namespace {

using txn::TxnOp;
using txn::TxnOutcome;
using txn::TxnRecord;

TxnRecord Txn(const std::string& client, int64_t start, TxnOutcome outcome,
              std::vector<TxnOp> ops) {
  TxnRecord t;
  t.client = client;
  t.start_ns = start;
  t.end_ns = start + 10;
  t.outcome = outcome;
  t.ops = std::move(ops);
  return t;
}

TEST_CASE("scenarios parse by name, all, and refuse unknown or unavailable ones") {
  absl::StatusOr<std::vector<Scenario>> all = ParseScenarios("", true);
  REQUIRE(all.ok());
  CHECK(all->size() == AllScenarios().size());
  absl::StatusOr<std::vector<Scenario>> no_sync = ParseScenarios("all", false);
  REQUIRE(no_sync.ok());
  for (Scenario s : *no_sync) CHECK_FALSE(Info(s).sync_point);
  CHECK(no_sync->size() < all->size());

  absl::StatusOr<std::vector<Scenario>> two = ParseScenarios("kill9, sigstop_short,kill9", false);
  REQUIRE(two.ok());
  CHECK(*two == std::vector<Scenario>{Scenario::kKill9, Scenario::kSigstopShort});

  absl::StatusOr<std::vector<Scenario>> bad = ParseScenarios("kill9,split_brain", true);
  REQUIRE_FALSE(bad.ok());
  CHECK(absl::StrContains(bad.status().message(), "unknown scenario 'split_brain'"));
  CHECK(absl::StrContains(bad.status().message(), "sigstop_short"));

  absl::StatusOr<std::vector<Scenario>> opt = ParseScenarios("crash_between_primaries", false);
  REQUIRE_FALSE(opt.ok());
  CHECK(absl::StrContains(opt.status().message(), "compiled out"));

  // Without network namespaces "all" leaves partition out, and naming it says why.
  absl::StatusOr<std::vector<Scenario>> no_netns = ParseScenarios("all", true, false, "not root");
  REQUIRE(no_netns.ok());
  CHECK(no_netns->size() + 2 == all->size());  // partition, partition_cm
  for (Scenario s : *no_netns) CHECK_FALSE(Info(s).netns);
  absl::StatusOr<std::vector<Scenario>> cut = ParseScenarios("partition", true, false, "not root");
  REQUIRE_FALSE(cut.ok());
  CHECK(absl::StrContains(cut.status().message(), "network namespace"));
  CHECK(absl::StrContains(cut.status().message(), "not root"));
  absl::StatusOr<std::vector<Scenario>> with = ParseScenarios("partition", true, true);
  REQUIRE(with.ok());
  CHECK(*with == std::vector<Scenario>{Scenario::kPartition});
}

TEST_CASE("the fault schedule picks victims by scenario and is the same for one seed") {
  for (int seed = 1; seed < 20; ++seed) {
    for (const Fault& f : PlanFaults(Scenario::kKill9, 10, 4, 1000, seed)) {
      CHECK(f.victim >= 1);  // never the CM
      CHECK(f.victim <= 3);
    }
  }
  std::vector<Fault> a = PlanFaults(Scenario::kSigstopLong, 6, 5, 1000, 7);
  std::vector<Fault> b = PlanFaults(Scenario::kSigstopLong, 6, 5, 1000, 7);
  REQUIRE(a.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].victim == b[i].victim);
  CHECK(a[0].pause == absl::Milliseconds(2000));  // past the lease
  std::vector<Fault> s = PlanFaults(Scenario::kSigstopShort, 1, 3, 1000, 7);
  CHECK(s[0].pause == absl::Milliseconds(400));  // below the lease, with heartbeats every 250 ms
  std::vector<Fault> cm = PlanFaults(Scenario::kKillCm, 5, 3, 1000, 1);
  REQUIRE(cm.size() == 5);   // another node takes the role over each time
  CHECK(cm[0].victim == 0);  // the configured CM; later ones are whichever node holds the role
  std::vector<Fault> stopped_cm = PlanFaults(Scenario::kSigstopCm, 2, 3, 1000, 1);
  REQUIRE(stopped_cm.size() == 2);
  CHECK(stopped_cm[0].victim == 0);
  CHECK(stopped_cm[0].pause == absl::Milliseconds(2000));  // past the lease: taken over
  for (const Fault& f : PlanFaults(Scenario::kClientKill, 3, 3, 1000, 1)) CHECK(f.victim == 3);
  for (const Fault& f : PlanFaults(Scenario::kPartition, 6, 3, 1000, 3)) {
    CHECK(f.victim >= 1);  // a data node, never the CM
    CHECK(f.victim <= 2);
    CHECK(f.pause == absl::Milliseconds(2000));  // cut off past the lease: evicted
  }
}

TEST_CASE("merged records keep each transaction's last line, in start order") {
  std::vector<TxnRecord> in = {
      Txn("1.0", 200, TxnOutcome::kUnknown, {TxnOp::Write(1, 5, 0)}),
      Txn("1.1", 100, TxnOutcome::kCommitted, {TxnOp::Read(1, 0)}),
      Txn("1.0", 200, TxnOutcome::kCommitted, {TxnOp::Write(1, 5, 0)}),
      Txn("1.0", 300, TxnOutcome::kUnknown, {TxnOp::Write(1, 6, 5)}),  // its process died
  };
  txn::History h = MergeRecords(in);
  REQUIRE(h.size() == 3);
  CHECK(h[0].start_ns == 100);
  CHECK(h[1].outcome == TxnOutcome::kCommitted);
  CHECK(h[2].outcome == TxnOutcome::kUnknown);
}

TEST_CASE("lost commits: missing from the final value's chain, or on an unreadable key") {
  // Key 1: 0 -> 11 -> 12 (committed), 13 over 12 (unknown, not installed).
  // Key 2: 0 -> 21 (committed), 22 over 21 (committed, but the final read sees 21: lost).
  // Key 3: 0 -> 31 (committed), unreadable at the end.
  txn::History h = {
      Txn("a", 1, TxnOutcome::kCommitted, {TxnOp::Write(1, 11, 0), TxnOp::Write(2, 21, 0)}),
      Txn("a", 2, TxnOutcome::kCommitted, {TxnOp::Write(1, 12, 11)}),
      Txn("b", 3, TxnOutcome::kUnknown, {TxnOp::Write(1, 13, 12)}),
      Txn("b", 4, TxnOutcome::kCommitted, {TxnOp::Write(2, 22, 21)}),
      Txn("c", 5, TxnOutcome::kCommitted, {TxnOp::Write(3, 31, 0)}),
      Txn("c", 6, TxnOutcome::kCommitted, {TxnOp::Read(1, 12)}),  // read-only: nothing to lose
      Txn("audit", 7, TxnOutcome::kCommitted, {TxnOp::Read(1, 12)}),
  };
  std::map<uint64_t, std::optional<uint64_t>> final_tags = {{1, 12}, {2, 21}, {3, std::nullopt}};
  LossReport r = CountLostCommits(h, final_tags, true, "audit");
  CHECK(r.lost_commits == 2);  // b@4 (key 2) and c@5 (key 3)
  CHECK(r.lost_on_unavailable == 1);
  CHECK(r.unavailable_keys == 1);

  final_tags[2] = 22;
  final_tags[3] = 31;
  CHECK(CountLostCommits(h, final_tags, true, "audit").lost_commits == 0);
  // The unknown write installed after all: still nothing committed is missing.
  final_tags[1] = 13;
  CHECK(CountLostCommits(h, final_tags, true, "audit").lost_commits == 0);
  // Nothing readable (the cluster is gone): every committed writer is lost.
  CHECK(CountLostCommits(h, {}, false, "audit").lost_commits == 4);
}

TEST_CASE("rates and the time until throughput is back") {
  // 100/s for 1 s, nothing for 0.5 s, then 100/s again.
  std::vector<int64_t> t;
  for (int64_t ms = 0; ms < 1000; ms += 10) t.push_back(ms * 1000000);
  for (int64_t ms = 1500; ms < 3000; ms += 10) t.push_back(ms * 1000000);
  const int64_t ms = 1000000;
  CHECK(Rate(t, 0, 1000 * ms) == Approx(100));
  CHECK(Rate(t, 1000 * ms, 1500 * ms) == 0);
  CHECK(Rate(t, 5, 5) == 0);
  // Windows of 200 ms stepped by 50 ms from the fault at 1000 ms: [1500, 1700) is the first
  // full one, so the throughput is back 700 ms after the fault.
  std::optional<double> r = RecoveryMs(t, 1000 * ms, 3000 * ms, 100, 200 * ms, 50 * ms);
  REQUIRE(r.has_value());
  CHECK(*r == Approx(700));
  CHECK_FALSE(RecoveryMs(t, 1000 * ms, 1600 * ms, 100, 200 * ms, 50 * ms).has_value());
  CHECK_FALSE(RecoveryMs(t, 1000 * ms, 3000 * ms, 0, 200 * ms, 50 * ms).has_value());
  CHECK(*Percentile({5, 1, 3, 2, 4}, 0.5) == 3);
  CHECK(*Percentile({5, 1, 3, 2, 4}, 0.99) == 5);
  CHECK_FALSE(Percentile({}, 0.5).has_value());
}

TEST_CASE("the JSON line has the issue's keys in order, null for no recovery, escaped notes") {
  ScenarioResult r;
  r.scenario = "kill9";
  r.provider = "tcp;ofi_rxm";
  r.f = 1;
  r.lease_ms = 1000;
  r.faults = r.faults_planned = 2;
  r.committed = 1234;
  r.lost_commits = 7;
  r.recovery_ms_p50 = 812.25;
  r.tput_before = 400;
  r.tput_after = 350.5;
  r.bank_total = 100;
  r.notes = {"node 2 \"lost\"\n"};
  const std::string line = ToJsonLine(r, false);
  const std::vector<std::string> keys = {"scenario",        "provider",    "f",
                                         "lease_ms",        "faults",      "committed",
                                         "lost_commits",    "anomalies",   "recovery_ms_p50",
                                         "recovery_ms_p99", "tput_before", "tput_after"};
  size_t at = 0;
  for (const std::string& k : keys) {
    const size_t p = line.find("\"" + k + "\":", at);
    REQUIRE(p != std::string::npos);
    at = p;
  }
  CHECK(absl::StrContains(line, "\"recovery_ms_p50\":812.2"));
  CHECK(absl::StrContains(line, "\"recovery_ms_p99\":null"));
  CHECK(absl::StrContains(line, "\"notes\":[\"node 2 \\\"lost\\\"\\u000a\"]"));
  CHECK(absl::StrContains(line, "\"ok\":false}"));
  CHECK(*JsonNumber(line, "committed") == 1234);
  CHECK(*JsonNumber(line, "tput_after") == Approx(350.5));
  CHECK(*JsonNumber(line, "seed") == 0);  // unset; --rounds gives each round's seed
  CHECK(*JsonNumber(line, "round") == 1);
  r.seed = 7;
  r.round = 3;
  const std::string later = ToJsonLine(r, true);
  CHECK(*JsonNumber(later, "seed") == 7);
  CHECK(*JsonNumber(later, "round") == 3);
}

TEST_CASE("a scenario is ok only with every fault injected, nothing lost and the bank whole") {
  ScenarioResult r;
  r.faults = r.faults_planned = 3;
  r.accounts = 10;
  r.bank_total = r.bank_expected = 10000;
  CHECK(r.ok(false));
  r.evictions = 1;
  CHECK_FALSE(r.ok(false));
  CHECK(r.ok(true));
  r.unavailable = 1;
  CHECK_FALSE(r.ok(true));
  r.unavailable = 0;
  r.faults = 2;
  CHECK_FALSE(r.ok(true));
}

}  // namespace
}  // namespace chaos
}  // namespace farm
