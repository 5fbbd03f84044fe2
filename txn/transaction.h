// Transaction: FaRM's optimistic transactions, coordinated by the thread that runs them.
//
//   Transaction t(ctx);
//   std::string a, b;
//   RETURN_IF_ERROR(t.Read(x, 8, &a));       // one-sided READ (local copy if x is ours);
//   RETURN_IF_ERROR(t.Read(y, 8, &b));       // the version is recorded
//   RETURN_IF_ERROR(t.Write(x, new_a));      // buffered here
//   RETURN_IF_ERROR(t.Write(y, new_b));
//   absl::Status s = t.Commit();             // Aborted on a conflict: run it again
//
// Reads see the value of one committed version of each object (lock-free reads, txn/object.h);
// a transaction's own writes are read back. Commit (txn/protocol.h): LOCK at the owners of the
// written objects (their CPUs lock the objects if the versions read are unchanged), VALIDATE the
// objects only read with one-sided READs of their lock words (absence included: a read that found
// no object is validated too), COMMIT-PRIMARY at the owners (install and unlock; sent until every
// owner acknowledged or left, so the decision is atomic), TRUNCATE piggybacked on later LOCKs. A
// read-only transaction commits after validation alone and sends no message. Committed
// transactions are strictly serializable: each takes effect at a point between its LOCK and its
// COMMIT-PRIMARY (after validation). If the coordinator leaves mid-commit, the owners settle its
// transactions among themselves (txn/engine.h).
//
// Alloc reserves a slot on the chosen owner now and creates the object at commit; Free frees it
// at commit. An aborted transaction (Abort, a failed Commit, or destruction without Commit)
// releases its locks and reservations: it leaves nothing behind.
//
// Errors: Aborted (a conflict: another transaction changed or locked an object this one used;
// retry), InvalidArgument (not an object, wrong size, object too large), NotFound (no object at
// the address: freed or never allocated), OutOfRange (address outside every region),
// ResourceExhausted (memory full), Unavailable (a node involved left the cluster; from Commit,
// after the decision, only when no owner confirmed it: the outcome is then unknown here),
// DeadlineExceeded, FailedPrecondition (the transaction was already committed or aborted).
//
// Thread safety: a Transaction and its ThreadContext belong to one thread at a time.
#ifndef FARM_TXN_TRANSACTION_H_
#define FARM_TXN_TRANSACTION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "messaging/messenger.h"
#include "platform/fabric.h"
#include "platform/global_address.h"
#include "platform/node.h"
#include "txn/engine.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {

struct ObjectView;  // txn/object.h

// What a test's callback at the sync points "Transaction::Decide:Send" and
// "Transaction::SendLocks:Send" gets: the decision (COMMIT-PRIMARY or ABORT) or the LOCK about to
// be sent to `owner`; setting `drop` makes this send fail as a back-pressured send would. A
// dropped decision is sent again in the next round; a dropped LOCK aborts the transaction.
struct DecisionProbe {
  uint16_t method = 0;
  uint32_t owner = 0;
  bool drop = false;
};

// What a transaction uses of the thread that runs it (a farm::Worker's parts).
struct ThreadContext {
  Engine* engine = nullptr;
  Messenger::Lane* lane = nullptr;
  Node::Channel* channel = nullptr;
  // Registered staging memory for this thread's READs. A READ abandoned by a failed Wait
  // may still land in it: the memory is then replaced (Node::StagingBuffer::Retire).
  Node::StagingBuffer* staging = nullptr;
  absl::Duration timeout = absl::Seconds(10);
};

// Where Alloc puts a new object.
struct AllocHint {
  enum class Kind { kLocal, kOnNode, kNear, kAnywhere };
  Kind kind = Kind::kLocal;
  uint32_t node = 0;   // kOnNode
  GlobalAddress near;  // kNear: on the node that owns this address
  uint64_t key = 0;    // kAnywhere: spread over the members by rendezvous hashing of the key
};

// Reads the object at `addr` of `size` payload bytes outside any transaction: a consistent
// value of one committed version, retried while the object is locked or a copy is torn (up to
// the context's timeout; then Aborted). `version` may be null.
absl::Status LockFreeRead(ThreadContext& ctx, GlobalAddress addr, uint64_t size, std::string* out,
                          uint64_t* version = nullptr);

// A byte range of the shared address space to copy (CopyRanges).
struct Range {
  GlobalAddress addr;
  uint64_t len = 0;
};

// Copies the raw bytes of `ranges` (each inside one region) into `out` (one string per range):
// this node's own memory with atomic word loads (CopyLocalObject: `len` must be a multiple of 8
// there), remote memory with one-sided READs posted together in one batch (in several batches if
// they exceed the thread's buffer; a single range must fit it). Nothing is decoded: the caller
// checks the objects in the copies (txn/object.h DecodeObject).
absl::Status CopyRanges(ThreadContext& ctx, absl::Span<const Range> ranges,
                        std::vector<std::string>* out);

class Transaction {
 public:
  explicit Transaction(ThreadContext* ctx);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();  // aborts if neither committed nor aborted

  const TxnId& id() const { return id_; }

  // The object's value as of this transaction (its own write if it wrote it).
  absl::Status Read(GlobalAddress addr, uint64_t size, std::string* out);
  // Reads `count` objects of `size` payload bytes each, `stride` bytes apart from `first` on
  // (Engine::CreateObjectArray's layout), with ONE READ, retried while one of them is locked or
  // torn; out[i] gets the i-th object's value (this transaction's own write if it wrote it). Each
  // object's version is recorded as by Read.
  absl::Status ReadRun(GlobalAddress first, uint64_t stride, uint64_t size, uint64_t count,
                       std::vector<std::string>* out);
  // One run of objects for ReadRuns: `count` objects of `size` payload bytes, `stride` bytes
  // apart from `first` on; `out` gets their values.
  struct ObjectRun {
    GlobalAddress first;
    uint64_t stride = 0;
    uint64_t size = 0;
    uint64_t count = 0;
    std::vector<std::string>* out = nullptr;
  };
  // ReadRun of several runs with their READs posted together and waited for once (a run that is
  // locked or torn is read again, the others are not): each run is read, recorded and overlaid
  // with this transaction's own writes exactly as ReadRun would. The runs may overlap. On an
  // error, `*failed` (if given) is the index of the run it concerns, or runs.size() when it is
  // the batch's (a READ of several runs failed).
  absl::Status ReadRuns(absl::Span<const ObjectRun> runs, size_t* failed = nullptr);
  // This transaction's buffered value of `addr` (written or allocated here), or nullopt. For a
  // caller holding a copy read earlier in the transaction, which a later write made stale.
  // The view is valid until this transaction's next Write or Alloc (the write set's buffer may
  // grow).
  std::optional<absl::string_view> PendingWrite(GlobalAddress addr) const;
  // Replaces the object's value (same size as the object). Reads it first if this transaction
  // has not (to learn its version).
  absl::Status Write(GlobalAddress addr, absl::string_view value);
  // A new object of `size` bytes (zeros until written), created at commit.
  absl::StatusOr<GlobalAddress> Alloc(uint64_t size, const AllocHint& hint = {});
  // Frees the object at commit.
  absl::Status Free(GlobalAddress addr);

  // Drops `addr` from the objects whose versions Commit validates; a no-op if this transaction
  // did not read it or writes it. For callers that read more than their outcome depends on: the
  // KV store reads a key's whole neighbourhood to find it, but an update of a key it found
  // depends only on the bucket that holds it (which it writes, so LOCK checks it).
  void ReleaseRead(GlobalAddress addr);
  // Whether this transaction has read or written `addr` so far.
  bool Touched(GlobalAddress addr) const {
    return reads_.count(addr.Pack()) > 0 || writes_.count(addr.Pack()) > 0;
  }

  absl::Status Commit();
  void Abort();

  // Validation reads lock words that lie within this many bytes of each other in one region
  // with one READ.
  static constexpr uint64_t kMaxCoalescedRead = 4096;

  // Message rounds the last Commit used (LOCK, COMMIT-BACKUP when the cluster keeps backups,
  // COMMIT-PRIMARY: one each when there were writes; 0 for a read-only transaction), and the
  // one-sided READs of its validation.
  int commit_rounds() const { return commit_rounds_; }
  // Whether it ended aborted: nothing of it was applied anywhere.
  bool aborted() const { return state_ == State::kAborted; }
  int validation_reads() const { return validation_reads_; }

 private:
  enum class State { kActive, kCommitted, kAborted };
  struct ReadEntry {
    uint64_t word = 0;  // the lock word seen (unlocked): version, and whether an object was there
    uint64_t size = 0;  // the object's size (0: unknown, or no object)
  };
  // Where a decision went (Decide).
  struct Delivery {
    std::vector<uint32_t> acked;  // applied it
    std::vector<uint32_t> left;   // left the cluster before acknowledging
    std::vector<std::pair<uint32_t, absl::Status>> refused;  // answered FailedPrecondition
    bool evicted = false;     // this node was evicted before all answered
    absl::Status last_error;  // the last transient failure seen
  };
  struct WriteEntry {
    WriteKind kind = WriteKind::kWrite;
    uint64_t version = 0;
    uint64_t size = 0;
    uint64_t offset = 0;  // of its value in values_ (size bytes; none for kFree)
    uint32_t owner = 0;
  };
  // The value a write sends: its bytes in values_, nothing for a free. Valid until values_ grows
  // (the next Write or Alloc of another object).
  absl::string_view Value(const WriteEntry& w) const {
    if (w.kind == WriteKind::kFree) return {};
    return absl::string_view(values_.data() + w.offset, w.size);
  }
  absl::Status CheckActive() const;
  absl::StatusOr<uint32_t> OwnerOf(GlobalAddress addr) const;
  // Reads the lock word of `addrs` (one batch of one-sided READs for the remote ones).
  absl::Status ReadLockWords(const std::vector<GlobalAddress>& addrs, std::vector<uint64_t>* words);
  absl::Status Validate();
  // Records what a read saw (the lock word and size) for validation; Aborted (and aborts) if
  // this transaction saw another state of the object before.
  absl::Status Record(GlobalAddress addr, uint64_t word, uint64_t size);
  // ReadRuns' last step for one run read consistently (`views`: its objects in the copy): the
  // values into r.out (this transaction's own writes instead where it wrote), versions recorded.
  absl::Status Take(const ObjectRun& r, const std::vector<ObjectView>& views);
  // Sends the LOCK payloads to their owners (this node's participant directly), waits for all;
  // returns the first error.
  // `locks`: the LOCKs by owner. Each remote one is encoded straight into the lane's buffer
  // (Rpc::StartInPlace); this node's own ones are encoded and locked here (decoded in place).
  absl::Status SendLocks(const std::map<uint32_t, std::vector<LockView>>& locks);
  // Sends the decision `method` (kCommitMethod or kAbortMethod) to `owners` until each one
  // acknowledged it, refused it, or left the cluster, or this node was evicted; retries
  // transient failures (back-pressure, timeouts) with a growing pause, and after the context's
  // timeout reports an owner that is still silent to the CM (Node::ReportSuspect).
  Delivery Decide(uint16_t method, std::vector<uint32_t> owners);
  // Decide's loop for any messages: each (node, payload) is sent with `method` until it is
  // acknowledged, refused or its node left (or this node was evicted); this node's own ones
  // go to `local` instead. A node counts as acked once all of its messages were.
  Delivery Deliver(uint16_t method, absl::string_view name,
                   std::vector<std::pair<uint32_t, std::string>> messages,
                   const std::function<absl::Status(const std::string&)>& local);
  // COMMIT-BACKUP (ClusterConfig.f > 0): the writes to every backup of the regions written, in
  // messages of at most the engine's max_message, until each backup acknowledged or left. The
  // backups that acknowledged, for the truncation after COMMIT-PRIMARY. Sets `*moved` when the
  // transaction cannot commit: a region it wrote has another primary than the one it locked at
  // (a backup was promoted meanwhile), or a backup refused the record (it was promoted).
  std::vector<uint32_t> SendBackups(bool* moved);
  // The nodes where this transaction may hold reservations and that are not in `owners`.
  std::vector<uint32_t> ReservationOnlyOwners(const std::vector<uint32_t>& owners) const;
  // InvalidArgument unless 1 <= size <= the engine's largest object.
  absl::Status CheckSize(uint64_t size) const;
  // ABORT at every owner and every node that may hold a reservation of it (until each
  // acknowledged or left), then the state.
  void AbortAt(const std::vector<uint32_t>& owners);

  ThreadContext* ctx_;
  Engine* engine_;
  TxnId id_;
  State state_ = State::kActive;
  // By packed address, in address order. B-trees: a transaction's few entries share a node or
  // two instead of a heap allocation each (std::map). Inserting invalidates their iterators.
  absl::btree_map<uint64_t, ReadEntry> reads_;
  absl::btree_map<uint64_t, WriteEntry> writes_;
  // The written values back to back, by WriteEntry::offset: one buffer for the transaction
  // (inline up to its first bytes) rather than an allocation per write. A value rewritten in
  // place keeps its bytes (same size); one freed after it was written leaves them unused.
  absl::InlinedVector<char, 128> values_;
  std::set<uint32_t> reserve_owners_;      // nodes asked for a reservation
  int commit_rounds_ = 0;
  // Set by SendBackups: every region written has a backup that acknowledged COMMIT-BACKUP.
  bool backed_up_ = false;
  int validation_reads_ = 0;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_TRANSACTION_H_
