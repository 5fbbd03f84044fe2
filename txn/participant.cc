#include "txn/participant.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "txn/object.h"

namespace farm {
namespace txn {

void Participant::Append(uint32_t coordinator, LogRecordType type, const TxnId& txn,
                         std::string body) {
  logs_[coordinator].push_back(LogRecord{type, txn, std::move(body)});
}

void Participant::Truncate(uint32_t coordinator, const std::vector<uint64_t>& seqs) {
  if (seqs.empty()) return;
  auto it = logs_.find(coordinator);
  if (it == logs_.end()) return;
  const absl::flat_hash_set<uint64_t> drop(seqs.begin(), seqs.end());
  std::deque<LogRecord>& log = it->second;
  log.erase(std::remove_if(log.begin(), log.end(),
                           [&](const LogRecord& r) { return drop.contains(r.txn.seq); }),
            log.end());
}

void Participant::UnlockAll(std::vector<Locked>& objects) {
  for (Locked& o : objects) {
    Unlock(o.object);
    --locked_objects_;
  }
  objects.clear();
}

absl::Status Participant::Lock(uint32_t coordinator, const LockRequest& request,
                               absl::string_view encoded) {
  std::lock_guard<std::mutex> l(mu_);
  // Checked under mu_, like CoordinatorLeft runs: a LOCK still in a ring when its coordinator
  // left is refused here or undone there.
  if (!is_member_(coordinator)) {
    return absl::UnavailableError(
        absl::StrCat("LOCK from node ", coordinator, ", which is not a member (it left)"));
  }
  Truncate(coordinator, request.truncate);
  if (request.txn.node != coordinator) {
    return absl::InvalidArgumentError(absl::StrCat("LOCK for transaction ", request.txn.ToString(),
                                                   " from node ", coordinator));
  }
  // A transaction whose writes here do not fit one message sends several LOCKs: later ones add
  // to what the first locked. (A failed part leaves the earlier parts locked until the
  // coordinator's ABORT, which it always sends after a failed LOCK.)
  Pending p;
  p.coordinator = coordinator;
  absl::Status failed;
  for (const WriteRecord& w : request.writes) {
    const uint64_t size = w.kind == WriteKind::kFree ? 0 : w.data.size();
    absl::StatusOr<char*> object =
        w.kind == WriteKind::kFree ? allocator_->Object(w.addr, 1) : allocator_->Object(w.addr, size);
    if (!object.ok()) {
      failed = object.status();
      break;
    }
    if (w.kind != WriteKind::kFree && size == 0) {
      failed = absl::InvalidArgumentError(absl::StrCat("empty value for ", w.addr.ToString()));
      break;
    }
    uint64_t expected = 0;
    if (w.kind == WriteKind::kAlloc) {
      auto r = reservations_.find(coordinator);
      if (r == reservations_.end() || !r->second.contains(w.addr.Pack())) {
        failed = absl::InvalidArgumentError(absl::StrCat(
            w.addr.ToString(), " was not reserved by node ", coordinator, "'s allocation"));
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
    p.objects.push_back(Locked{w.addr, *object, w.kind, VersionOf(expected), w.data});
  }
  if (!failed.ok()) {
    UnlockAll(p.objects);
    return failed;
  }
  // Tests kill the participant here: holding the locks, before it answers.
  FARM_SYNC_POINT("Participant::Lock:Locked");
  Append(coordinator, LogRecordType::kLock, request.txn, std::string(encoded));
  Pending& entry = pending_[request.txn];
  entry.coordinator = coordinator;
  for (Locked& o : p.objects) entry.objects.push_back(std::move(o));
  return absl::OkStatus();
}

absl::Status Participant::Commit(uint32_t coordinator, const DecisionRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pending_.find(request.txn);
  if (it == pending_.end() || it->second.coordinator != coordinator) {
    return absl::FailedPreconditionError(absl::StrCat(
        "transaction ", request.txn.ToString(), " is not locked here (aborted, or never locked)"));
  }
  for (Locked& o : it->second.objects) {
    switch (o.kind) {
      case WriteKind::kWrite:
        InstallObject(o.object, o.version + 1, o.data.data(), o.data.size());
        break;
      case WriteKind::kAlloc:
        InstallObject(o.object, o.version + 1, o.data.data(), o.data.size());
        allocator_->Installed(o.addr);
        reservations_[coordinator].erase(o.addr.Pack());
        break;
      case WriteKind::kFree:
        InstallFree(o.object, o.version + 1);
        allocator_->Freed(o.addr);
        break;
    }
    --locked_objects_;
  }
  pending_.erase(it);
  Append(coordinator, LogRecordType::kCommitPrimary, request.txn, "");
  return absl::OkStatus();
}

absl::Status Participant::Abort(uint32_t coordinator, const DecisionRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = pending_.find(request.txn);
  if (it != pending_.end() && it->second.coordinator == coordinator) {
    UnlockAll(it->second.objects);
    pending_.erase(it);
    Append(coordinator, LogRecordType::kAbort, request.txn, "");
  }
  auto r = reservations_.find(coordinator);
  for (const GlobalAddress& a : request.reservations) {
    if (r != reservations_.end() && r->second.erase(a.Pack()) > 0) {
      allocator_->CancelReservation(a);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GlobalAddress> Participant::Reserve(uint32_t coordinator,
                                                   const ReserveRequest& request) {
  std::lock_guard<std::mutex> l(mu_);
  if (!is_member_(coordinator)) {
    return absl::UnavailableError(
        absl::StrCat("allocation for node ", coordinator, ", which is not a member (it left)"));
  }
  absl::StatusOr<GlobalAddress> a = allocator_->Reserve(request.size);
  if (!a.ok()) return a.status();
  reservations_[coordinator].insert(a->Pack());
  return a;
}

void Participant::CoordinatorLeft(uint32_t coordinator) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.coordinator == coordinator) {
      UnlockAll(it->second.objects);
      Append(coordinator, LogRecordType::kAbort, it->first, "");
      pending_.erase(it++);
    } else {
      ++it;
    }
  }
  auto r = reservations_.find(coordinator);
  if (r != reservations_.end()) {
    for (uint64_t packed : r->second) allocator_->CancelReservation(GlobalAddress::Unpack(packed));
    reservations_.erase(r);
  }
}

std::vector<LogRecord> Participant::Log(uint32_t coordinator) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = logs_.find(coordinator);
  if (it == logs_.end()) return {};
  return std::vector<LogRecord>(it->second.begin(), it->second.end());
}

size_t Participant::locked_transactions() const {
  std::lock_guard<std::mutex> l(mu_);
  return pending_.size();
}

size_t Participant::locked_objects() const {
  std::lock_guard<std::mutex> l(mu_);
  return locked_objects_;
}

}  // namespace txn
}  // namespace farm
