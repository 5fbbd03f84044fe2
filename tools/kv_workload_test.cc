#include "tools/kv_workload.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace farm {
namespace kvbench {
namespace {

TEST_CASE("workloads parse by either name and say their read share") {
  REQUIRE(ParseWorkloads("a,b, c,w").value() ==
          std::vector<Workload>{Workload::kA, Workload::kB, Workload::kC, Workload::kWriteOnly});
  REQUIRE(ParseWorkload("ycsb-b").value() == Workload::kB);
  REQUIRE(ParseWorkload("write-only").value() == Workload::kWriteOnly);
  absl::StatusOr<std::vector<Workload>> bad = ParseWorkloads("b,d");
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("'d'") != std::string::npos);
  REQUIRE(WorkloadName(Workload::kC) == "ycsb-c");
  REQUIRE(ReadFraction(Workload::kB) == 0.95);
}

TEST_CASE("keys are fixed-size, distinct and YCSB-like; sizes are checked") {
  const KeySpace s{1000000, 16, 32};
  REQUIRE(s.Check().ok());
  REQUIRE(s.Key(0) == "user000000000000");
  REQUIRE(s.Key(999999) == "user000000999999");
  const KeySpace tight{1000, 3, 8};  // no room for "user": the digits alone
  REQUIRE(tight.Check().ok());
  REQUIRE(tight.Key(7) == "007");
  REQUIRE(absl::IsInvalidArgument(KeySpace{1001, 3, 8}.Check()));
  REQUIRE(absl::IsInvalidArgument(KeySpace{10, 251, 8}.Check()));
  REQUIRE(absl::IsInvalidArgument(KeySpace{10, 16, 0}.Check()));
  REQUIRE(absl::IsInvalidArgument(KeySpace{0, 16, 8}.Check()));
  std::set<std::string> seen;
  for (uint64_t i = 0; i < 1000; ++i) {
    const std::string k = tight.Key(i);
    REQUIRE(k.size() == 3);
    seen.insert(k);
  }
  REQUIRE(seen.size() == 1000);
}

TEST_CASE("values have the value size and say which key they belong to") {
  for (int size : {1, 8, 32, 100}) {
    const KeySpace s{100, 16, size};
    std::string v;
    s.ValueInto(42, 7, &v);
    REQUIRE(v.size() == static_cast<size_t>(size));
    REQUIRE(s.CheckValue(42, v).ok());
    std::string newer;
    s.ValueInto(42, 8, &newer);
    REQUIRE(s.CheckValue(42, newer).ok());
    REQUIRE(absl::IsDataLoss(s.CheckValue(42, v + "x")));
    if (size >= 2) REQUIRE(absl::IsDataLoss(s.CheckValue(43, v)));
  }
}

TEST_CASE("a value's version reads back, and the writer is its top bits") {
  const KeySpace s{100, 16, 32};
  std::string v;
  const uint64_t version = MakeVersion(3, 12345);
  s.ValueInto(42, version, &v);
  REQUIRE(s.VersionIn(v) == version);
  REQUIRE(WriterOf(version) == 3);
  s.ValueInto(42, 0, &v);
  REQUIRE(s.VersionIn(v) == 0u);
  // Values too short to hold the version: unknown.
  const KeySpace small{100, 16, 20};
  small.ValueInto(42, version, &v);
  REQUIRE(!small.VersionIn(v).has_value());
}

TEST_CASE("read-your-writes: after its update a thread never reads an older value of its own") {
  const KeySpace s{100, 16, 32};
  ReadCheck check(s, 2);
  std::string v;
  auto value = [&](uint64_t key, uint64_t version) {
    s.ValueInto(key, version, &v);
    return v;
  };
  // Nothing written yet: any value of the key passes, another key's does not.
  REQUIRE(check.Value(7, value(7, 0)).ok());
  REQUIRE(absl::IsDataLoss(check.Value(7, value(8, 0))));
  // Version 5 of writer 2 completed.
  const Op update{false, 7, MakeVersion(2, 5)};
  check.Completed(absl::MakeConstSpan(&update, 1));
  REQUIRE(check.Value(7, value(7, MakeVersion(2, 5))).ok());
  REQUIRE(check.Value(7, value(7, MakeVersion(2, 9))).ok());  // a later one of its own
  REQUIRE(check.Value(7, value(7, MakeVersion(1, 1))).ok());  // another thread's: not judged
  REQUIRE(check.Value(7, value(7, MakeVersion(3, 99))).ok());
  absl::Status stale = check.Value(7, value(7, MakeVersion(2, 4)));
  REQUIRE(absl::IsDataLoss(stale));
  REQUIRE(absl::StrContains(stale.message(), "read-your-writes"));
  REQUIRE(absl::IsDataLoss(check.Value(7, value(7, 0))));  // the preloaded value came back
  REQUIRE(check.Value(8, value(8, 0)).ok());               // another key: never written here
  REQUIRE(check.judged() == 6);
  // Reads of an update's own round are not judged against it until the round completed.
  const Op later{false, 7, MakeVersion(2, 6)};
  REQUIRE(check.Value(7, value(7, MakeVersion(2, 5))).ok());
  check.Completed(absl::MakeConstSpan(&later, 1));
  REQUIRE(absl::IsDataLoss(check.Value(7, value(7, MakeVersion(2, 5)))));
}

TEST_CASE("generators tag their updates with their writer") {
  const KeyChooser keys(Distribution::kUniform, 10, 0.99);
  OpGenerator gen(keys, Workload::kWriteOnly, 1, 4);
  const Op a = gen.Next(), b = gen.Next();
  REQUIRE(a.version == MakeVersion(4, 1));
  REQUIRE(b.version == MakeVersion(4, 2));
  // The next point's generator of the same thread counts on.
  OpGenerator next(keys, Workload::kWriteOnly, 2, 4, gen.count());
  REQUIRE(next.Next().version == MakeVersion(4, 3));
}

TEST_CASE("uniform keys cover the space evenly") {
  const KeyChooser p(Distribution::kUniform, 10, 0.99);
  Rng rng(5);
  std::vector<int> seen(10);
  for (int i = 0; i < 100000; ++i) ++seen[p.Next(rng)];
  for (int c : seen) REQUIRE(std::abs(c - 10000) < 600);
}

TEST_CASE("scrambled zipf keeps Zipf's shape but spreads the hot keys") {
  const uint64_t n = 10000;
  const KeyChooser p(Distribution::kZipf, n, 0.99);
  double zeta = 0;
  for (uint64_t i = 1; i <= n; ++i) zeta += 1.0 / std::pow(i, 0.99);
  Rng rng(9);
  std::map<uint64_t, int> seen;
  const int draws = 400000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = p.Next(rng);
    REQUIRE(k < n);
    ++seen[k];
  }
  // The most popular key is rank 0's scrambled key, at Zipf's probability of rank 0 (other
  // ranks may land on it too: the hash is taken mod N, as YCSB does).
  const uint64_t hottest = Fnv1a64(0) % n;
  REQUIRE(hottest != 0);
  REQUIRE(seen[hottest] / double(draws) >= 1 / zeta - 0.01);
  REQUIRE(seen[hottest] / double(draws) < 1 / zeta + 0.02);
  std::vector<int> counts;
  for (auto& [k, c] : seen) counts.push_back(c);
  std::sort(counts.rbegin(), counts.rend());
  REQUIRE(counts[0] == seen[hottest]);
  // Skewed: the 1 % most popular keys take far more than 1 % of the draws (Zipf 0.99 over 10^4
  // keys: about half); uniform would give them 1 %.
  int top = 0;
  for (size_t i = 0; i < n / 100 && i < counts.size(); ++i) top += counts[i];
  REQUIRE(top > draws * 0.4);
  // The 10 hottest keys are spread over the space, not the first ten indexes.
  std::vector<std::pair<int, uint64_t>> by_count;
  for (auto& [k, c] : seen) by_count.push_back({c, k});
  std::sort(by_count.rbegin(), by_count.rend());
  uint64_t max_key = 0;
  for (int i = 0; i < 10; ++i) max_key = std::max(max_key, by_count[i].second);
  REQUIRE(max_key > n / 10);
}

TEST_CASE("generators are deterministic per seed and mix reads and updates as asked") {
  const KeyChooser p(Distribution::kZipf, 1000, 0.99);
  OpGenerator a(p, Workload::kB, ThreadSeed(1, 0, 0));
  OpGenerator b(p, Workload::kB, ThreadSeed(1, 0, 0));
  OpGenerator c(p, Workload::kB, ThreadSeed(1, 0, 1));
  int reads = 0, differ = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const Op x = a.Next(), y = b.Next(), z = c.Next();
    REQUIRE(x.read == y.read);
    REQUIRE(x.key == y.key);
    REQUIRE(x.version == y.version);
    reads += x.read;
    differ += x.key != z.key;
  }
  REQUIRE(std::abs(reads / double(n) - 0.95) < 0.01);
  REQUIRE(differ > n / 2);
  OpGenerator only_reads(p, Workload::kC, 3), only_writes(p, Workload::kWriteOnly, 3);
  std::vector<Op> round;
  only_reads.NextRound(8, &round);
  REQUIRE(round.size() == 8);
  for (const Op& op : round) REQUIRE(op.read);
  only_writes.NextRound(8, &round);
  for (size_t i = 0; i < round.size(); ++i) {
    REQUIRE(!round[i].read);
    REQUIRE(round[i].version == MakeVersion(1, i + 1));
  }
}

TEST_CASE("the open loop issues every round due in the window and times it from its due time") {
  const KeyChooser p(Distribution::kUniform, 100, 0.99);
  OpGenerator gen(p, Workload::kA, 1);
  RoundFn quick = [](absl::Span<const Op> ops) {
    REQUIRE(ops.size() == 2);
    return absl::OkStatus();
  };
  // 2000 rounds a second for 100 ms: 200 rounds due in the window, each issued or missed.
  ClientResult r;
  REQUIRE(RunClientOpenLoop(gen, 2, Window::After(10, 100), 2000, quick, &r).ok());
  REQUIRE(r.rounds + r.missed_ops / 2 >= 199);
  REQUIRE(r.rounds + r.missed_ops / 2 <= 201);
  REQUIRE(r.ops == 2 * r.rounds);
  REQUIRE(r.latency.total == r.ops);
  REQUIRE(r.measured_seconds >= 0.099);

  // Rounds of 2 ms offered every 0.5 ms: the client falls behind, the rounds' latencies (from
  // their due times) grow with the backlog instead of staying at 2 ms (no coordinated
  // omission), and what it could not issue before a whole window behind is missed.
  RoundFn slow = [](absl::Span<const Op>) {
    absl::SleepFor(absl::Milliseconds(2));
    return absl::OkStatus();
  };
  ClientResult behind;
  REQUIRE(RunClientOpenLoop(gen, 1, Window::After(0, 50), 2000, slow, &behind).ok());
  REQUIRE(behind.rounds <= 50);  // 100 ms of 2 ms rounds at most
  REQUIRE(behind.missed_ops >= 49);
  REQUIRE(behind.rounds + behind.missed_ops >= 99);
  REQUIRE(behind.rounds + behind.missed_ops <= 101);
  REQUIRE(behind.latency.Percentile(0.99) > 10000);
}

TEST_CASE("RunClient issues rounds of the in-flight count and counts the window") {
  const KeyChooser p(Distribution::kUniform, 100, 0.99);
  OpGenerator gen(p, Workload::kA, 1);
  int rounds = 0;
  RoundFn round = [&](absl::Span<const Op> ops) {
    REQUIRE(ops.size() == 4);
    ++rounds;
    return absl::OkStatus();
  };
  ClientResult r;
  REQUIRE(RunClient(gen, 4, Window::After(0, 30), round, &r).ok());
  REQUIRE(r.rounds > 0);
  REQUIRE(r.rounds <= static_cast<uint64_t>(rounds));
  REQUIRE(r.ops == 4 * r.rounds);
  REQUIRE(r.reads + r.updates == r.ops);
  REQUIRE(r.latency.total == r.ops);

  REQUIRE(r.measured_seconds >= 0.029);

  // A round longer than the whole window (a loaded machine): it is counted, and the measured
  // time runs to its end, instead of a point that measured nothing (kvbench_test under ASan
  // with other jobs on the machine printed "ops_per_s":0.0).
  ClientResult slow;
  RoundFn sleepy = [](absl::Span<const Op>) {
    absl::SleepFor(absl::Milliseconds(60));
    return absl::OkStatus();
  };
  REQUIRE(RunClient(gen, 2, Window::After(0, 20), sleepy, &slow).ok());
  REQUIRE(slow.rounds == 1);
  REQUIRE(slow.ops == 2);
  REQUIRE(slow.measured_seconds >= 0.060);

  RoundFn broken = [](absl::Span<const Op>) { return absl::DataLossError("wrong value"); };
  REQUIRE(absl::IsDataLoss(RunClient(gen, 1, Window::After(0, 1000), broken, &r)));
}

TEST_CASE("Preload stores every key once over its threads, and reports progress to the end") {
  std::mutex mu;
  std::vector<int> stored(1003);
  std::set<int> threads;
  std::vector<uint64_t> reported;
  uint64_t largest = 0;
  absl::Status s = Preload(
      1003, 3, 10,
      [&](int thread, uint64_t first, uint64_t count) {
        std::lock_guard<std::mutex> l(mu);
        threads.insert(thread);
        largest = std::max(largest, count);
        for (uint64_t i = first; i < first + count; ++i) ++stored[i];
        return absl::OkStatus();
      },
      [&](uint64_t done) { reported.push_back(done); });
  REQUIRE(s.ok());
  REQUIRE(largest == 10);
  for (int c : stored) REQUIRE(c == 1);
  REQUIRE(threads == std::set<int>{0, 1, 2});
  REQUIRE(!reported.empty());
  REQUIRE(reported.back() == 1003);
  REQUIRE(std::is_sorted(reported.begin(), reported.end()));

  absl::Status bad = Preload(
      100, 2, 10,
      [](int, uint64_t first, uint64_t) {
        return first == 50 ? absl::UnavailableError("server gone") : absl::OkStatus();
      },
      [](uint64_t) {});
  REQUIRE(absl::IsUnavailable(bad));
}

}  // namespace
}  // namespace kvbench
}  // namespace farm
