// The randomized workload of tests/txn_history_test.cc: concurrent transactions on an
// in-process cluster that record what they did as a txn/history.h History, so that the
// strict-serializability checker judges the protocol from the outside.
//
//   HistoryWorkload w(runtimes, {.seed = 3});
//   RunResult r = w.Run();            // threads, transactions, then the history
//   CheckStrictSerializability(r.history) ...
//
// Objects and how they are recorded (keys of the history; values are unique per key, never 0):
//   * small keys 0..5: uint64 objects made before the run (value 0 = what they start with);
//   * big keys 10..13: kBigSize-byte objects on node 1 filled with one uint64 value; a
//     transaction that writes three or more of them needs more than one LOCK message there
//     (a multi-part LOCK); a copy whose words differ is reported as torn;
//   * objects allocated during the run, key 100 + i for the i-th address the run reserved. The
//     history sees such an address as one key whose versions are its objects' values with
//     "absent" versions between them: an Alloc writes the object's first value over the absent
//     version before it (0 before the address's first object), a Free writes a fresh tombstone
//     value (bit 63 set) over the value it read, and a read that finds no object (NotFound)
//     reads the absent version current at that point.
// Which absent version that is, and which one an Alloc overwrote, the clients cannot see; it is
// derived after the run, soundly (see Resolve in the .cc): the objects at one address follow each
// other in the order of their reservations, which every client timestamps after Alloc returns;
// an Alloc overwrote the tombstone of the previous object there; and a NotFound read saw an
// absent period that overlaps its transaction in real time, which it is attributed to only if
// exactly one does (otherwise the read is left out of the history: weaker, never wrong).
//
// Operations: read-modify-write of small keys, big multi-part writes, Alloc, Free (with a read
// first, for the value it overwrites), reads of allocated addresses (values or NotFound),
// lock-free reads (Worker::LockFreeRead, recorded as a one-read transaction). The clients stop
// at the first failure outside the history (an error other than Aborted, a torn copy).
#ifndef FARM_TESTS_TXN_HISTORY_WORKLOAD_H_
#define FARM_TESTS_TXN_HISTORY_WORKLOAD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "farm/farm.h"
#include "txn/history.h"

namespace farm {
namespace testing {

struct HistoryWorkloadOptions {
  uint32_t seed = 1;
  int threads_per_node = 2;
  int txns_per_thread = 150;
  // How long a lock-free read waits for a locked object: far longer than a commit holds its
  // locks on a loaded machine, far shorter than the default 10 s, so that locks left behind by a
  // broken commit fail the run quickly.
  absl::Duration lock_wait = absl::Seconds(3);
};

struct HistoryWorkloadResult {
  txn::History history;
  // Problems seen outside the history: torn copies of big objects, an address reallocated while
  // its object was live, a NotFound read no absent period explains, unexpected errors.
  std::vector<std::string> failures;
  // What the run exercised (so that a test can insist on it).
  int allocs_committed = 0;
  int frees_committed = 0;
  int absent_reads = 0;          // NotFound reads attributed to an absent version
  int absent_reads_dropped = 0;  // NotFound reads left out (ambiguous)
  int lock_free_reads = 0;
  int multi_part_commits = 0;  // committed transactions that wrote 3+ big objects
};

inline constexpr uint64_t kBigSize = 5000;
inline constexpr int kSmallKeys = 6;
inline constexpr int kBigKeys = 4;
inline constexpr uint64_t kBigKeyBase = 10;
inline constexpr uint64_t kAllocatedKeyBase = 100;
inline constexpr uint64_t kTombstoneBit = uint64_t{1} << 63;

// The histories' clock (steady, shared by every thread of the process) in nanoseconds: for
// records a test makes outside the workload.
int64_t NowNs();

class HistoryWorkload {
 public:
  HistoryWorkload(const std::vector<std::unique_ptr<Runtime>>& runtimes,
                  HistoryWorkloadOptions options);
  ~HistoryWorkload();
  HistoryWorkloadResult Run();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace testing
}  // namespace farm

#endif  // FARM_TESTS_TXN_HISTORY_WORKLOAD_H_
