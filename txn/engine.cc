#include "txn/engine.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "messaging/ring.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"

namespace farm {
namespace txn {

absl::StatusOr<GlobalAddress> Engine::CreateObjectArray(uint64_t size, uint64_t count) {
  absl::StatusOr<GlobalAddress> first = allocator_->ReserveArray(size, count);
  if (!first.ok()) return first.status();
  uint64_t slot = 0;
  absl::StatusOr<char*> base = allocator_->SlotOf(*first, &slot);
  if (!base.ok()) return base.status();
  const std::string zeros(size, '\0');
  for (uint64_t i = 0; i < count; ++i) {
    char* object = *base + i * slot;
    uint64_t seen = 0;
    // Fresh memory: lock word 0 (version 0, free); nobody else knows these slots yet.
    if (!TryLock(object, 0, &seen)) {
      return absl::InternalError("a freshly carved slot is not empty");
    }
    InstallObject(object, 1, zeros.data(), size);
  }
  // The backups install the array too (and learn its blocks for the allocator, if they are
  // promoted). Sent by the engine's thread, not waited for here: a node creates its arrays
  // before it serves (the KV store's shards), and so may its backups, which answer only once
  // they serve. A transaction's COMMIT-BACKUP for an array object may reach a backup before the
  // array does; the newest version wins either way.
  {
    std::lock_guard<std::mutex> l(mu_);
    // Mutant: the backups never get the array (a promoted copy would have no buckets).
    if (!FARM_MUTANT("skip_array_backup")) {
      for (uint32_t b : node_->BackupsOf(first->region)) {
        pending_arrays_.emplace_back(b, ArrayRecord{*first, size, count});
      }
    }
  }
  cv_.notify_all();
  return *first;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(Node* node, Rpc* rpc) {
  std::unique_ptr<Engine> e(new Engine(node, rpc));
  std::vector<LocalRegion> regions;
  const std::vector<control::RegionInfo> infos = node->RegionsOf(node->id());
  for (size_t i = 0; i < infos.size(); ++i) {
    if (static_cast<int>(infos[i].index()) >= node->local_region_count()) continue;
    regions.push_back(LocalRegion{infos[i].region_id(),
                                  node->local_region_data(static_cast<int>(infos[i].index())),
                                  infos[i].size()});
  }
  e->allocator_ = std::make_unique<Allocator>(std::move(regions));
  e->participant_ = std::make_unique<Participant>(e->allocator_.get(),
                                                  [node](uint32_t n) { return node->IsMember(n); });
  e->backup_log_ =
      std::make_unique<BackupLog>([node](uint32_t region) { return node->BackupCopy(region); });
  // RPC's envelope is 16 bytes of the ring message.
  e->max_message_ = MaxPayload(rpc->messenger()->options().ring_size) - 16;
  if (e->max_message_ <= kLockOverhead + 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("rings of ", rpc->messenger()->options().ring_size,
                     " bytes are too small for transactions (use at least 16 KiB)"));
  }
  e->max_object_size_ = std::min(e->allocator_->max_object_size(), e->max_message_ - kLockOverhead);
  // Transaction ids: this incarnation (the epoch it joined in; a restarted node joins under a
  // higher one) and a count from 1.
  const control::Membership m = node->membership();
  for (const control::NodeInfo& n : m.nodes()) {
    if (n.node_id() == node->id()) e->incarnation_ = n.joined_epoch();
  }
  for (const control::NodeInfo& n : m.nodes()) e->members_[n.node_id()] = n.joined_epoch();
  e->members_epoch_ = m.epoch();
  absl::StatusOr<Messenger::LaneLease> lane = rpc->messenger()->AcquireLane(absl::ZeroDuration());
  if (!lane.ok()) {
    return absl::Status(lane.status().code(),
                        absl::StrCat("the transaction engine needs a lane of its own (the "
                                     "runtime's messenger has two more than workers): ",
                                     lane.status().message()));
  }
  e->lane_ = std::move(*lane);

  Participant* p = e->participant_.get();
  rpc->RegisterHandler(kLockMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<LockRequest> req = DecodeLock(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Lock(r.from, *req, r.payload);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kCommitMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<DecisionRequest> req = DecodeDecision(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Commit(r.from, *req);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kAbortMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<DecisionRequest> req = DecodeDecision(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Abort(r.from, *req);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kReserveMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<ReserveRequest> req = DecodeReserve(r.payload);
    if (!req.ok()) return req.status();
    absl::StatusOr<GlobalAddress> a = p->Reserve(r.from, *req);
    if (!a.ok()) return a.status();
    absl::StatusOr<uint64_t> version = p->SlotVersion(*a);
    if (!version.ok()) return version.status();
    const uint64_t words[2] = {a->Pack(), *version};
    return std::string(reinterpret_cast<const char*>(words), sizeof(words));
  });
  BackupLog* b = e->backup_log_.get();
  rpc->RegisterHandler(kCommitBackupMethod,
                       [b](const RpcRequest& r) -> absl::StatusOr<std::string> {
                         absl::StatusOr<LockRequest> req = DecodeLock(r.payload);
                         if (!req.ok()) return req.status();
                         absl::Status s = b->Append(r.from, *req);
                         if (!s.ok()) return s;
                         return std::string();
                       });
  rpc->RegisterHandler(kArrayBackupMethod, [b](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<ArrayRecord> req = DecodeArray(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = b->InstallArray(*req);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kDropBackupMethod, [b](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<DecisionRequest> req = DecodeDecision(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = b->Drop(r.from, req->txn);
    if (!s.ok()) return s;
    return std::string();
  });
  // RESYNC (txn/resync.h): a new backup of one of this node's regions asks for its layout, once
  // this node applied the membership that added that backup (and so fenced LOCKs sent before).
  Allocator* alloc = e->allocator_.get();
  Messenger* messenger = rpc->messenger();
  rpc->RegisterHandler(
      kResyncMethod, [node, alloc, messenger](const RpcRequest& r) -> absl::StatusOr<std::string> {
        absl::StatusOr<ResyncRequest> req = DecodeResync(r.payload);
        if (!req.ok()) return req.status();
        if (messenger->membership_epoch() < req->epoch) {
          return absl::UnavailableError(absl::StrCat(
              "node ", node->id(), " has not applied membership epoch ", req->epoch, " yet"));
        }
        const RegionLayout layout = alloc->LayoutOf(req->region);
        if (layout.block_size == 0) {
          return absl::FailedPreconditionError(
              absl::StrCat("region ", req->region, " is not served by node ", node->id()));
        }
        ResyncAnswer a;
        a.block_size = layout.block_size;
        a.blocks = layout.block_class.size();
        const uint64_t first = std::min<uint64_t>(req->first_block, a.blocks);
        const uint64_t n =
            std::min<uint64_t>(std::max<uint64_t>(req->max_blocks, 1), a.blocks - first);
        a.block_class.assign(layout.block_class.begin() + first,
                             layout.block_class.begin() + first + n);
        if (first == 0) {
          for (const RegionLayout::Array& arr : layout.arrays)
            a.arrays.emplace_back(arr.begin, arr.end);
        }
        return EncodeResyncAnswer(a);
      });
  Engine* raw = e.get();
  rpc->RegisterHandler(kSettleMethod, [raw](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<SettleRequest> req = DecodeSettle(r.payload);
    if (!req.ok()) return req.status();
    return raw->OnSettle(r.from, *req);
  });
  e->resync_ = std::make_unique<Resync>(node, rpc, e->backup_log_.get());
  e->resync_->OnMembership(m);
  e->settler_ = std::thread([raw] { raw->SettlementLoop(); });
  e->listener_ =
      node->AddMembershipListener([raw](const control::Membership& m) { raw->OnMembership(m); });
  return e;
}

Engine::~Engine() { Stop(); }

void Engine::Stop() {
  if (listener_ >= 0) {
    node_->RemoveMembershipListener(listener_);
    listener_ = -1;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (settler_.joinable()) settler_.join();
  if (resync_ != nullptr) resync_->Stop();
  lane_ = Messenger::LaneLease();
}

void Engine::OnMembership(const control::Membership& m) {
  // An evicted node settles nothing: it is no longer one of the owners (its last membership
  // lists nobody).
  if (!node_->evicted().ok()) return;
  AdoptPromoted(m);
  resync_->OnMembership(m);
  absl::flat_hash_map<uint32_t, uint64_t> now;
  for (const control::NodeInfo& n : m.nodes()) now[n.node_id()] = n.joined_epoch();
  std::lock_guard<std::mutex> l(mu_);
  if (m.epoch() <= members_epoch_) return;  // out of date
  members_epoch_ = m.epoch();
  // Incarnations that were members and are not any more (gone, or replaced by a new process).
  std::vector<std::pair<uint32_t, uint64_t>> gone;
  for (const auto& [id, joined] : members_) {
    auto it = now.find(id);
    if (it == now.end() || it->second != joined) gone.emplace_back(id, joined);
  }
  for (const auto& [id, joined] : gone) {
    if (id == node_->id()) continue;
    Departure d;
    d.coordinator = id;
    d.fence = joined + 1;
    auto why = m.departed().find(id);
    d.graceful = why != m.departed().end() && why->second == "it left";
    // Who will ask this node about it: the members that were members before it left too.
    for (const auto& [m_id, m_joined] : now) {
      if (d.graceful) break;  // nobody asks about a node that left on its own
      auto before = members_.find(m_id);
      if (m_id == node_->id() || m_id == id || before == members_.end() ||
          before->second != m_joined) {
        continue;
      }
      d.askers.emplace_back(m_id, m_joined);
    }
    spdlog::debug("txn: node {} (incarnation {}) left: settling its transactions", id, joined);
    departures_.push_back(std::move(d));
  }
  members_ = std::move(now);
  ForgetFinished();
  cv_.notify_all();
}

void Engine::AdoptPromoted(const control::Membership& m) {
  for (const control::RegionInfo& r : m.regions()) {
    if (!r.promoted() || r.node_id() != node_->id() || adopted_.contains(r.region_id())) continue;
    std::shared_ptr<Region> copy = node_->BackupCopy(r.region_id());
    if (copy == nullptr) continue;  // Node logged it: nothing to serve
    // The copy holds every object whose records were truncated here; records still kept are
    // decided by their coordinators' truncations, or by the settlement if they left.
    RegionLayout layout = backup_log_->Layout(r.region_id());
    if (layout.block_size == 0) layout = Allocator::EmptyLayout(copy->size());  // never written
    // Objects of records still kept are locked before anyone can lock them here.
    backup_log_->Promote(r.region_id());
    absl::Status s =
        allocator_->Adopt(LocalRegion{r.region_id(), copy->data(), copy->size()}, layout);
    if (!s.ok()) {
      spdlog::error("txn: node {} cannot serve promoted region {}: {}", node_->id(), r.region_id(),
                    std::string(s.message()));
      continue;
    }
    adopted_.insert(r.region_id());
    adopted_copies_.push_back(std::move(copy));
    spdlog::warn(
        "txn: node {} now serves region {} (promoted from its backup copy; {} record(s) "
        "kept)",
        node_->id(), r.region_id(), backup_log_->records());
  }
}

absl::StatusOr<std::string> Engine::OnSettle(uint32_t from, const SettleRequest& request) {
  const std::vector<SettleState> committed =
      participant_->States(request.coordinator, request.fence_epoch, request.txns);
  std::lock_guard<std::mutex> l(mu_);
  // Remembered until this node forgets that departure. A SETTLE about a departure this node has
  // not seen yet (the coordinator's incarnation is still a member here) is remembered for when
  // it does; one about a departure already forgotten, or about an incarnation this node never
  // knew, would never be forgotten and is not kept.
  const auto key = std::make_pair(request.coordinator, request.fence_epoch);
  const auto member = members_.find(request.coordinator);
  const bool not_seen_yet = member != members_.end() && member->second + 1 == request.fence_epoch;
  const bool pending = std::any_of(departures_.begin(), departures_.end(), [&](const Departure& d) {
    return d.coordinator == key.first && d.fence == key.second;
  });
  if (not_seen_yet || pending) asked_[key].insert(from);
  ForgetFinished();
  return EncodeSettleAnswer(committed);
}

void Engine::ForgetFinished() {
  for (auto it = departures_.begin(); it != departures_.end();) {
    const auto key = std::make_pair(it->coordinator, it->fence);
    const auto asked = asked_.find(key);
    bool done = it->settled;
    for (const auto& [id, joined] : it->askers) {
      auto m = members_.find(id);
      const bool still_there = m != members_.end() && m->second == joined;
      if (still_there && (asked == asked_.end() || !asked->second.contains(id))) done = false;
    }
    if (!done) {
      ++it;
      continue;
    }
    participant_->Forget(it->coordinator, it->fence);
    asked_.erase(key);
    it = departures_.erase(it);
  }
}

void Engine::SettlementLoop() {
  for (;;) {
    Departure d;
    {
      std::unique_lock<std::mutex> l(mu_);
      auto next = [&] {
        for (Departure& x : departures_) {
          if (!x.settled) return &x;
        }
        return static_cast<Departure*>(nullptr);
      };
      // Backup truncations that no transaction took are sent after a short wait, and so are
      // object arrays for the backups (again after a failure).
      while (!stopping_ && next() == nullptr) {
        if (backup_truncations_.empty() && pending_arrays_.empty()) {
          cv_.wait(l);
        } else if (cv_.wait_for(l, absl::ToChronoNanoseconds(kBackupTruncationDelay)) ==
                   std::cv_status::timeout) {
          l.unlock();
          FlushArrays();
          FlushBackupTruncations();
          l.lock();
        }
      }
      if (stopping_) return;
      d = *next();
    }
    if (!Settle(d)) return;
    std::lock_guard<std::mutex> l(mu_);
    for (Departure& x : departures_) {
      if (x.coordinator == d.coordinator && x.fence == d.fence) x.settled = true;
    }
    ForgetFinished();
  }
}

bool Engine::Settle(const Departure& d) {
  const std::vector<Participant::Undecided> undecided = participant_->Fence(d.coordinator, d.fence);
  std::vector<TxnId> kept = backup_log_->Fence(d.coordinator, d.fence);
  if (d.graceful) {
    // It finished every commit before leaving (Transaction::Decide returns only then), so its
    // records here are of committed transactions whose truncation had not come yet.
    for (const TxnId& t : kept) backup_log_->Settle(t, true);
    kept.clear();
  }
  if (d.graceful && undecided.empty()) return true;  // fenced; nothing to settle or to ask
  if (d.graceful) {
    spdlog::warn(
        "txn: node {} left on its own with {} transaction(s) undecided here: settling "
        "them with the other members",
        d.coordinator, undecided.size());
  }
  SettleRequest req{d.coordinator, d.fence, {}};
  for (const Participant::Undecided& u : undecided) req.txns.push_back(u.txn);
  req.txns.insert(req.txns.end(), kept.begin(), kept.end());
  const std::string payload = EncodeSettle(req);
  // What the members' participants know of each: committed by one, or undecided at one. This
  // node's own participant counts too, for the backup records (it may be an owner as well).
  std::vector<bool> committed(req.txns.size(), false), held(req.txns.size(), false),
      aborted(req.txns.size(), false);
  {
    const std::vector<SettleState> own = participant_->States(d.coordinator, d.fence, req.txns);
    for (size_t i = undecided.size(); i < req.txns.size(); ++i) {
      committed[i] = own[i] == SettleState::kCommitted;
      held[i] = own[i] == SettleState::kUndecided;
      aborted[i] = own[i] == SettleState::kAborted;
    }
  }
  // Every other member, until it answered or left: its answer is final (it fenced first).
  std::vector<uint32_t> ask;
  for (uint32_t m : node_->members()) {
    if (m != node_->id() && m != d.coordinator) ask.push_back(m);
  }
  absl::Duration pause = absl::Milliseconds(1);
  while (!ask.empty()) {
    std::vector<uint32_t> again;
    for (uint32_t m : ask) {
      if (!node_->IsMember(m)) continue;
      absl::StatusOr<std::string> r =
          rpc_->Call(*lane_, m, kSettleMethod, payload, absl::Seconds(1));
      absl::StatusOr<std::vector<SettleState>> answer =
          r.ok() ? DecodeSettleAnswer(*r, req.txns.size())
                 : absl::StatusOr<std::vector<SettleState>>(r.status());
      if (!answer.ok()) {
        spdlog::debug("txn: settling node {}'s transactions: node {} did not answer yet: {}",
                      d.coordinator, m, answer.status().ToString());
        again.push_back(m);
        continue;
      }
      for (size_t i = 0; i < req.txns.size(); ++i) {
        committed[i] = committed[i] || (*answer)[i] == SettleState::kCommitted;
        held[i] = held[i] || (*answer)[i] == SettleState::kUndecided;
        aborted[i] = aborted[i] || (*answer)[i] == SettleState::kAborted;
      }
    }
    ask = std::move(again);
    if (ask.empty() || !node_->evicted().ok()) break;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, absl::ToChronoNanoseconds(pause), [&] { return stopping_; })) {
        return false;
      }
    }
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
  if (!node_->evicted().ok()) return true;  // not an owner any more: settle nothing
  for (size_t i = 0; i < undecided.size(); ++i) {
    // A transaction that some owner committed is committed: its decision was made (every owner
    // had locked and validation passed) and it may have been reported to its client.
    FARM_SYNC_POINT("Engine::Settle:Decide");
    participant_->Settle(undecided[i].txn, committed[i]);
    spdlog::info("txn: transaction {} of departed node {} settled: {}", undecided[i].txn.ToString(),
                 d.coordinator, committed[i] ? "committed" : "aborted");
  }
  // A COMMIT-BACKUP record means the coordinator had decided commit: every owner had locked the
  // transaction and validation had passed. It commits unless an owner still holds it undecided
  // or its settlement aborted it, and none committed it (the owners abort it then, as above: an
  // owner remembers that it aborted one until the departure is forgotten, so that a backup that
  // asks late does not apply what the owners dropped). An owner that knows nothing of it
  // committed it and was truncated since (a coordinator sends no ABORT after COMMIT-BACKUP), or
  // left; a transaction whose only owners left is committed from the records (as FaRM's
  // recovery does when every region has a COMMIT-BACKUP record).
  for (size_t i = undecided.size(); i < req.txns.size(); ++i) {
    const bool commit = committed[i] || (!held[i] && !aborted[i]);
    backup_log_->Settle(req.txns[i], commit);
    spdlog::info("txn: backup record of transaction {} of departed node {} settled: {}",
                 req.txns[i].ToString(), d.coordinator, commit ? "applied" : "dropped");
  }
  return true;
}

TxnId Engine::NextId() {
  return TxnId{node_->id(), incarnation_, next_seq_.fetch_add(1, std::memory_order_relaxed)};
}

size_t Engine::unsettled() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const Departure& d : departures_) n += d.settled ? 0 : 1;
  return n;
}

size_t Engine::remembered_asks() const {
  std::lock_guard<std::mutex> l(mu_);
  return asked_.size();
}

namespace {

// Takes up to `max` of `node`'s truncations from `queues`. Caller holds the engine's mu_.
std::vector<uint64_t> TakeFrom(absl::flat_hash_map<uint32_t, std::vector<uint64_t>>& queues,
                               uint32_t node, size_t max) {
  auto it = queues.find(node);
  if (it == queues.end()) return {};
  std::vector<uint64_t>& all = it->second;
  const size_t n = std::min(max, all.size());
  std::vector<uint64_t> out(all.begin(), all.begin() + n);
  all.erase(all.begin(), all.begin() + n);
  if (all.empty()) queues.erase(it);
  return out;
}

}  // namespace

std::vector<uint64_t> Engine::TakeTruncations(uint32_t owner, size_t max) {
  std::lock_guard<std::mutex> l(mu_);
  return TakeFrom(truncations_, owner, max);
}

void Engine::AddTruncation(uint32_t owner, uint64_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  truncations_[owner].push_back(seq);
}

std::vector<uint64_t> Engine::TakeBackupTruncations(uint32_t backup, size_t max) {
  std::lock_guard<std::mutex> l(mu_);
  return TakeFrom(backup_truncations_, backup, max);
}

void Engine::AddBackupTruncation(uint32_t backup, uint64_t seq) {
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    first = backup_truncations_.empty();
    backup_truncations_[backup].push_back(seq);
  }
  // The engine's thread sleeps until there is something to truncate.
  if (first) cv_.notify_all();
}

void Engine::FlushArrays() {
  std::vector<std::pair<uint32_t, ArrayRecord>> arrays;
  {
    std::lock_guard<std::mutex> l(mu_);
    arrays.swap(pending_arrays_);
  }
  std::vector<std::pair<uint32_t, ArrayRecord>> again;
  for (const auto& [b, record] : arrays) {
    const std::vector<uint32_t> now = node_->BackupsOf(record.first.region);
    if (std::find(now.begin(), now.end(), b) == now.end()) continue;  // it left: one copy less
    absl::StatusOr<std::string> r =
        rpc_->Call(*lane_, b, kArrayBackupMethod, EncodeArray(record), absl::Seconds(1));
    if (r.ok()) continue;
    // Unavailable: it has no copy yet (a membership not applied), or does not serve yet. Any
    // other refusal is a bug; it is retried all the same, and said.
    if (!absl::IsUnavailable(r.status()) && !absl::IsDeadlineExceeded(r.status())) {
      spdlog::warn("txn: backup node {} did not install the object array at {}: {}", b,
                   record.first.ToString(), r.status().ToString());
    }
    again.emplace_back(b, record);
  }
  if (again.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  pending_arrays_.insert(pending_arrays_.end(), again.begin(), again.end());
}

size_t Engine::pending_arrays() const {
  std::lock_guard<std::mutex> l(mu_);
  return pending_arrays_.size();
}

void Engine::FlushBackupTruncations() {
  std::vector<uint32_t> backups;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [b, seqs] : backup_truncations_) backups.push_back(b);
  }
  for (uint32_t b : backups) {
    LockRequest r;
    r.txn = TxnId{node_->id(), incarnation_, 0};  // no transaction: truncations only
    while (!(r.truncate = TakeBackupTruncations(b)).empty()) {
      absl::Status s;
      if (b == node_->id()) {
        s = backup_log_->Append(b, r);
      } else if (node_->IsMember(b)) {
        s = rpc_->Call(*lane_, b, kCommitBackupMethod, EncodeLock(r), absl::Seconds(10)).status();
      }
      if (!s.ok()) {
        // The records stay at the backup until a later truncation or recovery applies them.
        spdlog::warn("txn: could not truncate {} COMMIT-BACKUP record(s) at node {}: {}",
                     r.truncate.size(), b, s.ToString());
        for (uint64_t seq : r.truncate) AddBackupTruncation(b, seq);
        break;
      }
    }
  }
}

}  // namespace txn
}  // namespace farm
