#include "txn/backup_log.h"

#include "absl/strings/str_cat.h"
#include "platform/mutant.h"
#include "txn/object.h"

namespace farm {
namespace txn {

absl::Status BackupLog::Append(uint32_t coordinator, const LockRequest& request) {
  if (request.txn.node != coordinator) {
    return absl::InvalidArgumentError(absl::StrCat(
        "COMMIT-BACKUP for transaction ", request.txn.ToString(), " from node ", coordinator));
  }
  // Resolve every write's copy before taking the lock: copy_of_ takes the node's map lock.
  Kept k;
  for (const WriteRecord& w : request.writes) {
    std::shared_ptr<Region> copy = copy_of_(w.addr.region);
    if (copy == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "COMMIT-BACKUP of transaction ", request.txn.ToString(), " writes ", w.addr.ToString(),
          ", but this node keeps no "
          "backup copy of region ",
          w.addr.region));
    }
    const uint64_t span = w.kind == WriteKind::kFree ? 8 : ObjectSpan(w.data.size());
    if (w.addr.offset % 8 != 0 || w.addr.offset > copy->size() ||
        copy->size() - w.addr.offset < span) {
      return absl::InvalidArgumentError(
          absl::StrCat("COMMIT-BACKUP of transaction ", request.txn.ToString(), " writes ", span,
                       " bytes at ", w.addr.ToString(), ", outside the region's ", copy->size()));
    }
    k.copies.push_back(std::move(copy));
  }
  k.writes = request.writes;
  std::lock_guard<std::mutex> l(mu_);
  for (uint64_t seq : request.truncate) {
    auto it = records_.find(TxnId{coordinator, request.txn.incarnation, seq});
    if (it == records_.end()) continue;  // it wrote nothing here, or was truncated already
    Apply(it->second);
    records_.erase(it);
  }
  if (k.writes.empty()) return absl::OkStatus();
  // A transaction's writes to this node may come in several COMMIT-BACKUPs (each at most a
  // message): they add up. A message delivered twice (its answer was lost) adds its writes
  // twice, which changes nothing: the second of two equal writes is never newer.
  auto [it, inserted] = records_.try_emplace(request.txn, std::move(k));
  if (!inserted) {
    Kept& kept = it->second;
    kept.writes.insert(kept.writes.end(), k.writes.begin(), k.writes.end());
    kept.copies.insert(kept.copies.end(), k.copies.begin(), k.copies.end());
  }
  return absl::OkStatus();
}

void BackupLog::Apply(const Kept& k) {
  for (size_t i = 0; i < k.writes.size(); ++i) {
    const WriteRecord& w = k.writes[i];
    char* object = k.copies[i]->data() + w.addr.offset;
    const uint64_t version = w.version + 1;
    // Mutant: apply whatever the order (an older write overwrites a newer one).
    if (VersionOf(LoadLockWord(object)) >= version && !FARM_MUTANT("backup_apply_older")) {
      ++skipped_;  // a later transaction's write of this object was applied first
      continue;
    }
    if (w.kind == WriteKind::kFree) {
      InstallFree(object, version);
    } else {
      InstallObject(object, version, w.data.data(), w.data.size());
    }
    ++applied_;
  }
}

size_t BackupLog::records() const {
  std::lock_guard<std::mutex> l(mu_);
  return records_.size();
}

uint64_t BackupLog::applied() const {
  std::lock_guard<std::mutex> l(mu_);
  return applied_;
}

uint64_t BackupLog::skipped() const {
  std::lock_guard<std::mutex> l(mu_);
  return skipped_;
}

}  // namespace txn
}  // namespace farm
