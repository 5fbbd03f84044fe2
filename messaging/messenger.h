// Messenger: FaRM's message passing between the nodes of a cluster, over one-sided WRITEs.
//
// For every ordered pair of nodes (sender -> receiver, including a node to itself) and every
// lane, the receiver owns a ring (messaging/ring.h) in one registered area of its memory. The
// sender stages the frames of a flush in its own registered memory and writes them with one
// WRITE to their offsets in the receiver's ring (two when they wrap around the ring's end).
// The receiver's scan finds complete frames, hands them to the receiver callback, zeroes them and
// writes its head back into the sender's area once half a ring has been consumed, so the sender
// knows the free space without asking; and a few times more if the ring then stays idle, so that
// a lost head report cannot leave a sender waiting for space forever.
//
// Lanes: each node has `lanes` worker lanes per peer, leased to one thread at a time
// (AcquireLane), so threads never share a tail, plus one more lane, the *scanning lane*, owned by
// the node's poller thread while it runs receiver callbacks. Replies from receiver callbacks go
// out on that scanning lane.
//
// Area layout (identical on every node, because every node has the same configuration): with N
// nodes listed in the configuration, L = lanes + 1 and ring size R, the ring for messages from
// the node listed i-th, lane l, starts at (i * L + l) * R; after the N * L rings come N * L head
// slots of 64 bytes, where the node listed j-th writes how far it has consumed this node's ring
// of lane l to it, at N * L * R + (j * L + l) * 64.
//
//   MessengerOptions mo;                     // the same on every node
//   NodeOptions no = ...;
//   no.areas.push_back(Messenger::Area(no.config, mo));
//   ASSIGN_OR_RETURN(std::unique_ptr<Node> node, Node::Start(no));
//   ASSIGN_OR_RETURN(std::unique_ptr<Messenger> m, Messenger::Create(node.get(), mo));
//   m->SetReceiver([](const Message& msg, Messenger::Lane* reply) {
//     if (reply == nullptr) return;  // a reply (it came on a scanning lane): not answered
//     reply->Send(msg.from, kPing + 1, {msg.payload}).IgnoreError();  // goes out after this scan
//   });
//   ASSIGN_OR_RETURN(Messenger::LaneLease lane, m->AcquireLane());
//   RETURN_IF_ERROR(lane->Send(/*node=*/2, kPing, {"hello"}));
//   RETURN_IF_ERROR(lane->Flush());          // one WRITE per destination
//
// Back-pressure: a sender never overwrites bytes the receiver has not consumed. Send on a full
// ring flushes, then waits up to its `wait` argument for the receiver's head (driving progress
// and the scan of responses itself meanwhile) and returns ResourceExhausted if none came. Messages
// larger than the ring's limit (MaxPayload(ring_size), a quarter of the ring) are refused with
// InvalidArgument; they are not fragmented.
//
// Corruption: a ring whose frames do not add up (ring.h) is closed: one error log line, the close
// listener is told (the RPC layer fails its pending calls to that node with DataLoss), and that
// ring is never read again (until its sender restarts, below). Nothing is read outside the ring.
// The receiver also writes a "closed" head report to the sender, whose sends on that lane then
// fail with DataLoss and whose close listener is told too (its calls to the receiver would
// otherwise wait for their deadlines: their requests are no longer read).
//
// Membership: the messenger follows the node's membership (Node::AddMembershipListener). Every
// member's *incarnation* is the region id of its messaging area, which the CM assigns afresh
// each time a node (re)joins. When a peer leaves, sends to it fail with Unavailable at once and
// the close listener is told (the RPC layer fails the calls waiting for it with Unavailable,
// naming the node). When a peer joins again (same node id, new process: new fabric address, new
// areas), both ends start its rings from zero; the protocol is described next to
// Messenger::OnMembership in messenger.cc. Every ring's frames are checksummed under its tag
// (RingTag of both incarnations and the lane), so a late WRITE of an earlier incarnation is never
// delivered.
//
// Which calls may run on which thread (the threading rule):
//  - Messages that arrive on the senders' worker lanes (requests, in RPC terms) are handed to the
//    receiver callback on the node's poller thread only (the *handler thread*), one at a time,
//    with `reply` = the scanning lane. Never on an application thread: a thread waiting in Poll
//    (Rpc::Await, Send's back-pressure) never runs them, so a callback cannot re-enter
//    application code or deadlock on a lock that the waiting thread holds.
//  - Messages that arrive on the senders' scanning lanes (responses) are handed to the receiver
//    callback by whichever thread polls: an application thread in Poll, or the poller, one at a
//    time, with `reply` = nullptr. So a caller waiting for a response gets it by its own polling
//    even while the poller is busy in (or blocked by) a request's callback.
//  - A callback must not wait for another message: a request's callback holds up every request
//    of the node (in particular no RPC Call from inside a handler, and no Send with a `wait` on a
//    full ring to this node itself); a response's callback holds up the other responses.
//  - A callback may block briefly on application locks: an application thread holding such a
//    lock while it waits for a response still gets its response (the test "a handler blocked on
//    the caller's lock" in rpc_test).
// Thread safety: Messenger's public methods are safe for concurrent use. A Lane is used by one
// thread at a time: its leaseholder, or for the scanning lane the handler thread during a
// request's callback. The Messenger must be destroyed before its Node, and every LaneLease before
// the Messenger.
#ifndef FARM_MESSAGING_MESSENGER_H_
#define FARM_MESSAGING_MESSENGER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "messaging/ring.h"
#include "platform/config.pb.h"
#include "platform/fabric.h"
#include "platform/global_address.h"
#include "platform/mutex.h"
#include "platform/node.h"
#include "platform/region.h"

namespace farm {

inline constexpr char kMessagingAreaPurpose[] = "messaging";

struct MessengerOptions {
  // Worker lanes per ordered node pair; the scanning lane comes on top. 1..64.
  int lanes = 4;
  // Bytes per ring; a multiple of 4096 (see ValidateRingSize). Largest message: a quarter.
  uint64_t ring_size = 64 << 10;
  // How long a half-placed frame may stay unchanged before its ring is declared corrupt (and its
  // sender reported to the CM). Keep it above the cluster's lease (ClusterConfig.lease_ms): a
  // sender paused mid-frame for longer than the lease is evicted instead.
  absl::Duration incomplete_timeout = absl::Seconds(5);
  // Messages taken from one ring per scan before moving on to the next (fairness).
  int messages_per_scan = 64;
  // How long a flush waits for its WRITEs to complete before it returns DeadlineExceeded (the
  // lane then waits for them before writing to that node again). Keep it above the lease.
  absl::Duration write_timeout = absl::Seconds(10);
};

// A message handed to the receiver callback.
struct Message {
  uint32_t from = 0;  // sender's node id
  int lane = 0;       // sender's lane
  uint16_t type = 0;
  absl::string_view payload;  // inside the ring: valid during the callback only
};

class Messenger {
 public:
  class Lane;
  class LaneLease;
  // `reply`: the scanning lane, for a message that came on a worker lane (on the poller thread);
  // nullptr for one that came on a scanning lane (on any polling thread). See the threading rule.
  using Receiver = std::function<void(const Message& message, Lane* reply)>;
  using CloseListener = std::function<void(uint32_t node, const absl::Status& why)>;

  // The area a node must request (NodeOptions::areas) to take part in messaging.
  static AreaRequest Area(const config::ClusterConfig& config, const MessengerOptions& options);

  // Sets up messaging on a started node (which requested Area()) and adds the ring scan to its
  // poller. Errors: InvalidArgument for bad options; FailedPrecondition when the node has no
  // messaging area, or a peer's area differs in size (nodes started with different options).
  static absl::StatusOr<std::unique_ptr<Messenger>> Create(Node* node, MessengerOptions options);

  Messenger(const Messenger&) = delete;
  Messenger& operator=(const Messenger&) = delete;
  ~Messenger();

  // Installs the callback for incoming messages. Rings are not read until one is installed, so
  // messages that arrive earlier wait (and eventually back-pressure their senders).
  void SetReceiver(Receiver receiver);
  // Called when messages from `node` can no longer be received: a ring from it was closed as
  // corrupt, or `node` closed a ring from this node as corrupt, so it no longer reads what this
  // node sends on that lane (`why` is DataLoss; called on the scanning thread), or it left the
  // cluster or
  // restarted (`why` is Unavailable and names the node; called on the configuration manager's
  // thread, after sends to it started failing). Must not block or call SetCloseListener.
  void SetCloseListener(CloseListener listener);

  // Leases a worker lane for the calling thread. ResourceExhausted if every lane stays leased
  // for `wait`.
  absl::StatusOr<LaneLease> AcquireLane(absl::Duration wait = absl::Seconds(10));

  // Drives the fabric's progress and, unless another thread is doing it, scans the rings of the
  // senders' scanning lanes (responses) once. Returns how much work was done (0 when idle).
  // Threads waiting for responses call it so that they never depend on the poller being awake
  // or free. The rings of worker lanes (requests) are scanned by the poller thread only.
  int Poll();

  // OK while messages from `node` can be received; the reason otherwise: DataLoss (a ring from
  // it was closed as corrupt), Unavailable (it is not a member: it left, or has no messaging).
  absl::Status ReceiveStatus(uint32_t node) const;

  Node* node() const { return node_; }
  const MessengerOptions& options() const { return options_; }
  // The epoch of the latest membership the messenger has applied (sends and the close listener
  // follow it from then on).
  uint64_t membership_epoch() const;
  // The epoch of the latest membership applied here in which a peer left or restarted, or the
  // membership's own fence_epoch (backups added to regions holding data) if later; 0 if none:
  // the fence below which requests are refused (Rpc, FaRM's configuration ids).
  // Published before membership_epoch() reaches that epoch.
  uint64_t fence_epoch() const;
  // Index of `node` in the configuration's node list, or -1.
  int IndexOf(uint32_t node) const;
  // Region id of node `index`'s messaging area in the current membership (0: not a member).
  uint32_t CurrentIncarnation(int index) const;

  // Test hooks: the bytes of the ring this node receives from `from` on `lane`, and its size.
  char* ReceiveRingForTesting(uint32_t from, int lane) const;

 private:
  struct Shared;  // the scan locks, and what the poller task holds on to
  // The two kinds of receive rings, each scanned under its own lock (see Shared): those of the
  // senders' worker lanes (requests) and those of their scanning lanes (responses).
  enum class ScanKind { kRequests = 0, kResponses = 1 };
  // A configured node as the current membership shows it.
  struct PeerArea {
    uint32_t node_id = 0;
    uint32_t region_id = 0;     // its messaging area: its incarnation; 0 if it has none
    uint64_t joined_epoch = 0;  // when this incarnation joined (NodeInfo::joined_epoch)
    absl::Status status;        // why it cannot be sent to, if it cannot
  };
  struct ReceiveRing;
  class Posting;

  Messenger(Node* node, MessengerOptions options);
  absl::Status Init();
  // Takes a new membership (any thread): updates peers_, then tells the close listener about
  // peers that left or restarted.
  void OnMembership(const control::Membership& m);
  PeerArea DescribePeer(const control::Membership& m, uint32_t node_id, bool was_member) const;
  // Brings the receive rings of `kind` in line with peers_ (resets the rings of departed and new
  // incarnations; acknowledges new ones). Posts into `posting`.
  void SyncReceiveRings(ScanKind kind, Posting& posting);  // that kind's scan lock held
  // Writes head slot `head` for ring `r` into its sender's area.
  void WriteHeadSlot(const ReceiveRing& r, uint64_t head, Posting& posting);
  uint64_t RingOffset(int sender_index, int lane) const;
  uint64_t HeadSlotOffset(int receiver_index, int lane) const;
  uint64_t AreaSize() const;
  // Both scan locks (see Shared), for set-up, SetReceiver and the destructor. Scan, ReportHead,
  // OnRingClosed and SyncReceiveRings run with the lock of the kind of ring they work on.
  void LockScans();
  void UnlockScans();
  int Scan(ScanKind kind);
  ScanKind KindOfLane(int lane) const {
    return lane == options_.lanes ? ScanKind::kResponses : ScanKind::kRequests;
  }
  std::vector<ReceiveRing>& RingsOf(ScanKind kind);
  // The scanning lane's posting for requests (its replies and head reports go out together),
  // response_posting_ for responses.
  Posting& PostingOf(ScanKind kind);
  void ReportHead(ReceiveRing& ring, Posting& posting);
  // Writes the head again if the ring stayed idle after a report (see kHeadRefreshes).
  void MaybeRefreshHead(ReceiveRing& ring, Posting& posting);
  void OnRingClosed(ReceiveRing& ring);
  // Tells the close listener about rings that their receivers closed (a "closed" head report in
  // this node's area). At most once a millisecond.
  void CheckClosedByReceivers(ScanKind kind);
  // Messaging cannot continue with member `index` (a corrupt ring from it, a lost WRITE): asks
  // the CM to evict it, so that every node agrees, instead of cutting it off silently here.
  void GiveUpOn(int index, const absl::Status& why);
  void ReleaseLane(int index);

  Node* const node_;
  const MessengerOptions options_;
  int nodes_ = 0;        // N
  int total_lanes_ = 0;  // L = lanes + 1
  int self_index_ = -1;
  std::vector<uint32_t> node_ids_;  // by configuration index
  char* area_ = nullptr;            // this node's messaging area
  uint32_t self_incarnation_ = 0;   // its region id
  uint64_t self_joined_ = 0;        // the epoch this node joined in
  int listener_id_ = -1;            // Node::AddMembershipListener

  // The membership as the messenger follows it. peer_version_ counts changes (written under
  // peer_mu_); lanes and the scan compare it with the version they last synchronised with.
  mutable farm::Mutex peer_mu_;
  std::vector<PeerArea> peers_ ABSL_GUARDED_BY(peer_mu_);  // by configuration index
  uint64_t epoch_ ABSL_GUARDED_BY(peer_mu_) = 0;
  std::atomic<uint64_t> peer_version_{0};
  std::atomic<uint64_t> applied_epoch_{0};  // OnMembership finished, listener included
  std::atomic<uint64_t> fence_epoch_{0};    // see fence_epoch(); only grows
  // Frame staging buffers (one per lane and destination) and head write-back staging, registered.
  std::unique_ptr<Region> send_memory_;
  std::unique_ptr<MemoryRegistration> send_mr_;
  std::vector<std::unique_ptr<Lane>> lanes_;  // worker lanes, then the scanning lane
  std::shared_ptr<Shared> shared_;

  farm::Mutex lane_mu_;
  std::vector<int> free_lanes_ ABSL_GUARDED_BY(lane_mu_);

  // Written with both scan locks held, read with either.
  Receiver receiver_;
  // By sender (receiver) index * L + lane: its receiver closed our ring on that lane (reported
  // once per incarnation). Each entry belongs to the scan of its lane's kind.
  std::unique_ptr<std::atomic<bool>[]> closed_by_receiver_;
  // "Closed" head reports (OnRingClosed), by scan kind, posted and never waited for: the scan must
  // not stall on a sender that stopped making progress (shm and tcp need the target's progress).
  std::unique_ptr<Posting> closed_notices_[2];
  CoarseClock::time_point next_closed_check_[2] = {};  // by scan kind
  // Guarded by the requests' scan lock (whose holder also owns lanes_.back()).
  std::vector<ReceiveRing> request_rings_;
  // Guarded by the responses' scan lock.
  std::vector<ReceiveRing> response_rings_;
  std::unique_ptr<Posting> response_posting_;                 // head reports of response_rings_
  uint64_t rings_version_[2] = {~uint64_t{0}, ~uint64_t{0}};  // peer_version_ synced, by kind
  // Messages to this node itself. Its lanes copy their frames into its own rings with memcpy on
  // the sending thread, while a scanning thread may be reading those rings; that is a data race
  // for the language (and ThreadSanitizer) unless the two are ordered. So after each copy the
  // lane publishes how far its frames now reach (the writer's tail, a byte counter like the
  // reader's head) with a release store here, and the scan reads a self ring only up to the
  // position it loaded with acquire: it never looks at bytes still being copied (the frames of
  // one flush are whole, and a wrap frame travels with the frame after it). The reuse of
  // consumed space is ordered by the head slot, which this node writes to itself with release
  // stores (WriteHeadSlot) and the lane reads with acquire loads. Chosen over a lock (a lane
  // would wait on a scan, and every scan would lock) and over a queue of copies (an allocation
  // and a copy per message, and the ring's back-pressure and in-place Reserve to redo): one
  // atomic load per scanned self ring, no lock that a callback could hold up. By lane.
  std::unique_ptr<std::atomic<uint64_t>[]> self_published_;

  farm::Mutex listener_mu_;  // held (shared) while the close listener runs
  CloseListener close_listener_ ABSL_GUARDED_BY(listener_mu_);

  mutable farm::Mutex status_mu_;
  std::vector<absl::Status> receive_status_ ABSL_GUARDED_BY(status_mu_);  // by index
  std::atomic<bool> any_down_{false};  // some receive_status_ is not OK
};

// One lane's sending ends to every node.
class Messenger::Lane {
 public:
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;
  ~Lane();

  int index() const { return index_; }

  // Queues a message to `node` (any member, this node included); it goes out with the next
  // Flush(). The payload is the concatenation of `parts`, copied into the registered staging
  // buffer. Errors: InvalidArgument (unknown node, message above the ring's limit),
  // ResourceExhausted (the ring stayed full, or an earlier WRITE to it stayed in flight, for
  // `wait`; nothing was queued), Unavailable when the node is not a member (it left; a send
  // waiting for space fails as soon as the membership says so, and never goes to a later
  // incarnation of the node), did not acknowledge its rings to this node's incarnation within
  // `wait` (see OnMembership), or a WRITE to it failed earlier, DataLoss when its head reports
  // were impossible (the message says why; the node is reported to the CM). On the scanning lane a
  // full or not yet acknowledged ring never fails or waits: the message is kept in order in a
  // backlog and sent when it can be.
  absl::Status Send(uint32_t node, uint16_t type, std::initializer_list<absl::string_view> parts,
                    absl::Duration wait = absl::ZeroDuration());

  // Queues a message of `length` payload bytes to `node` and returns where its payload goes in
  // this lane's registered staging buffer: the caller writes it there, before the next Flush() (on
  // the scanning lane: before the receiver callback returns), instead of copying it in through
  // Send. Never waits. Errors as Send, except that a ring without space now, or on the scanning
  // lane a backlog to `node`, is ResourceExhausted at once: then use Send, which waits or
  // backlogs.
  absl::StatusOr<char*> Reserve(uint32_t node, uint16_t type, uint64_t length);

  // Writes everything queued: one WRITE per destination (two if it wraps around the ring's
  // end), all posted before waiting for any. Returns the first error. A destination whose WRITEs
  // did not complete within write_timeout gives DeadlineExceeded; it stays usable, and messages
  // to it wait (as for ring space) until those WRITEs complete. A destination whose WRITE failed
  // is marked failed (later sends to it fail with Unavailable) and reported to the CM.
  absl::Status Flush();
  bool has_unflushed() const;
  // OK while messages to `node` can be sent on this lane; otherwise the error Send would give:
  // after a Flush that failed, tells which destinations failed (their messages were lost) from
  // those whose messages went out.
  absl::Status SendStatus(uint32_t node);

  // Posts this lane's WRITEs on `channel` (a thread's own endpoint and completion queue, see
  // FabricChannel) instead of the node's shared endpoint, so that the thread that holds the
  // lane reaps their completions itself; nullptr goes back to the shared endpoint. WRITEs
  // still in flight are waited for (up to write_timeout) first, so a channel may be destroyed
  // once it was replaced. Call it on the thread that holds the lane, not on the scanning lane.
  void UseChannel(FabricChannel* channel);

  // Test hook: called at the start of every round of Send's back-pressure wait.
  void SetWaitHookForTesting(std::function<void()> hook) {
    wait_hook_for_testing_ = std::move(hook);
  }

 private:
  friend class Messenger;
  struct PeerSend;
  Lane(Messenger* m, int index, bool scanning);
  // Applies membership changes to this lane's sending ends (resets those of new incarnations).
  void Sync();
  absl::Status RefreshHead(PeerSend& p);
  // Records that p has frames to flush (unflushed_).
  void NoteUnflushed(PeerSend& p);
  // The sending end to `node`, synchronised with the membership; InvalidArgument for a node
  // that is not configured, or why it cannot be sent to.
  absl::StatusOr<PeerSend*> Destination(uint32_t node);
  // Keeps a message of the scanning lane, in order, until its ring has space.
  void AddToBacklog(PeerSend& p, uint16_t type, std::initializer_list<absl::string_view> parts);
  // OK when frames can go into p's ring now (as far as the receiver's acknowledgement goes).
  absl::Status CheckWritable(PeerSend& p);
  // Handles a failed flush to p: DeadlineExceeded stalls p until its WRITEs complete (returned
  // as DeadlineExceeded); any other error fails p for good (Unavailable, returned).
  absl::Status OnWriteError(PeerSend& p, const absl::Status& s);
  void OnWriteFailed(PeerSend& p, const absl::Status& s);
  absl::Status TryAppend(PeerSend& p, uint16_t type,
                         std::initializer_list<absl::string_view> parts);
  // Posts the queued bytes of every destination into `posting` (does not wait).
  void PostUnflushed(Posting& posting);
  void RetryBacklog();

  Messenger* const m_;
  const int index_;
  const bool scanning_;
  std::vector<std::unique_ptr<PeerSend>> peers_;  // by configuration index
  std::vector<int> unflushed_;                    // indexes of peers with frames to flush
  std::unique_ptr<Posting> posting_;              // reused by every flush
  uint64_t synced_version_ = ~uint64_t{0};        // Messenger::peer_version_ applied
  std::function<void()> wait_hook_for_testing_;
};

// Exclusive use of a worker lane; returns it when destroyed. Movable.
class Messenger::LaneLease {
 public:
  LaneLease() = default;
  LaneLease(LaneLease&& o) noexcept : m_(o.m_), lane_(o.lane_) { o.lane_ = nullptr; }
  LaneLease& operator=(LaneLease&& o) noexcept;
  ~LaneLease();
  Lane* operator->() const { return lane_; }
  Lane& operator*() const { return *lane_; }
  Lane* get() const { return lane_; }

 private:
  friend class Messenger;
  LaneLease(Messenger* m, Lane* lane) : m_(m), lane_(lane) {}
  Messenger* m_ = nullptr;
  Lane* lane_ = nullptr;
};

}  // namespace farm

#endif  // FARM_MESSAGING_MESSENGER_H_
