// kvsh: a shell for the key-value store (kv/kv.h), in the manner of redis-cli.
//
//   kvsh --local=3                              start 3 node processes holding shards, and a shell
//   kvsh --config=cluster.textproto             attach to a running cluster (as a `late` node)
//   kvsh --config=cluster.textproto get a       run one command and exit (as redis-cli)
//   kvsh --local=3 -c 'put a 1; get a'          run command lines and exit (kvsh's own -c)
//   printf 'put a 1\nget a\n' | kvsh --local=3  script mode: one command per line of stdin
//   kvsh --config=cluster.textproto --pipe <f   bulk load: errors and a count, no replies
//
// The shell is itself a node of the cluster (the platform is symmetric): it joins through the
// configuration manager under a node id the configuration reserves for it, creates the store
// without a shard of its own (kv::Options::hold_shard = false) and leaves when it exits. With
// --local=N it first writes a configuration of N serving nodes plus itself (and --late_nodes more
// slots for other clients) and starts N //tools:node --kv processes, supervised as
// //tools:cluster supervises its nodes (they die with the shell, even on SIGKILL); they stop
// when the shell leaves.
//
// Exit status: 0 when every command succeeded (a get of a missing key is not an error: (nil));
// 1 when a command failed (an error reply: bad arguments, a value too large, an unreachable
// shard) or the shell lost the cluster; 2 for bad flags, a bad configuration, or a cluster the
// shell could not start or join; 128+N when stopped by signal N (SIGTERM, SIGHUP; SIGINT outside
// the interactive shell).
#include <editline/readline.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/poller.h"
#include "spdlog/spdlog.h"
#include "tools/child_process.h"
#include "tools/kvsh_lib.h"

// The standard node flags (api/node_main.cc, part of //:farm): the shell is a node too.
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
          "it; they stop when the shell exits");
ABSL_FLAG(std::string, c, "",
          "kvsh's own (redis-cli's -c is cluster mode): run these commands and exit; ';' and "
          "newlines separate them, as in script mode. Commands can also be given as arguments, "
          "as redis-cli takes them: kvsh --local=3 get a");
ABSL_FLAG(bool, x, false,
          "read the last argument of the command from standard input, all of it (a final newline "
          "included), as redis-cli -x: echo -n hello | kvsh ... -x put greeting");
ABSL_FLAG(int, r, 1,
          "run the command (arguments or -c) this many times, as redis-cli -r; -1: until "
          "stopped (Ctrl-C)");
ABSL_FLAG(double, i, 0, "with -r: seconds to wait between runs (as redis-cli -i)");
ABSL_FLAG(bool, pipe, false,
          "bulk load, as redis-cli --pipe: run each line of standard input as a command without "
          "printing replies (errors go to standard error), then print 'errors: N, replies: M'; "
          "exit status 1 if any failed");
ABSL_FLAG(bool, scan, false,
          "list every key, one per line, bare, as redis-cli --scan: a whole SCAN iteration "
          "(with --pattern and --count), then exit");
ABSL_FLAG(std::string, pattern, "", "with --scan: only the keys matching this glob (scan MATCH)");
ABSL_FLAG(uint64_t, count, 10, "with --scan: home buckets per scan step (scan COUNT)");
ABSL_FLAG(bool, raw, false,
          "print bare values (no quotes, escapes or (integer)), one per line, as redis-cli "
          "--raw; a missing key still prints (nil), so that it differs from an empty value "
          "(redis-cli --raw prints an empty line for both)");
ABSL_FLAG(int, join_timeout_s, 20,
          "seconds to wait for joining the cluster (for --local: once its nodes are ready)");
ABSL_FLAG(std::string, history_file, "~/.kvsh_history",
          "history of the interactive shell; empty: none");
// --local only.
ABSL_FLAG(int, late_nodes, 0,
          "--local: extra node ids marked late in the configuration, for other clients "
          "(another kvsh, kvbench) to attach as with --config (see --write_config)");
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
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Writes everything (stdout may be a pipe); false if the reader went away.
bool WriteAll(int fd, absl::string_view s) {
  while (!s.empty()) {
    const ssize_t n = write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// The last `lines` lines of a file, each indented.
std::string Tail(const std::string& path, int lines) {
  std::ifstream f(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(f, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
       i < all.size(); ++i) {
    absl::StrAppend(&out, "    ", all[i], "\n");
  }
  return out.empty() ? "    (empty)\n" : out;
}

// ---------------------------------------------------------------------------------------------
// --local: the serving node processes.

class LocalCluster {
 public:
  ~LocalCluster() { Stop(); }

  // Writes the configuration: nodes 0..n-1 serve, node n is this shell, n+1.. are late slots.
  absl::Status Configure(int n, int late_slots) {
    const char* base = std::getenv("TEST_TMPDIR");
    if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
    if (base == nullptr || *base == '\0') base = "/tmp";
    std::string pattern = absl::StrCat(base, "/kvsh.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::UnavailableError(absl::StrCat("cannot create a temporary directory ", pattern,
                                                 ": ", std::strerror(errno)));
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

  absl::Status Launch(const std::string& node_binary, const std::vector<std::string>& extra) {
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
  absl::Status WaitReady(int signal_fd, absl::Time deadline) {
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
  std::optional<std::string> CheckChildren(std::string* logs) {
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
  void Stop() {
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
        // The logs of a node that failed outlive the shell.
        spdlog::warn("the nodes' logs are kept in {}", dir_);
      } else {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
      }
      dir_.clear();
    }
  }

  const config::ClusterConfig& config() const { return config_; }
  const std::string& config_path() const { return config_path_; }
  std::string LogPath(uint32_t id) const {
    return absl::StrCat(dir_, "/node-", id, ".log");
  }

 private:
  struct Child {
    uint32_t id = 0;
    std::unique_ptr<ChildProcess> proc;  // its input: closing it makes the node leave
    bool ready = false;
    bool termed = false;  // sent SIGTERM
    absl::Time term_at;
  };

  // Starts node `id` (args[0] is the binary). Its standard error goes to its log file. Never
  // outlives the shell (ChildProcess: PR_SET_PDEATHSIG with SIGTERM, which lets the shm provider
  // remove its files); a process group of its own, so that Ctrl-C at the shell's terminal is the
  // shell's, not the nodes'.
  absl::Status Spawn(uint32_t id, const std::vector<std::string>& args) {
    ChildProcess::Options options;
    options.stderr_path = LogPath(id);
    options.own_process_group = true;
    absl::StatusOr<std::unique_ptr<ChildProcess>> proc = ChildProcess::SpawnCommand(args, options);
    if (!proc.ok()) return absl::UnavailableError(proc.status().message());
    children_.push_back(Child{id, std::move(*proc)});
    return absl::OkStatus();
  }

  std::string dir_;  // configuration and node logs; removed by Stop unless a node failed
  config::ClusterConfig config_;
  std::string config_path_;
  int serving_ = 0;
  std::vector<Child> children_;
  bool failed_ = false;  // a node exited on its own: keep the logs
};

// ---------------------------------------------------------------------------------------------
// Joining.

// Starts this node's Runtime on a thread while the calling thread watches signals and the local
// nodes, so that neither a dead cluster nor Ctrl-C leaves the shell waiting. A wait that is given
// up exits the process (the joining thread cannot be stopped).
class Joiner {
 public:
  Joiner(int signal_fd, LocalCluster* local) : signal_fd_(signal_fd), local_(local) {}

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
                  absl::StrCat("the cluster failed while the shell joined: ", *dead, "\n", logs));
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

  const int signal_fd_;
  LocalCluster* const local_;
};

// ---------------------------------------------------------------------------------------------
// The shell.

class Shell {
 public:
  Shell(std::unique_ptr<Runtime> rt, std::unique_ptr<kv::Store> store,
        std::unique_ptr<Worker> worker, bool raw, bool interactive, LocalCluster* local)
      : rt_(std::move(rt)),
        store_(std::move(store)),
        worker_(std::move(worker)),
        client_(std::make_unique<kv::Client>(*store_, *worker_)),
        raw_(raw),
        interactive_(interactive),
        local_(local) {
    limits_.max_key_size = store_->max_key_size();
    limits_.max_value_size = store_->max_value_size();
  }

  ~Shell() {
    client_.reset();
    worker_.reset();
    rt_.reset();  // leaves the cluster; the store's handlers go with it
    store_.reset();
  }

  // Runs every command of `line`; false once the shell should stop (quit, lost cluster, broken
  // output).
  bool RunLine(absl::string_view line) {
    absl::StatusOr<std::vector<std::vector<kvsh::Token>>> commands = kvsh::SplitLine(line);
    if (!commands.ok()) {
      return Print(kvsh::Reply::Error(absl::StrCat("ERR ", commands.status().message())));
    }
    for (const std::vector<kvsh::Token>& tokens : *commands) {
      if (!RunCommand(tokens)) return false;
    }
    return true;
  }

  // Runs one command; false once the shell should stop.
  bool RunCommand(const std::vector<kvsh::Token>& tokens) {
    if (!CheckCluster()) return false;
    absl::StatusOr<kvsh::Command> c = kvsh::ParseCommand(tokens, limits_);
    if (!c.ok()) return Print(kvsh::Reply::Error(absl::StrCat("ERR ", c.status().message())));
    if (c->op == kvsh::Op::kQuit) return false;
    return Print(Execute(*c));
  }

  // --scan: every key matching `pattern`, bare, one per line, as each step returns them (as
  // redis-cli --scan); an error ends it (printed, and counted as a failed command).
  void ListKeys(const std::string& pattern, uint64_t count) {
    uint64_t cursor = 0;
    do {
      absl::StatusOr<kv::ScanPage> page = client_->Scan(cursor, count, pattern);
      if (!page.ok()) {
        Print(kvsh::ErrorReply(page.status()));
        return;
      }
      std::string out;
      for (const std::string& k : page->keys) absl::StrAppend(&out, k, "\n");
      if (!WriteAll(STDOUT_FILENO, out)) {
        ++failures_;
        return;
      }
      cursor = page->cursor;
    } while (cursor != 0);
  }

  // Prints "(error) ERR message" (and counts it as a failed command).
  void PrintError(absl::string_view message) {
    Print(kvsh::Reply::Error(absl::StrCat("ERR ", message)));
  }

  // --pipe: replies are counted, not printed (errors still are), and a progress count goes to
  // standard error when that is a terminal.
  void set_pipe() {
    pipe_ = true;
    progress_ = isatty(STDERR_FILENO) != 0;
  }
  // --pipe's summary, as redis-cli --pipe ends: "errors: N, replies: M".
  std::string PipeSummary() {
    return absl::StrCat(progress_shown_ ? "\n" : "", "errors: ", failures_, ", replies: ", replies_,
                        "\n");
  }

  // Reports nodes of a --local cluster that died; false when this shell is no longer a member.
  bool CheckCluster() {
    if (local_ != nullptr) {
      std::string logs;
      if (std::optional<std::string> dead = local_->CheckChildren(&logs); dead.has_value()) {
        if (interactive_) WriteAll(STDOUT_FILENO, "\n");  // off the line being typed
        spdlog::warn("{}: the keys of its shard cannot be reached now{}\n{}", *dead,
                     provider() == "shm"
                         ? "; on shm a node that dies may also leave the others stuck (libfabric "
                           "1.17's shm is not crash-tolerant: README, \"Providers\"), so the "
                           "rest of the cluster may not answer either"
                         : "",
                     logs);
        noticed_ = true;
      }
    }
    const absl::Status evicted = RuntimeAccess::Of(*rt_).node->evicted();
    if (!evicted.ok()) {
      ++failures_;
      Print(kvsh::Reply::Error(absl::StrCat(
          "UNAVAILABLE this shell is no longer a member of the cluster (", evicted.message(),
          "); start kvsh again to rejoin")));
      return false;
    }
    return true;
  }

  // True once after CheckCluster printed a notice (the interactive shell redraws its line).
  bool TakeNotice() { return std::exchange(noticed_, false); }
  // The number of the input line being run (script mode, --pipe, -c over several lines), for
  // error messages (0: none).
  void set_line(int line) { line_ = line; }
  int failures() const { return failures_; }
  const kvsh::Limits& limits() const { return limits_; }
  uint32_t node_id() const { return rt_->node_id(); }
  std::string provider() const { return rt_->provider(); }

  absl::StatusOr<std::vector<kv::ShardStats>> Stats() { return client_->Stats(); }

 private:
  kvsh::Reply Execute(const kvsh::Command& c) {
    using kvsh::Reply;
    switch (c.op) {
      case kvsh::Op::kGet: {
        absl::StatusOr<std::string> v = client_->Get(c.args[0]);
        if (absl::IsNotFound(v.status())) return Reply::Nil();
        if (!v.ok()) return kvsh::ErrorReply(v.status());
        return Reply::String(std::move(*v));
      }
      case kvsh::Op::kPut:
        return Put(c);
      case kvsh::Op::kPing:
        return c.args.empty() ? Reply::Status("PONG") : Reply::String(c.args[0]);
      case kvsh::Op::kDel: {
        // One transaction for all the keys: they go together or not at all (as Redis's DEL).
        int64_t deleted = 0;
        absl::Status s;
        if (c.args.size() == 1) {
          absl::StatusOr<bool> d = client_->Delete(c.args[0]);
          s = d.status();
          deleted = d.ok() && *d ? 1 : 0;
        } else {
          s = worker_->Run([&](Txn& t) -> absl::Status {
            deleted = 0;  // a retried attempt counts again
            for (const std::string& key : c.args) {
              absl::StatusOr<bool> d = client_->Delete(t, key);
              if (!d.ok()) return d.status();
              deleted += *d ? 1 : 0;
            }
            return absl::OkStatus();
          });
        }
        if (!s.ok()) return kvsh::ErrorReply(s);  // an aborted transaction deleted nothing
        return Reply::Integer(deleted);
      }
      case kvsh::Op::kCas: {
        std::optional<std::string> expected;
        if (!c.expect_absent) expected = c.args[1];
        absl::StatusOr<bool> done = client_->CompareAndSet(c.args[0], expected, c.args[2]);
        if (!done.ok()) return kvsh::ErrorReply(done.status());
        return Reply::Integer(*done ? 1 : 0);
      }
      case kvsh::Op::kMget: {
        std::vector<absl::StatusOr<std::string>> values = client_->MultiGet(c.args);
        std::vector<Reply> out;
        for (absl::StatusOr<std::string>& v : values) {
          if (absl::IsNotFound(v.status())) {
            out.push_back(Reply::Nil());
          } else if (!v.ok()) {
            out.push_back(kvsh::ErrorReply(v.status()));
          } else {
            out.push_back(Reply::String(std::move(*v)));
          }
        }
        return Reply::Array(std::move(out));
      }
      case kvsh::Op::kIncrBy:
        return IntegerReply(client_->IncrBy(c.args[0], c.delta));
      case kvsh::Op::kSetNx:
        return IntegerReply(client_->PutIfAbsent(c.args[0], c.args[1]));
      case kvsh::Op::kGetSet:
        return OldValueReply(client_->GetAndSet(c.args[0], c.args[1]));
      case kvsh::Op::kAppend:
        return IntegerReply(client_->Append(c.args[0], c.args[1]));
      case kvsh::Op::kStrlen: {
        absl::StatusOr<std::string> v = client_->Get(c.args[0]);
        if (absl::IsNotFound(v.status())) return Reply::Integer(0);
        if (!v.ok()) return kvsh::ErrorReply(v.status());
        return Reply::Integer(static_cast<int64_t>(v->size()));
      }
      case kvsh::Op::kExists: {
        int64_t found = 0;
        for (const std::string& key : c.args) {  // a key named twice counts twice, as in Redis
          absl::StatusOr<bool> e = client_->Exists(key);
          if (!e.ok()) return kvsh::ErrorReply(e.status());
          found += *e ? 1 : 0;
        }
        return Reply::Integer(found);
      }
      case kvsh::Op::kStats:
      case kvsh::Op::kInfo: {
        absl::StatusOr<std::vector<kvsh::StatsRow>> rows = StatsRows();
        if (!rows.ok()) return kvsh::ErrorReply(rows.status());
        if (c.op == kvsh::Op::kStats) return Reply::Text(kvsh::FormatStats(*rows, raw_));
        return Reply::Text(kvsh::FormatInfo(*rows, c.args.empty() ? "" : c.args[0]));
      }
      case kvsh::Op::kScan: {
        absl::StatusOr<kv::ScanPage> page = client_->Scan(c.cursor, c.count, c.pattern);
        // The store refuses a cursor no step returned as InvalidArgument: Redis's words.
        if (absl::IsInvalidArgument(page.status())) return Reply::Error("ERR invalid cursor");
        if (!page.ok()) return kvsh::ErrorReply(page.status());
        return kvsh::ScanReply(page->cursor, std::move(page->keys));
      }
      case kvsh::Op::kKeys: {
        std::vector<Reply> keys;
        uint64_t cursor = 0;
        do {  // a whole iteration, as Redis's KEYS walks the whole keyspace
          absl::StatusOr<kv::ScanPage> page = client_->Scan(cursor, kKeysStep, c.pattern);
          if (!page.ok()) return kvsh::ErrorReply(page.status());
          for (std::string& k : page->keys) keys.push_back(Reply::String(std::move(k)));
          cursor = page->cursor;
        } while (cursor != 0);
        return Reply::Array(std::move(keys));
      }
      case kvsh::Op::kDbSize:
        return IntegerReply(client_->Size());
      case kvsh::Op::kMset: {
        const absl::Status s = client_->MultiPut(Pairs(c));
        return s.ok() ? Reply::Status("OK") : kvsh::ErrorReply(s);
      }
      case kvsh::Op::kMsetNx:
        return MultiPutIfNoneExists(c);
      case kvsh::Op::kHelp: {
        absl::StatusOr<std::string> text =
            kvsh::HelpText(c.args.empty() ? "" : c.args[0], limits_);
        if (!text.ok()) return Reply::Error(absl::StrCat("ERR ", text.status().message()));
        return Reply::Text(*text);
      }
      case kvsh::Op::kQuit: break;
    }
    return Reply::Error("ERR internal: unhandled command");
  }

  // Home buckets per Scan step for keys: large, to make few round trips.
  static constexpr uint64_t kKeysStep = 1000;

  // mset's and msetnx's KEY VALUE arguments.
  static std::vector<std::pair<std::string, std::string>> Pairs(const kvsh::Command& c) {
    std::vector<std::pair<std::string, std::string>> items;
    for (size_t i = 0; i + 1 < c.args.size(); i += 2) items.emplace_back(c.args[i], c.args[i + 1]);
    return items;
  }

  // msetnx: in one transaction, every key is looked up and, only if none exists, all are set.
  kvsh::Reply MultiPutIfNoneExists(const kvsh::Command& c) {
    const std::vector<std::pair<std::string, std::string>> items = Pairs(c);
    bool set = false;
    const absl::Status s = worker_->Run([&](Txn& t) -> absl::Status {
      set = false;  // a retried attempt looks again
      for (const auto& [key, value] : items) {
        absl::StatusOr<bool> e = client_->Exists(t, key);
        if (!e.ok()) return e.status();
        if (*e) return absl::OkStatus();
      }
      set = true;
      return client_->MultiPut(t, items);
    });
    if (!s.ok()) return kvsh::ErrorReply(s);  // an aborted transaction set nothing
    return kvsh::Reply::Integer(set ? 1 : 0);
  }

  // Client::Stats as the rows kvsh_lib prints.
  absl::StatusOr<std::vector<kvsh::StatsRow>> StatsRows() {
    absl::StatusOr<std::vector<kv::ShardStats>> stats = client_->Stats();
    if (!stats.ok()) return stats.status();
    std::vector<kvsh::StatsRow> rows;
    for (const kv::ShardStats& s : *stats) {
      kvsh::StatsRow r;
      r.node = s.node;
      r.buckets = s.buckets;
      r.bucket_bytes = s.bucket_bytes;
      r.items = s.items;
      r.inline_items = s.inline_items;
      r.displaced_items = s.displaced_items;
      r.overflow_blocks = s.overflow_blocks;
      r.out_of_line_bytes = s.out_of_line_bytes;
      r.memory_bytes = s.memory_bytes;
      rows.push_back(r);
    }
    return rows;
  }

  // (integer) N for a store call's count, length or sum; a bool as 1 or 0.
  template <typename T>
  static kvsh::Reply IntegerReply(const absl::StatusOr<T>& r) {
    if (!r.ok()) return kvsh::ErrorReply(r.status());
    return kvsh::Reply::Integer(static_cast<int64_t>(*r));
  }

  // The value a write replaced, or (nil).
  static kvsh::Reply OldValueReply(absl::StatusOr<std::optional<std::string>> old) {
    if (!old.ok()) return kvsh::ErrorReply(old.status());
    if (!old->has_value()) return kvsh::Reply::Nil();
    return kvsh::Reply::String(std::move(**old));
  }

  // put (Redis's SET) and its options: each alone is one call of the store, which reads and
  // writes in one transaction; NX or XX with GET, which the store has no call for, are
  // ConditionalPut's transaction.
  kvsh::Reply Put(const kvsh::Command& c) {
    using kvsh::Reply;
    const std::string& key = c.args[0];
    const std::string& value = c.args[1];
    if (c.get_old && !c.if_absent && !c.if_present) {
      return OldValueReply(client_->GetAndSet(key, value));
    }
    if (c.get_old) return ConditionalPut(c);
    if (!c.if_absent && !c.if_present) {
      const absl::Status s = client_->Put(key, value);
      return s.ok() ? Reply::Status("OK") : kvsh::ErrorReply(s);
    }
    const absl::StatusOr<bool> set =
        c.if_absent ? client_->PutIfAbsent(key, value) : client_->PutIfPresent(key, value);
    if (!set.ok()) return kvsh::ErrorReply(set.status());
    return *set ? Reply::Status("OK") : Reply::Nil();
  }

  // put KEY VALUE NX GET and XX GET: the old value is read and the new one written in one
  // transaction, so the condition and GET see the value that the write replaces.
  kvsh::Reply ConditionalPut(const kvsh::Command& c) {
    using kvsh::Reply;
    std::optional<std::string> old;
    absl::Status s = worker_->Run([&](Txn& t) -> absl::Status {
      old.reset();  // a retried attempt reads again
      absl::StatusOr<std::string> v = client_->Get(t, c.args[0]);
      if (v.ok()) {
        old = std::move(*v);
      } else if (!absl::IsNotFound(v.status())) {
        return v.status();
      }
      if ((c.if_absent && old.has_value()) || (c.if_present && !old.has_value())) {
        return absl::OkStatus();
      }
      return client_->Put(t, c.args[0], c.args[1]);
    });
    if (!s.ok()) return kvsh::ErrorReply(s);  // an aborted transaction set nothing
    return old.has_value() ? Reply::String(std::move(*old)) : Reply::Nil();
  }

  // Prints a reply: on standard output, except that outside the interactive shell an error
  // goes to standard error, so that scripts can tell them apart (redis-cli prints them on
  // standard output), with the input line it came from. With --pipe only errors are printed.
  // False when the output is gone.
  bool Print(const kvsh::Reply& r) {
    ++replies_;
    if (r.failed()) ++failures_;
    const bool is_error = r.kind == kvsh::Reply::Kind::kError;
    if (pipe_ && !is_error) {
      ShowProgress();
      return true;
    }
    const bool to_stderr = !interactive_ && is_error;
    std::string text = kvsh::Format(r, raw_);
    if (to_stderr && line_ > 0) text.insert(text.size() - 1, absl::StrCat(" (line ", line_, ")"));
    if (!WriteAll(to_stderr ? STDERR_FILENO : STDOUT_FILENO, text)) {
      ++failures_;
      return false;
    }
    return true;
  }

  // --pipe on a terminal: "replies: M, errors: N" on standard error, redrawn every 250 ms.
  void ShowProgress() {
    if (!progress_ || absl::Now() - last_progress_ < absl::Milliseconds(250)) return;
    last_progress_ = absl::Now();
    progress_shown_ = true;
    WriteAll(STDERR_FILENO, absl::StrCat("\rreplies: ", replies_, ", errors: ", failures_));
  }

  std::unique_ptr<Runtime> rt_;
  std::unique_ptr<kv::Store> store_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<kv::Client> client_;
  const bool raw_;
  const bool interactive_;
  LocalCluster* const local_;
  kvsh::Limits limits_;
  int failures_ = 0;
  int64_t replies_ = 0;
  int line_ = 0;
  bool noticed_ = false;
  bool pipe_ = false;
  bool progress_ = false;
  bool progress_shown_ = false;
  absl::Time last_progress_ = absl::InfinitePast();
};

// ---------------------------------------------------------------------------------------------
// Input.

// Waits for `fd` to be readable or a signal; returns the signal number (0: `fd` is readable).
// Checks the cluster every half second meanwhile (and calls `after_notice` when that printed
// something).
int WaitInput(int fd, int signal_fd, Shell& shell, bool* lost,
              void (*after_notice)() = nullptr) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    const int n = poll(fds, 2, 500);
    if (n > 0 && (fds[1].revents & POLLIN)) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) > 0) return static_cast<int>(info.ssi_signo);
    }
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) return 0;
    if (!shell.CheckCluster()) {
      *lost = true;
      return 0;
    }
    if (shell.TakeNotice() && after_notice != nullptr) after_notice();
  }
}

// Script mode: one command line per line of standard input, no prompt. Returns the signal that
// stopped it, or 0.
int RunScript(Shell& shell, int signal_fd) {
  std::string pending;
  int line = 0;
  for (bool eof = false; !eof;) {
    bool lost = false;
    const int sig = WaitInput(STDIN_FILENO, signal_fd, shell, &lost);
    if (lost) return 0;
    if (sig != 0) return sig;
    char buf[65536];
    const ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      eof = true;
    } else {
      pending.append(buf, static_cast<size_t>(got));
    }
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      shell.set_line(++line);
      if (!shell.RunLine(absl::string_view(pending).substr(start, nl - start))) return 0;
    }
    pending.erase(0, start);
    if (eof && !pending.empty()) {
      shell.set_line(++line);
      if (!shell.RunLine(pending)) return 0;
    }
  }
  return 0;
}

// The interactive shell: libedit's line editing (its callback interface, so that signals and a
// dying cluster are noticed while the user types), a history file, TAB completion of command
// names and redis-cli's argument hints.
//
// Hints: redis-cli (linenoise) draws the rest of a command's syntax greyed after the cursor, and
// redraws it on every key. libedit has no hint hook: its readline emulation leaves out
// rl_redisplay_function, rl_bind_key takes only rl_insert, and the EditLine handle behind it
// is private, so el_set(EL_ADDFN) cannot be reached. What it does offer is rl_add_defun (a
// function bound to a key, called with rl_line_buffer, rl_point and rl_end brought up to date)
// and rl_insert (pushes a key into its input). So after each key the user types, the shell
// pushes kHintKey, whose function draws the hint after the cursor (grey, cut to the terminal's
// width) and moves the cursor back; the hint is erased (to the end of the line) before the next
// key is read, while the cursor still sits where the hint was drawn. libedit does not know of
// the hint, which is why it is only drawn with the cursor at the end of a line that fits on one
// terminal row. rl_line_buffer is libedit's conversion buffer, which it reallocates for lines
// over about 1 KiB without always updating rl_line_buffer: once a line has been that long
// (kMaxTrustedLine), hints, and completion past the first word, are off for the session.
struct Interactive {
  static constexpr char kPrompt[] = "kvsh> ";
  static constexpr int kHintKey = 0x1d;  // ^], ed-ignore in libedit's emacs keymap
  static constexpr int kMaxTrustedLine = 512;
  static Interactive* current;
  Shell* shell = nullptr;
  bool stop = false;
  bool line_done = false;  // libedit handed over a line: install the handler again
  bool hints = false;      // standard output is a terminal that takes ANSI escapes
  bool hint_shown = false;
  bool line_buffer_trusted = true;
  bool completing = false;  // the key was TAB
  std::string history;

  static void OnLine(char* line) {
    Interactive& self = *current;
    self.line_done = true;
    if (line == nullptr) {  // Ctrl-D
      WriteAll(STDOUT_FILENO, "\n");
      self.stop = true;
      return;
    }
    const std::string text(line);
    std::free(line);
    if (!absl::StripAsciiWhitespace(text).empty()) add_history(text.c_str());
    if (!self.shell->RunLine(text)) self.stop = true;
  }

  // The line being edited, when rl_line_buffer can be read (see kMaxTrustedLine).
  std::optional<std::string> Line() {
    if (rl_end >= kMaxTrustedLine) line_buffer_trusted = false;
    if (!line_buffer_trusted || rl_line_buffer == nullptr || rl_end < 0) return std::nullopt;
    return std::string(rl_line_buffer, static_cast<size_t>(rl_end));
  }

  static char* NextCommandName(const char* text, int state) {
    static size_t index;
    static std::vector<std::string> names;
    if (state == 0) {
      index = 0;
      names = kvsh::CompleteCommandName(text);
    }
    return index < names.size() ? strdup(names[index++].c_str()) : nullptr;
  }

  // Completes command names at the start of a command, and help's argument; nothing else (keys
  // are not listed).
  static char** Complete(const char* text, int start, int) {
    rl_attempted_completion_over = 1;
    current->completing = true;
    if (start > 0) {
      const std::optional<std::string> line = current->Line();
      if (!line.has_value() || static_cast<size_t>(start) > line->size()) return nullptr;
      const absl::string_view before = absl::string_view(*line).substr(0, start);
      const size_t semi = before.rfind(';');
      absl::string_view command = absl::StripAsciiWhitespace(
          semi == absl::string_view::npos ? before : before.substr(semi + 1));
      const bool after_help = absl::EqualsIgnoreCase(command, "help");
      if (!command.empty() && !after_help) return nullptr;
    }
    return rl_completion_matches(text, NextCommandName);
  }

  static int TerminalColumns() {
    winsize w{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
    return 80;
  }

  // kHintKey's function: draws the hint for the line as it is now.
  static int DrawHint(int, int) {
    Interactive& self = *current;
    if (!self.hints) return 0;
    const std::optional<std::string> line = self.Line();
    if (!line.has_value() || rl_point != rl_end || line->find('\0') != std::string::npos) {
      return 0;
    }
    std::string hint = kvsh::ArgumentHint(*line);
    if (hint.empty()) return 0;
    int used = static_cast<int>(std::strlen(kPrompt));
    for (const char c : *line) used += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? 2 : 1;
    const int room = TerminalColumns() - 1 - used;  // the last column would wrap
    if (room <= 0) return 0;
    if (static_cast<int>(hint.size()) > room) hint.resize(static_cast<size_t>(room));
    // Grey (bright black, as redis-cli's hints), then back over the hint.
    std::fputs(absl::StrCat("\x1b[90m", hint, "\x1b[0m\x1b[", hint.size(), "D").c_str(), stdout);
    std::fflush(stdout);
    self.hint_shown = true;
    return 0;
  }

  // Erases the hint drawn after the cursor, which has not moved since.
  void EraseHint() {
    if (!hint_shown) return;
    std::fputs("\x1b[K", stdout);
    std::fflush(stdout);
    hint_shown = false;
  }

  // Returns the signal that ended the shell (SIGTERM, SIGHUP), or 0.
  int Run(int signal_fd) {
    current = this;
    const char* term = std::getenv("TERM");
    hints = isatty(STDOUT_FILENO) && term != nullptr && std::strcmp(term, "dumb") != 0;
    rl_readline_name = const_cast<char*>("kvsh");
    rl_attempted_completion_function = Complete;
    stifle_history(1000);
    if (!history.empty()) read_history(history.c_str());
    rl_callback_handler_install(kPrompt, OnLine);
    rl_add_defun("kvsh-hint", DrawHint, kHintKey);
    int result = 0;
    while (!stop) {
      bool lost = false;
      // A warning printed meanwhile ran over the line being typed: draw it again.
      const int sig = WaitInput(STDIN_FILENO, signal_fd, *shell, &lost, [] {
        current->hint_shown = false;
        rl_forced_update_display();
      });
      if (lost) break;
      EraseHint();
      if (sig == SIGINT) {
        // Ctrl-C drops the line being typed, as a shell does; Ctrl-D or quit leaves.
        rl_replace_line("", 0);
        WriteAll(STDOUT_FILENO, "^C\n");
        rl_callback_handler_remove();
        rl_callback_handler_install(kPrompt, OnLine);
        continue;
      }
      if (sig != 0) {
        result = sig;
        break;
      }
      completing = false;
      rl_callback_read_char();
      if (!line_done && !stop && !completing) {
        rl_insert(1, kHintKey);  // read at once by the next call: DrawHint
        rl_callback_read_char();
      } else if (!line_done && !stop) {
        // After TAB, the hint is drawn without kHintKey: libedit lists the matches on a second
        // TAB only if no other command ran in between. Its completion (fn_complete) brought
        // rl_point and rl_end up to date.
        DrawHint(0, 0);
      }
      if (line_done && !stop) {
        // libedit leaves its callback mode after each line; this shows the prompt again.
        line_done = false;
        rl_callback_handler_install(kPrompt, OnLine);
      }
    }
    rl_callback_handler_remove();
    if (!history.empty()) {
      if (write_history(history.c_str()) == 0) {
        chmod(history.c_str(), 0600);
      } else {
        spdlog::debug("cannot write the history to {}", history);
      }
    }
    return result;
  }
};
Interactive* Interactive::current = nullptr;

std::string HistoryPath() {
  std::string path = absl::GetFlag(FLAGS_history_file);
  if (absl::StartsWith(path, "~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') return "";
    path = absl::StrCat(home, path.substr(1));
  }
  return path;
}

// ---------------------------------------------------------------------------------------------
// Flags and start-up.

std::string DefaultNodeBinary() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / "node").string();
}

// Resolves a path the user gave relative to where they ran `bazel run`.
std::string UserPath(const std::string& path) {
  const char* user_dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (user_dir != nullptr && !path.empty() && path[0] != '/') {
    return absl::StrCat(user_dir, "/", path);
  }
  return path;
}

absl::Status CheckFlags() {
  const int local = absl::GetFlag(FLAGS_local);
  const bool attach = !absl::GetFlag(FLAGS_config).empty();
  if (absl::GetFlag(FLAGS_control_stdin) || absl::GetFlag(FLAGS_fill_pattern)) {
    return absl::InvalidArgumentError(
        "--control_stdin and --fill_pattern are flags of //tools:node, not of kvsh");
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
        "kvsh needs a cluster: --local=N starts one of N nodes, --config=FILE [--node_id=N] "
        "joins a running one; see --help");
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

// The node ids the shell may join as: --node_id, or every late node of the configuration.
absl::StatusOr<std::vector<int>> CandidateIds(const std::string& config_path) {
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
          "node {} is not marked late in {}: the cluster counts on it to form (and the shell "
          "holds no shard)",
          id, config_path);
    }
    return std::vector<int>{id};
  }
  std::vector<int> ids;
  for (const config::NodeConfig& n : cfg->node()) {
    if (n.late()) ids.push_back(static_cast<int>(n.id()));
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        config_path,
        " lists no late node for the shell to join as: pass --node_id=N, or give the cluster "
        "client slots (`late: true` nodes; //tools:cluster --late_nodes=1 --write_config=FILE)"));
  }
  return ids;
}

// Joins as the first of `ids` that is free. Exits the process when the wait is given up.
absl::StatusOr<std::unique_ptr<Runtime>> JoinCluster(const std::string& config_path,
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
  Joiner joiner(signal_fd, local);
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

// absl's parser exits with status 1 on an unknown flag or a bad value; kvsh promises 2 for bad
// flags, so it checks them first: every -name[=value] / --name [value] must be a flag (or
// --noname of a bool flag) and its value must parse. As redis-cli, the flags end at the first
// word that is not one: that word and the rest are a command (`kvsh --local=3 put k -1`).
// Returns the index of that word, or argc when there is none.
absl::StatusOr<int> CheckArgv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") return argc;                 // the nodes' arguments follow
    if (a.size() < 2 || a[0] != '-') return i;  // the command
    absl::ConsumePrefix(&a, "-");
    absl::ConsumePrefix(&a, "-");
    const size_t eq = a.find('=');
    const absl::string_view name = a.substr(0, eq);
    // absl's own: usage (its parser handles them) and flag files.
    if (name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
        name == "helpon" || name == "helpmatch" || name == "version" ||
        name == "only_check_args" || name == "flagfile" || name == "fromenv" ||
        name == "tryfromenv" || name == "undefok") {
      return argc;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>() && eq == absl::string_view::npos) {
        continue;
      }
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (--help lists kvsh's flags)"));
    }
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(a.substr(eq + 1));
    } else if (flag->IsOfType<bool>()) {
      continue;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", error));
    }
  }
  return argc;
}

bool GivenOnCommandLine(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::ConsumePrefix(&a, "--")) {
      if (!absl::ConsumePrefix(&a, "-")) continue;
    }
    if (a == name || absl::StartsWith(a, absl::StrCat(name, "="))) return true;
  }
  return false;
}

// The flags that say how commands are given (-c, a command as arguments, -x, -r, -i, --pipe,
// --scan) fit together. scan_options_given: --pattern or --count is on the command line (even
// with --count's default value, which GetFlag cannot tell apart).
absl::Status CheckCommandFlags(bool c_given, bool scan_options_given,
                               const std::vector<std::string>& command) {
  if (c_given && !command.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "give the commands either with -c or as arguments ('", command[0], "' ...), not both"));
  }
  if (absl::GetFlag(FLAGS_x) && command.empty()) {
    return absl::InvalidArgumentError(
        "-x reads the last argument of a command given as arguments: kvsh ... -x put KEY");
  }
  const int repeat = absl::GetFlag(FLAGS_r);
  if (repeat == 0 || repeat < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("-r must be a number of runs (1 or more), or -1 for ever, not ", repeat));
  }
  if (repeat != 1 && !c_given && command.empty()) {
    return absl::InvalidArgumentError("-r repeats a command given as arguments or with -c");
  }
  const double interval = absl::GetFlag(FLAGS_i);
  if (!(interval >= 0) || interval > 1e6) {
    return absl::InvalidArgumentError(
        absl::StrCat("-i must be 0 to 1000000 seconds, not ", interval));
  }
  const bool scan = absl::GetFlag(FLAGS_scan);
  if (scan && (c_given || !command.empty() || repeat != 1 || absl::GetFlag(FLAGS_pipe))) {
    return absl::InvalidArgumentError(
        "--scan lists the keys: no -c, command arguments, -r or --pipe with it");
  }
  if (!scan && scan_options_given) {
    return absl::InvalidArgumentError(
        "--pattern and --count go with --scan (kvsh --scan [--pattern P] [--count N]); in the "
        "shell, scan CURSOR [MATCH P] [COUNT N]");
  }
  if (absl::GetFlag(FLAGS_count) == 0) {
    return absl::InvalidArgumentError("--count must be at least 1");
  }
  if (absl::GetFlag(FLAGS_pipe) && (c_given || !command.empty() || repeat != 1)) {
    return absl::InvalidArgumentError(
        "--pipe reads its commands from standard input: no -c, command arguments or -r with it");
  }
  return absl::OkStatus();
}

// Runs the command given as arguments (with -x: its last argument from standard input) or with
// -c, -r times, -i seconds apart. Returns the signal that stopped it, or 0.
int RunCommandLine(Shell& shell, const std::vector<std::string>& command, int signal_fd) {
  std::vector<kvsh::Token> tokens = kvsh::WordTokens(command);
  if (absl::GetFlag(FLAGS_x)) {
    std::string in;
    char buf[65536];
    for (;;) {
      // Signals stay deliverable (Ctrl-C while it waits for a terminal's input).
      bool lost = false;
      if (const int sig = WaitInput(STDIN_FILENO, signal_fd, shell, &lost); sig != 0) return sig;
      if (lost) return 0;
      const ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
      if (got == 0) break;
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        shell.PrintError(absl::StrCat("-x: cannot read standard input: ", std::strerror(errno)));
        return 0;
      }
      in.append(buf, static_cast<size_t>(got));
      // Refused without reading to the end (an endless input).
      if (in.size() > shell.limits().max_value_size) {
        shell.PrintError(absl::StrCat("-x: standard input holds more than ",
                                      shell.limits().max_value_size,
                                      " bytes, the limit of a value (",
                                      kvsh::HumanBytes(shell.limits().max_value_size), ")"));
        return 0;
      }
    }
    tokens.push_back(kvsh::Token{std::move(in), true});
  }
  const std::string text = absl::GetFlag(FLAGS_c);
  const std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  const int repeat = absl::GetFlag(FLAGS_r);
  const absl::Duration interval = absl::Seconds(absl::GetFlag(FLAGS_i));
  for (int64_t run = 0; repeat < 0 || run < repeat; ++run) {
    if (run > 0) {
      // The pause between runs (none with -i 0), cut short by a signal (Ctrl-C ends -r -1).
      pollfd p{signal_fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(interval))) > 0) {
        signalfd_siginfo info{};
        if (read(signal_fd, &info, sizeof(info)) > 0) return static_cast<int>(info.ssi_signo);
      }
    }
    if (!command.empty()) {
      if (!shell.RunCommand(tokens)) return 0;
      continue;
    }
    // -c: each line as script mode runs it (a newline separates commands as ';' does).
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines.size() > 1) shell.set_line(static_cast<int>(i + 1));
      if (!shell.RunLine(lines[i])) return 0;
    }
  }
  return 0;
}

int Main(int argc, char** argv, const std::vector<std::string>& node_args,
         const std::vector<std::string>& command) {
  const bool c_given = GivenOnCommandLine(argc, argv, "c");
  const bool command_given = c_given || !command.empty() || absl::GetFlag(FLAGS_scan);
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "kvsh"); !s.ok()) {
    spdlog::error("--log_level: {}", std::string(s.message()));
    return kExitUsage;
  }
  spdlog::default_logger()->set_pattern("kvsh %l: %v");
  if (absl::Status s = CheckFlags(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const bool scan_options_given =
      GivenOnCommandLine(argc, argv, "pattern") || GivenOnCommandLine(argc, argv, "count");
  if (absl::Status s = CheckCommandFlags(c_given, scan_options_given, command); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const int local_nodes = absl::GetFlag(FLAGS_local);
  if (!node_args.empty() && local_nodes == 0) {
    spdlog::error("arguments after -- go to the nodes of --local; there are none to give them");
    return kExitUsage;
  }

  // Signals are taken through a signalfd; block them before any thread starts.
  const int signal_fd = BlockTerminationSignals();

  std::unique_ptr<LocalCluster> local;
  std::string config_path;
  std::vector<int> ids;
  if (local_nodes > 0) {
    std::string node_binary = UserPath(absl::GetFlag(FLAGS_node_binary));
    if (node_binary.empty()) node_binary = DefaultNodeBinary();
    if (access(node_binary.c_str(), X_OK) != 0) {
      spdlog::error("node binary {} is not executable; build //tools:node or pass --node_binary",
                    node_binary);
      return kExitUsage;
    }
    local = std::make_unique<LocalCluster>();
    if (absl::Status s = local->Configure(local_nodes, absl::GetFlag(FLAGS_late_nodes));
        !s.ok()) {
      spdlog::error("cannot configure the local cluster: {}", std::string(s.message()));
      return kExitUsage;
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
        return 128 + std::stoi(std::string(absl::StripPrefix(s.message(), "signal ")));
      }
      spdlog::error("the local cluster did not start: {}", std::string(s.message()));
      local->Stop();
      return kExitUsage;
    }
    config_path = local->config_path();
    ids = {local_nodes};
  } else {
    config_path = UserPath(absl::GetFlag(FLAGS_config));
    absl::StatusOr<std::vector<int>> c = CandidateIds(config_path);
    if (!c.ok()) {
      spdlog::error("{}", std::string(c.status().message()));
      return kExitUsage;
    }
    ids = *c;
  }

  absl::StatusOr<std::unique_ptr<Runtime>> rt = JoinCluster(config_path, ids, signal_fd,
                                                            local.get());
  if (!rt.ok()) {
    const std::string why(rt.status().message());
    std::string hint;
    if (absl::StrContains(why, "messaging area")) {
      hint = " (kvsh's --workers and --ring_size must be the cluster's nodes')";
    }
    spdlog::error("could not join the cluster: {}{}", why, hint);
    return kExitUsage;
  }
  kv::Options options;
  options.hold_shard = false;
  options.buckets = absl::GetFlag(FLAGS_kv_buckets);
  options.bucket_bytes = absl::GetFlag(FLAGS_kv_bucket_bytes);
  options.neighbourhood = absl::GetFlag(FLAGS_kv_neighbourhood);
  absl::StatusOr<std::unique_ptr<kv::Store>> store = kv::Store::Create(**rt, options);
  if (!store.ok()) {
    spdlog::error("cannot use the key-value store: {}", std::string(store.status().message()));
    return kExitUsage;
  }
  (*rt)->Serve();
  absl::StatusOr<std::unique_ptr<Worker>> worker = (*rt)->NewWorker();
  if (!worker.ok()) {
    spdlog::error("cannot make a worker: {}", std::string(worker.status().message()));
    return kExitUsage;
  }
  const bool interactive = !command_given && !absl::GetFlag(FLAGS_pipe) && isatty(STDIN_FILENO);
  Shell shell(std::move(*rt), std::move(*store), std::move(*worker), absl::GetFlag(FLAGS_raw),
              interactive, local.get());
  // The store must answer before the first command: this finds the shard nodes (and a cluster
  // whose nodes hold no shard, or use other --kv_* options, is said so here).
  absl::StatusOr<std::vector<kv::ShardStats>> shards = shell.Stats();
  std::vector<std::string> shard_nodes;
  if (absl::IsDataLoss(shards.status())) {
    // A shard node restarted and lost its keys (kv/kv.h, "Durability"): the other shards still
    // serve theirs, and each command on a lost key says DataLoss.
    spdlog::warn("{}", std::string(shards.status().message()));
  } else if (!shards.ok()) {
    std::string hint;
    if (absl::IsFailedPrecondition(shards.status())) {
      hint = " (kvsh's --kv_bucket_bytes and --kv_neighbourhood must be the cluster's)";
    }
    spdlog::error("the key-value store does not answer: {}{}",
                  std::string(shards.status().message()), hint);
    return kExitUsage;
  } else {
    for (const kv::ShardStats& s : *shards) shard_nodes.push_back(absl::StrCat(s.node));
  }
  if (local != nullptr && !absl::GetFlag(FLAGS_write_config).empty()) {
    const std::string out = UserPath(absl::GetFlag(FLAGS_write_config));
    const std::string tmp = absl::StrCat(out, ".tmp");
    {
      std::ofstream f(tmp);
      f << ToText(local->config());
      f.close();
      if (!f.good() || std::rename(tmp.c_str(), out.c_str()) != 0) {
        spdlog::error("--write_config: cannot write {}", out);
        return kExitUsage;
      }
    }
    spdlog::info("wrote the cluster's configuration to {}", out);
  }

  int signal_seen = 0;
  if (absl::GetFlag(FLAGS_scan)) {
    shell.ListKeys(absl::GetFlag(FLAGS_pattern), absl::GetFlag(FLAGS_count));
  } else if (command_given) {
    signal_seen = RunCommandLine(shell, command, signal_fd);
  } else if (absl::GetFlag(FLAGS_pipe)) {
    shell.set_pipe();
    signal_seen = RunScript(shell, signal_fd);
    WriteAll(STDOUT_FILENO, shell.PipeSummary());
  } else if (interactive) {
    std::string banner = absl::StrCat(
        "kvsh: node ", shell.node_id(), " of a cluster with shards on node(s) ",
        absl::StrJoin(shard_nodes, ", "), ", provider ", shell.provider(),
        local != nullptr ? " (started by kvsh; it stops when you leave)" : "", "\n");
    if (local != nullptr && absl::GetFlag(FLAGS_late_nodes) > 0 &&
        !absl::GetFlag(FLAGS_write_config).empty()) {
      absl::StrAppend(&banner, "Other clients attach with --config=",
                      UserPath(absl::GetFlag(FLAGS_write_config)), "\n");
    }
    absl::StrAppend(&banner, "Type 'help' for the commands, 'quit' or Ctrl-D to leave.\n");
    WriteAll(STDOUT_FILENO, banner);
    Interactive i;
    i.shell = &shell;
    i.history = HistoryPath();
    signal_seen = i.Run(signal_fd);
  } else {
    signal_seen = RunScript(shell, signal_fd);
  }
  const int failures = shell.failures();
  if (signal_seen != 0) spdlog::info("stopping on signal {}", signal_seen);
  return signal_seen != 0 ? 128 + signal_seen : failures > 0 ? kExitFailed : kExitOk;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a shell for the farm key-value store, in the manner of redis-cli.\n"
      "\n"
      "  kvsh --local=3                          start 3 KV nodes on this host and a shell on "
      "them\n"
      "  kvsh --config=FILE [--node_id=N]        join a running cluster (as a `late` node: the\n"
      "                                          first free one unless --node_id says which)\n"
      "  kvsh ... [-x] [-r N [-i S]] CMD ARG...   run one command and exit, as redis-cli: -x\n"
      "                                          reads its last argument from standard input,\n"
      "                                          -r runs it N times (-1: until Ctrl-C), S s apart\n"
      "  kvsh ... -c 'put a 1; get a'            run command lines and exit (kvsh's own -c;\n"
      "                                          redis-cli's is cluster mode): ';' and newlines\n"
      "                                          separate commands\n"
      "  printf 'put a 1\\nget a\\n' | kvsh ...   script mode: one command line per input line\n"
      "  kvsh ... --scan [--pattern P]          every key (matching P), one per line, as\n"
      "                                          redis-cli --scan\n"
      "  kvsh ... --pipe <FILE                   bulk load, as redis-cli --pipe: no replies, the\n"
      "                                          errors, then 'errors: N, replies: M'\n"
      "\n"
      "Commands: get KEY; put KEY VALUE [NX|XX] [GET] (alias set; NX: only if absent, XX: only\n"
      "if present, GET: answer the old value; read and write in one transaction); del KEY...\n"
      "(all in one transaction); cas KEY EXPECTED NEW (EXPECTED (nil): the key must be absent);\n"
      "mget KEY...; incr KEY; incrby KEY N; decr KEY; decrby KEY N; setnx KEY VALUE; getset KEY\n"
      "VALUE; append KEY VALUE; strlen KEY; exists KEY...; scan CURSOR [MATCH P] [COUNT N];\n"
      "keys PATTERN (walks the whole store); dbsize (the sum of the shards' counts); mset\n"
      "KEY VALUE... (one transaction); msetnx KEY VALUE... (only if no KEY exists); info\n"
      "[keyspace|shards]; ping [MESSAGE]; stats;\n"
      "help [COMMAND]; quit (as Redis's commands of those names). Arguments are words,\n"
      "\"double quoted\" (\\n \\t \\xHH escapes) or 'single quoted'; ';' separates commands.\n"
      "Replies print as redis-cli prints them (\"value\", (nil), (integer) 1, OK,\n"
      "(error) ERR ...); --raw prints bare values (but a missing key as (nil), unlike\n"
      "redis-cli --raw, so that it differs from an empty value). Outside the interactive shell,\n"
      "errors go to standard error, with their input line in script mode.\n"
      "The interactive shell (standard input a terminal) has line editing, TAB completion of\n"
      "command names, redis-cli's argument hints (greyed after the cursor) and a history\n"
      "(--history_file).\n"
      "\n"
      "Exit status: 0 every command succeeded (a missing key is (nil), not an error); 1 a command\n"
      "failed or the shell lost the cluster; 2 bad flags or configuration, or the cluster could\n"
      "not be started or joined; 128+N stopped by signal N.\n"
      "\n"
      "The shell is a node of the cluster: --provider, --endpoint, --poll, --ring_size, --workers\n"
      "and --log_level (default warn for kvsh) are the node flags (--ring_size and --workers\n"
      "must be the cluster's). With --local, arguments after --\n"
      "go to every node process.");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "kvsh.cc") || absl::StrContains(file, "node_main.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  // A shell keeps quiet about its node's routine work unless asked (--log_level).
  absl::SetFlag(&FLAGS_log_level, "warn");
  std::vector<std::string> node_args;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      node_args.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  const absl::StatusOr<int> command_at = farm::CheckArgv(argc, argv);
  if (!command_at.ok()) {
    std::fprintf(stderr, "kvsh: %s\n", std::string(command_at.status().message()).c_str());
    return 2;
  }
  // A command as arguments: absl parses the flags before it, and the nodes get no arguments
  // (a "--" among the command's words is one of its words).
  std::vector<std::string> command(argv + *command_at, argv + argc);
  if (!command.empty()) node_args.clear();
  const std::vector<char*> positional = absl::ParseCommandLine(*command_at, argv);
  if (positional.size() != 1 + node_args.size()) {
    std::fprintf(stderr,
                 "kvsh: unexpected argument '%s' (arguments for the nodes of --local go "
                 "after --)\n",
                 positional[1]);
    return 2;
  }
  return farm::Main(*command_at, argv, node_args, command);
}
