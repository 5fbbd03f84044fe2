// Participant: the owner's side of the commit protocol (txn/protocol.h), for the objects in this
// node's regions. The owner's CPU takes the locks (no RDMA atomics: SoftiWARP has none), installs
// committed versions and keeps each coordinator's log records until they are truncated.
//
// Calls come from the node's RPC handlers (its poller thread) for remote coordinators and
// directly from application threads for transactions coordinated on this node.
//
// Failure handling: when a coordinator leaves the cluster, CoordinatorLeft aborts its
// transactions that are locked here but not decided (releasing their locks) and cancels its
// reservations. With no replication yet (f = 0) a coordinator that fails after sending
// COMMIT-PRIMARY to some owners but not all leaves the others to abort: recovery from the logs
// (a later issue) will settle such transactions from the LOCK records' participant lists.
//
// Thread safety: all methods are safe for concurrent use (one mutex; no call blocks on I/O).
#ifndef FARM_TXN_PARTICIPANT_H_
#define FARM_TXN_PARTICIPANT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "txn/allocator.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {

class Participant {
 public:
  // `is_member(node)` says whether a node is in this node's current membership (a LOCK or a
  // reservation from a coordinator that is not is refused: see CoordinatorLeft).
  explicit Participant(Allocator* allocator,
                       std::function<bool(uint32_t)> is_member = [](uint32_t) { return true; })
      : allocator_(allocator), is_member_(std::move(is_member)) {}
  Participant(const Participant&) = delete;
  Participant& operator=(const Participant&) = delete;

  // LOCK from `coordinator`: locks every written object if it still has the version the
  // transaction read (a reserved slot for an allocation), or none of this request's. A
  // transaction may send several LOCKs (its writes here in parts); they add up. Aborted (naming the object and
  // why) when one is locked by another transaction, changed or freed; InvalidArgument for an
  // address that is not an object here or a value that does not fit its slot.
  absl::Status Lock(uint32_t coordinator, const LockRequest& request, absl::string_view encoded);
  // COMMIT-PRIMARY: installs the locked transaction's writes (new versions) and unlocks.
  // FailedPrecondition if the transaction is not locked here (never was, or was aborted).
  absl::Status Commit(uint32_t coordinator, const DecisionRequest& request);
  // ABORT: unlocks the transaction's objects if it is locked here, and cancels the listed
  // reservations. Idempotent.
  absl::Status Abort(uint32_t coordinator, const DecisionRequest& request);
  // Reserves a slot for an allocation of `request.txn`.
  absl::StatusOr<GlobalAddress> Reserve(uint32_t coordinator, const ReserveRequest& request);

  // The coordinator left the cluster: abort its undecided transactions, cancel its reservations.
  // Call it once the membership without the coordinator is applied (is_member says false from
  // then on): a LOCK or reservation of the coordinator that is handled after this call is
  // refused, and one handled before it is undone by it, so nothing it locks can stay locked.
  void CoordinatorLeft(uint32_t coordinator);

  // The (coordinator -> this node) log: records not yet truncated, oldest first.
  std::vector<LogRecord> Log(uint32_t coordinator) const;
  // Transactions locked here and not yet decided.
  size_t locked_transactions() const;
  // Objects locked here.
  size_t locked_objects() const;

 private:
  struct Locked {
    GlobalAddress addr;
    char* object = nullptr;
    WriteKind kind = WriteKind::kWrite;
    uint64_t version = 0;  // before the transaction
    std::string data;
  };
  struct Pending {
    uint32_t coordinator = 0;
    std::vector<Locked> objects;
  };
  // Unlocks `objects` (the transaction aborted). Caller holds mu_.
  void UnlockAll(std::vector<Locked>& objects);
  void Append(uint32_t coordinator, LogRecordType type, const TxnId& txn, std::string body);
  void Truncate(uint32_t coordinator, const std::vector<uint64_t>& seqs);

  Allocator* const allocator_;
  const std::function<bool(uint32_t)> is_member_;
  mutable std::mutex mu_;
  absl::flat_hash_map<TxnId, Pending> pending_;
  // Reservations by coordinator (packed addresses), so that a coordinator that leaves loses
  // them.
  absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint64_t>> reservations_;
  absl::flat_hash_map<uint32_t, std::deque<LogRecord>> logs_;
  size_t locked_objects_ = 0;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_PARTICIPANT_H_
