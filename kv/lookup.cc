// The lock-free lookup (kv/internal/lookup.h), and the client's (Client::Impl::Get and Find, for
// Get and Exists) retried while the key's buckets change under it.

#include "kv/internal/lookup.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kv/bucket.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/value.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "txn/object.h"

namespace farm {
namespace kv {

namespace {

// The value of a chunked entry: its index, then every chunk with READs posted together (no chunk
// when `value` is null: the index says whose entry it is). kMissing if the index is another key's.
absl::StatusOr<Lookup> FetchChunked(const ShardInfo& s, const Entry& e, absl::string_view key,
                                    CopyFn copy, std::string* value) {
  const uint64_t isize = IndexSize(e.key_len, e.value_len, s.chunk_bytes);
  const txn::Range r{e.object, txn::ObjectSpan(isize)};
  std::vector<std::string> c;
  if (absl::Status st = copy(absl::MakeConstSpan(&r, 1), &c); !st.ok()) return st;
  txn::ObjectView v;
  IndexView idx;
  if (txn::DecodeObject(c[0].data(), isize, &v) != txn::ObjectState::kOk ||
      !DecodeIndex(v.payload, e, s.chunk_bytes, &idx)) {
    return Lookup::kRetry;
  }
  if (idx.key != key) return Lookup::kMissing;
  if (value == nullptr) return Lookup::kFound;
  std::vector<txn::Range> ranges;
  for (uint64_t i = 0; i < idx.chunks.size(); ++i) {
    ranges.push_back(txn::Range{
        idx.chunks[i], txn::ObjectSpan(kChunkHeader + ChunkLen(e.value_len, s.chunk_bytes, i))});
  }
  if (absl::Status st = copy(ranges, &c); !st.ok()) return st;
  value->clear();
  value->reserve(e.value_len);
  for (uint64_t i = 0; i < idx.chunks.size(); ++i) {
    absl::string_view data;
    const uint64_t size = kChunkHeader + ChunkLen(e.value_len, s.chunk_bytes, i);
    if (txn::DecodeObject(c[i].data(), size, &v) != txn::ObjectState::kOk ||
        !ChunkData(v.payload, idx.tag, static_cast<uint32_t>(i), &data)) {
      return Lookup::kRetry;  // replaced since the index was read
    }
    value->append(data.data(), data.size());
  }
  return Lookup::kFound;
}

}  // namespace

absl::StatusOr<Lookup> LookupOnce(const ShardInfo& s, absl::string_view key, uint64_t h,
                                  CopyFn copy, const std::string* first_copy,
                                  std::vector<std::string>* scratch, std::string* value,
                                  const LocalFn* local) {
  const uint64_t home = s.Home(h);
  const uint64_t P = s.payload();
  const uint64_t H = s.neighbourhood;
  const char* live = nullptr;  // the neighbourhood in this node's memory, copied lazily
  uint64_t copied = H;         // buckets [0, copied) are in the copy
  if (first_copy == nullptr && local != nullptr) {
    absl::StatusOr<absl::Span<char>> m = (*local)(s.Bucket(home), H * s.bucket_bytes);
    if (!m.ok()) return m.status();
    live = m->data();
    copied = 0;
    if (scratch->empty()) scratch->emplace_back();
    (*scratch)[0].resize(H * s.bucket_bytes);
    first_copy = &(*scratch)[0];
  } else if (first_copy == nullptr) {
    const txn::Range r{s.Bucket(home), H * s.bucket_bytes};
    if (absl::Status st = copy(absl::MakeConstSpan(&r, 1), scratch); !st.ok()) return st;
    first_copy = &(*scratch)[0];
  }
  const std::string& neighbourhood = *first_copy;
  // Bucket i of the copy, copied first if the copy is lazy.
  auto bucket_at = [&](uint64_t i) {
    for (; copied <= i; ++copied) {
      txn::CopyLocalObject(live + copied * s.bucket_bytes,
                           (*scratch)[0].data() + copied * s.bucket_bytes, s.bucket_bytes);
    }
    return neighbourhood.data() + i * s.bucket_bytes;
  };
  uint64_t words[64];  // H <= 64
  GlobalAddress link;
  bool has_link = false;
  // Fetches an out-of-line item; kMissing if it is not `key`'s.
  auto fetch = [&](const Entry& e) -> absl::StatusOr<Lookup> {
    FARM_SYNC_POINT("kv::LookupOnce:BeforeItemRead");
    if (e.kind == kChunked) return FetchChunked(s, e, key, copy, value);
    const uint64_t size = ItemSize(e.key_len, e.value_len);
    const txn::Range r{e.object, txn::ObjectSpan(size)};
    std::vector<std::string> c;
    if (absl::Status st = copy(absl::MakeConstSpan(&r, 1), &c); !st.ok()) return st;
    txn::ObjectView v;
    if (txn::DecodeObject(c[0].data(), size, &v) != txn::ObjectState::kOk) return Lookup::kRetry;
    absl::string_view found;
    // Another key's (a hash collision, or the slot was reused): a miss, which is re-checked.
    if (!ItemValue(v.payload, e, key, &found)) return Lookup::kMissing;
    if (value != nullptr) value->assign(found.data(), found.size());
    return Lookup::kFound;
  };
  // Search first, verify after: only the bucket that holds the key must be consistent for a hit
  // (its check is computed once, not H times); a miss verifies them all. The search reads bytes
  // that may be torn, which ScanEntries' bounds checks make safe (a torn bucket fails its check).
  const uint64_t payload_at = txn::kObjectHeaderSize;
  for (uint64_t i = 0; i < H; ++i) {
    const char* bucket = bucket_at(i);
    std::memcpy(&words[i], bucket, 8);
    if (txn::IsLocked(words[i])) continue;  // verified below (a miss then retries)
    const absl::string_view payload(bucket + payload_at, P);
    const Entry* hit = nullptr;
    Entry candidate;
    bool torn = false;
    std::vector<Entry> out_of_line;
    const absl::Status scan = ScanEntries(payload, [&](const Entry& e) {
      if (e.delta != i) return true;
      if (e.kind == kInline) {
        if (e.key != key) return true;
        candidate = e;
        hit = &candidate;
        return false;
      }
      if (e.hash == h) out_of_line.push_back(e);
      return true;
    });
    if (!scan.ok()) torn = true;  // garbage: a torn copy (or corruption: the check tells)
    if (hit == nullptr && out_of_line.empty() && !torn) continue;
    txn::ObjectView v;
    absl::StatusOr<bool> consistent = BucketView(s, bucket, &v);
    if (!consistent.ok()) return consistent.status();
    if (!*consistent) return Lookup::kRetry;
    if (torn) return scan;  // consistent yet unparsable: not a table we wrote
    if (hit != nullptr) {
      if (value != nullptr) value->assign(hit->value.data(), hit->value.size());
      return Lookup::kFound;
    }
    for (const Entry& e : out_of_line) {
      absl::StatusOr<Lookup> f = fetch(e);
      if (!f.ok() || *f != Lookup::kMissing) return f;
    }
  }
  // A miss: every bucket must have been consistent.
  for (uint64_t i = 0; i < H; ++i) {
    txn::ObjectView v;
    absl::StatusOr<bool> consistent = BucketView(s, bucket_at(i), &v);
    if (!consistent.ok()) return consistent.status();
    if (!*consistent) return Lookup::kRetry;  // locked or torn
    if (i == 0) has_link = ReadLink(v.payload, &link);
  }
  // The overflow chain of the home bucket.
  std::vector<txn::Range> blocks;
  std::vector<uint64_t> block_words;
  for (int n = 0; has_link; ++n) {
    if (n > 1 << 20) return absl::DataLossError("an overflow chain does not end");
    FARM_SYNC_POINT("kv::LookupOnce:BeforeBlockRead");
    const txn::Range r{link, txn::ObjectSpan(P)};
    std::vector<std::string> c;
    if (absl::Status st = copy(absl::MakeConstSpan(&r, 1), &c); !st.ok()) return st;
    txn::ObjectView v;
    if (txn::DecodeObject(c[0].data(), P, &v) != txn::ObjectState::kOk) return Lookup::kRetry;
    absl::string_view block;
    if (!BlockEntries(s, home, v.payload, &block)) return Lookup::kRetry;  // freed and reused
    uint64_t w;
    std::memcpy(&w, c[0].data(), 8);
    blocks.push_back(txn::Range{link, 8});
    block_words.push_back(w);
    absl::StatusOr<std::vector<Entry>> entries = ParseEntries(block);
    if (!entries.ok()) return entries.status();
    for (const Entry& e : *entries) {
      if (e.kind == kInline) {
        if (e.key != key) continue;
        if (value != nullptr) value->assign(e.value.data(), e.value.size());
        return Lookup::kFound;
      }
      if (e.hash != h) continue;
      absl::StatusOr<Lookup> f = fetch(e);
      if (!f.ok() || *f != Lookup::kMissing) return f;
    }
    has_link = ReadLink(block, &link);
  }
  // Not found: only if nothing changed since the copies were made, which makes them one snapshot.
  if (FARM_MUTANT("kv_skip_miss_recheck")) return Lookup::kMissing;
  std::vector<txn::Range> again{txn::Range{s.Bucket(home), H * s.bucket_bytes}};
  again.insert(again.end(), blocks.begin(), blocks.end());
  std::vector<std::string> c;
  if (absl::Status st = copy(again, &c); !st.ok()) return st;
  for (uint64_t i = 0; i < H; ++i) {
    uint64_t w;
    std::memcpy(&w, c[0].data() + i * s.bucket_bytes, 8);
    if (w != words[i]) return Lookup::kRetry;
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    uint64_t w;
    std::memcpy(&w, c[1 + i].data(), 8);
    if (w != block_words[i]) return Lookup::kRetry;
  }
  return Lookup::kMissing;
}

absl::StatusOr<std::string> Client::Impl::Get(absl::string_view key,
                                              const std::string* first_copy) {
  std::string value;
  absl::StatusOr<bool> found = Find(key, first_copy, &value);
  if (!found.ok()) return found.status();
  if (!*found) return absl::NotFoundError("kv: no such key");
  return value;
}

absl::StatusOr<bool> Client::Impl::Find(absl::string_view key, const std::string* first_copy,
                                        std::string* value) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  uint64_t h = 0;
  absl::StatusOr<const ShardInfo*> s = Shard(key, &h);
  if (!s.ok()) return s.status();
  absl::Time deadline = absl::InfinitePast();
  absl::Duration pause = absl::Microseconds(1);
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<Lookup> l = LookupOnce(
        **s, key, h,
        [this](absl::Span<const txn::Range> r, std::vector<std::string>* o) { return Copy(r, o); },
        attempt == 0 ? first_copy : nullptr, &scratch, value);
    if (!l.ok()) return Annotate(l.status(), **s);
    if (*l != Lookup::kRetry) return *l == Lookup::kFound;
    if (attempt < 16) continue;
    if (deadline == absl::InfinitePast()) deadline = absl::Now() + ctx->timeout;
    if (absl::Now() > deadline) {
      return absl::AbortedError(absl::StrCat("kv: the key's buckets on node ", (*s)->node,
                                             " kept changing for ",
                                             absl::FormatDuration(ctx->timeout)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Microseconds(100));
  }
}

}  // namespace kv
}  // namespace farm
