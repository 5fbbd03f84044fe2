// The strict-serializability checker (see history.h for the model and the method).
#include "txn/history.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace farm {
namespace txn {
namespace {

using Version = std::pair<uint64_t, uint64_t>;  // (key, value)

constexpr uint32_t kNoNode = std::numeric_limits<uint32_t>::max();

// Where a version came from.
struct Writer {
  uint32_t txn;
  bool final;  // the last write of its transaction to that key (an installed version)
};

// A read taking part in the graph: one made before its transaction's first write to the key.
struct ExternalRead {
  uint32_t txn;
  uint64_t key;
  uint64_t value;
};

// The version a committed transaction installed on a key: its last write there.
struct InstalledWrite {
  uint32_t txn;
  uint64_t key;
  uint64_t value;
  std::optional<uint64_t> prev;  // what its first write to the key overwrote
  bool prev_from_read = false;   // prev taken from the transaction's own read (already checked)
};

uint8_t Bit(DependencyKind k) { return uint8_t{1} << static_cast<int>(k); }

constexpr uint8_t kWW = 1 << static_cast<int>(DependencyKind::kWW);
constexpr uint8_t kWR = 1 << static_cast<int>(DependencyKind::kWR);
constexpr uint8_t kRW = 1 << static_cast<int>(DependencyKind::kRW);
constexpr uint8_t kRT = 1 << static_cast<int>(DependencyKind::kRealTime);

// The dependency graph: committed transactions are nodes 0..n-1 (their history indices; the
// others have no edges), completion-frontier nodes follow. Edges are stored by source (CSR).
class DependencyGraph {
 public:
  struct Edge {
    uint32_t from;
    uint32_t to;
    DependencyKind kind;
    uint64_t key;
    uint64_t value;
  };

  DependencyGraph(uint32_t txns, uint32_t frontiers, std::vector<Edge> edges);

  uint32_t txns() const { return txns_; }
  uint32_t nodes() const { return static_cast<uint32_t>(offset_.size() - 1); }
  const std::vector<Edge>& edges() const { return edges_; }

  // Strongly connected components over the edges whose kind is in `mask` (iterative Tarjan):
  // each node's component number.
  std::vector<uint32_t> Components(uint8_t mask) const;

  // Shortest path (edge indices) from `from` to `to` over `mask` edges, staying inside
  // component `comp[from]`; a cycle when from == to. Real time counts once per rt hop: edges into
  // a frontier node weigh 1, edges out of one 0. Empty if there is none or `*budget` edge visits
  // run out.
  std::vector<uint32_t> ShortestPath(uint32_t from, uint32_t to, uint8_t mask,
                                     const std::vector<uint32_t>& comp, int64_t* budget) const;

  // A path's length counting each rt hop through frontiers as one edge.
  size_t Length(const std::vector<uint32_t>& path) const {
    return std::count_if(path.begin(), path.end(),
                         [this](uint32_t e) { return edges_[e].from < txns_; });
  }

 private:
  uint32_t txns_;
  std::vector<Edge> edges_;
  std::vector<uint32_t> offset_;  // node v's edges are edges_[offset_[v] .. offset_[v + 1])
  // Scratch for ShortestPath, kept all-unset between calls.
  mutable std::vector<uint32_t> dist_;
  mutable std::vector<uint32_t> parent_edge_;
};

DependencyGraph::DependencyGraph(uint32_t txns, uint32_t frontiers, std::vector<Edge> edges)
    : txns_(txns), offset_(txns + frontiers + 1, 0) {
  for (const Edge& e : edges) ++offset_[e.from + 1];
  for (size_t v = 1; v < offset_.size(); ++v) offset_[v] += offset_[v - 1];
  edges_.resize(edges.size());
  std::vector<uint32_t> next(offset_.begin(), offset_.end() - 1);
  for (const Edge& e : edges) edges_[next[e.from]++] = e;
  dist_.assign(nodes(), kNoNode);
  parent_edge_.assign(nodes(), kNoNode);
}

std::vector<uint32_t> DependencyGraph::Components(uint8_t mask) const {
  const uint32_t n = nodes();
  std::vector<uint32_t> index(n, kNoNode), low(n, 0), comp(n, kNoNode), stack;
  std::vector<bool> on_stack(n, false);
  struct Frame {
    uint32_t node;
    uint32_t next_edge;
  };
  std::vector<Frame> calls;
  uint32_t counter = 0, comps = 0;
  auto visit = [&](uint32_t v) {
    index[v] = low[v] = counter++;
    stack.push_back(v);
    on_stack[v] = true;
    calls.push_back({v, offset_[v]});
  };
  for (uint32_t root = 0; root < n; ++root) {
    if (index[root] != kNoNode) continue;
    visit(root);
    while (!calls.empty()) {
      uint32_t v = calls.back().node;
      if (calls.back().next_edge < offset_[v + 1]) {
        const Edge& e = edges_[calls.back().next_edge++];
        if ((mask & Bit(e.kind)) == 0) continue;
        if (index[e.to] == kNoNode) {
          visit(e.to);
        } else if (on_stack[e.to]) {
          low[v] = std::min(low[v], index[e.to]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          comp[w] = comps;
        } while (w != v);
        ++comps;
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().node] = std::min(low[calls.back().node], low[v]);
    }
  }
  return comp;
}

std::vector<uint32_t> DependencyGraph::ShortestPath(uint32_t from, uint32_t to, uint8_t mask,
                                                    const std::vector<uint32_t>& comp,
                                                    int64_t* budget) const {
  // 0-1 BFS from a virtual source whose edges are `from`'s, so that a cycle (to == from) ends
  // when `from` itself is reached.
  std::vector<uint32_t> touched;
  std::deque<uint32_t> queue;
  auto relax_edges_of = [&](uint32_t v, uint32_t d) {
    for (uint32_t i = offset_[v]; i < offset_[v + 1]; ++i) {
      --*budget;
      const Edge& e = edges_[i];
      if ((mask & Bit(e.kind)) == 0 || comp[e.to] != comp[from]) continue;
      uint32_t w = e.from < txns_ ? 1 : 0;  // a frontier's edges continue an rt hop
      if (dist_[e.to] != kNoNode && dist_[e.to] <= d + w) continue;
      if (dist_[e.to] == kNoNode) touched.push_back(e.to);
      dist_[e.to] = d + w;
      parent_edge_[e.to] = i;
      w == 0 ? queue.push_front(e.to) : queue.push_back(e.to);
    }
  };
  relax_edges_of(from, 0);
  bool found = false;
  while (!queue.empty() && *budget > 0) {
    uint32_t v = queue.front();
    queue.pop_front();
    if (v == to) {
      found = true;
      break;
    }
    relax_edges_of(v, dist_[v]);
  }
  std::vector<uint32_t> path;
  if (found) {
    uint32_t v = to;
    do {
      uint32_t e = parent_edge_[v];
      path.push_back(e);
      v = edges_[e].from;
    } while (v != from);
    std::reverse(path.begin(), path.end());
  }
  for (uint32_t v : touched) dist_[v] = parent_edge_[v] = kNoNode;
  return path;
}

std::string DescribeDependency(const History& h, const Dependency& d) {
  std::string a = absl::StrCat("T", d.from), b = absl::StrCat("T", d.to);
  switch (d.kind) {
    case DependencyKind::kWW:
      return absl::StrCat(a, " -ww-> ", b, ": ", b, " overwrote version ", d.value, " of key ",
                          d.key, ", written by ", a);
    case DependencyKind::kWR:
      return absl::StrCat(a, " -wr-> ", b, ": ", b, " read version ", d.value, " of key ", d.key,
                          ", written by ", a);
    case DependencyKind::kRW:
      return absl::StrCat(a, " -rw-> ", b, ": ", a, " read version ", d.value, " of key ", d.key,
                          ", which ", b, " overwrote");
    case DependencyKind::kRealTime:
      return absl::StrCat(a, " -rt-> ", b, ": ", a, " completed at ", h[d.from].end_ns,
                          " ns, before ", b, " was invoked at ", h[d.to].start_ns, " ns");
  }
  return "";
}

// Runs the check of one history; see CheckStrictSerializability.
class HistoryChecker {
 public:
  explicit HistoryChecker(const History& h) : h_(h) {}
  absl::StatusOr<HistoryCheck> Run();

 private:
  absl::Status IndexWrites();
  void ResolveOutcomes();
  void SummarizeTransactions();
  absl::Status CompleteVersionOrder();
  void CheckObserved(uint32_t txn, uint64_t key, uint64_t value, const char* verb);
  void CheckForks();
  DependencyGraph BuildGraph() const;
  void AddRealTimeEdges(std::vector<DependencyGraph::Edge>* edges, uint32_t* frontiers) const;
  void FindCycle(const DependencyGraph& g);
  std::vector<uint32_t> FindSingleRwCycle(const DependencyGraph& g,
                                          const std::vector<uint32_t>& comp) const;
  void ReportCycle(const DependencyGraph& g, AnomalyKind kind,
                   const std::vector<uint32_t>& edge_path);
  void Report(AnomalyKind kind, std::vector<size_t> txns, std::string what,
              std::vector<Dependency> cycle = {});
  std::string T(uint32_t txn) const { return absl::StrCat("T", txn); }

  const History& h_;
  absl::flat_hash_map<Version, Writer> writers_;  // every write in the history
  std::vector<bool> committed_;                   // counted as committed
  std::vector<ExternalRead> reads_;               // by committed transactions
  std::vector<InstalledWrite> installed_;         // by committed transactions
  absl::flat_hash_map<Version, uint32_t> next_;   // version -> who installed the next one
  HistoryCheck result_;
};

absl::StatusOr<HistoryCheck> HistoryChecker::Run() {
  if (h_.size() >= kNoNode) return absl::InvalidArgumentError("too many transactions");
  result_.transactions = h_.size();
  if (absl::Status s = IndexWrites(); !s.ok()) return s;
  ResolveOutcomes();
  SummarizeTransactions();
  if (absl::Status s = CompleteVersionOrder(); !s.ok()) return s;
  for (const ExternalRead& r : reads_) CheckObserved(r.txn, r.key, r.value, "read");
  for (const InstalledWrite& w : installed_) {
    if (!w.prev_from_read) CheckObserved(w.txn, w.key, *w.prev, "overwrote");
  }
  if (result_.anomaly_count == 0) CheckForks();
  if (result_.anomaly_count == 0) FindCycle(BuildGraph());
  return std::move(result_);
}

// Rejects bad input and records who wrote each version.
absl::Status HistoryChecker::IndexWrites() {
  absl::flat_hash_map<uint64_t, uint64_t> last;  // key -> the transaction's latest value
  for (uint32_t t = 0; t < h_.size(); ++t) {
    if (h_[t].end_ns < h_[t].start_ns) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeTxn(h_, t), ": end ", h_[t].end_ns,
                                                     " ns is before start ", h_[t].start_ns,
                                                     " ns"));
    }
    last.clear();
    for (const TxnOp& op : h_[t].ops) {
      if (op.kind != TxnOp::Kind::kWrite) continue;
      if (op.value == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(DescribeTxn(h_, t), " writes 0 to key ", op.key,
                         ", but 0 is every key's initial value; writes must be unique per key"));
      }
      auto [it, fresh] = writers_.try_emplace(Version{op.key, op.value}, Writer{t, false});
      if (!fresh) {
        return absl::InvalidArgumentError(
            absl::StrCat("value ", op.value, " is written to key ", op.key, " twice, by ",
                         DescribeTxn(h_, it->second.txn), " and by ", DescribeTxn(h_, t),
                         "; the checker needs every write's value to be unique per key"));
      }
      last[op.key] = op.value;
    }
    for (const auto& [key, value] : last) writers_[Version{key, value}].final = true;
  }
  return absl::OkStatus();
}

// Committed transactions count; so does an unknown one that a counted transaction observed.
void HistoryChecker::ResolveOutcomes() {
  committed_.assign(h_.size(), false);
  std::vector<uint32_t> work;
  for (uint32_t t = 0; t < h_.size(); ++t) {
    if (h_[t].outcome == TxnOutcome::kCommitted) {
      committed_[t] = true;
      work.push_back(t);
    }
  }
  while (!work.empty()) {
    uint32_t t = work.back();
    work.pop_back();
    for (const TxnOp& op : h_[t].ops) {
      uint64_t seen = op.kind == TxnOp::Kind::kRead ? op.value : op.prev.value_or(0);
      auto it = seen == 0 ? writers_.end() : writers_.find(Version{op.key, seen});
      if (it == writers_.end()) continue;
      uint32_t w = it->second.txn;
      if (h_[w].outcome == TxnOutcome::kUnknown && !committed_[w]) {
        committed_[w] = true;
        ++result_.unknown_included;
        work.push_back(w);
      }
    }
  }
  for (uint32_t t = 0; t < h_.size(); ++t) {
    result_.committed += committed_[t];
    result_.aborted += h_[t].outcome == TxnOutcome::kAborted;
  }
  result_.unknown_dropped = h_.size() - result_.committed - result_.aborted;
}

// Splits each committed transaction into its external reads and installed writes, and checks
// that it saw its own writes.
void HistoryChecker::SummarizeTransactions() {
  struct KeyState {
    bool written = false;
    uint64_t current = 0;  // its latest write
    std::optional<uint64_t> last_read;
  };
  absl::flat_hash_map<uint64_t, KeyState> keys;
  for (uint32_t t = 0; t < h_.size(); ++t) {
    if (!committed_[t]) continue;
    keys.clear();
    size_t first_installed = installed_.size();
    for (const TxnOp& op : h_[t].ops) {
      KeyState& k = keys[op.key];
      if (op.kind == TxnOp::Kind::kRead) {
        if (!k.written) {
          reads_.push_back({t, op.key, op.value});
          k.last_read = op.value;
        } else if (op.value != k.current) {
          Report(AnomalyKind::kInternalInconsistency, {t},
                 absl::StrCat(T(t), " read ", op.value, " from key ", op.key, " after writing ",
                              k.current, " to it itself"));
        }
        continue;
      }
      if (!k.written) {
        k.written = true;
        installed_.push_back({t, op.key, op.value, op.prev, false});
        if (!op.prev && k.last_read) {
          installed_.back().prev = k.last_read;
          installed_.back().prev_from_read = true;
        }
      } else if (op.prev && *op.prev != k.current) {
        Report(AnomalyKind::kInternalInconsistency, {t},
               absl::StrCat(T(t), " wrote ", op.value, " to key ", op.key, " over ", *op.prev,
                            ", but its own previous write there was ", k.current));
      }
      k.current = op.value;
    }
    for (size_t i = first_installed; i < installed_.size(); ++i) {
      installed_[i].value = keys[installed_[i].key].current;
    }
  }
}

// A write without prev can only be placed if it is its key's only committed write.
absl::Status HistoryChecker::CompleteVersionOrder() {
  absl::flat_hash_map<uint64_t, size_t> writes_per_key;
  for (const InstalledWrite& w : installed_) ++writes_per_key[w.key];
  for (InstalledWrite& w : installed_) {
    if (w.prev) continue;
    size_t count = writes_per_key[w.key];
    if (count > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key ", w.key, " has ", count, " committed writes, but the write of ", w.value, " by ",
          DescribeTxn(h_, w.txn),
          " gives no prev and its transaction did not read the key "
          "first, so the key's version order cannot be derived; record prev for every write"));
    }
    w.prev = 0;
    w.prev_from_read = true;  // nothing to check: the initial version
  }
  return absl::OkStatus();
}

// `txn` read or overwrote version `value` of `key`: it must be a committed, final version.
void HistoryChecker::CheckObserved(uint32_t txn, uint64_t key, uint64_t value, const char* verb) {
  if (value == 0) return;
  std::string what = absl::StrCat(T(txn), " ", verb, " version ", value, " of key ", key);
  auto it = writers_.find(Version{key, value});
  if (it == writers_.end()) {
    Report(AnomalyKind::kReadOfUnwrittenValue, {txn},
           absl::StrCat(what, ", a value no transaction wrote"));
    return;
  }
  uint32_t w = it->second.txn;
  if (w == txn) {
    Report(AnomalyKind::kInternalInconsistency, {txn},
           absl::StrCat(what, " before writing that value itself"));
  } else if (h_[w].outcome == TxnOutcome::kAborted) {
    Report(AnomalyKind::kAbortedRead, {w, txn},
           absl::StrCat(what, ", written by ", T(w), ", which aborted"));
  } else if (!it->second.final) {
    Report(AnomalyKind::kIntermediateRead, {w, txn},
           absl::StrCat(what, ", an intermediate value: its writer ", T(w),
                        " overwrote it with a later write of its own"));
  }
}

// Each version has at most one next version; builds next_.
void HistoryChecker::CheckForks() {
  for (const InstalledWrite& w : installed_) {
    auto [it, fresh] = next_.try_emplace(Version{w.key, *w.prev}, w.txn);
    if (fresh) continue;
    uint32_t first = it->second;
    Report(AnomalyKind::kLostUpdate, {first, w.txn},
           absl::StrCat(T(first), " and ", T(w.txn), " both overwrote version ", *w.prev,
                        " of key ", w.key, ": one of the two updates is lost"));
  }
}

DependencyGraph HistoryChecker::BuildGraph() const {
  std::vector<DependencyGraph::Edge> edges;
  edges.reserve(2 * reads_.size() + installed_.size() + 3 * h_.size());
  auto writer = [this](uint64_t key, uint64_t value) {
    return writers_.at(Version{key, value}).txn;
  };
  for (const InstalledWrite& w : installed_) {
    if (*w.prev != 0)
      edges.push_back({writer(w.key, *w.prev), w.txn, DependencyKind::kWW, w.key, *w.prev});
  }
  for (const ExternalRead& r : reads_) {
    if (r.value != 0) {
      edges.push_back({writer(r.key, r.value), r.txn, DependencyKind::kWR, r.key, r.value});
    }
    auto next = next_.find(Version{r.key, r.value});
    if (next != next_.end() && next->second != r.txn) {
      edges.push_back({r.txn, next->second, DependencyKind::kRW, r.key, r.value});
    }
  }
  uint32_t frontiers = 0;
  AddRealTimeEdges(&edges, &frontiers);
  return DependencyGraph(static_cast<uint32_t>(h_.size()), frontiers, std::move(edges));
}

// T1 -> T2 whenever T1 completed before T2 was invoked, through one frontier node per distinct
// completion time: T -> F(T.end), F(e) -> F(next e), F(last e before T2.start) -> T2. So T1
// reaches T2 through frontiers iff T1.end < T2.start, with O(n) nodes and edges. An unknown
// transaction counted as committed may have committed any time after its start: no edge out.
void HistoryChecker::AddRealTimeEdges(std::vector<DependencyGraph::Edge>* edges,
                                      uint32_t* frontiers) const {
  std::vector<int64_t> ends;
  for (uint32_t t = 0; t < h_.size(); ++t) {
    if (committed_[t] && h_[t].outcome == TxnOutcome::kCommitted) ends.push_back(h_[t].end_ns);
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  const uint32_t base = static_cast<uint32_t>(h_.size());
  *frontiers = static_cast<uint32_t>(ends.size());
  auto rt = [](uint32_t from, uint32_t to) {
    return DependencyGraph::Edge{from, to, DependencyKind::kRealTime, 0, 0};
  };
  for (uint32_t f = 0; f + 1 < ends.size(); ++f) edges->push_back(rt(base + f, base + f + 1));
  for (uint32_t t = 0; t < h_.size(); ++t) {
    if (!committed_[t]) continue;
    if (h_[t].outcome == TxnOutcome::kCommitted) {
      auto f = std::lower_bound(ends.begin(), ends.end(), h_[t].end_ns) - ends.begin();
      edges->push_back(rt(t, base + static_cast<uint32_t>(f)));
    }
    auto before = std::lower_bound(ends.begin(), ends.end(), h_[t].start_ns) - ends.begin();
    if (before > 0) edges->push_back(rt(base + static_cast<uint32_t>(before - 1), t));
  }
}

// Looks for a cycle in growing edge sets and reports the first class found (see history.h).
void HistoryChecker::FindCycle(const DependencyGraph& g) {
  const struct {
    uint8_t mask;
    AnomalyKind kind;
  } phases[] = {{kWW, AnomalyKind::kG0},
                {kWW | kWR, AnomalyKind::kG1c},
                {kWW | kWR | kRW, AnomalyKind::kG2},
                {kWW | kWR | kRW | kRT, AnomalyKind::kRealTime}};
  for (const auto& phase : phases) {
    std::vector<uint32_t> comp = g.Components(phase.mask);
    std::vector<uint32_t> size(g.nodes(), 0);
    for (uint32_t c : comp) ++size[c];
    // The smallest cyclic component, which holds the shortest cycles more often than not.
    uint32_t best = kNoNode;
    for (uint32_t v = 0; v < g.txns(); ++v) {
      if (size[comp[v]] > 1 && (best == kNoNode || size[comp[v]] < size[best])) best = comp[v];
    }
    if (best == kNoNode) continue;
    if (phase.kind == AnomalyKind::kG2) {
      std::vector<uint32_t> single = FindSingleRwCycle(g, comp);
      if (!single.empty()) return ReportCycle(g, AnomalyKind::kGSingle, single);
    }
    // Shortest cycle through a few of the component's transactions.
    std::vector<uint32_t> cycle;
    int starts = 0;
    for (uint32_t v = 0; v < g.txns() && starts < 8; ++v) {
      if (comp[v] != best) continue;
      ++starts;
      int64_t budget = std::numeric_limits<int64_t>::max();
      std::vector<uint32_t> c = g.ShortestPath(v, v, phase.mask, comp, &budget);
      if (!c.empty() && (cycle.empty() || g.Length(c) < g.Length(cycle))) cycle = std::move(c);
    }
    return ReportCycle(g, phase.kind, cycle);
  }
}

// A cycle with exactly one rw edge: an rw edge a -> b inside a cyclic component with a path
// b -> a of ww and wr edges. The shortest of the first few found, within a bounded search.
std::vector<uint32_t> HistoryChecker::FindSingleRwCycle(const DependencyGraph& g,
                                                        const std::vector<uint32_t>& comp) const {
  int64_t budget = int64_t{50} * static_cast<int64_t>(g.edges().size() + g.nodes()) + 1000000;
  std::vector<uint32_t> best;
  int found = 0;
  for (uint32_t i = 0; i < g.edges().size() && found < 8 && budget > 0; ++i) {
    const DependencyGraph::Edge& e = g.edges()[i];
    if (e.kind != DependencyKind::kRW || comp[e.from] != comp[e.to]) continue;
    std::vector<uint32_t> path = g.ShortestPath(e.to, e.from, kWW | kWR, comp, &budget);
    if (path.empty()) continue;
    ++found;
    path.insert(path.begin(), i);
    if (best.empty() || g.Length(path) < g.Length(best)) best = std::move(path);
  }
  return best;
}

void HistoryChecker::ReportCycle(const DependencyGraph& g, AnomalyKind kind,
                                 const std::vector<uint32_t>& edge_path) {
  // Frontier hops collapse into one rt edge between the transactions at either end.
  std::vector<Dependency> cycle;
  uint32_t rt_from = kNoNode;
  int rw = 0, rt = 0;
  for (uint32_t i : edge_path) {
    const DependencyGraph::Edge& e = g.edges()[i];
    bool from_txn = e.from < g.txns(), to_txn = e.to < g.txns();
    if (from_txn && to_txn) {
      cycle.push_back({e.from, e.to, e.kind, e.key, e.value});
      rw += e.kind == DependencyKind::kRW;
    } else if (from_txn) {
      rt_from = e.from;
    } else if (to_txn) {
      cycle.push_back({rt_from, e.to, DependencyKind::kRealTime, 0, 0});
      ++rt;
    }
  }
  if (kind == AnomalyKind::kG2 && rw == 1) kind = AnomalyKind::kGSingle;
  std::string what;
  switch (kind) {
    case AnomalyKind::kG0:
      what = "transactions overwrote each other's versions in a cycle";
      break;
    case AnomalyKind::kG1c:
      what = "information flowed in a cycle through writes and reads";
      break;
    case AnomalyKind::kGSingle:
      what =
          "a cycle with one anti-dependency (e.g. read skew): a transaction missed a write "
          "that it otherwise depends on";
      break;
    case AnomalyKind::kG2:
      what = absl::StrCat("a cycle with ", rw, " anti-dependencies (e.g. write skew)");
      break;
    default:
      what =
          absl::StrCat(rw > 0 ? "stale read: " : "",
                       "the history is serializable only in an order that contradicts real time");
      break;
  }
  absl::StrAppend(&what, "; cycle of ", cycle.size(), " edges:");
  std::vector<size_t> txns;
  for (const Dependency& d : cycle) {
    absl::StrAppend(&what, "\n  ", DescribeDependency(h_, d));
    txns.push_back(d.from);
  }
  Report(kind, std::move(txns), std::move(what), std::move(cycle));
}

void HistoryChecker::Report(AnomalyKind kind, std::vector<size_t> txns, std::string what,
                            std::vector<Dependency> cycle) {
  if (++result_.anomaly_count > kMaxAnomalies) return;
  std::string description = absl::StrCat(AnomalyName(kind), ": ", what, "\n  transactions:");
  for (size_t t : txns) absl::StrAppend(&description, "\n    ", DescribeTxn(h_, t));
  result_.anomalies.push_back({kind, std::move(txns), std::move(cycle), std::move(description)});
}

}  // namespace

const char* AnomalyName(AnomalyKind kind) {
  switch (kind) {
    case AnomalyKind::kReadOfUnwrittenValue:
      return "read of a value never written";
    case AnomalyKind::kAbortedRead:
      return "G1a (aborted read)";
    case AnomalyKind::kIntermediateRead:
      return "G1b (intermediate read)";
    case AnomalyKind::kInternalInconsistency:
      return "internal inconsistency";
    case AnomalyKind::kLostUpdate:
      return "lost update";
    case AnomalyKind::kG0:
      return "G0 (write cycle)";
    case AnomalyKind::kG1c:
      return "G1c (circular information flow)";
    case AnomalyKind::kGSingle:
      return "G-single (single anti-dependency cycle)";
    case AnomalyKind::kG2:
      return "G2 (anti-dependency cycle)";
    case AnomalyKind::kRealTime:
      return "real-time violation";
  }
  return "unknown anomaly";
}

std::string DescribeTxn(const History& history, size_t index) {
  const TxnRecord& t = history[index];
  const char* outcome = t.outcome == TxnOutcome::kCommitted ? "committed"
                        : t.outcome == TxnOutcome::kAborted ? "aborted"
                                                            : "outcome unknown";
  return absl::StrCat("T", index, " (", t.line ? absl::StrCat("line ", t.line, ", ") : "",
                      "client ", t.client, ", ", t.start_ns, "..", t.end_ns, " ns, ", outcome, ")");
}

absl::StatusOr<HistoryCheck> CheckStrictSerializability(const History& history) {
  return HistoryChecker(history).Run();
}

}  // namespace txn
}  // namespace farm
