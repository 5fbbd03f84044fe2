// node: one symmetric cluster member. Serves its regions, joins through the configuration
// manager (hosting it when the configuration names this node), and runs until SIGINT/SIGTERM.
//
//   bazel run //tools:node -- --config=cluster.textproto --node_id=1
//
// Standard output carries machine-readable status lines for supervisors (tools/cluster):
//   READY {"node":1,"provider":"tcp;ofi_rxm","epoch":1,"nodes":3}
//   SELFCHECK {...one PairCheck as JSON...}
//   SELFCHECK_DONE {"node":1}
// With --control_stdin, it reads commands from standard input, one per line: "selfcheck" runs
// the self-check against every peer, "quit" leaves; end of input also leaves (so a node never
// outlives the supervisor that started it). Logs go to standard error.
//
// Exit status: 0 after a signal, "quit" or end of input; 1 if the node could not start; 2 for a
// bad command line or configuration; 3 if the node was evicted from the cluster (its lease
// expired, e.g. after the process was paused, or the configuration manager went away): the
// message "node N was evicted from the cluster: <why>" is the last line on standard error.
#include "platform/node.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "platform/config.h"
#include "platform/logging.h"
#include "platform/poller.h"
#include "platform/self_check.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, config, "", "cluster configuration file (protobuf text format)");
ABSL_FLAG(int, node_id, -1, "this node's id in the configuration; -1 lets the CM assign one");
ABSL_FLAG(std::string, provider, "",
          "fabric provider, overriding the configuration: auto, verbs, tcp;ofi_rxm, tcp, shm");
ABSL_FLAG(std::string, endpoint, "",
          "fabric endpoint type, overriding the configuration: auto, rdm or msg");
ABSL_FLAG(std::string, poll, "adaptive", "polling mode: busy or adaptive");
ABSL_FLAG(bool, control_stdin, false, "read commands (selfcheck, quit) from standard input");
ABSL_FLAG(bool, fill_pattern, false, "fill regions with the self-check pattern before joining");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");

namespace farm {
namespace {

void Emit(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

void RunSelfCheckCommand(Node& node) {
  for (const PairCheck& c : RunSelfCheck(node)) {
    if (!c.ok()) spdlog::error("self-check {} -> {} failed: {}", c.from, c.to, c.error);
    Emit(absl::StrCat("SELFCHECK ", c.ToJson()));
  }
  Emit(absl::StrFormat("SELFCHECK_DONE {\"node\":%d}", node.id()));
}

// Waits for a signal or, with control_stdin, runs commands until "quit" or end of input.
// Returns early when the node is evicted from the cluster (see Node::evicted).
void Serve(Node& node, int signal_fd, bool control_stdin) {
  std::string pending;
  for (;;) {
    if (!node.evicted().ok()) return;
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    // Wakes up now and then to notice an eviction (it happens on the node's own threads).
    int n = poll(fds, control_stdin ? 2 : 1, 100);
    if (n <= 0) continue;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) > 0) {
        spdlog::info("node {}: signal {}, leaving", node.id(), info.ssi_signo);
      }
      return;
    }
    if (control_stdin && (fds[1].revents & (POLLIN | POLLHUP))) {
      char buf[256];
      ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
      if (got <= 0) {
        spdlog::info("node {}: control input closed, leaving", node.id());
        return;
      }
      pending.append(buf, static_cast<size_t>(got));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string cmd(absl::StripAsciiWhitespace(pending.substr(0, nl)));
        pending.erase(0, nl + 1);
        if (cmd == "selfcheck") {
          RunSelfCheckCommand(node);
        } else if (cmd == "quit") {
          return;
        } else if (!cmd.empty()) {
          spdlog::warn("node {}: unknown command '{}' (commands: selfcheck, quit)", node.id(), cmd);
        }
      }
    }
  }
}

int Main() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "node"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  if (absl::GetFlag(FLAGS_config).empty()) {
    spdlog::error("--config is required (a cluster configuration file); see --help");
    return 2;
  }
  // Under `bazel run` the process runs in its runfiles tree; resolve relative paths against the
  // directory the user ran bazel from.
  std::string config_path = absl::GetFlag(FLAGS_config);
  const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (user_dir != nullptr && !config_path.empty() && config_path[0] != '/') {
    config_path = absl::StrCat(user_dir, "/", config_path);
  }
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(config_path);
  if (!cfg.ok()) {
    spdlog::error("{}", std::string(cfg.status().message()));
    return 2;
  }
  absl::StatusOr<PollMode> mode = ParsePollMode(absl::GetFlag(FLAGS_poll));
  if (!mode.ok()) {
    spdlog::error("{}", std::string(mode.status().message()));
    return 2;
  }
  const std::string provider = absl::GetFlag(FLAGS_provider);
  if (absl::Status s = CheckProvider(provider); !provider.empty() && !s.ok()) {
    spdlog::error("--provider: {}", std::string(s.message()));
    return 2;
  }
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  if (!endpoint.empty()) {
    if (absl::Status s = ParseEndpointType(endpoint).status(); !s.ok()) {
      spdlog::error("--endpoint: {}", std::string(s.message()));
      return 2;
    }
  }
  const int node_id = absl::GetFlag(FLAGS_node_id);
  if (node_id >= 0 && FindNode(*cfg, static_cast<uint32_t>(node_id)) == nullptr) {
    spdlog::error("--node_id={} is not listed in {}", node_id, config_path);
    return 2;
  }
  spdlog::default_logger()->set_pattern(absl::StrCat(
      "%H:%M:%S.%e node", node_id < 0 ? std::string("?") : absl::StrCat(node_id), " %l: %v"));

  // Signals are taken synchronously through a signalfd; block them before any thread starts.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  int signal_fd = signalfd(-1, &mask, SFD_CLOEXEC);

  NodeOptions opts;
  opts.config = *cfg;
  opts.node_id = node_id;
  opts.provider = provider;
  opts.endpoint = endpoint;
  opts.poll.mode = *mode;
  opts.fill_pattern = absl::GetFlag(FLAGS_fill_pattern);
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(opts);
  if (!node.ok()) {
    spdlog::error("node {} could not start: {}", node_id, std::string(node.status().message()));
    return 1;
  }
  Emit(absl::StrFormat("READY {\"node\":%d,\"provider\":\"%s\",\"epoch\":%d,\"nodes\":%d}",
                       (*node)->id(), (*node)->provider(), (*node)->membership().epoch(),
                       (*node)->membership().nodes_size()));
  Serve(**node, signal_fd, absl::GetFlag(FLAGS_control_stdin));
  if (absl::Status evicted = (*node)->evicted(); !evicted.ok()) {
    // Fail-stop: this process no longer belongs to the cluster; a supervisor may start a new one
    // under the same id.
    std::fprintf(stderr, "%s\n", std::string(evicted.message()).c_str());
    node->reset();
    return 3;
  }
  node->reset();
  spdlog::info("node {} stopped", node_id);
  return 0;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs one node of a FaRM-style cluster.\n"
      "  node --config=cluster.textproto --node_id=N [--provider=...] [--poll=busy|adaptive]");
  absl::ParseCommandLine(argc, argv);
  return farm::Main();
}
