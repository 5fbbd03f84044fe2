// Participant: the owner's side of the commit protocol (txn/protocol.h), for the objects in this
// node's regions. The owner's CPU takes the locks (no RDMA atomics: SoftiWARP has none), installs
// committed versions and keeps each transaction's records until they are truncated.
//
// Calls come from the node's RPC handlers (its poller thread) for remote coordinators and
// directly from application threads for transactions coordinated on this node.
//
// Records. A transaction locked here has one record, found by its id (TxnId: coordinator node,
// incarnation, sequence number): the LOCK as received, its participant list, the objects it
// locked, and its state (locked, or committed). COMMIT-PRIMARY marks it committed; the record
// stays until the coordinator's truncation (piggybacked on its later LOCKs to this node) drops
// it, so that a retried COMMIT-PRIMARY is acknowledged again and other owners can learn that it
// committed here. ABORT drops the record at once. Memory is therefore bounded by the
// transactions in flight and not yet truncated, whatever the number of aborts.
//
// Reservations (slots for Alloc) belong to a transaction: COMMIT-PRIMARY creates the objects it
// wrote into them and releases the others, ABORT releases all of them. So a reservation whose
// answer the coordinator never got (a timed-out RPC) is released by the ABORT or COMMIT-PRIMARY
// the coordinator sends this owner afterwards: both travel on the coordinator's lane, behind the
// request, and messages on a lane are handled in order.
//
// A coordinator that leaves (Engine runs the recovery, see engine.h):
//   1. Fence(coordinator, epoch): from then on nothing sent by its incarnations that joined
//      before `epoch` is locked, committed, aborted or reserved here; its reservations are
//      released. Returns its transactions locked here and undecided.
//   2. Votes(coordinator, epoch): what is known here of each of its transactions, for the
//      recovery vote (txn/recovery.h; it fences first, so no vote changes afterwards but by
//      a decision).
//   3. Settle(txn, commit): the recovery's decision.
//   4. Forget(coordinator, epoch) once every member applied every decision.
//
// Thread safety: all methods are safe for concurrent use (one mutex; no call blocks on I/O).
#ifndef FARM_TXN_PARTICIPANT_H_
#define FARM_TXN_PARTICIPANT_H_

#include <cstdint>
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
  // reservation from a coordinator that is not is refused).
  explicit Participant(
      Allocator* allocator, std::function<bool(uint32_t)> is_member = [](uint32_t) { return true; })
      : allocator_(allocator), is_member_(std::move(is_member)) {}
  Participant(const Participant&) = delete;
  Participant& operator=(const Participant&) = delete;

  // LOCK from `coordinator`: locks every written object if it still has the version the
  // transaction read (a slot this transaction reserved, for an allocation), or none of this
  // request's. A transaction may send several LOCKs (its writes here in parts); they add up.
  // Aborted (naming the object and why) when one is locked by another transaction, changed or
  // freed; InvalidArgument for an address that is not an object here, a value that does not fit
  // its slot, or an object that may not be freed (an object array's); Unavailable when the
  // coordinator left (is not a member, or was fenced), and InvalidArgument for a message that does
  // not decode. `encoded` is the LOCK (EncodeLock) as received: decoded here in place (the values
  // are not copied), and kept as the transaction's record (moved there), from which COMMIT-PRIMARY
  // installs them.
  absl::Status Lock(uint32_t coordinator, std::string encoded);
  // COMMIT-PRIMARY: installs the locked transaction's writes (new versions), unlocks, and releases
  // its unused reservations. OK again for a transaction already committed here (a retry).
  // FailedPrecondition if it is not locked here (aborted, or never locked); Unavailable when the
  // coordinator was fenced (the owners settle the transaction instead).
  absl::Status Commit(uint32_t coordinator, const DecisionRequest& request);
  // ABORT: unlocks the transaction's objects if it is locked here, and releases its
  // reservations. Idempotent. FailedPrecondition if it committed here (a coordinator never sends
  // both).
  absl::Status Abort(uint32_t coordinator, const DecisionRequest& request);
  // Reserves a slot for an allocation of `request.txn`.
  absl::StatusOr<GlobalAddress> Reserve(uint32_t coordinator, const ReserveRequest& request);
  // The version in a slot's lock word (a reserved slot keeps it until its object is installed
  // with the next one). InvalidArgument for an address that is not a slot here.
  absl::StatusOr<uint64_t> SlotVersion(GlobalAddress slot) const;

  // A transaction of a departed coordinator, locked here and undecided.
  struct Undecided {
    TxnId txn;
    std::vector<uint32_t> participants;
  };
  // Fences the incarnations of `coordinator` that joined before membership epoch `epoch` (see
  // the header comment) and returns their undecided transactions. Idempotent.
  std::vector<Undecided> Fence(uint32_t coordinator, uint64_t epoch);
  // The recovery vote (txn/recovery.h): fences as Fence does, then one vote per transaction of
  // those incarnations known here (locked, with the regions of its locked objects; committed;
  // or aborted by the recovery).
  std::vector<TxnVote> Votes(uint32_t coordinator, uint64_t epoch);
  // Decides a fenced coordinator's undecided transaction: installs it (commit) or unlocks it.
  // A no-op for a transaction that is not locked here.
  void Settle(const TxnId& txn, bool commit);
  // Drops the records of the fenced incarnations of `coordinator` (before `epoch`).
  void Forget(uint32_t coordinator, uint64_t epoch);

  // Primary hand-off (txn/engine.h): from now on no LOCK on `region` is granted (Aborted, "being
  // handed over to node `to`": the coordinator retries, and finds the region at its new primary
  // once the CM moved it), and nothing is reserved in it (Allocator::Freeze). Transactions that
  // locked objects of it before go on (the hand-off waits until locked_objects(region) is 0).
  // Idempotent.
  void HandOff(uint32_t region, uint32_t to);
  // The whole cluster ends (Engine::Quiesce): from now on no LOCK is granted and nothing is
  // reserved (Unavailable: the cluster is ending). Transactions that locked objects before go on
  // to their commit or abort. Idempotent.
  void Close();
  // The hand-off of `region` ended (cancelled, or the region moved): LOCKs on it are no longer
  // refused for it (a region that moved is refused as not served here), and allocation in it
  // resumes if it is still in the heap.
  void EndHandOff(uint32_t region);

  // The records of `coordinator`'s transactions kept here, by incarnation and sequence number:
  // a kLock record (the LOCK as received) for each, followed by kCommitPrimary for those that
  // committed.
  std::vector<LogRecord> Log(uint32_t coordinator) const;
  // Records kept (locked or committed, not yet truncated), for every coordinator.
  size_t records() const;
  // Reservations held (for every transaction).
  size_t reservations() const;
  // Transactions locked here and not yet decided.
  size_t locked_transactions() const;
  // Objects locked here.
  size_t locked_objects() const;
  // Objects of `region` locked here (by transactions not decided yet).
  size_t locked_objects(uint32_t region) const;

 private:
  struct Locked {
    GlobalAddress addr;
    char* object = nullptr;
    WriteKind kind = WriteKind::kWrite;
    uint64_t version = 0;  // before the transaction
    // The new value: `size` bytes at `offset` in the record's LOCK number `lock` (Record::locks),
    // by position rather than pointer, so that nothing dangles when the record moves.
    uint32_t lock = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  struct Record {
    bool committed = false;
    std::vector<uint32_t> participants;
    std::vector<Locked> objects;     // while locked
    std::vector<std::string> locks;  // the LOCK requests as received
  };
  // Whether `txn` comes from an incarnation that was fenced. Caller holds mu_.
  bool Fenced(const TxnId& txn) const;
  // Fences (see Fence). Caller holds mu_.
  void FenceLocked(uint32_t coordinator, uint64_t epoch);
  // Installs a locked record's writes and marks it committed. Caller holds mu_.
  void Install(const TxnId& txn, Record& r);
  // Unlocks a locked record's objects and drops it. Caller holds mu_.
  void Drop(absl::flat_hash_map<TxnId, Record>::iterator it);
  // Releases the transaction's remaining reservations. Caller holds mu_.
  void Release(const TxnId& txn);

  Allocator* const allocator_;
  const std::function<bool(uint32_t)> is_member_;
  mutable std::mutex mu_;
  absl::flat_hash_map<TxnId, Record> records_;
  // Fenced coordinators' transactions this node's recovery aborted, until forgotten: asked
  // again, it says so (kAborted) rather than "unknown", which a backup would take for "committed
  // and truncated" and apply its record of it (Engine::Settle).
  absl::flat_hash_set<TxnId> settled_aborted_;
  // Reserved slots (packed addresses) by transaction.
  absl::flat_hash_map<TxnId, std::vector<uint64_t>> reservations_;
  size_t reserved_ = 0;
  // Per coordinator node: its incarnations that joined before this epoch are fenced.
  absl::flat_hash_map<uint32_t, uint64_t> fenced_before_;
  bool closed_ = false;  // guarded by mu_ (Close)
  size_t locked_objects_ = 0;
  size_t locked_transactions_ = 0;
  // Regions being handed over (HandOff), each to the node named in the refusal.
  absl::flat_hash_map<uint32_t, uint32_t> handing_off_;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_PARTICIPANT_H_
