// rpc_storm_test: a 3-node all-to-all RPC storm between real node processes, every response
// verified, for each provider.
//
// The test re-executes itself once per node (--role=node). Each node starts a farm::Node with
// messaging, serves an RPC whose response is a function of the request and the serving node,
// waits until every node is ready ("go" on its standard input), then runs --threads threads of
// --calls calls each, to every node in turn (itself included), half of them one at a time and
// half in batches of 8 queued on one lane (one WRITE per destination). It prints
//   RESULT {"node":N,"calls":C,"ok":K,"first_error":"..."}
// and keeps serving until its standard input closes, so that slower nodes still get answers.
// The driver checks that every node's calls all succeeded and that every node exits cleanly.
//
// Environment (as tests/multinode_test.sh): FARM_TEST_PROVIDERS (default "shm tcp;ofi_rxm"),
// FARM_TEST_HOST (default 127.0.0.1).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "platform/mutex.h"
#include "messaging/messenger.h"
#include "messaging/rpc.h"
#include "platform/config.h"
#include "platform/logging.h"
#include "platform/node.h"
#include "spdlog/spdlog.h"
#include "tests/messaging_node.h"
#include "tools/child_process.h"

ABSL_FLAG(int, nodes, 3, "nodes in the storm");
ABSL_FLAG(int, threads, 2, "calling threads per node (each leases its own lane)");
ABSL_FLAG(int, calls, 600, "calls per thread");
ABSL_FLAG(int64_t, ring_size, 16384, "bytes per message ring (small: many wrap-arounds)");
ABSL_FLAG(int, timeout_s, 120, "seconds the whole storm may take per provider");
ABSL_FLAG(std::string, log_level, "warn", "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, role, "", "internal: 'node' when re-executed as a node");
ABSL_FLAG(std::string, config, "", "internal: cluster configuration of the node role");
ABSL_FLAG(int, node_id, -1, "internal: node id of the node role");

namespace farm {
namespace {

using testing::Emit;

constexpr uint16_t kStorm = 11;
constexpr int kBatch = 8;

struct Request {
  uint32_t from;
  uint32_t thread;
  uint64_t k;
};

std::string MakeRequest(uint32_t from, uint32_t thread, uint64_t k) {
  const Request r{from, thread, k};
  std::string s(reinterpret_cast<const char*>(&r), sizeof(r));
  for (uint64_t i = 0; i < k % 300; ++i) s.push_back(static_cast<char>('a' + (k + i) % 26));
  return s;
}

// What node `server` answers to `request`: the request reversed, then the server's id.
std::string Answer(uint32_t server, absl::string_view request) {
  std::string s(request.rbegin(), request.rend());
  absl::StrAppend(&s, "@", server);
  return s;
}

MessengerOptions StormOptions() {
  MessengerOptions o;
  o.lanes = absl::GetFlag(FLAGS_threads);
  o.ring_size = static_cast<uint64_t>(absl::GetFlag(FLAGS_ring_size));
  return o;
}

// ---------------------------------------------------------------------------------------------
// Node role

class Storm {
 public:
  Storm(Rpc* rpc, uint32_t self, int nodes) : rpc_(rpc), self_(self), nodes_(nodes) {}

  void Run(int threads, int calls) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) ts.emplace_back([this, t, calls] { Thread(t, calls); });
    for (auto& t : ts) t.join();
  }
  std::string ResultJson() {
    farm::MutexLock l(&mu_);
    std::string err = first_error_;
    for (char& ch : err) {
      if (ch == '"' || ch == '\\') ch = '\'';
    }
    return absl::StrCat("{\"node\":", self_, ",\"calls\":", calls_.load(), ",\"ok\":", ok_.load(),
                        ",\"first_error\":\"", err, "\"}");
  }

 private:
  void Check(uint32_t target, const std::string& request, const absl::StatusOr<std::string>& r) {
    ++calls_;
    if (r.ok() && *r == Answer(target, request)) {
      ++ok_;
      return;
    }
    farm::MutexLock l(&mu_);
    if (first_error_.empty()) {
      first_error_ = r.ok() ? absl::StrCat("wrong answer from node ", target)
                            : std::string(r.status().ToString());
    }
  }

  void Thread(int t, int calls) {
    absl::StatusOr<Messenger::LaneLease> lane = rpc_->messenger()->AcquireLane();
    if (!lane.ok()) {
      Check(self_, "", lane.status());
      return;
    }
    const absl::Duration timeout = absl::Seconds(60);
    for (int k = 0; k < calls; k += kBatch) {
      const int n = std::min(kBatch, calls - k);
      std::vector<std::pair<uint32_t, std::string>> reqs;
      for (int i = 0; i < n; ++i) {
        const uint32_t target = static_cast<uint32_t>((k + i + t + self_) % nodes_);
        reqs.emplace_back(target, MakeRequest(self_, t, k + i));
      }
      if ((k / kBatch) % 2 == 0) {
        for (auto& [target, req] : reqs)
          Check(target, req, rpc_->Call(**lane, target, kStorm, req, timeout));
        continue;
      }
      std::vector<absl::StatusOr<std::shared_ptr<Rpc::Pending>>> pending;
      for (auto& [target, req] : reqs)
        pending.push_back(rpc_->Start(**lane, target, kStorm, req, timeout));
      for (int i = 0; i < n; ++i) {
        if (!pending[i].ok()) {
          Check(reqs[i].first, reqs[i].second, pending[i].status());
        } else {
          Check(reqs[i].first, reqs[i].second, rpc_->Await(**lane, **pending[i]));
        }
      }
    }
  }

  Rpc* rpc_;
  const uint32_t self_;
  const int nodes_;
  std::atomic<int> calls_{0};
  std::atomic<int> ok_{0};
  farm::Mutex mu_;
  std::string first_error_ ABSL_GUARDED_BY(mu_);
};

// Reads standard input until `word` on a line (true) or end of input (false).
bool WaitForInput(const std::string& word) {
  std::string pending;
  char buf[256];
  for (;;) {
    const ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n <= 0) return false;
    pending.append(buf, static_cast<size_t>(n));
    for (absl::string_view line : absl::StrSplit(pending, '\n')) {
      if (line == word) return true;
    }
  }
}

int NodeMain() {
  const int id = absl::GetFlag(FLAGS_node_id);
  testing::MessagingNode n;
  if (int rc = testing::StartMessagingNode(id, absl::GetFlag(FLAGS_config),
                                           absl::GetFlag(FLAGS_log_level), StormOptions(), &n);
      rc != 0) {
    return rc;
  }
  int rc = 0;
  {
    Rpc rpc(n.messenger.get());
    rpc.RegisterHandler(kStorm, [id](const RpcRequest& r) -> absl::StatusOr<std::string> {
      return Answer(static_cast<uint32_t>(id), r.payload);
    });
    Emit(absl::StrCat("READY ", id));
    if (WaitForInput("go")) {
      Storm storm(&rpc, static_cast<uint32_t>(id), n.config.node_size());
      storm.Run(absl::GetFlag(FLAGS_threads), absl::GetFlag(FLAGS_calls));
      Emit(absl::StrCat("RESULT ", storm.ResultJson()));
      WaitForInput("quit");  // keep serving the others until the driver lets us go
    } else {
      rc = 1;
    }
  }
  n.Stop();
  return rc;
}

// ---------------------------------------------------------------------------------------------
// Driver role

// The value of "key":<number> in a flat JSON object, or -1.
int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string k = absl::StrCat("\"", key, "\":");
  const size_t p = json.find(k);
  int64_t v = -1;
  if (p == std::string::npos) return v;
  const size_t end = json.find_first_of(",}", p + k.size());
  if (!absl::SimpleAtoi(json.substr(p + k.size(), end - p - k.size()), &v)) return -1;
  return v;
}

absl::Status RunStorm(const std::string& provider, const std::string& host) {
  const int n = absl::GetFlag(FLAGS_nodes);
  absl::StatusOr<config::ClusterConfig> cfg = LocalClusterConfig(n, provider, host);
  if (!cfg.ok()) return cfg.status();
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("rpc_storm");
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::string> path = (*dir)->Write("cluster.textproto", ToText(*cfg));
  if (!path.ok()) return path.status();
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> c = ChildProcess::SpawnSelf(
        {"--role=node", absl::StrCat("--config=", *path), absl::StrCat("--node_id=", i),
         absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
         absl::StrCat("--calls=", absl::GetFlag(FLAGS_calls)),
         absl::StrCat("--ring_size=", absl::GetFlag(FLAGS_ring_size)),
         absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))});
    if (!c.ok()) return c.status();
    nodes.push_back(std::move(*c));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  for (auto& c : nodes) {
    absl::StatusOr<std::string> line = c->WaitForLine("READY", deadline);
    if (!line.ok()) return line.status();
  }
  for (auto& c : nodes) {
    if (absl::Status s = c->Send("go\n"); !s.ok()) return s;
  }
  const int64_t want = int64_t{absl::GetFlag(FLAGS_threads)} * absl::GetFlag(FLAGS_calls);
  absl::Status result;
  for (auto& c : nodes) {
    absl::StatusOr<std::string> line = c->WaitForLine("RESULT", deadline);
    if (!line.ok()) return line.status();
    std::printf("  %s\n", line->c_str());
    if (JsonInt(*line, "calls") != want || JsonInt(*line, "ok") != want) {
      result = absl::InternalError(absl::StrCat("not every call succeeded: ", *line));
    }
  }
  for (auto& c : nodes) {
    c->Send("quit\n").IgnoreError();
    const std::string how = c->Stop();
    if (how != "exited with status 0" && result.ok()) {
      result = absl::InternalError(absl::StrCat("a node ", how, " at the end of the storm"));
    }
  }
  return result;
}

int DriverMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "rpc_storm"); !s.ok()) {
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
    std::printf("== %d nodes x %d threads x %d calls, provider %s, host %s\n",
                absl::GetFlag(FLAGS_nodes), absl::GetFlag(FLAGS_threads),
                absl::GetFlag(FLAGS_calls), provider.c_str(), host.c_str());
    std::fflush(stdout);
    const absl::Time start = absl::Now();
    absl::Status s = RunStorm(provider, host);
    std::printf("%s: %s (%s)\n", s.ok() ? "PASS" : "FAIL", provider.c_str(),
                s.ok() ? absl::FormatDuration(absl::Now() - start).c_str()
                       : std::string(s.message()).c_str());
    std::fflush(stdout);
    failed += !s.ok();
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "3-node all-to-all RPC storm between real node processes, on each provider in "
      "$FARM_TEST_PROVIDERS (default \"shm tcp;ofi_rxm\").\n  rpc_storm_test [--calls=600]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_role) == "node") return farm::NodeMain();
  if (!absl::GetFlag(FLAGS_role).empty()) {
    std::fprintf(stderr, "--role: only 'node' (internal) is accepted\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_nodes) < 1 || absl::GetFlag(FLAGS_threads) < 1 ||
      absl::GetFlag(FLAGS_calls) < 1) {
    std::fprintf(stderr, "--nodes, --threads and --calls must be positive\n");
    return 2;
  }
  return farm::DriverMain();
}
