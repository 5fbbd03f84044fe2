#include "txn/engine.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "messaging/ring.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"
#include "txn/recovery.h"

namespace farm {
namespace txn {

namespace {

// A region's layout as a data directory's manifest keeps it (control.RegionLayout), and back.
control::RegionLayout LayoutToProto(const RegionLayout& layout) {
  control::RegionLayout out;
  out.set_block_size(layout.block_size);
  for (int c : layout.block_class) out.add_block_class(c);
  for (const RegionLayout::Array& a : layout.arrays) {
    out.add_array_begin(a.begin);
    out.add_array_end(a.end);
  }
  return out;
}
RegionLayout LayoutFromProto(const control::RegionLayout& p) {
  RegionLayout out;
  out.block_size = p.block_size();
  out.block_class.assign(p.block_class().begin(), p.block_class().end());
  for (int i = 0; i < p.array_begin_size() && i < p.array_end_size(); ++i) {
    out.arrays.push_back(RegionLayout::Array{p.array_begin(i), p.array_end(i)});
  }
  return out;
}

// Whether a region with `layout` holds data (a block was carved).
bool InUse(const RegionLayout& layout) {
  return std::any_of(layout.block_class.begin(), layout.block_class.end(),
                     [](int c) { return c >= 0; });
}

}  // namespace

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
  std::vector<std::pair<LocalRegion, RegionLayout>> restored;
  const std::vector<control::RegionInfo> infos = node->RegionsOf(node->id());
  for (size_t i = 0; i < infos.size(); ++i) {
    // A region promoted to this node before the engine started (a node that failed while the
    // cluster formed) is its backup copy, not its own memory: adopted below.
    if (infos[i].promoted()) continue;
    if (static_cast<int>(infos[i].index()) >= node->local_region_count()) continue;
    const LocalRegion region{infos[i].region_id(),
                             node->local_region_data(static_cast<int>(infos[i].index())),
                             infos[i].size()};
    if (const control::RegionLayout* layout = node->RestoredLayout(region.id)) {
      restored.emplace_back(region, LayoutFromProto(*layout));  // holds objects already
    } else {
      regions.push_back(region);
    }
  }
  e->allocator_ = std::make_unique<Allocator>(std::move(regions));
  for (const auto& [region, layout] : restored) {
    if (absl::Status s = e->allocator_->Adopt(region, layout); !s.ok()) {
      return absl::DataLossError(absl::StrCat(
          "region ", region.id, " of the data directory cannot be served: ", s.message()));
    }
    if (InUse(layout)) node->ReportRegionInUse(region.id);
  }
  // Primary balancing counts the regions that hold data (a CM that takes over hears it again).
  e->allocator_->OnFirstUse([node](uint32_t region) { node->ReportRegionInUse(region); });
  e->participant_ = std::make_unique<Participant>(e->allocator_.get(),
                                                  [node](uint32_t n) { return node->IsMember(n); });
  e->backup_log_ =
      std::make_unique<BackupLog>([node](uint32_t region) { return node->BackupCopy(region); });
  // Durability: the backup's records go to a journal in the data directory. Replayed only at a
  // restart after a crash (the first membership's restart_fence): after a clean stop every
  // primary holds what the records held, and the journal starts empty.
  const uint64_t restart_fence = node->restarted() ? node->membership().restart_fence() : 0;
  if (DataDir* dir = node->data_dir(); dir != nullptr) {
    std::vector<std::string> entries;
    uint64_t cut = 0;
    absl::StatusOr<std::unique_ptr<Journal>> journal =
        dir->OpenJournal("backup-log", &entries, &cut);
    if (!journal.ok()) return journal.status();
    if (cut > 0) {
      spdlog::warn(
          "txn: the journal {} ended in {} torn byte(s) (the process died inside a "
          "write): cut off",
          (*journal)->path(), cut);
    }
    if (restart_fence == 0) entries.clear();
    const size_t replayed = entries.size();
    if (absl::Status s = e->backup_log_->Persist(std::move(*journal), entries); !s.ok()) {
      return absl::DataLossError(absl::StrCat("the backup journal of ", dir->path(),
                                              " cannot be replayed: ", s.message()));
    }
    if (restart_fence != 0) {
      spdlog::info("txn: replayed {} journal entries: {} record(s) kept", replayed,
                   e->backup_log_->records());
    }
  }
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
    // The copy of the message the participant keeps as the transaction's record.
    absl::Status s = p->Lock(r.from, std::string(r.payload));
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
                         // Views into the payload: Append copies what it keeps.
                         absl::StatusOr<LockView> req = DecodeLockView(r.payload);
                         if (!req.ok()) return req.status();
                         absl::Status s = b->Append(r.from, *req, r.payload);
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
  rpc->RegisterHandler(kRecoverMethod, [raw](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<RecoverRequest> req = DecodeRecover(r.payload);
    if (!req.ok()) return req.status();
    return raw->OnRecover(r.from, *req);
  });
  e->resync_ = std::make_unique<Resync>(node, rpc, e->backup_log_.get());
  e->AdoptPromoted(m);
  e->ApplyHandOffs(m);
  e->resync_->OnMembership(m);
  if (restart_fence != 0) {
    // A restart after a crash: every process of the crashed run departed. Their transactions
    // are decided by the recovery vote, as a departed coordinator's (only members that hold
    // something of them take part; the others answer with nothing).
    std::lock_guard<std::mutex> l(e->mu_);
    for (uint32_t c : e->backup_log_->Coordinators(restart_fence)) {
      (void)e->backup_log_->Fence(c, restart_fence);
      e->departures_.push_back(Departure{c, restart_fence, {}});
      spdlog::info("txn: recovering the transactions of node {}'s processes before the crash", c);
    }
  }
  e->recovery_thread_ = std::thread([raw] { raw->RecoveryLoop(); });
  // A membership applied since `m` was read (a restart's activation, say) is passed at once:
  // the recovery waits for this engine to be in the current epoch.
  e->listener_ = node->AddMembershipListener(
      [raw](const control::Membership& m) { raw->OnMembership(m); }, m.epoch());
  // The regions restored here are replayed and recovery-locked: they may serve.
  node->FinishRestore();
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
  if (recovery_thread_.joinable()) recovery_thread_.join();
  if (resync_ != nullptr) resync_->Stop();
  lane_ = Messenger::LaneLease();
}

void Engine::OnMembership(const control::Membership& m) {
  // An evicted node settles nothing: it is no longer one of the owners (its last membership
  // lists nobody).
  if (!node_->evicted().ok()) return;
  AdoptPromoted(m);
  ApplyHandOffs(m);
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
    const uint64_t fence = joined + 1;
    // Fenced before this membership counts as applied here (the vote asks only members that
    // applied it): nothing it sent is locked, committed or kept here from now on.
    const std::vector<Participant::Undecided> undecided = participant_->Fence(id, fence);
    const std::vector<TxnId> kept = backup_log_->Fence(id, fence);
    auto why = m.departed().find(id);
    if (why != m.departed().end() && why->second == "it left") {
      // It left on its own: it had finished every commit (Transaction::Decide returns only
      // then), so its records here are of committed transactions whose truncation had not come.
      for (const TxnId& t : kept) backup_log_->Settle(t, true);
      if (undecided.empty()) {
        // Nothing to recover here. Not counted as a finished recovery: a member that holds one
        // of its transactions undecided still asks, and gets an empty vote.
        participant_->Forget(id, fence);
        backup_log_->Forget(id, fence);
        continue;
      }
      spdlog::warn(
          "txn: node {} left on its own with {} transaction(s) undecided here: recovering "
          "them with the other members",
          id, undecided.size());
    }
    spdlog::debug("txn: node {} (incarnation {}) left: recovering its transactions", id, joined);
    departures_.push_back(Departure{id, fence, {}});
  }
  members_ = std::move(now);
  cv_.notify_all();
}

void Engine::AdoptPromoted(const control::Membership& m) {
  for (const control::RegionInfo& r : m.regions()) {
    if (!r.promoted() || r.node_id() != node_->id() || adopted_.contains(r.region_id())) continue;
    std::shared_ptr<Region> copy = node_->BackupCopy(r.region_id());
    if (copy == nullptr) continue;  // Node logged it: nothing to serve
    // The copy holds every object whose records were truncated here; records still kept are
    // decided by their coordinators' truncations, or by the recovery if they left.
    // Restored from the data directory: the layout it had when the cluster stopped.
    const control::RegionLayout* restored = node_->RestoredLayout(r.region_id());
    RegionLayout layout =
        restored != nullptr ? LayoutFromProto(*restored) : backup_log_->Layout(r.region_id());
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
    adopted_[r.region_id()] = std::move(copy);
    // Told again by this node: a CM that took over since its old primary said so does not know.
    if (InUse(layout)) node_->ReportRegionInUse(r.region_id());
    spdlog::warn(
        "txn: node {} now serves region {} (promoted from its backup copy; {} record(s) "
        "kept)",
        node_->id(), r.region_id(), backup_log_->records());
  }
}

void Engine::ApplyHandOffs(const control::Membership& m) {
  std::vector<std::pair<uint32_t, uint32_t>> start;  // region, to
  std::vector<uint32_t> serving, moved;
  for (const control::RegionInfo& r : m.regions()) {
    if (!r.purpose().empty()) continue;
    if (r.node_id() != node_->id()) {
      if (allocator_->Has(r.region_id())) moved.push_back(r.region_id());
    } else if (r.handing_off()) {
      start.emplace_back(r.region_id(), r.handing_off_to());
    } else {
      serving.push_back(r.region_id());
    }
  }
  for (const auto& [region, to] : start) {
    participant_->HandOff(region, to);
    std::lock_guard<std::mutex> l(mu_);
    if (handing_off_.try_emplace(region, HandingOff{to}).second) {
      spdlog::info("txn: node {} hands region {} over to node {}: no new lock on it", node_->id(),
                   region, to);
      cv_.notify_all();
    }
  }
  for (uint32_t region : serving) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (handing_off_.erase(region) == 0) continue;
    }
    participant_->EndHandOff(region);
    spdlog::warn("txn: node {} keeps region {}: its hand-off was called off", node_->id(), region);
  }
  for (uint32_t region : moved) {
    // Nothing is locked in it (the drain), so this node's memory of it holds every committed
    // write: its backup copy now (Node made it one), whose records arrive here from now on.
    const RegionLayout layout = allocator_->LayoutOf(region);
    if (!backup_log_->Demote(region, layout)) {
      spdlog::error(
          "txn: node {} gave region {} up without keeping its memory as a backup copy (the "
          "membership does not list it as a backup)",
          node_->id(), region);
    }
    allocator_->Remove(region);
    participant_->EndHandOff(region);
    adopted_.erase(region);
    {
      std::lock_guard<std::mutex> l(mu_);
      handing_off_.erase(region);
    }
    spdlog::warn("txn: node {} handed region {} over (membership epoch {}); it keeps a backup copy",
                 node_->id(), region, m.epoch());
  }
}

void Engine::CheckHandOffs() {
  const absl::Time now = absl::Now();
  std::vector<uint32_t> due;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [region, h] : handing_off_) {
      if (now - h.reported < kHandOffReport) continue;
      const bool array =
          std::any_of(pending_arrays_.begin(), pending_arrays_.end(),
                      [&](const auto& p) { return p.second.first.region == region; });
      if (!array) due.push_back(region);
    }
  }
  for (uint32_t region : due) {
    if (participant_->locked_objects(region) > 0 || backup_log_->recovery_locks(region) > 0) {
      continue;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = handing_off_.find(region);
      if (it == handing_off_.end()) continue;  // ended meanwhile
      it->second.reported = now;
    }
    // Tests hold the report back here (the argument: the region).
    FARM_SYNC_POINT_CALLBACK("Engine::CheckHandOffs:Ready", &region);
    node_->ReportHandOffReady(region);
  }
}

absl::StatusOr<std::map<uint32_t, control::RegionLayout>> Engine::Quiesce(absl::Duration timeout) {
  participant_->Close();
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    std::vector<std::string> held;
    if (size_t n = participant_->locked_objects(); n > 0) {
      held.push_back(absl::StrCat(n, " object(s) locked by transactions not decided yet"));
    }
    if (size_t n = backup_log_->recovery_locks(); n > 0) {
      held.push_back(absl::StrCat(n, " object(s) locked by a recovery"));
    }
    if (held.empty()) break;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("node ", node_->id(), " still holds ",
                                                      absl::StrJoin(held, ", "), " after ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::map<uint32_t, control::RegionLayout> layouts;
  for (uint32_t region : allocator_->Regions()) {
    layouts[region] = LayoutToProto(allocator_->LayoutOf(region));
  }
  return layouts;
}

size_t Engine::handing_off() const {
  std::lock_guard<std::mutex> l(mu_);
  return handing_off_.size();
}

absl::StatusOr<std::string> Engine::OnRecover(uint32_t from, const RecoverRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  const auto kept_key = std::make_tuple(from, request.coordinator, request.fence_epoch);
  const uint64_t piece = max_message_ - kRecoverPieceHeader;
  RecoverPiece p;
  if (request.offset > 0) {
    // The rest of an answer kept for this asker; gone if it asked for a new one since.
    auto it = kept_answers_.find(kept_key);
    if (it == kept_answers_.end() || it->second.id != request.answer ||
        request.offset >= it->second.bytes.size()) {
      return EncodeRecoverPiece(p);
    }
    p.answer = it->second.id;
    p.total = it->second.bytes.size();
    p.bytes = it->second.bytes.substr(request.offset, piece);
    if (request.offset + p.bytes.size() == p.total) kept_answers_.erase(it);  // all taken
    return EncodeRecoverPiece(p);
  }
  std::string answer = EncodeRecoverAnswer(AnswerRecover(from, request));
  p.total = answer.size();
  // Mutant: the answer goes whole, however long (a message refuses it past its limit).
  if (answer.size() <= piece || FARM_MUTANT("recover_answer_whole")) {
    kept_answers_.erase(kept_key);
    p.bytes = std::move(answer);
    return EncodeRecoverPiece(p);
  }
  p.answer = next_answer_id_++;
  p.bytes = answer.substr(0, piece);
  kept_answers_[kept_key] = KeptAnswer{p.answer, std::move(answer)};
  return EncodeRecoverPiece(p);
}

RecoverAnswer Engine::AnswerRecover(uint32_t from, const RecoverRequest& request) {
  RecoverAnswer out;
  out.epoch = members_epoch_;
  const auto key = std::make_pair(request.coordinator, request.fence_epoch);
  auto d = std::find_if(departures_.begin(), departures_.end(), [&](const Departure& x) {
    return x.coordinator == key.first && x.fence == key.second;
  });
  if (d == departures_.end()) {
    if (forgotten_.contains(key)) {
      out.status = RecoverStatus::kFinished;
    } else if (request.op == RecoverOp::kVote || request.op == RecoverOp::kRecord) {
      // Not seen here: either this node has not applied the membership without it yet (another
      // epoch: asked again), or it joined after the coordinator left and holds nothing of it.
      if (request.epoch != members_epoch_) out.status = RecoverStatus::kOtherEpoch;
    }
    return out;
  }
  switch (request.op) {
    case RecoverOp::kVote: {
      if (request.epoch != members_epoch_) {
        out.status = RecoverStatus::kOtherEpoch;
        break;
      }
      absl::flat_hash_map<TxnId, size_t> index;
      auto add = [&](TxnVote v) {
        auto [it, added] = index.try_emplace(v.txn, out.votes.size());
        if (added) {
          out.votes.push_back(std::move(v));
          return;
        }
        TxnVote& mine = out.votes[it->second];
        if (v.decided != Decided::kNone) mine.decided = v.decided;
        if (v.owner != SettleState::kUnknown) mine.owner = v.owner;
        mine.locked.insert(mine.locked.end(), v.locked.begin(), v.locked.end());
        mine.recorded.insert(mine.recorded.end(), v.recorded.begin(), v.recorded.end());
        if (mine.written.empty()) mine.written = std::move(v.written);
      };
      for (TxnVote& v : participant_->Votes(key.first, key.second)) add(std::move(v));
      for (TxnVote& v : backup_log_->Votes(key.first, key.second)) add(std::move(v));
      out.truncated = backup_log_->Truncated(key.first, key.second);
      for (const auto& [txn, commit] : d->decided) {
        TxnVote v;
        v.txn = txn;
        v.decided = commit ? Decided::kCommit : Decided::kAbort;
        add(std::move(v));
      }
      break;
    }
    case RecoverOp::kRecord:
      if (request.epoch != members_epoch_) {
        out.status = RecoverStatus::kOtherEpoch;
        break;
      }
      for (const auto& [txn, commit] : request.decisions) {
        auto [it, added] = d->decided.try_emplace(txn, commit);
        // Kept in the journal too (a crash of every node before every member applied it).
        if (added) backup_log_->RecordDecision(txn, commit);
        if (!added && it->second != commit) {
          spdlog::error(
              "txn: recovery of node {}'s transactions: node {} asks to record transaction {} "
              "as {}, but it was recorded {} here",
              key.first, from, txn.ToString(), commit ? "committed" : "aborted",
              it->second ? "committed" : "aborted");
          out.status = RecoverStatus::kConflict;
        }
      }
      break;
    case RecoverOp::kApply:
      for (const auto& [txn, commit] : d->decided) {
        // Tests crash a member here, while it applies a recovery's decisions (chaos
        // crash_during_recovery): every member recorded them, so the next recovery finds them.
        FARM_SYNC_POINT("Engine::Recover:Apply");
        participant_->Settle(txn, commit);
        backup_log_->Settle(txn, commit);
      }
      break;
    case RecoverOp::kForget:
      // Every member applied every decision: undecided records of the coordinator are gone.
      participant_->Forget(key.first, key.second);
      backup_log_->Forget(key.first, key.second);
      for (auto it = kept_answers_.begin(); it != kept_answers_.end();) {
        const auto& [asker, coordinator, fence] = it->first;
        if (coordinator == key.first && fence == key.second) {
          kept_answers_.erase(it++);
        } else {
          ++it;
        }
      }
      forgotten_.insert(key);
      departures_.erase(d);
      cv_.notify_all();
      break;
  }
  return out;
}

absl::StatusOr<RecoverAnswer> Engine::AskRecover(uint32_t member, RecoverRequest request) {
  std::string answer;
  uint64_t total = 0;
  request.answer = 0;
  do {
    request.offset = answer.size();
    absl::StatusOr<std::string> r =
        member == node_->id()
            ? OnRecover(member, request)
            : rpc_->Call(*lane_, member, kRecoverMethod, EncodeRecover(request), absl::Seconds(1));
    if (!r.ok()) return r.status();
    absl::StatusOr<RecoverPiece> p = DecodeRecoverPiece(*r);
    if (!p.ok()) return p.status();
    if (request.offset == 0) {
      request.answer = p->answer;
      total = p->total;
    } else if (p->answer != request.answer || p->total != total) {
      return absl::AbortedError(absl::StrCat("node ", member, "'s RECOVER answer of ", total,
                                             " bytes is gone after ", answer.size(),
                                             " (it made another): asked again"));
    }
    if (p->bytes.empty() && answer.size() < total) {
      return absl::DataLossError(absl::StrCat("node ", member, " sent an empty piece of its ",
                                              total, "-byte RECOVER answer"));
    }
    answer += p->bytes;
  } while (answer.size() < total);
  if (answer.size() != total) {
    return absl::DataLossError(absl::StrCat("node ", member, " sent ", answer.size(),
                                            " bytes of a ", total, "-byte RECOVER answer"));
  }
  return DecodeRecoverAnswer(answer);
}

bool Engine::Pause(absl::Duration d) {
  std::unique_lock<std::mutex> l(mu_);
  return !cv_.wait_for(l, absl::ToChronoNanoseconds(d), [&] { return stopping_; });
}

void Engine::RecoveryLoop() {
  for (;;) {
    std::pair<uint32_t, uint64_t> next;
    {
      std::unique_lock<std::mutex> l(mu_);
      // Backup truncations that no transaction took are sent after a short wait, and so are
      // object arrays for the backups (again after a failure).
      while (!stopping_ && departures_.empty()) {
        if (backup_truncations_.empty() && pending_arrays_.empty() && handing_off_.empty()) {
          cv_.wait(l);
        } else if (cv_.wait_for(l, absl::ToChronoNanoseconds(kBackupTruncationDelay)) ==
                   std::cv_status::timeout) {
          l.unlock();
          FlushArrays();
          FlushBackupTruncations();
          CheckHandOffs();
          l.lock();
        }
      }
      if (stopping_) return;
      next = {departures_.front().coordinator, departures_.front().fence};
    }
    if (!Recover(next.first, next.second)) {
      // Stopped, or evicted: an evicted node decides nothing (its last membership lists nobody);
      // it waits for its end.
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_; });
      return;
    }
  }
}

bool Engine::Recover(uint32_t coordinator, uint64_t fence) {
  absl::Duration pause = absl::Milliseconds(1);
  for (int attempt = 1;; ++attempt) {
    if (!node_->evicted().ok()) return false;
    if (RecoverOnce(coordinator, fence)) return true;
    if (attempt % 50 == 0) {
      spdlog::warn("txn: recovering node {}'s transactions: still not done after {} attempts",
                   coordinator, attempt);
    }
    // This thread's other duties go on meanwhile: truncations release the records (and the
    // recovery locks of promoted regions) of transactions that live coordinators finished.
    FlushArrays();
    FlushBackupTruncations();
    CheckHandOffs();
    if (!Pause(pause)) return false;
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
}

bool Engine::RecoverOnce(uint32_t coordinator, uint64_t fence) {
  const control::Membership m = node_->membership();
  {
    std::lock_guard<std::mutex> l(mu_);
    const bool pending = std::any_of(
        departures_.begin(), departures_.end(),
        [&](const Departure& x) { return x.coordinator == coordinator && x.fence == fence; });
    if (!pending) return true;                      // finished (forgotten) meanwhile
    if (members_epoch_ != m.epoch()) return false;  // this node's listener has not run on it yet
  }
  RecoveryView view;
  std::vector<uint32_t> members;
  for (const control::NodeInfo& n : m.nodes()) {
    members.push_back(n.node_id());
    view.members.insert(n.node_id());
  }
  for (const control::RegionInfo& r : m.regions()) {
    if (r.purpose().empty()) view.primary[r.region_id()] = r.node_id();
  }
  RecoverRequest req{RecoverOp::kVote, coordinator, fence, m.epoch(), {}};
  auto finished = [&] {
    // Another member's recovery finished it: this node forgets it too.
    RecoverRequest forget{RecoverOp::kForget, coordinator, fence, m.epoch(), {}};
    (void)OnRecover(node_->id(), forget);
    return true;
  };
  // 1. Votes, all in this epoch.
  absl::flat_hash_map<TxnId, std::vector<std::pair<uint32_t, TxnVote>>> votes;
  std::vector<std::pair<uint32_t, std::vector<TxnId>>> truncated;
  for (uint32_t member : members) {
    absl::StatusOr<RecoverAnswer> a = AskRecover(member, req);
    if (!a.ok() || a->status == RecoverStatus::kOtherEpoch) {
      spdlog::debug("txn: recovering node {}'s transactions: node {} did not vote in epoch {}: {}",
                    coordinator, member, m.epoch(),
                    a.ok() ? absl::StrCat("it is in epoch ", a->epoch) : a.status().ToString());
      return false;
    }
    if (a->status == RecoverStatus::kFinished) return finished();
    for (TxnVote& v : a->votes) votes[v.txn].emplace_back(member, std::move(v));
    truncated.emplace_back(member, std::move(a->truncated));
  }
  // A member that truncated a transaction applied its record and dropped it: that counts in
  // the vote on a transaction some member still holds something of (txn/recovery.h, rule 5).
  for (const auto& [member, txns] : truncated) {
    for (const TxnId& t : txns) {
      auto it = votes.find(t);
      if (it == votes.end()) continue;
      TxnVote v;
      v.txn = t;
      v.truncated = true;
      it->second.emplace_back(member, std::move(v));
    }
  }
  // 2. Decide.
  req.op = RecoverOp::kRecord;
  for (const auto& [txn, vs] : votes) {
    const RecoveryOutcome o = RecoveryDecision(vs, view);
    req.decisions.emplace_back(txn, o.commit);
    spdlog::info("txn: transaction {} of departed node {}: {} ({})", txn.ToString(), coordinator,
                 o.commit ? "commit" : "abort", o.why);
  }
  // 3. Recorded by every member before any applies them, as many to a message as fit.
  const size_t per_message = (max_message_ - kRecoverRequestBytes) / kRecoverDecisionBytes;
  const std::vector<std::pair<TxnId, bool>> decisions = std::move(req.decisions);
  for (uint32_t member : members) {
    size_t from = 0;
    do {
      const size_t n = std::min(per_message, decisions.size() - from);
      req.decisions.assign(decisions.begin() + from, decisions.begin() + from + n);
      from += n;
      absl::StatusOr<RecoverAnswer> a = AskRecover(member, req);
      if (!a.ok() || a->status == RecoverStatus::kOtherEpoch ||
          a->status == RecoverStatus::kConflict) {
        return false;
      }
      if (a->status == RecoverStatus::kFinished) return finished();
    } while (from < decisions.size());
  }
  // 4. Applied, and 5. forgotten, by every member until it did or left (this node last).
  std::rotate(members.begin(), std::find(members.begin(), members.end(), node_->id()) + 1,
              members.end());
  for (RecoverOp op : {RecoverOp::kApply, RecoverOp::kForget}) {
    req.op = op;
    req.decisions.clear();
    for (uint32_t member : members) {
      absl::Duration pause = absl::Milliseconds(1);
      for (;;) {
        absl::StatusOr<RecoverAnswer> a = AskRecover(member, req);
        if (a.ok() || !node_->IsMember(member)) break;
        if (!node_->evicted().ok() || !Pause(pause)) return false;
        pause = std::min(pause * 2, absl::Milliseconds(100));
      }
    }
  }
  return true;
}

TxnId Engine::NextId() {
  std::lock_guard<std::mutex> l(seq_mu_);
  const uint64_t seq = next_seq_++;
  unfinished_.emplace_hint(unfinished_.end(), seq, 1);
  return TxnId{node_->id(), incarnation_, seq};
}

void Engine::ReleaseId(uint64_t seq) { Truncated(absl::MakeConstSpan(&seq, 1)); }

void Engine::Truncated(absl::Span<const uint64_t> seqs) {
  std::lock_guard<std::mutex> l(seq_mu_);
  for (uint64_t seq : seqs) {
    auto it = unfinished_.find(seq);
    if (it != unfinished_.end() && --it->second == 0) unfinished_.erase(it);
  }
}

uint64_t Engine::TruncationBound() const {
  std::lock_guard<std::mutex> l(seq_mu_);
  // Mutant: the bound passes transactions whose truncations are still on their way.
  if (FARM_MUTANT("bound_ignores_unfinished")) return next_seq_;
  return unfinished_.empty() ? next_seq_ : unfinished_.begin()->first;
}

size_t Engine::unsettled() const {
  std::lock_guard<std::mutex> l(mu_);
  return departures_.size();
}

size_t Engine::forgotten_departures() const {
  std::lock_guard<std::mutex> l(mu_);
  return forgotten_.size();
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
  {
    std::lock_guard<std::mutex> l(seq_mu_);
    ++unfinished_[seq];
  }
  RequeueBackupTruncations(backup, absl::MakeConstSpan(&seq, 1));
}

void Engine::RequeueBackupTruncations(uint32_t backup, absl::Span<const uint64_t> seqs) {
  if (seqs.empty()) return;
  bool first = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    first = backup_truncations_.empty();
    std::vector<uint64_t>& queue = backup_truncations_[backup];
    queue.insert(queue.end(), seqs.begin(), seqs.end());
  }
  // The engine's thread sleeps until there is something to truncate.
  if (first) cv_.notify_all();
}

void Engine::FlushArrays() {
  std::vector<std::pair<uint32_t, ArrayRecord>> arrays;
  {
    std::lock_guard<std::mutex> l(mu_);
    arrays.swap(pending_arrays_);
    arrays_in_flight_ = arrays.size();
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
  std::lock_guard<std::mutex> l(mu_);
  arrays_in_flight_ = 0;
  pending_arrays_.insert(pending_arrays_.end(), again.begin(), again.end());
}

size_t Engine::pending_arrays() const {
  std::lock_guard<std::mutex> l(mu_);
  // The ones being sent too: a test waiting for 0 once saw the moment between taking them and
  // their acknowledgements, evicted the node, and its promoted backup had no array.
  return pending_arrays_.size() + arrays_in_flight_;
}

void Engine::FlushBackupTruncations() {
  std::vector<uint32_t> backups;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [b, seqs] : backup_truncations_) backups.push_back(b);
  }
  int sent = 0;  // truncations sent so far by this flush (for the sync point)
  for (uint32_t b : backups) {
    LockRequest r;
    r.txn = TxnId{node_->id(), incarnation_, 0};  // no transaction: truncations only
    while (!(r.truncate = TakeBackupTruncations(b)).empty()) {
      r.finished_below = TruncationBound();
      // Tests crash a coordinator here, between two truncations (chaos crash_mid_truncate).
      FARM_SYNC_POINT_CALLBACK("Engine::FlushBackupTruncations:Send", &sent);
      ++sent;
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
        RequeueBackupTruncations(b, r.truncate);
        break;
      }
      Truncated(r.truncate);  // applied there, or it left with its copies
    }
  }
}

}  // namespace txn
}  // namespace farm
