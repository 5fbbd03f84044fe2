// In-process clusters of farm::Runtime for the tests of the public API (runtime_test, txn_test):
// every node on the provider under test (FARM_TEST_PROVIDERS), started concurrently.
#ifndef FARM_TESTS_RUNTIME_CLUSTER_H_
#define FARM_TESTS_RUNTIME_CLUSTER_H_

#include <catch2/catch.hpp>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "farm/farm.h"
#include "platform/control.pb.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace testing {

// A configuration of n nodes on free ports, `region_count` regions of `region_size` bytes each.
inline std::string RuntimeClusterConfig(int n, uint64_t region_size, int region_count = 2) {
  std::string text = absl::StrCat("provider: \"", AnyProvider(), "\" region_size: ", region_size,
                                  " region_count: ", region_count, " lock_memory: false");
  absl::StatusOr<std::vector<uint16_t>> ports = FreePorts(n);
  REQUIRE(ports.ok());
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, " node { id: ", i, " host: \"", TestHost(),
                    "\" control_port: ", (*ports)[i], " }");
  }
  return text;
}

// Starts n runtimes concurrently (a cluster forms only once all have joined) with `base`'s
// options and `config` (RuntimeClusterConfig(n, 1 MiB) if empty).
inline std::vector<std::unique_ptr<Runtime>> StartRuntimes(int n, RuntimeOptions base = {},
                                                           std::string config = "") {
  base.config_text = config.empty() ? RuntimeClusterConfig(n, 1 << 20) : config;
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Runtime>>>> starting;
  for (int i = 0; i < n; ++i) {
    RuntimeOptions o = base;
    o.node_id = i;
    starting.push_back(std::async(std::launch::async, [o] { return Runtime::Start(o); }));
  }
  std::vector<std::unique_ptr<Runtime>> out;
  for (auto& f : starting) {
    absl::StatusOr<std::unique_ptr<Runtime>> rt = f.get();
    INFO(rt.status().ToString());
    REQUIRE(rt.ok());
    out.push_back(std::move(*rt));
  }
  return out;
}

// Region `index` of `node` in `rt`'s membership; fails the test (instead of indexing past the
// end) when the node is not a member, e.g. when it was evicted.
inline RegionRef RegionAt(const Runtime& rt, uint32_t node, size_t index) {
  const std::vector<RegionRef> regions = rt.Regions(node);
  INFO("node " << node << " has " << regions.size() << " region(s) in node " << rt.node_id()
               << "'s membership");
  REQUIRE(index < regions.size());
  return regions[index];
}

// `n` int64 accounts of `initial` each, spread over the members (AllocHint::Anywhere), created
// in one transaction run by `w`.
inline std::vector<GlobalAddress> CreateAccounts(Worker& w, int n, int64_t initial) {
  std::vector<GlobalAddress> accounts;
  absl::Status s = w.Run([&](Txn& t) -> absl::Status {
    accounts.clear();
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(int64_t), AllocHint::Anywhere(i));
      if (!a.ok()) return a.status();
      if (absl::Status s = t.Put(*a, initial); !s.ok()) return s;
      accounts.push_back(*a);
    }
    return absl::OkStatus();
  });
  INFO(s.ToString());
  REQUIRE(s.ok());
  return accounts;
}

// `count` transfers by `w` between random accounts (a generator seeded with `seed`), each a
// transaction that Worker::Run retries on conflicts. Calls `on_error` with each failure. Safe to
// run on several threads (no Catch2 assertions).
inline void RandomTransfers(Worker& w, const std::vector<GlobalAddress>& accounts, int count,
                            uint32_t seed,
                            const std::function<void(const absl::Status&)>& on_error) {
  std::mt19937 rng(seed);
  const int n = static_cast<int>(accounts.size());
  for (int i = 0; i < count; ++i) {
    const int from = rng() % n;
    const int to = (from + 1 + rng() % (n - 1)) % n;
    const int64_t amount = rng() % 50;
    absl::Status s = w.Run([&](Txn& t) -> absl::Status {
      absl::StatusOr<int64_t> a = t.Get<int64_t>(accounts[from]);
      absl::StatusOr<int64_t> b = t.Get<int64_t>(accounts[to]);
      if (!a.ok()) return a.status();
      if (!b.ok()) return b.status();
      if (absl::Status s = t.Put(accounts[from], *a - amount); !s.ok()) return s;
      return t.Put(accounts[to], *b + amount);
    });
    if (!s.ok()) on_error(s);
  }
}

// The int64_t at `a` read by `w`, once it can be read (up to 60 s: it may be locked by a
// transaction being recovered, or its region recovering).
inline int64_t ReadWhenReadable(Worker& w, GlobalAddress a) {
  const absl::Time until = absl::Now() + absl::Seconds(60);
  for (;;) {
    absl::StatusOr<int64_t> v = w.LockFreeGet<int64_t>(a);
    if (v.ok()) return *v;
    INFO(a.ToString() << ": " << v.status().ToString());
    REQUIRE(absl::Now() < until);
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Whether every data region of `m` serves with one backup (f = 1), none of them still copying.
inline bool FullyReplicated(const control::Membership& m) {
  for (const control::RegionInfo& r : m.regions()) {
    if (!r.purpose().empty()) continue;
    if (r.recovering() || r.backup_node_size() != 1 || r.syncing_backup_size() != 0) return false;
  }
  return true;
}

}  // namespace testing
}  // namespace farm

#endif  // FARM_TESTS_RUNTIME_CLUSTER_H_
