#include "kv/kv.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/runtime_impl.h"
#include "kv/bucket.h"
#include "kv/glob.h"
#include "messaging/ring.h"
#include "platform/config.pb.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {
namespace {

// The seed of the hash that picks a key's shard: every node must agree on it before it knows any
// shard, so it is fixed (rendezvous hashing over a handful of nodes gives a flood nothing to
// collide in). Inside a shard, keys hash with the shard's own random seed (ShardInfo::seed).
constexpr uint64_t kPlacementSeed = 0x6b76'7461'626c'6531;  // "kvtable1"

// A key's 64-bit hash under `seed`: every byte counts (the rings' FrameHash reads whole words
// only). Not a cryptographic hash: the random seed keeps clients from choosing keys that share
// a home bucket without knowing it (hash flooding), as seeded table hashes do.
uint64_t KeyHash(uint64_t seed, absl::string_view key) {
  uint64_t h = Mix64(seed ^ key.size());
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, key.data() + i, 8);
    h = Mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  if (i < key.size()) {
    uint64_t w = 0;
    std::memcpy(&w, key.data() + i, key.size() - i);
    h = Mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
  }
  return Mix64(h);
}

// A shard as every node sees it (the Describe RPC's answer).
struct ShardInfo {
  uint32_t node = 0;
  // Random, drawn by the node that formatted the shard: the seed of its keys' hashes (KeyHash)
  // and of its overflow blocks' identity (BlockIdentity).
  uint64_t seed = 0;
  GlobalAddress first;      // bucket 0
  uint64_t buckets = 0;     // home buckets
  uint64_t total = 0;       // buckets + neighbourhood - 1: a neighbourhood never wraps
  uint32_t bucket_bytes = 0;
  uint32_t neighbourhood = 0;
  // Store-wide (every node has the same messaging rings): the largest object, and the bytes of
  // a chunk of a value too large for one object.
  uint64_t max_object = 0;
  uint64_t chunk_bytes = 0;

  uint64_t payload() const { return bucket_bytes - txn::kObjectHeaderSize; }
  GlobalAddress Bucket(uint64_t i) const {
    return GlobalAddress{first.region, first.offset + i * bucket_bytes};
  }
  uint64_t Home(uint64_t h) const { return Mix64(h ^ 0x9e3779b97f4a7c15ull) % buckets; }
};

// Where a shard node keeps its shard's description for a restart (Runtime::SaveRoot): what
// MakeShard needs besides the options, and the options it was made with.
struct ShardRoot {
  uint64_t first = 0;  // packed GlobalAddress of bucket 0
  uint64_t buckets = 0;
  uint64_t seed = 0;
  uint32_t bucket_bytes = 0;
  uint32_t neighbourhood = 0;
};
constexpr char kShardRootTag[8] = {'k', 'v', 's', 'h', 'a', 'r', 'd', '1'};

std::string EncodeShardRoot(const ShardRoot& r) {
  std::string out(kShardRootTag, sizeof(kShardRootTag));
  out.append(reinterpret_cast<const char*>(&r), sizeof(r));
  return out;
}

absl::StatusOr<ShardRoot> DecodeShardRoot(absl::string_view bytes) {
  ShardRoot r;
  if (bytes.size() != sizeof(kShardRootTag) + sizeof(r) ||
      std::memcmp(bytes.data(), kShardRootTag, sizeof(kShardRootTag)) != 0) {
    return absl::DataLossError("kv: the data directory's shard root is not one this version wrote");
  }
  std::memcpy(&r, bytes.data() + sizeof(kShardRootTag), sizeof(r));
  return r;
}

// An overflow block's payload: an identity word, then a bucket's layout (kv/bucket.h: link,
// entries). A reader follows a link it read earlier; by the time its READ arrives the block may
// have been freed and its slot reused, by another chain's block or by an out-of-line item of the
// same size whose bytes are a user's. The identity names the chain (its home bucket) under the
// shard's random seed, so neither can pass for the block the link pointed to: the reader sees
// that the chain changed and starts again, instead of parsing user bytes as entries.
constexpr uint64_t kBlockIdentityBytes = 8;

uint64_t BlockIdentity(const ShardInfo& s, uint64_t home) {
  return Mix64(s.seed ^ 0x6f76'6572'666c'6f77ull /* "overflow" */ ^ s.Bucket(home).Pack());
}

// The bucket-layout part of block `payload` of home bucket `home`'s chain; false if the payload
// is not such a block (any more).
bool BlockEntries(const ShardInfo& s, uint64_t home, absl::string_view payload,
                  absl::string_view* entries) {
  if (payload.size() < kBlockIdentityBytes) return false;
  uint64_t identity;
  std::memcpy(&identity, payload.data(), 8);
  if (identity != BlockIdentity(s, home) && !FARM_MUTANT("kv_skip_block_identity")) return false;
  *entries = payload.substr(kBlockIdentityBytes);
  return true;
}

// A shard as the Describe RPC carries the shards a node knows (in its request, the asker's; after
// the answer's header, the answerer's).
struct ShardEntry {
  uint32_t node = 0;
  uint32_t reserved = 0;
  uint64_t first = 0;
  uint64_t buckets = 0;
  uint64_t seed = 0;
};

// The Describe RPC's answer on the wire: the node's shard, then the other shards it knows
// (ShardEntry each).
struct DescribeReply {
  uint32_t has_shard = 0;
  uint32_t bucket_bytes = 0;
  uint32_t neighbourhood = 0;
  uint32_t lost = 0;  // 1: the node restarted; its shard lost the keys it held (Store::Impl::lost)
  uint64_t first = 0;
  uint64_t buckets = 0;
  uint64_t seed = 0;
};

// The statistics RPC's answer.
struct StatsReply {
  uint64_t buckets = 0, bucket_bytes = 0, items = 0, inline_items = 0, displaced_items = 0,
           overflow_blocks = 0,
           out_of_line_bytes = 0, memory_bytes = 0;
};

// GetRpc's answer: a status byte, then the value. A batched GET's answer (MultiGetAnswer) uses
// the others too.
enum RpcGetOutcome : char {
  kRpcFound = 'F',
  kRpcMissing = 'M',
  kRpcRetry = 'R',     // locked or torn: the handler must not wait for a commit; ask again
  kRpcDeferred = 'D',  // no room left in this answer: ask again
  kRpcTooLarge = 'L',  // the value does not fit any answer: read it one-sided
  kRpcError = 'E',     // the lookup failed (the status follows)
};

// The batched GET (Client::MultiGet by RPC, Store::Impl::ServeMultiGet). A request: the number
// of shards it names (32 bits), their bucket arrays' packed addresses (64 bits each), then per
// key the index of its shard in that list and its length (16 bits each) and its bytes. Built
// up to `limit` bytes (a message's) and kMaxKeys keys: the handler holds up the node's other
// requests (and the commits it applies) while it runs, so it looks up a bounded number of keys
// at a time; a MultiGet of more keys sends more requests, in flight together.
class MultiGetRequest {
 public:
  static constexpr size_t kMaxKeys = 64;

  explicit MultiGetRequest(uint64_t limit) : limit_(limit) {}

  // Adds `key` of the shard whose bucket array starts at `first`; false, adding nothing, when
  // the request would exceed its limits.
  bool Add(GlobalAddress first, absl::string_view key) {
    const uint64_t packed = first.Pack();
    const size_t index = std::find(shards_.begin(), shards_.end(), packed) - shards_.begin();
    const uint64_t grows = (index == shards_.size() ? 8 : 0) + 4 + key.size();
    if (size() + grows > limit_ || keys_ == kMaxKeys || key.size() > UINT16_MAX) return false;
    ++keys_;
    if (index == shards_.size()) shards_.push_back(packed);
    const uint16_t head[2] = {static_cast<uint16_t>(index), static_cast<uint16_t>(key.size())};
    entries_.append(reinterpret_cast<const char*>(head), sizeof(head));
    entries_.append(key.data(), key.size());
    return true;
  }
  std::string Encode() const {
    const uint32_t n = static_cast<uint32_t>(shards_.size());
    std::string out(reinterpret_cast<const char*>(&n), 4);
    out.append(reinterpret_cast<const char*>(shards_.data()), 8 * shards_.size());
    return out + entries_;
  }

 private:
  uint64_t size() const { return 4 + 8 * shards_.size() + entries_.size(); }
  const uint64_t limit_;
  size_t keys_ = 0;
  std::vector<uint64_t> shards_;  // packed
  std::string entries_;
};

// A batched GET's answer: per key, in order, one RpcGetOutcome byte; kRpcFound is followed by
// the value's length (32 bits) and the value, kRpcError by the status code and the message's
// length (32 bits each) and the message. At most `limit` bytes (a message's): a value that does
// not fit what is left is kRpcDeferred, and a full answer ends before the last key (the keys
// after its end are deferred too). The first key's value always fits unless it is kRpcTooLarge,
// so every answer settles at least one key.
class MultiGetAnswer {
 public:
  explicit MultiGetAnswer(uint64_t limit) : limit_(limit) {}
  bool full() const { return out_.size() >= limit_; }
  size_t deferred() const { return deferred_; }  // kRpcDeferred outcomes
  // Each adds the next key's outcome; not when full().
  void Outcome(RpcGetOutcome o) {
    if (o == kRpcDeferred) ++deferred_;
    out_.push_back(o);
  }
  void Found(absl::string_view value) {
    if (5 + value.size() > limit_) return Outcome(kRpcTooLarge);
    if (out_.size() + 5 + value.size() > limit_) return Outcome(kRpcDeferred);
    Outcome(kRpcFound);
    AppendWord(static_cast<uint32_t>(value.size()));
    out_.append(value.data(), value.size());
  }
  void Error(const absl::Status& st) {
    if (out_.size() + 9 > limit_) return Outcome(kRpcDeferred);
    const absl::string_view m = st.message().substr(0, limit_ - out_.size() - 9);
    Outcome(kRpcError);
    AppendWord(static_cast<uint32_t>(st.code()));
    AppendWord(static_cast<uint32_t>(m.size()));
    out_.append(m.data(), m.size());
  }
  std::string Take() { return std::move(out_); }

  // Reads the next key's outcome of `answer` (consumed from its front) into `outcome` and, for
  // kRpcFound, `value`, or, for kRpcError, `error`. False at its end (the remaining keys are
  // deferred); DataLoss for an answer that is not one.
  static absl::StatusOr<bool> Next(absl::string_view* answer, RpcGetOutcome* outcome,
                                   absl::string_view* value, absl::Status* error) {
    if (answer->empty()) return false;
    *outcome = static_cast<RpcGetOutcome>(answer->front());
    answer->remove_prefix(1);
    uint32_t code = 0;
    switch (*outcome) {
      case kRpcMissing:
      case kRpcRetry:
      case kRpcDeferred:
      case kRpcTooLarge:
        return true;
      case kRpcFound:
        if (!Counted(answer, value)) break;
        return true;
      case kRpcError:
        if (!Word(answer, &code) || !Counted(answer, value)) break;
        if (code == 0 || code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) break;
        *error = absl::Status(static_cast<absl::StatusCode>(code), *value);
        return true;
    }
    return absl::DataLossError("kv: a batched GET answer that is not one (truncated or unknown)");
  }

 private:
  static bool Word(absl::string_view* a, uint32_t* w) {
    if (a->size() < 4) return false;
    std::memcpy(w, a->data(), 4);
    a->remove_prefix(4);
    return true;
  }
  // A length (32 bits), then that many bytes.
  static bool Counted(absl::string_view* a, absl::string_view* bytes) {
    uint32_t len = 0;
    if (!Word(a, &len) || a->size() < len) return false;
    *bytes = a->substr(0, len);
    a->remove_prefix(len);
    return true;
  }
  void AppendWord(uint32_t w) { out_.append(reinterpret_cast<const char*>(&w), 4); }
  const uint64_t limit_;
  std::string out_;
  size_t deferred_ = 0;
};

// The shard node of a key: rendezvous hashing over the shard nodes (the configuration's nodes
// that form the cluster, the same list on every node).
size_t ShardOf(const std::vector<uint32_t>& nodes, uint64_t h) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const uint64_t score = Mix64(h ^ Mix64(0xc2b2ae3d27d4eb4full + nodes[i]));
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

uint64_t SlotBytes(uint64_t payload) {
  uint64_t slot = 64;
  while (slot < txn::ObjectSpan(payload)) slot <<= 1;
  return slot;
}

// An out-of-line item (kOutOfLine entries): an object whose payload is the key's and the
// value's lengths (32 bits each), the key, then the value. A reader follows its entry to it with
// a second READ, by which time the item may have been freed and its slot reused by another
// key's item of the same size; the lengths make "k3" + "0..." and "k30" + "..." differ.
constexpr uint64_t kItemHeader = 8;

uint64_t ItemSize(uint64_t key_len, uint64_t value_len) {
  return kItemHeader + key_len + value_len;
}

std::string EncodeItem(absl::string_view key, absl::string_view value) {
  std::string x(kItemHeader, '\0');
  const uint32_t k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(value.size());
  std::memcpy(&x[0], &k, 4);
  std::memcpy(&x[4], &v, 4);
  absl::StrAppend(&x, key, value);
  return x;
}

// The value in item `payload` if the item is `key`'s with the entry's lengths.
bool ItemValue(absl::string_view payload, const Entry& e, absl::string_view key,
               absl::string_view* value) {
  if (payload.size() != ItemSize(e.key_len, e.value_len)) return false;
  uint32_t k, v;
  std::memcpy(&k, payload.data(), 4);
  std::memcpy(&v, payload.data() + 4, 4);
  if (k != e.key_len || v != e.value_len || payload.substr(kItemHeader, k) != key) return false;
  *value = payload.substr(kItemHeader + k);
  return true;
}

// A value too large for one object (kChunked entries): chunk objects of ShardInfo::chunk_bytes
// each (the last one shorter), payload [tag, chunk number (32 bits), length (32 bits), data],
// and an index object, payload [tag, chunk count (32 bits), key length (32 bits: "k3" and "k30"
// pad alike), key padded to 8 bytes, chunk addresses]. The
// tag is drawn anew for every PUT, and chunks are never written after their PUT, so a reader
// that finds a chunk with the index's tag and number has that PUT's bytes: a chunk freed and
// reused since the index was read has another tag (or is free), and the reader retries.
constexpr uint64_t kChunkHeader = 16;

uint64_t ChunkCount(uint64_t value_len, uint64_t chunk_bytes) {
  return (value_len + chunk_bytes - 1) / chunk_bytes;
}
uint64_t ChunkLen(uint64_t value_len, uint64_t chunk_bytes, uint64_t i) {
  return std::min(chunk_bytes, value_len - i * chunk_bytes);
}
uint64_t IndexSize(uint64_t key_len, uint64_t value_len, uint64_t chunk_bytes) {
  return 16 + RoundUpTo8(key_len) + 8 * ChunkCount(value_len, chunk_bytes);
}

// A shard's random seed (ShardInfo::seed).
uint64_t NewSeed() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  return Mix64(r ^ static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
}

uint64_t NewTag() {
  static std::atomic<uint64_t> counter{0};
  return Mix64(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
               Mix64(counter.fetch_add(1, std::memory_order_relaxed)));
}

std::string EncodeChunk(uint64_t tag, uint32_t i, absl::string_view data) {
  std::string c(kChunkHeader, '\0');
  const uint32_t len = static_cast<uint32_t>(data.size());
  std::memcpy(&c[0], &tag, 8);
  std::memcpy(&c[8], &i, 4);
  std::memcpy(&c[12], &len, 4);
  c.append(data.data(), data.size());
  return c;
}

// The data of chunk `i` of the PUT tagged `tag`, or false if the payload is another one's.
bool ChunkData(absl::string_view payload, uint64_t tag, uint32_t i, absl::string_view* data) {
  if (payload.size() < kChunkHeader) return false;
  uint64_t t;
  uint32_t n, len;
  std::memcpy(&t, payload.data(), 8);
  std::memcpy(&n, payload.data() + 8, 4);
  std::memcpy(&len, payload.data() + 12, 4);
  if (t != tag || n != i || kChunkHeader + len != payload.size()) return false;
  *data = payload.substr(kChunkHeader);
  return true;
}

struct IndexView {
  uint64_t tag = 0;
  absl::string_view key;
  std::vector<GlobalAddress> chunks;
};

std::string EncodeIndex(uint64_t tag, absl::string_view key,
                        const std::vector<GlobalAddress>& chunks) {
  std::string x(16, '\0');
  const uint32_t n = static_cast<uint32_t>(chunks.size());
  const uint32_t k = static_cast<uint32_t>(key.size());
  std::memcpy(&x[0], &tag, 8);
  std::memcpy(&x[8], &n, 4);
  std::memcpy(&x[12], &k, 4);
  x.append(key.data(), key.size());
  x.resize(16 + RoundUpTo8(key.size()), '\0');
  for (const GlobalAddress& a : chunks) {
    const uint64_t w = a.Pack();
    x.append(reinterpret_cast<const char*>(&w), 8);
  }
  return x;
}

bool DecodeIndex(absl::string_view payload, const Entry& e, uint64_t chunk_bytes, IndexView* out) {
  const uint64_t n = ChunkCount(e.value_len, chunk_bytes);
  if (payload.size() != IndexSize(e.key_len, e.value_len, chunk_bytes)) return false;
  uint32_t count, key_len;
  std::memcpy(&out->tag, payload.data(), 8);
  std::memcpy(&count, payload.data() + 8, 4);
  std::memcpy(&key_len, payload.data() + 12, 4);
  if (count != n || key_len != e.key_len) return false;
  out->key = payload.substr(16, e.key_len);
  out->chunks.resize(n);
  const char* a = payload.data() + 16 + RoundUpTo8(e.key_len);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w;
    std::memcpy(&w, a + 8 * i, 8);
    out->chunks[i] = GlobalAddress::Unpack(w);
  }
  return true;
}

// DataLoss for memory where a bucket should be that holds no bucket: free, or an object of
// another size. Buckets are never freed or resized, so that is not a change to wait out: the
// shard's memory was overwritten, or the description of the shard is not the shard's.
absl::Status NotABucket(const ShardInfo& s, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("kv: the shard on node ", s.node, " at ",
                                          s.first.ToString(), " does not hold buckets there (",
                                          what, "): its memory was overwritten"));
}

// A copy of a bucket: true if consistent (`v` is its view), false if it was being written
// (locked or torn: read it again), DataLoss if it is not a bucket.
absl::StatusOr<bool> BucketView(const ShardInfo& s, const char* copy, txn::ObjectView* v) {
  const txn::ObjectState state = txn::DecodeObject(copy, s.payload(), v);
  if (state == txn::ObjectState::kOk) return true;
  if (state == txn::ObjectState::kFree || state == txn::ObjectState::kWrongSize) {
    return NotABucket(s, txn::ObjectStateName(state));
  }
  return false;
}

// Copies ranges of the shared address space: remote READs, or local copies (CopyRanges' contract).
using CopyFn = absl::FunctionRef<absl::Status(absl::Span<const txn::Range>,
                                              std::vector<std::string>*)>;

enum class Lookup { kFound, kMissing, kRetry };

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

// This node's memory of a range of the shared address space (Runtime::Local).
using LocalFn = absl::FunctionRef<absl::StatusOr<absl::Span<char>>(GlobalAddress, uint64_t)>;

// One lock-free lookup of `key` in shard `s` (see kv.h, "Consistency"). `first_copy`, if given,
// is a copy of the neighbourhood made already (MultiGet); otherwise it is copied into `scratch`
// (kept by the caller, so that its memory is reused): with one `copy` of the whole neighbourhood
// (a READ), or, where `local` is given (the shard is in this node's memory), bucket by bucket as
// the search reaches them (txn::CopyLocalObject each), so that a hit in the first bucket copies
// that bucket alone. Buckets copied at different moments are no weaker than one READ, which
// promises no order among its bytes either: each bucket is checked on its own, and a miss checks
// them all again at the end. kRetry: something changed under it. A null `value` asks only whether
// the key is there: a hit copies no value (an out-of-line item is still read, for its key; a
// chunked value's chunks are not).
absl::StatusOr<Lookup> LookupOnce(const ShardInfo& s, absl::string_view key, uint64_t h,
                                  CopyFn copy, const std::string* first_copy,
                                  std::vector<std::string>* scratch, std::string* value,
                                  const LocalFn* local = nullptr) {
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

// NotFound or InvalidArgument from an object that an entry or a link pointed to: it was freed,
// or reused with another size, by a commit after the transaction read the pointer, so the
// transaction cannot commit: Aborted (Worker::Run runs it again). Other errors pass on.
absl::Status TableChanged(absl::Status st) {
  if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) {
    return absl::AbortedError(
        absl::StrCat("kv: the table changed while it was read (", st.message(), ")"));
  }
  return st;
}

// A key's part of the table inside one transaction: its neighbourhood, the overflow chain of its
// home bucket, and (for displacement) the buckets after the neighbourhood.
class TableTxn {
 public:
  TableTxn(txn::Transaction& t, const ShardInfo& s, absl::string_view key, uint64_t h,
           uint64_t inline_max)
      : t_(t), s_(s), key_(key), h_(h), home_(s.Home(h)), inline_max_(inline_max) {}

  // Reads the key's neighbourhood (one READ, unless ReadNeighbourhoods did) and its overflow
  // chain (a READ per block).
  absl::Status Load() {
    std::vector<std::string> payloads;
    if (prefetched_) {
      payloads = std::move(prefetched_payloads_);
      prefetched_ = false;
      // Read with the other keys' neighbourhoods, before their changes: what ReadRun would give
      // now is the same copy with this transaction's writes since.
      for (uint64_t i = 0; i < payloads.size(); ++i) {
        if (std::optional<absl::string_view> w = t_.PendingWrite(s_.Bucket(home_ + i))) {
          payloads[i] = std::string(*w);
        }
      }
    } else {
      NoteTouched();
      if (absl::Status st = Buckets(t_.ReadRun(s_.Bucket(home_), s_.bucket_bytes, s_.payload(),
                                               s_.neighbourhood, &payloads));
          !st.ok()) {
        return st;
      }
    }
    for (uint64_t i = 0; i < payloads.size(); ++i) {
      bufs_.push_back(Buf{s_.Bucket(home_ + i), std::move(payloads[i])});
    }
    GlobalAddress link;
    bool has = ReadLink(bufs_[0].payload, &link);
    for (int n = 0; has; ++n) {
      if (n > 1 << 20) return absl::DataLossError("an overflow chain does not end");
      Buf b{link, std::string()};
      FARM_SYNC_POINT("kv::TableTxn::Load:BeforeBlockRead");
      if (t_.Touched(link)) touched_before_.insert(link.Pack());
      std::string block;
      if (absl::Status st = ReadItem(link, s_.payload(), &block); !st.ok()) return st;
      absl::string_view entries;
      if (!BlockEntries(s_, home_, block, &entries)) {
        // The link was read before a commit freed the block and its slot was reused: this
        // transaction read a chain that is gone, and cannot commit.
        return absl::AbortedError("kv: an overflow block changed while it was read");
      }
      b.identity = block.substr(0, kBlockIdentityBytes);
      b.payload = std::string(entries);
      has = ReadLink(b.payload, &link);
      chain_.push_back(bufs_.size());
      bufs_.push_back(std::move(b));
    }
    FARM_SYNC_POINT("kv::TableTxn::Load:Done");
    return absl::OkStatus();
  }

  // The neighbourhoods of several keys (tables of one transaction, to be loaded and changed in
  // this order) with their READs in flight together: each table's Load then takes its copy
  // instead of reading. The read set is what each key's ReadRun would have recorded. A bucket
  // that another of the keys may read (its neighbourhood, or the buckets its displacement may
  // read) counts as read before, so that a key's change keeps validating what another key's
  // outcome depends on, as when the keys are changed one after another. On an error, `*failed`
  // is the table it concerns (tables.size(): the batch's READ).
  static absl::Status ReadNeighbourhoods(txn::Transaction& t, absl::Span<TableTxn* const> tables,
                                         size_t* failed) {
    *failed = tables.size();
    std::vector<txn::Transaction::ObjectRun> runs;
    for (TableTxn* table : tables) {
      table->NoteTouched();
      table->NoteShared(tables);
      runs.push_back(table->NeighbourhoodRun(&table->prefetched_payloads_));
    }
    absl::Status st = t.ReadRuns(runs, failed);
    if (*failed < tables.size()) st = tables[*failed]->Buckets(st);
    if (!st.ok()) return st;
    for (TableTxn* table : tables) table->prefetched_ = true;
    return absl::OkStatus();
  }

  // Reads an object an entry points to. The entry may be stale (a bucket this transaction read
  // before a concurrent commit replaced the item): a freed or resized object then means "changed",
  // and the transaction, which could not have committed, runs again.
  absl::Status ReadItem(GlobalAddress addr, uint64_t size, std::string* out) {
    return Changed(t_.Read(addr, size, out));
  }
  // Frees an object an entry points to that this transaction did not read (a chunk): gone
  // already means "changed", as for ReadItem.
  absl::Status FreeItem(GlobalAddress addr) { return Changed(t_.Free(addr)); }

  struct Loc {
    size_t buf = 0;
    Entry entry;
    std::string value;   // the current value (chunked: after LoadValue)
    bool loaded = true;  // false for a chunked value not read yet
    IndexView index;     // chunked only (its key view is not kept)
  };

  // Where the key is (with its value, unless chunked); nullopt if absent.
  absl::StatusOr<std::optional<Loc>> Find() {
    const uint64_t H = s_.neighbourhood;
    for (size_t b = 0; b < bufs_.size(); ++b) {
      const bool in_chain = b >= H;
      absl::StatusOr<std::vector<Entry>> entries = ParseEntries(bufs_[b].payload);
      if (!entries.ok()) return entries.status();
      for (const Entry& e : *entries) {
        if (!in_chain && e.delta != b) continue;
        if (e.kind == kInline) {
          if (e.key != key_) continue;
          return std::optional<Loc>(Loc{b, e, std::string(e.value)});
        }
        if (e.hash != h_) continue;
        if (e.kind == kChunked) {
          std::string obj;
          const uint64_t isize = IndexSize(e.key_len, e.value_len, s_.chunk_bytes);
          if (absl::Status st = ReadItem(e.object, isize, &obj); !st.ok()) return st;
          Loc loc{b, e, std::string(), false};
          if (!DecodeIndex(obj, e, s_.chunk_bytes, &loc.index)) {
            return absl::AbortedError("kv: an item changed while it was read");  // reused
          }
          if (loc.index.key != key_) continue;
          loc.index.key = absl::string_view();
          return std::optional<Loc>(std::move(loc));
        }
        std::string obj;
        if (absl::Status st = ReadItem(e.object, ItemSize(e.key_len, e.value_len), &obj);
            !st.ok()) {
          return st;
        }
        absl::string_view found;
        if (!ItemValue(obj, e, key_, &found)) continue;
        return std::optional<Loc>(Loc{b, e, std::string(found)});
      }
    }
    return std::optional<Loc>();
  }

  // Reads a chunked value's chunks (one READ each, inside the transaction).
  absl::Status LoadValue(Loc& at) {
    if (at.loaded) return absl::OkStatus();
    at.value.clear();
    for (uint64_t i = 0; i < at.index.chunks.size(); ++i) {
      std::string c;
      const uint64_t size = kChunkHeader + ChunkLen(at.entry.value_len, s_.chunk_bytes, i);
      if (absl::Status st = ReadItem(at.index.chunks[i], size, &c); !st.ok()) return st;
      absl::string_view data;
      if (!ChunkData(c, at.index.tag, static_cast<uint32_t>(i), &data)) {
        // Only possible if the index changed since this transaction read it: it will not commit.
        return absl::AbortedError("kv: a value changed while it was read");
      }
      at.value.append(data.data(), data.size());
    }
    at.loaded = true;
    return absl::OkStatus();
  }

  // Sets the key's value (`at`: where it is now, if it is).
  absl::Status Put(const std::optional<Loc>& at, absl::string_view value) {
    const bool want_inline = InlineEntryBytes(key_.size(), value.size()) <= inline_max_;
    const bool want_chunked =
        !want_inline && ItemSize(key_.size(), value.size()) > s_.max_object;
    if (at.has_value()) {
      const Entry& e = at->entry;
      if (!want_inline && !want_chunked && e.kind == kOutOfLine && e.value_len == value.size()) {
        // In place (a concurrent free of the item may have handed its slot to an Alloc of this
        // transaction: then the item changed).
        return Changed(t_.Write(e.object, EncodeItem(key_, value)));
      }
      if (want_inline && e.kind == kInline && e.value_len == value.size()) {
        Buf& b = bufs_[at->buf];
        std::memcpy(b.payload.data() + e.offset + kEntryHeaderBytes + e.key_len, value.data(),
                    value.size());
        b.dirty = true;
        return Flush();
      }
      if (absl::Status st = Remove(*at); !st.ok()) return st;
    }
    std::string entry;
    const txn::AllocHint near{txn::AllocHint::Kind::kNear, 0, s_.Bucket(home_), 0};
    if (want_inline) {
      entry = EncodeInline(0, key_, value);
    } else if (want_chunked) {
      const uint64_t tag = NewTag();
      std::vector<GlobalAddress> chunks;
      for (uint64_t i = 0; i < ChunkCount(value.size(), s_.chunk_bytes); ++i) {
        const absl::string_view data =
            value.substr(i * s_.chunk_bytes, ChunkLen(value.size(), s_.chunk_bytes, i));
        absl::StatusOr<GlobalAddress> c = t_.Alloc(kChunkHeader + data.size(), near);
        if (!c.ok()) return c.status();
        if (absl::Status st = t_.Write(*c, EncodeChunk(tag, static_cast<uint32_t>(i), data));
            !st.ok()) {
          return st;
        }
        chunks.push_back(*c);
      }
      absl::StatusOr<GlobalAddress> index =
          t_.Alloc(IndexSize(key_.size(), value.size(), s_.chunk_bytes), near);
      if (!index.ok()) return index.status();
      if (absl::Status st = t_.Write(*index, EncodeIndex(tag, key_, chunks)); !st.ok()) return st;
      entry = EncodeOutOfLine(0, static_cast<uint32_t>(key_.size()),
                              static_cast<uint32_t>(value.size()), h_, *index, kChunked);
    } else {
      absl::StatusOr<GlobalAddress> obj =
          t_.Alloc(ItemSize(key_.size(), value.size()), near);
      if (!obj.ok()) return obj.status();
      if (absl::Status st = t_.Write(*obj, EncodeItem(key_, value)); !st.ok()) return st;
      entry = EncodeOutOfLine(0, static_cast<uint32_t>(key_.size()),
                              static_cast<uint32_t>(value.size()), h_, *obj);
    }
    if (absl::Status st = Insert(entry); !st.ok()) return st;
    return Flush();
  }

  absl::Status Delete(const Loc& at) {
    if (absl::Status st = Remove(at); !st.ok()) return st;
    return Flush();
  }

  // After a change to a key that was found at `at`: the buckets and blocks this lookup read
  // only to find the key do not decide the outcome, so Commit need not validate them (on the
  // software providers that saves a READ per bucket). The key is in one place only, and whoever
  // moves or removes it writes that place, so the bucket or block that holds it stays in the
  // read set (or is written); what this transaction had read before the lookup stays too. A
  // lookup that did not find the key keeps everything: "absent" depends on every bucket.
  void ReleaseLookupReads(const Loc& at) {
    for (size_t b = 0; b < bufs_.size(); ++b) {
      if (b == at.buf || bufs_[b].written || bufs_[b].freed) continue;
      if (touched_before_.count(bufs_[b].addr.Pack()) > 0) continue;
      t_.ReleaseRead(bufs_[b].addr);
    }
  }

 private:
  struct Buf {
    GlobalAddress addr;
    std::string payload;  // a bucket's layout (kv/bucket.h); a block's after its identity
    bool dirty = false;
    bool written = false;  // by Flush
    bool freed = false;
    std::string identity;  // an overflow block's identity word (BlockIdentity); empty: bucket
  };

  txn::Transaction::ObjectRun NeighbourhoodRun(std::vector<std::string>* out) const {
    return txn::Transaction::ObjectRun{s_.Bucket(home_), s_.bucket_bytes, s_.payload(),
                                       s_.neighbourhood, out};
  }
  // The neighbourhood's buckets this transaction read or wrote before this key's lookup
  // (ReleaseLookupReads keeps them).
  void NoteTouched() {
    for (uint64_t i = 0; i < s_.neighbourhood; ++i) {
      if (t_.Touched(s_.Bucket(home_ + i))) touched_before_.insert(s_.Bucket(home_ + i).Pack());
    }
  }
  // The same for the buckets of the neighbourhood that the other tables' lookups or
  // displacements (Displace: up to 4 H buckets after their neighbourhood) may read.
  void NoteShared(absl::Span<TableTxn* const> tables) {
    const uint64_t H = s_.neighbourhood;
    for (const TableTxn* other : tables) {
      if (other == this || other->s_.first != s_.first) continue;
      const uint64_t lo = std::max(home_, other->home_);
      const uint64_t hi = std::min(home_ + H, other->home_ + 5 * H);
      for (uint64_t b = lo; b < hi; ++b) touched_before_.insert(s_.Bucket(b).Pack());
    }
  }

  // NotFound or InvalidArgument from an object an entry or link pointed to: it was freed, or
  // reused with another size, by a commit after this transaction read the pointer, so this
  // transaction cannot commit: it runs again. (The same codes from the bucket array are not
  // changes: they pass on.)
  // The same codes from reads of the bucket array (never freed or resized): DataLoss.
  absl::Status Buckets(absl::Status st) const {
    if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) return NotABucket(s_, st.message());
    return st;
  }
  static absl::Status Changed(absl::Status st) { return TableChanged(std::move(st)); }

  // Takes the entry out of its bucket or block (and frees its out-of-line object); an overflow
  // block left empty is unlinked and freed.
  absl::Status Remove(const Loc& at) {
    Buf& b = bufs_[at.buf];
    RemoveEntry(&b.payload, at.entry);
    b.dirty = true;
    if (at.entry.kind == kOutOfLine || at.entry.kind == kChunked) {
      if (absl::Status st = t_.Free(at.entry.object); !st.ok()) return st;
    }
    if (at.entry.kind == kChunked) {
      for (const GlobalAddress& c : at.index.chunks) {
        if (absl::Status st = FreeItem(c); !st.ok()) return st;
      }
    }
    if (at.buf < s_.neighbourhood) return absl::OkStatus();
    absl::StatusOr<std::vector<Entry>> left = ParseEntries(b.payload);
    if (!left.ok()) return left.status();
    if (!left->empty()) return absl::OkStatus();
    // Unlink: the predecessor (home bucket or previous block) takes this block's link.
    const auto pos = std::find(chain_.begin(), chain_.end(), at.buf);
    Buf& pred = pos == chain_.begin() ? bufs_[0] : bufs_[*(pos - 1)];
    GlobalAddress next;
    const bool has_next = ReadLink(b.payload, &next);
    WriteLink(&pred.payload, has_next ? &next : nullptr);
    pred.dirty = true;
    b.freed = true;
    chain_.erase(pos);
    return t_.Free(b.addr);
  }

  // Places an encoded entry: in the neighbourhood, by displacing other keys' entries further out,
  // or in the overflow chain.
  absl::Status Insert(std::string entry) {
    const uint64_t H = s_.neighbourhood;
    for (uint64_t i = 0; i < H; ++i) {
      SetDelta(&entry, static_cast<uint8_t>(i));
      if (AppendEntry(&bufs_[i].payload, entry)) {
        bufs_[i].dirty = true;
        return absl::OkStatus();
      }
    }
    absl::StatusOr<bool> displaced = Displace(entry);
    if (!displaced.ok()) return displaced.status();
    if (*displaced) return absl::OkStatus();
    SetDelta(&entry, 0);
    for (size_t b : chain_) {
      if (AppendEntry(&bufs_[b].payload, entry)) {
        bufs_[b].dirty = true;
        return absl::OkStatus();
      }
    }
    // A new overflow block at the head of the chain.
    absl::StatusOr<GlobalAddress> block = t_.Alloc(
        s_.payload(), txn::AllocHint{txn::AllocHint::Kind::kNear, 0, s_.Bucket(home_), 0});
    if (!block.ok()) return block.status();
    Buf nb{*block, std::string(s_.payload() - kBlockIdentityBytes, '\0')};
    const uint64_t identity = BlockIdentity(s_, home_);
    nb.identity.assign(reinterpret_cast<const char*>(&identity), 8);
    GlobalAddress old;
    const bool has_old = ReadLink(bufs_[0].payload, &old);
    WriteLink(&nb.payload, has_old ? &old : nullptr);
    if (!AppendEntry(&nb.payload, entry)) {
      return absl::InternalError("an entry does not fit an empty overflow block");
    }
    nb.dirty = true;
    WriteLink(&bufs_[0].payload, &*block);
    bufs_[0].dirty = true;
    chain_.insert(chain_.begin(), bufs_.size());
    bufs_.push_back(std::move(nb));
    return absl::OkStatus();
  }

  // Hopscotch displacement: finds a bucket after the neighbourhood with room, and moves entries
  // of other keys back-to-front into it until the room is inside the neighbourhood. False when
  // that is not possible within kReach buckets (nothing is changed then).
  absl::StatusOr<bool> Displace(std::string& entry) {
    const uint64_t H = s_.neighbourhood;
    const uint64_t reach = std::min<uint64_t>(4 * H, s_.total - (home_ + H));
    if (reach == 0) return false;
    std::vector<std::string> ext;
    if (absl::Status st = Buckets(
            t_.ReadRun(s_.Bucket(home_ + H), s_.bucket_bytes, s_.payload(), reach, &ext));
        !st.ok()) {
      return st;
    }
    // Work on copies: bucket j of `work` is home + j.
    std::vector<std::string> work;
    for (uint64_t i = 0; i < H; ++i) work.push_back(bufs_[i].payload);
    for (std::string& p : ext) work.push_back(std::move(p));
    std::vector<bool> changed(work.size(), false);
    auto free_bytes = [&](uint64_t j) -> uint64_t {
      absl::StatusOr<std::vector<Entry>> e = ParseEntries(work[j]);
      return e.ok() ? FreeBytes(work[j], *e) : 0;
    };
    uint64_t free_at = H;
    while (free_at < work.size() && free_bytes(free_at) < entry.size()) ++free_at;
    if (free_at == work.size()) return false;
    for (int moves = 0; free_at >= H; ++moves) {
      if (moves > static_cast<int>(2 * H)) return false;
      bool moved = false;
      for (uint64_t j = free_at + 1 - H; j < free_at && !moved; ++j) {
        absl::StatusOr<std::vector<Entry>> entries = ParseEntries(work[j]);
        if (!entries.ok()) return entries.status();
        for (const Entry& e : *entries) {
          // Its home bucket (relative to ours; may be before it) must reach free_at.
          const int64_t e_home = static_cast<int64_t>(j) - e.delta;
          const int64_t dist = static_cast<int64_t>(free_at) - e_home;
          if (dist >= static_cast<int64_t>(H) || e.bytes > free_bytes(free_at)) continue;
          std::string bytes = work[j].substr(e.offset, e.bytes);
          SetDelta(&bytes, static_cast<uint8_t>(dist));
          AppendEntry(&work[free_at], bytes);
          RemoveEntry(&work[j], e);
          changed[free_at] = changed[j] = true;
          free_at = j;
          moved = true;
          break;
        }
      }
      if (!moved) return false;
    }
    SetDelta(&entry, static_cast<uint8_t>(free_at));
    if (!AppendEntry(&work[free_at], entry)) return false;
    changed[free_at] = true;
    for (uint64_t j = 0; j < work.size(); ++j) {
      if (!changed[j]) continue;
      if (j < H) {
        bufs_[j].payload = std::move(work[j]);
        bufs_[j].dirty = true;
      } else {
        bufs_.push_back(Buf{s_.Bucket(home_ + j), std::move(work[j]), true});
      }
    }
    return true;
  }

  absl::Status Flush() {
    for (Buf& b : bufs_) {
      if (!b.dirty || b.freed) continue;
      if (b.identity.empty()) {
        if (absl::Status st = t_.Write(b.addr, b.payload); !st.ok()) return st;
      } else if (absl::Status st = Changed(t_.Write(b.addr, absl::StrCat(b.identity, b.payload)));
                 !st.ok()) {
        // A block this transaction read was freed since, and an Alloc of this transaction got
        // its slot (the block then has this transaction's new object's size): the chain changed.
        return st;
      }
      b.dirty = false;
      b.written = true;
    }
    return absl::OkStatus();
  }

  txn::Transaction& t_;
  const ShardInfo& s_;
  const absl::string_view key_;
  const uint64_t h_;
  const uint64_t home_;
  const uint64_t inline_max_;
  // The neighbourhood's H buckets first (index i: home + i), then chain blocks and displaced
  // buckets in the order they were loaded or created.
  std::vector<Buf> bufs_;
  std::vector<size_t> chain_;  // indices into bufs_, in chain order
  absl::flat_hash_set<uint64_t> touched_before_;  // read or written before Load (packed)
  // The neighbourhood as ReadNeighbourhoods read it, for Load.
  bool prefetched_ = false;
  std::vector<std::string> prefetched_payloads_;
};

// The operations on a key's part of the table inside one transaction (the standalone calls
// run them in transactions of their own, the Txn& ones in the caller's).

// What an update sets: a view of the new value (valid until UpdateIn returns), or nullopt to leave
// the key as it is.
using NewValue = std::optional<absl::string_view>;

// One read-modify-write of the key: finds it and sets what `update` makes of its current value
// (`value`, null when the key is absent). With `read_value` false a chunked value's chunks are
// not read and `*value` is empty: the update may use only whether the key is there. The update
// may change `*value` (Append) or move it away (GetAndSet): UpdateIn no longer uses it. After a
// change, the lookup's reads that did not decide the outcome are released (ReleaseLookupReads);
// an update that changes nothing keeps them all, so that the commit validates what it saw (the
// transaction is then read-only).
absl::Status UpdateIn(TableTxn& table, bool read_value,
                      absl::FunctionRef<NewValue(std::string* value)> update) {
  absl::StatusOr<std::optional<TableTxn::Loc>> at = table.Find();
  if (!at.ok()) return at.status();
  if (read_value && at->has_value()) {
    if (absl::Status st = table.LoadValue(**at); !st.ok()) return st;
  }
  const NewValue next = update(at->has_value() ? &(*at)->value : nullptr);
  if (!next.has_value()) return absl::OkStatus();
  if (absl::Status st = table.Put(*at, *next); !st.ok()) return st;
  if (at->has_value()) table.ReleaseLookupReads(**at);
  return absl::OkStatus();
}

absl::Status PutIn(TableTxn& table, absl::string_view value) {
  return UpdateIn(table, false, [&](std::string*) { return NewValue(value); });
}

absl::Status DeleteIn(TableTxn& table, bool* deleted) {
  absl::StatusOr<std::optional<TableTxn::Loc>> at = table.Find();
  if (!at.ok()) return at.status();
  *deleted = at->has_value();
  if (!*deleted) return absl::OkStatus();
  if (absl::Status st = table.Delete(**at); !st.ok()) return st;
  table.ReleaseLookupReads(**at);
  return absl::OkStatus();
}

absl::Status GetIn(TableTxn& table, bool* found, std::string* value) {
  return UpdateIn(table, true, [&](std::string* current) {
    *found = current != nullptr;
    if (*found) *value = std::move(*current);
    return NewValue();
  });
}

// A decimal int64 as Redis reads one (string2ll, checked against redis-server 7.0): an optional
// '-', then digits, the first not '0' unless it is "0" alone (so neither "007" nor "-0"), and
// nothing else (no '+', no spaces, no decimal point); nullopt if it is not one or is outside
// int64.
std::optional<int64_t> ParseRedisInteger(absl::string_view s) {
  if (s == "0") return 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || s[0] < '1' || s[0] > '9') return std::nullopt;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  if (!negative) return v <= kMax ? std::optional<int64_t>(static_cast<int64_t>(v)) : std::nullopt;
  if (v > kMax + 1) return std::nullopt;
  return -static_cast<int64_t>(v - 1) - 1;  // -v without overflow for v = 2^63
}

// The conditions of PutIfAbsent and PutIfPresent (Client::Impl::PutIf).
bool Absent(const std::string* current) { return current == nullptr; }
bool Present(const std::string* current) { return current != nullptr; }

}  // namespace

// Batches by RPC where a one-sided READ is a system call or the target's work (ofi_rxm's
// emulation over TCP, libfabric's tcp provider, shm's cross-memory attach); see
// MultiGetPath::kAuto.
MultiGetPath ResolveMultiGet(MultiGetPath path, absl::string_view provider) {
  if (path != MultiGetPath::kAuto) return path;
  return provider == "tcp;ofi_rxm" || provider == "tcp" || provider == "shm"
             ? MultiGetPath::kRpc
             : MultiGetPath::kOneSided;
}

struct Store::Impl {
  Runtime* rt = nullptr;
  Options options;
  std::optional<ShardInfo> local;  // this node's shard
  uint64_t max_value = 0;
  uint64_t inline_max = 0;
  uint64_t max_object = 0;      // every node's (the rings are the same everywhere)
  uint64_t chunk_bytes = 0;     // of a chunked value
  uint64_t max_rpc_answer = 0;  // GetRpc's answer; a batched GET's request and answer

  // The shard nodes: the configuration's nodes that form the cluster (not `late`), the same
  // list on every node, whoever is a member now.
  std::vector<uint32_t> shard_nodes;
  // This node formed its shard after restarting (it joined a cluster that had formed without
  // it): the empty shard must not pose as the old one. Unless it takes the old one back
  // (`adopted`), its Describe and GET answers say DataLoss.
  bool lost = false;
  std::mutex mu;
  // The shards of other nodes learnt so far (Describe answers and requests carry every shard the
  // sender knows), kept across membership epochs: a shard's description never changes while its
  // bucket array's region exists, wherever that region is served (after its node failed, by a
  // promoted backup). One whose region is gone is dropped (Valid).
  absl::flat_hash_map<uint32_t, ShardInfo> known;
  // A restarted node's previous shard, taken back once another node described it and its region
  // still exists: served by its promoted backup, it holds every key the old process held.
  std::optional<ShardInfo> adopted;
  // The gathering of the other shard nodes' descriptions (shard nodes only: Gather), on a
  // thread of its own that uses a Worker: stopped by whichever goes first, this Store or its
  // Runtime (a stop hook, Runtime::Impl::stop_hooks: the usual order destroys the Runtime first).
  struct Gathering {
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;  // guarded by mu
    std::mutex join_mu;
    std::thread thread;     // guarded by join_mu
    void Stop() {
      {
        std::lock_guard<std::mutex> l(mu);
        stopping = true;
      }
      cv.notify_all();
      std::lock_guard<std::mutex> l(join_mu);
      if (thread.joinable()) thread.join();
    }
  };
  std::shared_ptr<Gathering> gathering = std::make_shared<Gathering>();

  ~Impl() { gathering->Stop(); }

  uint16_t describe_method() const { return options.first_method; }
  uint16_t get_method() const { return static_cast<uint16_t>(options.first_method + 1); }
  uint16_t stats_method() const { return static_cast<uint16_t>(options.first_method + 2); }
  uint16_t multi_get_method() const { return static_cast<uint16_t>(options.first_method + 3); }

  // Copies of this node's own memory (what the RPC handlers read).
  absl::Status LocalCopy(absl::Span<const txn::Range> ranges, std::vector<std::string>* out) {
    out->resize(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      absl::StatusOr<absl::Span<char>> m = rt->Local(ranges[i].addr, ranges[i].len);
      if (!m.ok()) return m.status();
      (*out)[i].resize(ranges[i].len);
      txn::CopyLocalObject(m->data(), (*out)[i].data(), ranges[i].len);
    }
    return absl::OkStatus();
  }

  // DataLoss for a shard that lost its keys in a restart (see `lost`).
  absl::Status LostError(uint32_t node) const {
    return absl::DataLossError(absl::StrCat(
        "kv: node ", node, " restarted and lost the keys its shard held (without replication, "
        "f = 0, the store keeps one copy of each key, on its shard node, and a shard node's "
        "death loses its keys; with it, they are lost once every copy of the shard's region "
        "is); its shard refuses to serve rather than pose as empty. Start the whole cluster "
        "again"));
  }

  // The shard whose bucket array starts at the packed address at the front of `request` (the
  // rest is returned in `rest`), as ServedShardAt.
  absl::StatusOr<ShardInfo> ServedShard(absl::string_view request, absl::string_view* rest) {
    if (request.size() < 8) return absl::InvalidArgumentError("kv: a request without its shard");
    uint64_t packed = 0;
    std::memcpy(&packed, request.data(), 8);
    *rest = request.substr(8);
    return ServedShardAt(GlobalAddress::Unpack(packed));
  }

  // The shard whose bucket array starts at `first`, if this node serves its region: its own, or
  // one whose region was promoted here. FailedPrecondition otherwise (the caller resolves the
  // region anew).
  absl::StatusOr<ShardInfo> ServedShardAt(GlobalAddress first) {
    std::optional<ShardInfo> s;
    {
      std::lock_guard<std::mutex> l(mu);
      if (local.has_value() && local->first == first) {
        if (lost) return LostError(local->node);
        s = local;
      }
      for (const auto& [node, info] : known) {
        if (!s.has_value() && info.first == first) s = info;
      }
      if (!s.has_value() && adopted.has_value() && adopted->first == first) s = adopted;
    }
    if (!s.has_value() || !rt->Local(first, s->bucket_bytes).ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv: node ", rt->node_id(), " does not serve the shard at ", first.ToString()));
    }
    return *s;
  }

  // One lookup of `key` in shard `s`, served by this node, in its own memory: the GET RPCs'. A
  // handler must not wait for a commit (this thread applies it): kRetry goes back to the caller.
  // Its value was the key's at the moment its bucket (or item) was copied, during the handler,
  // which runs between the caller's call and its return.
  absl::StatusOr<Lookup> LookupServed(const ShardInfo& s, absl::string_view key,
                                      std::vector<std::string>* scratch, std::string* value) {
    auto local = [this](GlobalAddress at, uint64_t len) { return rt->Local(at, len); };
    const LocalFn local_fn = local;
    return LookupOnce(
        s, key, KeyHash(s.seed, key),
        [this](absl::Span<const txn::Range> r, std::vector<std::string>* o) {
          return LocalCopy(r, o);
        },
        nullptr, scratch, value, &local_fn);
  }

  absl::StatusOr<std::string> ServeGet(absl::string_view request) {
    absl::string_view key;
    absl::StatusOr<ShardInfo> shard = ServedShard(request, &key);
    if (!shard.ok()) return shard.status();
    std::string value;
    std::vector<std::string> scratch;
    absl::StatusOr<Lookup> l = LookupServed(*shard, key, &scratch, &value);
    if (!l.ok()) return l.status();
    if (*l == Lookup::kRetry) return std::string(1, kRpcRetry);
    if (*l == Lookup::kMissing) return std::string(1, kRpcMissing);
    if (value.size() + 1 > max_rpc_answer) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "kv: a value of ", value.size(), " bytes does not fit one RPC answer (", max_rpc_answer,
          " bytes); read it with a one-sided GET"));
    }
    return absl::StrCat(std::string(1, kRpcFound), value);
  }

  // The batched GET (MultiGetRequest, MultiGetAnswer): each key exactly as ServeGet, its
  // shard's errors (not served here, lost) and its lookup's for that key alone.
  absl::StatusOr<std::string> ServeMultiGet(absl::string_view request) {
    uint32_t n = 0;
    if (request.size() >= 4) std::memcpy(&n, request.data(), 4);
    if (request.size() < 4 + 8 * uint64_t{n}) {
      return absl::InvalidArgumentError("kv: a batched GET without its shards");
    }
    std::vector<std::optional<absl::StatusOr<ShardInfo>>> shards(n);
    absl::string_view rest = request.substr(4 + 8 * uint64_t{n});
    MultiGetAnswer answer(max_rpc_answer);
    std::string value;
    std::vector<std::string> scratch;
    size_t looked_at = 0;
    for (; !rest.empty() && !answer.full(); ++looked_at) {
      uint16_t head[2];
      if (rest.size() < sizeof(head)) return absl::InvalidArgumentError("kv: a truncated batch");
      std::memcpy(head, rest.data(), sizeof(head));
      if (head[0] >= n || rest.size() < sizeof(head) + head[1]) {
        return absl::InvalidArgumentError("kv: a batched GET's key is not one");
      }
      const absl::string_view key = rest.substr(sizeof(head), head[1]);
      rest.remove_prefix(sizeof(head) + head[1]);
      std::optional<absl::StatusOr<ShardInfo>>& shard = shards[head[0]];
      if (!shard.has_value()) {
        uint64_t packed;
        std::memcpy(&packed, request.data() + 4 + 8 * head[0], 8);
        shard = ServedShardAt(GlobalAddress::Unpack(packed));
      }
      if (!shard->ok()) {
        answer.Error(shard->status());
        continue;
      }
      absl::StatusOr<Lookup> l = LookupServed(**shard, key, &scratch, &value);
      if (!l.ok()) {
        answer.Error(l.status());
      } else if (*l == Lookup::kFound) {
        answer.Found(value);
      } else {
        answer.Outcome(*l == Lookup::kMissing ? kRpcMissing : kRpcRetry);
      }
    }
    // Tests count the requests, the keys looked at (whose outcome the answer carries), and the
    // deferrals: values that did not fit, plus one if the answer filled before the last key.
    size_t carried[2] = {looked_at, answer.deferred() + (rest.empty() ? 0 : 1)};
    std::string out = answer.Take();
    FARM_SYNC_POINT_CALLBACK("kv::Store::ServeMultiGet:Answer", carried);
    return out;
  }

  absl::StatusOr<StatsReply> ServeStats(absl::string_view request) {
    StatsReply r;
    absl::string_view rest;
    absl::StatusOr<ShardInfo> shard = ServedShard(request, &rest);
    if (!shard.ok()) return shard.status();
    const ShardInfo& s = *shard;
    r.buckets = s.total;
    r.bucket_bytes = s.bucket_bytes;
    r.memory_bytes = s.total * s.bucket_bytes;
    std::vector<std::string> c;
    auto count = [&](absl::string_view payload) -> absl::Status {
      absl::StatusOr<std::vector<Entry>> entries = ParseEntries(payload);
      if (!entries.ok()) return entries.status();
      for (const Entry& e : *entries) {
        ++r.items;
        if (e.delta > 0) ++r.displaced_items;
        uint64_t slots = 0;
        if (e.kind == kInline) {
          ++r.inline_items;
        } else if (e.kind == kOutOfLine) {
          slots = SlotBytes(ItemSize(e.key_len, e.value_len));
        } else {
          slots = SlotBytes(IndexSize(e.key_len, e.value_len, s.chunk_bytes));
          for (uint64_t i = 0; i < ChunkCount(e.value_len, s.chunk_bytes); ++i) {
            slots += SlotBytes(kChunkHeader + ChunkLen(e.value_len, s.chunk_bytes, i));
          }
        }
        r.out_of_line_bytes += slots;
        r.memory_bytes += slots;
      }
      return absl::OkStatus();
    };
    for (uint64_t i = 0; i < s.total; ++i) {
      const txn::Range range{s.Bucket(i), s.bucket_bytes};
      if (absl::Status st = LocalCopy(absl::MakeConstSpan(&range, 1), &c); !st.ok()) return st;
      txn::ObjectView v;
      if (txn::DecodeObject(c[0].data(), s.payload(), &v) != txn::ObjectState::kOk) {
        continue;  // being written: counted as it was (statistics, not a snapshot)
      }
      const std::string payload(v.payload);
      if (absl::Status st = count(payload); !st.ok()) return st;
      GlobalAddress link;
      bool has = ReadLink(payload, &link);
      for (int n = 0; has && n < (1 << 20); ++n) {
        const txn::Range br{link, txn::ObjectSpan(s.payload())};
        if (!LocalCopy(absl::MakeConstSpan(&br, 1), &c).ok()) break;  // not on this node
        if (txn::DecodeObject(c[0].data(), s.payload(), &v) != txn::ObjectState::kOk) break;
        absl::string_view entries;
        if (!BlockEntries(s, i, v.payload, &entries)) break;  // freed and reused meanwhile
        const std::string block(entries);
        ++r.overflow_blocks;
        r.memory_bytes += SlotBytes(s.payload());
        if (absl::Status st = count(block); !st.ok()) return st;
        has = ReadLink(block, &link);
      }
    }
    return r;
  }

  // Whether region `id` is in this node's current membership (served, or recovering).
  bool RegionExists(uint32_t id) const {
    const control::Membership m = RuntimeAccess::Of(*rt).node->membership();
    for (const control::RegionInfo& r : m.regions()) {
      if (r.region_id() == id) return true;
    }
    return false;
  }

  // The node that serves the region of `addr` now: its shard node's, or a promoted backup.
  absl::StatusOr<uint32_t> ServingNode(GlobalAddress addr) const {
    absl::StatusOr<RemoteTarget> t = RuntimeAccess::Of(*rt).node->Resolve(addr, 8);
    if (!t.ok()) return t.status();
    return t->node_id;
  }

  // This node's own shard as others should use it: the one it took back after a restart, or the
  // one it formed (nullopt if it holds none).
  std::optional<ShardInfo> Own() const {  // mu held
    if (adopted.has_value()) return adopted;
    return local;
  }

  // Every shard this node knows, its own included (unless it restarted and lost it), on the wire.
  std::string EncodeKnown() {  // mu held
    std::string out;
    auto append = [&out](const ShardInfo& info) {
      ShardEntry e;
      e.node = info.node;
      e.first = info.first.Pack();
      e.buckets = info.buckets;
      e.seed = info.seed;
      out.append(reinterpret_cast<const char*>(&e), sizeof(e));
    };
    for (const auto& [node, info] : known) append(info);
    if (std::optional<ShardInfo> own = Own(); own.has_value() && !(lost && !adopted.has_value())) {
      append(*own);
    }
    return out;
  }

  // Takes in the shards of `entries` (ShardEntry each) whose regions exist, for the nodes this
  // node knows no valid shard of; a restarted node takes its previous shard back.
  void Learn(absl::string_view entries) {
    if (entries.size() % sizeof(ShardEntry) != 0) return;  // not from this store
    for (size_t i = 0; i < entries.size(); i += sizeof(ShardEntry)) {
      ShardEntry e;
      std::memcpy(&e, entries.data() + i, sizeof(e));
      if (e.buckets == 0 || e.buckets > (uint64_t{1} << 40)) continue;
      const ShardInfo info = MakeShard(e.node, e.first, e.buckets, e.seed);
      if (e.node == rt->node_id()) {
        if (!lost || adopted.has_value() || !RegionExists(info.first.region)) continue;
        adopted = info;
        spdlog::warn("kv: node {} restarted and takes its previous shard back (region {}, "
                     "served by its backup since): its keys are kept",
                     rt->node_id(), info.first.region);
        continue;
      }
      auto it = known.find(e.node);
      if (it != known.end() && RegionExists(it->second.first.region)) continue;
      if (!RegionExists(info.first.region)) continue;
      known[e.node] = info;
    }
  }

  // The Describe RPC: takes in what the asker knows; answers with this node's shard and what it
  // knows.
  std::string Describe(absl::string_view request) {
    std::lock_guard<std::mutex> l(mu);
    Learn(request);
    DescribeReply d;
    d.bucket_bytes = options.bucket_bytes;
    d.neighbourhood = options.neighbourhood;
    if (std::optional<ShardInfo> own = Own(); own.has_value()) {
      d.has_shard = 1;
      d.first = own->first.Pack();
      d.buckets = own->buckets;
      d.seed = own->seed;
      d.lost = lost && !adopted.has_value() ? 1 : 0;
    }
    std::string out(reinterpret_cast<const char*>(&d), sizeof(d));
    out += EncodeKnown();
    return out;
  }

  ShardInfo MakeShard(uint64_t node, uint64_t first, uint64_t buckets, uint64_t seed) const {
    ShardInfo s;
    s.node = static_cast<uint32_t>(node);
    s.seed = seed;
    s.first = GlobalAddress::Unpack(first);
    s.buckets = buckets;
    s.total = buckets + options.neighbourhood - 1;
    s.bucket_bytes = options.bucket_bytes;
    s.neighbourhood = options.neighbourhood;
    s.max_object = max_object;
    s.chunk_bytes = chunk_bytes;
    return s;
  }

  // Asks `node` to describe its shard (telling it what this node knows) and takes in what it
  // knows. Its own shard, or the error to report for it: FailedPrecondition for a node that
  // holds none or uses other options, DataLoss if it restarted and lost its keys; Unavailable
  // if it cannot be asked.
  absl::StatusOr<ShardInfo> Ask(Worker& w, uint32_t node, absl::Duration timeout) {
    std::string request;
    {
      std::lock_guard<std::mutex> l(mu);
      request = EncodeKnown();
    }
    absl::StatusOr<std::string> r = w.Call(node, describe_method(), request, timeout);
    if (!r.ok()) {
      return absl::UnavailableError(absl::StrCat("kv: the shard on node ", node,
                                                 " cannot be reached: ", r.status().message()));
    }
    DescribeReply d;
    if (r->size() < sizeof(d)) {
      return absl::DataLossError(absl::StrCat("kv: node ", node, " described its shard in ",
                                              r->size(), " bytes, not ", sizeof(d), " or more"));
    }
    std::memcpy(&d, r->data(), sizeof(d));
    {
      std::lock_guard<std::mutex> l(mu);
      Learn(absl::string_view(*r).substr(sizeof(d)));
    }
    if (d.bucket_bytes != options.bucket_bytes || d.neighbourhood != options.neighbourhood) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv: node ", node, " uses ", d.bucket_bytes, "-byte buckets and neighbourhood ",
          d.neighbourhood, "; this node uses ", options.bucket_bytes, " and ",
          options.neighbourhood, " (every node must use the same options)"));
    }
    if (d.has_shard == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kv: node ", node, " forms the cluster but holds no shard (start the nodes with --kv, "
          "or create their Store with hold_shard; client-only nodes must be late nodes)"));
    }
    if (d.lost != 0) return LostError(node);
    const ShardInfo s = MakeShard(node, d.first, d.buckets, d.seed);
    std::lock_guard<std::mutex> l(mu);
    if (node != rt->node_id()) known[node] = s;
    return s;
  }

  // A valid shard of `node` this node knows (its own included).
  std::optional<ShardInfo> Known(uint32_t node) {
    std::lock_guard<std::mutex> l(mu);
    if (node == rt->node_id()) {
      if (lost && !adopted.has_value()) return std::nullopt;
      return Own();
    }
    auto it = known.find(node);
    if (it == known.end()) return std::nullopt;
    if (!RegionExists(it->second.first.region)) {
      known.erase(it);  // its only copy went with its node (f = 0), or every copy failed
      return std::nullopt;
    }
    return it->second;
  }

  // Shard node `node`'s shard: known already, or asked of the node itself, or, when it cannot
  // answer (gone) or lost its keys in a restart, of the other members, which may know the shard
  // (its region lives on at its promoted backup). Unavailable while nobody can describe it (its
  // keys are unreachable); DataLoss once it restarted and its old shard is gone.
  absl::StatusOr<ShardInfo> DescribeNode(Worker& w, uint32_t node) {
    if (std::optional<ShardInfo> s = Known(node); s.has_value()) return *s;
    absl::StatusOr<ShardInfo> asked = Ask(w, node, absl::Seconds(10));
    if (asked.ok() || absl::IsFailedPrecondition(asked.status())) return asked;
    for (uint32_t m : rt->members()) {
      if (m == node || m == rt->node_id()) continue;
      (void)Ask(w, m, absl::Seconds(10));
      if (std::optional<ShardInfo> s = Known(node); s.has_value()) return *s;
    }
    return asked.status();
  }

  // On a shard node: asks every other shard node for its shard until each was described, so
  // that this node can describe them all to clients after any of them failed (their regions
  // served by promoted backups), and takes its own previous shard back if it restarted.
  // A node that answered without a shard (it holds none, uses other options, or restarted and
  // lost its keys) is not asked again; one that is not a member is asked once it is back.
  void Gather() {
    std::unique_ptr<Worker> w;
    std::set<uint32_t> answered;
    for (;;) {
      bool all = true;
      if (w == nullptr) {
        absl::StatusOr<std::unique_ptr<Worker>> made = rt->NewWorker();
        if (made.ok()) w = std::move(*made);
        all = false;
      }
      for (uint32_t n : shard_nodes) {
        if (w == nullptr) break;
        if (n == rt->node_id() || answered.count(n) || Known(n).has_value()) continue;
        all = false;
        if (!RuntimeAccess::Of(*rt).node->IsMember(n)) continue;
        absl::StatusOr<ShardInfo> s = Ask(*w, n, absl::Seconds(1));
        if (!s.ok() && !absl::IsUnavailable(s.status())) answered.insert(n);
      }
      if (all && w != nullptr) return;
      std::unique_lock<std::mutex> l(gathering->mu);
      if (gathering->cv.wait_for(l, std::chrono::milliseconds(100),
                                 [this] { return gathering->stopping; })) {
        return;
      }
    }
  }
};

absl::StatusOr<std::unique_ptr<Store>> Store::Create(Runtime& runtime, const Options& options) {
  const uint32_t bb = options.bucket_bytes;
  if (bb < 128 || bb > 4096 || (bb & (bb - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv: bucket_bytes must be a power of two from 128 to 4096, not ", bb));
  }
  if (options.neighbourhood < 1 || options.neighbourhood > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv: neighbourhood must be 1 to 64 buckets, not ", options.neighbourhood));
  }
  if (options.hold_shard && options.buckets == 0) {
    return absl::InvalidArgumentError("kv: a shard needs at least one bucket");
  }
  if (options.first_method + 3 >= kFirstReservedMethod) {
    return absl::InvalidArgumentError(absl::StrCat("kv: method ids ", options.first_method,
                                                   "..+3 reach the platform's own (from ",
                                                   kFirstReservedMethod, ")"));
  }
  auto impl = std::make_unique<Impl>();
  impl->rt = &runtime;
  impl->options = options;
  Runtime::Impl& rti = RuntimeAccess::Of(runtime);
  bool late = false;
  for (const config::NodeConfig& n : rti.node->config().node()) {
    if (!n.late()) impl->shard_nodes.push_back(n.id());
    if (n.id() == runtime.node_id()) late = n.late();
  }
  std::sort(impl->shard_nodes.begin(), impl->shard_nodes.end());
  if (options.hold_shard == late) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv: node ", runtime.node_id(),
        late ? " is a late node and cannot hold a shard (the shards are on the nodes that form "
               "the cluster)"
             : " forms the cluster (it is not `late` in the configuration), so it holds a shard; "
               "a node that only uses the store must be a late node"));
  }
  const uint64_t max_object = runtime.max_object_size();
  if (max_object < kMaxKeySize + 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv: objects of at most ", max_object, " bytes leave no room for values (larger rings)"));
  }
  impl->max_object = max_object;
  impl->chunk_bytes = std::min<uint64_t>(8192, (max_object - kChunkHeader) & ~uint64_t{7});
  // A chunked value's index holds the key and 8 bytes per chunk, in one object.
  const uint64_t max_chunks = (max_object - 16 - kMaxKeySize) / 8;
  impl->max_value = std::min<uint64_t>(kMaxValueSize, max_chunks * impl->chunk_bytes);
  impl->max_rpc_answer = rti.txn->max_message();
  const uint64_t payload = bb - txn::kObjectHeaderSize;
  impl->inline_max = ((payload - kBucketLinkBytes) / 2) & ~uint64_t{7};
  if (options.hold_shard) {
    // A cluster restarted from its data directories: the shard this node held is in its
    // restored memory, where the root says (Runtime::SaveRoot).
    const std::string root = absl::StrCat("kv-shard-", options.first_method);
    absl::StatusOr<std::string> kept = runtime.LoadRoot(root);
    if (kept.ok()) {
      absl::StatusOr<ShardRoot> r = DecodeShardRoot(*kept);
      if (!r.ok()) return r.status();
      if (r->buckets != options.buckets || r->bucket_bytes != options.bucket_bytes ||
          r->neighbourhood != options.neighbourhood) {
        return absl::FailedPreconditionError(absl::StrCat(
            "kv: node ", runtime.node_id(), "'s data directory holds a shard of ", r->buckets,
            " buckets of ", r->bucket_bytes, " bytes, neighbourhood ", r->neighbourhood,
            "; start the store with those options (or the node on an empty directory)"));
      }
      impl->local = impl->MakeShard(runtime.node_id(), r->first, r->buckets, r->seed);
      spdlog::info("kv: node {} serves its shard again from its data directory ({} buckets at {})",
                   runtime.node_id(), r->buckets, GlobalAddress::Unpack(r->first).ToString());
    } else if (!absl::IsNotFound(kept.status())) {
      return kept.status();
    } else {
      const uint64_t total = options.buckets + options.neighbourhood - 1;
      absl::StatusOr<GlobalAddress> first = rti.txn->CreateObjectArray(payload, total);
      if (!first.ok()) {
        return absl::Status(first.status().code(),
                            absl::StrCat("kv: this node's shard (", total, " buckets of ", bb,
                                         " bytes): ", first.status().message(),
                                         "; use fewer buckets or larger regions (region_size)"));
      }
      impl->local = impl->MakeShard(runtime.node_id(), first->Pack(), options.buckets, NewSeed());
      const ShardRoot r{impl->local->first.Pack(), impl->local->buckets, impl->local->seed,
                        options.bucket_bytes, options.neighbourhood};
      if (absl::Status s = runtime.SaveRoot(root, EncodeShardRoot(r));
          !s.ok() && !absl::IsFailedPrecondition(s)) {  // FailedPrecondition: no data directory
        return s;
      }
    }
    // The nodes that formed the cluster are listed from its first epoch on (1, or above the
    // stopped run's after a restart from data directories); one that joined later is a
    // restarted shard node (late nodes hold no shard).
    const control::Membership membership = rti.node->membership();
    const uint64_t first = std::max<uint64_t>(1, membership.first_epoch());
    for (const control::NodeInfo& n : membership.nodes()) {
      if (n.node_id() == runtime.node_id() && n.joined_epoch() > first) impl->lost = true;
    }
    if (impl->lost && rti.node->f() == 0) {
      spdlog::error("kv: node {} joined a running cluster: the keys its shard held before it "
                    "restarted are lost, and its shard answers DataLoss", runtime.node_id());
    } else if (impl->lost) {
      spdlog::warn("kv: node {} joined a running cluster: it takes its previous shard back once "
                   "another node describes it (served by its region's backup since); if that is "
                   "gone too, its shard answers DataLoss", runtime.node_id());
    }
  }
  Impl* p = impl.get();
  absl::Status st =
      runtime.Handle(p->describe_method(), [p](const Request& r) -> absl::StatusOr<std::string> {
        return p->Describe(r.payload);
      });
  if (st.ok()) {
    st = runtime.Handle(p->get_method(), [p](const Request& r) -> absl::StatusOr<std::string> {
      return p->ServeGet(r.payload);
    });
  }
  if (st.ok()) {
    st =
        runtime.Handle(p->multi_get_method(), [p](const Request& r) -> absl::StatusOr<std::string> {
          return p->ServeMultiGet(r.payload);
        });
  }
  if (st.ok()) {
    st = runtime.Handle(p->stats_method(), [p](const Request& r) -> absl::StatusOr<std::string> {
      absl::StatusOr<StatsReply> s = p->ServeStats(r.payload);
      if (!s.ok()) return s.status();
      return std::string(reinterpret_cast<const char*>(&*s), sizeof(*s));
    });
  }
  if (!st.ok()) return st;
  if (options.hold_shard) {
    {
      std::lock_guard<std::mutex> l(p->gathering->join_mu);
      p->gathering->thread = std::thread([p] { p->Gather(); });
    }
    std::lock_guard<std::mutex> l(rti.stop_hooks_mu);
    rti.stop_hooks.push_back([g = p->gathering] { g->Stop(); });
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;
Runtime& Store::runtime() const { return *impl_->rt; }
const Options& Store::options() const { return impl_->options; }
uint64_t Store::max_key_size() const { return kMaxKeySize; }
uint64_t Store::max_value_size() const { return impl_->max_value; }

struct Client::Impl {
  Store::Impl* store = nullptr;
  Worker* worker = nullptr;
  txn::ThreadContext* ctx = nullptr;
  // By position in store->shard_nodes, once described; checked again whenever the membership
  // epoch changes (`shards_epoch`): a shard whose region is gone is described anew.
  std::vector<std::optional<ShardInfo>> shards;
  uint64_t shards_epoch = 0;
  std::vector<std::string> scratch;  // GET's copies (their memory is reused)
  MultiGetPath multi_get = MultiGetPath::kOneSided;  // resolved: never kAuto
  // Of a MultiGet by RPC, a node's keys travel in one request only when it serves at least this
  // many of them (kAutoMinBatch when kAuto chose kRpc, else 1); the others are read one-sided.
  size_t min_batch = 1;

  absl::Status CheckKey(absl::string_view key) const {
    if (key.empty()) return absl::InvalidArgumentError("kv: a key has at least 1 byte");
    if (key.size() > kMaxKeySize) {
      return absl::InvalidArgumentError(absl::StrCat("kv: a key of ", key.size(),
                                                     " bytes is longer than the limit of ",
                                                     kMaxKeySize, " bytes"));
    }
    return absl::OkStatus();
  }
  absl::Status CheckValue(absl::string_view value) const {
    if (value.size() > store->max_value) {
      return absl::InvalidArgumentError(absl::StrCat("kv: a value of ", value.size(),
                                                     " bytes is larger than the limit of ",
                                                     store->max_value, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<const ShardInfo*> ShardAt(size_t i) {
    const uint64_t epoch = store->rt->epoch();
    if (shards.empty()) shards.resize(store->shard_nodes.size());
    if (epoch != shards_epoch) {
      // A shard lives as long as its bucket array's region, wherever that is served (after its
      // node failed, by a promoted backup); one whose region is gone (its node failed with no
      // backup, f = 0) is described anew: by a restarted node, as lost.
      for (std::optional<ShardInfo>& s : shards) {
        if (s.has_value() && !store->RegionExists(s->first.region)) s.reset();
      }
      shards_epoch = epoch;
    }
    if (!shards[i].has_value()) {
      absl::StatusOr<ShardInfo> s = store->DescribeNode(*worker, store->shard_nodes[i]);
      if (!s.ok()) return s.status();
      shards[i] = *s;
    }
    return &*shards[i];
  }
  // The shard of `key`, and the key's hash there (under the shard's seed).
  absl::StatusOr<const ShardInfo*> Shard(absl::string_view key, uint64_t* h) {
    absl::StatusOr<const ShardInfo*> s =
        ShardAt(ShardOf(store->shard_nodes, KeyHash(kPlacementSeed, key)));
    if (s.ok()) *h = KeyHash((*s)->seed, key);
    return s;
  }
  // The same for a key that may be malformed (InvalidArgument).
  absl::StatusOr<const ShardInfo*> CheckedShard(absl::string_view key, uint64_t* h) {
    if (absl::Status st = CheckKey(key); !st.ok()) return st;
    return Shard(key, h);
  }

  // An error of an operation on shard `s`, said in the store's terms.
  absl::Status Annotate(const absl::Status& st, const ShardInfo& s) const {
    if (st.ok() || absl::IsNotFound(st) || absl::IsInvalidArgument(st)) return st;
    if (absl::IsOutOfRange(st) || absl::IsUnavailable(st)) {
      return absl::UnavailableError(absl::StrCat("kv: the key's shard on node ", s.node,
                                                 " cannot be reached: ", st.message()));
    }
    return st;
  }

  absl::Status Copy(absl::Span<const txn::Range> r, std::vector<std::string>* o) {
    return txn::CopyRanges(*ctx, r, o);
  }

  // Lock-free GET.
  absl::StatusOr<std::string> Get(absl::string_view key, const std::string* first_copy) {
    std::string value;
    absl::StatusOr<bool> found = Find(key, first_copy, &value);
    if (!found.ok()) return found.status();
    if (!*found) return absl::NotFoundError("kv: no such key");
    return value;
  }

  // Lock-free lookup of `key`, retried while its buckets change under it: whether it is there,
  // with its value in `*value` unless that is null (LookupOnce: then no value is copied).
  absl::StatusOr<bool> Find(absl::string_view key, const std::string* first_copy,
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
          [this](absl::Span<const txn::Range> r, std::vector<std::string>* o) {
            return Copy(r, o);
          },
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

  // One key's lookup in MultiGetOneSided's second phase, run again from the start each round:
  // its copies are served in the order it asked for them from what earlier rounds read for it;
  // one it has not been given yet is recorded (`pending`) and the run stops there with an error,
  // to be read with the other keys' in the next round. LookupOnce asks for the same copies in
  // the same order when it is given the same bytes, so each round takes every key one step
  // further: what a key reads still comes after what it read before (each round's READs start
  // after the previous round's completed), as in Get.
  struct Replay {
    std::vector<std::vector<txn::Range>> asked;
    std::vector<std::vector<std::string>> got;  // by request, once read
    size_t next = 0;                            // the run's next request
    bool pending = false;                       // the run stopped at asked.back()
    absl::Status Copy(absl::Span<const txn::Range> r, std::vector<std::string>* o) {
      if (next < got.size()) {
        const std::vector<txn::Range>& a = asked[next];
        const bool same = std::equal(a.begin(), a.end(), r.begin(), r.end(),
                                     [](const txn::Range& x, const txn::Range& y) {
                                       return x.addr == y.addr && x.len == y.len;
                                     });
        if (!same) return absl::InternalError("kv: a replayed lookup asked for other bytes");
        *o = got[next++];
        return absl::OkStatus();
      }
      asked.emplace_back(r.begin(), r.end());
      pending = true;
      return absl::UnavailableError("kv: the copy is read in the next round");
    }
  };

  // MultiGet by one-sided READs (MultiGetPath::kOneSided) of keys `which` of `keys`: every
  // neighbourhood's READ posted together, then the keys' lookups (Get's, from those copies) in
  // rounds whose READs are posted together too (out-of-line values, overflow chains, a miss's
  // re-check: see Replay). A key whose buckets changed under it is looked up again alone, as
  // Get does it.
  void MultiGetOneSided(absl::Span<const std::string> keys, absl::Span<const size_t> which,
                        std::vector<absl::StatusOr<std::string>>* out) {
    std::vector<txn::Range> ranges;
    std::vector<size_t> read;
    std::vector<ShardInfo> shards;  // by entry of `read`; copies: Shard's may be re-described
    std::vector<uint64_t> hashes;
    for (size_t i : which) {
      uint64_t h = 0;
      absl::StatusOr<const ShardInfo*> s = CheckedShard(keys[i], &h);
      if (!s.ok()) {
        (*out)[i] = s.status();
        continue;
      }
      const ShardInfo& shard = **s;
      ranges.push_back(txn::Range{shard.Bucket(shard.Home(h)),
                                  uint64_t{shard.neighbourhood} * shard.bucket_bytes});
      read.push_back(i);
      shards.push_back(shard);
      hashes.push_back(h);
    }
    std::vector<std::string> copies;
    const absl::Status batch = Copy(ranges, &copies);
    if (!batch.ok()) {
      for (size_t i : read) (*out)[i] = Get(keys[i], nullptr);
      return;
    }
    std::vector<Replay> replays(read.size());
    std::vector<size_t> running(read.size());  // indices into `read` still being looked up
    for (size_t k = 0; k < read.size(); ++k) running[k] = k;
    std::vector<std::string> unused;
    while (!running.empty()) {
      std::vector<size_t> waiting;  // stopped at a copy not read yet
      for (size_t k : running) {
        const size_t i = read[k];
        Replay& r = replays[k];
        r.next = 0;
        r.pending = false;
        std::string value;
        absl::StatusOr<Lookup> l = LookupOnce(
            shards[k], keys[i], hashes[k],
            [&r](absl::Span<const txn::Range> rr, std::vector<std::string>* o) {
              return r.Copy(rr, o);
            },
            &copies[k], &unused, &value);
        if (r.pending) {
          waiting.push_back(k);
        } else if (!l.ok()) {
          (*out)[i] = Annotate(l.status(), shards[k]);
        } else if (*l == Lookup::kFound) {
          (*out)[i] = std::move(value);
        } else if (*l == Lookup::kMissing) {
          (*out)[i] = absl::NotFoundError("kv: no such key");
        } else {
          (*out)[i] = Get(keys[i], nullptr);  // changed under it: again, alone
        }
      }
      if (waiting.empty()) break;
      // The waiting keys' next copies, posted together.
      std::vector<txn::Range> next;
      for (size_t k : waiting) {
        const std::vector<txn::Range>& a = replays[k].asked.back();
        next.insert(next.end(), a.begin(), a.end());
      }
      // Tests count the rounds and the keys whose copies each one reads together.
      size_t batched = waiting.size();
      FARM_SYNC_POINT_CALLBACK("kv::Client::MultiGetOneSided:Round", &batched);
      std::vector<std::string> got;
      if (!Copy(next, &got).ok()) {
        for (size_t k : waiting) (*out)[read[k]] = Get(keys[read[k]], nullptr);
        break;
      }
      size_t at = 0;
      for (size_t k : waiting) {
        const size_t n = replays[k].asked.back().size();
        replays[k].got.emplace_back(std::make_move_iterator(got.begin() + at),
                                    std::make_move_iterator(got.begin() + at + n));
        at += n;
      }
      running = std::move(waiting);
    }
  }

  // A node's part of one round of a MultiGet by RPC: one request, and the keys it carries
  // (indices into the MultiGet's keys, in the request's order).
  struct NodeBatch {
    uint32_t node = 0;
    MultiGetRequest request;
    std::vector<size_t> keys;
  };

  // One MultiGet by RPC (MultiGetPath::kRpc): the keys that are not settled yet.
  struct RpcMultiGet {
    absl::Span<const std::string> keys;
    std::vector<absl::StatusOr<std::string>>* out;
    std::vector<std::optional<ShardInfo>> shard;  // by key; a copy: Shard's may be re-described
    std::vector<size_t> todo;                     // to ask in the next round
    std::vector<size_t> one_sided;                // to read one-sided at the end
    // Why a key in `todo` is there, for when the time is up: Aborted (kept changing) or the
    // refusal; OK for a deferred key (read one-sided then).
    std::vector<absl::Status> why;
    bool refused = false;   // in this round: pause before the next
    bool changing = false;  // a key's buckets were being written: pause after 16 rounds
  };

  // Rounds of batched GETs (MultiGetRequest), each with one request per node that serves keys'
  // shards (more when its keys do not fit one request), all in flight together
  // (Worker::CallAll). A key answered "retry" (its buckets were being written), deferred (no
  // room left in the answer) or refused (sent just before a configuration change, or to a node
  // that no longer serves its shard) is asked again in the next round, as GetRpc asks again,
  // until the client's timeout. The one-sided path reads what no answer can carry: the keys of
  // shards this node serves itself (a copy of its own memory), values larger than a message, and
  // keys whose lookup or request failed otherwise, which it answers as MultiGet by READs would
  // (e.g. Unavailable, or the value from a promoted backup).
  void MultiGetByRpc(absl::Span<const std::string> keys,
                     std::vector<absl::StatusOr<std::string>>* out) {
    RpcMultiGet m{keys, out, std::vector<std::optional<ShardInfo>>(keys.size())};
    m.why.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      uint64_t h = 0;
      absl::StatusOr<const ShardInfo*> s = CheckedShard(keys[i], &h);
      if (!s.ok()) {
        (*out)[i] = s.status();
        continue;
      }
      m.shard[i] = **s;
      m.todo.push_back(i);
    }
    const absl::Time deadline = absl::Now() + ctx->timeout;
    for (int round = 0; !m.todo.empty(); ++round) {
      std::vector<NodeBatch> batches = Batches(m, round == 0);
      std::vector<std::string> requests;
      std::vector<CallRequest> calls;
      for (const NodeBatch& b : batches) requests.push_back(b.request.Encode());
      for (size_t b = 0; b < batches.size(); ++b) {
        calls.push_back(CallRequest{batches[b].node, store->multi_get_method(), requests[b]});
      }
      const std::vector<absl::StatusOr<std::string>> answers = worker->CallAll(calls, ctx->timeout);
      m.refused = m.changing = false;
      for (size_t b = 0; b < batches.size(); ++b) TakeAnswer(batches[b], answers[b], &m);
      if (m.todo.empty()) break;
      if (absl::Now() > deadline) {
        for (size_t i : m.todo) {
          if (m.why[i].ok()) {
            m.one_sided.push_back(i);
          } else {
            (*out)[i] = m.why[i];
          }
        }
        break;
      }
      if (m.refused || (m.changing && round >= 16)) absl::SleepFor(absl::Microseconds(20));
    }
    MultiGetOneSided(keys, m.one_sided, out);
  }

  // The keys of m.todo in requests to the nodes that serve their shards now; the keys of shards
  // this node serves (or whose serving node it cannot tell) go to m.one_sided.
  std::vector<NodeBatch> Batches(RpcMultiGet& m, bool first_round) {
    std::vector<NodeBatch> batches;
    absl::flat_hash_map<uint32_t, size_t> filling;                       // node -> its last batch
    std::vector<std::pair<GlobalAddress, absl::StatusOr<uint32_t>>> at;  // shard -> node
    auto node_of = [&](size_t i) {
      const GlobalAddress first = m.shard[i]->first;
      auto node =
          std::find_if(at.begin(), at.end(), [&](const auto& a) { return a.first == first; });
      if (node == at.end()) node = at.emplace(at.end(), first, store->ServingNode(first));
      return node;
    };
    // In the first round, nodes with fewer than min_batch of the keys are read one-sided.
    absl::flat_hash_map<uint32_t, size_t> per_node;
    if (first_round && min_batch > 1) {
      for (size_t i : m.todo) {
        auto node = node_of(i);
        if (node->second.ok()) ++per_node[*node->second];
      }
    }
    for (size_t i : m.todo) {
      const GlobalAddress first = m.shard[i]->first;
      auto node = node_of(i);
      if (!node->second.ok() || *node->second == worker->node_id() ||
          (!per_node.empty() && per_node[*node->second] < min_batch)) {
        m.one_sided.push_back(i);
        continue;
      }
      auto b = filling.find(*node->second);
      if (b == filling.end() || !batches[b->second].request.Add(first, m.keys[i])) {
        batches.push_back(NodeBatch{*node->second, MultiGetRequest(store->max_rpc_answer), {}});
        b = filling.insert_or_assign(*node->second, batches.size() - 1).first;
        if (!batches.back().request.Add(first, m.keys[i])) {  // a key is far below a message
          m.one_sided.push_back(i);
          continue;
        }
      }
      batches[b->second].keys.push_back(i);
    }
    m.todo.clear();
    return batches;
  }

  // Settles the keys of `b` by its answer, or puts them back in m.todo or m.one_sided.
  void TakeAnswer(const NodeBatch& b, const absl::StatusOr<std::string>& answer, RpcMultiGet* m) {
    std::vector<absl::StatusOr<std::string>>& out = *m->out;
    if (!answer.ok()) {
      const absl::Status& st = answer.status();
      for (size_t i : b.keys) {
        if (absl::IsAborted(st) || absl::IsFailedPrecondition(st)) {
          Refused(i, Annotate(st, *m->shard[i]), m);  // unexecuted: ask again
        } else if (absl::IsDeadlineExceeded(st)) {
          out[i] = Annotate(st, *m->shard[i]);  // as GetRpc's; not another timeout one-sided
        } else {
          m->one_sided.push_back(i);
        }
      }
      return;
    }
    absl::string_view rest = *answer;
    absl::Status unreadable;  // the answer's, for this key and every key after it
    for (size_t i : b.keys) {
      RpcGetOutcome o = kRpcDeferred;
      absl::string_view value;
      absl::Status error;
      if (unreadable.ok()) unreadable = MultiGetAnswer::Next(&rest, &o, &value, &error).status();
      if (!unreadable.ok()) {
        out[i] = unreadable;
        continue;
      }
      switch (o) {
        case kRpcFound:
          out[i] = std::string(value);
          break;
        case kRpcMissing:
          out[i] = absl::NotFoundError("kv: no such key");
          break;
        case kRpcRetry:
          m->changing = true;
          Again(i,
                absl::AbortedError(absl::StrCat("kv: the key's buckets on node ", m->shard[i]->node,
                                                " kept changing")),
                m);
          break;
        case kRpcDeferred:  // also the keys after the answer's end
          Again(i, absl::OkStatus(), m);
          break;
        case kRpcError:
          if (absl::IsAborted(error) || absl::IsFailedPrecondition(error)) {
            Refused(i, Annotate(error, *m->shard[i]), m);  // e.g. the shard moved meanwhile
            break;
          }
          [[fallthrough]];
        case kRpcTooLarge:
          m->one_sided.push_back(i);
          break;
      }
    }
  }

  static void Again(size_t i, absl::Status why, RpcMultiGet* m) {
    m->why[i] = std::move(why);
    m->todo.push_back(i);
  }
  static void Refused(size_t i, absl::Status why, RpcMultiGet* m) {
    m->refused = true;
    Again(i, std::move(why), m);
  }

  // Runs `fn` on the key's part of the table in transaction `t`.
  absl::Status WithTable(txn::Transaction& t, absl::string_view key,
                         const std::function<absl::Status(TableTxn&)>& fn) {
    if (absl::Status st = CheckKey(key); !st.ok()) return st;
    uint64_t h = 0;
    absl::StatusOr<const ShardInfo*> s = Shard(key, &h);
    if (!s.ok()) return s.status();
    TableTxn table(t, **s, key, h, store->inline_max);
    absl::Status st = table.Load();
    if (st.ok()) st = fn(table);
    // Objects the table pointed to that were freed or reused under this transaction are
    // Aborted already (TableTxn::Changed); any other NotFound or InvalidArgument is a fault.
    return Annotate(st, **s);
  }

  // InvalidArgument if any key or value of `items` is malformed; else the index of each key's
  // last occurrence (its value is the one MultiPut sets), in order.
  absl::StatusOr<std::vector<size_t>> CheckItems(
      absl::Span<const std::pair<std::string, std::string>> items) const {
    absl::flat_hash_map<absl::string_view, size_t> last;
    for (size_t i = 0; i < items.size(); ++i) {
      absl::Status st = CheckKey(items[i].first);
      if (st.ok()) st = CheckValue(items[i].second);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("item ", i, " of ", items.size(), ": ",
                                                    st.message(), " (nothing was set)"));
      }
      last[items[i].first] = i;
    }
    std::vector<size_t> order;
    for (size_t i = 0; i < items.size(); ++i) {
      if (last[items[i].first] == i) order.push_back(i);
    }
    return order;
  }

  // Sets the keys items[order[k]] to their values in transaction `t`: the neighbourhoods' READs
  // in flight together, then each key's lookup and change as Put(Txn&, ...) does them.
  absl::Status PutAll(txn::Transaction& t,
                      absl::Span<const std::pair<std::string, std::string>> items,
                      const std::vector<size_t>& order) {
    if (order.empty()) return absl::OkStatus();
    // Copies: a shard's entry in `shards` may be described anew while later keys are placed.
    std::vector<ShardInfo> shard(order.size());
    std::deque<TableTxn> tables;
    std::vector<TableTxn*> pointers;
    for (size_t k = 0; k < order.size(); ++k) {
      uint64_t h = 0;
      absl::StatusOr<const ShardInfo*> s = Shard(items[order[k]].first, &h);
      if (!s.ok()) return s.status();
      shard[k] = **s;
      tables.emplace_back(t, shard[k], items[order[k]].first, h, store->inline_max);
      pointers.push_back(&tables.back());
    }
    size_t failed = 0;
    if (absl::Status st = TableTxn::ReadNeighbourhoods(t, pointers, &failed); !st.ok()) {
      if (failed < order.size()) return Annotate(st, shard[failed]);
      if (!absl::IsOutOfRange(st) && !absl::IsUnavailable(st)) return st;
      return absl::UnavailableError(
          absl::StrCat("kv: a shard of the keys cannot be reached: ", st.message()));
    }
    for (size_t k = 0; k < order.size(); ++k) {
      absl::Status st = tables[k].Load();
      if (st.ok()) st = PutIn(tables[k], items[order[k]].second);
      if (!st.ok()) return Annotate(st, shard[k]);
    }
    return absl::OkStatus();
  }

  // Runs `fn` in transactions until one commits (Worker::Run).
  absl::Status Run(absl::string_view key, const std::function<absl::Status(TableTxn&)>& fn) {
    return worker->Run([&](Txn& t) -> absl::Status {
      return WithTable(RuntimeAccess::Of(t).t, key, fn);
    });
  }

  // One read-modify-write of `key` (UpdateIn) in the caller's transaction, or (`caller` null) in
  // transactions of its own until one commits (Run). An error that `update` returns is the
  // operation's refusal (e.g. "not an integer"): it changes nothing, and is returned once the
  // transaction that read the refused value committed (read-only, validated: so a refusal is
  // linearizable too), or at once in the caller's transaction (validated when that commits).
  absl::Status Modify(Txn* caller, absl::string_view key, bool read_value,
                      absl::FunctionRef<absl::StatusOr<NewValue>(std::string* value)> update) {
    absl::Status refused;
    auto fn = [&](TableTxn& table) -> absl::Status {
      refused = absl::OkStatus();  // of an earlier attempt, which did not commit
      return UpdateIn(table, read_value, [&](std::string* value) {
        absl::StatusOr<NewValue> next = update(value);
        refused = next.status();
        return next.ok() ? *next : NewValue();
      });
    };
    absl::Status st =
        caller != nullptr ? WithTable(RuntimeAccess::Of(*caller).t, key, fn) : Run(key, fn);
    if (!st.ok()) return st;
    return refused;
  }

  // Sets `key` to `value` if `condition` holds for its current value (null: absent; its bytes
  // only with `read_value`): true if it did.
  absl::StatusOr<bool> PutIf(Txn* caller, absl::string_view key, absl::string_view value,
                             bool read_value,
                             absl::FunctionRef<bool(const std::string* current)> condition) {
    if (absl::Status st = CheckValue(value); !st.ok()) return st;
    bool set = false;
    absl::Status st = Modify(caller, key, read_value, [&](std::string* current) {
      set = condition(current);
      return absl::StatusOr<NewValue>(set ? NewValue(value) : NewValue());
    });
    if (!st.ok()) return st;
    return set;
  }

  absl::StatusOr<int64_t> IncrBy(Txn* caller, absl::string_view key, int64_t delta) {
    int64_t sum = 0;
    std::string text;
    absl::Status st =
        Modify(caller, key, true, [&](std::string* current) -> absl::StatusOr<NewValue> {
          const std::optional<int64_t> now =
              current == nullptr ? std::optional<int64_t>(0) : ParseRedisInteger(*current);
          if (!now.has_value()) {
            return absl::FailedPreconditionError("kv: value is not an integer or out of range");
          }
          constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
          constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
          if ((delta > 0 && *now > kMax - delta) || (delta < 0 && *now < kMin - delta)) {
            return absl::FailedPreconditionError("kv: increment or decrement would overflow");
          }
          sum = *now + delta;
          text = absl::StrCat(sum);
          return NewValue(text);
        });
    if (!st.ok()) return st;
    return sum;
  }

  absl::StatusOr<std::optional<std::string>> GetAndSet(Txn* caller, absl::string_view key,
                                                       absl::string_view value) {
    if (absl::Status st = CheckValue(value); !st.ok()) return st;
    std::optional<std::string> old;
    absl::Status st = Modify(caller, key, true, [&](std::string* current) {
      old.reset();
      if (current != nullptr) old = std::move(*current);
      return absl::StatusOr<NewValue>(NewValue(value));
    });
    if (!st.ok()) return st;
    return old;
  }

  absl::StatusOr<uint64_t> Append(Txn* caller, absl::string_view key, absl::string_view suffix) {
    if (absl::Status st = CheckValue(suffix); !st.ok()) return st;
    uint64_t length = 0;
    absl::Status st =
        Modify(caller, key, true, [&](std::string* current) -> absl::StatusOr<NewValue> {
          const uint64_t now = current == nullptr ? 0 : current->size();
          if (now + suffix.size() > store->max_value) {
            return absl::InvalidArgumentError(
                absl::StrCat("kv: appending ", suffix.size(), " bytes to a value of ", now,
                             " bytes would pass the limit of ", store->max_value,
                             " bytes (nothing was changed)"));
          }
          length = now + suffix.size();
          if (current == nullptr) return NewValue(suffix);  // created, as Redis's APPEND does
          if (suffix.empty()) return NewValue();            // nothing to write
          current->append(suffix.data(), suffix.size());
          return NewValue(*current);
        });
    if (!st.ok()) return st;
    return length;
  }
};

Client::Client(Store& store, Worker& worker) : impl_(std::make_unique<Impl>()) {
  impl_->store = store.impl_.get();
  impl_->worker = &worker;
  impl_->ctx = &RuntimeAccess::Of(worker).txn_context;
  set_multi_get(store.options().multi_get);
}

Client::~Client() = default;

absl::StatusOr<std::string> Client::Get(absl::string_view key) { return impl_->Get(key, nullptr); }

absl::StatusOr<std::string> Client::GetRpc(absl::string_view key) {
  if (absl::Status st = impl_->CheckKey(key); !st.ok()) return st;
  uint64_t h = 0;
  absl::StatusOr<const ShardInfo*> s = impl_->Shard(key, &h);
  if (!s.ok()) return s.status();
  const absl::Time deadline = absl::Now() + impl_->ctx->timeout;
  std::string request(8, '\0');
  const uint64_t first = (*s)->first.Pack();
  std::memcpy(request.data(), &first, 8);
  request.append(key.data(), key.size());
  for (int attempt = 0;; ++attempt) {
    // The node serving the shard's region now: its shard node, or the backup promoted after it
    // failed.
    absl::StatusOr<uint32_t> at = impl_->store->ServingNode((*s)->first);
    absl::StatusOr<std::string> r =
        at.ok() ? impl_->worker->Call(*at, impl_->store->get_method(), request) : at.status();
    if ((absl::IsAborted(r.status()) || absl::IsFailedPrecondition(r.status())) &&
        absl::Now() < deadline) {
      // Refused unexecuted (sent just before a configuration change the shard's node had
      // applied, rpc.h), or sent to a node that no longer serves the region: ask again.
      absl::SleepFor(absl::Microseconds(20));
      continue;
    }
    if (!r.ok()) return impl_->Annotate(r.status(), **s);
    if (r->empty()) return absl::DataLossError("kv: an empty GET answer");
    if ((*r)[0] == kRpcFound) return r->substr(1);
    if ((*r)[0] == kRpcMissing) return absl::NotFoundError("kv: no such key");
    if ((*r)[0] != kRpcRetry) return absl::DataLossError("kv: a GET answer of an unknown kind");
    if (absl::Now() > deadline) {
      return absl::AbortedError(absl::StrCat("kv: the key's buckets on node ", (*s)->node,
                                             " kept changing"));
    }
    if (attempt > 16) absl::SleepFor(absl::Microseconds(20));
  }
}

std::vector<absl::StatusOr<std::string>> Client::MultiGet(absl::Span<const std::string> keys) {
  std::vector<absl::StatusOr<std::string>> out(keys.size(), absl::UnknownError("not read"));
  if (impl_->multi_get == MultiGetPath::kRpc) {
    impl_->MultiGetByRpc(keys, &out);
  } else {
    std::vector<size_t> all(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) all[i] = i;
    impl_->MultiGetOneSided(keys, all, &out);
  }
  return out;
}

MultiGetPath Client::multi_get() const { return impl_->multi_get; }

void Client::set_multi_get(MultiGetPath path) {
  impl_->multi_get = ResolveMultiGet(path, impl_->store->rt->provider());
  impl_->min_batch =
      path == MultiGetPath::kAuto && impl_->multi_get == MultiGetPath::kRpc ? kAutoMinBatch : 1;
}

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  if (absl::Status st = impl_->CheckValue(value); !st.ok()) return st;
  return impl_->Run(key, [&](TableTxn& table) { return PutIn(table, value); });
}

absl::Status Client::MultiPut(absl::Span<const std::pair<std::string, std::string>> items) {
  absl::StatusOr<std::vector<size_t>> order = impl_->CheckItems(items);
  if (!order.ok()) return order.status();
  if (order->empty()) return absl::OkStatus();
  return impl_->worker->Run(
      [&](Txn& t) -> absl::Status { return impl_->PutAll(RuntimeAccess::Of(t).t, items, *order); });
}

absl::StatusOr<bool> Client::Delete(absl::string_view key) {
  bool deleted = false;
  absl::Status st =
      impl_->Run(key, [&](TableTxn& table) { return DeleteIn(table, &deleted); });
  if (!st.ok()) return st;
  return deleted;
}

absl::StatusOr<bool> Client::CompareAndSet(absl::string_view key,
                                           const std::optional<std::string>& expected,
                                           absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, expected.has_value(), [&](const std::string* current) {
    return expected.has_value() ? current != nullptr && *current == *expected : current == nullptr;
  });
}

absl::StatusOr<int64_t> Client::IncrBy(absl::string_view key, int64_t delta) {
  return impl_->IncrBy(nullptr, key, delta);
}

absl::StatusOr<bool> Client::PutIfAbsent(absl::string_view key, absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, false, Absent);
}

absl::StatusOr<bool> Client::PutIfPresent(absl::string_view key, absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, false, Present);
}

absl::StatusOr<std::optional<std::string>> Client::GetAndSet(absl::string_view key,
                                                             absl::string_view value) {
  return impl_->GetAndSet(nullptr, key, value);
}

absl::StatusOr<uint64_t> Client::Append(absl::string_view key, absl::string_view suffix) {
  return impl_->Append(nullptr, key, suffix);
}

absl::StatusOr<bool> Client::Exists(absl::string_view key) {
  return impl_->Find(key, nullptr, nullptr);
}

absl::StatusOr<std::string> Client::Get(Txn& t, absl::string_view key) {
  std::string value;
  bool found = false;
  absl::Status st = impl_->WithTable(RuntimeAccess::Of(t).t, key, [&](TableTxn& table) {
    return GetIn(table, &found, &value);
  });
  if (!st.ok()) return st;
  if (!found) return absl::NotFoundError("kv: no such key");
  return value;
}

absl::Status Client::Put(Txn& t, absl::string_view key, absl::string_view value) {
  if (absl::Status st = impl_->CheckValue(value); !st.ok()) return st;
  return impl_->WithTable(RuntimeAccess::Of(t).t, key,
                          [&](TableTxn& table) { return PutIn(table, value); });
}

absl::Status Client::MultiPut(Txn& t, absl::Span<const std::pair<std::string, std::string>> items) {
  absl::StatusOr<std::vector<size_t>> order = impl_->CheckItems(items);
  if (!order.ok()) return order.status();
  return impl_->PutAll(RuntimeAccess::Of(t).t, items, *order);
}

absl::StatusOr<bool> Client::Delete(Txn& t, absl::string_view key) {
  bool deleted = false;
  absl::Status st = impl_->WithTable(RuntimeAccess::Of(t).t, key, [&](TableTxn& table) {
    return DeleteIn(table, &deleted);
  });
  if (!st.ok()) return st;
  return deleted;
}

absl::StatusOr<int64_t> Client::IncrBy(Txn& t, absl::string_view key, int64_t delta) {
  return impl_->IncrBy(&t, key, delta);
}

absl::StatusOr<bool> Client::PutIfAbsent(Txn& t, absl::string_view key, absl::string_view value) {
  return impl_->PutIf(&t, key, value, false, Absent);
}

absl::StatusOr<bool> Client::PutIfPresent(Txn& t, absl::string_view key, absl::string_view value) {
  return impl_->PutIf(&t, key, value, false, Present);
}

absl::StatusOr<std::optional<std::string>> Client::GetAndSet(Txn& t, absl::string_view key,
                                                             absl::string_view value) {
  return impl_->GetAndSet(&t, key, value);
}

absl::StatusOr<uint64_t> Client::Append(Txn& t, absl::string_view key, absl::string_view suffix) {
  return impl_->Append(&t, key, suffix);
}

absl::StatusOr<bool> Client::Exists(Txn& t, absl::string_view key) {
  bool found = false;
  absl::Status st = impl_->Modify(&t, key, false, [&](std::string* current) {
    found = current != nullptr;
    return absl::StatusOr<NewValue>(NewValue());
  });
  if (!st.ok()) return st;
  return found;
}

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
  const uint64_t n = std::min<uint64_t>(std::max<uint64_t>(count, 1), s.buckets - first);
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

absl::StatusOr<uint64_t> Client::Size() {
  absl::StatusOr<std::vector<ShardStats>> stats = Stats();
  if (!stats.ok()) return stats.status();
  uint64_t items = 0;
  for (const ShardStats& s : *stats) items += s.items;
  return items;
}

absl::StatusOr<std::vector<ShardStats>> Client::Stats() {
  std::vector<ShardStats> out;
  for (size_t i = 0; i < impl_->store->shard_nodes.size(); ++i) {
    absl::StatusOr<const ShardInfo*> shard = impl_->ShardAt(i);
    if (!shard.ok()) return shard.status();
    const ShardInfo& s = **shard;
    std::string request(8, '\0');
    const uint64_t first = s.first.Pack();
    std::memcpy(request.data(), &first, 8);
    absl::StatusOr<uint32_t> at = impl_->store->ServingNode(s.first);
    absl::StatusOr<std::string> r =
        at.ok() ? impl_->worker->Call(*at, impl_->store->stats_method(), request) : at.status();
    if (!r.ok()) return impl_->Annotate(r.status(), s);
    StatsReply rep;
    if (r->size() != sizeof(rep)) return absl::DataLossError("kv: a statistics answer of the wrong size");
    std::memcpy(&rep, r->data(), sizeof(rep));
    ShardStats st;
    st.node = s.node;
    st.buckets = rep.buckets;
    st.bucket_bytes = rep.bucket_bytes;
    st.items = rep.items;
    st.inline_items = rep.inline_items;
    st.displaced_items = rep.displaced_items;
    st.overflow_blocks = rep.overflow_blocks;
    st.out_of_line_bytes = rep.out_of_line_bytes;
    st.memory_bytes = rep.memory_bytes;
    out.push_back(st);
  }
  return out;
}

}  // namespace kv
}  // namespace farm
