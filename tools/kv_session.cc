#include "tools/kv_session.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/poller.h"
#include "spdlog/spdlog.h"

// The standard node flags (api/node_main.cc, part of //:farm): the tool is a node too.
ABSL_DECLARE_FLAG(std::string, config);
ABSL_DECLARE_FLAG(int, node_id);
ABSL_DECLARE_FLAG(std::string, provider);
ABSL_DECLARE_FLAG(std::string, endpoint);
ABSL_DECLARE_FLAG(std::string, poll);
ABSL_DECLARE_FLAG(int64_t, ring_size);
ABSL_DECLARE_FLAG(int, workers);
ABSL_DECLARE_FLAG(bool, control_stdin);
ABSL_DECLARE_FLAG(bool, fill_pattern);
ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(int, local, 0,
          "start a local cluster of this many node processes holding KV shards (1-63), and join "
          "it; they stop when the tool exits");
ABSL_FLAG(int, join_timeout_s, 20,
          "seconds to wait for joining the cluster (for --local: once its nodes are ready)");
// --local only.
ABSL_FLAG(int, late_nodes, 0,
          "--local: extra node ids marked late in the configuration, for other clients "
          "(another kvsh, kvbench, kv_resp) to attach as with --config (see --write_config)");
ABSL_FLAG(std::string, write_config, "",
          "--local: write the cluster's configuration here once it is ready, for clients that "
          "attach");
ABSL_FLAG(std::string, host, "127.0.0.1", "--local: the address every node binds to");
ABSL_FLAG(int64_t, region_size, 16 << 20,
          "--local: bytes per region (a shard takes kv_buckets * kv_bucket_bytes of one)");
ABSL_FLAG(int, region_count, 2, "--local: regions per node");
ABSL_FLAG(bool, lock_memory, true, "--local: lock the nodes' regions in RAM");
ABSL_FLAG(std::string, node_binary, "",
          "--local: the node executable (default: //tools:node beside this binary)");
ABSL_FLAG(int, ready_timeout_s, 60, "--local: seconds to wait for the nodes to be ready");
// The store's options: the same on every node of the cluster (//tools:node's --kv_* flags).
ABSL_FLAG(uint64_t, kv_buckets, 8192, "buckets in each serving node's shard (--local)");
ABSL_FLAG(uint32_t, kv_bucket_bytes, 256,
          "bytes per KV bucket: a power of two, 128..4096 (the cluster's nodes' value)");
ABSL_FLAG(uint32_t, kv_neighbourhood, 8,
          "KV hopscotch neighbourhood H (the cluster's nodes' value)");

namespace farm {
namespace kvsh {
namespace {

constexpr int kExitUsage = 2;

// The last `lines` lines of a file, each indented.
std::string Tail(const std::string& path, int lines) {
  std::ifstream f(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(f, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size();
       ++i) {
    absl::StrAppend(&out, "    ", all[i], "\n");
  }
  return out.empty() ? "    (empty)\n" : out;
}

// ---------------------------------------------------------------------------------------------
// Joining.

// Starts this node's Runtime on a thread while the calling thread watches signals and the local
// nodes, so that neither a dead cluster nor Ctrl-C leaves the tool waiting. A wait that is given
// up exits the process (the joining thread cannot be stopped).
class Joiner {
 public:
  Joiner(const SessionTool& tool, int signal_fd, LocalCluster* local)
      : tool_(tool), signal_fd_(signal_fd), local_(local) {}

  absl::StatusOr<std::unique_ptr<Runtime>> Join(const RuntimeOptions& options,
                                                absl::Duration timeout) {
    struct Shared {
      std::mutex mu;
      bool done = false;
      absl::StatusOr<std::unique_ptr<Runtime>> result = absl::UnknownError("not started");
    };
    auto shared = std::make_shared<Shared>();
    std::thread t([shared, options] {
      absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Start(options);
      std::lock_guard<std::mutex> l(shared->mu);
      shared->result = std::move(rt);
      shared->done = true;
    });
    const absl::Time start = absl::Now();
    bool told = false;
    for (;;) {
      {
        std::lock_guard<std::mutex> l(shared->mu);
        if (shared->done) break;
      }
      pollfd p{signal_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) > 0) {
        signalfd_siginfo info{};
        (void)!read(signal_fd_, &info, sizeof(info));
        Abandon(t, 128 + static_cast<int>(info.ssi_signo),
                absl::StrCat("stopped by signal ", info.ssi_signo, " while joining the cluster"));
      }
      if (local_ != nullptr) {
        std::string logs;
        if (std::optional<std::string> dead = local_->CheckChildren(&logs); dead.has_value()) {
          Abandon(t, kExitUsage,
                  absl::StrCat("the cluster failed while ", tool_.noun, " joined: ", *dead, "\n",
                               logs));
        }
      }
      const absl::Duration waited = absl::Now() - start;
      if (!told && waited > absl::Seconds(3)) {
        spdlog::warn("still waiting to join the cluster as node {} (up to {})", options.node_id,
                     absl::FormatDuration(timeout));
        told = true;
      }
      if (waited > timeout) {
        Abandon(t, kExitUsage,
                absl::StrCat("could not join the cluster as node ", options.node_id, " within ",
                             absl::FormatDuration(timeout),
                             " (--join_timeout_s): is the cluster running, and is its "
                             "configuration manager reachable?"));
      }
    }
    t.join();
    std::lock_guard<std::mutex> l(shared->mu);
    return std::move(shared->result);
  }

 private:
  [[noreturn]] void Abandon(std::thread& t, int code, const std::string& why) {
    spdlog::error("{}", why);
    if (local_ != nullptr) local_->Stop();
    t.detach();
    // The joining runtime's fabric stays open: its shm files (platform/fabric.h
    // ShmEndpointName) would stay in /dev/shm until the next node on this machine starts.
    const std::string mine = absl::StrCat(kShmNamePrefix, getpid(), "-");
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (absl::StartsWith(e.path().filename().string(), mine)) {
        std::filesystem::remove(e.path(), ec);
      }
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(code);
  }

  const SessionTool& tool_;
  const int signal_fd_;
  LocalCluster* const local_;
};

std::string DefaultNodeBinary() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "node").string();
}

}  // namespace

std::string UserPath(const std::string& path) {
  const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (user_dir != nullptr && !path.empty() && path[0] != '/') {
    return absl::StrCat(user_dir, "/", path);
  }
  return path;
}

absl::Status CheckClusterFlags(const SessionTool& tool) {
  const int local = absl::GetFlag(FLAGS_local);
  const bool attach = !absl::GetFlag(FLAGS_config).empty();
  if (absl::GetFlag(FLAGS_control_stdin) || absl::GetFlag(FLAGS_fill_pattern)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--control_stdin and --fill_pattern are flags of //tools:node, not of ", tool.name));
  }
  if (local < 0 || local > 63) {
    return absl::InvalidArgumentError(absl::StrCat("--local must be 1 to 63 nodes, not ", local));
  }
  if (local > 0 && attach) {
    return absl::InvalidArgumentError(
        "give either --local=N (start a cluster) or --config=FILE (join one), not both");
  }
  if (local == 0 && !attach) {
    return absl::InvalidArgumentError(
        absl::StrCat(tool.name,
                     " needs a cluster: --local=N starts one of N nodes, --config=FILE "
                     "[--node_id=N] joins a running one; see --help"));
  }
  if (local == 0) {
    for (const char* f : {"late_nodes", "write_config"}) {
      const bool set = std::string(f) == "late_nodes" ? absl::GetFlag(FLAGS_late_nodes) != 0
                                                      : !absl::GetFlag(FLAGS_write_config).empty();
      if (set) return absl::InvalidArgumentError(absl::StrCat("--", f, " goes with --local"));
    }
  }
  const int late = absl::GetFlag(FLAGS_late_nodes);
  if (late < 0 || local + 1 + late > 64) {
    return absl::InvalidArgumentError(
        "--late_nodes must be 0 or more, with at most 64 nodes in all (--local + 1 + "
        "--late_nodes)");
  }
  if (!absl::GetFlag(FLAGS_provider).empty()) {
    if (absl::Status s = CheckProvider(absl::GetFlag(FLAGS_provider)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--provider: ", s.message()));
    }
  }
  if (!absl::GetFlag(FLAGS_endpoint).empty()) {
    if (absl::Status s = ParseEndpointType(absl::GetFlag(FLAGS_endpoint)).status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--endpoint: ", s.message()));
    }
  }
  if (absl::Status s = ParsePollMode(absl::GetFlag(FLAGS_poll)).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--poll: ", s.message()));
  }
  if (absl::GetFlag(FLAGS_ring_size) <= 0) {
    return absl::InvalidArgumentError("--ring_size must be positive");
  }
  if (absl::GetFlag(FLAGS_join_timeout_s) <= 0 || absl::GetFlag(FLAGS_ready_timeout_s) <= 0) {
    return absl::InvalidArgumentError("--join_timeout_s and --ready_timeout_s must be positive");
  }
  const uint32_t bb = absl::GetFlag(FLAGS_kv_bucket_bytes);
  if (bb < 128 || bb > 4096 || (bb & (bb - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_bucket_bytes must be a power of two from 128 to 4096, not ", bb));
  }
  const uint32_t h = absl::GetFlag(FLAGS_kv_neighbourhood);
  if (h < 1 || h > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_neighbourhood must be 1 to 64 buckets, not ", h));
  }
  if (local > 0 && absl::GetFlag(FLAGS_kv_buckets) == 0) {
    return absl::InvalidArgumentError("--kv_buckets must be at least 1");
  }
  if (local > 0) {
    const int64_t region = absl::GetFlag(FLAGS_region_size);
    if (region <= 0 || region % 4096 != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--region_size must be a positive multiple of 4096, not ", region));
    }
    if (absl::GetFlag(FLAGS_region_count) < 1) {
      return absl::InvalidArgumentError("--region_count must be at least 1");
    }
  }
  return absl::OkStatus();
}

namespace {

// The node ids the tool may join as: --node_id, or every late node of the configuration.
absl::StatusOr<std::vector<int>> CandidateIds(const SessionTool& tool,
                                              const std::string& config_path) {
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(config_path);
  if (!cfg.ok()) return cfg.status();
  const int id = absl::GetFlag(FLAGS_node_id);
  if (id >= 0) {
    const config::NodeConfig* n = FindNode(*cfg, static_cast<uint32_t>(id));
    if (n == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--node_id=", id, " is not listed in ", config_path));
    }
    if (!n->late()) {
      spdlog::warn(
          "node {} is not marked late in {}: the cluster counts on it to form (and {} holds no "
          "shard)",
          id, config_path, tool.noun);
    }
    return std::vector<int>{id};
  }
  std::vector<int> ids;
  for (const config::NodeConfig& n : cfg->node()) {
    if (n.late()) ids.push_back(static_cast<int>(n.id()));
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path, " lists no late node for ", tool.noun,
        " to join as: pass --node_id=N, or give the cluster "
        "client slots (`late: true` nodes; //tools:cluster --late_nodes=1 --write_config=FILE)"));
  }
  return ids;
}

// Joins as the first of `ids` that is free. Exits the process when the wait is given up.
absl::StatusOr<std::unique_ptr<Runtime>> JoinCluster(const SessionTool& tool,
                                                     const std::string& config_path,
                                                     const std::vector<int>& ids, int signal_fd,
                                                     LocalCluster* local) {
  RuntimeOptions o;
  o.config_path = config_path;
  if (local == nullptr) o.provider = absl::GetFlag(FLAGS_provider);
  if (local == nullptr) o.endpoint = absl::GetFlag(FLAGS_endpoint);
  o.poll = absl::GetFlag(FLAGS_poll);
  // Every node of a cluster has the same messaging lanes (one per Worker) and ring size.
  o.workers = absl::GetFlag(FLAGS_workers);
  o.ring_size = static_cast<uint64_t>(absl::GetFlag(FLAGS_ring_size));
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  Joiner joiner(tool, signal_fd, local);
  absl::Status last;
  for (int id : ids) {
    o.node_id = id;
    spdlog::info("joining the cluster of {} as node {}", config_path, id);
    absl::StatusOr<std::unique_ptr<Runtime>> rt = joiner.Join(o, timeout);
    if (rt.ok()) return rt;
    last = rt.status();
    // Taken by another client: try the next slot.
    if (ids.size() > 1 && absl::StrContains(rt.status().message(), "is already a member")) {
      spdlog::info("node {} is taken: {}", id, std::string(rt.status().message()));
      continue;
    }
    return rt.status();
  }
  return absl::FailedPreconditionError(
      absl::StrCat("every late node of ", config_path, " (", absl::StrJoin(ids, ", "),
                   ") is taken by another client: ", last.message()));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// --local: the serving node processes.

absl::Status LocalCluster::Configure(int n, int late_slots) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = absl::StrCat(base, "/", tool_, ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a temporary directory ", pattern, ": ", std::strerror(errno)));
  }
  dir_ = pattern;
  const std::string provider =
      absl::GetFlag(FLAGS_provider).empty() ? "auto" : absl::GetFlag(FLAGS_provider);
  absl::StatusOr<config::ClusterConfig> c =
      LocalClusterConfig(n + 1 + late_slots, provider, absl::GetFlag(FLAGS_host));
  if (!c.ok()) return c.status();
  c->set_region_size(static_cast<uint64_t>(absl::GetFlag(FLAGS_region_size)));
  c->set_region_count(static_cast<uint32_t>(absl::GetFlag(FLAGS_region_count)));
  c->set_lock_memory(absl::GetFlag(FLAGS_lock_memory));
  if (!absl::GetFlag(FLAGS_endpoint).empty()) c->set_endpoint(absl::GetFlag(FLAGS_endpoint));
  for (config::NodeConfig& node : *c->mutable_node()) {
    node.set_late(node.id() >= static_cast<uint32_t>(n));
  }
  if (absl::Status s = ValidateAndComplete(&*c); !s.ok()) return s;
  config_ = *c;
  serving_ = n;
  config_path_ = absl::StrCat(dir_, "/cluster.textproto");
  std::ofstream f(config_path_);
  f << ToText(config_);
  f.close();
  if (!f.good()) return absl::UnavailableError(absl::StrCat("cannot write ", config_path_));
  return absl::OkStatus();
}

absl::Status LocalCluster::Launch(const std::string& node_binary,
                                  const std::vector<std::string>& extra) {
  std::string level = absl::GetFlag(FLAGS_log_level);
  if (level != "trace" && level != "debug") level = "info";  // the nodes' logs go to files
  for (int id = 0; id < serving_; ++id) {
    std::vector<std::string> args = {
        node_binary,
        absl::StrCat("--config=", config_path_),
        absl::StrCat("--node_id=", id),
        "--control_stdin",
        "--kv",
        absl::StrCat("--kv_buckets=", absl::GetFlag(FLAGS_kv_buckets)),
        absl::StrCat("--kv_bucket_bytes=", absl::GetFlag(FLAGS_kv_bucket_bytes)),
        absl::StrCat("--kv_neighbourhood=", absl::GetFlag(FLAGS_kv_neighbourhood)),
        absl::StrCat("--poll=", absl::GetFlag(FLAGS_poll)),
        absl::StrCat("--ring_size=", absl::GetFlag(FLAGS_ring_size)),
        absl::StrCat("--workers=", absl::GetFlag(FLAGS_workers)),
        absl::StrCat("--log_level=", level)};
    args.insert(args.end(), extra.begin(), extra.end());
    if (absl::Status s = Spawn(id, args); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Waits until every node printed READY. Fails when one exits first (with its log), on a signal
// (Cancelled, the message names it) or at the deadline.
absl::Status LocalCluster::WaitReady(int signal_fd, absl::Time deadline) {
  for (;;) {
    bool all = true;
    for (const Child& c : children_) all &= c.ready;
    if (all) return absl::OkStatus();
    std::vector<ChildProcess*> waiting;  // for READY; the others' output is not read
    for (const Child& c : children_) waiting.push_back(c.ready ? nullptr : c.proc.get());
    std::vector<std::vector<std::string>> lines;
    absl::StatusOr<int> signal =
        WaitForChildOutput(waiting, signal_fd, absl::Milliseconds(100), &lines);
    if (!signal.ok()) return signal.status();
    if (*signal != 0) return absl::CancelledError(absl::StrCat("signal ", *signal));
    for (size_t i = 0; i < children_.size(); ++i) {
      for (const std::string& line : lines[i]) {
        children_[i].ready |= absl::StartsWith(line, "READY ");
      }
    }
    std::string logs;
    if (std::optional<std::string> dead = CheckChildren(&logs); dead.has_value()) {
      return absl::AbortedError(absl::StrCat(*dead, "\n", logs));
    }
    if (absl::Now() > deadline) {
      std::vector<std::string> waiting;
      for (const Child& c : children_) {
        if (!c.ready) waiting.push_back(absl::StrCat(c.id));
      }
      failed_ = true;
      return absl::DeadlineExceededError(absl::StrCat(
          "node(s) ", absl::StrJoin(waiting, ", "), " did not become ready within ",
          absl::GetFlag(FLAGS_ready_timeout_s), " s (--ready_timeout_s)\nthe log of node ",
          waiting[0], " (", LogPath(std::stoi(waiting[0])), ") ends with:\n",
          Tail(LogPath(std::stoi(waiting[0])), 10)));
    }
  }
}

// Which nodes exited since the last call ("node 1 was killed by signal 9"), or nothing; the
// end of each one's log goes to `logs`.
std::optional<std::string> LocalCluster::CheckChildren(std::string* logs) {
  std::vector<std::string> gone;
  for (Child& c : children_) {
    std::string how;
    if (!c.proc->Exited(&how)) continue;  // running, or reaped and reported before
    failed_ = true;
    gone.push_back(absl::StrCat("node ", c.id, " ", how, c.ready ? "" : " before it was ready"));
    absl::StrAppend(logs, "the log of node ", c.id, " (", LogPath(c.id), ") ends with:\n",
                    Tail(LogPath(c.id), 10));
  }
  if (gone.empty()) return std::nullopt;
  if (!logs->empty() && logs->back() == '\n') logs->pop_back();
  return absl::StrJoin(gone, "; ");
}

// Stops every node: closes its input, so that it leaves the cluster; SIGTERM after a grace
// period (at once for a node that is not ready: it is still joining and reads no input);
// SIGKILL after another. Removes the temporary directory (configuration and logs).
std::string LocalCluster::LogPath(uint32_t id) const {
  return absl::StrCat(dir_, "/node-", id, ".log");
}

void LocalCluster::Stop() {
  const absl::Time now = absl::Now();
  for (Child& c : children_) {
    c.proc->CloseStdin();
    c.term_at = c.ready ? now + absl::Seconds(5) : now;
  }
  for (;;) {
    bool all = true;
    for (Child& c : children_) {
      std::string how;
      if (c.proc->reaped() || c.proc->Exited(&how)) continue;
      all = false;
      if (!c.termed && absl::Now() >= c.term_at) {
        if (c.ready) spdlog::warn("node {} did not leave within 5 s; sending SIGTERM", c.id);
        c.proc->Kill(SIGTERM);
        c.termed = true;
      } else if (c.termed && absl::Now() >= c.term_at + absl::Seconds(3)) {
        spdlog::warn("node {} did not stop; killing it", c.id);
        c.proc->Kill(SIGKILL);
        c.proc->Stop(absl::ZeroDuration());  // reaps it
      }
    }
    if (all) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  children_.clear();  // every one reaped: their ChildProcess closes what is left
  if (!dir_.empty()) {
    if (failed_) {
      // The logs of a node that failed outlive the tool.
      spdlog::warn("the nodes' logs are kept in {}", dir_);
    } else {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
    dir_.clear();
  }
}

// Starts node `id` (args[0] is the binary). Its standard error goes to its log file. Never
// outlives the tool (ChildProcess: PR_SET_PDEATHSIG with SIGTERM, which lets the shm provider
// remove its files); a process group of its own, so that Ctrl-C at the tool's terminal is the
// tool's, not the nodes'.
absl::Status LocalCluster::Spawn(uint32_t id, const std::vector<std::string>& args) {
  ChildProcess::Options options;
  options.stderr_path = LogPath(id);
  options.own_process_group = true;
  absl::StatusOr<std::unique_ptr<ChildProcess>> proc = ChildProcess::SpawnCommand(args, options);
  if (!proc.ok()) return absl::UnavailableError(proc.status().message());
  children_.push_back(Child{id, std::move(*proc)});
  return absl::OkStatus();
}

KvSession::~KvSession() {
  // Leave the cluster before the local nodes stop.
  worker.reset();
  runtime.reset();
  store.reset();
  local.reset();
}

KvSession OpenKvSession(const SessionTool& tool, int signal_fd,
                        const std::vector<std::string>& node_args) {
  KvSession session;
  auto fail = [&session](int code) {
    session.exit_code = code;
    return std::move(session);
  };
  const int local_nodes = absl::GetFlag(FLAGS_local);
  std::unique_ptr<LocalCluster>& local = session.local;
  std::string config_path;
  std::vector<int> ids;
  if (local_nodes > 0) {
    std::string node_binary = UserPath(absl::GetFlag(FLAGS_node_binary));
    if (node_binary.empty()) node_binary = DefaultNodeBinary();
    if (access(node_binary.c_str(), X_OK) != 0) {
      spdlog::error("node binary {} is not executable; build //tools:node or pass --node_binary",
                    node_binary);
      return fail(kExitUsage);
    }
    local = std::make_unique<LocalCluster>(tool.name);
    if (absl::Status s = local->Configure(local_nodes, absl::GetFlag(FLAGS_late_nodes)); !s.ok()) {
      spdlog::error("cannot configure the local cluster: {}", std::string(s.message()));
      return fail(kExitUsage);
    }
    spdlog::info("starting {} node(s), provider {}, configuration {}", local_nodes,
                 local->config().provider(), local->config_path());
    absl::Status s = local->Launch(node_binary, node_args);
    if (s.ok()) {
      s = local->WaitReady(signal_fd,
                           absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_ready_timeout_s)));
    }
    if (!s.ok()) {
      if (absl::IsCancelled(s)) {
        spdlog::error("stopped by {} while the cluster started", std::string(s.message()));
        local->Stop();
        return fail(128 + std::stoi(std::string(absl::StripPrefix(s.message(), "signal "))));
      }
      spdlog::error("the local cluster did not start: {}", std::string(s.message()));
      local->Stop();
      return fail(kExitUsage);
    }
    config_path = local->config_path();
    ids = {local_nodes};
  } else {
    config_path = UserPath(absl::GetFlag(FLAGS_config));
    absl::StatusOr<std::vector<int>> c = CandidateIds(tool, config_path);
    if (!c.ok()) {
      spdlog::error("{}", std::string(c.status().message()));
      return fail(kExitUsage);
    }
    ids = *c;
  }

  absl::StatusOr<std::unique_ptr<Runtime>> rt =
      JoinCluster(tool, config_path, ids, signal_fd, local.get());
  if (!rt.ok()) {
    const std::string why(rt.status().message());
    std::string hint;
    if (absl::StrContains(why, "messaging area")) {
      hint = absl::StrCat(" (", tool.name,
                          "'s --workers and --ring_size must be the cluster's nodes')");
    }
    spdlog::error("could not join the cluster: {}{}", why, hint);
    return fail(kExitUsage);
  }
  session.runtime = std::move(*rt);
  kv::Options options;
  options.hold_shard = false;
  options.buckets = absl::GetFlag(FLAGS_kv_buckets);
  options.bucket_bytes = absl::GetFlag(FLAGS_kv_bucket_bytes);
  options.neighbourhood = absl::GetFlag(FLAGS_kv_neighbourhood);
  absl::StatusOr<std::unique_ptr<kv::Store>> store = kv::Store::Create(*session.runtime, options);
  if (!store.ok()) {
    spdlog::error("cannot use the key-value store: {}", std::string(store.status().message()));
    return fail(kExitUsage);
  }
  session.store = std::move(*store);
  session.runtime->Serve();
  absl::StatusOr<std::unique_ptr<Worker>> worker = session.runtime->NewWorker();
  if (!worker.ok()) {
    spdlog::error("cannot make a worker: {}", std::string(worker.status().message()));
    return fail(kExitUsage);
  }
  session.worker = std::move(*worker);
  // The store must answer before the first command: this finds the shard nodes (and a cluster
  // whose nodes hold no shard, or use other --kv_* options, is said so here).
  absl::StatusOr<std::vector<kv::ShardStats>> shards =
      kv::Client(*session.store, *session.worker).Stats();
  if (absl::IsDataLoss(shards.status())) {
    // A shard node restarted and lost its keys (kv/kv.h, "Durability"): the other shards still
    // serve theirs, and each command on a lost key says DataLoss.
    spdlog::warn("{}", std::string(shards.status().message()));
  } else if (!shards.ok()) {
    std::string hint;
    if (absl::IsFailedPrecondition(shards.status())) {
      hint = absl::StrCat(" (", tool.name,
                          "'s --kv_bucket_bytes and --kv_neighbourhood must be the cluster's)");
    }
    spdlog::error("the key-value store does not answer: {}{}",
                  std::string(shards.status().message()), hint);
    return fail(kExitUsage);
  } else {
    for (const kv::ShardStats& s : *shards) session.shard_nodes.push_back(absl::StrCat(s.node));
  }
  if (local != nullptr && !absl::GetFlag(FLAGS_write_config).empty()) {
    const std::string out = UserPath(absl::GetFlag(FLAGS_write_config));
    const std::string tmp = absl::StrCat(out, ".tmp");
    std::ofstream f(tmp);
    f << ToText(local->config());
    f.close();
    if (!f.good() || std::rename(tmp.c_str(), out.c_str()) != 0) {
      spdlog::error("--write_config: cannot write {}", out);
      return fail(kExitUsage);
    }
    spdlog::info("wrote the cluster's configuration to {}", out);
  }
  return session;
}

}  // namespace kvsh
}  // namespace farm
