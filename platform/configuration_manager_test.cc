// The configuration manager's leases, with the built-in CM and its clients in one process (no
// fabric): a node's lease ends before the CM's view of it, whatever else the CM sends it.
#include "platform/configuration_manager.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "platform/config.h"
#include "platform/sync_point.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kLeaseMs = 1000;

// Nodes 0 (the CM's) and 1 form the cluster; node 2 is a late slot.
config::ClusterConfig Config() {
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  std::string text = "provider: \"shm\" region_size: 1048576 region_count: 1 lock_memory: false" +
                     std::string(" lease_ms: ") + std::to_string(kLeaseMs);
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

std::unique_ptr<ConfigurationManager> Client(const config::ClusterConfig& c) {
  const config::NodeConfig& cm = c.node(0);
  return NewTcpConfigurationManager(cm.host(), static_cast<uint16_t>(cm.control_port()),
                                    absl::Milliseconds(c.lease_ms()));
}

bool Lists(const control::Membership& m, uint32_t id) {
  for (const control::NodeInfo& n : m.nodes()) {
    if (n.node_id() == id) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a node's lease ends before the CM's view of it, whatever else the CM sends it",
          "[cm]") {
  const config::ClusterConfig c = Config();
  absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(c);
  REQUIRE(server.ok());
  std::unique_ptr<ConfigurationManager> n0 = Client(c), n1 = Client(c), n2 = Client(c);
  std::mutex mu;
  Clock::time_point gone;  // when node 0 got the membership without node 1
  n0->OnMembershipChange([&](const control::Membership& m) {
    std::lock_guard<std::mutex> l(mu);
    if (!Lists(m, 1) && gone == Clock::time_point()) gone = Clock::now();
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

}  // namespace farm
