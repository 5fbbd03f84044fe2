// kv_history_app: records a history of concurrent KV operations for the linearizability check
// (tests/kv_linearizability_test.sh, //tools/lincheck). Every node runs --threads client threads
// that issue random get / put / del / cas operations on a few shared keys, journalling each call
// and each return the moment it happens (kv/history.h, HistoryRecorder::StartJournal) to
// <--history_dir>/node<N>.jsonl, so the journal of a process that dies keeps every event up to
// its death. Node --dying_node exits abruptly (_Exit, no clean-up, like a kill) once its threads
// have started --die_after_ops operations (or half of --duration_ms has passed), while its other
// threads are in the middle of theirs;
// its shard's keys become unreachable. An operation that ends in an error has an unknown outcome
// (it may or may not have taken effect); a thread stops using a key after an error, so that a
// history holds few of those.
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
#include "kv/history.h"

ABSL_FLAG(std::string, history_dir, "", "directory for the per-node logs (required)");
ABSL_FLAG(int, threads, 2, "client threads per node");
ABSL_FLAG(int, keys, 4, "shared keys k0..");
ABSL_FLAG(int, ops, 400, "operations per thread (at most)");
ABSL_FLAG(int, duration_ms, 3000, "stop issuing operations after this long");
ABSL_FLAG(int, dying_node, -1, "node that exits abruptly (-1: none)");
ABSL_FLAG(int, die_after_ops, 200,
          "the dying node exits once its threads have started this many operations");

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
    farm::kv::HistoryRecorder history;
    if (absl::Status s = history.StartJournal(absl::StrCat(dir, "/node", rt.node_id(), ".jsonl"));
        !s.ok()) {
      return s;
    }
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
        std::set<int> unreachable;  // keys whose shard went away: not used again
        for (int seq = 0; seq < ops && absl::Now() < end; ++seq) {
          if (static_cast<int>(unreachable.size()) == keys) break;
          // Dies after --die_after_ops operations, or half-way through the run on a slow machine.
          if (dying && (started.fetch_add(1) == die_after || absl::Now() > start + (end - start) / 2)) {
            std::printf("[node %u] dying now\n", rt.node_id());
            std::fflush(stdout);
            std::_Exit(17);
          }
          int k = rng() % keys;
          while (unreachable.count(k) > 0) k = (k + 1) % keys;
          const std::string key = absl::StrCat("k", k);
          const std::string value = absl::StrCat("v", rt.node_id(), "-", t, "-", seq);
          const uint32_t client = rt.node_id() * threads + t;
          const int pick = rng() % 10;
          absl::Status st;
          if (pick < 4) {
            auto h = history.Call(client, farm::kv::HistoryOp::Get(key));
            absl::StatusOr<std::string> v = kv.Get(key);
            (void)history.ReturnGet(h, v);
            st = absl::IsNotFound(v.status()) ? absl::OkStatus() : v.status();
          } else if (pick < 7) {
            auto h = history.Call(client, farm::kv::HistoryOp::Put(key, value));
            st = kv.Put(key, value);
            (void)history.ReturnPut(h, st);
          } else if (pick < 8) {
            auto h = history.Call(client, farm::kv::HistoryOp::Del(key));
            absl::StatusOr<bool> d = kv.Delete(key);
            (void)history.ReturnDel(h, d);
            st = d.status();
          } else {
            // A cas from the value this thread just saw (or from absent); that get is not part
            // of the history.
            absl::StatusOr<std::string> cur = kv.Get(key);
            if (!cur.ok() && !absl::IsNotFound(cur.status())) {
              unreachable.insert(k);
              continue;
            }
            std::optional<std::string> expected;
            if (cur.ok()) expected = *cur;
            auto h = history.Call(client, farm::kv::HistoryOp::Cas(key, expected, value));
            absl::StatusOr<bool> c = kv.CompareAndSet(key, expected, value);
            (void)history.ReturnCas(h, c);
            st = c.status();
          }
          if (!st.ok()) {
            std::fprintf(stderr, "[node %u] thread %d, op %d on %s: %s\n", rt.node_id(), t, seq,
                         key.c_str(), st.ToString().c_str());
            if (absl::IsInvalidArgument(st)) errors++;
            unreachable.insert(k);
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    workers.clear();
    if (errors.load() > 0) return absl::InternalError("operations failed with InvalidArgument");
    if (absl::Status s = history.JournalStatus(); !s.ok()) return s;
    std::printf("[node %u] history written\n", rt.node_id());
    return absl::OkStatus();
  };
  return farm::RunNode(argc, argv, app);
}
