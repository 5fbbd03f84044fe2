// Replication (ClusterConfig.f = 1) through the public API on an in-process cluster of three
// Runtimes, each its own failure domain: every committed write reaches each backup's log before
// COMMIT-PRIMARY, and once the coordinators truncated the records, every backup copy holds
// exactly what the primary holds, object for object, after concurrent transfers, allocations and
// frees.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"
#include "tests/runtime_cluster.h"
#include "txn/object.h"

namespace farm {
namespace {

std::string ReplicatedConfig(int n, int f) {
  std::string text = absl::StrCat("provider: \"", testing::AnyProvider(),
                                  "\" region_size: 1048576 region_count: 2 lock_memory: false "
                                  "f: ",
                                  f);
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(n);
  REQUIRE(ports.ok());
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, " node { id: ", i, " host: \"", testing::TestHost(),
                    "\" control_port: ", (*ports)[i], " failure_domain: \"process ", i, "\" }");
  }
  return text;
}

std::vector<std::unique_ptr<Runtime>> StartReplicated(int f) {
  std::vector<std::unique_ptr<Runtime>> rts =
      testing::StartRuntimes(3, RuntimeOptions{}, ReplicatedConfig(3, f));
  for (auto& rt : rts) rt->Serve();
  return rts;
}

Node& NodeOf(Runtime& rt) { return *RuntimeAccess::Of(rt).node; }
txn::Engine& EngineOf(Runtime& rt) { return *RuntimeAccess::Of(rt).txn; }

std::unique_ptr<Worker> NewWorker(Runtime& rt) {
  absl::StatusOr<std::unique_ptr<Worker>> w = rt.NewWorker();
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  return std::move(*w);
}

// Waits (bounded) until no node keeps an untruncated COMMIT-BACKUP record and every object array
// reached its backups: the engines send them within a few milliseconds once idle.
void WaitForTruncation(std::vector<std::unique_ptr<Runtime>>& rts) {
  for (int i = 0; i < 3000; ++i) {
    size_t kept = 0;
    for (auto& rt : rts) {
      kept += EngineOf(*rt).backup_log().records() + EngineOf(*rt).pending_arrays();
    }
    if (kept == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("COMMIT-BACKUP records were still kept after 30 s");
}

// The object's bytes (lock word, check, size, payload) at its primary and at its backup.
struct Copies {
  std::string primary, backup;
};
Copies CopiesOf(std::vector<std::unique_ptr<Runtime>>& rts, GlobalAddress a, uint64_t span) {
  Copies out;
  for (auto& rt : rts) {
    Node& n = NodeOf(*rt);
    absl::StatusOr<RemoteTarget> t = n.Resolve(a, span);
    REQUIRE(t.ok());
    if (t->local != nullptr) out.primary.assign(t->local, span);
    if (std::shared_ptr<Region> copy = n.BackupCopy(a.region)) {
      out.backup.assign(copy->data() + a.offset, span);
    }
  }
  REQUIRE(out.primary.size() == span);
  REQUIRE(out.backup.size() == span);
  return out;
}

}  // namespace

TEST_CASE("with f = 1 every backup copy ends equal to its primary", "[replication]") {
  std::vector<std::unique_ptr<Runtime>> rts = StartReplicated(1);
  constexpr int kAccounts = 24;
  constexpr int64_t kInitial = 1000;
  std::vector<GlobalAddress> accounts =
      testing::CreateAccounts(*NewWorker(*rts[0]), kAccounts, kInitial);
  // An object array on each node (the KV store's buckets), written by transactions below.
  constexpr uint64_t kArrayObjects = 40, kArrayObjectSize = 100;
  std::vector<GlobalAddress> arrays;
  for (auto& rt : rts) {
    absl::StatusOr<GlobalAddress> a =
        EngineOf(*rt).CreateObjectArray(kArrayObjectSize, kArrayObjects);
    REQUIRE(a.ok());
    arrays.push_back(*a);
  }
  // Transfers on every node, and on each a thread that allocates objects of several sizes on
  // every node and frees every other one (slots are reused, versions continue).
  std::vector<std::unique_ptr<Worker>> workers;
  for (int n = 0; n < 3; ++n) {
    for (int k = 0; k < 3; ++k) workers.push_back(NewWorker(*rts[n]));
  }
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::pair<GlobalAddress, uint64_t>> kept, freed;  // address, payload size
  std::vector<std::thread> threads;
  for (int n = 0; n < 3; ++n) {
    for (int k = 0; k < 2; ++k) {
      threads.emplace_back([&, n, k] {
        testing::RandomTransfers(*workers[n * 3 + k], accounts, 100, n * 10 + k,
                                 [&](const absl::Status& s) {
                                   std::lock_guard<std::mutex> l(mu);
                                   errors.push_back(s.ToString());
                                 });
      });
    }
    threads.emplace_back([&, n] {
      Worker* w = workers[n * 3 + 2].get();
      std::mt19937 rng(100 + n);
      for (int i = 0; i < 60; ++i) {
        const uint64_t size = 8 + rng() % 300;
        GlobalAddress a;
        absl::Status s = w->Run([&](Txn& t) -> absl::Status {
          absl::StatusOr<GlobalAddress> got = t.Alloc(size, AllocHint::OnNode(rng() % 3));
          if (!got.ok()) return got.status();
          a = *got;
          const std::string value(size, static_cast<char>('a' + i % 26));
          return t.Write(a, value.data(), value.size());
        });
        if (s.ok() && i % 2 == 1) s = w->Run([&](Txn& t) { return t.Free(a); });
        if (s.ok() && i % 3 == 0) {
          const GlobalAddress& array = arrays[rng() % 3];
          const GlobalAddress slot{array.region, array.offset + (rng() % kArrayObjects) * 128};
          const std::string value(kArrayObjectSize, static_cast<char>('A' + i % 26));
          s = w->Run([&](Txn& t) { return t.Write(slot, value.data(), value.size()); });
        }
        std::lock_guard<std::mutex> l(mu);
        if (!s.ok()) {
          errors.push_back(s.ToString());
        } else {
          (i % 2 == 1 ? freed : kept).emplace_back(a, size);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  INFO((errors.empty() ? std::string() : errors[0]));
  CHECK(errors.empty());

  WaitForTruncation(rts);
  uint64_t applied = 0;
  for (auto& rt : rts) applied += EngineOf(*rt).backup_log().applied();
  CHECK(applied > 0);
  int64_t backup_total = 0;
  for (const GlobalAddress& a : accounts) {
    const uint64_t span = txn::ObjectSpan(sizeof(int64_t));
    Copies c = CopiesOf(rts, a, span);
    INFO("account " << a.ToString());
    CHECK(c.backup == c.primary);
    txn::ObjectView v;
    REQUIRE(txn::DecodeObject(c.backup.data(), sizeof(int64_t), &v) == txn::ObjectState::kOk);
    int64_t balance = 0;
    std::memcpy(&balance, v.payload.data(), sizeof(balance));
    backup_total += balance;
  }
  CHECK(backup_total == kAccounts * kInitial);
  // Objects slots may be reused by later allocations: only check those still holding ours.
  std::vector<GlobalAddress> kept_addrs;
  for (const auto& [a, size] : kept) kept_addrs.push_back(a);
  for (const auto& [a, size] : kept) {
    INFO("object " << a.ToString());
    Copies c = CopiesOf(rts, a, txn::ObjectSpan(size));
    CHECK(c.backup == c.primary);
  }
  for (const auto& [a, size] : freed) {
    if (std::find(kept_addrs.begin(), kept_addrs.end(), a) != kept_addrs.end()) continue;
    INFO("freed object " << a.ToString());
    Copies c = CopiesOf(rts, a, 8);  // a freed slot: its lock word (version, not allocated)
    CHECK(c.backup == c.primary);
    CHECK_FALSE(txn::IsAllocated(txn::LoadLockWord(c.backup.data())));
  }
  for (const GlobalAddress& a : arrays) {
    for (uint64_t i = 0; i < kArrayObjects; ++i) {
      const GlobalAddress e{a.region, a.offset + i * 128};
      INFO("array object " << e.ToString());
      Copies c = CopiesOf(rts, e, txn::ObjectSpan(kArrayObjectSize));
      CHECK(c.backup == c.primary);
      CHECK(txn::IsAllocated(txn::LoadLockWord(c.backup.data())));
    }
  }
  // Each backup learnt its regions' allocator layout: a promoted copy would rebuild the
  // primary's allocator (every slot in use still in use, arrays kept, nothing else taken).
  for (auto& primary_rt : rts) {
    txn::Allocator& primary = EngineOf(*primary_rt).allocator();
    for (const control::RegionInfo& r : NodeOf(*primary_rt).RegionsOf(NodeOf(*primary_rt).id())) {
      INFO("region " << r.region_id());
      REQUIRE(r.backup_node_size() == 1);
      Runtime& backup_rt = *rts[r.backup_node(0)];
      const txn::RegionLayout want = primary.LayoutOf(r.region_id());
      const txn::RegionLayout learnt = EngineOf(backup_rt).backup_log().Layout(r.region_id());
      if (learnt.block_size == 0) continue;  // nothing was ever written there
      CHECK(learnt.arrays == want.arrays);
      std::shared_ptr<Region> copy = NodeOf(backup_rt).BackupCopy(r.region_id());
      REQUIRE(copy != nullptr);
      for (size_t b = 0; b < learnt.block_class.size(); ++b) {
        if (learnt.block_class[b] >= 0) CHECK(learnt.block_class[b] == want.block_class[b]);
      }
      std::vector<char> mem(copy->data(), copy->data() + copy->size());
      txn::Allocator adopted({});
      REQUIRE(adopted.Adopt(txn::LocalRegion{r.region_id(), mem.data(), mem.size()}, learnt).ok());
      txn::Allocator just_this({});
      std::vector<char> primary_mem(NodeOf(*primary_rt).local_region_data(r.index()),
                                    NodeOf(*primary_rt).local_region_data(r.index()) + mem.size());
      REQUIRE(just_this.Adopt(txn::LocalRegion{r.region_id(), primary_mem.data(), mem.size()}, want)
                  .ok());
      CHECK(adopted.slots_in_use() == just_this.slots_in_use());
    }
  }
}

// Promotion: node 1 is evicted (another node reports it, as when it stops answering) while
// transfers run on nodes 0 and 2, each also counting its commits in a counter object that lives
// on node 1. Node 1's regions move to their backups with their ids, so every address stays valid:
// the bank total holds, no counter lost a commit (a commit whose outcome its client could not
// learn may or may not count), node 1's object array keeps its values, and the cluster goes on.
TEST_CASE("with f = 1 an evicted node's regions are served by their backups", "[replication]") {
  std::vector<std::unique_ptr<Runtime>> rts = StartReplicated(1);
  constexpr int kAccounts = 24;
  constexpr int64_t kInitial = 1000;
  std::unique_ptr<Worker> w0 = NewWorker(*rts[0]);
  const std::vector<GlobalAddress> accounts = testing::CreateAccounts(*w0, kAccounts, kInitial);
  absl::StatusOr<GlobalAddress> array = EngineOf(*rts[1]).CreateObjectArray(100, 40);
  REQUIRE(array.ok());
  const GlobalAddress marked{array->region, array->offset + 7 * 128};
  const std::string mark(100, 'm');
  REQUIRE(w0->Run([&](Txn& t) { return t.Write(marked, mark.data(), mark.size()); }).ok());
  GlobalAddress counters[2];
  REQUIRE(w0->Run([&](Txn& t) -> absl::Status {
              for (GlobalAddress& c : counters) {
                absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(int64_t), AllocHint::OnNode(1));
                if (!a.ok()) return a.status();
                c = *a;
                if (absl::Status s = t.Put(c, int64_t{0}); !s.ok()) return s;
              }
              return absl::OkStatus();
            }).ok());
  const std::vector<control::RegionInfo> before = NodeOf(*rts[1]).RegionsOf(1);

  std::unique_ptr<Worker> workers[2] = {NewWorker(*rts[0]), NewWorker(*rts[2])};
  std::atomic<int> started{0};
  int64_t ok[2] = {0, 0}, unknown[2] = {0, 0};
  std::string first_error[2];
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(7 + k);
      for (int i = 0; i < 150; ++i) {
        const int from = rng() % kAccounts, to = (from + 1 + rng() % (kAccounts - 1)) % kAccounts;
        absl::Status s = workers[k]->Run([&](Txn& t) -> absl::Status {
          absl::StatusOr<int64_t> a = t.Get<int64_t>(accounts[from]);
          absl::StatusOr<int64_t> b = t.Get<int64_t>(accounts[to]);
          absl::StatusOr<int64_t> c = t.Get<int64_t>(counters[k]);
          if (!a.ok()) return a.status();
          if (!b.ok()) return b.status();
          if (!c.ok()) return c.status();
          if (absl::Status s = t.Put(accounts[from], *a - 1); !s.ok()) return s;
          if (absl::Status s = t.Put(accounts[to], *b + 1); !s.ok()) return s;
          return t.Put(counters[k], *c + 1);
        });
        if (s.ok()) {
          ++ok[k];
        } else {
          ++unknown[k];
          if (first_error[k].empty()) first_error[k] = s.ToString();
        }
        if (i == 40) started.fetch_add(1);
      }
    });
  }
  while (started.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  NodeOf(*rts[0]).ReportSuspect(1, "the test evicts it");
  REQUIRE(NodeOf(*rts[1]).WaitForEviction(absl::Seconds(60)));
  for (std::thread& t : threads) t.join();
  INFO("errors: " << first_error[0] << " / " << first_error[1]);

  // Node 1's regions are served by one of their backups now, under the same ids.
  for (int n : {0, 2}) {
    for (const control::RegionInfo& r : before) {
      absl::StatusOr<RemoteTarget> t = NodeOf(*rts[n]).Resolve(GlobalAddress{r.region_id(), 0}, 8);
      REQUIRE(t.ok());
      CHECK(std::find(r.backup_node().begin(), r.backup_node().end(), t->node_id) !=
            r.backup_node().end());
    }
  }
  int64_t total = 0;
  for (const GlobalAddress& a : accounts) {
    absl::StatusOr<int64_t> v = w0->LockFreeGet<int64_t>(a);
    INFO(a.ToString() << ": " << v.status().ToString());
    REQUIRE(v.ok());
    total += *v;
  }
  CHECK(total == kAccounts * kInitial);
  for (int k = 0; k < 2; ++k) {
    absl::StatusOr<int64_t> c = w0->LockFreeGet<int64_t>(counters[k]);
    REQUIRE(c.ok());
    INFO("thread " << k << ": " << ok[k] << " committed, " << unknown[k] << " unknown");
    CHECK(*c >= ok[k]);
    CHECK(*c <= ok[k] + unknown[k]);
    // Runs that failed because node 1 left are run again: no error reaches the client.
    CHECK(unknown[k] == 0);
  }
  std::string got(100, '\0');
  REQUIRE(w0->LockFreeRead(marked, got.data(), got.size()).ok());
  CHECK(got == mark);
  // The cluster goes on: transfers, and allocations in the promoted regions.
  for (auto& w : workers) {
    std::vector<std::string> errors;
    testing::RandomTransfers(*w, accounts, 20, 99,
                             [&](const absl::Status& s) { errors.push_back(s.ToString()); });
    INFO((errors.empty() ? std::string() : errors[0]));
    CHECK(errors.empty());
  }
  absl::StatusOr<GlobalAddress> fresh;
  REQUIRE(w0->Run([&](Txn& t) -> absl::Status {
              fresh = t.Alloc(sizeof(int64_t), AllocHint::Near(counters[0]));
              if (!fresh.ok()) return fresh.status();
              return t.Put(*fresh, int64_t{5});
            }).ok());
  CHECK((fresh->region != counters[0].region || fresh->offset != counters[0].offset));
  CHECK(*w0->LockFreeGet<int64_t>(counters[0]) >= ok[0]);
}

TEST_CASE("a write transaction with backups takes one more message round", "[replication]") {
  for (int f : {0, 1}) {
    INFO("f = " << f);
    std::vector<std::unique_ptr<Runtime>> rts = StartReplicated(f);
    std::unique_ptr<Worker> w = NewWorker(*rts[0]);
    GlobalAddress a;
    REQUIRE(w->Run([&](Txn& t) -> absl::Status {
               absl::StatusOr<GlobalAddress> got = t.Alloc(8, AllocHint::OnNode(1));
               if (!got.ok()) return got.status();
               a = *got;
               return t.Put(a, int64_t{1});
             }).ok());
    std::unique_ptr<Txn> t = w->Begin();
    REQUIRE(t->Put(a, int64_t{2}).ok());
    REQUIRE(t->Commit().ok());
    // LOCK and COMMIT-PRIMARY, and COMMIT-BACKUP between them when there are backups.
    CHECK(RuntimeAccess::Of(*t).t.commit_rounds() == 2 + f);
    for (auto& rt : rts) CHECK(EngineOf(*rt).backup_log().records() <= (f == 0 ? 0u : 2u));
  }
}

}  // namespace farm
