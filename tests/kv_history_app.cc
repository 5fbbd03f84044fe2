// kv_history_app: records a history of concurrent KV operations for the linearizability check
// (tests/kv_linearizability_test.sh, tools/lincheck). Every node runs --threads client threads
// that issue random get / put / del / cas operations on a few shared keys, logging each call and
// each return as one JSON line to <--history_dir>/node<N>.jsonl the moment it happens (one
// write(2) per event, so the log of a process that dies keeps every event up to its death).
// Node --dying_node exits abruptly (_Exit, no clean-up, like a kill) once its threads have
// started --die_after_ops operations, while its other threads are in the middle of theirs; its shard's keys become unreachable, and operations that end in
// an error whose outcome is unknown get no return event (the checker treats them as possibly
// applied at any time after their call).
//
// Log lines:
//   {"ev":"call","id":"N-T-S","client":C,"time":NS,"op":"put","key":"k1","value":"v"}
//   {"ev":"ret","id":"N-T-S","time":NS,"found":true,"value":"v"}     (get)
//   {"ev":"ret","id":"N-T-S","time":NS,"deleted":false}              (del)
//   {"ev":"ret","id":"N-T-S","time":NS,"ok":true}                    (cas; put: no fields)
//   {"ev":"fail","id":"N-T-S"}   the operation certainly did not happen (dropped by the checker)
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"

ABSL_FLAG(std::string, history_dir, "", "directory for the per-node logs (required)");
ABSL_FLAG(int, threads, 2, "client threads per node");
ABSL_FLAG(int, keys, 4, "shared keys k0..");
ABSL_FLAG(int, ops, 400, "operations per thread (at most)");
ABSL_FLAG(int, duration_ms, 3000, "stop issuing operations after this long");
ABSL_FLAG(int, dying_node, -1, "node that exits abruptly (-1: none)");
ABSL_FLAG(int, die_after_ops, 200,
          "the dying node exits once its threads have started this many operations");

namespace {

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Keys and values here are printable ASCII without quotes or backslashes.
std::string Q(const std::string& s) { return absl::StrCat("\"", s, "\""); }

class Log {
 public:
  explicit Log(const std::string& path) : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644)) {}
  ~Log() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  void Line(const std::string& json) {
    const std::string l = json + "\n";
    std::lock_guard<std::mutex> g(mu_);
    ssize_t n = write(fd_, l.data(), l.size());
    (void)n;
  }

 private:
  int fd_;
  std::mutex mu_;
};

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<farm::kv::Store> store;
  farm::App app;
  app.name = "kv_history";
  app.setup = [&store](farm::Runtime& rt) -> absl::Status {
    farm::kv::Options o;
    o.buckets = 64;  // small: keys share neighbourhoods
    absl::StatusOr<std::unique_ptr<farm::kv::Store>> s = farm::kv::Store::Create(rt, o);
    if (!s.ok()) return s.status();
    store = std::move(*s);
    return absl::OkStatus();
  };
  app.run = [&store](farm::Runtime& rt) -> absl::Status {
    const std::string dir = absl::GetFlag(FLAGS_history_dir);
    if (dir.empty()) return absl::InvalidArgumentError("--history_dir is required");
    Log log(absl::StrCat(dir, "/node", rt.node_id(), ".jsonl"));
    if (!log.ok()) return absl::InternalError(absl::StrCat("cannot write into ", dir));
    const int threads = absl::GetFlag(FLAGS_threads);
    const int keys = absl::GetFlag(FLAGS_keys);
    const int ops = absl::GetFlag(FLAGS_ops);
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Milliseconds(absl::GetFlag(FLAGS_duration_ms));
    const bool dying = absl::GetFlag(FLAGS_dying_node) == static_cast<int>(rt.node_id());
    std::vector<std::unique_ptr<farm::Worker>> workers;
    for (int t = 0; t < threads; ++t) {
      absl::StatusOr<std::unique_ptr<farm::Worker>> w = rt.NewWorker();
      if (!w.ok()) return w.status();
      workers.push_back(std::move(*w));
    }
    std::atomic<int> errors{0};
    std::atomic<int> started{0};
    const int die_after = absl::GetFlag(FLAGS_die_after_ops);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        farm::kv::Client kv(*store, *workers[t]);
        std::mt19937 rng(rt.node_id() * 1000 + t);
        const int client = static_cast<int>(rt.node_id()) * threads + t;
        std::set<int> unreachable;  // keys whose shard went away: not used again
        for (int seq = 0; seq < ops && absl::Now() < end; ++seq) {
          if (static_cast<int>(unreachable.size()) == keys) break;
          if (dying && started.fetch_add(1) == die_after) {
            std::printf("[node %u] dying now\n", rt.node_id());
            std::fflush(stdout);
            std::_Exit(17);
          }
          int k = rng() % keys;
          while (unreachable.count(k) > 0) k = (k + 1) % keys;
          const std::string key = absl::StrCat("k", k);
          const std::string id = absl::StrCat(rt.node_id(), "-", t, "-", seq);
          const std::string value = absl::StrCat("v", id);
          const int pick = rng() % 10;
          std::string call = absl::StrCat("{\"ev\":\"call\",\"id\":", Q(id), ",\"client\":", client,
                                          ",\"time\":");
          std::string ret;
          absl::Status st;
          if (pick < 4) {  // get
            absl::StrAppend(&call, NowNs(), ",\"op\":\"get\",\"key\":", Q(key), "}");
            log.Line(call);
            absl::StatusOr<std::string> v = kv.Get(key);
            const int64_t now = NowNs();
            if (v.ok()) {
              ret = absl::StrCat(",\"found\":true,\"value\":", Q(*v));
            } else if (absl::IsNotFound(v.status())) {
              ret = ",\"found\":false";
            }
            st = absl::IsNotFound(v.status()) ? absl::OkStatus() : v.status();
            if (st.ok()) {
              log.Line(absl::StrCat("{\"ev\":\"ret\",\"id\":", Q(id), ",\"time\":", now, ret, "}"));
            }
          } else if (pick < 7) {  // put
            absl::StrAppend(&call, NowNs(), ",\"op\":\"put\",\"key\":", Q(key), ",\"value\":",
                            Q(value), "}");
            log.Line(call);
            st = kv.Put(key, value);
            const int64_t now = NowNs();
            if (st.ok()) log.Line(absl::StrCat("{\"ev\":\"ret\",\"id\":", Q(id), ",\"time\":", now, "}"));
          } else if (pick < 8) {  // del
            absl::StrAppend(&call, NowNs(), ",\"op\":\"del\",\"key\":", Q(key), "}");
            log.Line(call);
            absl::StatusOr<bool> d = kv.Delete(key);
            const int64_t now = NowNs();
            st = d.status();
            if (d.ok()) {
              log.Line(absl::StrCat("{\"ev\":\"ret\",\"id\":", Q(id), ",\"time\":", now,
                                    ",\"deleted\":", *d ? "true" : "false", "}"));
            }
          } else {  // cas from the value this thread last saw (or from absent)
            absl::StatusOr<std::string> cur = kv.Get(key);
            std::optional<std::string> expected;
            if (cur.ok()) expected = *cur;
            if (!cur.ok() && !absl::IsNotFound(cur.status())) {
              unreachable.insert(k);
              continue;
            }
            absl::StrAppend(&call, NowNs(), ",\"op\":\"cas\",\"key\":", Q(key), ",\"expected\":",
                            expected ? Q(*expected) : "null", ",\"value\":", Q(value), "}");
            log.Line(call);
            absl::StatusOr<bool> c = kv.CompareAndSet(key, expected, value);
            const int64_t now = NowNs();
            st = c.status();
            if (c.ok()) {
              log.Line(absl::StrCat("{\"ev\":\"ret\",\"id\":", Q(id), ",\"time\":", now,
                                    ",\"ok\":", *c ? "true" : "false", "}"));
            }
          }
          if (!st.ok()) {
            // Aborted (every attempt conflicted) and InvalidArgument certainly did not happen;
            // anything else (the shard's node left mid-operation) may or may not have.
            if (absl::IsAborted(st) || absl::IsInvalidArgument(st)) {
              log.Line(absl::StrCat("{\"ev\":\"fail\",\"id\":", Q(id), "}"));
            }
            std::fprintf(stderr, "[node %u] %s on %s: %s\n", rt.node_id(), id.c_str(), key.c_str(),
                         st.ToString().c_str());
            if (absl::IsInvalidArgument(st)) errors++;
            unreachable.insert(k);
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    workers.clear();
    if (errors.load() > 0) return absl::InternalError("operations failed with InvalidArgument");
    std::printf("[node %u] history written\n", rt.node_id());
    return absl::OkStatus();
  };
  return farm::RunNode(argc, argv, app);
}
