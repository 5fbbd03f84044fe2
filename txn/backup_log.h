// BackupLog: a backup's side of the commit protocol (FaRM, SOSP 2015, section 4): the
// COMMIT-BACKUP records of the transactions that wrote regions this node keeps a backup copy of
// (platform/node.h: Node::BackupCopy), applied to those copies when the coordinator truncates
// them.
//
// A coordinator sends COMMIT-BACKUP once validation passed (the decision is commit) and before
// any COMMIT-PRIMARY, to every backup of every region it writes: the writes to that backup's
// regions, each with the version the transaction read (the slot's version, for an allocation),
// so that the new version is known here without asking the primary. The record is kept, not
// applied: a transaction whose coordinator fails before every COMMIT-BACKUP was acknowledged may
// still be aborted by recovery. The coordinator truncates it (piggybacked on a later
// COMMIT-BACKUP to this node, or sent alone when it has nothing else to send) once COMMIT-PRIMARY
// was acknowledged by every primary: then it is applied to the copies and dropped, and its
// sequence number remembered until the coordinator's truncation bound passes it (the recovery
// vote asks what was truncated: a promoted backup without a record applied it, or never got it;
// txn/recovery.h, rule 5).
//
// Records of different coordinators may be truncated in any order, so each write is applied only
// if it is newer than what the copy holds (its new version above the copy's): every copy ends
// with the newest committed version of each object, whatever the order. Writes of one object are
// totally ordered by its primary's lock (a transaction locks it only after the previous writer
// installed, which was after its COMMIT-BACKUP was acknowledged here), so versions never tie.
//
// A promoted backup also needs the region's allocator layout (txn/allocator.h: which blocks are
// carved for which slot class, and the object arrays), which lives only in the primary's memory.
// It is learned here from what arrives: every allocation or write names an object whose size
// gives its block's slot class, and an object array comes as a record of its own (InstallArray),
// installed at once (the primary sends it before anyone knows the array's address).
//
// Durability (a node's data directory, docs/replication.md item 7): with a journal attached
// (Persist), every change to what is kept here (records kept, truncations, decisions, fences,
// arrays, layouts) is appended to it before the call that made it returns, so before a
// COMMIT-BACKUP is acknowledged. The policy is write(2), no fsync: the journal and the copies
// (files mapped shared) survive the death of every process (kill -9, a crash), not a machine
// failure. A restarted node replays the journal over its copies (truncations apply again only
// where the copy holds an older version) and is where it was: the records kept, the layouts, what
// it truncated. The journal is rewritten from the state once it grew past a bound (compaction).
//
// Thread safety: all methods are safe for concurrent use (one mutex).
#ifndef FARM_TXN_BACKUP_LOG_H_
#define FARM_TXN_BACKUP_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "platform/data_dir.h"
#include "platform/region.h"
#include "txn/allocator.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {

class BackupLog {
 public:
  // `copy_of(region)` is this node's backup copy of a data region, or null if it holds none.
  explicit BackupLog(std::function<std::shared_ptr<Region>(uint32_t)> copy_of)
      : copy_of_(std::move(copy_of)) {}
  BackupLog(const BackupLog&) = delete;
  BackupLog& operator=(const BackupLog&) = delete;

  // Durability: `entries` (the journal's, from this node's previous run: its copies are mapped,
  // copy_of_ finds them) are replayed, then every change is appended to `journal`. Call before
  // anything else. InvalidArgument for an entry that does not decode (the journal is not this
  // version's), an error of the journal's otherwise. Records of regions this node holds no copy
  // of any more lose those writes.
  absl::Status Persist(std::unique_ptr<Journal> journal, const std::vector<std::string>& entries);
  // Journal bytes at which it is rewritten from the state (tests lower it).
  void set_compact_at(uint64_t bytes);
  // Times the journal was rewritten (for tests).
  uint64_t compactions() const;

  // COMMIT-BACKUP from `coordinator` (encoded as a LOCK: the transaction, the writes to this
  // node's copies, and sequence numbers of the coordinator's transactions to truncate). Applies
  // and drops the truncated records first, then keeps the writes (several COMMIT-BACKUPs of one
  // transaction add up; a retry of one changes nothing). InvalidArgument for a request from another
  // node than its transaction's, a write to a region this node keeps no copy of, or one that leaves
  // the copy. `encoded`: the request as it arrived (EncodeLock), journaled as it is (its other
  // fields are ignored at the replay); empty: encoded here if there is a journal.
  // The values are copied once, into the kept record.
  absl::Status Append(uint32_t coordinator, const LockView& request,
                      absl::string_view encoded = {});
  absl::Status Append(uint32_t coordinator, const LockRequest& request,
                      absl::string_view encoded = {}) {
    return Append(coordinator, ViewOf(request), encoded);
  }

  // An object array from the primary of its region: installs its objects (version 1, zeros)
  // where the copy holds no newer version, and learns the array's blocks. Unavailable for a
  // region this node keeps no copy of (yet), InvalidArgument for an array that leaves the copy.
  absl::Status InstallArray(const ArrayRecord& record);

  // The allocator layout of `region` as learned from the records received so far (Allocator::
  // Adopt rebuilds the allocator from it and the copy). Empty for a region never written.
  RegionLayout Layout(uint32_t region) const;

  // A coordinator that left (txn/engine.h, recovery): from now on nothing its incarnations
  // below `fence` send is kept (Append refuses it with Aborted), and their kept records are
  // returned, to be decided with the other members (Settle). Idempotent.
  std::vector<TxnId> Fence(uint32_t coordinator, uint64_t fence);
  // The recovery vote (txn/recovery.h): fences as Fence does, then one vote per kept record of
  // those incarnations (the regions it writes here, if every part of it arrived, and every
  // region its transaction writes).
  std::vector<TxnVote> Votes(uint32_t coordinator, uint64_t fence);
  // The transactions of `coordinator`'s incarnations below `fence` whose records were
  // truncated here (applied and dropped) and not yet forgotten under a truncation bound: the
  // recovery tells from them a promoted backup that applied a record from one that never got it.
  std::vector<TxnId> Truncated(uint32_t coordinator, uint64_t fence) const;
  // The departure's recovery finished: forgets what was truncated of those incarnations, and
  // the decisions recorded for them.
  void Forget(uint32_t coordinator, uint64_t fence);
  // The recovery recorded a decision on a transaction of a departed coordinator (before any
  // member applies it): kept here too, durably with a journal, and voted (TxnVote::decided)
  // until forgotten, so that a recovery after a crash of the whole cluster finds it.
  void RecordDecision(const TxnId& txn, bool commit);
  // The coordinators that have something kept here (records, truncations, decisions) of an
  // incarnation below `fence` (a restart after a crash recovers them all).
  std::vector<uint32_t> Coordinators(uint64_t fence) const;
  // Applies (commit) or drops (abort) the kept record of a fenced coordinator's transaction.
  void Settle(const TxnId& txn, bool commit);
  // DROP-BACKUP from `coordinator`: drops the kept record of its transaction `txn` (aborted after
  // COMMIT-BACKUP). InvalidArgument for another node's transaction.
  absl::Status Drop(uint32_t coordinator, const TxnId& txn);

  // Promotion: this node's copy of `region` becomes the region's primary. Every object of it that
  // a kept record writes (and the copy holds older) is locked first, until every such record is
  // decided (applied at its truncation or recovery, or dropped): a transaction that committed
  // before the failure must not be overtaken by one that read the object's older version here
  // (FaRM's lock recovery). Call before the region serves.
  void Promote(uint32_t region);
  // Objects locked by Promote and not yet released (for tests).
  size_t recovery_locks() const;
  // Those of them in `region` (a primary hand-off waits until there are none).
  size_t recovery_locks(uint32_t region) const;
  // Primary hand-off: this node's copy of `region` no longer serves as its primary, and its
  // memory is this node's backup copy again (platform/node.h): records for it are kept again,
  // and `layout` (the allocator's, which it served with) is merged into what was learnt of it.
  // False if this node holds no copy of `region`.
  bool Demote(uint32_t region, const RegionLayout& layout);

  // Re-replication (txn/resync.h): merges the primary's layout of `region` (each carved block's
  // slot class, its object arrays) into the one learnt from records. False if it does not fit
  // this node's copy of the region (or there is none).
  bool AdoptLayout(uint32_t region, const RegionLayout& layout);
  // Re-replication: `slot` bytes copied from the primary's slot at `offset` in `region`. Installs
  // the object (or the freed slot) where this node's copy holds an older version: the rule of
  // truncation, so records and copied slots may arrive in any order.
  enum class SlotCopy {
    kInstalled,  // the copy holds it now
    kKept,       // the copy already held this version or a newer one
    kRetry,      // locked by a commit, or torn (the READ overlapped a write): read it again
    kNoCopy,     // this node keeps no copy of the region (any more)
  };
  SlotCopy InstallCopied(uint32_t region, uint64_t offset, const char* copy, uint64_t slot);

  // Records kept (received, not yet truncated).
  size_t records() const;
  // Truncated transactions remembered, of every coordinator (bounded by the coordinators'
  // truncation bounds; for tests).
  size_t truncated_remembered() const;
  // Writes applied to copies, and writes skipped because the copy held a newer version (for
  // tests and statistics).
  uint64_t applied() const;
  uint64_t skipped() const;

 private:
  struct Kept {
    std::vector<WriteRecord> writes;
    std::vector<std::shared_ptr<Region>> copies;  // each write's copy, held until applied
    std::vector<bool> recovering;                 // per write: counted in recovery_locks_
    std::vector<WrittenRegion> written;           // every region the transaction writes
    uint32_t parts = 1;                           // COMMIT-BACKUPs its writes here take
    std::vector<uint32_t> parts_seen;             // the ones received
    bool complete() const { return parts_seen.size() >= parts; }
  };
  // What this node truncated of one coordinator incarnation's transactions: the sequence
  // numbers at or above its latest truncation bound (below it, every backup truncated them).
  struct Truncations {
    uint64_t below = 0;
    absl::flat_hash_set<uint64_t> seqs;
  };
  // Appends `entry` to the journal, if any. Caller holds mu_. An error is the journal's: from
  // then on nothing more is kept here (Append fails), since it could not be made durable.
  absl::Status Log(const std::string& entry);
  // Rewrites the journal from the state once it passed compact_at_. Caller holds mu_.
  void MaybeCompact();
  // Replays one entry (takes mu_).
  absl::Status Replay(absl::string_view entry);
  // The changes themselves (Append, Settle, ... and Replay). Callers hold mu_.
  void TruncateLocked(uint32_t coordinator, uint64_t incarnation, const std::vector<uint64_t>& seqs,
                      uint64_t finished_below);
  void KeepLocked(const TxnId& txn, Kept k, uint32_t part);
  void SettleLocked(const TxnId& txn, bool commit);
  void ForgetLocked(uint32_t coordinator, uint64_t fence);
  void RecordDecisionLocked(const TxnId& txn, bool commit);
  void InstallArrayLocked(const ArrayRecord& record, Region& copy);
  bool AdoptLayoutLocked(uint32_t region, uint64_t region_size, const RegionLayout& layout);
  // Applies a record's writes that are newer than the copies, then releases its recovery locks.
  // Caller holds mu_.
  void Apply(const Kept& k);
  // Releases a record's recovery locks (after Apply, or when it is dropped). Caller holds mu_.
  void Release(const Kept& k);
  // Raises `coordinator`'s fence to `fence` (never lowers it) and returns it. Caller holds mu_.
  uint64_t RaiseFence(uint32_t coordinator, uint64_t fence);
  // Whether the object at `addr` is held by Promote for a record still kept. Caller holds mu_.
  bool Recovering(GlobalAddress addr) const { return recovery_locks_.contains(addr.Pack()); }
  // Notes that the block holding the object at `addr` (in a copy of `region_size` bytes) has the
  // slot class of objects of `size` bytes. Caller holds mu_.
  void LearnBlock(GlobalAddress addr, uint64_t region_size, uint64_t size);
  RegionLayout& LayoutLocked(uint32_t region, uint64_t region_size);

  const std::function<std::shared_ptr<Region>(uint32_t)> copy_of_;
  mutable std::mutex mu_;
  std::unique_ptr<Journal> journal_;  // null: nothing durable
  absl::Status journal_error_;        // the journal's first failure
  uint64_t compact_at_ = 64 << 20;
  uint64_t compactions_ = 0;
  absl::flat_hash_map<TxnId, Kept> records_;
  absl::flat_hash_map<uint32_t, RegionLayout> layouts_;
  absl::flat_hash_map<uint32_t, uint64_t> fences_;  // coordinator -> its fenced incarnations' bound
  // (coordinator, incarnation) -> what was truncated here.
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, Truncations> truncated_;
  absl::flat_hash_map<TxnId, bool> decided_;  // RecordDecision, until Forget
  absl::flat_hash_set<uint32_t> promoted_;  // regions this node's copy now serves as primary
  // Objects of promoted regions locked by Promote: how many kept records still write each.
  absl::flat_hash_map<uint64_t, int> recovery_locks_;
  uint64_t applied_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_BACKUP_LOG_H_
