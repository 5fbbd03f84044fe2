// farm::RunNode (farm.h): the main function of every node binary, //tools:node included.
//
// Standard output carries machine-readable status lines for supervisors (//tools:cluster):
//   READY {"node":1,"provider":"tcp;ofi_rxm","epoch":1,"nodes":3,"app":"hello"}
//   APP_DONE {"node":1,"ok":true,"error":""}          (nodes that run an application)
//   SELFCHECK {...one PairCheck as JSON...}           (after a "selfcheck" command)
//   SELFCHECK_DONE {"node":1}
// Anything else the application prints to standard output is passed through by the supervisor.
// With --control_stdin the node reads commands from standard input, one per line: "selfcheck"
// runs the self-check against every peer, "quit" leaves, "end" leaves because the whole cluster
// stops (the supervisor says it to every node: nothing is promoted or reported lost as the members
// go, and the configuration manager's node leaves last); end of input also leaves (so a node never
// outlives the supervisor that started it). Logs go to standard error.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "api/done_barrier.h"
#include "api/runtime_impl.h"
#include "farm.h"
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
ABSL_FLAG(std::string, zookeeper, "",
          "host:port,... of ZooKeeper servers in which the configuration manager records every "
          "configuration before publishing it, and through which another node takes its role "
          "over when it fails (overrides the configuration's `zookeeper`). //tools:chaos: "
          "empty starts a local ZooKeeper for kill_cm, 'none' runs without");
ABSL_FLAG(int, workers, 8, "how many application threads may hold a Worker at once (1-64)");
ABSL_FLAG(int64_t, ring_size, 64 << 10,
          "bytes per message ring (the same on every node; the largest message is a quarter)");
ABSL_FLAG(bool, control_stdin, false, "read commands (selfcheck, quit) from standard input");
ABSL_FLAG(bool, fill_pattern, false, "fill regions with the self-check pattern before joining");
ABSL_FLAG(std::string, data_dir, "",
          "this node's own directory in which its regions, backup copies and backup journal are "
          "kept as files: a cluster stopped as a whole, or whose every node was killed (with "
          "f >= 1), and started again on the same directories serves every committed object "
          "again (empty: memory only)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");

namespace farm {
namespace {

void Emit(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::string JsonEscape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

// What the node's main thread waits for: a signal, a command, or the end of the application.
class Events {
 public:
  Events(int signal_fd, bool control_stdin) : signal_fd_(signal_fd), stdin_(control_stdin) {}

  enum Kind { kNothing, kSignal, kQuit, kEnd, kSelfCheck, kStdinClosed };
  // Whether `k` tells the node to leave.
  static bool Leaves(Kind k) {
    return k == kSignal || k == kQuit || k == kEnd || k == kStdinClosed;
  }
  // Waits up to `timeout_ms` (-1: forever) for the next event.
  Kind Next(int timeout_ms) {
    for (;;) {
      if (Kind k = NextCommand(); k != kNothing) return k;
      pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
      const int n = poll(fds, stdin_ ? 2 : 1, timeout_ms);
      if (n == 0) return kNothing;
      if (n < 0) continue;
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo info{};
        if (read(signal_fd_, &info, sizeof(info)) > 0) signal_ = static_cast<int>(info.ssi_signo);
        return kSignal;
      }
      if (stdin_ && (fds[1].revents & (POLLIN | POLLHUP))) {
        char buf[256];
        const ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
        if (got <= 0) {
          stdin_ = false;
          return kStdinClosed;
        }
        pending_.append(buf, static_cast<size_t>(got));
      }
    }
  }
  int signal() const { return signal_; }

 private:
  Kind NextCommand() {
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      const std::string cmd(absl::StripAsciiWhitespace(pending_.substr(0, nl)));
      pending_.erase(0, nl + 1);
      if (cmd == "selfcheck") return kSelfCheck;
      if (cmd == "quit") return kQuit;
      if (cmd == "end") return kEnd;
      if (!cmd.empty()) spdlog::warn("unknown command '{}' (commands: selfcheck, quit, end)", cmd);
    }
    return kNothing;
  }

  const int signal_fd_;
  bool stdin_;
  std::string pending_;
  int signal_ = 0;
};

// The whole cluster stops (every member finished its application, or the supervisor said "end"):
// the members leave with their regions, so no backup is promoted and no region is reported lost as
// they go. The CM's node goes last (for a lease at most): a CM that stopped first would look like a
// failed CM to the nodes still leaving ("evicted"). It waits for every other member, or with
// `only_configured` for the nodes the configuration does not mark late (those the supervisor
// started and told to end; a client joined in a late slot, e.g. kvsh, is not waited for). Only a
// signal or "quit" cuts that wait short (a supervisor closes the nodes' input once it said "end").
void LeaveWithCluster(Runtime::Impl& rt, Events& events, bool only_configured) {
  Node& node = *rt.node;
  // With a data directory: quiescent and on disk before leaving, for a restart.
  const absl::Duration lease = absl::Milliseconds(node.config().lease_ms());
  if (absl::Status s = rt.KeepForRestart(lease); !s.ok()) {
    spdlog::error(
        "node {}: its data directory is not marked clean, so a restart will refuse it: {}",
        node.id(), std::string(s.message()));
  }
  node.MarkClusterEnding();
  if (!node.serves_cm()) return;
  auto others_stay = [&node, only_configured] {
    for (uint32_t id : node.members()) {
      if (id == node.id()) continue;
      if (!only_configured) return true;
      for (const config::NodeConfig& n : node.config().node()) {
        if (n.id() == id && !n.late()) return true;
      }
    }
    return false;
  };
  const absl::Time until = absl::Now() + absl::Milliseconds(node.config().lease_ms());
  while (others_stay() && node.evicted().ok() && absl::Now() < until) {
    const Events::Kind k = events.Next(20);
    if (k == Events::kSignal || k == Events::kQuit) break;
  }
}

void RunSelfCheckCommand(Runtime::Impl& rt) {
  Node& node = *rt.node;
  if (rt.txn->allocator().slots_in_use() > 0) {
    // The check overwrites the ends of every region: it would destroy objects (e.g. a KV shard).
    PairCheck c;
    c.from = c.to = node.id();
    c.error =
        "refused: this node's regions hold objects (a KV shard or an application's), which "
        "the self-check would overwrite; it runs only on nodes without them";
    spdlog::error("self-check {}", c.error);
    Emit(absl::StrCat("SELFCHECK ", c.ToJson()));
    Emit(absl::StrFormat("SELFCHECK_DONE {\"node\":%d}", node.id()));
    return;
  }
  for (const PairCheck& c : RunSelfCheck(node)) {
    if (!c.ok()) spdlog::error("self-check {} -> {} failed: {}", c.from, c.to, c.error);
    Emit(absl::StrCat("SELFCHECK ", c.ToJson()));
  }
  Emit(absl::StrFormat("SELFCHECK_DONE {\"node\":%d}", node.id()));
}

absl::StatusOr<RuntimeOptions> OptionsFromFlags() {
  RuntimeOptions o;
  o.config_path = absl::GetFlag(FLAGS_config);
  if (o.config_path.empty()) {
    return absl::InvalidArgumentError(
        "--config is required (a cluster configuration file); see --help");
  }
  // Under `bazel run` the process runs in its runfiles tree; resolve relative paths against the
  // directory the user ran bazel from.
  const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (user_dir != nullptr && o.config_path[0] != '/') {
    o.config_path = absl::StrCat(user_dir, "/", o.config_path);
  }
  o.node_id = absl::GetFlag(FLAGS_node_id);
  o.provider = absl::GetFlag(FLAGS_provider);
  if (!o.provider.empty()) {
    if (absl::Status s = CheckProvider(o.provider); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--provider: ", s.message()));
    }
  }
  o.endpoint = absl::GetFlag(FLAGS_endpoint);
  if (!o.endpoint.empty()) {
    if (absl::Status s = ParseEndpointType(o.endpoint).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--endpoint: ", s.message()));
    }
  }
  o.zookeeper = absl::GetFlag(FLAGS_zookeeper);
  o.poll = absl::GetFlag(FLAGS_poll);
  if (absl::Status s = ParsePollMode(o.poll).status(); !s.ok()) return s;
  o.workers = absl::GetFlag(FLAGS_workers);
  const int64_t ring = absl::GetFlag(FLAGS_ring_size);
  if (ring <= 0) return absl::InvalidArgumentError("--ring_size must be positive");
  o.ring_size = static_cast<uint64_t>(ring);
  o.fill_pattern = absl::GetFlag(FLAGS_fill_pattern);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  if (user_dir != nullptr && !o.data_dir.empty() && o.data_dir[0] != '/') {
    o.data_dir = absl::StrCat(user_dir, "/", o.data_dir);
  }
  if (!o.data_dir.empty() && o.node_id < 0) {
    return absl::InvalidArgumentError("--data_dir needs --node_id: the directory is one node's");
  }
  // Read the configuration here as well, to name the file in errors and check --node_id.
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(o.config_path);
  if (!cfg.ok()) return cfg.status();
  if (o.node_id >= 0 && FindNode(*cfg, static_cast<uint32_t>(o.node_id)) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_id=", o.node_id, " is not listed in ", o.config_path));
  }
  return o;
}

// Runs app.run on its own thread while the main thread watches signals and commands.
// Returns the app's status, or Cancelled when the node was told to stop first.
absl::Status RunApp(Runtime& rt, const App& app, Events& events, bool* stop_now) {
  std::atomic<bool> finished{false};
  absl::Status result;
  std::thread runner([&] {
    result = app.run(rt);
    finished.store(true, std::memory_order_release);
  });
  Node& node = *RuntimeAccess::Of(rt).node;
  while (!finished.load(std::memory_order_acquire)) {
    const Events::Kind k = events.Next(10);
    if (k == Events::kSelfCheck) spdlog::warn("selfcheck is not available while an app runs");
    if (!node.evicted().ok()) {
      // Fail-stop: the cluster went on without this node; its application must not go on.
      *stop_now = true;
      runner.detach();
      return node.evicted();
    }
    if (Events::Leaves(k)) {
      // The application thread may be anywhere inside the runtime: it cannot be stopped safely,
      // so the process ends here (the configuration manager sees the connection close).
      spdlog::warn("node {}: stopping during the application ({})", rt.node_id(),
                   k == Events::kSignal ? absl::StrCat("signal ", events.signal())
                                        : std::string("told to quit"));
      *stop_now = true;
      runner.detach();
      return absl::CancelledError("stopped before the application finished");
    }
  }
  runner.join();
  return result;
}

int Main(const App& app) {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), app.name); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  absl::StatusOr<RuntimeOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    spdlog::error("{}", std::string(options.status().message()));
    return 2;
  }
  const int node_id = options->node_id;
  spdlog::default_logger()->set_pattern(
      absl::StrCat("%H:%M:%S.%e ", app.name == "node" ? "" : absl::StrCat(app.name, " "), "node",
                   node_id < 0 ? std::string("?") : absl::StrCat(node_id), " %l: %v"));

  // Signals are taken synchronously through a signalfd; block them before any thread starts.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  const int signal_fd = signalfd(-1, &mask, SFD_CLOEXEC);
  Events events(signal_fd, absl::GetFlag(FLAGS_control_stdin));

  // Outlives the runtime: its RPC handler may run until the runtime stops.
  std::optional<DoneBarrier> barrier;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Start(*options);
  if (!rt.ok()) {
    spdlog::error("node {} could not start: {}", node_id, std::string(rt.status().message()));
    return 1;
  }
  Runtime::Impl& impl = RuntimeAccess::Of(**rt);
  barrier.emplace(impl);
  if (app.setup) {
    if (absl::Status s = app.setup(**rt); !s.ok()) {
      spdlog::error("node {}: {} setup failed: {}", (*rt)->node_id(), app.name,
                    std::string(s.message()));
      return 1;
    }
  }
  (*rt)->Serve();
  Emit(absl::StrFormat(
      "READY {\"node\":%d,\"provider\":\"%s\",\"epoch\":%d,\"nodes\":%d%s}", (*rt)->node_id(),
      (*rt)->provider(), impl.node->membership().epoch(), impl.node->membership().nodes_size(),
      app.run ? absl::StrCat(",\"app\":\"", JsonEscape(app.name), "\"") : std::string()));

  // Fail-stop: an evicted node (its lease expired, e.g. after the process was paused, or the
  // configuration manager went away) no longer belongs to the cluster; a supervisor may start a
  // new process under the same id. Its message is the last line on standard error.
  auto exit_evicted = [&impl]() {
    std::fprintf(stderr, "%s\n", std::string(impl.node->evicted().message()).c_str());
    std::fflush(stderr);
    std::_Exit(3);
  };
  int exit_code = 0;
  if (app.run) {
    bool stop_now = false;
    const absl::Status s = RunApp(**rt, app, events, &stop_now);
    if (stop_now && !impl.node->evicted().ok()) exit_evicted();
    if (stop_now) std::_Exit(1);
    if (!s.ok()) {
      spdlog::error("node {}: {} failed: {}", (*rt)->node_id(), app.name, std::string(s.message()));
      exit_code = 1;
    }
    Emit(absl::StrFormat("APP_DONE {\"node\":%d,\"ok\":%s,\"error\":\"%s\"}", (*rt)->node_id(),
                         s.ok() ? "true" : "false", JsonEscape(s.message())));
    if (app.wait_for_peers &&
        !barrier->Arrive([&events] { return !Events::Leaves(events.Next(20)); })) {
      exit_code = exit_code == 0 ? 1 : exit_code;
    } else if (app.wait_for_peers) {
      LeaveWithCluster(impl, events, /*only_configured=*/false);  // every node finished
    }
  } else {
    for (bool serving = true; serving;) {
      // Wakes up now and then to notice an eviction (it happens on the node's own threads).
      if (!impl.node->evicted().ok()) exit_evicted();
      switch (events.Next(100)) {
        case Events::kSelfCheck:
          RunSelfCheckCommand(impl);
          break;
        case Events::kSignal:
          spdlog::info("node {}: signal {}, leaving", (*rt)->node_id(), events.signal());
          serving = false;
          break;
        case Events::kStdinClosed:
          spdlog::info("node {}: control input closed, leaving", (*rt)->node_id());
          serving = false;
          break;
        case Events::kQuit:
          serving = false;
          break;
        case Events::kEnd:
          spdlog::info("node {}: the whole cluster stops, leaving", (*rt)->node_id());
          LeaveWithCluster(impl, events, /*only_configured=*/true);
          serving = false;
          break;
        case Events::kNothing:
          break;
      }
    }
  }
  rt->reset();
  spdlog::info("node {} stopped", node_id);
  return exit_code;
}

}  // namespace

int RunNode(int argc, char** argv, const App& app) {
  absl::SetProgramUsageMessage(absl::StrCat(
      app.run ? absl::StrCat("Runs one node of the farm application '", app.name, "'.\n")
              : std::string("Runs one node of a farm cluster.\n"),
      "  ", argc > 0 ? argv[0] : "node",
      " --config=cluster.textproto --node_id=N [--provider=...] [--poll=busy|adaptive]"));
  // absl's --help lists only the flags defined in the file named after the program (an
  // application's own flags, in bank.cc for `bank`); a node's standard flags are defined here,
  // so list every flag but absl's own (--flagfile, --helpfull, ...: --helpfull shows them).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  return Main(app);
}

}  // namespace farm
