// The node role of the tests that re-execute themselves as real node processes (lease_test,
// rpc_storm_test): start logging, load the cluster configuration, start a Node with the
// messenger's area and the Messenger on it, and report failures the same way (a log line and the
// process exit status the driver expects).
#ifndef FARM_TESTS_MESSAGING_NODE_H_
#define FARM_TESTS_MESSAGING_NODE_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "messaging/messenger.h"
#include "platform/config.h"
#include "platform/logging.h"
#include "platform/node.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace testing {

struct MessagingNode {
  config::ClusterConfig config;
  std::unique_ptr<Node> node;
  std::unique_ptr<Messenger> messenger;  // destroy before node (Stop does)
  void Stop() {
    messenger.reset();
    node.reset();
  }
};

// Starts node `id` of the cluster in `config_path` with messaging `options`. Returns 0, or the
// exit status for the process: 2 for bad logging flags or configuration, 1 when the node or its
// messenger could not start (logged).
inline int StartMessagingNode(int id, const std::string& config_path,
                              const std::string& log_level, const MessengerOptions& options,
                              MessagingNode* out) {
  if (absl::Status s = InitLogging(log_level, absl::StrCat("node", id)); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(config_path);
  if (!cfg.ok()) {
    spdlog::error("{}", std::string(cfg.status().message()));
    return 2;
  }
  out->config = *cfg;
  NodeOptions no;
  no.config = *cfg;
  no.node_id = id;
  no.areas.push_back(Messenger::Area(*cfg, options));
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(no);
  if (!node.ok()) {
    spdlog::error("node {} could not start: {}", id, std::string(node.status().message()));
    return 1;
  }
  out->node = std::move(*node);
  absl::StatusOr<std::unique_ptr<Messenger>> m = Messenger::Create(out->node.get(), options);
  if (!m.ok()) {
    spdlog::error("node {}: {}", id, std::string(m.status().message()));
    return 1;
  }
  out->messenger = std::move(*m);
  return 0;
}

// One line to the driver on standard output, flushed at once.
inline void Emit(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace testing
}  // namespace farm

#endif  // FARM_TESTS_MESSAGING_NODE_H_
