// Durability (RuntimeOptions.data_dir): a replicated cluster of three in-process Runtimes, each
// with a data directory of its own, stopped as a whole (each node quiesces and seals its
// directory, as a node binary does at the cluster's end) and started again on the same
// directories, serves every committed object again at the same address, takes new transactions
// and allocations in the restored regions, and makes their backups again. A restart that would
// lose data is refused with a clear error: a node whose directory is missing, and directories
// whose nodes did not leave cleanly when f = 0.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"
#include "tests/runtime_cluster.h"
#include "txn/engine.h"
#include "txn/object.h"

namespace farm {
namespace {

Node& NodeOf(Runtime& rt) { return *RuntimeAccess::Of(rt).node; }

std::string Config() {
  std::string text =
      absl::StrCat("provider: \"", testing::AnyProvider(),
                   "\" region_size: 1048576 region_count: 2 lock_memory: false f: 1");
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  for (int i = 0; i < 3; ++i) {
    absl::StrAppend(&text, " node { id: ", i, " host: \"", testing::TestHost(),
                    "\" control_port: ", (*ports)[i], " failure_domain: \"process ", i, "\" }");
  }
  return text;
}

// Starts node i of `config` on <root>/node-<i>, all three at once; the results in id order.
std::vector<absl::StatusOr<std::unique_ptr<Runtime>>> Start(const std::string& config,
                                                            const std::string& root) {
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Runtime>>>> starting;
  for (int i = 0; i < 3; ++i) {
    RuntimeOptions o;
    o.config_text = config;
    o.node_id = i;
    o.data_dir = absl::StrCat(root, "/node-", i);
    starting.push_back(std::async(std::launch::async, [o] { return Runtime::Start(o); }));
  }
  std::vector<absl::StatusOr<std::unique_ptr<Runtime>>> out;
  for (auto& f : starting) out.push_back(f.get());
  return out;
}

std::vector<std::unique_ptr<Runtime>> StartOk(const std::string& config, const std::string& root) {
  std::vector<std::unique_ptr<Runtime>> rts;
  for (auto& rt : Start(config, root)) {
    INFO(rt.status().ToString());
    REQUIRE(rt.ok());
    rts.push_back(std::move(*rt));
  }
  for (auto& rt : rts) rt->Serve();
  return rts;
}

// The cluster's end as the node binaries do it: every node quiesces and seals its directory
// (concurrently), says the cluster ends, and leaves; the CM's node (0) last.
void StopAsAWhole(std::vector<std::unique_ptr<Runtime>>& rts) {
  std::vector<std::future<absl::Status>> sealing;
  for (auto& rt : rts) {
    Runtime::Impl* impl = &RuntimeAccess::Of(*rt);
    sealing.push_back(
        std::async(std::launch::async, [impl] { return impl->KeepForRestart(absl::Seconds(60)); }));
  }
  for (auto& s : sealing) {
    const absl::Status status = s.get();
    INFO(status.ToString());
    REQUIRE(status.ok());
  }
  for (auto& rt : rts) NodeOf(*rt).MarkClusterEnding();
  for (size_t i = rts.size(); i-- > 0;) rts[i].reset();
}

std::unique_ptr<Worker> NewWorker(Runtime& rt) {
  absl::StatusOr<std::unique_ptr<Worker>> w = rt.NewWorker();
  INFO(w.status().ToString());
  REQUIRE(w.ok());
  return std::move(*w);
}

using testing::FullyReplicated;
using testing::ReadWhenReadable;

}  // namespace

TEST_CASE("a cluster stopped as a whole serves every committed object again after a restart",
          "[durability]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/durability_test-", getpid());
  std::filesystem::remove_all(root);
  const std::string config = Config();

  // First run: accounts on every node, transfers among them from every node, an object array.
  constexpr int kAccounts = 30;
  constexpr int64_t kInitial = 100;
  std::vector<GlobalAddress> accounts;
  GlobalAddress array;
  const std::string mark(100, 'm');
  int64_t committed = 0;
  {
    std::vector<std::unique_ptr<Runtime>> rts = StartOk(config, root);
    std::unique_ptr<Worker> w = NewWorker(*rts[0]);
    REQUIRE(w->Run([&](Txn& t) -> absl::Status {
               accounts.clear();
               for (int i = 0; i < kAccounts; ++i) {
                 absl::StatusOr<GlobalAddress> a =
                     t.Alloc(sizeof(int64_t), AllocHint::OnNode(static_cast<uint32_t>(i % 3)));
                 if (!a.ok()) return a.status();
                 accounts.push_back(*a);
                 if (absl::Status s = t.Put(*a, kInitial); !s.ok()) return s;
               }
               return absl::OkStatus();
             }).ok());
    absl::StatusOr<GlobalAddress> arr = RuntimeAccess::Of(*rts[2]).txn->CreateObjectArray(100, 8);
    REQUIRE(arr.ok());
    array = GlobalAddress{arr->region, arr->offset + 3 * 128};
    REQUIRE(w->Run([&](Txn& t) { return t.Write(array, mark.data(), mark.size()); }).ok());
    std::mt19937 rng(7);
    for (int i = 0; i < 200; ++i) {
      const int from = static_cast<int>(rng() % kAccounts);
      const int to = (from + 1 + static_cast<int>(rng() % (kAccounts - 1))) % kAccounts;
      const int64_t amount = 1 + static_cast<int64_t>(rng() % 5);
      absl::Status s = w->Run([&](Txn& t) -> absl::Status {
        absl::StatusOr<int64_t> a = t.Get<int64_t>(accounts[from]);
        absl::StatusOr<int64_t> b = t.Get<int64_t>(accounts[to]);
        if (!a.ok()) return a.status();
        if (!b.ok()) return b.status();
        if (absl::Status p = t.Put(accounts[from], *a - amount); !p.ok()) return p;
        return t.Put(accounts[to], *b + amount);
      });
      REQUIRE(s.ok());
      ++committed;
    }
    w.reset();
    StopAsAWhole(rts);
  }
  // What the stopped cluster held, account by account (every transfer committed).
  std::vector<int64_t> expected(kAccounts, kInitial);
  {
    std::mt19937 rng(7);
    for (int i = 0; i < committed; ++i) {
      const int from = static_cast<int>(rng() % kAccounts);
      const int to = (from + 1 + static_cast<int>(rng() % (kAccounts - 1))) % kAccounts;
      const int64_t amount = 1 + static_cast<int64_t>(rng() % 5);
      expected[from] -= amount;
      expected[to] += amount;
    }
  }

  SECTION("a node restarted without its directory: the cluster does not form") {
    const std::string saved = root + "/node-2.saved";
    std::filesystem::rename(root + "/node-2", saved);
    for (auto& rt : Start(config, root)) {
      REQUIRE_FALSE(rt.ok());
      CHECK_THAT(std::string(rt.status().message()),
                 Catch::Contains("restarts without it: forming the cluster would lose its data"));
    }
    // Nothing of the others' directories was used up: with node 2's back, the restart works.
    std::filesystem::remove_all(root + "/node-2");
    std::filesystem::rename(saved, root + "/node-2");
  }

  // Second run, on the same directories.
  {
    std::vector<std::unique_ptr<Runtime>> rts = StartOk(config, root);
    std::unique_ptr<Worker> w = NewWorker(*rts[1]);
    for (int i = 0; i < kAccounts; ++i) {
      INFO("account " << i << " at " << accounts[i].ToString());
      CHECK(ReadWhenReadable(*w, accounts[i]) == expected[i]);
    }
    std::string got(mark.size(), '\0');
    REQUIRE(w->LockFreeRead(array, got.data(), got.size()).ok());
    CHECK(got == mark);
    // New transactions and allocations in the restored regions, next to the restored objects.
    GlobalAddress fresh;
    REQUIRE(w->Run([&](Txn& t) -> absl::Status {
               absl::StatusOr<GlobalAddress> a =
                   t.Alloc(sizeof(int64_t), AllocHint::Near(accounts[0]));
               if (!a.ok()) return a.status();
               fresh = *a;
               if (absl::Status s = t.Put(fresh, int64_t{77}); !s.ok()) return s;
               absl::StatusOr<int64_t> b = t.Get<int64_t>(accounts[1]);
               if (!b.ok()) return b.status();
               return t.Put(accounts[1], *b + 1);
             }).ok());
    CHECK(std::find(accounts.begin(), accounts.end(), fresh) == accounts.end());
    CHECK(ReadWhenReadable(*w, fresh) == 77);
    CHECK(ReadWhenReadable(*w, accounts[1]) == expected[1] + 1);
    for (int i = 0; i < kAccounts; ++i) {
      if (i != 1) CHECK(ReadWhenReadable(*w, accounts[i]) == expected[i]);
    }
    // The restored regions get their backups again: copied from their primaries.
    const absl::Time until = absl::Now() + absl::Seconds(60);
    while (!FullyReplicated(NodeOf(*rts[0]).membership())) {
      REQUIRE(absl::Now() < until);
      absl::SleepFor(absl::Milliseconds(10));
    }
    // Once the backups applied and dropped their COMMIT-BACKUP records (lazily, on truncation).
    for (bool kept = true; kept;) {
      kept = false;
      for (auto& rt : rts) kept = kept || RuntimeAccess::Of(*rt).txn->backup_log().records() > 0;
      REQUIRE(absl::Now() < until);
      absl::SleepFor(absl::Milliseconds(10));
    }
    for (const GlobalAddress& a : accounts) {
      for (auto& rt : rts) {
        std::shared_ptr<Region> copy = NodeOf(*rt).BackupCopy(a.region);
        absl::StatusOr<RemoteTarget> t = NodeOf(*rt).Resolve(a, 8);
        if (copy == nullptr || !t.ok() || t->local != nullptr) continue;
        // A backup's copy of a restored account (its payload, after the object's header).
        int64_t v = 0;
        std::memcpy(&v, copy->data() + a.offset + txn::kObjectHeaderSize, sizeof(v));
        CHECK(v == ReadWhenReadable(*w, a));
      }
    }
    expected[1] += 1;
    w.reset();
    // Stopped without sealing (as if killed, or stopped alone): with f = 0 the next start
    // refuses the directories instead of serving regions that may miss committed writes (with
    // f >= 1 the backups' copies and journals recover them: durability_restart_test).
    for (size_t i = rts.size(); i-- > 0;) rts[i].reset();
  }
  const std::string unreplicated = absl::StrReplaceAll(Config(), {{"f: 1", "f: 0"}});
  for (auto& rt : Start(unreplicated, root)) {
    REQUIRE_FALSE(rt.ok());
    CHECK_THAT(std::string(rt.status().message()),
               Catch::Contains("a crash of the cluster is survived with f >= 1"));
  }
  std::filesystem::remove_all(root);
}

}  // namespace farm
