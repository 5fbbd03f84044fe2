// Strict serializability checked from the outside: randomized concurrent transactions on three
// in-process nodes (tests/txn_history_workload.h: small and big objects, multi-part LOCKs,
// Alloc, Free, NotFound reads, lock-free reads) record what they read and wrote and when, and
// txn/history.h's dependency-graph checker must find the history strictly serializable, with
// and without delayed WRITEs (platform/fault_injection.h), and with LOCK, COMMIT-PRIMARY and
// ABORT sends that fail (platform/sync_point.h). A negative control records a
// transaction that skipped its commit (and so its validation) after a deterministic
// interleaving: the checker must name the read skew.
//
// FARM_HISTORY_SEED=<n> runs the randomized cases with seed n instead of their own (a failure
// prints its seed); the histories are saved as undeclared test outputs (txn_history_*.jsonl).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "platform/fault_injection.h"
#include "platform/sync_point.h"
#include "tests/runtime_cluster.h"
#include "tests/txn_history_workload.h"
#include "txn/engine.h"
#include "txn/history.h"
#include "txn/transaction.h"

namespace farm {
namespace {

using txn::History;
using txn::TxnOp;
using txn::TxnOutcome;
using txn::TxnRecord;
using testing::NowNs;

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

uint32_t Seed(uint32_t default_seed) {
  const char* env = std::getenv("FARM_HISTORY_SEED");
  return env == nullptr ? default_seed : static_cast<uint32_t>(std::strtoul(env, nullptr, 10));
}

// Runs the workload with `seed` on `rts` and checks its history.
void RunAndCheck(const std::vector<std::unique_ptr<Runtime>>& rts, uint32_t seed,
                 const std::string& name) {
  INFO("seed " << seed << " (FARM_HISTORY_SEED=" << seed << " repeats its choices)");
  // The premise of the multi-part LOCKs: three big objects exceed one LOCK message at node 1.
  const txn::Engine& engine = *RuntimeAccess::Of(*rts[1]).txn;
  REQUIRE(3 * testing::kBigSize > engine.max_message() - txn::Engine::kLockOverhead);
  testing::HistoryWorkloadOptions options;
  options.seed = seed;
  testing::HistoryWorkload workload(rts, options);
  testing::HistoryWorkloadResult r = workload.Run();
  SaveHistory(r.history, absl::StrCat("txn_history_", name, "_seed", seed, ".jsonl"));
  for (const std::string& f : r.failures) FAIL_CHECK(f);

  absl::StatusOr<txn::HistoryCheck> check = txn::CheckStrictSerializability(r.history);
  INFO(check.status().ToString());
  REQUIRE(check.ok());
  INFO((check->anomalies.empty() ? std::string() : check->anomalies[0].description));
  CHECK(check->ok());
  INFO("committed " << check->committed << ", aborted " << check->aborted << ", unknown "
                    << check->unknown_included + check->unknown_dropped << "; allocs "
                    << r.allocs_committed << ", frees " << r.frees_committed
                    << ", absent reads " << r.absent_reads << " (" << r.absent_reads_dropped
                    << " ambiguous), lock-free reads " << r.lock_free_reads
                    << ", multi-part commits " << r.multi_part_commits);
  CHECK(check->committed > 300);  // real work, not a history of aborts
  CHECK(check->unknown_included + check->unknown_dropped == 0);
  // Every kind of operation took part.
  CHECK(r.allocs_committed > 0);
  CHECK(r.frees_committed > 0);
  CHECK(r.absent_reads > 0);
  CHECK(r.lock_free_reads > 0);
  CHECK(r.multi_part_commits > 0);
}

}  // namespace

TEST_CASE("randomized concurrent transactions are strictly serializable", "[txn][history]") {
  std::vector<std::unique_ptr<Runtime>> rts = StartCluster();
  RunAndCheck(rts, Seed(1), "plain");
}

TEST_CASE("randomized transactions stay strictly serializable with delayed WRITEs",
          "[txn][history]") {
  if (!FaultInjection::kCompiledIn) return;  // a release build: no faults to inject
  std::vector<std::unique_ptr<Runtime>> rts = StartCluster();
  // One in 8 WRITEs from nodes 1 and 2 (messages, their rings' head updates, a worker's raw
  // WRITEs) lands 1 ms late, overtaken by later ones: messages to an owner arrive out of the
  // order they were sent in across lanes, and commits overlap more.
  FaultInjection faults;  // after the nodes: destroyed before their fabrics
  std::atomic<uint64_t> n{0};
  std::vector<int> rules;
  for (int node : {1, 2}) {
    const Fabric* f = RuntimeAccess::Of(*rts[node]).node->fabric();
    rules.push_back(faults.Add({[f, &n](const WriteInfo& w) {
                         return w.fabric == f && n.fetch_add(1) % 8 == 0;
                       },
                       WriteFault::kDelay, 0, -1, absl::Milliseconds(1)}));
  }
  RunAndCheck(rts, Seed(2), "delayed_writes");
  for (int rule : rules) CHECK(faults.fired(rule) > 0);
}

TEST_CASE("randomized transactions stay strictly serializable when LOCKs and decisions are lost",
          "[txn][history]") {
#ifdef NDEBUG
  return;  // sync points are compiled out: no sends to drop
#endif
  std::vector<std::unique_ptr<Runtime>> rts = StartCluster();
  // At every coordinator: one LOCK send in 6 fails (the transaction aborts, and the owners that
  // did lock release on its ABORT), one COMMIT-PRIMARY or ABORT send in 3 fails (it is sent again
  // in the next round, so that owner applies its part after the others).
  std::atomic<uint64_t> locks{0}, decisions{0};
  std::atomic<int> locks_dropped{0}, decisions_dropped{0};
  SyncPoint* sp = SyncPoint::GetInstance();
  struct Reset {  // the callbacks go before the counters they use, even if the run throws
    ~Reset() { SyncPoint::GetInstance()->Reset(); }
  } reset;
  sp->SetCallBack("Transaction::SendLocks:Send", [&](void* arg) {
    if (locks.fetch_add(1) % 6 != 5) return;
    static_cast<txn::DecisionProbe*>(arg)->drop = true;
    ++locks_dropped;
  });
  sp->SetCallBack("Transaction::Decide:Send", [&](void* arg) {
    if (decisions.fetch_add(1) % 3 != 2) return;
    static_cast<txn::DecisionProbe*>(arg)->drop = true;
    ++decisions_dropped;
  });
  sp->EnableProcessing();
  RunAndCheck(rts, Seed(3), "lost_sends");
  CHECK(locks_dropped > 0);
  CHECK(decisions_dropped > 0);
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
