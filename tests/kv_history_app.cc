// kv_history_app: records a history of concurrent KV operations for the linearizability check
// (tests/kv_linearizability_test.sh, //tools/lincheck). Every node runs --threads client threads
// that issue random operations, journalling each call and each return the moment it happens
// (kv/history.h, HistoryRecorder::StartJournal) to <--history_dir>/node<N>.jsonl, so the journal
// of a process that dies keeps every event up to its death.
//
// The workload reaches every path of the table (kv/table_txn.cc, kv/lookup.cc): a tiny table
// (--buckets home buckets of --bucket_bytes per shard, neighbourhood --neighbourhood) under --keys
// keys that are put and deleted all the time, so that entries are displaced (hopscotch), overflow
// chains grow and shrink, and blocks and items are freed and their slots reused; unique values of
// every size class: inline, out of line (a third of them exactly an overflow block's size, so that
// a freed block's slot is reused by an item), and chunked (larger than one object); reads by
// one-sided GET, by GetRpc and by MultiGet on either of its paths, one-sided READs or batched GETs
// by RPC (recorded as one get per key over the MultiGet's interval), put, del and cas, and the
// atomic updates: IncrBy (on every sixth key, whose puts write decimal integers, and now and then
// elsewhere or past int64, where it is refused), PutIfAbsent, PutIfPresent, GetAndSet, Append and
// Exists. With
// --delay_block_reads a GET or a write that follows a link to an overflow block, or a GET that
// follows an entry to its item, sleeps a little first, now and then (sync points
// kv::*:BeforeBlockRead, kv::LookupOnce:BeforeItemRead), which widens the windows in which the
// table changes under it.
//
// Errors: without a dying node every error other than NotFound fails the node (exit status 1):
// nothing in a healthy cluster excuses one. Node --dying_node exits abruptly (_Exit, no clean-up,
// like a kill) once its threads have started --die_after_ops operations (or half of
// --duration_ms has passed), while its other threads are in the middle of theirs; its shard's keys
// become unreachable, operations on them end in errors with an unknown outcome (they may or may
// not have taken effect), and a thread stops using a key after an error so that a history holds
// few of those. Even then InvalidArgument, DataLoss and Internal fail the node.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
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
#include "platform/sync_point.h"

ABSL_FLAG(std::string, history_dir, "", "directory for the per-node logs (required)");
ABSL_FLAG(int, threads, 2, "client threads per node");
ABSL_FLAG(int, keys, 48, "keys k0.. shared by every thread");
ABSL_FLAG(int, ops, 1500, "operations per thread (at most)");
ABSL_FLAG(int, duration_ms, 10000, "stop issuing operations after this long");
ABSL_FLAG(uint64_t, buckets, 3, "home buckets per shard");
ABSL_FLAG(uint32_t, bucket_bytes, 128, "bytes per bucket");
ABSL_FLAG(uint32_t, neighbourhood, 2, "neighbourhood H");
ABSL_FLAG(bool, delay_block_reads, true,
          "sleep now and then before a READ of an overflow block (see the file comment)");
ABSL_FLAG(int, dying_node, -1, "node that exits abruptly (-1: none)");
ABSL_FLAG(int, die_after_ops, 200,
          "the dying node exits once its threads have started this many operations");

namespace {

using farm::kv::HistoryOp;
using farm::kv::HistoryRecorder;

constexpr int kMaxMultiGet = 3;
// Client ids per thread: its own operations use the first; a MultiGet's gets, which overlap in
// time, one each (the checker wants one operation at a time per client id).
constexpr int kClientsPerThread = kMaxMultiGet;

// Sizes of the table's item classes, for a key of `key_len` bytes.
struct Sizes {
  uint64_t block = 0;    // an overflow block's payload: an item of key and value of this size
                         // can take a freed block's slot
  uint64_t chunked = 0;     // the smallest value too large for one object
};

// A value of `len` bytes (at least its prefix), unique by `prefix`.
std::string Value(const std::string& prefix, uint64_t len) {
  std::string v = prefix;
  while (v.size() < len) v.push_back(static_cast<char>('a' + v.size() % 26));
  return v;
}

// The size of the next value: inline, out of line (a third exactly a block's item), or chunked
// (only keys whose index is a multiple of 4, which GetRpc leaves alone: a chunked value does not
// fit one RPC answer).
uint64_t PickSize(std::mt19937& rng, int key, const Sizes& s) {
  const int r = rng() % 20;
  if (r < 8) return 4 + rng() % 24;  // inline
  if (r < 12) return s.block - 8 - absl::StrCat("k", key).size();  // 8: the item's lengths
  if (r < 17 || key % 4 != 0) return 60 + rng() % 400;
  return s.chunked + rng() % 3000;
}

// Sleeps up to 1.5 ms before every other READ of an overflow block or out-of-line item,
// after the READ that found the pointer to it.
void DelayBlockReads() {
  farm::SyncPoint* sp = farm::SyncPoint::GetInstance();
  auto delay = [](void*) {
    thread_local std::mt19937 rng(std::random_device{}());
    if (rng() % 2 == 0) absl::SleepFor(absl::Microseconds(rng() % 1500));
  };
  sp->SetCallBack("kv::LookupOnce:BeforeBlockRead", delay);
  sp->SetCallBack("kv::LookupOnce:BeforeItemRead", delay);
  sp->SetCallBack("kv::TableTxn::Load:BeforeBlockRead", delay);
  sp->EnableProcessing();
}

class Thread {
 public:
  Thread(farm::kv::Store& store, farm::Worker& w, HistoryRecorder& history, uint32_t node, int t,
         const Sizes& sizes, bool strict)
      : kv_(store, w),
        history_(history),
        node_(node),
        t_(t),
        rng_(node * 1000 + t),
        client_((node * absl::GetFlag(FLAGS_threads) + t) * kClientsPerThread),
        sizes_(sizes),
        strict_(strict) {}

  int failures() const { return failures_; }

  // The table's shape now, kept as the largest seen (statistics are not part of the history).
  void Sample(farm::kv::ShardStats* reached) {
    absl::StatusOr<std::vector<farm::kv::ShardStats>> stats = kv_.Stats();
    if (!stats.ok()) return;
    farm::kv::ShardStats now;
    for (const farm::kv::ShardStats& s : *stats) {
      now.displaced_items += s.displaced_items;
      now.overflow_blocks += s.overflow_blocks;
      now.items += s.items - s.inline_items;  // out of line or chunked
    }
    reached->displaced_items = std::max(reached->displaced_items, now.displaced_items);
    reached->overflow_blocks = std::max(reached->overflow_blocks, now.overflow_blocks);
    reached->items = std::max(reached->items, now.items);
  }
  bool AllUnreachable(int keys) const { return static_cast<int>(unreachable_.size()) == keys; }

  void One(int seq, int keys) {
    int k = rng_() % keys;
    while (unreachable_.count(k) > 0) k = (k + 1) % keys;
    const std::string key = Key(k);
    // Every sixth key holds integers (IncrBy's), the others unique values of every size.
    const std::string value = k % 6 == 5 ? absl::StrCat(rng_() % 1000)
                                         : Value(absl::StrCat("v", node_, "-", t_, "-", seq, ":"),
                                                 PickSize(rng_, k, sizes_));
    const int pick = rng_() % 27;
    if (pick < 5) {
      Get(k, [&] { return kv_.Get(key); });
    } else if (pick < 7 && k % 4 != 0) {
      Get(k, [&] { return kv_.GetRpc(key); });
    } else if (pick < 9) {
      MultiGet(k, keys);
    } else if (pick < 14) {
      auto h = history_.Call(client_, HistoryOp::Put(key, value));
      absl::Status st = kv_.Put(key, value);
      (void)history_.ReturnPut(h, st);
      Check(k, st);
    } else if (pick < 17) {
      auto h = history_.Call(client_, HistoryOp::Del(key));
      absl::StatusOr<bool> d = kv_.Delete(key);
      (void)history_.ReturnDel(h, d);
      Check(k, d.status());
    } else if (pick < 20) {
      Cas(k, value);
    } else if (pick < 22) {
      Incr(k);
    } else if (pick < 23) {
      auto h = history_.Call(client_, HistoryOp::PutIfAbsent(key, value));
      absl::StatusOr<bool> r = kv_.PutIfAbsent(key, value);
      (void)history_.ReturnCas(h, r);
      Check(k, r.status());
    } else if (pick < 24) {
      auto h = history_.Call(client_, HistoryOp::Setxx(key, value));
      absl::StatusOr<bool> r = kv_.PutIfPresent(key, value);
      (void)history_.ReturnSetxx(h, r);
      Check(k, r.status());
    } else if (pick < 25) {
      auto h = history_.Call(client_, HistoryOp::Getset(key, value));
      absl::StatusOr<std::optional<std::string>> r = kv_.GetAndSet(key, value);
      (void)history_.ReturnGetset(h, r);
      Check(k, r.status());
    } else if (pick < 26) {
      // A digit on an integer key (which may make it one Redis does not read: "07"), a unique
      // suffix elsewhere.
      const std::string suffix =
          k % 6 == 5 ? absl::StrCat(rng_() % 10) : absl::StrCat("+", node_, "-", t_, "-", seq);
      auto h = history_.Call(client_, HistoryOp::Append(key, suffix));
      absl::StatusOr<uint64_t> r = kv_.Append(key, suffix);
      (void)history_.ReturnAppend(h, r);
      Check(k, r.status());
    } else {
      auto h = history_.Call(client_, HistoryOp::Exists(key));
      absl::StatusOr<bool> r = kv_.Exists(key);
      (void)history_.ReturnExists(h, r);
      Check(k, r.status());
    }
  }

 private:
  static std::string Key(int k) { return absl::StrCat("k", k); }

  template <typename Fn>
  void Get(int k, Fn get) {
    auto h = history_.Call(client_, HistoryOp::Get(Key(k)));
    absl::StatusOr<std::string> v = get();
    (void)history_.ReturnGet(h, v);
    Check(k, v.status());
  }

  // Several keys at once, each recorded as a get over the whole call.
  void MultiGet(int first, int keys) {
    std::vector<int> ks{first};
    const int n = 2 + rng_() % (kMaxMultiGet - 1);
    for (int i = 1; i < n; ++i) {
      const int k = rng_() % keys;
      if (unreachable_.count(k) == 0) ks.push_back(k);
    }
    std::vector<std::string> names;
    std::vector<HistoryRecorder::Handle> hs;
    for (size_t i = 0; i < ks.size(); ++i) {
      names.push_back(Key(ks[i]));
      hs.push_back(history_.Call(client_ + static_cast<uint32_t>(i), HistoryOp::Get(names[i])));
    }
    // Both paths on every provider (kAuto would take one: batches on tcp, READs on shm).
    kv_.set_multi_get(rng_() % 2 ? farm::kv::MultiGetPath::kRpc
                                 : farm::kv::MultiGetPath::kOneSided);
    std::vector<absl::StatusOr<std::string>> got = kv_.MultiGet(names);
    for (size_t i = 0; i < ks.size(); ++i) {
      (void)history_.ReturnGet(hs[i], got[i]);
      Check(ks[i], got[i].status());
    }
  }

  // A cas from the value this thread just saw (or from absent); that get is not part of the
  // history.
  void Cas(int k, const std::string& value) {
    const std::string key = Key(k);
    absl::StatusOr<std::string> cur = kv_.Get(key);
    if (!Check(k, cur.status())) return;
    std::optional<std::string> expected;
    if (cur.ok()) expected = *cur;
    auto h = history_.Call(client_, HistoryOp::Cas(key, expected, value));
    absl::StatusOr<bool> c = kv_.CompareAndSet(key, expected, value);
    (void)history_.ReturnCas(h, c);
    Check(k, c.status());
  }

  // IncrBy by a small delta, or now and then by one that leaves int64 (refused).
  void Incr(int k) {
    const std::string key = Key(k);
    int64_t delta = static_cast<int64_t>(rng_() % 11) - 5;
    if (rng_() % 10 == 0)
      delta = rng_() % 2 ? std::numeric_limits<int64_t>::max() - 3
                         : std::numeric_limits<int64_t>::min() + 3;
    auto h = history_.Call(client_, HistoryOp::Incr(key, delta));
    absl::StatusOr<int64_t> r = kv_.IncrBy(key, delta);
    (void)history_.ReturnIncr(h, r);
    // Its refusals (no integer there, or an overflow) are outcomes, not errors.
    Check(k, HistoryRecorder::IsIncrRefusal(r.status()) ? absl::OkStatus() : r.status());
  }

  // False after an error (other than NotFound): the key is not used again; a failure unless a
  // node dies in this run and the error can be its departure.
  bool Check(int k, const absl::Status& st) {
    if (st.ok() || absl::IsNotFound(st)) return true;
    const bool fatal = strict_ || absl::IsInvalidArgument(st) || absl::IsDataLoss(st) ||
                       absl::IsInternal(st);
    if (fatal) ++failures_;
    if (fatal || unreachable_.size() < 3) {
      std::fprintf(stderr, "[node %u] thread %d, on k%d: %s%s\n", node_, t_, k,
                   st.ToString().c_str(), fatal ? " (a failure)" : "");
    }
    unreachable_.insert(k);
    return false;
  }

  farm::kv::Client kv_;
  HistoryRecorder& history_;
  const uint32_t node_;
  const int t_;
  std::mt19937 rng_;
  const uint32_t client_;
  const Sizes sizes_;
  const bool strict_;
  std::set<int> unreachable_;  // keys not used again after an error
  int failures_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::unique_ptr<farm::kv::Store> store;
  farm::App app;
  app.name = "kv_history";
  app.setup = [&store](farm::Runtime& rt) -> absl::Status {
    farm::kv::Options o;
    o.buckets = absl::GetFlag(FLAGS_buckets);
    o.bucket_bytes = absl::GetFlag(FLAGS_bucket_bytes);
    o.neighbourhood = absl::GetFlag(FLAGS_neighbourhood);
    absl::StatusOr<std::unique_ptr<farm::kv::Store>> s = farm::kv::Store::Create(rt, o);
    if (!s.ok()) return s.status();
    store = std::move(*s);
    return absl::OkStatus();
  };
  app.run = [&store](farm::Runtime& rt) -> absl::Status {
    const std::string dir = absl::GetFlag(FLAGS_history_dir);
    if (dir.empty()) return absl::InvalidArgumentError("--history_dir is required");
    HistoryRecorder history;
    if (absl::Status s = history.StartJournal(absl::StrCat(dir, "/node", rt.node_id(), ".jsonl"));
        !s.ok()) {
      return s;
    }
    if (absl::GetFlag(FLAGS_delay_block_reads)) DelayBlockReads();
    const int threads = absl::GetFlag(FLAGS_threads);
    const int keys = absl::GetFlag(FLAGS_keys);
    const int ops = absl::GetFlag(FLAGS_ops);
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Milliseconds(absl::GetFlag(FLAGS_duration_ms));
    const int dying_node = absl::GetFlag(FLAGS_dying_node);
    const bool dying = dying_node == static_cast<int>(rt.node_id());
    Sizes sizes;
    sizes.block = absl::GetFlag(FLAGS_bucket_bytes) - 24;  // txn/object.h's header
    sizes.chunked = rt.max_object_size();
    std::vector<std::unique_ptr<farm::Worker>> workers;
    for (int t = 0; t < threads; ++t) {
      absl::StatusOr<std::unique_ptr<farm::Worker>> w = rt.NewWorker();
      if (!w.ok()) return w.status();
      workers.push_back(std::move(*w));
    }
    std::atomic<int> failures{0};
    std::mutex reached_mu;
    farm::kv::ShardStats reached;  // items: out of line
    std::atomic<int> started{0};
    const int die_after = absl::GetFlag(FLAGS_die_after_ops);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        Thread th(*store, *workers[t], history, rt.node_id(), t, sizes, dying_node < 0);
        for (int seq = 0; seq < ops && absl::Now() < end && !th.AllUnreachable(keys); ++seq) {
          // Dies after --die_after_ops operations, or half-way through the run on a slow machine.
          if (dying && (started.fetch_add(1) == die_after || absl::Now() > start + (end - start) / 2)) {
            std::printf("[node %u] dying now\n", rt.node_id());
            std::fflush(stdout);
            std::_Exit(17);
          }
          th.One(seq, keys);
          if (seq % 50 == 0) {
            std::lock_guard<std::mutex> l(reached_mu);
            th.Sample(&reached);
          }
        }
        failures += th.failures();
      });
    }
    for (auto& th : pool) th.join();
    workers.clear();
    farm::SyncPoint::GetInstance()->Reset();
    if (failures.load() > 0) {
      return absl::InternalError(absl::StrCat(failures.load(), " operations failed (see above)"));
    }
    if (absl::Status s = history.JournalStatus(); !s.ok()) return s;
    std::printf("[node %u] the table reached: %llu displaced items, %llu overflow blocks, %llu "
                "items out of line\n",
                rt.node_id(), static_cast<unsigned long long>(reached.displaced_items),
                static_cast<unsigned long long>(reached.overflow_blocks),
                static_cast<unsigned long long>(reached.items));
    std::printf("[node %u] history written\n", rt.node_id());
    return absl::OkStatus();
  };
  return farm::RunNode(argc, argv, app);
}
