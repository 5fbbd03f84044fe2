// The configuration manager's leases, with the built-in CM and its clients in one process (no
// fabric): a node's lease ends before the CM's view of it, whatever else the CM sends it.
#include "platform/configuration_manager.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "platform/config.h"
#include "platform/configuration_store.h"
#include "platform/sync_point.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kLeaseMs = 1000;

// Nodes 0 (the CM's) and 1 form the cluster; node 2 is a late slot.
config::ClusterConfig Config(uint32_t lease_ms = kLeaseMs) {
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  std::string text = "provider: \"shm\" region_size: 1048576 region_count: 1 lock_memory: false" +
                     std::string(" lease_ms: ") + std::to_string(lease_ms);
  for (int i = 0; i < 3; ++i) {
    text += " node { id: " + std::to_string(i) + " host: \"" + testing::TestHost() +
            "\" control_port: " + std::to_string((*ports)[i]) + (i == 2 ? " late: true" : "") +
            " }";
  }
  absl::StatusOr<config::ClusterConfig> c = ParseClusterConfig(text);
  REQUIRE(c.ok());
  return *c;
}

control::JoinRequest Request(const config::ClusterConfig& c, uint32_t id) {
  control::JoinRequest r;
  r.set_requested_id(static_cast<int32_t>(id));
  r.mutable_node()->set_node_id(id);
  r.mutable_node()->set_host(testing::TestHost());
  r.mutable_node()->set_provider(c.provider());
  r.mutable_node()->set_fabric_address("node" + std::to_string(id));
  control::RegionInfo* region = r.add_regions();
  region->set_size(c.region_size());
  r.set_config_fingerprint(Fingerprint(c));
  return r;
}

// A client that acknowledges every membership it gets, as a node does once it applied it (a
// test that holds acknowledgements back sets a callback of its own). A node that leaves waits
// for the others' acknowledgements.
std::unique_ptr<ConfigurationManager> Client(const config::ClusterConfig& c) {
  const config::NodeConfig& cm = c.node(0);
  std::unique_ptr<ConfigurationManager> n = NewTcpConfigurationManager(
      cm.host(), static_cast<uint16_t>(cm.control_port()), absl::Milliseconds(c.lease_ms()));
  ConfigurationManager* self = n.get();
  n->OnMembershipChange([self](const control::Membership& m) { self->AckMembership(m.epoch()); });
  return n;
}

bool Lists(const control::Membership& m, uint32_t id) {
  for (const control::NodeInfo& n : m.nodes()) {
    if (n.node_id() == id) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a node's lease ends before the CM's view of it, whatever else the CM sends it", "[cm]") {
  const config::ClusterConfig c = Config();
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n0 = Client(c), n1 = Client(c), n2 = Client(c);
  std::mutex mu;
  Clock::time_point gone;  // when node 0 got the membership without node 1
  n0->OnMembershipChange([&](const control::Membership& m) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!Lists(m, 1) && gone == Clock::time_point()) gone = Clock::now();
    }
    n0->AckMembership(m.epoch());
  });
  std::promise<std::string> evicted;
  n1->OnEviction([&](const std::string& why) { evicted.set_value(why); });
  auto joining =
      std::async(std::launch::async, [&] { return n1->Join(Request(c, 1), absl::Seconds(30)); });
  REQUIRE(n0->Join(Request(c, 0), absl::Seconds(30)).ok());
  REQUIRE(joining.get().ok());

  // With its heartbeats acknowledged, node 1 keeps its lease for longer than a lease.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs / 2));
  CHECK(n1->lease_expiry() > Clock::now());

  // Node 1's heartbeats are lost from now on, but the CM keeps talking to it: node 2 joins half a
  // lease later, and node 1 gets that membership. It must not renew node 1's lease: only the
  // acknowledgement of a heartbeat does, from when the heartbeat was sent.
  std::atomic<bool> drop{true};
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("TcpConfigurationManager::Heartbeat:Send", [&](void* arg) {
    auto* send = static_cast<std::pair<uint32_t, bool>*>(arg);
    if (send->first == 1 && drop.load()) send->second = false;
  });
  sp->EnableProcessing();
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs / 2));
  REQUIRE(n2->Join(Request(c, 2), absl::Seconds(30)).ok());

  std::future<std::string> why = evicted.get_future();
  REQUIRE(why.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  INFO(why.get());
  Clock::time_point removed;
  for (int i = 0; i < 3000 && removed == Clock::time_point(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(mu);
    removed = gone;
  }
  sp->DisableProcessing();
  sp->ClearAllCallBacks();
  REQUIRE(removed != Clock::time_point());
  // The CM removed node 1 a lease after it last heard from it; node 1's own lease ended earlier.
  CHECK(n1->lease_expiry() < removed);
  n2->Leave();
  n1->Leave();
  n0->Leave();
}

TEST_CASE("a node that asked to join long before the cluster formed holds a lease once it forms",
          "[cm]") {
  // Nodes started by hand, one after another: node 0 asks to join two leases before node 1 does.
  // Its lease runs from its first heartbeat after the cluster formed (the CM's view of every
  // lease starts at the formation), not from its request, which would have ended it at once.
  const config::ClusterConfig c = Config();
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n0 = Client(c), n1 = Client(c);
  std::atomic<bool> evicted{false};
  n0->OnEviction([&](const std::string&) { evicted.store(true); });
  auto joining =
      std::async(std::launch::async, [&] { return n0->Join(Request(c, 0), absl::Seconds(60)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * kLeaseMs));
  const Clock::time_point forming = Clock::now();
  REQUIRE(n1->Join(Request(c, 1), absl::Seconds(30)).ok());
  absl::StatusOr<control::Membership> m = joining.get();
  REQUIRE(m.ok());
  CHECK(Lists(*m, 0));
  CHECK(Lists(*m, 1));
  CHECK(n0->lease_expiry() > forming);
  CHECK_FALSE(evicted.load());
  n1->Leave();
  n0->Leave();
}

TEST_CASE("a node that leaves goes once every other member applied a membership without it",
          "[cm]") {
  // Node 1 holds its acknowledgements back: node 2's Leave waits (the CM's release would let it
  // close its fabric while node 1 may still post to it), and returns, released, once node 1
  // acknowledges. The lease is long: the wait gives up after a lease.
  const config::ClusterConfig c = Config(10000);
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n0 = Client(c), n1 = Client(c), n2 = Client(c);
  std::mutex mu;
  uint64_t without_2 = 0;  // the epoch of the first membership node 1 got without node 2
  n1->OnMembershipChange([&](const control::Membership& m) {
    std::lock_guard<std::mutex> l(mu);
    if (!Lists(m, 2) && without_2 == 0) without_2 = m.epoch();
  });
  auto joining =
      std::async(std::launch::async, [&] { return n1->Join(Request(c, 1), absl::Seconds(30)); });
  REQUIRE(n0->Join(Request(c, 0), absl::Seconds(30)).ok());
  REQUIRE(joining.get().ok());
  absl::StatusOr<control::Membership> m2 = n2->Join(Request(c, 2), absl::Seconds(30));
  REQUIRE(m2.ok());
  n2->AckMembership(m2->epoch());

  std::atomic<int> released{-1};
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("TcpConfigurationManager::Leave:Released",
                  [&](void* arg) { released.store(*static_cast<bool*>(arg) ? 1 : 0); });
  sp->EnableProcessing();
  auto leaving = std::async(std::launch::async, [&] { n2->Leave(); });
  uint64_t epoch = 0;
  for (int i = 0; i < 3000 && epoch == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(mu);
    epoch = without_2;
  }
  REQUIRE(epoch != 0);
  // Node 1 has not applied it: node 2 is still waiting.
  CHECK(leaving.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  CHECK(released.load() == -1);
  n1->AckMembership(epoch);
  REQUIRE(leaving.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  sp->DisableProcessing();
  sp->ClearAllCallBacks();
  CHECK(released.load() == 1);
  n1->Leave();
  n0->Leave();
}

}  // namespace farm

namespace farm {
namespace {

// Nodes 0 (the CM's), 1 and 2 form the cluster with f = 1, each in its own failure domain.
config::ClusterConfig ReplicatedConfig() {
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  std::string text = "provider: \"shm\" region_size: 1048576 region_count: 1 lock_memory: false" +
                     std::string(" f: 1 lease_ms: ") + std::to_string(kLeaseMs);
  for (int i = 0; i < 3; ++i) {
    text += " node { id: " + std::to_string(i) + " host: \"" + testing::TestHost() +
            "\" control_port: " + std::to_string((*ports)[i]) + " failure_domain: \"d" +
            std::to_string(i) + "\" }";
  }
  absl::StatusOr<config::ClusterConfig> c = ParseClusterConfig(text);
  REQUIRE(c.ok());
  return *c;
}

const control::RegionInfo* FindRegion(const control::Membership& m, uint32_t region) {
  for (const control::RegionInfo& r : m.regions()) {
    if (r.region_id() == region) return &r;
  }
  return nullptr;
}

// Nodes 0, 1 and 2 join at once (each waits for the others); each acknowledges the membership it
// joined with. Returns node 2's (the last one).
control::Membership JoinAll(const config::ClusterConfig& c,
                            std::unique_ptr<ConfigurationManager> (&n)[3]) {
  std::vector<std::future<absl::StatusOr<control::Membership>>> joins;
  for (uint32_t i = 0; i < 3; ++i) {
    joins.push_back(std::async(std::launch::async,
                               [&, i] { return n[i]->Join(Request(c, i), absl::Seconds(30)); }));
  }
  control::Membership last;
  for (uint32_t i = 0; i < 3; ++i) {
    absl::StatusOr<control::Membership> m = joins[i].get();
    REQUIRE(m.ok());
    n[i]->AckMembership(m->epoch());
    last = *m;
  }
  return last;
}

}  // namespace

TEST_CASE(
    "a promoted region serves only once every member applied the change and the failed "
    "primary's lease ended, then gets a new backup",
    "[cm]") {
  const config::ClusterConfig c = ReplicatedConfig();
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n[3] = {Client(c), Client(c), Client(c)};
  // What each node received, and whether it acknowledges what it receives.
  struct Seen {
    std::mutex mu;
    std::vector<std::pair<Clock::time_point, control::Membership>> memberships;
    std::atomic<bool> ack{true};
  };
  Seen seen[3];
  for (int i = 0; i < 3; ++i) {
    n[i]->OnMembershipChange([&, i](const control::Membership& m) {
      {
        std::lock_guard<std::mutex> l(seen[i].mu);
        seen[i].memberships.emplace_back(Clock::now(), m);
      }
      if (seen[i].ack.load()) n[i]->AckMembership(m.epoch());
    });
  }
  const control::Membership first = JoinAll(c, n);
  // Node 1's region and its backup, b; h is the third node.
  const control::RegionInfo* region = nullptr;
  for (const control::RegionInfo& r : first.regions()) {
    if (r.node_id() == 1 && r.purpose().empty()) region = &r;
  }
  REQUIRE(region != nullptr);
  REQUIRE(region->backup_node_size() == 1);
  const uint32_t id = region->region_id();
  const uint32_t b = region->backup_node(0);
  const uint32_t h = 2 - b;
  INFO("region " << id << " of node 1, backed up by node " << b << "; node " << h << " holds");

  SECTION("it waits for every member's acknowledgement") { seen[h].ack = false; }
  SECTION("it waits for the failed primary's lease") {}

  // The backup reports its copy, then reports node 1 (the CM reads one node's messages in order).
  control::BackupCopy copy;
  copy.set_region_id(id);
  copy.set_remote_base(4096);
  copy.set_rkey(7);
  n[b]->ReportBackupCopy(copy);
  n[b]->ReportSuspect(1, "the test reports it");

  // Finds the membership at node `at` that promoted the region (recovering) and the one that
  // activated it; waits up to 30 s for the latter unless `activated_too` is false.
  auto find = [&](uint32_t at, control::Membership* promoted,
                  std::optional<std::pair<Clock::time_point, control::Membership>>* activated) {
    std::lock_guard<std::mutex> l(seen[at].mu);
    for (const auto& [when, m] : seen[at].memberships) {
      const control::RegionInfo* r = FindRegion(m, id);
      if (r == nullptr || !r->promoted()) continue;
      if (r->recovering() && promoted->epoch() == 0) *promoted = m;
      if (!r->recovering() && !activated->has_value()) *activated = std::make_pair(when, m);
    }
  };
  control::Membership promoted;
  std::optional<std::pair<Clock::time_point, control::Membership>> activated;
  for (int i = 0; i < 3000 && promoted.epoch() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    find(b, &promoted, &activated);
  }
  REQUIRE(promoted.epoch() != 0);
  const control::RegionInfo* p = FindRegion(promoted, id);
  CHECK(p->node_id() == b);
  CHECK(p->remote_base() == 4096);
  CHECK(p->rkey() == 7);

  if (!seen[h].ack.load()) {
    // Two leases after node 1's lease ended, nothing was activated: node h has not said that it
    // applied the membership (it may still READ node 1's copy with the old map).
    const Clock::time_point until = n[1]->lease_expiry() + std::chrono::milliseconds(2 * kLeaseMs);
    while (Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    find(b, &promoted, &activated);
    CHECK(!activated.has_value());
    n[h]->AckMembership(promoted.epoch());
  }
  for (int i = 0; i < 3000 && !activated.has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    find(b, &promoted, &activated);
  }
  REQUIRE(activated.has_value());
  CHECK(activated->second.epoch() > promoted.epoch());
  CHECK(FindRegion(activated->second, id)->node_id() == b);
  // Node 1 (evicted, so no longer renewing) stopped acting before its region served elsewhere.
  CHECK(n[1]->lease_expiry() < activated->first);

  // Re-replication: the promoted region's only backup became its primary. The CM names a new
  // backup among the members left, h (never b itself, nor node 1), as syncing, in a membership
  // that fences older requests; once h reports its copy complete, a later membership lists h
  // as a full backup.
  auto backups_at_h = [&](bool want_synced) -> std::optional<control::Membership> {
    std::lock_guard<std::mutex> l(seen[h].mu);
    for (const auto& [when, m] : seen[h].memberships) {
      const control::RegionInfo* r = FindRegion(m, id);
      if (r == nullptr || r->node_id() != b || r->recovering()) continue;
      const bool listed = r->backup_node_size() == 1 && r->backup_node(0) == h;
      const bool syncing = r->syncing_backup_size() == 1 && r->syncing_backup(0) == h;
      if (listed && syncing != want_synced) return m;
    }
    return std::nullopt;
  };
  std::optional<control::Membership> named;
  for (int i = 0; i < 3000 && !named.has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    named = backups_at_h(false);
  }
  REQUIRE(named.has_value());
  CHECK(named->fence_epoch() == named->epoch());
  n[h]->ReportBackupSynced(id);
  std::optional<control::Membership> synced;
  for (int i = 0; i < 3000 && !synced.has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    synced = backups_at_h(true);
  }
  REQUIRE(synced.has_value());
  CHECK(synced->epoch() > named->epoch());
  for (int i : {2, 1, 0}) n[i]->Leave();
}

// A primary hand-off as the CM runs it: balancing (told at its sync point which region to move,
// since the policy itself is placement_test's) marks node 0's region handing_off to its backup;
// node 0 says it drained it; the CM moves it there (promoted, recovering, node 0's own copy
// listed as a backup), activates it once every member applied that, and moves nothing more. A
// hand-off whose target leaves is called off instead.
TEST_CASE("a region marked for hand-off moves once drained, and stays if its target leaves",
          "[cm][balance][sync_point]") {
  const config::ClusterConfig c = ReplicatedConfig();
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n[3] = {Client(c), Client(c), Client(c)};
  std::mutex mu;
  std::vector<control::Membership> seen[3];
  std::pair<uint32_t, uint32_t> wanted{0, 0};  // guarded by mu: the hand-off balancing picks
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("CmServer::Rebalance", [&](void* arg) {
    std::lock_guard<std::mutex> l(mu);
    // Offered on every quiet tick until the test sees it marked: a tick that runs before the
    // CM has read the backup copies' reports cannot mark it yet, and must not use it up.
    *static_cast<std::pair<uint32_t, uint32_t>*>(arg) = wanted;
  });
  sp->EnableProcessing();
  struct Cleanup {
    SyncPoint* sp;
    ~Cleanup() {
      sp->DisableProcessing();
      sp->ClearAllCallBacks();
    }
  } cleanup{sp};
  for (int i = 0; i < 3; ++i) {
    n[i]->OnMembershipChange([&, i](const control::Membership& m) {
      {
        std::lock_guard<std::mutex> l(mu);
        seen[i].push_back(m);
      }
      n[i]->AckMembership(m.epoch());
    });
  }
  const control::Membership first = JoinAll(c, n);
  REQUIRE(first.regions_size() == 3);
  // Every backup reports its copy (as Node does when a membership names it a backup).
  auto copy_of = [](uint32_t region, uint32_t node) {
    control::BackupCopy copy;
    copy.set_region_id(region);
    copy.set_remote_base(0x100000 * region + 0x1000 * node);
    copy.set_rkey(100 * region + node);
    return copy;
  };
  for (const control::RegionInfo& r : first.regions()) {
    for (uint32_t b : r.backup_node()) n[b]->ReportBackupCopy(copy_of(r.region_id(), b));
  }
  // The first membership (at node `at`) for which `done` holds, waiting up to 30 s.
  auto wait_for = [&](int at, const std::function<bool(const control::Membership&)>& done)
      -> std::optional<control::Membership> {
    for (int k = 0; k < 3000; ++k) {
      {
        std::lock_guard<std::mutex> l(mu);
        for (const control::Membership& m : seen[at]) {
          if (done(m)) return m;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  };
  for (const control::RegionInfo& r : first.regions()) {
    if (r.node_id() != 0) continue;
    REQUIRE(r.backup_node_size() == 1);
    std::lock_guard<std::mutex> l(mu);
    wanted = {r.region_id(), r.backup_node(0)};
  }
  std::optional<control::Membership> marked = wait_for(0, [](const control::Membership& m) {
    for (const control::RegionInfo& r : m.regions()) {
      if (r.handing_off()) return true;
    }
    return false;
  });
  {
    std::lock_guard<std::mutex> l(mu);
    wanted = {0, 0};
  }
  REQUIRE(marked.has_value());
  const control::RegionInfo* r = nullptr;
  for (const control::RegionInfo& x : marked->regions()) {
    if (x.handing_off()) r = &x;
  }
  const uint32_t region = r->region_id();
  const uint32_t to = r->handing_off_to();
  const control::RegionInfo original = *r;
  INFO("region " << region << " of node " << r->node_id() << " handed to node " << to);
  CHECK(r->node_id() == 0);
  REQUIRE(r->backup_node_size() == 1);
  CHECK(r->backup_node(0) == to);

  SECTION("drained, it moves") {
    n[0]->ReportHandOffReady(region);
    std::optional<control::Membership> moved = wait_for(0, [&](const control::Membership& m) {
      const control::RegionInfo* x = FindRegion(m, region);
      return x != nullptr && x->node_id() == to;
    });
    REQUIRE(moved.has_value());
    const control::RegionInfo* x = FindRegion(*moved, region);
    CHECK(x->promoted());
    CHECK(x->recovering());
    CHECK_FALSE(x->handing_off());
    CHECK(x->remote_base() == copy_of(region, to).remote_base());
    CHECK(x->rkey() == copy_of(region, to).rkey());
    REQUIRE(x->backup_node_size() == 1);
    CHECK(x->backup_node(0) == 0);  // node 0's own memory is the copy now
    CHECK(x->syncing_backup_size() == 0);
    std::optional<control::Membership> active = wait_for(0, [&](const control::Membership& m) {
      const control::RegionInfo* y = FindRegion(m, region);
      return y != nullptr && y->node_id() == to && !y->recovering();
    });
    REQUIRE(active.has_value());
    // Nothing more moves (balancing picks nothing now).
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::lock_guard<std::mutex> l(mu);
    for (const control::RegionInfo& y : seen[0].back().regions()) CHECK_FALSE(y.handing_off());
    // A late report changes nothing.
    n[0]->ReportHandOffReady(region);
  }
  SECTION("its target leaves: it stays") {
    n[to]->Leave();
    std::optional<control::Membership> left =
        wait_for(0, [&](const control::Membership& m) { return !Lists(m, to); });
    REQUIRE(left.has_value());
    const control::RegionInfo* x = FindRegion(*left, region);
    REQUIRE(x != nullptr);
    CHECK(x->node_id() == 0);
    CHECK_FALSE(x->promoted());
    CHECK(x->remote_base() == original.remote_base());
    CHECK((!x->handing_off() || x->handing_off_to() != to));
  }
  for (int i : {2, 1, 0}) n[i]->Leave();
}

}  // namespace farm

namespace farm {
namespace {

// A CM with a configuration store (in memory, with ZooKeeper's semantics) and nodes 0 and 1 of
// The membership recorded in the store `view` reads.
absl::StatusOr<control::Membership> StoredMembership(ConfigurationStore& view) {
  absl::StatusOr<VersionedRecord> r = view.Read();
  if (!r.ok()) return r.status();
  control::Membership m;
  if (!m.ParseFromString(r->data)) return absl::DataLossError("not a membership");
  return m;
}

// Config() joined; `view` reads the same record as another ZooKeeper client would.
struct StoreCluster {
  explicit StoreCluster(std::function<absl::Status(absl::string_view)> fail_before = nullptr) {
    InMemoryStoreOptions cm_store;
    cm_store.record = record;
    cm_store.fail_before = std::move(fail_before);
    cm_store.name = "cm";
    absl::StatusOr<std::unique_ptr<CmServer>> s =
        CmServer::Start(c, NewInMemoryConfigurationStore(cm_store));
    REQUIRE(s.ok());
    server = std::move(*s);
    InMemoryStoreOptions other;
    other.record = record;
    other.name = "view";
    view = NewInMemoryConfigurationStore(other);
    for (int i = 0; i < 2; ++i) {
      n[i] = Client(c);
      n[i]->OnMembershipChange([this, i](const control::Membership& m) {
        {
          std::lock_guard<std::mutex> l(mu);
          // Already in the store when a node gets it: the record holds this epoch or a later one.
          absl::StatusOr<control::Membership> stored = Stored();
          if (!stored.ok() || stored->epoch() < m.epoch()) ++unrecorded;
          seen[i].push_back(m);
        }
        n[i]->AckMembership(m.epoch());
      });
      n[i]->OnEviction([this, i](const std::string& why) {
        std::lock_guard<std::mutex> l(mu);
        evicted[i] = why;
      });
    }
    auto joining = std::async(std::launch::async,
                              [&] { return n[1]->Join(Request(c, 1), absl::Seconds(30)); });
    absl::StatusOr<control::Membership> first = n[0]->Join(Request(c, 0), absl::Seconds(30));
    REQUIRE(first.ok());
    REQUIRE(joining.get().ok());
    absl::StatusOr<control::Membership> stored = Stored();
    REQUIRE(stored.ok());
    CHECK(stored->epoch() == first->epoch());
    CHECK(stored->nodes_size() == 2);
  }
  ~StoreCluster() {
    for (auto& node : n) node->Leave();
  }

  absl::StatusOr<control::Membership> Stored() { return StoredMembership(*view); }
  // The last membership node `i` got after its join, if any.
  std::optional<control::Membership> Last(int i) {
    std::lock_guard<std::mutex> l(mu);
    if (seen[i].empty()) return std::nullopt;
    return seen[i].back();
  }
  // Waits up to 10 s for node `i` to get a membership that does not list node 1.
  std::optional<control::Membership> WaitWithout1(int i) {
    for (int k = 0; k < 1000; ++k) {
      std::optional<control::Membership> m = Last(i);
      if (m.has_value() && !Lists(*m, 1)) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  const config::ClusterConfig c = Config();
  std::shared_ptr<InMemoryConfigurationRecord> record = NewInMemoryConfigurationRecord();
  std::unique_ptr<CmServer> server;
  std::unique_ptr<ConfigurationStore> view;
  std::unique_ptr<ConfigurationManager> n[2];
  std::mutex mu;
  std::vector<control::Membership> seen[2];
  std::optional<std::string> evicted[2];
  int unrecorded = 0;
};

}  // namespace

TEST_CASE("with a configuration store, every membership is recorded before a node gets it",
          "[cm][store]") {
  StoreCluster s;
  s.n[1]->Leave();
  std::optional<control::Membership> after = s.WaitWithout1(0);
  REQUIRE(after.has_value());
  absl::StatusOr<control::Membership> stored = s.Stored();
  REQUIRE(stored.ok());
  CHECK(stored->epoch() == after->epoch());
  CHECK(stored->nodes_size() == 1);
  std::lock_guard<std::mutex> l(s.mu);
  CHECK(s.unrecorded == 0);
  CHECK(!s.evicted[0].has_value());
}

TEST_CASE("while the configuration store is unreachable, members keep their configuration",
          "[cm][store]") {
  std::atomic<bool> down{false};
  StoreCluster s([&](absl::string_view) {
    return down.load() ? absl::UnavailableError("the test took ZooKeeper down") : absl::OkStatus();
  });
  down = true;
  s.n[1]->Leave();
  // Three leases: no new membership reaches node 0, whose lease the CM keeps renewing.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs));
  std::optional<control::Membership> meanwhile = s.Last(0);
  CHECK((!meanwhile.has_value() || Lists(*meanwhile, 1)));
  CHECK(s.n[0]->lease_expiry() > Clock::now());
  down = false;
  std::optional<control::Membership> after = s.WaitWithout1(0);
  REQUIRE(after.has_value());
  absl::StatusOr<control::Membership> stored = s.Stored();
  REQUIRE(stored.ok());
  CHECK(stored->epoch() == after->epoch());
  std::lock_guard<std::mutex> l(s.mu);
  CHECK(s.unrecorded == 0);
  CHECK(!s.evicted[0].has_value());
}

// Drops node `id`'s heartbeats while it lives (the node goes silent: failed, or cut off).
struct SilenceNode {
  explicit SilenceNode(uint32_t id) {
    SyncPoint* sp = SyncPoint::GetInstance();
    sp->SetCallBack("TcpConfigurationManager::Heartbeat:Send", [id](void* arg) {
      auto* send = static_cast<std::pair<uint32_t, bool>*>(arg);
      if (send->first == id) send->second = false;
    });
    sp->EnableProcessing();
  }
  ~SilenceNode() {
    SyncPoint::GetInstance()->DisableProcessing();
    SyncPoint::GetInstance()->ClearAllCallBacks();
  }
};

TEST_CASE("a CM that cannot record a member's failure stops renewing its own node's lease",
          "[cm][store]") {
  // Node 1 goes silent and the store takes nothing: this CM may be the one cut off, and node 1
  // may be taking the role over through the store; the CM's own node (node 0) must stop acting
  // before a takeover could serve its regions elsewhere.
  std::atomic<bool> down{false};
  StoreCluster s([&](absl::string_view) {
    return down.load() ? absl::UnavailableError("the test cut the CM off from ZooKeeper")
                       : absl::OkStatus();
  });
  down = true;
  const Clock::time_point silenced = Clock::now();
  {
    SilenceNode silence(1);
    bool ended = false;
    for (int k = 0; k < 1000 && !ended; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ended = s.n[0]->lease_expiry() <= Clock::now();
    }
    CHECK(ended);
    // Within two leases of the silence: a takeover waits that long, and a lease more before it
    // serves the CM's regions elsewhere.
    CHECK(s.n[0]->lease_expiry() <= silenced + std::chrono::milliseconds(2 * kLeaseMs));
  }
  std::optional<control::Membership> meanwhile = s.Last(0);
  CHECK((!meanwhile.has_value() || Lists(*meanwhile, 1)));  // nothing unrecorded went out
  down = false;
}

TEST_CASE("a CM that records a member's failure keeps its own node's lease", "[cm][store]") {
  StoreCluster s;
  SilenceNode silence(1);
  std::optional<control::Membership> after = s.WaitWithout1(0);
  REQUIRE(after.has_value());
  absl::StatusOr<control::Membership> stored = s.Stored();
  REQUIRE(stored.ok());
  CHECK(stored->epoch() == after->epoch());
  // A lease more: node 0's lease is renewed again and again, it was never evicted.
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs));
  CHECK(s.n[0]->lease_expiry() > Clock::now());
  std::lock_guard<std::mutex> l(s.mu);
  CHECK(!s.evicted[0].has_value());
}

TEST_CASE("when another configuration wins in the store, the CM evicts its members and stops",
          "[cm][store]") {
  StoreCluster s;
  // Another configuration manager records its configuration over this one's.
  absl::StatusOr<VersionedRecord> current = s.view->Read();
  REQUIRE(current.ok());
  REQUIRE(s.view->CompareAndSet(current->version, "another CM's configuration").ok());
  s.n[1]->Leave();  // a reconfiguration: its compare-and-set loses
  std::optional<std::string> why;
  for (int k = 0; k < 1000 && !why.has_value(); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::lock_guard<std::mutex> l(s.mu);
    why = s.evicted[0];
  }
  REQUIRE(why.has_value());
  CHECK_THAT(*why, Catch::Contains("another configuration was recorded"));
  absl::StatusOr<VersionedRecord> after = s.view->Read();
  REQUIRE(after.ok());
  CHECK(after->data == "another CM's configuration");
  std::lock_guard<std::mutex> l(s.mu);
  for (const control::Membership& m : s.seen[0]) CHECK(Lists(m, 1));  // none published since
}

namespace {

// Three nodes that form the cluster (f = 1, a failure domain each), node 0 the CM, every one
// with a store of its own on one record and a client that takes the CM over when it fails.
struct TakeoverCluster {
  // `fail_before_2`: node 2's store's fault injection.
  explicit TakeoverCluster(std::function<absl::Status(absl::string_view)> fail_before_2 = nullptr) {
    absl::StatusOr<std::unique_ptr<CmServer>> s = CmServer::Start(c, Store("cm", nullptr));
    REQUIRE(s.ok());
    server = std::move(*s);
    view = Store("view", nullptr);
    for (int i = 0; i < 3; ++i) {
      n[i] = NewTcpConfigurationManager(
          c, 0, absl::Milliseconds(kLeaseMs),
          Store("node" + std::to_string(i), i == 2 ? fail_before_2 : nullptr));
      n[i]->OnMembershipChange([this, i](const control::Membership& m) {
        {
          std::lock_guard<std::mutex> l(mu);
          seen[i].push_back(m);
        }
        n[i]->AckMembership(m.epoch());  // as a node does once its layers applied it
      });
      n[i]->OnEviction([this, i](const std::string& why) {
        std::lock_guard<std::mutex> l(mu);
        evicted[i] = why;
      });
    }
    std::vector<std::future<absl::StatusOr<control::Membership>>> joins;
    for (int i = 0; i < 3; ++i) {
      joins.push_back(std::async(std::launch::async, [this, i] {
        return n[i]->Join(Request(c, static_cast<uint32_t>(i)), absl::Seconds(30));
      }));
    }
    for (auto& j : joins) {
      absl::StatusOr<control::Membership> m = j.get();
      REQUIRE(m.ok());
      first = *m;
    }
  }
  ~TakeoverCluster() {
    for (auto& node : n) {
      if (node != nullptr) node->Leave();
    }
  }

  std::shared_ptr<ConfigurationStore> Store(
      const std::string& name, std::function<absl::Status(absl::string_view)> fail_before) {
    InMemoryStoreOptions o;
    o.record = record;
    o.name = name;
    o.fail_before = std::move(fail_before);
    return NewInMemoryConfigurationStore(o);
  }

  // The CM fails: its service stops (its connections close) and its node's client with it.
  void KillCm() {
    server.reset();
    n[0].reset();
  }

  // Waits up to 60 s for node `i` to get a membership for which `done` holds; the first one.
  // None once node `i` was evicted without one (no membership comes after that).
  std::optional<control::Membership> WaitFor(
      int i, const std::function<bool(const control::Membership&)>& done) {
    for (int k = 0; k < 6000; ++k) {
      {
        std::lock_guard<std::mutex> l(mu);
        for (const control::Membership& m : seen[i]) {
          if (done(m)) return m;
        }
        if (evicted[i].has_value()) return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  absl::StatusOr<control::Membership> Stored() { return StoredMembership(*view); }

  // Nodes 1 and 2 hold leases from the CM that took over, two leases on, and were not evicted.
  void CheckLeasesHeld() {
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * kLeaseMs));
    CHECK(n[1]->lease_expiry() > Clock::now());
    CHECK(n[2]->lease_expiry() > Clock::now());
    std::lock_guard<std::mutex> l(mu);
    CHECK(!evicted[1].has_value());
    CHECK(!evicted[2].has_value());
  }

  const config::ClusterConfig c = ReplicatedConfig();
  std::shared_ptr<InMemoryConfigurationRecord> record = NewInMemoryConfigurationRecord();
  std::unique_ptr<CmServer> server;
  std::shared_ptr<ConfigurationStore> view;
  std::unique_ptr<ConfigurationManager> n[3];
  control::Membership first;
  std::mutex mu;
  std::vector<control::Membership> seen[3];
  std::optional<std::string> evicted[3];
};

}  // namespace

TEST_CASE("when the CM fails, a member takes over through the store and the others reconnect",
          "[cm][store][takeover]") {
  TakeoverCluster t;
  // Node 0's region and its backup, whose copy only the failed CM was told of: the node tells
  // the CM that takes over when it reconnects.
  const control::RegionInfo* r0 = nullptr;
  for (const control::RegionInfo& r : t.first.regions()) {
    if (r.node_id() == 0) r0 = &r;
  }
  REQUIRE(r0 != nullptr);
  REQUIRE(r0->backup_node_size() == 1);
  const uint32_t region = r0->region_id();
  const uint32_t backup = r0->backup_node(0);
  control::BackupCopy copy;
  copy.set_region_id(region);
  copy.set_remote_base(0x10000 * (backup + 1));
  copy.set_rkey(70 + backup);
  t.n[backup]->ReportBackupCopy(copy);

  t.KillCm();
  auto taken_over = [](const control::Membership& m) {
    return m.cm_node_id() == 1 && !Lists(m, 0);
  };
  std::optional<control::Membership> m1 = t.WaitFor(1, taken_over);
  std::optional<control::Membership> m2 = t.WaitFor(2, taken_over);
  REQUIRE(m1.has_value());
  REQUIRE(m2.has_value());
  CHECK(Lists(*m1, 1));
  CHECK(Lists(*m1, 2));
  CHECK(m1->epoch() > t.first.epoch());
  CHECK_THAT(m1->departed().at(0), Catch::Contains("configuration manager"));
  // Node 0's region is served by its backup's copy, under its id.
  const control::RegionInfo* promoted = FindRegion(*m1, region);
  REQUIRE(promoted != nullptr);
  CHECK(promoted->node_id() == backup);
  CHECK(promoted->promoted());
  CHECK(promoted->remote_base() == copy.remote_base());
  CHECK(promoted->rkey() == copy.rkey());
  // Activated once both members acknowledged, and re-replicated on the remaining node.
  std::optional<control::Membership> active = t.WaitFor(1, [&](const control::Membership& m) {
    const control::RegionInfo* r = FindRegion(m, region);
    return r != nullptr && !r->recovering() && r->backup_node_size() == 1;
  });
  REQUIRE(active.has_value());
  // Recorded before published, naming the new CM; leases are renewed by it.
  absl::StatusOr<control::Membership> stored = t.Stored();
  REQUIRE(stored.ok());
  CHECK(stored->cm_node_id() == 1);
  CHECK(stored->epoch() >= active->epoch());
  t.CheckLeasesHeld();
}

TEST_CASE("a CM that did not run for a lease steps down, and a member takes over",
          "[cm][store][takeover]") {
  TakeoverCluster t;
  // The CM stalls for one and a half leases, as a stopped (SIGSTOP) or starved process would:
  // the members' leases end meanwhile, and they look for the next CM.
  std::atomic<bool> stalled{false};
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("CmServer::Run:Turn", [&](void*) {
    if (!stalled.exchange(true))
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * kLeaseMs / 2));
  });
  sp->EnableProcessing();
  // When it runs again it acts on nothing it saw before (it would drop both members, whose
  // connections closed meanwhile, and record that): it steps down, and a member takes over.
  std::optional<control::Membership> m1 = t.WaitFor(
      1, [](const control::Membership& m) { return m.cm_node_id() != 0 && !Lists(m, 0); });
  std::optional<control::Membership> m2 = t.WaitFor(
      2, [](const control::Membership& m) { return m.cm_node_id() != 0 && !Lists(m, 0); });
  sp->Reset();
  REQUIRE(m1.has_value());
  REQUIRE(m2.has_value());
  CHECK(Lists(*m1, 1));
  CHECK(Lists(*m1, 2));
  std::lock_guard<std::mutex> l(t.mu);
  CHECK(t.evicted[0].has_value());  // the CM's own node: its lease ended
  CHECK(!t.evicted[1].has_value());
  CHECK(!t.evicted[2].has_value());
}

// The CM that takes over (node 1) is held back before its first turn for two and a half leases,
// as a loaded machine held one back in CI: longer than a member waits for the answer to one
// reconnection (two leases). Node 2 tries again within the takeover's window instead of counting
// node 1 unreachable and taking over itself, which removed node 1 with node 0: two members gone
// at once, their regions' only copies with them.
TEST_CASE("a member waits for a CM that took over and answers late",
          "[cm][store][takeover][sync_point]") {
  TakeoverCluster t;
  std::atomic<bool> held{false};
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("CmServer::Run:Start", [&](void* arg) {
    if (*static_cast<uint32_t*>(arg) == 1 && !held.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * kLeaseMs / 2));
    }
  });
  sp->EnableProcessing();
  t.KillCm();
  auto taken_over = [](const control::Membership& m) {
    return m.cm_node_id() == 1 && !Lists(m, 0);
  };
  std::optional<control::Membership> m1 = t.WaitFor(1, taken_over);
  sp->Reset();
  CHECK(held.load());
  REQUIRE(m1.has_value());
  std::optional<control::Membership> m2 = t.WaitFor(2, taken_over);
  REQUIRE(m2.has_value());
  CHECK(Lists(*m1, 1));
  CHECK(Lists(*m1, 2));
  CHECK(m1->departed().count(1) == 0);
  CHECK(m1->departed().count(2) == 0);
  absl::StatusOr<control::Membership> stored = t.Stored();
  REQUIRE(stored.ok());
  CHECK(stored->cm_node_id() == 1);
  CHECK(Lists(*stored, 1));
  CHECK(Lists(*stored, 2));
  t.CheckLeasesHeld();
}

TEST_CASE("a member that does not reconnect to the CM that took over is removed",
          "[cm][store][takeover]") {
  std::atomic<bool> cut{false};
  // Node 2 cannot reach the store once the CM failed: it never finds the new CM.
  TakeoverCluster t([&](absl::string_view) {
    return cut.load() ? absl::UnavailableError("node 2 is cut off from ZooKeeper")
                      : absl::OkStatus();
  });
  cut = true;
  t.KillCm();
  std::optional<control::Membership> m1 = t.WaitFor(1, [](const control::Membership& m) {
    return m.cm_node_id() == 1 && !Lists(m, 0) && !Lists(m, 2);
  });
  REQUIRE(m1.has_value());
  CHECK_THAT(m1->departed().at(2), Catch::Contains("did not reconnect"));
  std::lock_guard<std::mutex> l(t.mu);
  CHECK(!t.evicted[1].has_value());
}

}  // namespace farm
