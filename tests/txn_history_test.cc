// Strict serializability checked from the outside: randomized concurrent transactions on three
// in-process nodes (two threads each, a few hot objects spread over the nodes) record what they
// read and wrote and when, and txn/history.h's dependency-graph checker must find the history
// strictly serializable. A negative control records a transaction that skipped its commit (and
// so its validation) after a deterministic interleaving: the checker must name the read skew.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farm/farm.h"
#include "tests/runtime_cluster.h"
#include "txn/history.h"

namespace farm {
namespace {

using txn::History;
using txn::TxnOp;
using txn::TxnOutcome;
using txn::TxnRecord;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<std::unique_ptr<Runtime>> StartCluster() {
  std::vector<std::unique_ptr<Runtime>> rts = testing::StartRuntimes(3);
  for (auto& rt : rts) rt->Serve();
  return rts;
}

std::unique_ptr<Worker> NewWorker(Runtime& rt) {
  absl::StatusOr<std::unique_ptr<Worker>> w = rt.NewWorker();
  REQUIRE(w.ok());
  return std::move(*w);
}

// `n` uint64 objects, value 0 (what the history's implicit initial transaction wrote), placed
// round-robin on the nodes.
std::vector<GlobalAddress> MakeKeys(Worker& w, int n) {
  std::vector<GlobalAddress> keys;
  absl::Status s = w.Run([&](Txn& t) -> absl::Status {
    keys.clear();
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(uint64_t), AllocHint::OnNode(i % 3));
      if (!a.ok()) return a.status();
      keys.push_back(*a);
    }
    return absl::OkStatus();
  });
  REQUIRE(s.ok());
  return keys;
}

void SaveHistory(const History& h, const std::string& name) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (dir == nullptr) return;
  std::ofstream out(absl::StrCat(dir, "/", name));
  for (const TxnRecord& r : h) out << txn::TxnRecordToJson(r) << "\n";
}

}  // namespace

TEST_CASE("randomized concurrent transactions are strictly serializable", "[txn][history]") {
  std::vector<std::unique_ptr<Runtime>> rts = StartCluster();
  std::unique_ptr<Worker> setup = NewWorker(*rts[0]);
  constexpr int kKeys = 6;
  constexpr int kTxnsPerThread = 150;
  const std::vector<GlobalAddress> keys = MakeKeys(*setup, kKeys);

  std::vector<std::unique_ptr<Worker>> workers;  // made here: Catch is for the main thread
  for (int n = 0; n < 3; ++n) {
    for (int k = 0; k < 2; ++k) workers.push_back(NewWorker(*rts[n]));
  }
  std::mutex mu;
  History history;
  std::vector<std::thread> threads;
  for (int c = 0; c < static_cast<int>(workers.size()); ++c) {
    threads.emplace_back([&, c] {
      Worker& w = *workers[c];
      std::mt19937 rng(1000 + c);
      for (int i = 0; i < kTxnsPerThread; ++i) {
        TxnRecord rec;
        rec.client = absl::StrCat("node ", c / 2, " thread ", c % 2);
        rec.start_ns = NowNs();
        std::unique_ptr<Txn> t = w.Begin();
        absl::Status s;
        // 1 to 3 distinct keys; each read, and written with probability 1/2 (a read-only
        // transaction now and then).
        std::vector<int> chosen;
        const int count = 1 + rng() % 3;
        while (static_cast<int>(chosen.size()) < count) {
          const int k = rng() % kKeys;
          if (std::find(chosen.begin(), chosen.end(), k) == chosen.end()) chosen.push_back(k);
        }
        for (int j = 0; j < count && s.ok(); ++j) {
          const int k = chosen[j];
          absl::StatusOr<uint64_t> v = t->Get<uint64_t>(keys[k]);
          if (!v.ok()) {
            s = v.status();
            break;
          }
          rec.ops.push_back(TxnOp::Read(k, *v));
          if (rng() % 2 == 0) {
            // Unique per key and never 0: (client, transaction, position).
            const uint64_t value = (uint64_t(c + 1) << 40) | (uint64_t(i) << 8) | uint64_t(j + 1);
            s = t->Put(keys[k], value);
            if (s.ok()) rec.ops.push_back(TxnOp::Write(k, value, *v));
          }
        }
        if (s.ok()) s = t->Commit();
        rec.end_ns = NowNs();
        rec.outcome = s.ok()                 ? TxnOutcome::kCommitted
                      : absl::IsAborted(s) ? TxnOutcome::kAborted
                                             : TxnOutcome::kUnknown;
        std::lock_guard<std::mutex> l(mu);
        history.push_back(std::move(rec));
      }
    });
  }
  for (auto& t : threads) t.join();
  SaveHistory(history, "txn_history.jsonl");

  absl::StatusOr<txn::HistoryCheck> check = txn::CheckStrictSerializability(history);
  INFO(check.status().ToString());
  REQUIRE(check.ok());
  INFO((check->anomalies.empty() ? std::string() : check->anomalies[0].description));
  CHECK(check->ok());
  INFO("committed " << check->committed << ", aborted " << check->aborted << ", unknown "
                    << check->unknown_included + check->unknown_dropped);
  CHECK(check->transactions == workers.size() * kTxnsPerThread);
  CHECK(check->committed > kTxnsPerThread);  // real work, not a history of aborts
  CHECK(check->unknown_included + check->unknown_dropped == 0);
}

TEST_CASE("the checker catches a transaction that skipped validation", "[txn][history]") {
  // Deterministic interleaving: T1 reads x, T2 transfers between x and y and commits, T1 reads
  // y. T1 never commits (so it is never validated) but is recorded as committed: the history has
  // a read skew, which the checker must report; T1's own Commit would have aborted.
  std::vector<std::unique_ptr<Runtime>> rts = StartCluster();
  std::unique_ptr<Worker> w0 = NewWorker(*rts[0]);
  std::unique_ptr<Worker> w1 = NewWorker(*rts[1]);
  const std::vector<GlobalAddress> keys = MakeKeys(*w0, 2);
  History history;

  TxnRecord t1;
  t1.client = "T1";
  t1.start_ns = NowNs();
  std::unique_ptr<Txn> a = w0->Begin();
  absl::StatusOr<uint64_t> x = a->Get<uint64_t>(keys[0]);
  REQUIRE(x.ok());
  t1.ops.push_back(TxnOp::Read(0, *x));

  TxnRecord t2;
  t2.client = "T2";
  t2.start_ns = NowNs();
  std::unique_ptr<Txn> b = w1->Begin();
  REQUIRE(b->Put(keys[0], uint64_t{11}).ok());
  REQUIRE(b->Put(keys[1], uint64_t{22}).ok());
  REQUIRE(b->Commit().ok());
  t2.end_ns = NowNs();
  t2.ops = {TxnOp::Write(0, 11, 0), TxnOp::Write(1, 22, 0)};

  absl::StatusOr<uint64_t> y = a->Get<uint64_t>(keys[1]);
  REQUIRE(y.ok());
  CHECK(*y == 22);
  t1.ops.push_back(TxnOp::Read(1, *y));
  t1.end_ns = NowNs();
  t1.outcome = TxnOutcome::kCommitted;  // the bug: recorded without a commit
  history = {t1, t2};

  absl::StatusOr<txn::HistoryCheck> check = txn::CheckStrictSerializability(history);
  REQUIRE(check.ok());
  REQUIRE_FALSE(check->ok());
  CHECK(check->anomalies[0].kind == txn::AnomalyKind::kGSingle);
  // And the protocol itself refuses it.
  CHECK(absl::IsAborted(a->Commit()));
}

}  // namespace farm
