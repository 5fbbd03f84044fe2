#include "txn/participant.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "txn/object.h"

namespace farm {
namespace txn {
namespace {

absl::Status ClusterEnding() {
  return absl::UnavailableError(
      "the cluster is ending: this node grants no new lock or allocation as its members leave");
}

}  // namespace

bool Participant::Fenced(const TxnId& txn) const {
  auto it = fenced_before_.find(txn.node);
  return it != fenced_before_.end() && txn.incarnation < it->second;
}

void Participant::Drop(absl::flat_hash_map<TxnId, Record>::iterator it) {
  Record& r = it->second;
  if (!r.committed) {
    for (Locked& o : r.objects) {
      Unlock(o.object);
      --locked_objects_;
    }
    --locked_transactions_;
  }
  records_.erase(it);
}

void Participant::Release(const TxnId& txn) {
  auto it = reservations_.find(txn);
  if (it == reservations_.end()) return;
  for (uint64_t packed : it->second) {
    allocator_->CancelReservation(GlobalAddress::Unpack(packed));
    --reserved_;
  }
  reservations_.erase(it);
}

void Participant::Install(const TxnId& txn, Record& r) {
  auto res = reservations_.find(txn);
  for (Locked& o : r.objects) {
    const char* data = r.locks[o.lock].data() + o.offset;
    switch (o.kind) {
      case WriteKind::kWrite:
        InstallObject(o.object, o.version + 1, data, o.size);
        break;
      case WriteKind::kAlloc:
        InstallObject(o.object, o.version + 1, data, o.size);
        allocator_->Installed(o.addr);
        if (res != reservations_.end()) {
          std::vector<uint64_t>& slots = res->second;
          auto s = std::find(slots.begin(), slots.end(), o.addr.Pack());
          if (s != slots.end()) {
            slots.erase(s);
            --reserved_;
          }
        }
        break;
      case WriteKind::kFree:
        InstallFree(o.object, o.version + 1);
        allocator_->Freed(o.addr);
        break;
    }
    --locked_objects_;
  }
  --locked_transactions_;
  r.objects.clear();
  r.objects.shrink_to_fit();
  r.committed = true;
  // Slots it reserved here and did not create (allocated and freed within the transaction).
  Release(txn);
}

absl::StatusOr<uint64_t> Participant::SlotVersion(GlobalAddress slot) const {
  uint64_t slot_size = 0;
  absl::StatusOr<char*> object = allocator_->SlotOf(slot, &slot_size);
  if (!object.ok()) return object.status();
  return VersionOf(LoadLockWord(*object));
}

absl::Status Participant::Lock(uint32_t coordinator, std::string encoded) {
  // The values stay where they are: each write's data views into `encoded`.
  absl::StatusOr<LockView> decoded = DecodeLockView(encoded);
  if (!decoded.ok()) return decoded.status();
  const LockView& request = *decoded;
  std::lock_guard<std::mutex> l(mu_);
  if (request.txn.node != coordinator) {
    return absl::InvalidArgumentError(
        absl::StrCat("LOCK for transaction ", request.txn.ToString(), " from node ", coordinator));
  }
  // Checked under mu_, like Fence runs: a LOCK still in a ring when its coordinator left is
  // refused here or undone there.
  if (!is_member_(coordinator) || Fenced(request.txn)) {
    return absl::UnavailableError(
        absl::StrCat("LOCK from node ", coordinator,
                     ", which is not a member here (it left, or this node was evicted)"));
  }
  // Truncation: the coordinator knows these committed everywhere. Indexed by id: O(1) each.
  for (uint64_t seq : request.truncate) {
    auto it = records_.find(TxnId{coordinator, request.txn.incarnation, seq});
    if (it != records_.end() && it->second.committed) records_.erase(it);
  }
  if (closed_) return ClusterEnding();
  auto existing = records_.find(request.txn);
  if (existing != records_.end() && existing->second.committed) {
    return absl::FailedPreconditionError(
        absl::StrCat("LOCK for transaction ", request.txn.ToString(), ", which committed here"));
  }
  // A transaction whose writes here do not fit one message sends several LOCKs: later ones add
  // to what the first locked. (A failed part leaves the earlier parts locked until the
  // coordinator's ABORT, which it always sends after a failed LOCK.)
  std::vector<Locked> locked;
  locked.reserve(request.writes.size());
  absl::Status failed;
  auto undo = [&] {
    for (Locked& o : locked) {
      Unlock(o.object);
      --locked_objects_;
    }
  };
  for (const WriteRef& w : request.writes) {
    const uint64_t size = w.kind == WriteKind::kFree ? 0 : w.data.size();
    if (auto h = handing_off_.find(w.addr.region); h != handing_off_.end()) {
      failed = absl::AbortedError(absl::StrCat("region ", w.addr.region,
                                               " is being handed over to node ", h->second,
                                               ": the configuration is changing; retry"));
      break;
    }
    if (!allocator_->Has(w.addr.region)) {
      // The coordinator's membership says this node serves the region and this node's does not
      // (yet): a promotion under way. Nothing was locked; the coordinator retries.
      failed = absl::AbortedError(absl::StrCat("region ", w.addr.region,
                                               " is not served by this node (yet): the "
                                               "configuration is changing; retry"));
      break;
    }
    absl::StatusOr<char*> object = w.kind == WriteKind::kFree ? allocator_->Object(w.addr, 1)
                                                              : allocator_->Object(w.addr, size);
    if (!object.ok()) {
      failed = object.status();
      break;
    }
    if (w.kind != WriteKind::kFree && size == 0) {
      failed = absl::InvalidArgumentError(absl::StrCat("empty value for ", w.addr.ToString()));
      break;
    }
    if (w.kind == WriteKind::kFree && allocator_->InArray(w.addr)) {
      failed = absl::InvalidArgumentError(absl::StrCat(
          "object ", w.addr.ToString(), " belongs to an object array and cannot be freed"));
      break;
    }
    uint64_t expected = 0;
    if (w.kind == WriteKind::kAlloc) {
      auto r = reservations_.find(request.txn);
      if (r == reservations_.end() ||
          std::find(r->second.begin(), r->second.end(), w.addr.Pack()) == r->second.end()) {
        failed = absl::InvalidArgumentError(absl::StrCat(
            w.addr.ToString(), " was not reserved by transaction ", request.txn.ToString()));
        break;
      }
      const uint64_t word = LoadLockWord(*object);
      expected = MakeLockWord(VersionOf(word), false, false);
    } else {
      expected = MakeLockWord(w.version, true, false);
      // Mutant: lock whatever version is there (a lost update when it changed since the read).
      if (FARM_MUTANT("skip_lock_version_check") && !IsLocked(LoadLockWord(*object))) {
        expected = LoadLockWord(*object);
      }
    }
    uint64_t seen = 0;
    if (!TryLock(*object, expected, &seen)) {
      std::string why;
      if (IsLocked(seen)) {
        why = "is locked by another transaction";
      } else if (!IsAllocated(seen) && w.kind != WriteKind::kAlloc) {
        why = "was freed";
      } else {
        why = absl::StrCat("changed (version ", VersionOf(seen), ", read at ", w.version, ")");
      }
      failed = absl::AbortedError(absl::StrCat("object ", w.addr.ToString(), " ", why));
      break;
    }
    ++locked_objects_;
    // Its lock number is set below, once the record's LOCKs are known.
    locked.push_back(Locked{w.addr, *object, w.kind, VersionOf(expected), 0,
                            static_cast<uint64_t>(w.data.data() - encoded.data()), w.data.size()});
  }
  if (!failed.ok()) {
    undo();
    return failed;
  }
  // Tests kill the participant here: holding the locks, before it answers.
  FARM_SYNC_POINT("Participant::Lock:Locked");
  Record& r = records_[request.txn];
  if (r.locks.empty()) {
    ++locked_transactions_;
    r.participants = request.participants;
  }
  const uint32_t lock = static_cast<uint32_t>(r.locks.size());
  r.locks.push_back(std::move(encoded));  // `request` views into it: not used from here on
  if (r.objects.empty()) r.objects.reserve(locked.size());  // later parts grow it geometrically
  for (Locked& o : locked) {
    o.lock = lock;
    r.objects.push_back(o);
  }
  return absl::OkStatus();
}

absl::Status Participant::Commit(uint32_t coordinator, const DecisionRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(request.txn);
  if (it != records_.end() && it->second.committed) return absl::OkStatus();  // a retry
  if (request.txn.node != coordinator || Fenced(request.txn)) {
    return absl::UnavailableError(absl::StrCat("COMMIT-PRIMARY of transaction ",
                                               request.txn.ToString(), " from node ", coordinator,
                                               ", which left: the owners settle it"));
  }
  if (it == records_.end()) {
    // Nothing locked here. A transaction that allocated here without writing anything else here
    // (allocated and freed it) has only reservations to release.
    if (reservations_.contains(request.txn)) {
      Release(request.txn);
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "transaction ", request.txn.ToString(), " is not locked here (aborted, or never locked)"));
  }
  Install(request.txn, it->second);
  return absl::OkStatus();
}

absl::Status Participant::Abort(uint32_t coordinator, const DecisionRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  if (request.txn.node != coordinator) {
    return absl::InvalidArgumentError(
        absl::StrCat("ABORT of transaction ", request.txn.ToString(), " from node ", coordinator));
  }
  auto it = records_.find(request.txn);
  if (it != records_.end()) {
    if (it->second.committed) {
      return absl::FailedPreconditionError(
          absl::StrCat("ABORT of transaction ", request.txn.ToString(), ", which committed here"));
    }
    // A fenced coordinator's transaction is the owners' to settle; an ABORT from it still
    // means it never sent COMMIT-PRIMARY, but the recovery decides for every owner alike.
    if (!Fenced(request.txn)) Drop(it);
  }
  Release(request.txn);
  return absl::OkStatus();
}

absl::StatusOr<GlobalAddress> Participant::Reserve(uint32_t coordinator,
                                                   const ReserveRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  if (!is_member_(coordinator) || request.txn.node != coordinator || Fenced(request.txn)) {
    return absl::UnavailableError(
        absl::StrCat("allocation for node ", coordinator,
                     ", which is not a member here (it left, or this node was evicted)"));
  }
  if (closed_) return ClusterEnding();
  absl::StatusOr<GlobalAddress> a = allocator_->Reserve(request.size);
  if (!a.ok()) return a.status();
  reservations_[request.txn].push_back(a->Pack());
  ++reserved_;
  return a;
}

void Participant::Close() {
  std::lock_guard<std::mutex> l(mu_);
  closed_ = true;
}

void Participant::HandOff(uint32_t region, uint32_t to) {
  std::lock_guard<std::mutex> l(mu_);
  handing_off_[region] = to;
  allocator_->Freeze(region);
}

size_t Participant::locked_objects(uint32_t region) const {
  std::lock_guard<std::mutex> l(mu_);
  size_t locked = 0;
  for (const auto& [txn, r] : records_) {
    if (r.committed) continue;
    for (const Locked& o : r.objects) locked += o.addr.region == region;
  }
  return locked;
}

void Participant::EndHandOff(uint32_t region) {
  std::lock_guard<std::mutex> l(mu_);
  if (handing_off_.erase(region) > 0) allocator_->Unfreeze(region);
}

void Participant::FenceLocked(uint32_t coordinator, uint64_t epoch) {
  uint64_t& before = fenced_before_[coordinator];
  if (epoch <= before) return;
  before = epoch;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    auto next = std::next(it);
    if (it->first.node == coordinator && it->first.incarnation < epoch) Release(it->first);
    it = next;
  }
}

std::vector<Participant::Undecided> Participant::Fence(uint32_t coordinator, uint64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  FenceLocked(coordinator, epoch);
  std::vector<Undecided> out;
  for (const auto& [txn, r] : records_) {
    if (!r.committed && txn.node == coordinator && Fenced(txn)) {
      out.push_back(Undecided{txn, r.participants});
    }
  }
  return out;
}

std::vector<TxnVote> Participant::Votes(uint32_t coordinator, uint64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  FenceLocked(coordinator, epoch);
  std::vector<TxnVote> out;
  for (const auto& [txn, r] : records_) {
    if (txn.node != coordinator || !Fenced(txn)) continue;
    TxnVote v;
    v.txn = txn;
    v.owner = r.committed ? SettleState::kCommitted : SettleState::kUndecided;
    if (!r.committed) {
      for (const Locked& o : r.objects) {
        if (std::find(v.locked.begin(), v.locked.end(), o.addr.region) == v.locked.end()) {
          v.locked.push_back(o.addr.region);
        }
      }
    }
    out.push_back(std::move(v));
  }
  for (const TxnId& txn : settled_aborted_) {
    if (txn.node != coordinator || !Fenced(txn)) continue;
    TxnVote v;
    v.txn = txn;
    v.owner = SettleState::kAborted;
    out.push_back(std::move(v));
  }
  return out;
}

void Participant::Settle(const TxnId& txn, bool commit) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(txn);
  if (it == records_.end() || it->second.committed) return;
  if (commit) {
    Install(txn, it->second);
  } else {
    Drop(it);
    settled_aborted_.insert(txn);
  }
}

void Participant::Forget(uint32_t coordinator, uint64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = records_.begin(); it != records_.end();) {
    auto next = std::next(it);
    // Only decided records: an undecided one waits for its recovery.
    if (it->first.node == coordinator && it->first.incarnation < epoch && it->second.committed) {
      records_.erase(it);
    }
    it = next;
  }
  absl::erase_if(settled_aborted_,
                 [&](const TxnId& t) { return t.node == coordinator && t.incarnation < epoch; });
}

std::vector<LogRecord> Participant::Log(uint32_t coordinator) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<TxnId, const Record*>> mine;
  for (const auto& [txn, r] : records_) {
    if (txn.node == coordinator) mine.emplace_back(txn, &r);
  }
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.first.incarnation, a.first.seq) <
           std::make_pair(b.first.incarnation, b.first.seq);
  });
  std::vector<LogRecord> out;
  for (const auto& [txn, r] : mine) {
    for (const std::string& lock : r->locks)
      out.push_back(LogRecord{LogRecordType::kLock, txn, lock});
    if (r->committed) out.push_back(LogRecord{LogRecordType::kCommitPrimary, txn, ""});
  }
  return out;
}

size_t Participant::records() const {
  std::lock_guard<std::mutex> l(mu_);
  return records_.size();
}

size_t Participant::reservations() const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_;
}

size_t Participant::locked_transactions() const {
  std::lock_guard<std::mutex> l(mu_);
  return locked_transactions_;
}

size_t Participant::locked_objects() const {
  std::lock_guard<std::mutex> l(mu_);
  return locked_objects_;
}

}  // namespace txn
}  // namespace farm
