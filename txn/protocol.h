// The commit protocol's records and messages (FaRM, SOSP 2015, section 4), shared by the
// coordinator (txn/transaction.h) and the participants (txn/participant.h).
//
//   LOCK            coordinator -> owner of written objects: the writes (new values, the versions
//                   read); the owner's CPU locks the objects if their versions are unchanged.
//   COMMIT-BACKUP   coordinator -> backups of written regions (ClusterConfig.f > 0), after
//                   validation and before any COMMIT-PRIMARY: the writes to that backup's
//                   copies, kept until truncated, then applied (txn/backup_log.h). Encoded as a
//                   LOCK (the versions are the ones read; an allocation's is the slot's), with
//                   the truncations of earlier records and the coordinator's truncation bound.
//   COMMIT-PRIMARY  coordinator -> owners: install the new versions and unlock. Sent until every
//                   owner acknowledged it or left (idempotent at the owner).
//   ABORT           coordinator -> owners: unlock, cancel the transaction's reservations. Sent
//                   until every owner acknowledged it or left (idempotent).
//   TRUNCATE        coordinator -> owners: the transactions whose records may be dropped (sent
//                   with later LOCKs to the same owner, as FaRM piggybacks them).
//
//   RECOVER         member -> members, when a coordinator left: FaRM's recovery vote on its
//                   transactions (votes, recorded decisions, applying them, forgetting them;
//                   txn/recovery.h and Engine).
//
// Each owner keeps the records of each transaction it locked (the LOCK as received, and whether
// it committed) until they are truncated, or at once for an aborted one (Participant::Log).
#ifndef FARM_TXN_PROTOCOL_H_
#define FARM_TXN_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "platform/global_address.h"

namespace farm {
namespace txn {

// RPC methods of the transaction layer, in the platform's reserved range (farm.h:
// kFirstReservedMethod = 0xff00; the runtime uses 0xff01).
inline constexpr uint16_t kLockMethod = 0xff20;
inline constexpr uint16_t kCommitMethod = 0xff21;
inline constexpr uint16_t kAbortMethod = 0xff22;
inline constexpr uint16_t kReserveMethod = 0xff23;
inline constexpr uint16_t kRecoverMethod = 0xff24;
inline constexpr uint16_t kCommitBackupMethod = 0xff25;
inline constexpr uint16_t kArrayBackupMethod = 0xff26;
// DROP-BACKUP (a DecisionRequest): the coordinator aborts a transaction after COMMIT-BACKUP
// (a region it wrote changed its primary meanwhile): the backups drop its records.
inline constexpr uint16_t kDropBackupMethod = 0xff27;
// RESYNC (a ResyncRequest, answered with a ResyncAnswer): a new backup of a region asks its
// primary for the region's layout before it copies the region (txn/resync.h).
inline constexpr uint16_t kResyncMethod = 0xff28;

// A transaction: the coordinator's node, the coordinator's incarnation (the membership epoch in
// which that process joined: a restarted node joins again under a higher one) and a sequence
// number counted from 1 by that incarnation. Unique for the cluster's lifetime, and the
// incarnation tells which process of a node id a message came from (Participant fences the
// incarnations that left).
struct TxnId {
  uint32_t node = 0;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  friend bool operator==(const TxnId& a, const TxnId& b) {
    return a.node == b.node && a.incarnation == b.incarnation && a.seq == b.seq;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TxnId& t) {
    return H::combine(std::move(h), t.node, t.incarnation, t.seq);
  }
  std::string ToString() const { return absl::StrCat(node, ".", incarnation, ":", seq); }
};

enum class LogRecordType : uint8_t {
  kLock = 1,
  kCommitBackup = 2,
  kCommitPrimary = 3,
  kAbort = 4,
  kTruncate = 5,
};
absl::string_view LogRecordTypeName(LogRecordType type);

enum class WriteKind : uint8_t {
  kWrite = 1,  // a new value for an existing object of version `version`
  kAlloc = 2,  // the first value of an object in a slot this transaction reserved
  kFree = 3,   // frees the object of version `version`
};

// One write. `Data` owns the value (WriteRecord: what a backup keeps) or views it (WriteRef: a
// LOCK being encoded from the coordinator's write set, or decoded in the message that holds it).
template <typename Data>
struct BasicWriteRecord {
  GlobalAddress addr;
  WriteKind kind = WriteKind::kWrite;
  uint64_t version = 0;  // the version read (kWrite, kFree)
  Data data;             // the new value (kWrite, kAlloc)
};
using WriteRecord = BasicWriteRecord<std::string>;
using WriteRef = BasicWriteRecord<absl::string_view>;

// A region a transaction writes, as its coordinator saw it at COMMIT-BACKUP: the primary that
// locked its objects and the backups the records went to (the recovery vote, txn/recovery.h).
struct WrittenRegion {
  uint32_t region = 0;
  uint32_t primary = 0;
  std::vector<uint32_t> backups;
  friend bool operator==(const WrittenRegion& a, const WrittenRegion& b) {
    return a.region == b.region && a.primary == b.primary && a.backups == b.backups;
  }
};

// LOCK: the writes at one owner, the owners taking part, and transactions of this coordinator
// whose records that owner may truncate. COMMIT-BACKUP is encoded as a LOCK too, and lists every
// region the transaction writes (`written`, empty in a LOCK); a transaction's writes to one
// backup may take several COMMIT-BACKUPs (`part` of `parts`: a record counts in the recovery
// vote only once every part arrived), and each carries the coordinator's truncation bound
// (`finished_below`: every transaction of that incarnation with a lower sequence number was
// truncated at every backup that kept it, so backups may forget that they truncated it).
//
// LockView is the same with its values viewed (WriteRef): it is valid only while the memory they
// point into is (DecodeLockView: the encoded message).
template <typename Write>
struct BasicLockRequest {
  TxnId txn;
  std::vector<uint32_t> participants;
  std::vector<Write> writes;
  std::vector<uint64_t> truncate;  // sequence numbers (same coordinator)
  std::vector<WrittenRegion> written;
  uint32_t part = 0;  // COMMIT-BACKUP: this message's index among its backup's parts
  uint32_t parts = 1;
  uint64_t finished_below = 0;  // COMMIT-BACKUP and truncations: the bound (0: none)
};
using LockRequest = BasicLockRequest<WriteRecord>;
using LockView = BasicLockRequest<WriteRef>;
std::string EncodeLock(const LockRequest& r);
std::string EncodeLock(const LockView& r);
// The same written at `dst`, LockSize(r) bytes (a LOCK written in place: Rpc::StartInPlace).
size_t LockSize(const LockView& r);
void EncodeLockTo(const LockView& r, char* dst);
absl::StatusOr<LockRequest> DecodeLock(absl::string_view b);
// The same without copying the values: each write's data views into `b`, which must outlive the
// result.
absl::StatusOr<LockView> DecodeLockView(absl::string_view b);
// A view of `r`'s writes (valid while `r` is).
LockView ViewOf(const LockRequest& r);

// COMMIT-PRIMARY and ABORT: the transaction. Either one releases the slots the transaction
// reserved on that owner and did not create.
struct DecisionRequest {
  TxnId txn;
};
std::string EncodeDecision(const DecisionRequest& r);
absl::StatusOr<DecisionRequest> DecodeDecision(absl::string_view b);

// What an owner's participant knows of a departed coordinator's transaction.
enum class SettleState : uint8_t {
  kUnknown = 0,    // not locked here and not remembered committed (never here, or truncated)
  kCommitted = 1,  // COMMIT-PRIMARY applied here
  kUndecided = 2,  // locked here, no decision yet
  kAborted = 3,    // locked here, then aborted by the recovery (until forgotten)
};

// RECOVER: FaRM's recovery of the transactions of `coordinator`, which left the cluster in
// membership epoch `fence_epoch` (txn/recovery.h, Engine). Every member drives it: it asks every
// member for its votes (kVote) in one membership epoch, decides each transaction, has every
// member record the decisions (kRecord, refused by a member in another epoch), then apply them
// (kApply), then forget the departure (kForget).
enum class RecoverOp : uint8_t { kVote = 1, kRecord = 2, kApply = 3, kForget = 4 };
struct RecoverRequest {
  RecoverOp op = RecoverOp::kVote;
  uint32_t coordinator = 0;
  uint64_t fence_epoch = 0;
  uint64_t epoch = 0;                             // the asker's membership epoch
  std::vector<std::pair<TxnId, bool>> decisions;  // kRecord: commit or abort
  // The answer comes in pieces (RecoverPiece): the piece from byte `offset` on of answer
  // `answer`; offset 0 asks for a new answer (its first piece).
  uint64_t answer = 0;
  uint64_t offset = 0;
};
std::string EncodeRecover(const RecoverRequest& r);
absl::StatusOr<RecoverRequest> DecodeRecover(absl::string_view b);
// The bytes one kRecord decision takes in EncodeRecover, and those of the rest of a request: a
// request carries at most (limit - kRecoverRequestBytes) / kRecoverDecisionBytes decisions.
inline constexpr uint64_t kRecoverRequestBytes = 1 + 4 + 8 + 8 + 8 + 8 + 8;
inline constexpr uint64_t kRecoverDecisionBytes = 4 + 8 + 8 + 1;

enum class Decided : uint8_t { kNone = 0, kCommit = 1, kAbort = 2 };
// One member's vote on one transaction.
struct TxnVote {
  TxnId txn;
  Decided decided = Decided::kNone;  // a decision this member recorded
  SettleState owner = SettleState::kUnknown;
  std::vector<uint32_t> locked;        // regions in which its objects are locked here
  std::vector<uint32_t> recorded;      // regions whose copy here keeps its COMMIT-BACKUP record
  std::vector<WrittenRegion> written;  // every region it writes, from that record
  // Not on the wire: set by the driver when this member's answer lists the transaction among
  // the ones it truncated (RecoverAnswer.truncated).
  bool truncated = false;
};
enum class RecoverStatus : uint8_t {
  kOk = 0,
  kOtherEpoch = 1,  // the answerer is in another membership epoch (`epoch`): ask again
  kFinished = 2,    // the answerer forgot the departure: every decision was applied
  kConflict = 3,    // kRecord: the answerer recorded another decision (a bug: logged)
};
struct RecoverAnswer {
  RecoverStatus status = RecoverStatus::kOk;
  uint64_t epoch = 0;          // the answerer's membership epoch
  std::vector<TxnVote> votes;  // kVote
  // kVote: the departed coordinator's transactions whose COMMIT-BACKUP records the answerer
  // truncated (applied and dropped), above that incarnation's last truncation bound.
  std::vector<TxnId> truncated;
};
std::string EncodeRecoverAnswer(const RecoverAnswer& a);
absl::StatusOr<RecoverAnswer> DecodeRecoverAnswer(absl::string_view b);

// A RECOVER answer (EncodeRecoverAnswer) travels in pieces that each fit in one message: a vote
// lists every transaction of the departed coordinator the answerer holds anything of, and every
// one it truncated above that coordinator's last truncation bound (thousands, when an unfinished
// transaction held the bound back), far more than a message takes. The answerer keeps an answer
// longer than one piece until the asker took the rest (RecoverRequest.answer, .offset).
// `answer` 0 with `total` 0: the answer asked for is gone (the answerer made another since):
// ask for a new one.
struct RecoverPiece {
  uint64_t answer = 0;  // the answer's id at the answerer (0: it fitted in this one piece)
  uint64_t total = 0;   // the answer's size
  std::string bytes;    // from the request's offset on
};
inline constexpr uint64_t kRecoverPieceHeader = 8 + 8 + 8;
std::string EncodeRecoverPiece(const RecoverPiece& p);
absl::StatusOr<RecoverPiece> DecodeRecoverPiece(absl::string_view b);

// A reservation request: the object's size; the response is the packed slot address and the
// slot's version (16 bytes), which the allocation's COMMIT-BACKUP carries.
struct ReserveRequest {
  TxnId txn;
  uint64_t size = 0;
};
std::string EncodeReserve(const ReserveRequest& r);
absl::StatusOr<ReserveRequest> DecodeReserve(absl::string_view b);

// An object array (Engine::CreateObjectArray) for the backups of its region: `count` objects of
// `size` payload bytes from `first` on, one slot (the size's class) apart, each at version 1
// with zeros. The primary sends it before anyone learns the array's address.
struct ArrayRecord {
  GlobalAddress first;
  uint64_t size = 0;
  uint64_t count = 0;
};
std::string EncodeArray(const ArrayRecord& r);
absl::StatusOr<ArrayRecord> DecodeArray(absl::string_view b);

// RESYNC: node asks the primary of `region` for its layout from block `first_block` on (at most
// `max_blocks` blocks), once the primary has applied membership `epoch` (the one that made the
// asker a backup of it, which fenced the LOCKs granted before): until then the answer is
// Unavailable. The first piece (first_block 0) also carries the object arrays.
struct ResyncRequest {
  uint32_t region = 0;
  uint64_t epoch = 0;
  uint64_t first_block = 0;
  uint64_t max_blocks = 0;
};
std::string EncodeResync(const ResyncRequest& r);
absl::StatusOr<ResyncRequest> DecodeResync(absl::string_view b);
struct ResyncAnswer {
  uint64_t block_size = 0;
  uint64_t blocks = 0;           // in the region
  std::vector<int> block_class;  // blocks first_block.. (at most max_blocks of them)
  std::vector<std::pair<uint64_t, uint64_t>> arrays;  // [begin, end) offsets (first piece only)
};
std::string EncodeResyncAnswer(const ResyncAnswer& a);
absl::StatusOr<ResyncAnswer> DecodeResyncAnswer(absl::string_view b);

// One record of a pair's log.
struct LogRecord {
  LogRecordType type = LogRecordType::kLock;
  TxnId txn;
  std::string body;  // kLock: the LOCK request as received
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_PROTOCOL_H_
