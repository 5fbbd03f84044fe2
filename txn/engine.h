// Engine: a node's transaction service. It owns the node's allocator and participant, serves
// the commit protocol's RPCs for coordinators on other nodes, settles the transactions of
// coordinators that leave, and hands out transaction ids and pending truncations to this node's
// coordinators (txn/transaction.h).
//
// A coordinator that leaves. Its transactions may be undecided: it may have sent COMMIT-PRIMARY
// to some owners and not to others, or COMMIT-BACKUP to some backups only. The members decide
// them as FaRM's recovery does (SOSP'15 section 5.3; the rule in txn/recovery.h): when a
// membership without coordinator C arrives, the engine fences C (Participant and BackupLog:
// nothing C sent is applied or kept here from now on), and its recovery thread drives C's
// recovery, as every member's does (the same decisions, whoever drives: see RECOVER in
// txn/protocol.h):
//   1. vote: every member of the current membership epoch, once it applied that epoch, says
//      what it holds of C's transactions (a member in another epoch is asked again);
//   2. decide each transaction (txn/recovery.h) from the votes and the epoch's region map;
//   3. record: every member of that epoch keeps the decisions (refused in another epoch: then
//      from 1 again), so that whoever drives later, in any epoch, finds them;
//   4. apply: every member applies them (owners install or unlock, backups apply or drop their
//      records) until every member did or left;
//   5. forget: every member drops the departure (a member asked about it afterwards says it is
//      finished).
// Without replication (f = 0) there are no records: a transaction commits only if a surviving
// owner committed it (an owner that left took its part with it).
//
// A primary hand-off (the CM balancing primaries; control.RegionInfo.handing_off): a region this
// node serves is to move to one of its backups while this node stays. A drain, so that nothing
// of the region is undecided here when it moves (the recovery rule reads a region whose primary
// changed as one whose primary failed: txn/recovery.h, rule 5):
//   1. the membership marks the region: the participant grants no new LOCK on it (Aborted, the
//      coordinator retries) and the allocator hands out nothing in it (Participant::HandOff);
//   2. once no transaction holds an object of it locked here, no recovery lock of a promotion
//      is left on it and every object array of it reached its backups, the engine's thread says
//      HandOffReady to the CM (again every kHandOffReport while the region stays marked);
//   3. the CM publishes the region at the backup (promoted and recovering, as after a failure:
//      AdoptPromoted there) with this node as a backup, and activates it once every member
//      applied that membership (so no member READs this node's memory of it as the primary's
//      any more: Node::Batch abandons such READs); this node's memory of the region, which holds
//      every committed write, is its backup copy from then on (Node), and its records arrive
//      here again (BackupLog::Demote).
// A membership that drops the mark (the target left, or the CM cancelled) ends the hand-off.
//
// Thread safety: all methods are safe for concurrent use.
#ifndef FARM_TXN_ENGINE_H_
#define FARM_TXN_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "messaging/rpc.h"
#include "platform/node.h"
#include "txn/allocator.h"
#include "txn/backup_log.h"
#include "txn/participant.h"
#include "txn/protocol.h"
#include "txn/resync.h"

namespace farm {
namespace txn {

class Engine {
 public:
  // Carves the node's data regions into the object heap and registers the protocol's handlers
  // on `rpc` (before it serves, so that no request finds them missing). `node` and `rpc` must
  // outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Start(Node* node, Rpc* rpc);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Stops (as Stop) if that was not done.
  ~Engine();
  // Stops following membership and ends the recovery thread. Call before the Rpc stops
  // serving; the protocol's handlers must not run after the engine is destroyed (destroy the Rpc
  // first). Idempotent.
  void Stop();

  Node* node() const { return node_; }
  Rpc* rpc() const { return rpc_; }
  Allocator& allocator() { return *allocator_; }
  Participant& participant() { return *participant_; }
  // This node's COMMIT-BACKUP records of the regions it keeps backup copies of.
  BackupLog& backup_log() { return *backup_log_; }

  // Largest protocol message (what one ring message holds, less RPC's envelope).
  uint64_t max_message() const { return max_message_; }
  // Largest object: what the heap's slots hold and one LOCK message carries (with the default
  // 64 KiB rings, about 15 KiB; 64 KiB - 24 bytes needs rings of 320 KiB or more).
  uint64_t max_object_size() const { return max_object_size_; }
  // Room a LOCK message needs besides its writes' values (header, participants, truncations).
  static constexpr uint64_t kLockOverhead = 2048;
  static constexpr size_t kMaxTruncationsPerLock = 64;

  // Creates `count` objects of `size` payload bytes (zeros, version 1) in consecutive slots of
  // this node's memory, one slot size (the smallest power of two >= ObjectSpan(size)) apart, so
  // that one READ fetches several of them (e.g. a hash table's buckets): the first object's
  // address. They are ordinary objects from then on (transactions read and write them); they
  // are never freed. The region's backups get the array from the engine's thread, soon after
  // (pending_arrays). Errors: as Allocator::ReserveArray.
  absl::StatusOr<GlobalAddress> CreateObjectArray(uint64_t size, uint64_t count);

  // Object arrays not yet acknowledged by a backup (CreateObjectArray sends them from the
  // engine's thread; for tests).
  size_t pending_arrays() const;
  // Regions this node copied as a new backup (re-replication, txn/resync.h; for tests).
  uint64_t resync_regions_copied() const { return resync_->regions_copied(); }

  // A new transaction's id. Its sequence number holds this incarnation's truncation bound
  // until ReleaseId (the transaction ended) and every truncation of it was acknowledged.
  TxnId NextId();
  void ReleaseId(uint64_t seq);
  // The truncation bound (txn/protocol.h, LockRequest::finished_below): every transaction of
  // this incarnation below it has ended and was truncated at every backup that kept its record.
  uint64_t TruncationBound() const;
  // This node's incarnation (its joined epoch): the middle part of its transaction ids.
  uint64_t incarnation() const { return incarnation_; }
  // Departed coordinators whose recovery has not finished here (for tests).
  size_t unsettled() const;
  // Departures finished and forgotten here (for tests).
  size_t forgotten_departures() const;
  // Transactions of this node whose records `owner` may drop: taken by the next LOCK to it.
  std::vector<uint64_t> TakeTruncations(uint32_t owner, size_t max = kMaxTruncationsPerLock);
  void AddTruncation(uint32_t owner, uint64_t seq);
  // The same for the COMMIT-BACKUP records `backup` keeps of this node's transactions: taken by
  // the next COMMIT-BACKUP to it, or sent alone by the engine's thread within
  // kBackupTruncationDelay when no transaction takes them (so that idle backups catch up).
  // A truncation holds the bound until Truncated (acknowledged, or its backup left) is called
  // for it; one whose send failed goes back with RequeueBackupTruncations.
  std::vector<uint64_t> TakeBackupTruncations(uint32_t backup, size_t max = kMaxTruncationsPerLock);
  void AddBackupTruncation(uint32_t backup, uint64_t seq);
  void RequeueBackupTruncations(uint32_t backup, absl::Span<const uint64_t> seqs);
  void Truncated(absl::Span<const uint64_t> seqs);
  static constexpr absl::Duration kBackupTruncationDelay = absl::Milliseconds(10);
  // How often a drained hand-off is reported again while the membership still marks it.
  static constexpr absl::Duration kHandOffReport = absl::Milliseconds(100);
  // Regions of this node being handed over (for tests).
  size_t handing_off() const;

  // The whole cluster ends and this node keeps its regions (Node's data directory): as for a
  // hand-off of every region it serves, no LOCK or allocation is granted from now on
  // (Participant::Close); then waits, up to `timeout`, until no transaction (a departed
  // coordinator's included, until the recovery settles it) holds an object locked here and no
  // recovery lock is left. Returns the layout of every region it serves then; after it the
  // regions change no more (their backups are made again after a restart, so what they still
  // lack does not matter). DeadlineExceeded, saying what is still held, if that takes longer.
  absl::StatusOr<std::map<uint32_t, control::RegionLayout>> Quiesce(absl::Duration timeout);

 private:
  Engine(Node* node, Rpc* rpc) : node_(node), rpc_(rpc) {}
  void OnMembership(const control::Membership& m);
  // Takes the regions `m` promoted to this node into the allocator (their memory is this node's
  // backup copy, their layout what the backup log learnt). On the membership listener's thread.
  void AdoptPromoted(const control::Membership& m);
  // Primary hand-offs (see the file comment): starts or ends those `m` asks for, and gives up
  // the regions `m` moved from this node to another. On the membership listener's thread.
  void ApplyHandOffs(const control::Membership& m);
  // Says HandOffReady for each region being handed over that nothing holds here any more (the
  // engine's thread).
  void CheckHandOffs();
  // The RECOVER handler (txn/protocol.h), for another member's recovery or this node's own: a
  // piece of the answer (RecoverPiece).
  absl::StatusOr<std::string> OnRecover(uint32_t from, const RecoverRequest& request);
  // The answer to `request` (mu_ held).
  RecoverAnswer AnswerRecover(uint32_t from, const RecoverRequest& request);
  // A coordinator that left, being recovered here.
  struct Departure {
    uint32_t coordinator = 0;
    uint64_t fence = 0;  // its incarnations below this are fenced (the departed one's + 1)
    // The decisions recorded here (RecoverOp::kRecord), kept until the departure is forgotten.
    absl::flat_hash_map<TxnId, bool> decided;
  };
  void RecoveryLoop();
  // Sends every pending backup truncation (the recovery thread, on its lane).
  void FlushBackupTruncations();
  // Sends the object arrays the backups have not acknowledged yet (the same thread).
  void FlushArrays();
  // Drives one departure's recovery to its end (steps 1-5 above). Returns false if stopped or
  // this node was evicted.
  bool Recover(uint32_t coordinator, uint64_t fence);
  // One attempt: true once every member forgot the departure, false to try again (another
  // epoch, a member that did not answer yet).
  bool RecoverOnce(uint32_t coordinator, uint64_t fence);
  // Sends `request` to `member` (this node's own handler for itself), and takes the answer's
  // pieces.
  absl::StatusOr<RecoverAnswer> AskRecover(uint32_t member, RecoverRequest request);
  // Waits up to `d` unless stopping. False if stopping.
  bool Pause(absl::Duration d);

  Node* const node_;
  Rpc* const rpc_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Participant> participant_;
  std::unique_ptr<BackupLog> backup_log_;
  // Re-replication's copier: copies the regions this node became a new backup of.
  std::unique_ptr<Resync> resync_;
  // Promoted regions taken into the allocator, with their memory (listener thread only).
  absl::flat_hash_map<uint32_t, std::shared_ptr<Region>> adopted_;
  uint64_t incarnation_ = 0;
  // Transaction ids: the next sequence number, and those that hold the truncation bound (how
  // many holds each: its transaction, and its truncations not yet acknowledged).
  mutable std::mutex seq_mu_;
  uint64_t next_seq_ = 1;               // guarded by seq_mu_
  std::map<uint64_t, int> unfinished_;  // guarded by seq_mu_
  uint64_t max_message_ = 0;
  uint64_t max_object_size_ = 0;
  int listener_ = -1;
  // The recovery thread's own lane (the runtime's pool has two more lanes than workers: this
  // one and re-replication's copier's).
  Messenger::LaneLease lane_;
  std::thread recovery_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<Departure> departures_;  // guarded by mu_
  // The last membership seen: members by id, with their incarnations (guarded by mu_).
  absl::flat_hash_map<uint32_t, uint64_t> members_;
  uint64_t members_epoch_ = 0;
  // Departures whose recovery finished (coordinator, fence), so that a late question about one
  // is answered "finished" (guarded by mu_; one entry per departure).
  absl::flat_hash_set<std::pair<uint32_t, uint64_t>> forgotten_;
  // RECOVER answers longer than one piece (RecoverPiece), until the asker took the rest: by
  // (asker, coordinator, fence), one per asker and departure (guarded by mu_).
  struct KeptAnswer {
    uint64_t id = 0;
    std::string bytes;
  };
  absl::flat_hash_map<std::tuple<uint32_t, uint32_t, uint64_t>, KeptAnswer> kept_answers_;
  uint64_t next_answer_id_ = 1;                                              // guarded by mu_
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> truncations_;         // guarded by mu_
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> backup_truncations_;  // guarded by mu_
  std::vector<std::pair<uint32_t, ArrayRecord>> pending_arrays_;             // guarded by mu_
  size_t arrays_in_flight_ = 0;  // taken from pending_arrays_ by FlushArrays; guarded by mu_
  // Regions being handed over: to which node, and when HandOffReady was last said (guarded by
  // mu_).
  struct HandingOff {
    uint32_t to = 0;
    absl::Time reported = absl::InfinitePast();
  };
  absl::flat_hash_map<uint32_t, HandingOff> handing_off_;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_ENGINE_H_
