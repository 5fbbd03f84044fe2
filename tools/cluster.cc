// cluster: starts a local cluster of node processes, reports when it is ready, runs the
// self-check across every ordered pair of nodes, and stops every node on Ctrl-C or SIGTERM.
//
//   bazel run //tools:cluster -- --nodes=3 --provider=shm
//   bazel run //tools:cluster -- --nodes=3 --exit_after_check     # the README's main job
//
// Arguments after `--` go to every node process: an application's own flags, e.g.
//
//   bazel run //examples:bank_cluster -- --nodes=3 -- --accounts=50 --duration_s=1
//
// Nodes can also be placed in network namespaces (--netns=ns0,ns1,ns2 with --hosts=addresses in
// them), which is how the multi-node tests use veth-connected test hosts.
//
// The supervisor talks to its nodes through their standard input and output (see tools/node.cc):
// it waits for every READY line, then asks one node at a time to run the self-check (so that no
// two checkers write the same bytes) and prints the results as a table or as JSON lines.
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/config.h"
#include "platform/control_channel.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/zookeeper_server.h"
#include "spdlog/spdlog.h"
#include "tools/child_process.h"

ABSL_FLAG(int, nodes, 3, "number of node processes");
ABSL_FLAG(std::string, provider, "auto", "fabric provider: auto, verbs, tcp;ofi_rxm, tcp, shm");
ABSL_FLAG(std::string, endpoint, "auto", "endpoint type: auto, rdm or msg (verbs and tcp only)");
ABSL_FLAG(std::string, poll, "adaptive", "nodes' polling mode: busy or adaptive");
ABSL_FLAG(std::string, host, "127.0.0.1", "address every node binds to (when --hosts is empty)");
ABSL_FLAG(std::vector<std::string>, hosts, {}, "per-node addresses, comma separated");
ABSL_FLAG(std::vector<std::string>, netns, {},
          "per-node network namespaces, comma separated (run nodes with `ip netns exec`)");
ABSL_FLAG(int, base_port, 0, "first control port (node i uses base_port+i); 0 picks free ports");
ABSL_FLAG(int64_t, region_size, 1 << 20, "bytes per region");
ABSL_FLAG(int, region_count, 2, "regions per node");
ABSL_FLAG(bool, lock_memory, true, "lock regions in RAM");
ABSL_FLAG(bool, self_check, true, "run the READ/WRITE self-check across every pair");
ABSL_FLAG(bool, exit_after_check, false, "stop the cluster after the self-check");
ABSL_FLAG(bool, json, false, "print results as JSON lines instead of a table");
ABSL_FLAG(int, ready_timeout_s, 60, "seconds to wait for every node to be ready");
ABSL_FLAG(std::string, node_binary, "",
          "node executable: //tools:node (the default, beside this binary) or a cluster "
          "application built with farm_app (//:defs.bzl), which then runs on every node");
ABSL_FLAG(int, app_timeout_s, 600, "seconds an application may run before the cluster is stopped");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error or off");
ABSL_FLAG(int, lease_ms, 0,
          "the nodes' lease with the configuration manager (0: the configuration's default, "
          "3000); longer on slow or overloaded machines, where healthy nodes can miss it");
ABSL_FLAG(std::optional<int>, f, std::nullopt,
          "backups per data region (FaRM's f; 0: no fault tolerance). Default: 1 with 3 or more "
          "failure domains, else 0. Each launched node is its own failure domain "
          "(\"process N\") unless --hosts names different hosts, so a cluster on one host "
          "tolerates the failure of f node processes, not of the host");
ABSL_FLAG(int, late_nodes, 0,
          "extra node ids after the launched ones, marked `late` in the configuration: not "
          "launched, not needed to form; clients (//tools:kvsh, //tools:kvbench) attach as them");
ABSL_FLAG(std::string, zookeeper, "",
          "record the cluster's configuration in ZooKeeper, so that another node takes the "
          "configuration manager's role over when its node fails: 'local' starts a ZooKeeper "
          "(Debian's zookeeper) for the cluster's lifetime, host:port,... uses those servers; "
          "empty: none (the configuration manager's node is then a single point of failure)");
ABSL_FLAG(std::string, cluster_name, "farm",
          "the cluster's name in ZooKeeper (its record is /farm/<name>/configuration)");
ABSL_FLAG(std::string, data_dir, "",
          "keep every node's regions in files under this directory (node-<id>, one per node): "
          "stopping the cluster (Ctrl-C, SIGTERM, or its application's end) writes them to disk, "
          "and a cluster started again with the same directory, --nodes, --region_size and "
          "--region_count serves every committed object again. Skips the self-check (it writes "
          "a pattern over the regions)");
ABSL_FLAG(std::string, write_config, "",
          "also write the cluster's configuration here, for clients that attach (--late_nodes)");

namespace farm {
namespace {

struct Child {
  uint32_t id = 0;
  std::unique_ptr<ChildProcess> proc;  // its standard input takes commands; output: READY etc.
  bool ready = false;
  std::string app;        // the application it runs ("" for a plain node)
  bool app_done = false;  // it printed APP_DONE
  bool gone = false;      // exited while the cluster held, which it survives (Hold)
  bool app_ok = false;
  std::string app_error;
};

class Cluster {
 public:
  ~Cluster() { Stop(); }

  absl::Status Configure() {
    const int n = absl::GetFlag(FLAGS_nodes);
    if (n < 1 || n > 64) return absl::InvalidArgumentError("--nodes must be between 1 and 64");
    std::vector<std::string> hosts = absl::GetFlag(FLAGS_hosts);
    netns_ = absl::GetFlag(FLAGS_netns);
    if (!hosts.empty() && hosts.size() != static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--hosts lists ", hosts.size(), " addresses for ", n, " nodes"));
    }
    if (!netns_.empty() && netns_.size() != static_cast<size_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--netns lists ", netns_.size(), " namespaces for ", n, " nodes"));
    }
    config::ClusterConfig c;
    c.set_provider(absl::GetFlag(FLAGS_provider));
    c.set_endpoint(absl::GetFlag(FLAGS_endpoint));
    c.set_region_size(static_cast<uint64_t>(absl::GetFlag(FLAGS_region_size)));
    c.set_region_count(static_cast<uint32_t>(absl::GetFlag(FLAGS_region_count)));
    c.set_lock_memory(absl::GetFlag(FLAGS_lock_memory));
    if (absl::GetFlag(FLAGS_lease_ms) != 0) c.set_lease_ms(absl::GetFlag(FLAGS_lease_ms));
    if (const std::optional<int> f = absl::GetFlag(FLAGS_f); f.has_value()) {
      if (*f < 0) return absl::InvalidArgumentError("--f must be 0 or more");
      c.set_f(static_cast<uint32_t>(*f));
    }
    if (std::string zk = absl::GetFlag(FLAGS_zookeeper); !zk.empty()) {
      if (zk == "local") {
        // On the main thread, which outlives it: the server dies with the thread that started it.
        absl::StatusOr<std::unique_ptr<ZooKeeperServer>> started = ZooKeeperServer::Start();
        if (!started.ok()) {
          return absl::Status(started.status().code(),
                              absl::StrCat("--zookeeper=local: cannot start a ZooKeeper: ",
                                           started.status().message()));
        }
        zk_ = std::move(*started);
        zk = zk_->connect_string();
        spdlog::info("ZooKeeper for the cluster's configuration at {}", zk);
      }
      c.set_zookeeper(zk);
      c.set_cluster_name(absl::GetFlag(FLAGS_cluster_name));
    }
    const int base_port = absl::GetFlag(FLAGS_base_port);
    const int late = absl::GetFlag(FLAGS_late_nodes);
    if (late < 0 || n + late > 64) {
      return absl::InvalidArgumentError("--late_nodes must be 0 or more, at most 64 nodes in all");
    }
    // Free ports for the nodes without --base_port and for late nodes, held until all are
    // chosen (ListenOnFreePorts), closed right before the nodes bind them.
    absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> held =
        ListenOnFreePorts("127.0.0.1", (base_port > 0 ? 0 : n) + late);
    if (!held.ok()) return held.status();
    size_t next_free = 0;
    for (int i = 0; i < n; ++i) {
      config::NodeConfig* node = c.add_node();
      node->set_id(i);
      node->set_host(hosts.empty() ? absl::GetFlag(FLAGS_host) : hosts[i]);
      node->set_control_port(base_port > 0 ? base_port + i : (*held)[next_free++]->port());
      // Processes on one host fail alone (a crash, a kill): each is a failure domain of its own,
      // unless the nodes are on different hosts, which are then the domains.
      if (hosts.empty()) node->set_failure_domain(absl::StrCat("process ", i));
    }
    for (int i = n; i < n + late; ++i) {
      config::NodeConfig* node = c.add_node();
      node->set_id(i);
      node->set_host(absl::GetFlag(FLAGS_host));
      node->set_late(true);
      node->set_control_port((*held)[next_free++]->port());
    }
    held->clear();  // the nodes bind these ports next
    absl::Status s = ValidateAndComplete(&c);
    if (!s.ok()) return s;
    config_ = c;

    char tmpl[] = "/tmp/farm-cluster-XXXXXX";
    const char* tmpdir = std::getenv("TEST_TMPDIR");
    std::string pattern = tmpdir ? absl::StrCat(tmpdir, "/farm-cluster-XXXXXX") : tmpl;
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) {
      return absl::UnavailableError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    dir_ = buf.data();
    config_path_ = dir_ + "/cluster.textproto";
    std::ofstream(config_path_) << ToText(config_);
    if (const std::string out = absl::GetFlag(FLAGS_write_config); !out.empty()) {
      std::ofstream f(out);
      f << ToText(config_);
      if (!f.good()) {
        return absl::InvalidArgumentError(absl::StrCat("--write_config: cannot write ", out));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Launch(const std::string& node_binary, const std::vector<std::string>& node_args,
                      int signal_fd) {
    signal_fd_ = signal_fd;
    for (const config::NodeConfig& n : config_.node()) {
      if (n.late()) continue;  // clients start these themselves
      absl::Status s = Spawn(node_binary, node_args, n.id());
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Waits until every node printed READY. Fails if one exits, on a signal, or on timeout.
  absl::Status WaitReady(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!AllReady()) {
      absl::Status s = Pump(deadline, nullptr);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Runs the self-check on each node in turn; returns the JSON lines of all pairs.
  absl::StatusOr<std::vector<std::string>> SelfCheck(absl::Duration timeout) {
    std::vector<std::string> results;
    for (Child& c : children_) {
      const std::string cmd = "selfcheck\n";
      if (!c.proc->Send(cmd).ok()) {
        return absl::UnavailableError(absl::StrCat("node ", c.id, " does not take commands"));
      }
      const absl::Time deadline = absl::Now() + timeout;
      bool done = false;
      while (!done) {
        std::vector<std::pair<uint32_t, std::string>> lines;
        absl::Status s = Pump(deadline, &lines);
        if (!s.ok()) return s;
        for (auto& [id, line] : lines) {
          if (id != c.id) continue;
          if (absl::StartsWith(line, "SELFCHECK_DONE")) done = true;
          if (absl::StartsWith(line, "SELFCHECK {")) results.push_back(line.substr(10));
        }
      }
    }
    return results;
  }

  // Application mode (the nodes printed "app" in READY): waits until every node reported
  // APP_DONE and exited (each leaves once all have finished). Returns how many failed.
  absl::StatusOr<int> WaitApps(absl::Duration timeout) {
    expect_exits_ = true;
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      bool all = true;
      for (const Child& c : children_) all &= c.proc->reaped();
      if (all) break;
      absl::Status s = Pump(deadline, nullptr);
      if (!s.ok()) return s;
    }
    int failed = 0;
    for (const Child& c : children_) {
      const int status = c.proc->wait_status();
      const bool ok = c.app_done && c.app_ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        ++failed;
        spdlog::error("node {}: {}", c.id,
                      !c.app_done ? absl::StrCat("exited before its application finished (",
                                                 DescribeWaitStatus(status), ")")
                      : !c.app_ok ? absl::StrCat("application failed: ", c.app_error)
                                  : DescribeWaitStatus(status));
      }
    }
    return failed;
  }

  // The application the nodes run, or "" for plain nodes.
  std::string app() const { return children_.empty() ? "" : children_[0].app; }

  // Blocks until a signal arrives or a node exits on its own.
  // A node that exits ends it too, unless the cluster survives failures (--f > 0, or its
  // configuration in ZooKeeper, where another node takes the CM's role over): then the exit is
  // logged and the others go on, until none is left.
  absl::Status Hold() {
    holding_ = true;
    for (;;) {
      absl::Status s = Pump(absl::InfiniteFuture(), nullptr);
      if (!s.ok()) return s;
    }
  }

  // Stops every node: tells each that the whole cluster stops ("end": the members leave with their
  // regions, nothing is promoted or reported lost, the CM's node last, within a lease), then
  // SIGTERM for those still running after that, then SIGKILL. Removes the temp directory.
  void Stop() {
    for (Child& c : children_) {
      if (!c.proc->reaped()) (void)c.proc->Send("end\n");  // one that exited cannot take it
    }
    // A node with a data directory first waits (a lease at most) until nothing is locked in its
    // regions, and the CM's node then waits (a lease at most) for the others to leave.
    const uint32_t lease_ms = config_.lease_ms() != 0 ? config_.lease_ms() : 10000;
    WaitStopped(2 * absl::Milliseconds(lease_ms) + absl::Seconds(5), /*then=*/SIGTERM);
    WaitStopped(absl::Seconds(5), /*then=*/SIGKILL);
    children_.clear();  // every one reaped: their ChildProcess closes what is left
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  const config::ClusterConfig& config() const { return config_; }
  const std::string& config_path() const { return config_path_; }
  std::string provider_opened() const { return provider_opened_; }

 private:
  // Node `id`'s data directory under --data_dir (absolute), or "" without one.
  static std::string DataDirOf(uint32_t id) {
    std::string root = absl::GetFlag(FLAGS_data_dir);
    if (root.empty()) return "";
    const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");  // under `bazel run`
    if (root[0] != '/') root = absl::StrCat(user_dir != nullptr ? user_dir : ".", "/", root);
    return absl::StrCat(root, "/node-", id);
  }

  // Waits up to `grace` for every node to exit (reaping each), then sends `then` to those that did
  // not (SIGKILL: also reaps them).
  void WaitStopped(absl::Duration grace, int then) {
    const absl::Time deadline = absl::Now() + grace;
    for (Child& c : children_) {
      std::string how;
      while (!c.proc->reaped() && !c.proc->Exited(&how) && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    for (Child& c : children_) {
      std::string how;
      if (c.proc->reaped() || c.proc->Exited(&how)) continue;
      spdlog::warn("node {} did not stop within {}; sending {}", c.id, absl::FormatDuration(grace),
                   then == SIGKILL ? "SIGKILL" : "SIGTERM");
      c.proc->CloseStdin();
      c.proc->Kill(then);
      if (then == SIGKILL) c.proc->Stop(absl::ZeroDuration());  // reaps it
    }
  }

  absl::Status Spawn(const std::string& node_binary, const std::vector<std::string>& node_args,
                     uint32_t id) {
    std::vector<std::string> args;
    if (!netns_.empty()) args = {"ip", "netns", "exec", netns_[id]};
    for (std::string a :
         {node_binary, absl::StrCat("--config=", config_path_), absl::StrCat("--node_id=", id),
          std::string("--control_stdin"), absl::StrCat("--poll=", absl::GetFlag(FLAGS_poll)),
          absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))}) {
      args.push_back(a);
    }
    // The self-check's pattern; a node with a data directory keeps what its regions hold.
    const std::string data_dir = DataDirOf(id);
    args.push_back(data_dir.empty() ? std::string("--fill_pattern")
                                    : absl::StrCat("--data_dir=", data_dir));
    args.insert(args.end(), node_args.begin(), node_args.end());
    // A node never outlives its supervisor, even one killed with SIGKILL (ChildProcess). Its own
    // process group: a Ctrl-C reaches the supervisor only, which stops the cluster as a whole.
    ChildProcess::Options options;
    options.own_process_group = true;
    absl::StatusOr<std::unique_ptr<ChildProcess>> proc = ChildProcess::SpawnCommand(args, options);
    if (!proc.ok()) return absl::UnavailableError(proc.status().message());
    children_.push_back(Child{id, std::move(*proc)});
    return absl::OkStatus();
  }

  bool AllReady() const {
    for (const Child& c : children_) {
      if (!c.ready) return false;
    }
    return true;
  }

  // Waits for output from any node (or a signal) until `deadline`; collects complete lines.
  absl::Status Pump(absl::Time deadline, std::vector<std::pair<uint32_t, std::string>>* lines) {
    std::vector<ChildProcess*> procs;
    std::vector<Child*> running;
    for (Child& c : children_) {
      if (c.gone) continue;
      procs.push_back(c.proc.get());
      running.push_back(&c);
    }
    if (running.empty()) return absl::AbortedError("every node exited");
    std::vector<std::vector<std::string>> got;
    absl::StatusOr<int> signal = WaitForChildOutput(
        procs, signal_fd_,
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), absl::Seconds(1)), &got);
    if (!signal.ok()) return signal.status();
    if (*signal != 0) return absl::CancelledError(absl::StrCat("stopping on signal ", *signal));
    bool any = false;
    for (size_t i = 0; i < running.size(); ++i) {
      for (const std::string& line : got[i]) {
        any = true;
        OnLine(*running[i], line);
        if (lines != nullptr) lines->emplace_back(running[i]->id, line);
      }
    }
    for (Child* c : running) {
      std::string how;
      if (!c->proc->Exited(&how) || expect_exits_) continue;
      if (!holding_ || !SurvivesFailures()) {
        return absl::AbortedError(
            absl::StrCat("node ", c->id, " ", how, " (its log above says why)"));
      }
      c->gone = true;
      spdlog::warn("node {} {} (its log above says why); the others go on ({})", c->id, how,
                   config_.f() > 0 ? absl::StrCat("f = ", config_.f())
                                   : std::string("the CM's role is taken over through ZooKeeper"));
    }
    if (!any && absl::Now() >= deadline) {
      std::string missing;
      for (const Child& c : children_) {
        if (!c.ready) absl::StrAppend(&missing, missing.empty() ? "" : ", ", c.id);
      }
      return absl::DeadlineExceededError(
          missing.empty() ? "nodes did not answer in time"
                          : absl::StrCat("node(s) ", missing, " did not become ready in time"));
    }
    return absl::OkStatus();
  }

  void OnLine(Child& c, const std::string& line) {
    if (absl::StartsWith(line, "APP_DONE ")) {
      c.app_done = true;
      c.app_ok = absl::StrContains(line, "\"ok\":true");
      const size_t p = line.find("\"error\":\"");
      if (p != std::string::npos) {
        c.app_error = line.substr(p + 9, line.size() - p - 9 - 2);  // up to the closing "}
      }
      return;
    }
    if (!absl::StartsWith(line, "READY ") && !absl::StartsWith(line, "SELFCHECK")) {
      // The application's own output: passed through, marked with its node.
      if (absl::GetFlag(FLAGS_json)) {
        std::fprintf(stderr, "[node %u] %s\n", c.id, line.c_str());
      } else {
        std::printf("[node %u] %s\n", c.id, line.c_str());
        std::fflush(stdout);
      }
      return;
    }
    if (absl::StartsWith(line, "READY ")) {
      c.ready = true;
      const size_t a = line.find("\"app\":\"");
      if (a != std::string::npos) c.app = line.substr(a + 7, line.find('"', a + 7) - a - 7);
      size_t p = line.find("\"provider\":\"");
      if (p != std::string::npos) {
        size_t start = p + 12;
        provider_opened_ = line.substr(start, line.find('"', start) - start);
      }
    }
  }

  std::unique_ptr<ZooKeeperServer> zk_;  // --zookeeper=local; destroyed after the nodes stopped
  config::ClusterConfig config_;
  std::vector<std::string> netns_;
  std::string dir_;
  std::string config_path_;
  std::string provider_opened_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  bool expect_exits_ = false;  // nodes leave on their own (application mode)
  bool holding_ = false;       // Hold runs: the cluster is up
  bool SurvivesFailures() const { return config_.f() > 0 || !config_.zookeeper().empty(); }
};

// Extracts a field from the flat JSON objects the nodes print.
std::string Field(const std::string& json, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  size_t p = json.find(k);
  if (p == std::string::npos) return "";
  p += k.size();
  if (json[p] == '"') {
    size_t end = p + 1;
    while (end < json.size() && (json[end] != '"' || json[end - 1] == '\\')) ++end;
    return json.substr(p + 1, end - p - 1);
  }
  size_t end = json.find_first_of(",}", p);
  return json.substr(p, end - p);
}

int PrintResults(const std::vector<std::string>& results, bool json) {
  int passed = 0;
  if (!json) {
    std::printf(
        "\nSelf-check: one-sided READ and WRITE of 256 B at both ends of every region, "
        "verified byte for byte\n");
    absl::PrintF("%5s %4s  %-16s %-16s %-7s %9s\n", "from", "to", "READ (p50)", "WRITE (p50)",
                 "bounds", "verified");
  }
  for (const std::string& r : results) {
    const bool ok = Field(r, "ok") == "true";
    passed += ok;
    if (json) {
      std::printf("%s\n", r.c_str());
      continue;
    }
    auto cell = [&](const char* flag, const char* lat) {
      return absl::StrFormat("%-4s %8s us", Field(r, flag) == "true" ? "ok" : "FAIL",
                             Field(r, lat));
    };
    absl::PrintF("%5s %4s  %-16s %-16s %-7s %7s B\n", Field(r, "from"), Field(r, "to"),
                 cell("read_ok", "read_p50_us"), cell("write_ok", "write_p50_us"),
                 Field(r, "bounds_ok") == "true" ? "ok" : "FAIL", Field(r, "bytes_verified"));
    if (!ok) std::printf("      error: %s\n", Field(r, "error").c_str());
  }
  const int failed = static_cast<int>(results.size()) - passed;
  if (json) {
    std::printf("{\"summary\":true,\"pairs\":%zu,\"passed\":%d,\"failed\":%d}\n", results.size(),
                passed, failed);
  } else {
    std::printf("%d/%zu pairs passed\n", passed, results.size());
  }
  std::fflush(stdout);
  return failed;
}

std::string DefaultNodeBinary() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "node").string();
}

// `node_args`: the command line's arguments after `--`, passed on to every node.
// True when the nodes' arguments make them hold key-value shards (//tools:node --kv, the last
// of --kv, --kv=BOOL and --nokv deciding).
bool NodesHoldShards(const std::vector<std::string>& node_args) {
  bool kv = false;
  for (absl::string_view a : node_args) {
    if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) continue;
    if (a == "kv") {
      kv = true;
    } else if (a == "nokv") {
      kv = false;
    } else if (absl::ConsumePrefix(&a, "kv=")) {
      kv = absl::SimpleAtob(a, &kv) && kv;
    }
  }
  return kv;
}

int Main(const std::vector<std::string>& node_args) {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "cluster"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  if (absl::Status s = CheckProvider(absl::GetFlag(FLAGS_provider)); !s.ok()) {
    spdlog::error("--provider: {}", std::string(s.message()));
    return 2;
  }
  if (absl::GetFlag(FLAGS_poll) != "busy" && absl::GetFlag(FLAGS_poll) != "adaptive") {
    spdlog::error("--poll must be busy or adaptive, not '{}'", absl::GetFlag(FLAGS_poll));
    return 2;
  }
  std::string node_binary = absl::GetFlag(FLAGS_node_binary);
  if (node_binary.empty()) node_binary = DefaultNodeBinary();
  if (access(node_binary.c_str(), X_OK) != 0) {
    spdlog::error("node binary {} is not executable; build //tools:node or pass --node_binary",
                  node_binary);
    return 2;
  }

  const int signal_fd = BlockTerminationSignals();

  Cluster cluster;
  if (absl::Status s = cluster.Configure(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  const int n = absl::GetFlag(FLAGS_nodes);
  spdlog::info("starting {} node(s), provider {}, config {}", n, cluster.config().provider(),
               cluster.config_path());
  const absl::Time start = absl::Now();
  absl::Status s = cluster.Launch(node_binary, node_args, signal_fd);
  if (s.ok()) s = cluster.WaitReady(absl::Seconds(absl::GetFlag(FLAGS_ready_timeout_s)));
  if (!s.ok()) {
    spdlog::error("the cluster did not come up: {}", std::string(s.message()));
    return absl::IsCancelled(s) ? 130 : 1;
  }
  spdlog::info("cluster ready: {} node(s) connected all-to-all over {} in {}", n,
               cluster.provider_opened(), absl::FormatDuration(absl::Now() - start));
  if (!absl::GetFlag(FLAGS_json)) {
    const uint32_t f = cluster.config().f();
    std::printf(
        "cluster ready: %d nodes, provider %s, f = %u (%s)\n", n, cluster.provider_opened().c_str(),
        f, f == 0 ? "no fault tolerance" : absl::StrCat(f + 1, " copies of every region").c_str());
    std::fflush(stdout);
  }
  int failed = 0;
  if (!cluster.app().empty()) {
    // An application runs on every node; the nodes leave once all have finished it.
    spdlog::info("running application '{}' on {} node(s)", cluster.app(), n);
    absl::StatusOr<int> app_failed =
        cluster.WaitApps(absl::Seconds(absl::GetFlag(FLAGS_app_timeout_s)));
    if (!app_failed.ok()) {
      spdlog::error("application '{}' did not finish: {}", cluster.app(),
                    std::string(app_failed.status().message()));
      return absl::IsCancelled(app_failed.status()) ? 130 : 1;
    }
    std::printf("application %s: %d/%d nodes succeeded\n", cluster.app().c_str(), n - *app_failed,
                n);
    std::fflush(stdout);
    cluster.Stop();
    return *app_failed == 0 ? 0 : 1;
  }
  if (absl::GetFlag(FLAGS_self_check) && n > 1 && !absl::GetFlag(FLAGS_data_dir).empty()) {
    spdlog::info("no self-check: it would write its pattern over the regions of --data_dir");
  } else if (absl::GetFlag(FLAGS_self_check) && n > 1 && NodesHoldShards(node_args)) {
    // Every node refuses it (tools/node.cc), so it could only print a table of failures.
    const char* why =
        "the nodes hold key-value shards (-- --kv), whose objects the self-check's WRITEs at "
        "the regions' ends would overwrite";
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("{\"self_check\":\"skipped\",\"reason\":\"%s\"}\n", why);
    } else {
      std::printf("self-check skipped: %s\n", why);
    }
    std::fflush(stdout);
  } else if (absl::GetFlag(FLAGS_self_check) && n > 1) {
    absl::StatusOr<std::vector<std::string>> results = cluster.SelfCheck(absl::Seconds(120));
    if (!results.ok()) {
      spdlog::error("self-check did not finish: {}", std::string(results.status().message()));
      return 1;
    }
    failed = PrintResults(*results, absl::GetFlag(FLAGS_json));
    if (results->size() != static_cast<size_t>(n * (n - 1))) {
      spdlog::error("expected {} pair results, got {}", n * (n - 1), results->size());
      failed += 1;
    }
  }
  if (!absl::GetFlag(FLAGS_exit_after_check)) {
    spdlog::info("cluster running; press Ctrl-C to stop it");
    s = cluster.Hold();
    spdlog::info("{}", std::string(s.message()));
    if (!absl::IsCancelled(s)) failed += 1;
  }
  cluster.Stop();
  spdlog::info("all nodes stopped");
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Starts a local cluster of node processes and checks one-sided access between them.\n"
      "  cluster --nodes=3 [--provider=shm|tcp;ofi_rxm|...] [--exit_after_check] [--json]"
      " [-- flags for every node]");
  // absl returns the arguments that are not flags, those after "--" included; only those are
  // for the nodes.
  std::vector<std::string> node_args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      node_args.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() != 1 + node_args.size()) {
    std::fprintf(stderr, "unexpected argument '%s' (flags for the nodes go after --)\n",
                 positional[1]);
    return 2;
  }
  return farm::Main(node_args);
}
