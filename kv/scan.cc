// Scan: Redis's SCAN over every shard, a step a read-only transaction over some home buckets.

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "kv/bucket.h"
#include "kv/glob.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/shard.h"
#include "kv/internal/value.h"
#include "platform/mutant.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {

namespace {

// A cursor: the shard's position (in Store::Impl::shard_nodes) above kScanHomeBits, the next
// home bucket below.
constexpr unsigned kScanHomeBits = 40;
constexpr uint64_t kScanHomeMask = (uint64_t{1} << kScanHomeBits) - 1;

// The key of entry `e` (read from its item or index object unless inline).
absl::Status EntryKey(txn::Transaction& t, const ShardInfo& s, const Entry& e, std::string* key) {
  if (e.kind == kInline) {
    key->assign(e.key.data(), e.key.size());
    return absl::OkStatus();
  }
  std::string obj;
  if (e.kind == kOutOfLine) {
    if (absl::Status st = TableChanged(t.Read(e.object, ItemSize(e.key_len, e.value_len), &obj));
        !st.ok()) {
      return st;
    }
    uint32_t k = 0;
    if (obj.size() >= kItemHeader) std::memcpy(&k, obj.data(), 4);
    if (obj.size() != ItemSize(e.key_len, e.value_len) || k != e.key_len) {
      return absl::AbortedError("kv: an item changed while it was scanned");
    }
    key->assign(obj, kItemHeader, e.key_len);
  } else {
    if (absl::Status st =
            TableChanged(t.Read(e.object, IndexSize(e.key_len, e.value_len, s.chunk_bytes), &obj));
        !st.ok()) {
      return st;
    }
    IndexView v;
    if (!DecodeIndex(obj, e, s.chunk_bytes, &v)) {
      return absl::AbortedError("kv: a value's index changed while it was scanned");
    }
    key->assign(v.key.data(), v.key.size());
  }
  // The object holds another key than the entry's (its slot was reused): not this entry's key.
  if (KeyHash(s.seed, *key) != e.hash) {
    return absl::AbortedError("kv: an item changed while it was scanned");
  }
  return absl::OkStatus();
}

// The keys matching `pattern` whose home bucket is one of first .. first + n - 1 of shard `s`, in
// transaction `t`: the buckets they may sit in (n + H - 1 from `first`, one READ) and the
// overflow chains of those homes.
absl::Status ScanHomes(txn::Transaction& t, const ShardInfo& s, uint64_t first, uint64_t n,
                       absl::string_view pattern, std::vector<std::string>* keys) {
  const uint64_t span = std::min<uint64_t>(n + s.neighbourhood - 1, s.total - first);
  std::vector<std::string> buckets;
  absl::Status st = t.ReadRun(s.Bucket(first), s.bucket_bytes, s.payload(), span, &buckets);
  if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) return NotABucket(s, st.message());
  if (!st.ok()) return st;
  std::string key;
  auto take = [&](const Entry& e) -> absl::Status {
    if (absl::Status est = EntryKey(t, s, e, &key); !est.ok()) return est;
    if (pattern.empty() || GlobMatch(pattern, key)) keys->push_back(key);
    return absl::OkStatus();
  };
  for (uint64_t b = 0; b < span; ++b) {
    absl::StatusOr<std::vector<Entry>> entries = ParseEntries(buckets[b]);
    if (!entries.ok()) return entries.status();
    for (const Entry& e : *entries) {
      // Its home is bucket first + b - delta: one of this step's, or another step's key.
      if (FARM_MUTANT("kv_scan_by_bucket") ? b >= n : (e.delta > b || b - e.delta >= n)) {
        continue;  // (the mutant keeps the entries of the step's buckets, whatever their home)
      }
      if (absl::Status est = take(e); !est.ok()) return est;
    }
  }
  for (uint64_t h = 0; h < n; ++h) {
    GlobalAddress link;
    bool has = ReadLink(buckets[h], &link);
    for (int hops = 0; has; ++hops) {
      if (hops > 1 << 20) return absl::DataLossError("an overflow chain does not end");
      std::string block;
      if (absl::Status rst = TableChanged(t.Read(link, s.payload(), &block)); !rst.ok()) {
        return rst;
      }
      absl::string_view payload;
      if (!BlockEntries(s, first + h, block, &payload)) {
        return absl::AbortedError("kv: an overflow block changed while it was scanned");
      }
      absl::StatusOr<std::vector<Entry>> entries = ParseEntries(payload);
      if (!entries.ok()) return entries.status();
      for (const Entry& e : *entries) {
        if (absl::Status est = take(e); !est.ok()) return est;
      }
      has = ReadLink(payload, &link);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ScanPage> Client::Scan(uint64_t cursor, uint64_t count, absl::string_view pattern) {
  const size_t shard_count = impl_->store->shard_nodes.size();
  const uint64_t at = cursor >> kScanHomeBits;
  const uint64_t first = cursor & kScanHomeMask;
  if (shard_count == 0 && cursor == 0) return ScanPage{};
  if (at >= shard_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv: cursor ", cursor, " was not returned by a scan of this store (shard ", at,
                     " of ", shard_count, ")"));
  }
  absl::StatusOr<const ShardInfo*> shard = impl_->ShardAt(at);
  if (!shard.ok()) return shard.status();
  const ShardInfo s = **shard;  // a copy: the client's entry may be described anew meanwhile
  if (first >= s.buckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv: cursor ", cursor, " was not returned by a scan of this store (bucket ",
                     first, " of a shard of ", s.buckets, ")"));
  }
  // The step's buckets are one READ, which must fit the worker's registered buffer: a larger
  // COUNT (a hint, as Redis's) covers as many buckets as fit.
  const uint64_t fit = RuntimeAccess::Of(*impl_->worker).staging->size() / s.bucket_bytes;
  const uint64_t most = fit > s.neighbourhood ? fit - (s.neighbourhood - 1) : 1;
  const uint64_t n = std::min<uint64_t>({std::max<uint64_t>(count, 1), most, s.buckets - first});
  ScanPage page;
  absl::Status st = impl_->worker->Run([&](Txn& txn) -> absl::Status {
    page.keys.clear();
    return ScanHomes(RuntimeAccess::Of(txn).t, s, first, n, pattern, &page.keys);
  });
  if (!st.ok()) return impl_->Annotate(st, s);
  const uint64_t next = first + n;
  page.cursor = next < s.buckets       ? (at << kScanHomeBits) | next
                : at + 1 < shard_count ? (at + 1) << kScanHomeBits
                                       : 0;
  return page;
}

}  // namespace kv
}  // namespace farm
