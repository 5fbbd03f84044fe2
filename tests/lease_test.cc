// lease_test: leases and eviction with real node processes (SIGSTOP / SIGCONT), for each
// provider.
//
// The test re-executes itself once per node (--role=node). A node starts a farm::Node with
// messaging and an echo RPC, prints "READY <id>", and runs commands from its standard input, one
// per line, answering each on its standard output:
//   call N [P]  -> "CALL N OK" or "CALL N <status code> <message>" (one RPC to node N with
//                  payload P, default "ping"; node N prints "HANDLED stale from node M" when it
//                  serves the payload "stale")
//   waitgone N  -> "GONE N" once its membership no longer lists node N ("STILL N" after 30 s)
//   read N      -> "READ N OK" or "READ N <status code> <message>" (a one-sided READ of 8 bytes
//                  of node N's first region, waiting up to 60 s)
//   members     -> "MEMBERS 0,1,2"
//   quit        -> leaves (as does the end of its input)
// A node that is evicted prints "EVICTED <why>" and exits with status 3 (as tools/node does).
//
// The driver runs a 3-node cluster with a 2 s lease and a 300 ms messenger write timeout, then:
//  1. pauses node 2 for 600 ms (well under the lease) while node 1 calls it: that call may time
//     out, but afterwards calls in both directions work on the same lanes and nobody was evicted;
//  2. pauses node 2 for longer than the lease while node 0 READs its memory: the READ (which
//     cannot complete on tcp;ofi_rxm while the target does not poll; shm may complete it) ends
//     with Unavailable when node 2 leaves the membership, not at its 60 s timeout; nodes 0 and 1
//     see node 2 leave through membership and calls to it fail with Unavailable saying its
//     lease expired; resumed, node 2 serves none of the requests that waited for it (node 1
//     called it while it was paused), although its eviction is held back for a second there,
//     and exits with status 3 and "its lease expired";
//  3. starts node 2 again under the same id: it joins and calls work in both directions.
//
// Environment (as tests/multinode_test.sh): FARM_TEST_PROVIDERS (default "shm tcp;ofi_rxm"),
// FARM_TEST_HOST (default 127.0.0.1).
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "messaging/messenger.h"
#include "messaging/rpc.h"
#include "platform/config.h"
#include "platform/logging.h"
#include "platform/node.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "tests/messaging_node.h"
#include "tools/child_process.h"

ABSL_FLAG(std::string, log_level, "warn", "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, role, "", "internal: 'node' when re-executed as a node");
ABSL_FLAG(std::string, config, "", "internal: cluster configuration of the node role");
ABSL_FLAG(int, node_id, -1, "internal: node id of the node role");

namespace farm {
namespace {

using testing::Emit;

constexpr uint16_t kEcho = 21;
constexpr uint32_t kLeaseMs = 2000;
constexpr int kNodes = 3;
constexpr int kEvictedExitCode = 3;

MessengerOptions Options() {
  MessengerOptions o;
  o.lanes = 1;
  o.ring_size = 16384;
  // Far below the lease: a short pause makes flushes to the paused node time out, which must
  // not fail its lanes for good.
  o.write_timeout = absl::Milliseconds(300);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Node role

std::string Members(const Node& node) { return absl::StrJoin(node.members(), ","); }

bool Lists(const Node& node, uint32_t id) {
  for (uint32_t m : node.members()) {
    if (m == id) return true;
  }
  return false;
}

void RunCommand(const std::string& cmd, Node& node, Rpc& rpc, Messenger::Lane& lane) {
  std::vector<std::string> words = absl::StrSplit(cmd, ' ', absl::SkipEmpty());
  uint32_t target = 0;
  if ((words.size() == 2 || words.size() == 3) && words[0] == "call" &&
      absl::SimpleAtoi(words[1], &target)) {
    const std::string payload = words.size() == 3 ? words[2] : "ping";
    absl::StatusOr<std::string> r = rpc.Call(lane, target, kEcho, payload, absl::Seconds(20));
    if (r.ok() && *r != absl::StrCat(target, ":", payload)) {
      r = absl::InternalError(absl::StrCat("wrong answer '", *r, "'"));
    }
    Emit(absl::StrCat("CALL ", target, " ",
                      r.ok() ? "OK"
                             : absl::StrCat(absl::StatusCodeToString(r.status().code()), " ",
                                            r.status().message())));
  } else if (words.size() == 2 && words[0] == "waitgone" && absl::SimpleAtoi(words[1], &target)) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (Lists(node, target) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    Emit(absl::StrCat(Lists(node, target) ? "STILL " : "GONE ", target));
  } else if (words.size() == 2 && words[0] == "read" && absl::SimpleAtoi(words[1], &target)) {
    std::vector<control::RegionInfo> regions = node.RegionsOf(target);
    absl::Status s = regions.empty()
                         ? absl::NotFoundError(absl::StrCat("node ", target, " has no region"))
                         : absl::OkStatus();
    char word[8];
    const absl::Time start = absl::Now();
    if (s.ok()) {
      s = node.Read(GlobalAddress{regions[0].region_id(), 0}, word, sizeof(word),
                    absl::Seconds(60));
    }
    spdlog::info("node {}: READ of node {} ended after {}: {}", node.id(), target,
                 absl::FormatDuration(absl::Now() - start), s.ToString());
    Emit(absl::StrCat("READ ", target, " ",
                      s.ok() ? "OK"
                             : absl::StrCat(absl::StatusCodeToString(s.code()), " ", s.message())));
  } else if (cmd == "members") {
    Emit(absl::StrCat("MEMBERS ", Members(node)));
  } else {
    Emit(absl::StrCat("UNKNOWN ", cmd));
  }
}

// Runs commands until "quit", the end of input or the node's eviction; returns the exit status.
int Serve(Node& node, Rpc& rpc, Messenger::Lane& lane) {
  std::string pending;
  for (;;) {
    if (absl::Status evicted = node.evicted(); !evicted.ok()) {
      Emit(absl::StrCat("EVICTED ", evicted.message()));
      spdlog::error("{}", std::string(evicted.message()));
      return kEvictedExitCode;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[256];
    const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n <= 0) return 0;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string cmd(absl::StripAsciiWhitespace(pending.substr(0, nl)));
      pending.erase(0, nl + 1);
      if (cmd == "quit") return 0;
      if (!cmd.empty()) RunCommand(cmd, node, rpc, lane);
    }
  }
}

int NodeMain() {
  const int id = absl::GetFlag(FLAGS_node_id);
  testing::MessagingNode n;
  if (int rc = testing::StartMessagingNode(id, absl::GetFlag(FLAGS_config),
                                           absl::GetFlag(FLAGS_log_level), Options(), &n);
      rc != 0) {
    return rc;
  }
  int rc = 0;
  {
    Rpc rpc(n.messenger.get());
    rpc.RegisterHandler(kEcho, [id](const RpcRequest& r) -> absl::StatusOr<std::string> {
      if (r.payload == "stale") Emit(absl::StrCat("HANDLED stale from node ", r.from));
      return absl::StrCat(id, ":", r.payload);
    });
    // An eviction is held back for a second, as on a node whose threads are scheduled late after
    // it resumes: a node whose lease ended must serve nothing meanwhile (phase 2).
    SyncPoint* sp = SyncPoint::GetInstance();
    sp->SetCallBack("TcpConfigurationManager::Evict",
                    [](void*) { absl::SleepFor(absl::Seconds(1)); });
    sp->EnableProcessing();
    // One lane for every call: a lane that gave up on a paused peer would show in later calls.
    absl::StatusOr<Messenger::LaneLease> lane = n.messenger->AcquireLane();
    if (!lane.ok()) {
      spdlog::error("node {}: {}", id, std::string(lane.status().message()));
      return 1;
    }
    Emit(absl::StrCat("READY ", id));
    rc = Serve(*n.node, rpc, **lane);
  }
  n.Stop();
  return rc;
}

// ---------------------------------------------------------------------------------------------
// Driver role

class Driver {
 public:
  Driver(std::string config_path, absl::Time deadline)
      : config_path_(std::move(config_path)), deadline_(deadline), nodes_(kNodes) {}

  absl::Status Start(int id) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> c = ChildProcess::SpawnSelf(
        {"--role=node", absl::StrCat("--config=", config_path_), absl::StrCat("--node_id=", id),
         absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))});
    if (!c.ok()) return c.status();
    nodes_[id] = std::move(*c);
    return absl::OkStatus();
  }
  absl::Status WaitReady(int id) { return Line(id, "READY").status(); }

  // Sends `cmd` to node `id` and returns its answer, the line starting with `answer`.
  absl::StatusOr<std::string> Ask(int id, const std::string& cmd, const std::string& answer) {
    if (absl::Status s = nodes_[id]->Send(cmd + "\n"); !s.ok()) return s;
    return Line(id, answer);
  }
  absl::StatusOr<std::string> Line(int id, const std::string& prefix) {
    absl::StatusOr<std::string> line = nodes_[id]->WaitForLine(prefix, deadline_);
    if (!line.ok()) {
      return absl::Status(line.status().code(), absl::StrCat("node ", id, ": waiting for '", prefix,
                                                             "': ", line.status().message()));
    }
    return line;
  }
  // Node `from` calls node `to`; the answer's status word ("OK", "UNAVAILABLE", ...) and rest.
  absl::StatusOr<std::string> Call(int from, int to) {
    absl::StatusOr<std::string> line = Ask(from, absl::StrCat("call ", to), "CALL");
    if (!line.ok()) return line;
    return line->substr(absl::StrCat("CALL ", to, " ").size());
  }
  absl::Status ExpectCallOk(int from, int to) {
    absl::StatusOr<std::string> r = Call(from, to);
    if (!r.ok()) return r.status();
    if (*r != "OK") {
      return absl::InternalError(absl::StrCat("node ", from, " -> node ", to, ": ", *r));
    }
    return absl::OkStatus();
  }

  ChildProcess& node(int id) { return *nodes_[id]; }

  // Waits (until the deadline) for node `id` to exit; returns how it ended.
  absl::StatusOr<std::string> WaitExit(int id) {
    std::string how;
    while (!nodes_[id]->reaped() && !nodes_[id]->Exited(&how)) {
      if (absl::Now() > deadline_) {
        return absl::DeadlineExceededError(absl::StrCat("node ", id, " did not exit"));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (how.empty()) {  // reaped before (by Line, when it saw the end of the output)
      const int status = nodes_[id]->wait_status();
      how = WIFEXITED(status) ? absl::StrCat("exited with status ", WEXITSTATUS(status))
                              : absl::StrCat("ended with wait status ", status);
    }
    return how;
  }

  // Stops every node, the CM's (node 0) last so that nobody loses the CM first. Returns an
  // error if a node did not end with status 0.
  absl::Status StopAll() {
    absl::Status result;
    for (int id = kNodes - 1; id >= 0; --id) {
      if (nodes_[id] == nullptr) continue;
      nodes_[id]->Send("quit\n").IgnoreError();
      const std::string how = nodes_[id]->Stop();
      if (!how.empty() && how != "exited with status 0" && result.ok()) {
        result = absl::InternalError(absl::StrCat("node ", id, " ", how, " when asked to quit"));
      }
      nodes_[id].reset();
    }
    return result;
  }

 private:
  const std::string config_path_;
  const absl::Time deadline_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
};

#define RETURN_IF_ERROR(expr)                 \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)

absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

// Waits until every thread of `pid` is stopped. kill(SIGSTOP) returns before that: one thread
// takes the signal and stops the others when it next runs, and on a loaded machine the rest may
// go on serving for a while (a READ posted meanwhile can complete).
absl::Status WaitStopped(pid_t pid, absl::Time deadline) {
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  for (;;) {
    bool all = true, any = false;
    if (DIR* dir = opendir(tasks.c_str()); dir != nullptr) {
      while (dirent* e = readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        std::ifstream stat(absl::StrCat(tasks, "/", e->d_name, "/stat"));
        std::string line;
        if (!std::getline(stat, line)) continue;  // the thread exited
        // "tid (comm) S ...": the state follows the last ')'.
        const size_t paren = line.rfind(')');
        any = true;
        all &= paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'T';
      }
      closedir(dir);
    }
    if (any && all) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("process ", pid, " did not stop"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// Phase 1: a pause well under the lease.
absl::Status ShortPause(Driver& d) {
  RETURN_IF_ERROR(d.ExpectCallOk(1, 2));
  RETURN_IF_ERROR(Expect(kill(d.node(2).pid(), SIGSTOP) == 0, "SIGSTOP failed"));
  // Node 1 calls the paused node: the flush may time out (300 ms) or the call wait for the
  // answer; either is fine, but the lane must not give up on node 2 for good.
  RETURN_IF_ERROR(d.node(1).Send("call 2\n"));
  absl::SleepFor(absl::Milliseconds(600));
  RETURN_IF_ERROR(Expect(kill(d.node(2).pid(), SIGCONT) == 0, "SIGCONT failed"));
  absl::StatusOr<std::string> during = d.Line(1, "CALL");
  if (!during.ok()) return during.status();
  std::printf("  call during the short pause: %s\n", during->c_str());
  RETURN_IF_ERROR(Expect(*during == "CALL 2 OK" || absl::StartsWith(*during, "CALL 2 DEADLINE"),
                         absl::StrCat("call during a short pause: ", *during)));
  for (int from = 0; from < kNodes; ++from) {
    for (int to = 0; to < kNodes; ++to) RETURN_IF_ERROR(d.ExpectCallOk(from, to));
  }
  absl::StatusOr<std::string> members = d.Ask(0, "members", "MEMBERS");
  if (!members.ok()) return members.status();
  return Expect(*members == "MEMBERS 0,1,2",
                absl::StrCat("a pause well under the lease evicted a node: ", *members));
}

// Phase 2: a pause longer than the lease.
absl::Status LongPause(Driver& d, const std::string& provider) {
  RETURN_IF_ERROR(Expect(kill(d.node(2).pid(), SIGSTOP) == 0, "SIGSTOP failed"));
  if (absl::Status s = WaitStopped(d.node(2).pid(), absl::Now() + absl::Seconds(30)); !s.ok()) {
    kill(d.node(2).pid(), SIGCONT);
    return s;
  }
  // Node 0 READs the paused node's memory: the READ must end when node 2 leaves the cluster.
  RETURN_IF_ERROR(d.node(0).Send("read 2\n"));
  // Node 1 calls it: the request waits for node 2 (in its ring, or on the way), which must not
  // serve it when it resumes, its lease over.
  RETURN_IF_ERROR(d.node(1).Send("call 2 stale\nwaitgone 2\n"));
  absl::StatusOr<std::string> stale = d.Line(1, "CALL");
  absl::StatusOr<std::string> gone = stale.ok() ? d.Line(1, "GONE") : stale;
  if (!gone.ok()) {
    kill(d.node(2).pid(), SIGCONT);
    return gone.status();
  }
  std::printf("  node 1 call of paused node 2: %s\n", stale->c_str());
  absl::StatusOr<std::string> read = d.Line(0, "READ");
  if (!read.ok()) {
    kill(d.node(2).pid(), SIGCONT);
    return read.status();
  }
  std::printf("  node 0 READ of paused node 2: %s\n", read->c_str());
  // On tcp;ofi_rxm (manual progress: the target's process serves READs) the READ cannot
  // complete while node 2 is stopped. Elsewhere it may: shm copies small READs straight out of
  // the target's memory (process_vm_readv), and on verbs the target's kernel or NIC answers.
  const bool may_complete = provider != "tcp;ofi_rxm";
  if (!(may_complete && *read == "READ 2 OK") &&
      !(absl::StartsWith(*read, "READ 2 UNAVAILABLE") &&
        absl::StrContains(*read, "node 2 left the cluster") &&
        absl::StrContains(*read, "its lease expired") &&
        absl::StrContains(*read, "abandoned"))) {
    kill(d.node(2).pid(), SIGCONT);
    return absl::InternalError(absl::StrCat(
        "a READ of node 2 in flight when it was evicted should end with Unavailable saying it "
        "left the cluster: ",
        *read));
  }
  for (int id : {0, 1}) {
    absl::StatusOr<std::string> gone = d.Ask(id, "waitgone 2", "GONE");
    if (!gone.ok()) {
      kill(d.node(2).pid(), SIGCONT);
      return gone.status();
    }
  }
  for (int id : {0, 1}) {
    absl::StatusOr<std::string> r = d.Call(id, 2);
    if (!r.ok() || !absl::StartsWith(*r, "UNAVAILABLE") ||
        !absl::StrContains(*r, "its lease expired")) {
      kill(d.node(2).pid(), SIGCONT);
      return absl::InternalError(absl::StrCat(
          "a call from node ", id,
          " to the evicted node 2 should fail with Unavailable saying its lease expired: ",
          r.ok() ? *r : r.status().ToString()));
    }
    std::printf("  node %d -> evicted node 2: %s\n", id, r->c_str());
  }
  RETURN_IF_ERROR(Expect(kill(d.node(2).pid(), SIGCONT) == 0, "SIGCONT failed"));
  // Everything node 2 prints from its resume to its exit: its eviction, and no request served.
  std::string evicted_line;
  for (;;) {
    absl::StatusOr<std::string> line = d.Line(2, "");
    if (!line.ok()) break;  // it exited (or the deadline passed: WaitExit says)
    RETURN_IF_ERROR(Expect(!absl::StartsWith(*line, "HANDLED"),
                           absl::StrCat("node 2 served a request after its lease ended: ", *line)));
    if (absl::StartsWith(*line, "EVICTED") && evicted_line.empty()) evicted_line = *line;
  }
  absl::StatusOr<std::string> evicted =
      evicted_line.empty() ? absl::StatusOr<std::string>(absl::InternalError(
                                 "node 2 did not say it was evicted"))
                           : absl::StatusOr<std::string>(evicted_line);
  if (!evicted.ok()) return evicted.status();
  std::printf("  node 2 on resume: %s\n", evicted->c_str());
  RETURN_IF_ERROR(
      Expect(absl::StrContains(*evicted, "node 2 was evicted from the cluster: its lease expired"),
             absl::StrCat("unexpected eviction message: ", *evicted)));
  absl::StatusOr<std::string> how = d.WaitExit(2);
  if (!how.ok()) return how.status();
  return Expect(*how == absl::StrCat("exited with status ", kEvictedExitCode),
                absl::StrCat("the evicted node ", *how));
}

// Phase 3: node 2 restarted under the same id.
absl::Status Restart(Driver& d) {
  RETURN_IF_ERROR(d.Start(2));
  RETURN_IF_ERROR(d.WaitReady(2));
  for (int from = 0; from < kNodes; ++from) {
    for (int to = 0; to < kNodes; ++to) RETURN_IF_ERROR(d.ExpectCallOk(from, to));
  }
  absl::StatusOr<std::string> members = d.Ask(1, "members", "MEMBERS");
  if (!members.ok()) return members.status();
  return Expect(*members == "MEMBERS 0,1,2", absl::StrCat("after the restart: ", *members));
}

absl::Status Run(const std::string& provider, const std::string& host) {
  absl::StatusOr<config::ClusterConfig> cfg = LocalClusterConfig(kNodes, provider, host);
  if (!cfg.ok()) return cfg.status();
  cfg->set_lease_ms(kLeaseMs);
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("lease_test");
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::string> path = (*dir)->Write("cluster.textproto", ToText(*cfg));
  if (!path.ok()) return path.status();
  Driver d(*path, absl::Now() + absl::Seconds(120));
  for (int id = 0; id < kNodes; ++id) RETURN_IF_ERROR(d.Start(id));
  for (int id = 0; id < kNodes; ++id) RETURN_IF_ERROR(d.WaitReady(id));
  absl::Status s = ShortPause(d);
  if (s.ok()) s = LongPause(d, provider);
  if (s.ok()) s = Restart(d);
  absl::Status stopped = d.StopAll();
  return s.ok() ? stopped : s;
}

int DriverMain() {
  // A node that dies must show up as a failed step, not kill the driver when it writes to the
  // node's standard input.
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "lease_test"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  const char* env = std::getenv("FARM_TEST_PROVIDERS");
  const char* host_env = std::getenv("FARM_TEST_HOST");
  const std::string providers = env != nullptr && *env != '\0' ? env : "shm tcp;ofi_rxm";
  const std::string host = host_env != nullptr && *host_env != '\0' ? host_env : "127.0.0.1";
  int failed = 0;
  for (absl::string_view p : absl::StrSplit(providers, ' ', absl::SkipEmpty())) {
    const std::string provider(p);
    std::printf("== leases: %d nodes, lease %u ms, provider %s, host %s\n", kNodes, kLeaseMs,
                provider.c_str(), host.c_str());
    std::fflush(stdout);
    absl::Status s = Run(provider, host);
    std::printf("%s: %s%s\n", s.ok() ? "PASS" : "FAIL", provider.c_str(),
                s.ok() ? "" : absl::StrCat(" (", s.message(), ")").c_str());
    std::fflush(stdout);
    failed += !s.ok();
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Leases and eviction with real node processes paused with SIGSTOP, on each provider in "
      "$FARM_TEST_PROVIDERS (default \"shm tcp;ofi_rxm\").");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_role) == "node") return farm::NodeMain();
  if (!absl::GetFlag(FLAGS_role).empty()) {
    std::fprintf(stderr, "--role: only 'node' (internal) is accepted\n");
    return 2;
  }
  return farm::DriverMain();
}
