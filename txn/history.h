// Histories of transactions and a checker for strict serializability.
//
// A workload records every transaction it ran (who, when, what it read and wrote, how it ended);
// CheckStrictSerializability then decides whether some serial order of the committed
// transactions explains every read and respects real time. It is how the transaction tests
// judge FaRM's protocol from the outside, without trusting its own bookkeeping.
//
//   absl::StatusOr<History> h = ParseHistoryJsonLines(text);      // or build one in code
//   if (!h.ok()) { ...bad input: h.status().message() names the line... }
//   absl::StatusOr<HistoryCheck> c = CheckStrictSerializability(*h);
//   if (!c.ok()) { ...bad input: e.g. two writes of the same value to one key... }
//   if (!c->ok()) spdlog::error("{}", c->anomalies[0].description);   // kind, cycle, transactions
//
// The history model
// -----------------
// A history is a list of transaction records. Each record has
//   * client: who ran it (any string; only used in messages);
//   * start_ns, end_ns: when the client invoked it and when it learnt the outcome, in nanoseconds
//     of one monotonic clock shared by every client (all nodes run on one machine);
//   * outcome: committed, aborted, or unknown (the client never learnt it, e.g. a timeout);
//   * ops, in program order: read(key) -> value observed, and write(key, value, prev).
// Keys and values are uint64. Every key starts at value 0, written by an implicit initial
// transaction that precedes everything. The workload must make every write's value unique per
// key and never 0, so that a read names exactly the write it observed; a history breaking that
// rule is bad input (InvalidArgument), not an anomaly.
//
// prev is the value the write overwrote. Reads alone do not reveal the order in which writes to a
// key were installed; our transactions read an object before writing it, so the workload knows
// what each write replaced and records it. The checker builds each key's version order from these
// links. When a write gives no prev, the value its own transaction last read from that key before
// writing it stands in; a key with two or more committed writes of which one has neither is bad
// input (its version order cannot be derived). Two committed writes with the same prev are a
// fork: a lost update.
//
// Objects that come and go (Alloc, Free, reads that find nothing) need no special kind of
// operation: a key can stand for an address, whose "absent" states are versions like any other.
// The address's initial version 0 is its absence before its first object; an Alloc writes the
// object's first value over the absent version before it; a Free writes a fresh "tombstone"
// value (unique like every value) over the value it read; a NotFound read reads the absent
// version current at that point. Which absent version an Alloc overwrote and a NotFound read
// saw is the workload's to derive (tests/txn_history_workload.h does it from the order of the
// address's reservations and real time, and leaves out a NotFound read it cannot place).
//
// Outcome unknown: such a transaction may or may not have committed. If a transaction counted as
// committed observed one of its writes (read it, or overwrote it as prev), it did commit and is
// counted as committed, which may in turn make the unknown transactions it observed count;
// otherwise it is dropped, as if it had aborted, which is sound because nobody saw its effects.
// An unknown transaction's commit may have happened any time after its invocation, so it gets
// real-time edges from transactions that completed before its start_ns, but none to others.
// Aborted transactions take no part except that reading their writes is an anomaly (G1a).
// Reads by aborted or dropped transactions are not checked.
//
// Within a transaction a read of a key it has already written must return its own latest write
// (internal consistency); only the reads before a transaction's first write to a key, and only
// its last write to each key (the installed version), take part in the dependency graph.
//
// The check (Adya's dependency graph plus real time)
// ----------------------------------------------------
// Nodes are the committed transactions. Edges, per key, from the version order:
//   ww  T1 -> T2  T2 installed the version right after T1's;
//   wr  T1 -> T2  T2 read T1's version;
//   rw  T1 -> T2  T1 read a version and T2 installed the next one (anti-dependency);
//   rt  T1 -> T2  T1 completed before T2 was invoked (end_ns < start_ns; equal times give no
//                 edge). Added through a chain of "completion frontier" nodes, one per distinct
//                 end time, so there are O(n) of them rather than O(n^2).
// The history is strictly serializable iff this graph is acyclic. Before the graph the checker
// reports anomalies visible in single reads: a read of a value never written, of an aborted write
// (G1a), of a write its transaction later overwrote (G1b), internal inconsistency, and lost
// updates. Otherwise it looks for a cycle in growing edge sets and names the first class found:
// G0 (ww only), G1c (ww and wr), G-single (exactly one rw: read skew, non-repeatable read), G2
// (two or more rw: write skew), and finally real-time (a cycle that needs an rt edge: stale read;
// the history is serializable but not strictly). A cycle is reported as a short one through the
// smallest cyclic component, with each edge's kind, key and version. Time O((n + e) log n) for n
// transactions and e operations (the search for a G-single cycle stops after a fixed multiple of
// the graph's size and then reports the cycle as G2 or G-single by its count of rw edges).
// txn/history_test.cc checks the verdict against a brute-force search of serial orders.
//
// Thread safety: the functions keep no state; concurrent calls are safe.
#ifndef FARM_TXN_HISTORY_H_
#define FARM_TXN_HISTORY_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farm {
namespace txn {

struct TxnOp {
  enum class Kind { kRead, kWrite };
  Kind kind = Kind::kRead;
  uint64_t key = 0;
  uint64_t value = 0;            // the value read, or the value written
  std::optional<uint64_t> prev;  // writes only: the value this write overwrote, if recorded

  static TxnOp Read(uint64_t key, uint64_t value) { return {Kind::kRead, key, value, {}}; }
  static TxnOp Write(uint64_t key, uint64_t value, std::optional<uint64_t> prev = {}) {
    return {Kind::kWrite, key, value, prev};
  }
  bool operator==(const TxnOp& o) const {
    return kind == o.kind && key == o.key && value == o.value && prev == o.prev;
  }
};

enum class TxnOutcome { kCommitted, kAborted, kUnknown };

struct TxnRecord {
  std::string client;
  int64_t start_ns = 0;  // invocation
  int64_t end_ns = 0;    // completion (for kUnknown: when the client gave up); >= start_ns
  TxnOutcome outcome = TxnOutcome::kCommitted;
  std::vector<TxnOp> ops;
  int64_t line = 0;  // 1-based line of the file it was parsed from, 0 if none; for messages
};

using History = std::vector<TxnRecord>;

enum class AnomalyKind {
  kReadOfUnwrittenValue,   // a read (or a write's prev) names a value no transaction wrote
  kAbortedRead,            // G1a: observed a write of an aborted transaction
  kIntermediateRead,       // G1b: observed a write its transaction later overwrote
  kInternalInconsistency,  // a transaction did not see its own writes
  kLostUpdate,             // two committed writes overwrote the same version (a fork)
  kG0,                     // cycle of ww edges (write cycle)
  kG1c,                    // cycle of ww and wr edges (circular information flow)
  kGSingle,                // cycle with exactly one rw edge (e.g. read skew)
  kG2,                     // cycle with two or more rw edges (e.g. write skew)
  kRealTime,               // cycle that needs a real-time edge (e.g. stale read)
};

// "G-single", "lost update", ...
const char* AnomalyName(AnomalyKind kind);

enum class DependencyKind { kWW, kWR, kRW, kRealTime };

// One edge of a reported cycle. Transactions are indices into the History. For ww, wr and rw
// edges, `key` and `value` name the version that links the two: the version `from` wrote and `to`
// overwrote (ww) or read (wr), or the version `from` read and `to` overwrote (rw).
struct Dependency {
  size_t from = 0;
  size_t to = 0;
  DependencyKind kind = DependencyKind::kWW;
  uint64_t key = 0;
  uint64_t value = 0;
};

struct Anomaly {
  AnomalyKind kind;
  std::vector<size_t> txns;       // the transactions involved (indices into the History)
  std::vector<Dependency> cycle;  // for the cycle kinds: the cycle, each edge's `to` is the next
                                  // edge's `from`, the last edge returns to the first's `from`
  std::string description;        // for people: kind, what happened, the cycle, the transactions
};

struct HistoryCheck {
  size_t transactions = 0;  // records in the history
  size_t committed = 0;     // counted as committed, including unknown ones observed
  size_t aborted = 0;
  size_t unknown_included = 0;  // outcome unknown, counted as committed
  size_t unknown_dropped = 0;   // outcome unknown, nobody observed them
  // Empty iff strictly serializable. The anomalies visible in single reads are all listed (up to
  // kMaxAnomalies); otherwise there is at most one, a cycle.
  std::vector<Anomaly> anomalies;
  size_t anomaly_count = 0;  // found, including those beyond kMaxAnomalies
  bool ok() const { return anomalies.empty(); }
};

inline constexpr size_t kMaxAnomalies = 20;

// Checks `history` for strict serializability (see the top of this file). InvalidArgument for bad
// input: end before start, a write of 0, two writes of one value to one key, or a key whose
// version order cannot be derived; the message names the transactions.
absl::StatusOr<HistoryCheck> CheckStrictSerializability(const History& history);

// "T12 (line 14, client 3, 100..250 ns, committed)": how messages name transaction `index`.
std::string DescribeTxn(const History& history, size_t index);

// The JSON-lines format, one transaction per line (blank lines are skipped):
//   {"client":3,"start":100,"end":250,"outcome":"committed","ops":[["r",7,0],["w",7,11,0]]}
// client is an integer or a string; start and end are int64 nanoseconds; outcome is "committed",
// "aborted" or "unknown"; ops is a list of ["r", key, value] and ["w", key, value] or
// ["w", key, value, prev] (prev may be null). All five fields are required, no others allowed.
// InvalidArgument for malformed text, naming the line (and for ParseTxnRecordJson, the field).
absl::StatusOr<History> ParseHistoryJsonLines(absl::string_view text);
absl::StatusOr<TxnRecord> ParseTxnRecordJson(absl::string_view line);

// One line of the format above (no newline); clients are written as strings.
std::string TxnRecordToJson(const TxnRecord& txn);

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_HISTORY_H_
