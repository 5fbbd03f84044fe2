#include "txn/backup_log.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "platform/mutant.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"
#include "txn/wire.h"

namespace farm {
namespace txn {
namespace {

// The journal's entries (the first byte is the kind).
enum class Entry : uint8_t {
  kKeep = 1,       // a COMMIT-BACKUP's writes kept (a LockRequest: txn, writes, written, parts)
  kTruncate = 2,   // truncations (a LockRequest: the coordinator, its incarnation, seqs, bound)
  kSettle = 3,     // txn, commit
  kFence = 4,      // coordinator, fence
  kForget = 5,     // coordinator, fence
  kArray = 6,      // an ArrayRecord
  kLayout = 7,     // region, a layout merged
  kTruncated = 8,  // (a compaction's) coordinator, incarnation, bound, the seqs remembered
  kDecided = 9,    // txn, commit (a recovery's decision recorded)
};

// An entry about one transaction (kSettle, kDecided).
std::string TxnEntry(Entry kind, const TxnId& txn, bool commit) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(kind));
  w.U32(txn.node);
  w.U64(txn.incarnation);
  w.U64(txn.seq);
  w.U8(commit ? 1 : 0);
  return std::move(w.str());
}

// An entry about a coordinator's incarnations below `fence` (kFence, kForget).
std::string FenceEntry(Entry kind, uint32_t coordinator, uint64_t fence) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(kind));
  w.U32(coordinator);
  w.U64(fence);
  return std::move(w.str());
}

std::string Tagged(Entry kind, absl::string_view body) {
  std::string out;
  out.reserve(1 + body.size());
  out.push_back(static_cast<char>(kind));
  out.append(body.data(), body.size());
  return out;
}

void PutLayout(WireWriter& w, const RegionLayout& layout) {
  w.U64(layout.block_size);
  w.U64(layout.block_class.size());
  for (int c : layout.block_class) w.U32(static_cast<uint32_t>(c));
  w.U64(layout.arrays.size());
  for (const RegionLayout::Array& a : layout.arrays) {
    w.U64(a.begin);
    w.U64(a.end);
  }
}

bool GetLayout(WireReader& r, RegionLayout* layout) {
  uint64_t n = 0;
  if (!r.U64(&layout->block_size) || !r.U64(&n) || n > r.remaining() / 4) return false;
  layout->block_class.resize(n);
  for (int& c : layout->block_class) {
    uint32_t v = 0;
    if (!r.U32(&v)) return false;
    c = static_cast<int>(v);
  }
  if (!r.U64(&n) || n > r.remaining() / 16) return false;
  layout->arrays.resize(n);
  for (RegionLayout::Array& a : layout->arrays) {
    if (!r.U64(&a.begin) || !r.U64(&a.end)) return false;
  }
  return true;
}

}  // namespace

absl::Status BackupLog::Persist(std::unique_ptr<Journal> journal,
                                const std::vector<std::string>& entries) {
  for (size_t i = 0; i < entries.size(); ++i) {
    if (absl::Status s = Replay(entries[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, " of ", entries.size(), " of ",
                                                     journal->path(), ": ", s.message()));
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  journal_ = std::move(journal);
  // Start from the state: what the replay dropped (copies this node no longer holds) goes.
  compact_at_ = 0;
  MaybeCompact();
  return journal_error_;
}

absl::Status BackupLog::Replay(absl::string_view entry) {
  if (entry.empty()) return absl::InvalidArgumentError("an empty entry");
  const Entry kind = static_cast<Entry>(entry[0]);
  WireReader r(entry.substr(1));
  switch (kind) {
    case Entry::kKeep: {
      absl::StatusOr<LockRequest> req = DecodeLock(entry.substr(1));
      if (!req.ok()) return req.status();
      Kept k;
      k.written = req->written;
      k.parts = req->parts;
      for (WriteRecord& w : req->writes) {
        std::shared_ptr<Region> copy = copy_of_(w.addr.region);
        if (copy == nullptr) continue;  // the copy is gone: so are its writes here
        const uint64_t span = w.kind == WriteKind::kFree ? 8 : ObjectSpan(w.data.size());
        if (w.addr.offset % 8 != 0 || w.addr.offset > copy->size() ||
            copy->size() - w.addr.offset < span) {
          return absl::InvalidArgumentError(
              absl::StrCat("a kept write at ", w.addr.ToString(), " leaves the copy"));
        }
        k.writes.push_back(std::move(w));
        k.copies.push_back(std::move(copy));
      }
      if (k.writes.empty() && !req->writes.empty()) return absl::OkStatus();
      std::lock_guard<std::mutex> l(mu_);
      if (k.writes.empty() && !records_.contains(req->txn)) return absl::OkStatus();
      KeepLocked(req->txn, std::move(k), req->part);
      return absl::OkStatus();
    }
    case Entry::kTruncate: {
      absl::StatusOr<LockRequest> req = DecodeLock(entry.substr(1));
      if (!req.ok()) return req.status();
      std::lock_guard<std::mutex> l(mu_);
      TruncateLocked(req->txn.node, req->txn.incarnation, req->truncate, req->finished_below);
      return absl::OkStatus();
    }
    case Entry::kSettle:
    case Entry::kDecided: {
      TxnId txn;
      uint8_t commit = 0;
      if (!r.U32(&txn.node) || !r.U64(&txn.incarnation) || !r.U64(&txn.seq) || !r.U8(&commit) ||
          !r.done()) {
        break;
      }
      std::lock_guard<std::mutex> l(mu_);
      if (kind == Entry::kSettle) {
        SettleLocked(txn, commit != 0);
      } else {
        RecordDecisionLocked(txn, commit != 0);
      }
      return absl::OkStatus();
    }
    case Entry::kFence:
    case Entry::kForget: {
      uint32_t coordinator = 0;
      uint64_t fence = 0;
      if (!r.U32(&coordinator) || !r.U64(&fence) || !r.done()) break;
      std::lock_guard<std::mutex> l(mu_);
      if (kind == Entry::kFence) {
        RaiseFence(coordinator, fence);
      } else {
        ForgetLocked(coordinator, fence);
      }
      return absl::OkStatus();
    }
    case Entry::kArray: {
      absl::StatusOr<ArrayRecord> record = DecodeArray(entry.substr(1));
      if (!record.ok()) return record.status();
      std::shared_ptr<Region> copy = copy_of_(record->first.region);
      if (copy == nullptr) return absl::OkStatus();
      const uint64_t block_size = Allocator::BlockSizeOf(copy->size());
      const uint64_t slot = Allocator::SlotSize(Allocator::SlotClassOf(record->size));
      if (record->count == 0 || record->size == 0 || record->size > kMaxObjectSize ||
          block_size == 0 || slot > block_size || record->first.offset % block_size != 0 ||
          record->first.offset > copy->size() ||
          (copy->size() - record->first.offset) / slot < record->count) {
        return absl::InvalidArgumentError("an object array that leaves the copy");
      }
      std::lock_guard<std::mutex> l(mu_);
      InstallArrayLocked(*record, *copy);
      return absl::OkStatus();
    }
    case Entry::kLayout: {
      uint32_t region = 0;
      RegionLayout layout;
      if (!r.U32(&region) || !GetLayout(r, &layout) || !r.done()) break;
      std::shared_ptr<Region> copy = copy_of_(region);
      if (copy == nullptr) return absl::OkStatus();
      std::lock_guard<std::mutex> l(mu_);
      AdoptLayoutLocked(region, copy->size(), layout);
      return absl::OkStatus();
    }
    case Entry::kTruncated: {
      uint32_t coordinator = 0;
      uint64_t incarnation = 0, below = 0, n = 0;
      if (!r.U32(&coordinator) || !r.U64(&incarnation) || !r.U64(&below) || !r.U64(&n) ||
          n > r.remaining() / 8) {
        break;
      }
      std::vector<uint64_t> seqs(n);
      for (uint64_t& seq : seqs) {
        if (!r.U64(&seq)) break;
      }
      if (!r.done() || r.failed()) break;
      std::lock_guard<std::mutex> l(mu_);
      Truncations& t = truncated_[{coordinator, incarnation}];
      t.below = std::max(t.below, below);
      for (uint64_t seq : seqs) {
        if (seq >= t.below) t.seqs.insert(seq);
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("a corrupt or unknown entry (kind ", static_cast<int>(entry[0]), ")"));
}

absl::Status BackupLog::Log(const std::string& entry) {
  if (!journal_error_.ok()) return journal_error_;
  absl::Status s = journal_->Append(entry, /*sync=*/false);
  if (!s.ok()) {
    journal_error_ = absl::UnavailableError(
        absl::StrCat("the journal ", journal_->path(), " failed: ", s.message()));
    spdlog::error("txn: {}; this node keeps no more COMMIT-BACKUP records",
                  std::string(journal_error_.message()));
  }
  return journal_error_;
}

void BackupLog::MaybeCompact() {
  if (journal_ == nullptr || !journal_error_.ok() || journal_->size() < compact_at_) return;
  std::vector<std::string> entries;
  for (const auto& [region, layout] : layouts_) {
    WireWriter w;
    w.U8(static_cast<uint8_t>(Entry::kLayout));
    w.U32(region);
    PutLayout(w, layout);
    entries.push_back(std::move(w.str()));
  }
  for (const auto& [coordinator, fence] : fences_) {
    entries.push_back(FenceEntry(Entry::kFence, coordinator, fence));
  }
  for (const auto& [key, t] : truncated_) {
    WireWriter w;
    w.U8(static_cast<uint8_t>(Entry::kTruncated));
    w.U32(key.first);
    w.U64(key.second);
    w.U64(t.below);
    w.U64(t.seqs.size());
    for (uint64_t seq : t.seqs) w.U64(seq);
    entries.push_back(std::move(w.str()));
  }
  for (const auto& [txn, commit] : decided_)
    entries.push_back(TxnEntry(Entry::kDecided, txn, commit));
  for (const auto& [txn, k] : records_) {
    LockRequest keep;
    keep.txn = txn;
    keep.writes = k.writes;
    keep.written = k.written;
    keep.parts = k.parts;
    for (size_t i = 0; i < k.parts_seen.size(); ++i) {
      keep.part = k.parts_seen[i];
      entries.push_back(Tagged(Entry::kKeep, EncodeLock(keep)));
      keep.writes.clear();  // the other parts add nothing more
    }
  }
  if (absl::Status s = journal_->Rewrite(entries); !s.ok()) {
    journal_error_ = absl::UnavailableError(
        absl::StrCat("the journal ", journal_->path(), " failed: ", s.message()));
    spdlog::error("txn: {}; this node keeps no more COMMIT-BACKUP records",
                  std::string(journal_error_.message()));
    return;
  }
  ++compactions_;
  compact_at_ = std::max<uint64_t>(64 << 20, 4 * journal_->size());
}

void BackupLog::set_compact_at(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  compact_at_ = bytes;
}

uint64_t BackupLog::compactions() const {
  std::lock_guard<std::mutex> l(mu_);
  return compactions_;
}

absl::Status BackupLog::Append(uint32_t coordinator, const LockView& request,
                               absl::string_view encoded) {
  if (request.txn.node != coordinator) {
    return absl::InvalidArgumentError(absl::StrCat(
        "COMMIT-BACKUP for transaction ", request.txn.ToString(), " from node ", coordinator));
  }
  // Resolve every write's copy before taking the lock: copy_of_ takes the node's map lock.
  Kept k;
  k.copies.reserve(request.writes.size());
  for (const WriteRef& w : request.writes) {
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
  k.writes.reserve(request.writes.size());
  for (const WriteRef& w : request.writes) {
    k.writes.push_back(WriteRecord{w.addr, w.kind, w.version, std::string(w.data)});
  }
  k.written = request.written;
  k.parts = request.parts;
  std::lock_guard<std::mutex> l(mu_);
  if (!journal_error_.ok()) {
    return absl::UnavailableError(absl::StrCat("COMMIT-BACKUP of transaction ",
                                               request.txn.ToString(),
                                               ": this node's journal failed, it keeps no records "
                                               "(",
                                               journal_error_.message(), ")"));
  }
  if (auto f = fences_.find(coordinator);
      f != fences_.end() && request.txn.incarnation < f->second) {
    // Its recovery has begun: a record kept now would never be decided.
    return absl::FailedPreconditionError(absl::StrCat("COMMIT-BACKUP of transaction ",
                                                      request.txn.ToString(), ": node ",
                                                      coordinator, " left the cluster"));
  }
  // The truncations first: they are of earlier transactions, whatever becomes of this one (a
  // refused message must not take them with it).
  if (!request.truncate.empty() || request.finished_below > 0) {
    if (journal_ != nullptr) {
      LockRequest t;
      t.txn = TxnId{coordinator, request.txn.incarnation, 0};
      t.truncate = request.truncate;
      t.finished_below = request.finished_below;
      if (absl::Status s = Log(Tagged(Entry::kTruncate, EncodeLock(t))); !s.ok()) return s;
    }
    TruncateLocked(coordinator, request.txn.incarnation, request.truncate, request.finished_below);
  }
  for (const WriteRecord& w : k.writes) {
    if (promoted_.contains(w.addr.region)) {
      // Promote locked what the records kept then; a record now would be applied after
      // transactions that did not wait for it. The coordinator aborts (its LOCK was elsewhere).
      return absl::FailedPreconditionError(absl::StrCat(
          "COMMIT-BACKUP of transaction ", request.txn.ToString(), ": region ", w.addr.region,
          " is served by this node now (its backup copy was promoted)"));
    }
  }
  if (k.writes.empty()) return absl::OkStatus();
  // Mutant: the record is kept in memory only (a crash of every node loses it).
  if (journal_ != nullptr && !FARM_MUTANT("journal_skip_keep")) {
    // The replay keeps the writes, `written` and the parts; the truncations were journaled
    // above on their own (their replay does not depend on this record being kept).
    const std::string entry =
        encoded.empty() ? Tagged(Entry::kKeep, EncodeLock(request)) : Tagged(Entry::kKeep, encoded);
    if (absl::Status s = Log(entry); !s.ok()) return s;
  }
  KeepLocked(request.txn, std::move(k), request.part);
  MaybeCompact();
  return absl::OkStatus();
}

void BackupLog::TruncateLocked(uint32_t coordinator, uint64_t incarnation,
                               const std::vector<uint64_t>& seqs, uint64_t finished_below) {
  // Each is remembered until the coordinator's bound passes it (the recovery vote: this node
  // applied it).
  Truncations& t = truncated_[{coordinator, incarnation}];
  for (uint64_t seq : seqs) {
    auto it = records_.find(TxnId{coordinator, incarnation, seq});
    if (it == records_.end()) continue;  // it wrote nothing here, or was truncated already
    Apply(it->second);
    records_.erase(it);
    if (seq >= t.below) t.seqs.insert(seq);
  }
  // Mutant: the bound is ignored and nothing truncated is remembered (the recovery cannot
  // tell a backup that applied a record from one that never got it).
  if (FARM_MUTANT("forget_truncations")) t.seqs.clear();
  if (finished_below > t.below) {
    t.below = finished_below;
    absl::erase_if(t.seqs, [&](uint64_t seq) { return seq < t.below; });
  }
}

void BackupLog::KeepLocked(const TxnId& txn, Kept k, uint32_t part) {
  for (size_t i = 0; i < k.writes.size(); ++i) {
    const WriteRecord& w = k.writes[i];
    if (w.kind != WriteKind::kFree) LearnBlock(w.addr, k.copies[i]->size(), w.data.size());
  }
  // A transaction's writes to this node may come in several COMMIT-BACKUPs (each at most a
  // message): they add up. A message delivered twice (its answer was lost) adds its writes
  // twice, which changes nothing: the second of two equal writes is never newer.
  auto [it, inserted] = records_.try_emplace(txn, std::move(k));
  Kept& kept = it->second;
  if (!inserted) {
    kept.writes.insert(kept.writes.end(), k.writes.begin(), k.writes.end());
    kept.copies.insert(kept.copies.end(), k.copies.begin(), k.copies.end());
    if (kept.written.empty()) kept.written = std::move(k.written);
  }
  if (std::find(kept.parts_seen.begin(), kept.parts_seen.end(), part) == kept.parts_seen.end()) {
    kept.parts_seen.push_back(part);
  }
}

void BackupLog::Apply(const Kept& k) {
  for (size_t i = 0; i < k.writes.size(); ++i) {
    const WriteRecord& w = k.writes[i];
    char* object = k.copies[i]->data() + w.addr.offset;
    const uint64_t version = w.version + 1;
    // An object that Promote locked stays locked until its last kept record is decided.
    const bool still_held = Recovering(w.addr) && (i >= k.recovering.size() || !k.recovering[i] ||
                                                   recovery_locks_.at(w.addr.Pack()) > 1);
    // Mutant: apply whatever the order (an older write overwrites a newer one).
    if (VersionOf(LoadLockWord(object)) >= version && !FARM_MUTANT("backup_apply_older")) {
      ++skipped_;  // a later transaction's write of this object was applied first
      continue;
    }
    if (w.kind == WriteKind::kFree) {
      InstallFree(object, version, still_held);
    } else {
      InstallObject(object, version, w.data.data(), w.data.size(), still_held);
    }
    ++applied_;
  }
  Release(k);
}

void BackupLog::Release(const Kept& k) {
  for (size_t i = 0; i < k.recovering.size(); ++i) {
    if (!k.recovering[i]) continue;
    const WriteRecord& w = k.writes[i];
    auto it = recovery_locks_.find(w.addr.Pack());
    if (it == recovery_locks_.end() || --it->second > 0) continue;
    recovery_locks_.erase(it);
    char* object = k.copies[i]->data() + w.addr.offset;
    if (IsLocked(LoadLockWord(object))) Unlock(object);
  }
}

absl::Status BackupLog::Drop(uint32_t coordinator, const TxnId& txn) {
  if (txn.node != coordinator) {
    return absl::InvalidArgumentError(
        absl::StrCat("DROP-BACKUP for transaction ", txn.ToString(), " from node ", coordinator));
  }
  Settle(txn, false);
  return absl::OkStatus();
}

void BackupLog::Promote(uint32_t region) {
  std::lock_guard<std::mutex> l(mu_);
  promoted_.insert(region);
  for (auto& [txn, k] : records_) {
    for (size_t i = 0; i < k.writes.size(); ++i) {
      const WriteRecord& w = k.writes[i];
      if (w.addr.region != region || (i < k.recovering.size() && k.recovering[i])) continue;
      char* object = k.copies[i]->data() + w.addr.offset;
      if (VersionOf(LoadLockWord(object)) >= w.version + 1) continue;  // a newer one is there
      // Mutant: no lock recovery (a transaction may overtake a committed one's kept record).
      if (FARM_MUTANT("skip_recovery_locks")) continue;
      if (k.recovering.size() < k.writes.size()) k.recovering.resize(k.writes.size(), false);
      k.recovering[i] = true;
      if (recovery_locks_[w.addr.Pack()]++ > 0) continue;
      uint64_t word = LoadLockWord(object), seen = 0;
      while (!IsLocked(word) && !TryLock(object, word, &seen)) word = seen;
    }
  }
}

size_t BackupLog::recovery_locks() const {
  std::lock_guard<std::mutex> l(mu_);
  return recovery_locks_.size();
}

size_t BackupLog::recovery_locks(uint32_t region) const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [packed, count] : recovery_locks_) {
    n += GlobalAddress::Unpack(packed).region == region;
  }
  return n;
}

bool BackupLog::Demote(uint32_t region, const RegionLayout& layout) {
  if (!AdoptLayout(region, layout)) return false;
  std::lock_guard<std::mutex> l(mu_);
  promoted_.erase(region);
  return true;
}

RegionLayout& BackupLog::LayoutLocked(uint32_t region, uint64_t region_size) {
  RegionLayout& layout = layouts_[region];
  if (layout.block_size == 0) layout = Allocator::EmptyLayout(region_size);
  return layout;
}

void BackupLog::LearnBlock(GlobalAddress addr, uint64_t region_size, uint64_t size) {
  RegionLayout& layout = LayoutLocked(addr.region, region_size);
  if (layout.block_size == 0) return;
  const int c = Allocator::SlotClassOf(size);
  const uint64_t b = addr.offset / layout.block_size;
  if (b >= layout.block_class.size() || Allocator::SlotSize(c) > layout.block_size) return;
  // A block keeps its class for good (txn/allocator.h), so the first write learnt says it.
  if (layout.block_class[b] < 0) layout.block_class[b] = c;
}

absl::Status BackupLog::InstallArray(const ArrayRecord& record) {
  std::shared_ptr<Region> copy = copy_of_(record.first.region);
  if (copy == nullptr) {
    // Perhaps not yet: the membership naming this node a backup of a new node's region may not
    // be applied here yet. The primary retries while this node is its backup.
    return absl::UnavailableError(
        absl::StrCat("an object array at ", record.first.ToString(),
                     " for a region this node keeps no backup copy of (yet)"));
  }
  const uint64_t block_size = Allocator::BlockSizeOf(copy->size());
  const int c = Allocator::SlotClassOf(record.size);
  const uint64_t slot = Allocator::SlotSize(c);
  if (record.count == 0 || record.size == 0 || record.size > kMaxObjectSize || block_size == 0 ||
      slot > block_size || record.first.offset % block_size != 0 ||
      record.first.offset > copy->size() ||
      (copy->size() - record.first.offset) / slot < record.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an object array of ", record.count, " objects of ", record.size, " bytes at ",
        record.first.ToString(), " does not fit the region's ", copy->size(), " bytes"));
  }
  std::lock_guard<std::mutex> l(mu_);
  if (journal_ != nullptr) {
    if (absl::Status s = Log(Tagged(Entry::kArray, EncodeArray(record))); !s.ok()) return s;
  }
  InstallArrayLocked(record, *copy);
  MaybeCompact();
  return absl::OkStatus();
}

void BackupLog::InstallArrayLocked(const ArrayRecord& record, Region& copy) {
  const uint64_t block_size = Allocator::BlockSizeOf(copy.size());
  const int c = Allocator::SlotClassOf(record.size);
  const uint64_t slot = Allocator::SlotSize(c);
  const std::string zeros(record.size, '\0');
  RegionLayout& layout = LayoutLocked(record.first.region, copy.size());
  const uint64_t per_block = block_size / slot;
  const uint64_t first_block = record.first.offset / block_size;
  for (uint64_t b = first_block; b < first_block + (record.count + per_block - 1) / per_block;
       ++b) {
    layout.block_class[b] = c;
  }
  const RegionLayout::Array range{record.first.offset, record.first.offset + record.count * slot};
  if (std::find(layout.arrays.begin(), layout.arrays.end(), range) == layout.arrays.end()) {
    layout.arrays.push_back(range);
  }
  for (uint64_t i = 0; i < record.count; ++i) {
    char* object = copy.data() + range.begin + i * slot;
    // Version 1 is the array's first; a copy that holds a later one (a retried record) keeps it.
    if (VersionOf(LoadLockWord(object)) >= 1) continue;
    InstallObject(object, 1, zeros.data(), record.size);
  }
}

uint64_t BackupLog::RaiseFence(uint32_t coordinator, uint64_t fence) {
  uint64_t& f = fences_[coordinator];
  if (fence > f) {
    // A failure is the journal's (Append refuses from now on); the fence holds here anyway.
    if (journal_ != nullptr) (void)Log(FenceEntry(Entry::kFence, coordinator, fence));
    f = fence;
  }
  return f;
}

std::vector<TxnId> BackupLog::Fence(uint32_t coordinator, uint64_t fence) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t f = RaiseFence(coordinator, fence);
  std::vector<TxnId> out;
  for (const auto& [txn, kept] : records_) {
    if (txn.node == coordinator && txn.incarnation < f) out.push_back(txn);
  }
  return out;
}

std::vector<TxnVote> BackupLog::Votes(uint32_t coordinator, uint64_t fence) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t f = RaiseFence(coordinator, fence);
  std::vector<TxnVote> out;
  for (const auto& [txn, kept] : records_) {
    if (txn.node != coordinator || txn.incarnation >= f) continue;
    TxnVote v;
    v.txn = txn;
    // A record missing parts is no record: its coordinator failed while sending it, before
    // any COMMIT-PRIMARY (the vote then finds this backup without it, and aborts).
    // Mutant: a record counts whatever parts of it arrived.
    const bool complete = kept.complete() || FARM_MUTANT("count_partial_records");
    for (const WriteRecord& w : complete ? kept.writes : std::vector<WriteRecord>{}) {
      if (std::find(v.recorded.begin(), v.recorded.end(), w.addr.region) == v.recorded.end()) {
        v.recorded.push_back(w.addr.region);
      }
    }
    v.written = kept.written;
    if (auto d = decided_.find(txn); d != decided_.end()) {
      v.decided = d->second ? Decided::kCommit : Decided::kAbort;
    }
    out.push_back(std::move(v));
  }
  for (const auto& [txn, commit] : decided_) {
    if (txn.node != coordinator || txn.incarnation >= f || records_.contains(txn)) continue;
    TxnVote v;
    v.txn = txn;
    v.decided = commit ? Decided::kCommit : Decided::kAbort;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<TxnId> BackupLog::Truncated(uint32_t coordinator, uint64_t fence) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<TxnId> out;
  for (const auto& [key, t] : truncated_) {
    if (key.first != coordinator || key.second >= fence) continue;
    for (uint64_t seq : t.seqs) out.push_back(TxnId{coordinator, key.second, seq});
  }
  return out;
}

void BackupLog::Forget(uint32_t coordinator, uint64_t fence) {
  std::lock_guard<std::mutex> l(mu_);
  if (journal_ != nullptr) (void)Log(FenceEntry(Entry::kForget, coordinator, fence));
  ForgetLocked(coordinator, fence);
  MaybeCompact();
}

void BackupLog::RecordDecision(const TxnId& txn, bool commit) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = decided_.find(txn); it != decided_.end() && it->second == commit) return;
  if (journal_ != nullptr) (void)Log(TxnEntry(Entry::kDecided, txn, commit));
  RecordDecisionLocked(txn, commit);
  MaybeCompact();
}

void BackupLog::RecordDecisionLocked(const TxnId& txn, bool commit) { decided_[txn] = commit; }

std::vector<uint32_t> BackupLog::Coordinators(uint64_t fence) const {
  std::lock_guard<std::mutex> l(mu_);
  absl::flat_hash_set<uint32_t> out;
  for (const auto& [txn, k] : records_) {
    if (txn.incarnation < fence) out.insert(txn.node);
  }
  for (const auto& [key, t] : truncated_) {
    if (key.second < fence) out.insert(key.first);
  }
  for (const auto& [txn, commit] : decided_) {
    if (txn.incarnation < fence) out.insert(txn.node);
  }
  std::vector<uint32_t> sorted(out.begin(), out.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

void BackupLog::ForgetLocked(uint32_t coordinator, uint64_t fence) {
  absl::erase_if(decided_, [&](const auto& entry) {
    return entry.first.node == coordinator && entry.first.incarnation < fence;
  });
  absl::erase_if(truncated_, [&](const auto& entry) {
    return entry.first.first == coordinator && entry.first.second < fence;
  });
}

size_t BackupLog::truncated_remembered() const {
  std::lock_guard<std::mutex> l(mu_);
  size_t n = 0;
  for (const auto& [key, t] : truncated_) n += t.seqs.size();
  return n;
}

void BackupLog::Settle(const TxnId& txn, bool commit) {
  std::lock_guard<std::mutex> l(mu_);
  if (!records_.contains(txn)) return;
  if (journal_ != nullptr) (void)Log(TxnEntry(Entry::kSettle, txn, commit));
  SettleLocked(txn, commit);
  MaybeCompact();
}

void BackupLog::SettleLocked(const TxnId& txn, bool commit) {
  auto it = records_.find(txn);
  if (it == records_.end()) return;
  if (commit) {
    Apply(it->second);
    // Applied as at a truncation, and remembered so until the recovery forgets the
    // coordinator's incarnation: a recovery after a crash of the whole cluster, between this
    // backup's Settle and another's, must find that this copy holds the transaction.
    Truncations& t = truncated_[{txn.node, txn.incarnation}];
    if (txn.seq >= t.below) t.seqs.insert(txn.seq);
  } else {
    Release(it->second);
  }
  records_.erase(it);
}

bool BackupLog::AdoptLayout(uint32_t region, const RegionLayout& layout) {
  std::shared_ptr<Region> copy = copy_of_(region);
  if (copy == nullptr) return false;
  std::lock_guard<std::mutex> l(mu_);
  if (journal_ != nullptr) {
    WireWriter w;
    w.U8(static_cast<uint8_t>(Entry::kLayout));
    w.U32(region);
    PutLayout(w, layout);
    (void)Log(w.str());
  }
  const bool ok = AdoptLayoutLocked(region, copy->size(), layout);
  MaybeCompact();
  return ok;
}

bool BackupLog::AdoptLayoutLocked(uint32_t region, uint64_t region_size,
                                  const RegionLayout& layout) {
  RegionLayout& mine = LayoutLocked(region, region_size);
  if (mine.block_size != layout.block_size ||
      mine.block_class.size() != layout.block_class.size()) {
    return false;
  }
  // A block keeps its class for good (txn/allocator.h): what either side knows of it holds.
  for (size_t b = 0; b < mine.block_class.size(); ++b) {
    if (mine.block_class[b] < 0) mine.block_class[b] = layout.block_class[b];
  }
  for (const RegionLayout::Array& a : layout.arrays) {
    if (std::find(mine.arrays.begin(), mine.arrays.end(), a) == mine.arrays.end()) {
      mine.arrays.push_back(a);
    }
  }
  return true;
}

BackupLog::SlotCopy BackupLog::InstallCopied(uint32_t region, uint64_t offset, const char* copy,
                                             uint64_t slot) {
  uint64_t word, size;
  std::memcpy(&word, copy, 8);
  std::memcpy(&size, copy + 16, 8);
  ObjectView view;
  ObjectState state = ObjectState::kFree;
  if (IsLocked(word)) return SlotCopy::kRetry;
  if (IsAllocated(word)) {
    // The size word may belong to another version (torn): only a span that fits and a check
    // that matches say it does not.
    if (size > kMaxObjectSize || ObjectSpan(size) > slot) return SlotCopy::kRetry;
    state = DecodeObject(copy, size, &view);
    if (state != ObjectState::kOk) return SlotCopy::kRetry;
  }
  std::shared_ptr<Region> mine = copy_of_(region);
  if (mine == nullptr) return SlotCopy::kNoCopy;
  std::lock_guard<std::mutex> l(mu_);
  char* object = mine->data() + offset;
  const uint64_t version = VersionOf(word);
  if (VersionOf(LoadLockWord(object)) >= version) return SlotCopy::kKept;
  if (state == ObjectState::kOk) {
    InstallObject(object, version, view.payload.data(), view.payload.size());
  } else {
    InstallFree(object, version);
  }
  return SlotCopy::kInstalled;
}

RegionLayout BackupLog::Layout(uint32_t region) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = layouts_.find(region);
  return it == layouts_.end() ? RegionLayout{} : it->second;
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
