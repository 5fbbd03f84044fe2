#include "tests/txn_history_workload.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"

namespace farm {
namespace testing {
namespace {

using txn::TxnOp;
using txn::TxnOutcome;
using txn::TxnRecord;

struct Big {
  uint64_t w[kBigSize / 8];
};

// A transaction as its client saw it, before absent versions are resolved.
struct ClientTxn {
  TxnRecord rec;
  std::vector<size_t> absent_reads;  // ops that found no object (value to be resolved)
  std::optional<size_t> alloc_op;    // the write that created an object (prev to be resolved)
  int64_t reserved_ns = 0;           // when its Alloc returned
  std::vector<size_t> dropped;       // absent reads left out of the history
};

bool Counts(const ClientTxn& t) { return t.rec.outcome != TxnOutcome::kAborted; }

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct HistoryWorkload::State {
  HistoryWorkloadOptions options;
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<GlobalAddress> small, big;
  std::mutex mu;
  std::vector<GlobalAddress> addresses;                 // reserved during the run; guarded by mu
  std::vector<uint64_t> recent;                         // keys of the last reservations; mu
  absl::flat_hash_map<uint64_t, uint64_t> address_key;  // packed address -> key; guarded by mu
  std::vector<ClientTxn> txns;                          // guarded by mu
  std::vector<std::string> failures;                    // guarded by mu
  int lock_free_reads = 0;                              // guarded by mu
  std::atomic<bool> failed{false};

  void Fail(std::string what) {
    failed = true;
    std::lock_guard<std::mutex> l(mu);
    failures.push_back(std::move(what));
  }
  uint64_t Publish(GlobalAddress a) {
    std::lock_guard<std::mutex> l(mu);
    auto [it, fresh] = address_key.try_emplace(a.Pack(), kAllocatedKeyBase + addresses.size());
    if (fresh) addresses.push_back(a);
    if (recent.size() == 4) recent.erase(recent.begin());
    recent.push_back(it->second);
    return it->second;
  }
  // A reserved address and its key, if any: half the time one of the last few reserved, which
  // may not be committed yet (its NotFound must then be validated like a read).
  std::optional<std::pair<GlobalAddress, uint64_t>> AnyAddress(std::mt19937_64& rng) {
    std::lock_guard<std::mutex> l(mu);
    if (addresses.empty()) return std::nullopt;
    size_t i = rng() % addresses.size();
    if (rng() % 2 == 0) i = recent[rng() % recent.size()] - kAllocatedKeyBase;
    return std::make_pair(addresses[i], kAllocatedKeyBase + i);
  }
  void Client(int c);
  HistoryWorkloadResult Resolve();
};

namespace {

// One client transaction in the making: its record, and a value generator.
class Recorder {
 public:
  Recorder(int client, int index, ClientTxn* t) : client_(client), index_(index), t_(t) {}
  uint64_t NextValue(bool tombstone = false) {
    // Unique per client, transaction and position; never 0.
    const uint64_t v = (uint64_t(client_ + 1) << 40) | (uint64_t(index_) << 8) | ++position_;
    return tombstone ? v | kTombstoneBit : v;
  }
  void Read(uint64_t key, uint64_t value) { t_->rec.ops.push_back(TxnOp::Read(key, value)); }
  void ReadAbsent(uint64_t key) {
    t_->absent_reads.push_back(t_->rec.ops.size());
    t_->rec.ops.push_back(TxnOp::Read(key, 0));
  }
  void Write(uint64_t key, uint64_t value, std::optional<uint64_t> prev) {
    t_->rec.ops.push_back(TxnOp::Write(key, value, prev));
  }

 private:
  int client_, index_;
  uint64_t position_ = 0;
  ClientTxn* t_;
};

}  // namespace

// Runs `txns_per_thread` random transactions on client c's worker.
void HistoryWorkload::State::Client(int c) {
  Worker& w = *workers[c];
  std::mt19937_64 rng(options.seed * 1000 + c);
  for (int i = 0; i < options.txns_per_thread && !failed.load(); ++i) {
    ClientTxn ct;
    ct.rec.client = absl::StrCat("client ", c);
    Recorder r(c, i, &ct);
    const int kind = rng() % 100;
    ct.rec.start_ns = NowNs();
    absl::Status s;
    if (kind < 8) {
      // A lock-free read of a small key or of an allocated address.
      std::optional<std::pair<GlobalAddress, uint64_t>> a = AnyAddress(rng);
      if (rng() % 2 == 0 || !a) {
        const uint64_t k = rng() % small.size();
        a = std::make_pair(small[k], k);
      }
      absl::StatusOr<uint64_t> v = w.LockFreeGet<uint64_t>(a->first);
      if (v.ok()) {
        r.Read(a->second, *v);
      } else if (absl::IsNotFound(v.status())) {
        r.ReadAbsent(a->second);
      } else {
        s = v.status();
        Fail(absl::StrCat("client ", c, " lock-free read ", i, ": ", s.ToString()));
      }
      ct.rec.end_ns = NowNs();
      ct.rec.outcome = s.ok() ? TxnOutcome::kCommitted : TxnOutcome::kUnknown;
      std::lock_guard<std::mutex> l(mu);
      ++lock_free_reads;
      txns.push_back(std::move(ct));
      continue;
    }
    std::unique_ptr<Txn> t = w.Begin();
    // Reads `key` at `addr` (uint64); NotFound is recorded as absent, other errors end it.
    auto read = [&](GlobalAddress addr, uint64_t key) -> std::optional<uint64_t> {
      absl::StatusOr<uint64_t> v = t->Get<uint64_t>(addr);
      if (v.ok()) {
        r.Read(key, *v);
        return *v;
      }
      if (absl::IsNotFound(v.status()) && key >= kAllocatedKeyBase) {
        r.ReadAbsent(key);
      } else {
        s = v.status();
      }
      return std::nullopt;
    };
    auto write = [&](GlobalAddress addr, uint64_t key, uint64_t prev) {
      const uint64_t value = r.NextValue();
      s = t->Put(addr, value);
      if (s.ok()) r.Write(key, value, prev);
    };
    if (kind < 40) {
      // Read-modify-write of 1 to 3 small keys (each written with probability 1/2).
      for (int n = 1 + rng() % 3; n > 0 && s.ok(); --n) {
        const int k = rng() % small.size();
        std::optional<uint64_t> v = read(small[k], k);
        if (v && rng() % 2 == 0) write(small[k], k, *v);
      }
    } else if (kind < 55) {
      // Big objects, all on node 1: 3 or 4 of them written (more than one LOCK message), or
      // read only.
      std::vector<int> keys(kBigKeys);
      for (int k = 0; k < kBigKeys; ++k) keys[k] = k;
      std::shuffle(keys.begin(), keys.end(), rng);
      keys.resize(3 + rng() % 2);
      const bool write_all = rng() % 4 != 0;
      for (int k : keys) {
        auto big_value = std::make_unique<Big>();
        s = t->Read(big[k], big_value.get(), sizeof(Big));
        if (!s.ok()) break;
        const uint64_t v = big_value->w[0];
        for (uint64_t x : big_value->w) {
          if (x != v) {
            Fail(absl::StrCat("client ", c, " read a torn big object ", k, ": ", v, " and ", x));
            break;
          }
        }
        r.Read(kBigKeyBase + k, v);
        if (!write_all) continue;
        const uint64_t nv = r.NextValue();
        std::fill(std::begin(big_value->w), std::end(big_value->w), nv);
        s = t->Write(big[k], big_value.get(), sizeof(Big));
        if (!s.ok()) break;
        r.Write(kBigKeyBase + k, nv, v);
      }
    } else if (kind < 70) {
      // An allocation, with its first value, and now and then a small key updated with it.
      absl::StatusOr<GlobalAddress> a = t->Alloc(sizeof(uint64_t), AllocHint::OnNode(rng() % 3));
      ct.reserved_ns = NowNs();
      if (a.ok()) {
        const uint64_t key = Publish(*a);
        const uint64_t value = r.NextValue();
        s = t->Put(*a, value);
        if (s.ok()) {
          ct.alloc_op = ct.rec.ops.size();
          r.Write(key, value, std::nullopt);
        }
        if (s.ok() && rng() % 2 == 0) {
          const int k = rng() % small.size();
          if (std::optional<uint64_t> v = read(small[k], k)) write(small[k], k, *v);
        }
      } else {
        s = a.status();
      }
    } else if (kind < 82) {
      // A free of an allocated address (read first: the value it overwrites).
      if (std::optional<std::pair<GlobalAddress, uint64_t>> a = AnyAddress(rng)) {
        if (std::optional<uint64_t> v = read(a->first, a->second)) {
          s = t->Free(a->first);
          if (s.ok()) r.Write(a->second, r.NextValue(/*tombstone=*/true), *v);
        }
      }
    } else {
      // Reads of allocated addresses (values or NotFound) and a small key, one of them updated.
      for (int n = 1 + rng() % 2; n > 0 && s.ok(); --n) {
        if (std::optional<std::pair<GlobalAddress, uint64_t>> a = AnyAddress(rng)) {
          std::optional<uint64_t> v = read(a->first, a->second);
          if (v && s.ok() && rng() % 3 == 0) write(a->first, a->second, *v);
        }
      }
      const int k = rng() % small.size();
      if (s.ok()) {
        std::optional<uint64_t> v = read(small[k], k);
        if (v && rng() % 2 == 0) write(small[k], k, *v);
      }
    }
    if (s.ok()) s = t->Commit();
    t.reset();
    ct.rec.end_ns = NowNs();
    ct.rec.outcome = s.ok()                 ? TxnOutcome::kCommitted
                     : absl::IsAborted(s) ? TxnOutcome::kAborted
                                            : TxnOutcome::kUnknown;
    if (!s.ok() && !absl::IsAborted(s)) {
      Fail(absl::StrCat("client ", c, " transaction ", i, ": ", s.ToString()));
    }
    std::lock_guard<std::mutex> l(mu);
    txns.push_back(std::move(ct));
  }
}

// Ties allocations and NotFound reads to the absent versions they overwrote and saw (see the
// header), then builds the history.
HistoryWorkloadResult HistoryWorkload::State::Resolve() {
  HistoryWorkloadResult result;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  using Version = std::pair<uint64_t, uint64_t>;  // (key, value)
  // Each value's object: the index of the transaction whose Alloc created it.
  std::map<Version, size_t> origin;
  std::map<Version, uint64_t> prev_of;
  for (size_t i = 0; i < txns.size(); ++i) {
    for (size_t o = 0; o < txns[i].rec.ops.size(); ++o) {
      const TxnOp& op = txns[i].rec.ops[o];
      if (op.kind != TxnOp::Kind::kWrite || op.key < kAllocatedKeyBase) continue;
      if (txns[i].alloc_op == o) {
        origin[{op.key, op.value}] = i;
      } else {
        prev_of[{op.key, op.value}] = *op.prev;
      }
    }
  }
  auto object_of = [&](uint64_t key, uint64_t value) -> std::optional<size_t> {
    for (int hops = 0; hops < 1 << 20; ++hops) {
      if (auto o = origin.find({key, value}); o != origin.end()) return o->second;
      auto p = prev_of.find({key, value});
      if (p == prev_of.end()) return std::nullopt;
      value = p->second;
    }
    return std::nullopt;
  };
  // Per address: its objects in reservation order, and each one's (counted) free.
  struct Free {
    uint64_t tombstone;
    size_t txn;
  };
  std::map<uint64_t, std::vector<size_t>> objects;  // key -> allocating transactions
  std::map<size_t, Free> free_of;                   // allocating transaction -> its free
  for (size_t i = 0; i < txns.size(); ++i) {
    if (!Counts(txns[i])) continue;
    if (txns[i].alloc_op) {
      objects[txns[i].rec.ops[*txns[i].alloc_op].key].push_back(i);
      result.allocs_committed += txns[i].rec.outcome == TxnOutcome::kCommitted;
    }
    for (const TxnOp& op : txns[i].rec.ops) {
      if (op.kind != TxnOp::Kind::kWrite || (op.value & kTombstoneBit) == 0) continue;
      if (std::optional<size_t> obj = object_of(op.key, *op.prev)) {
        free_of.try_emplace(*obj, Free{op.value, i});
        result.frees_committed += txns[i].rec.outcome == TxnOutcome::kCommitted;
      }
    }
  }
  // Absent periods per address: (version, earliest start of the free that began it, latest end
  // of the allocation that ended it).
  struct Gap {
    uint64_t version;
    int64_t from, to;
  };
  std::map<uint64_t, std::vector<Gap>> gaps;
  for (auto& [key, allocs] : objects) {
    std::sort(allocs.begin(), allocs.end(),
              [&](size_t a, size_t b) { return txns[a].reserved_ns < txns[b].reserved_ns; });
    Gap gap{0, std::numeric_limits<int64_t>::min(), kNever};
    for (size_t j = 0; j < allocs.size(); ++j) {
      ClientTxn& x = txns[allocs[j]];
      if (j > 0) {
        auto f = free_of.find(allocs[j - 1]);
        if (f == free_of.end()) {
          failures.push_back(absl::StrCat("key ", key, ": ", x.rec.client,
                                          " allocated an object where the previous one was ",
                                          "never freed"));
          break;
        }
        gap = Gap{f->second.tombstone, txns[f->second.txn].rec.start_ns, kNever};
      }
      gap.to = x.rec.end_ns;
      gaps[key].push_back(gap);
      x.rec.ops[*x.alloc_op].prev = gap.version;
    }
    if (auto f = free_of.find(allocs.back()); f != free_of.end()) {
      gaps[key].push_back(Gap{f->second.tombstone, txns[f->second.txn].rec.start_ns, kNever});
    }
  }
  for (ClientTxn& t : txns) {
    for (size_t o : t.absent_reads) {
      const uint64_t key = t.rec.ops[o].key;
      auto g = gaps.find(key);
      if (g == gaps.end()) {  // no object ever counted there: its initial absent version
        ++result.absent_reads;
        continue;
      }
      std::vector<const Gap*> fit;
      for (const Gap& gap : g->second) {
        if (gap.from < t.rec.end_ns && gap.to > t.rec.start_ns) fit.push_back(&gap);
      }
      if (fit.size() == 1) {
        t.rec.ops[o].value = fit[0]->version;
        ++result.absent_reads;
      } else if (fit.empty() && Counts(t)) {
        failures.push_back(absl::StrCat(t.rec.client, " found no object at key ", key, " between ",
                                        t.rec.start_ns, " and ", t.rec.end_ns,
                                        " ns, when an object was there throughout"));
      } else {
        t.dropped.push_back(o);
        ++result.absent_reads_dropped;
      }
    }
    std::sort(t.dropped.rbegin(), t.dropped.rend());
    for (size_t o : t.dropped) t.rec.ops.erase(t.rec.ops.begin() + o);
    if (!t.rec.ops.empty()) result.history.push_back(std::move(t.rec));
  }
  for (const TxnRecord& r : result.history) {
    if (r.outcome != TxnOutcome::kCommitted) continue;
    int big_writes = 0;
    for (const TxnOp& op : r.ops) {
      big_writes += op.kind == TxnOp::Kind::kWrite && op.key >= kBigKeyBase &&
                    op.key < kBigKeyBase + kBigKeys;
    }
    result.multi_part_commits += big_writes >= 3;
  }
  result.lock_free_reads = lock_free_reads;
  result.failures = std::move(failures);
  return result;
}

HistoryWorkload::HistoryWorkload(const std::vector<std::unique_ptr<Runtime>>& runtimes,
                                 HistoryWorkloadOptions options)
    : state_(std::make_unique<State>()) {
  state_->options = options;
  for (const auto& rt : runtimes) {
    for (int k = 0; k < options.threads_per_node; ++k) {
      absl::StatusOr<std::unique_ptr<Worker>> w = rt->NewWorker();
      if (!w.ok()) {
        state_->failures.push_back(absl::StrCat("NewWorker: ", w.status().ToString()));
        continue;
      }
      RuntimeAccess::Of(**w).txn_context.timeout = options.lock_wait;
      state_->workers.push_back(std::move(*w));
    }
  }
}

HistoryWorkload::~HistoryWorkload() = default;

HistoryWorkloadResult HistoryWorkload::Run() {
  State& st = *state_;
  if (st.workers.empty()) return {{}, st.failures};
  // The small keys round-robin on the nodes, the big ones on node 1, all at their initial value
  // 0 (big ones: every word 0).
  absl::Status s = st.workers[0]->Run([&](Txn& t) -> absl::Status {
    st.small.clear();
    st.big.clear();
    for (int i = 0; i < kSmallKeys + kBigKeys; ++i) {
      const bool big = i >= kSmallKeys;
      absl::StatusOr<GlobalAddress> a =
          t.Alloc(big ? kBigSize : sizeof(uint64_t), AllocHint::OnNode(big ? 1 : i % 3));
      if (!a.ok()) return a.status();
      (big ? st.big : st.small).push_back(*a);
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return {{}, {absl::StrCat("setup: ", s.ToString())}};
  std::vector<std::thread> threads;
  for (size_t c = 0; c < st.workers.size(); ++c) threads.emplace_back([&st, c] { st.Client(c); });
  for (auto& t : threads) t.join();
  return st.Resolve();
}

}  // namespace testing
}  // namespace farm
