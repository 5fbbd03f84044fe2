// TestCluster: nodes with messaging in one process, for tests. Every node runs on the provider
// under test (FARM_TEST_PROVIDERS, default shm) with adaptive polling; Start blocks until the
// cluster has formed.
//
//   TestCluster c(3, options);
//   c.StartMessengers();                 // or StartMessenger(i) one by one
//   Rpc rpc(c.messenger(0));
#ifndef FARM_MESSAGING_TEST_CLUSTER_H_
#define FARM_MESSAGING_TEST_CLUSTER_H_

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "messaging/messenger.h"
#include "platform/config.h"
#include "platform/node.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"
#include "spdlog/spdlog.h"

namespace farm {

class TestCluster {
 public:
  // Starts `n` nodes. Failures are reported by ok()/status() (tests REQUIRE them).
  // The provider and host default to the environment's (platform/testing/test_env.h).
  TestCluster(int n, MessengerOptions options, const std::string& provider = testing::AnyProvider())
      : options_(options), messengers_(n) {
    std::string text = absl::StrCat("provider: \"", provider,
                                    "\" region_size: 1048576 region_count: 1 lock_memory: false");
    absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(n);
    if (!ports.ok()) {
      status_ = ports.status();
      return;
    }
    for (int i = 0; i < n; ++i) {
      absl::StrAppend(&text, " node { id: ", i, " host: \"", testing::TestHost(),
                      "\" control_port: ", (*ports)[i], " }");
    }
    absl::StatusOr<config::ClusterConfig> c = ParseClusterConfig(text);
    if (!c.ok()) {
      status_ = c.status();
      return;
    }
    config_ = *c;
    std::vector<std::future<absl::StatusOr<std::unique_ptr<Node>>>> starting;
    for (int i = 0; i < n; ++i) {
      starting.push_back(
          std::async(std::launch::async, [this, i] { return Node::Start(NodeOptionsFor(i)); }));
    }
    for (auto& f : starting) {
      absl::StatusOr<std::unique_ptr<Node>> node = f.get();
      if (!node.ok()) {
        spdlog::error("test cluster: node {} did not start: {}", nodes_.size(),
                      node.status().ToString());
        if (status_.ok()) status_ = node.status();
      }
      nodes_.push_back(node.ok() ? std::move(*node) : nullptr);
    }
  }
  ~TestCluster() {
    messengers_.clear();  // before their nodes
    nodes_.clear();
  }

  const absl::Status& status() const { return status_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  Node* node(int i) const { return nodes_[i].get(); }
  Messenger* messenger(int i) const { return messengers_[i].get(); }

  absl::Status StartMessenger(int i) {
    absl::StatusOr<std::unique_ptr<Messenger>> m = Messenger::Create(nodes_[i].get(), options_);
    if (!m.ok()) return m.status();
    messengers_[i] = std::move(*m);
    return absl::OkStatus();
  }
  absl::Status StartMessengers() {
    for (int i = 0; i < size(); ++i) {
      if (absl::Status s = StartMessenger(i); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Destroys node i's messenger (e.g. before destroying an Rpc that uses it: do that first).
  void StopMessenger(int i) { messengers_[i].reset(); }

  // Node i leaves the cluster: its messenger and node are destroyed (destroy its Rpc first).
  // Node 0 hosts the configuration manager and must stay.
  void StopNode(int i) {
    messengers_[i].reset();
    nodes_[i].reset();
  }
  // Starts node i again after StopNode (a new incarnation: new fabric address and areas).
  // Retries while the configuration manager still lists the old one (it notices a departure
  // within a few of its 50 ms ticks), for up to `timeout`.
  absl::Status RestartNode(int i, absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(NodeOptionsFor(i));
      if (node.ok()) {
        nodes_[i] = std::move(*node);
        return absl::OkStatus();
      }
      if (!absl::IsFailedPrecondition(node.status()) || absl::Now() > deadline) {
        return node.status();
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }

 private:
  NodeOptions NodeOptionsFor(int i) const {
    NodeOptions o;
    o.config = config_;
    o.node_id = i;
    o.areas.push_back(Messenger::Area(config_, options_));
    return o;
  }

  MessengerOptions options_;
  config::ClusterConfig config_;
  absl::Status status_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Messenger>> messengers_;
};

}  // namespace farm

#endif  // FARM_MESSAGING_TEST_CLUSTER_H_
