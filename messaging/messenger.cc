#include "messaging/messenger.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/clock.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

constexpr uint64_t kHeadSlotStride = 64;  // one cache line per slot: receivers never share one

uint64_t RoundUpToPage(uint64_t n) { return (n + 4095) / 4096 * 4096; }

// The tag of the head slots of one ring (see EncodeHeadSlot): the incarnations of its receiver
// and its sender.
uint64_t HeadSlotTag(uint32_t receiver_incarnation, uint32_t sender_incarnation) {
  return (uint64_t{receiver_incarnation} << 32) | sender_incarnation;
}

// Whether a sender must wait for the receiver's acknowledgement before it writes into the ring.
// The receiver's ring may hold bytes and reading state of an earlier incarnation of the sender
// only if the receiver joined before this incarnation of the sender did (see OnMembership).
bool NeedsAck(uint64_t receiver_joined, uint64_t sender_joined) {
  return receiver_joined < sender_joined;
}

}  // namespace

struct Messenger::ReceiveRing {
  std::unique_ptr<RingReader> reader;
  int sender_index = 0;
  int lane = 0;
  uint32_t incarnation = 0;  // the sender's region id this ring is read for; 0: nobody's
  // Head refreshes (see kHeadRefreshes): when the last head report was written, and how many
  // more times it is written again while the ring stays idle.
  CoarseClock::time_point reported_at{};
  int refreshes_left = 0;
};

namespace {

// A head report whose WRITE was lost (the sender's completion says nothing about that) would
// leave a sender that filled its ring waiting forever: the receiver reports again only after
// consuming another half ring, which the sender cannot send. So once the ring has been idle for
// kHeadRefreshDelay after a report, the receiver writes its head again, up to kHeadRefreshes
// times with doubling delays; a sender that is not waiting ignores a head it already knows. The
// cost is a few 16-byte WRITEs per half ring consumed, none on a ring that stays busy.
constexpr int kHeadRefreshes = 3;
constexpr auto kHeadRefreshDelay = std::chrono::milliseconds(2);

// A head report of kClosedHead says that the receiver closed the ring as corrupt: nothing written
// into it will be read. No real head comes near it (heads count bytes).
constexpr uint64_t kClosedHead = ~uint64_t{0};

}  // namespace

// The two scan locks, and the poller task's handle on the messenger: the messenger may go away
// before the node's poller (which has no RemoveTask); the destructor clears `messenger` holding
// both locks.
//  - requests: the rings of the senders' worker lanes, and the scanning lane (replies go out on
//    it). Taken only by the poller task (and by set-up, SetReceiver and the destructor, which
//    wait for it): handlers run on the poller thread, never on an application thread.
//  - responses: the rings of the senders' scanning lanes. Taken by whoever polls (Poll: a caller
//    in Rpc::Await, Send's back-pressure loop, the poller task), so a caller completes its own
//    call even while the poller is busy in a handler.
// Each lock is one atomic flag rather than a mutex because the scanning threads try it on every
// poll round (one exchange instead of TryLock + Unlock). Holders never wait for the other lock;
// LockScans (set-up, SetReceiver, the destructor) spins with sched_yield until the scans in
// progress end.
struct Messenger::Shared {
  // Acquire on taking, release on dropping: orders the scans' accesses like a mutex.
  std::atomic<bool> busy[2] = {{false}, {false}};  // by ScanKind
  // Written with both locks held, read with either.
  std::atomic<Messenger*> messenger{nullptr};

  bool TryLock(ScanKind k) {
    std::atomic<bool>& b = busy[static_cast<int>(k)];
    return !b.load(std::memory_order_relaxed) && !b.exchange(true, std::memory_order_acquire);
  }
  void Unlock(ScanKind k) { busy[static_cast<int>(k)].store(false, std::memory_order_release); }
  // Runs one scan of kind `k` unless another thread holds its lock; returns the work done.
  int TryScan(ScanKind k) {
    if (!TryLock(k)) return 0;
    Messenger* m = messenger.load(std::memory_order_relaxed);
    const int work = m != nullptr ? m->Scan(k) : 0;
    Unlock(k);
    return work;
  }
};

void Messenger::LockScans() {
  for (ScanKind k : {ScanKind::kRequests, ScanKind::kResponses}) {
    while (!shared_->TryLock(k)) sched_yield();
  }
}

void Messenger::UnlockScans() {
  shared_->Unlock(ScanKind::kResponses);
  shared_->Unlock(ScanKind::kRequests);
}

// One OpBatch per destination, posted together and waited for together, so an error is
// attributed to its destination. Kept and reused (batches are reusable after Wait), so that a
// flush or an idle scan allocates no batch. WRITEs go to targets the caller resolved beforehand
// (a lane resolves a peer's ring once per incarnation), keeping Node::Resolve's lock and lookup
// off the per-message path.
//
// A WRITE to a node that has died may never complete (shm completes nothing for a gone peer), so
// Wait waits in short slices and abandons a destination's batch as soon as the membership no
// longer lists the incarnation (messaging area) the WRITEs were aimed at: otherwise the scanning
// thread would stall for write_timeout and, among others, never acknowledge a restarted peer.
// An abandoned batch keeps its operations' bookkeeping alive until they complete (OpBatch).
class Messenger::Posting {
 public:
  explicit Posting(Messenger* m)
      : m_(m), batches_(m->nodes_), used_(m->nodes_, false), incarnation_(m->nodes_, 0) {}
  // Posts a WRITE of `local` to `offset` bytes into `target`, which is node `index`'s messaging
  // area `incarnation` (its region id). Errors are reported by Wait.
  void Write(int index, uint32_t incarnation, const RemoteTarget& target, uint64_t offset,
             LocalBuffer local) {
    if (batches_[index] == nullptr) batches_[index] = NewBatch(index);
    used_[index] = true;
    any_used_ = true;
    incarnation_[index] = incarnation;
    batches_[index]
        ->Write(target.peer, RemoteBuffer{target.buffer.addr + offset, target.buffer.key}, local)
        .IgnoreError();
  }
  // Whether the WRITEs posted to `index` earlier (a flush that timed out) have completed: OK,
  // DeadlineExceeded while some are still in flight, or their error. Does not wait.
  absl::Status Check(int index) {
    return batches_[index] == nullptr ? absl::OkStatus()
                                      : batches_[index]->Wait(absl::ZeroDuration());
  }
  // Forgets the WRITEs to `index` (its incarnation is gone); they keep their bookkeeping alive
  // until they complete (OpBatch).
  void Abandon(int index) {
    if (batches_[index] != nullptr && batches_[index]->outstanding() > 0) {
      batches_[index] = NewBatch(index);
    }
  }
  // Posts on `channel` from now on (nullptr: the node's endpoint), once the WRITEs in flight on
  // the current one completed or write_timeout passed (then they are abandoned: a channel closed
  // afterwards frees their bookkeeping).
  void UseChannel(FabricChannel* channel) {
    for (auto& b : batches_) {
      if (b != nullptr && b->outstanding() > 0) b->Wait(m_->options_.write_timeout).IgnoreError();
      b.reset();
    }
    channel_ = channel;
  }
  // Waits for every batch used since the last Wait; calls on_error(index, status) for each that
  // failed. DeadlineExceeded (after write_timeout) leaves the batch in flight: the staging bytes
  // it reads must not be reused before Check says it completed (see Lane::CheckWritable).
  template <typename OnError>
  void Wait(OnError on_error) {
    if (!any_used_) return;  // the common case of an idle scan
    any_used_ = false;
    for (size_t i = 0; i < batches_.size(); ++i) {
      if (!used_[i]) continue;
      used_[i] = false;
      absl::Status s = WaitOne(static_cast<int>(i));
      if (!s.ok()) on_error(static_cast<int>(i), s);
    }
  }

 private:
  absl::Status WaitOne(int i) {
    // Fast path (a flush's normal case): no clock reads beyond the batch's own.
    absl::Status s = batches_[i]->Wait(kWaitSlice);
    if (!absl::IsDeadlineExceeded(s)) return s;
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + m_->options_.write_timeout - kWaitSlice;
    bool said = false;
    for (;;) {
      if (absl::Status gone = Departed(i, "WRITEs to it were in flight"); !gone.ok()) {
        batches_[i] = NewBatch(i);  // abandons the old one
        return gone;
      }
      const absl::Time now = absl::Now();
      if (now >= deadline) return s;
      if (!said && now - start > kSlowWrite) {
        // Whoever waits here (a lane's flush, the scanning thread) is held up: said once, so
        // that a stall that ends in a timeout elsewhere can be traced to it.
        said = true;
        spdlog::warn(
            "messaging: node {}: {} WRITE(s) to node {} have not completed for {} (waiting up "
            "to {})",
            m_->node_->id(), batches_[i]->outstanding(), m_->node_ids_[i],
            absl::FormatDuration(now - start + kWaitSlice),
            absl::FormatDuration(m_->options_.write_timeout));
      }
      s = batches_[i]->Wait(kWaitSlice);
      if (!absl::IsDeadlineExceeded(s)) return s;
    }
  }

  static constexpr absl::Duration kWaitSlice = absl::Milliseconds(20);
  static constexpr absl::Duration kSlowWrite = absl::Seconds(1);

  // A batch for destination `index`. A post to it that finds the provider busy gives up once the
  // membership no longer lists the incarnation it writes to, like Wait: over tcp;ofi_rxm a post
  // to a node that died was retried (connecting) for the whole 10 s post timeout, holding up the
  // scanning thread, so that the node answered nobody and was evicted for it (chaos_test).
  std::unique_ptr<OpBatch> NewBatch(int index) {
    std::unique_ptr<OpBatch> b = channel_ != nullptr
                                     ? std::make_unique<OpBatch>(channel_)
                                     : std::make_unique<OpBatch>(m_->node_->fabric());
    b->set_post_abandon(
        [this, index]() { return Departed(index, "a WRITE to it waited to be posted"); });
    // A flush needs its staging buffer back, not its bytes placed: replies and head reports say
    // that they arrived. The price: on tcp a WRITE that completed and was then lost with its
    // connection while both nodes live (a reset connection) fails nothing here; its ring waits
    // at the gap, the calls behind it time out and an undelivered commit message gets the node
    // reported to the CM (Transaction::Deliver), as a dropped WRITE does in rpc_fault_test.
    b->set_placed_completion(false);
    return b;
  }

  // OK while the membership lists the incarnation of destination `index` that the WRITEs are
  // aimed at; else Unavailable ("node N left while <what>").
  absl::Status Departed(int index, absl::string_view what) const {
    if (m_->CurrentIncarnation(index) == incarnation_[index]) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("node ", m_->node_ids_[index], " left while ", what));
  }

  Messenger* m_;
  FabricChannel* channel_ = nullptr;  // null: the node's shared endpoint
  std::vector<std::unique_ptr<OpBatch>> batches_;
  std::vector<bool> used_;
  bool any_used_ = false;  // some used_[i]
  std::vector<uint32_t> incarnation_;
};

uint32_t Messenger::CurrentIncarnation(int index) const {
  farm::ReaderMutexLock l(&peer_mu_);
  return peers_[index].region_id;
}

// The sending end of one lane to one node.
struct Messenger::Lane::PeerSend {
  int index = 0;  // the destination's configuration index
  std::unique_ptr<RingWriter> writer;
  char* staging = nullptr;          // the writer's staging buffer (ring_size bytes, registered)
  const char* head_slot = nullptr;  // in this node's area, written by the receiver
  RemoteTarget ring;                // the receiver's ring for this lane, resolved
  uint32_t incarnation = 0;         // the receiver's region id the writer is for
  uint64_t tag = 0;                 // HeadSlotTag of this ring
  bool ready = false;               // the receiver's rings are known to be ready for us
  bool listed = false;              // in the lane's unflushed_ list
  // A flush's WRITEs to it did not complete within write_timeout and may still be reading the
  // staging buffer: nothing is appended until Posting::Check says they completed.
  bool stalled = false;
  absl::Status failed = absl::UnavailableError("not synchronised with the membership yet");
  std::deque<std::pair<uint16_t, std::string>> backlog;  // scanning lane only
};

// ---------------------------------------------------------------------------------------------
// Layout

AreaRequest Messenger::Area(const config::ClusterConfig& config, const MessengerOptions& options) {
  const uint64_t n = static_cast<uint64_t>(config.node_size());
  const uint64_t l = static_cast<uint64_t>(options.lanes) + 1;
  return AreaRequest{kMessagingAreaPurpose,
                     RoundUpToPage(n * l * options.ring_size + n * l * kHeadSlotStride)};
}

uint64_t Messenger::RingOffset(int sender_index, int lane) const {
  return (static_cast<uint64_t>(sender_index) * total_lanes_ + lane) * options_.ring_size;
}

uint64_t Messenger::HeadSlotOffset(int receiver_index, int lane) const {
  return RingOffset(nodes_, 0) +
         (static_cast<uint64_t>(receiver_index) * total_lanes_ + lane) * kHeadSlotStride;
}

uint64_t Messenger::AreaSize() const { return Area(node_->config(), options_).size; }

uint64_t Messenger::membership_epoch() const {
  // Acquire: pairs with the release CAS in OnMembership (after peer and receive state).
  return applied_epoch_.load(std::memory_order_acquire);
}

uint64_t Messenger::fence_epoch() const {
  // Acquire: pairs with the release store in OnMembership.
  return fence_epoch_.load(std::memory_order_acquire);
}

int Messenger::IndexOf(uint32_t node) const {
  for (int i = 0; i < nodes_; ++i) {
    if (node_ids_[i] == node) return i;
  }
  return -1;
}

char* Messenger::ReceiveRingForTesting(uint32_t from, int lane) const {
  return area_ + RingOffset(IndexOf(from), lane);
}

// ---------------------------------------------------------------------------------------------
// Membership
//
// A node's *incarnation* is the region id of its messaging area: the CM assigns region ids from
// a counter, so a node that leaves and joins again (a new process with the same node id) has a
// new one, and every member learns it from the same membership. NodeInfo::joined_epoch says when
// an incarnation joined (1 for the nodes that formed the cluster).
//
// Leaving. When the membership no longer lists a peer, OnMembership (on the CM's thread) marks it
// Unavailable ("node N left the cluster"), bumps peer_version_ and then tells the close listener,
// which fails the RPCs waiting for it. Lanes see the new version on their next Send or Flush and
// refuse the peer; the scan zeroes the rings from it and resets their readers (nothing of the
// old incarnation is read again); head write-backs to it stop. A call started concurrently with
// the change either saw the new version (refused at Send) or was registered before the listener
// ran (failed by it); a call to the new incarnation of a restarting node that is registered in
// that window may fail spuriously with Unavailable ("node N restarted") and can be retried.
//
// Rejoining. The old incarnation's state must go on both ends before the new one's frames land:
//  - Receiving from a new incarnation S' (we are R): our ring from S may hold frames, half-placed
//    bytes and a mid-ring head of the old S. The scan zeroes it and resets its reader, then
//    writes an acknowledgement into S's area: head slot {head 0} with the tag (R, S'), which no
//    other incarnation pair decodes. S' does not write into our ring before it has decoded that
//    slot, so its bytes land only on zeroed memory read by a fresh reader (the release fence in
//    WriteHeadSlot orders the zeroing before the acknowledgement).
//  - The acknowledgement is needed only when our area may have seen an older S: when we joined
//    before S' (NeedsAck). Otherwise (we joined after S', or both formed the cluster) our area
//    was allocated zeroed after every older S had left, or no older S existed; S' writes at
//    once, and we must not zero: at Init and on a change we zero only rings whose sender waits
//    for our acknowledgement, or whose sender left (any later incarnation of it will wait).
//  - Sending to a new incarnation R' (we are S): the lane resets its writer (tail, head and
//    sequence numbers from zero) on its next Send or Flush and drops what was queued for R.
//    R' joined after us, so its area is fresh and we write at once; head slots in our area left
//    by the old R carry its tag and no longer decode.
// Safety rests on fail-stop: a node the CM has dropped writes no more (its process exited, or its
// messenger was destroyed, which waits for its WRITEs, before the node left). A late WRITE of a
// dropped incarnation could still only break a ring's framing (closing it as corrupt), never be
// delivered as a message of the new one: every ring's checksums are seeded with its tag
// (RingTag of both incarnations and the lane), so even a first frame (sequence number 1 at offset
// 0, what a fresh ring expects) of another incarnation pair never verifies.

void Messenger::OnMembership(const control::Membership& m) {
  std::vector<std::pair<int, absl::Status>> receive;    // index, new receive status
  std::vector<std::pair<uint32_t, absl::Status>> down;  // node, why (for the close listener)
  {
    farm::MutexLock l(&peer_mu_);
    if (m.epoch() <= epoch_) return;
    epoch_ = m.epoch();
    for (int i = 0; i < nodes_; ++i) {
      PeerArea& p = peers_[i];
      PeerArea next = DescribePeer(m, node_ids_[i], p.region_id != 0);
      if (next.region_id == 0) {
        receive.emplace_back(i, next.status);
        if (p.region_id != 0) down.emplace_back(next.node_id, next.status);
      } else if (next.region_id != p.region_id) {
        receive.emplace_back(i, absl::OkStatus());
        if (p.region_id != 0) {
          down.emplace_back(next.node_id,
                            absl::UnavailableError(
                                absl::StrCat("node ", next.node_id, " restarted (membership epoch ",
                                             m.epoch(), "); its previous process is gone")));
        }
      }
      p = std::move(next);
    }
    // Release: pairs with the acquire loads in Lane::Sync and SyncReceiveRings.
    peer_version_.fetch_add(1, std::memory_order_release);
  }
  if (!receive.empty()) {
    farm::MutexLock l(&status_mu_);
    for (auto& [i, s] : receive) receive_status_[i] = std::move(s);
    bool any = false;
    for (const absl::Status& s : receive_status_) any |= !s.ok();
    // Release: pairs with the acquire load in ReceiveStatus.
    any_down_.store(any, std::memory_order_release);
  }
  // A peer left or restarted: requests sent in an earlier configuration are refused from now on
  // (Rpc::OnRequest). So are those sent before the latest membership that added backups to
  // regions holding data (control.Membership.fence_epoch). Raised to the maximum (Create's call
  // and the listener may overlap).
  const uint64_t to = !down.empty() ? m.epoch() : m.fence_epoch();
  uint64_t fence = fence_epoch_.load(std::memory_order_relaxed);
  while (fence < to && !fence_epoch_.compare_exchange_weak(fence, to, std::memory_order_release)) {
  }
  // Published before the close listener runs: whoever sees a call fail because of epoch E also
  // sees membership_epoch() >= E.
  uint64_t seen = applied_epoch_.load(std::memory_order_relaxed);
  while (seen < m.epoch() &&
         !applied_epoch_.compare_exchange_weak(seen, m.epoch(), std::memory_order_release)) {
  }
  for (const auto& [node, why] : down) {
    spdlog::info("messaging: node {}: {}", node_->id(), std::string(why.message()));
  }
  {
    farm::ReaderMutexLock l(&listener_mu_);
    if (close_listener_) {
      for (const auto& [node, why] : down) close_listener_(node, why);
    }
  }
}

Messenger::PeerArea Messenger::DescribePeer(const control::Membership& m, uint32_t node_id,
                                            bool was_member) const {
  PeerArea p;
  p.node_id = node_id;
  const control::NodeInfo* info = nullptr;
  for (const control::NodeInfo& n : m.nodes()) {
    if (n.node_id() == node_id) info = &n;
  }
  const control::RegionInfo* area = nullptr;
  for (const control::RegionInfo& r : m.regions()) {
    if (r.node_id() == node_id && r.purpose() == kMessagingAreaPurpose) area = &r;
  }
  if (absl::Status evicted = node_->evicted(); info == nullptr && !evicted.ok()) {
    p.status = absl::UnavailableError(
        absl::StrCat("cannot talk to node ", node_id, ": ", evicted.message()));
  } else if (info == nullptr) {
    auto why = m.departed().find(node_id);
    p.status = absl::UnavailableError(
        absl::StrCat("node ", node_id, was_member ? " left the cluster" : " is not a member",
                     " (membership epoch ", m.epoch(), ")",
                     why != m.departed().end() ? absl::StrCat(": ", why->second) : ""));
  } else if (area == nullptr) {
    p.status = absl::UnavailableError(absl::StrCat(
        "node ", node_id, " has no messaging area (it was started without messaging)"));
  } else if (area->size() != AreaSize()) {
    p.status = absl::FailedPreconditionError(absl::StrCat(
        "node ", node_id, "'s messaging area has ", area->size(), " bytes, this node's ",
        AreaSize(), ": start every node with the same messaging lanes and ring size"));
  } else {
    p.region_id = area->region_id();
    p.joined_epoch = info->joined_epoch();
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// Set-up

Messenger::Messenger(Node* node, MessengerOptions options)
    : node_(node), options_(std::move(options)), shared_(std::make_shared<Shared>()) {}

absl::StatusOr<std::unique_ptr<Messenger>> Messenger::Create(Node* node, MessengerOptions options) {
  if (options.lanes < 1 || options.lanes > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("messaging lanes must be between 1 and 64, not ", options.lanes));
  }
  if (absl::Status s = ValidateRingSize(options.ring_size); !s.ok()) return s;
  if (options.messages_per_scan < 1) {
    return absl::InvalidArgumentError("messages_per_scan must be at least 1");
  }
  const absl::Duration lease = absl::Milliseconds(node->config().lease_ms());
  if (options.incomplete_timeout <= lease || options.write_timeout <= lease) {
    spdlog::warn(
        "messaging: incomplete_timeout {} / write_timeout {} are not above the lease {}: a "
        "paused peer may be reported to the configuration manager (and evicted) before its lease "
        "runs out",
        absl::FormatDuration(options.incomplete_timeout),
        absl::FormatDuration(options.write_timeout), absl::FormatDuration(lease));
  }
  std::unique_ptr<Messenger> m(new Messenger(node, std::move(options)));
  if (absl::Status s = m->Init(); !s.ok()) return s;
  return m;
}

absl::Status Messenger::Init() {
  if (absl::Status evicted = node_->evicted(); !evicted.ok()) return evicted;
  const config::ClusterConfig& cfg = node_->config();
  nodes_ = cfg.node_size();
  total_lanes_ = options_.lanes + 1;
  for (const config::NodeConfig& n : cfg.node()) node_ids_.push_back(n.id());
  self_index_ = IndexOf(node_->id());
  if (self_index_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", node_->id(), " is not listed in the cluster configuration"));
  }
  area_ = node_->local_area(kMessagingAreaPurpose);
  const std::vector<control::RegionInfo> own = node_->RegionsOf(node_->id(), kMessagingAreaPurpose);
  if (area_ == nullptr || own.empty() || own[0].size() != AreaSize()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", node_->id(), " has no messaging area of ", AreaSize(),
        " bytes: add Messenger::Area(config, options) to NodeOptions::areas before Node::Start"));
  }
  {
    farm::MutexLock l(&status_mu_);
    receive_status_.assign(nodes_, absl::OkStatus());
  }
  {
    farm::MutexLock l(&peer_mu_);
    peers_.resize(nodes_);
  }
  // Listen first, then take the current membership: no change falls in between (OnMembership
  // ignores epochs it has seen).
  listener_id_ =
      node_->AddMembershipListener([this](const control::Membership& m) { OnMembership(m); });
  OnMembership(node_->membership());
  {
    farm::MutexLock l(&peer_mu_);
    for (const PeerArea& p : peers_) {
      if (absl::IsFailedPrecondition(p.status)) return p.status;
    }
    self_incarnation_ = peers_[self_index_].region_id;
    self_joined_ = peers_[self_index_].joined_epoch;
  }

  // Frame staging buffers: lane-major, then destination; then 16-byte head write-back staging
  // per ring.
  const uint64_t frames = static_cast<uint64_t>(total_lanes_) * nodes_ * options_.ring_size;
  const uint64_t heads = static_cast<uint64_t>(total_lanes_) * nodes_ * kHeadSlotBytes;
  absl::StatusOr<std::unique_ptr<Region>> mem =
      Region::Allocate(RoundUpToPage(frames + heads), node_->config().lock_memory());
  if (!mem.ok()) return mem.status();
  send_memory_ = std::move(*mem);
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
      node_->RegisterBuffer(send_memory_->data(), send_memory_->size());
  if (!mr.ok()) return mr.status();
  send_mr_ = std::move(*mr);

  for (int l = 0; l < total_lanes_; ++l) {
    lanes_.push_back(std::unique_ptr<Lane>(new Lane(this, l, l == options_.lanes)));
  }
  {
    farm::MutexLock l(&lane_mu_);
    for (int i = options_.lanes - 1; i >= 0; --i) free_lanes_.push_back(i);
  }
  self_published_ = std::make_unique<std::atomic<uint64_t>[]>(total_lanes_);
  for (int l = 0; l < total_lanes_; ++l) self_published_[l].store(0, std::memory_order_relaxed);
  response_posting_ = std::make_unique<Posting>(this);
  {
    LockScans();
    RingReaderOptions ro;
    ro.incomplete_timeout = options_.incomplete_timeout;
    for (int s = 0; s < nodes_; ++s) {
      for (int l = 0; l < total_lanes_; ++l) {
        ReceiveRing r;
        r.reader = std::make_unique<RingReader>(area_ + RingOffset(s, l), options_.ring_size, ro);
        r.sender_index = s;
        r.lane = l;
        RingsOf(KindOfLane(l)).push_back(std::move(r));
      }
    }
    closed_by_receiver_ = std::make_unique<std::atomic<bool>[]>(nodes_ * total_lanes_);
    for (int k = 0; k < nodes_ * total_lanes_; ++k) {
      closed_by_receiver_[k].store(false, std::memory_order_relaxed);
    }
    for (auto& notices : closed_notices_) notices = std::make_unique<Posting>(this);
    // Acknowledge our rings to the current members before anyone scans.
    for (ScanKind k : {ScanKind::kRequests, ScanKind::kResponses}) {
      Posting& posting = PostingOf(k);
      SyncReceiveRings(k, posting);
      posting.Wait([&](int i, const absl::Status& s) {
        spdlog::warn("messaging: node {} could not acknowledge its rings to node {}: {}",
                     node_->id(), node_ids_[i], std::string(s.message()));
      });
    }
    shared_->messenger.store(this, std::memory_order_relaxed);
    UnlockScans();
  }
  // The poller already drives the fabric's progress; the task only scans. It is the only
  // thread that scans requests (see Shared).
  node_->poller()->AddTask([shared = shared_]() -> int {
    return shared->TryScan(ScanKind::kRequests) + shared->TryScan(ScanKind::kResponses);
  });
  return absl::OkStatus();
}

Messenger::~Messenger() {
  if (listener_id_ >= 0) node_->RemoveMembershipListener(listener_id_);
  LockScans();  // waits for the scans in progress
  shared_->messenger.store(nullptr, std::memory_order_relaxed);
  UnlockScans();
  lanes_.clear();
  for (auto& notices : closed_notices_) notices.reset();  // abandons notices still in flight
  response_posting_.reset();  // like the lanes' postings: before the memory its WRITEs read
  send_mr_.reset();
}

void Messenger::SetReceiver(Receiver receiver) {
  LockScans();
  receiver_ = std::move(receiver);
  UnlockScans();
}

void Messenger::SetCloseListener(CloseListener listener) {
  farm::MutexLock l(&listener_mu_);
  close_listener_ = std::move(listener);
}

absl::Status Messenger::ReceiveStatus(uint32_t node) const {
  const int i = IndexOf(node);
  if (i < 0) return absl::InvalidArgumentError(absl::StrCat("node ", node, " is not configured"));
  // Acquire: pairs with the release stores in OnRingClosed and OnMembership (a fast path for the
  // common case).
  if (!any_down_.load(std::memory_order_acquire)) return absl::OkStatus();
  farm::MutexLock l(&status_mu_);
  return receive_status_[i];
}

// ---------------------------------------------------------------------------------------------
// Lanes

absl::StatusOr<Messenger::LaneLease> Messenger::AcquireLane(absl::Duration wait) {
  farm::MutexLock l(&lane_mu_);
  auto available = [this]() ABSL_SHARED_LOCKS_REQUIRED(lane_mu_) { return !free_lanes_.empty(); };
  if (!lane_mu_.AwaitWithTimeout(available, wait)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", options_.lanes, " messaging lanes stayed leased for ", absl::FormatDuration(wait),
        "; raise MessengerOptions::lanes or return leases sooner"));
  }
  const int index = free_lanes_.back();
  free_lanes_.pop_back();
  return LaneLease(this, lanes_[index].get());
}

void Messenger::ReleaseLane(int index) {
  farm::MutexLock l(&lane_mu_);
  free_lanes_.push_back(index);
}

Messenger::LaneLease& Messenger::LaneLease::operator=(LaneLease&& o) noexcept {
  if (this != &o) {
    if (lane_ != nullptr) m_->ReleaseLane(lane_->index());
    m_ = o.m_;
    lane_ = o.lane_;
    o.lane_ = nullptr;
  }
  return *this;
}

Messenger::LaneLease::~LaneLease() {
  if (lane_ != nullptr) m_->ReleaseLane(lane_->index());
}

Messenger::Lane::Lane(Messenger* m, int index, bool scanning)
    : m_(m), index_(index), scanning_(scanning), posting_(std::make_unique<Posting>(m)) {
  const uint64_t ring = m->options_.ring_size;
  char* base = m->send_memory_->data();
  for (int i = 0; i < m->nodes_; ++i) {
    auto p = std::make_unique<PeerSend>();
    p->index = i;
    p->staging = base + (static_cast<uint64_t>(index) * m->nodes_ + i) * ring;
    p->writer = std::make_unique<RingWriter>(p->staging, ring);
    p->head_slot = m->area_ + m->HeadSlotOffset(i, index);
    peers_.push_back(std::move(p));
  }
}

void Messenger::Lane::UseChannel(FabricChannel* channel) { posting_->UseChannel(channel); }

void Messenger::Lane::Sync() {
  // Acquire: pairs with the release increment in OnMembership.
  if (m_->peer_version_.load(std::memory_order_acquire) == synced_version_) return;
  farm::ReaderMutexLock l(&m_->peer_mu_);
  synced_version_ = m_->peer_version_.load(std::memory_order_relaxed);
  for (int i = 0; i < m_->nodes_; ++i) {
    const PeerArea& a = m_->peers_[i];
    PeerSend& p = *peers_[i];
    if (a.region_id != p.incarnation) {
      // A new incarnation (or none): start its ring from zero; what was queued for the old one
      // is dropped (the RPC layer failed those calls).
      p.writer = std::make_unique<RingWriter>(p.staging, m_->options_.ring_size,
                                              RingTag(m_->self_incarnation_, a.region_id, index_));
      p.backlog.clear();
      if (p.stalled) posting_->Abandon(i);
      p.stalled = false;
      p.incarnation = a.region_id;
      p.tag = HeadSlotTag(a.region_id, m_->self_incarnation_);
      p.ready = !NeedsAck(a.joined_epoch, m_->self_joined_);
      p.failed = absl::OkStatus();
      if (a.region_id != 0) {
        // Resolved once per incarnation: every flush WRITEs inside this ring.
        absl::StatusOr<RemoteTarget> t =
            m_->node_->Resolve(GlobalAddress{a.region_id, m_->RingOffset(m_->self_index_, index_)},
                               m_->options_.ring_size);
        if (t.ok()) {
          p.ring = *t;
        } else {
          p.failed =
              absl::UnavailableError(absl::StrCat("the message ring of node ", m_->node_ids_[i],
                                                  " is not reachable: ", t.status().message()));
        }
      }
    }
    if (!a.status.ok()) p.failed = a.status;
  }
}

Messenger::Lane::~Lane() = default;

bool Messenger::Lane::has_unflushed() const { return !unflushed_.empty(); }

absl::Status Messenger::Lane::SendStatus(uint32_t node) { return Destination(node).status(); }

void Messenger::Lane::NoteUnflushed(PeerSend& p) {
  if (p.listed) return;
  p.listed = true;
  unflushed_.push_back(p.index);
}

absl::Status Messenger::Lane::RefreshHead(PeerSend& p) {
  uint64_t head;
  if (!DecodeHeadSlot(p.head_slot, p.tag, &head)) return absl::OkStatus();
  if (head == kClosedHead) {
    if (p.failed.ok() || !absl::IsDataLoss(p.failed)) {
      p.failed = absl::DataLossError(absl::StrCat(
          "node ", m_->node_ids_[p.index], " closed its ring from node ", m_->node_->id(),
          " on lane ", index_, " as corrupt: messages sent on that lane are no longer read"));
    }
    return p.failed;
  }
  p.ready = true;  // any slot with this ring's tag comes from the receiver's current rings
  if (head == p.writer->head()) return absl::OkStatus();
  absl::Status s = p.writer->UpdateHead(head);
  if (!s.ok() && p.failed.ok()) {
    p.failed = s;
    spdlog::error("messaging: node {} stops sending on lane {}: {}", m_->node_->id(), index_,
                  std::string(s.message()));
    m_->GiveUpOn(p.index, s);
  }
  return s;
}

absl::Status Messenger::Lane::CheckWritable(PeerSend& p) {
  if (p.stalled) {
    absl::Status s = posting_->Check(p.index);
    if (absl::IsDeadlineExceeded(s)) {
      return absl::ResourceExhaustedError("an earlier WRITE to it is still in flight");
    }
    p.stalled = false;
    if (!s.ok()) {
      OnWriteFailed(p, s);
      return p.failed;
    }
  }
  if (absl::Status s = RefreshHead(p); !s.ok()) return s;
  if (!p.ready) {
    return absl::ResourceExhaustedError("the receiver has not yet acknowledged its rings");
  }
  return absl::OkStatus();
}

absl::Status Messenger::Lane::TryAppend(PeerSend& p, uint16_t type,
                                        std::initializer_list<absl::string_view> parts) {
  if (absl::Status s = CheckWritable(p); !s.ok()) return s;
  absl::Status s = p.writer->Append(type, parts);
  if (s.ok()) NoteUnflushed(p);
  return s;
}

absl::StatusOr<Messenger::Lane::PeerSend*> Messenger::Lane::Destination(uint32_t node) {
  const int i = m_->IndexOf(node);
  if (i < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", node, " is not in the cluster configuration"));
  }
  Sync();
  PeerSend* p = peers_[i].get();
  if (!p->failed.ok()) return p->failed;
  return p;
}

void Messenger::Lane::AddToBacklog(PeerSend& p, uint16_t type,
                                   std::initializer_list<absl::string_view> parts) {
  std::string joined;
  for (absl::string_view part : parts) joined.append(part.data(), part.size());
  p.backlog.emplace_back(type, std::move(joined));
}

absl::StatusOr<char*> Messenger::Lane::Reserve(uint32_t node, uint16_t type, uint64_t length) {
  absl::StatusOr<PeerSend*> dest = Destination(node);
  if (!dest.ok()) return dest.status();
  PeerSend& p = **dest;
  if (!p.backlog.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("messages to node ", node, " are waiting for ring space"));
  }
  if (absl::Status s = CheckWritable(p); !s.ok()) return s;
  absl::StatusOr<char*> at = p.writer->Reserve(type, length);
  if (at.ok()) NoteUnflushed(p);
  return at;
}

absl::Status Messenger::Lane::Send(uint32_t node, uint16_t type,
                                   std::initializer_list<absl::string_view> parts,
                                   absl::Duration wait) {
  absl::StatusOr<PeerSend*> dest = Destination(node);
  if (!dest.ok()) return dest.status();
  PeerSend& p = **dest;
  if (scanning_ && !p.backlog.empty()) {
    AddToBacklog(p, type, parts);
    return absl::OkStatus();
  }
  absl::Status s = TryAppend(p, type, parts);
  if (!absl::IsResourceExhausted(s)) return s;
  if (scanning_) {
    // The scanning thread must never wait for space: it is the one that frees space for others.
    AddToBacklog(p, type, parts);
    return absl::OkStatus();
  }
  // Back-pressure: the receiver can only consume what was flushed; then wait for its head.
  // Every round re-checks the destination: a node that left fails the send at once, and the
  // message never goes to another incarnation than the one the send started with (its call may
  // already have been failed when that one left).
  const uint32_t incarnation = p.incarnation;
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {
    if (wait_hook_for_testing_) wait_hook_for_testing_();
    if (p.writer->has_unflushed()) {
      absl::Status f = Flush();  // syncs with the membership
      if (!f.ok() && !absl::IsDeadlineExceeded(f)) return f;
    } else {
      Sync();
    }
    if (p.incarnation != incarnation) {
      return absl::UnavailableError(absl::StrCat(
          "node ", node, " left or restarted while this message waited for ring space"));
    }
    if (!p.failed.ok()) return p.failed;
    s = TryAppend(p, type, parts);
    if (!absl::IsResourceExhausted(s) || absl::Now() >= deadline) break;
    // The head write-back lands in our memory only with our own progress on tcp and shm.
    if (m_->Poll() == 0) sched_yield();
  }
  if (absl::IsResourceExhausted(s) && !p.ready) {
    return absl::UnavailableError(absl::StrCat(
        "node ", node, " did not acknowledge its message rings to this node within ",
        absl::FormatDuration(wait),
        " (it restarted or joined before this node and has not yet seen this node join, or has "
        "not started messaging)"));
  }
  if (absl::IsResourceExhausted(s)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("messages to node ", node, " on lane ", index_, " are not being consumed (",
                     s.message(), " after waiting ", absl::FormatDuration(wait), "); retry later"));
  }
  return s;
}

void Messenger::Lane::RetryBacklog() {
  for (auto& p : peers_) {
    while (!p->backlog.empty() && p->failed.ok()) {
      const auto& [type, payload] = p->backlog.front();
      if (!TryAppend(*p, type, {payload}).ok()) break;
      p->backlog.pop_front();
    }
  }
}

void Messenger::Lane::PostUnflushed(Posting& posting) {
  for (int i : unflushed_) {
    PeerSend& p = *peers_[i];
    p.listed = false;
    if (!p.writer->has_unflushed() || !p.failed.ok()) continue;
    const RingWriter::Ranges ranges = p.writer->Unflushed();
    if (i == m_->self_index_) {
      // To ourselves: a plain copy into our own ring, then the release store that publishes it
      // (see self_published_).
      char* ring = m_->area_ + m_->RingOffset(i, index_);
      for (const ByteRange& b : ranges) std::memcpy(ring + b.offset, p.staging + b.source, b.size);
      // Release: pairs with the acquire load in Scan, which reads these frames only after it.
      m_->self_published_[index_].store(p.writer->tail(), std::memory_order_release);
    } else {
      for (const ByteRange& b : ranges) {
        posting.Write(i, p.incarnation, p.ring, b.offset,
                      LocalBuffer{m_->send_mr_.get(), p.staging + b.source, b.size});
      }
    }
    p.writer->MarkFlushed();
  }
  unflushed_.clear();
}

absl::Status Messenger::Lane::Flush() {
  Sync();
  PostUnflushed(*posting_);
  absl::Status first;
  posting_->Wait([&](int i, const absl::Status& s) {
    absl::Status e = OnWriteError(*peers_[i], s);
    if (first.ok()) first = e;
  });
  return first;
}

absl::Status Messenger::Lane::OnWriteError(PeerSend& p, const absl::Status& s) {
  if (absl::IsDeadlineExceeded(s)) {
    // The peer is still a member (Posting gives up early on one that left), e.g. paused: its
    // WRITEs may still complete. Only this flush fails; the lane waits for them (stalled) and
    // then carries on. A pause longer than the lease ends with the peer's eviction instead.
    p.stalled = true;
    return absl::DeadlineExceededError(
        absl::StrCat("WRITE of messages to node ", m_->node_ids_[p.index], " on lane ", index_,
                     " did not complete within ", absl::FormatDuration(m_->options_.write_timeout),
                     " (the node is still a member; later messages wait until it completes)"));
  }
  OnWriteFailed(p, s);
  return p.failed;
}

void Messenger::Lane::OnWriteFailed(PeerSend& p, const absl::Status& s) {
  if (!p.failed.ok()) return;
  p.failed =
      absl::UnavailableError(absl::StrCat("WRITE of messages to node ", m_->node_ids_[p.index],
                                          " on lane ", index_, " failed: ", s.message()));
  // Bytes of this ring were lost: it cannot go on. If the node is still this incarnation's
  // member, have the CM evict it rather than cut it off here alone.
  if (m_->CurrentIncarnation(p.index) == p.incarnation) m_->GiveUpOn(p.index, p.failed);
}

// ---------------------------------------------------------------------------------------------
// Receiving

int Messenger::Poll() {
  return node_->fabric()->Progress() + shared_->TryScan(ScanKind::kResponses);
}

std::vector<Messenger::ReceiveRing>& Messenger::RingsOf(ScanKind k) {
  return k == ScanKind::kRequests ? request_rings_ : response_rings_;
}

Messenger::Posting& Messenger::PostingOf(ScanKind k) {
  return k == ScanKind::kRequests ? *lanes_.back()->posting_ : *response_posting_;
}

void Messenger::ReportHead(ReceiveRing& r, Posting& posting) {
  WriteHeadSlot(r, r.reader->head(), posting);
  r.reader->MarkReported();
  r.reported_at = CoarseClock::now();
  r.refreshes_left = kHeadRefreshes;
}

void Messenger::MaybeRefreshHead(ReceiveRing& r, Posting& posting) {
  if (r.refreshes_left == 0) return;
  const CoarseClock::time_point now = CoarseClock::now();
  if (now - r.reported_at < kHeadRefreshDelay * (1 << (kHeadRefreshes - r.refreshes_left))) return;
  WriteHeadSlot(r, r.reader->head(), posting);
  r.reader->MarkReported();
  r.reported_at = now;
  --r.refreshes_left;
}

void Messenger::WriteHeadSlot(const ReceiveRing& r, uint64_t head, Posting& posting) {
  if (r.incarnation == 0) return;                             // its sender is gone
  const uint64_t slot = HeadSlotOffset(self_index_, r.lane);  // in the sender's area
  const uint64_t tag = HeadSlotTag(self_incarnation_, r.incarnation);
  // The consumed (or reset) frames were zeroed before this point. Release: those stores are
  // ordered before the staging store below and so before the WRITE that tells the sender it may
  // (re)use the space; the sender's next frames there land after them.
  std::atomic_thread_fence(std::memory_order_release);
  if (r.sender_index == self_index_) {
    uint64_t w[2];
    EncodeHeadSlot(head, tag, reinterpret_cast<char*>(w));
    // Release: pairs with the acquire loads in DecodeHeadSlot on the lane's thread, which then
    // writes into the space we zeroed (ThreadSanitizer sees this order; it ignores the fence).
    uint64_t* const at = reinterpret_cast<uint64_t*>(area_ + slot);
    __atomic_store_n(&at[0], w[0], __ATOMIC_RELEASE);
    __atomic_store_n(&at[1], w[1], __ATOMIC_RELEASE);
    return;
  }
  char* staging = send_memory_->data() +
                  static_cast<uint64_t>(total_lanes_) * nodes_ * options_.ring_size +
                  (static_cast<uint64_t>(r.sender_index) * total_lanes_ + r.lane) * kHeadSlotBytes;
  EncodeHeadSlot(head, tag, staging);
  absl::StatusOr<RemoteTarget> t =
      node_->Resolve(GlobalAddress{r.incarnation, slot}, kHeadSlotBytes);
  if (!t.ok()) {
    // Its area left the membership just now: the scan resets the ring once it sees that.
    spdlog::debug("messaging: node {} cannot report its head to node {}: {}", node_->id(),
                  node_ids_[r.sender_index], std::string(t.status().message()));
    return;
  }
  posting.Write(r.sender_index, r.incarnation, *t, 0,
                LocalBuffer{send_mr_.get(), staging, kHeadSlotBytes});
}

void Messenger::SyncReceiveRings(ScanKind kind, Posting& posting) {
  uint64_t& synced = rings_version_[static_cast<int>(kind)];
  // Acquire: pairs with the release increment in OnMembership.
  if (peer_version_.load(std::memory_order_acquire) == synced) return;
  std::vector<PeerArea> peers;
  {
    farm::ReaderMutexLock l(&peer_mu_);
    peers = peers_;
    synced = peer_version_.load(std::memory_order_relaxed);
  }
  RingReaderOptions ro;
  ro.incomplete_timeout = options_.incomplete_timeout;
  for (ReceiveRing& r : RingsOf(kind)) {
    const PeerArea& a = peers[r.sender_index];
    if (a.region_id == r.incarnation) continue;
    // See "Rejoining" above: zero only where no sender may be writing yet.
    if (a.region_id == 0 || NeedsAck(self_joined_, a.joined_epoch)) {
      std::memset(area_ + RingOffset(r.sender_index, r.lane), 0, options_.ring_size);
    }
    // Frames are checked against this pair of incarnations and this lane: a late WRITE of an
    // earlier incarnation of either end never verifies (RingTag).
    ro.tag = RingTag(a.region_id, self_incarnation_, r.lane);
    r.reader = std::make_unique<RingReader>(area_ + RingOffset(r.sender_index, r.lane),
                                            options_.ring_size, ro);
    r.incarnation = a.region_id;
    WriteHeadSlot(r, 0, posting);  // the acknowledgement
    r.refreshes_left = 0;
    // The same shape: what this node sends to that incarnation is read afresh.
    closed_by_receiver_[r.sender_index * total_lanes_ + r.lane].store(false,
                                                                      std::memory_order_relaxed);
  }
}

void Messenger::CheckClosedByReceivers(ScanKind kind) {
  const CoarseClock::time_point now = CoarseClock::now();
  CoarseClock::time_point& next = next_closed_check_[static_cast<int>(kind)];
  if (now < next) return;
  next = now + std::chrono::milliseconds(1);
  // The ring from sender index i, lane l and the head slot of our ring to receiver i on lane l
  // share k = i * L + l, the lane's scan kind, and that scan's view of node i's incarnation. Each
  // entry of closed_by_receiver_ is touched by the scan of its lane's kind only (relaxed).
  for (const ReceiveRing& r : RingsOf(kind)) {
    const int k = r.sender_index * total_lanes_ + r.lane;
    if (closed_by_receiver_[k].load(std::memory_order_relaxed) || r.incarnation == 0) continue;
    uint64_t head;
    if (!DecodeHeadSlot(area_ + HeadSlotOffset(r.sender_index, r.lane),
                        HeadSlotTag(r.incarnation, self_incarnation_), &head) ||
        head != kClosedHead) {
      continue;
    }
    closed_by_receiver_[k].store(true, std::memory_order_relaxed);
    const uint32_t to = node_ids_[r.sender_index];
    const absl::Status why = absl::DataLossError(
        absl::StrCat("node ", to, " closed its ring from node ", node_->id(), " on lane ", r.lane,
                     " as corrupt: messages sent on that lane are no longer read"));
    spdlog::error("messaging: node {}: {}; calls waiting for node {} fail", node_->id(),
                  std::string(why.message()), to);
    farm::ReaderMutexLock l(&listener_mu_);
    if (close_listener_) close_listener_(to, why);
  }
}

void Messenger::OnRingClosed(ReceiveRing& r) {
  const uint32_t from = node_ids_[r.sender_index];
  const absl::Status why = r.reader->status();
  spdlog::error(
      "messaging: node {} closes lane {} from node {}: {}; messages from node {} on "
      "that lane are no longer read and calls waiting for node {} fail",
      node_->id(), r.lane, from, std::string(why.message()), from, from);
  const absl::Status corrupt = absl::DataLossError(absl::StrCat(
      "messages from node ", from, " (lane ", r.lane, ") are corrupt: ", why.message()));
  {
    farm::MutexLock l(&status_mu_);
    if (receive_status_[r.sender_index].ok()) receive_status_[r.sender_index] = corrupt;
    any_down_.store(true, std::memory_order_release);
  }
  // Tell the sender, whose requests on this lane would otherwise wait for their deadlines. Not
  // through `posting`, which the scan waits for: the sender may be the node that stopped working.
  // The ring's head staging is written again only for a new incarnation of the sender (an
  // acknowledgement), after which a notice still in flight to the old one does not matter.
  WriteHeadSlot(r, kClosedHead, *closed_notices_[static_cast<int>(KindOfLane(r.lane))]);
  r.refreshes_left = 0;
  {
    farm::ReaderMutexLock l(&listener_mu_);
    if (close_listener_) close_listener_(from, corrupt);
  }
  // And ask the CM to evict it, so that every node agrees (see GiveUpOn).
  GiveUpOn(r.sender_index, why);
}

void Messenger::GiveUpOn(int index, const absl::Status& why) {
  if (index == self_index_) return;  // our own ring: nobody to report
  node_->ReportSuspect(node_ids_[index],
                       absl::StrCat("messaging cannot continue with it: ", why.message()));
}

int Messenger::Scan(ScanKind kind) {
  const bool requests = kind == ScanKind::kRequests;
  Lane& scanning = *lanes_.back();  // ours only when scanning requests
  Posting& posting = PostingOf(kind);
  SyncReceiveRings(kind, posting);
  if (!receiver_) {
    // Acknowledgements: one that fails (its sender left) is not resent; a sender still waiting
    // for it reports Unavailable after its wait.
    posting.Wait([](int, const absl::Status&) {});
    return 0;
  }
  if (requests) scanning.Sync();
  CheckClosedByReceivers(kind);
  Lane* const reply = requests ? &scanning : nullptr;
  int work = 0;
  for (ReceiveRing& r : RingsOf(kind)) {
    if (r.reader->closed()) continue;
    const bool self = r.sender_index == self_index_;
    for (int k = 0; k < options_.messages_per_scan; ++k) {
      // Our own ring: read only frames whose copy was published (see self_published_).
      // Acquire: pairs with the release store in Lane::PostUnflushed.
      if (self && r.reader->head() >= self_published_[r.lane].load(std::memory_order_acquire)) {
        break;
      }
      RingMessage rm;
      const RingReader::State st = r.reader->Peek(&rm);
      if (st == RingReader::kMessage) {
        receiver_(Message{node_ids_[r.sender_index], r.lane, rm.type, rm.payload}, reply);
        r.reader->Consume();
        ++work;
        continue;
      }
      if (st == RingReader::kClosed) OnRingClosed(r);
      if (st == RingReader::kIncomplete) ++work;  // bytes are landing: keep polling hard
      if (st == RingReader::kIdle && k == 0) MaybeRefreshHead(r, posting);
      break;
    }
    if (r.reader->ShouldReportHead()) ReportHead(r, posting);
  }
  if (requests) {
    scanning.RetryBacklog();
    scanning.PostUnflushed(posting);
  }
  posting.Wait([&](int i, const absl::Status& s) {
    if (!requests) {
      // Head reports only: the sender's next report (or its departure) settles it.
      spdlog::debug("messaging: node {}: head report to node {} failed: {}", node_->id(),
                    node_ids_[i], std::string(s.message()));
      return;
    }
    Lane::PeerSend& p = *scanning.peers_[i];
    if (!p.failed.ok()) return;
    const absl::Status e = scanning.OnWriteError(p, s);
    spdlog::warn("messaging: node {} (scanning lane): {}", node_->id(), std::string(e.message()));
  });
  return work;
}

}  // namespace farm
