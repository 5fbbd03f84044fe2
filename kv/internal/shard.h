// kv/internal/shard.h: a shard of the table as every node sees it (ShardInfo), where a key
// lives (its shard by rendezvous hashing, its home bucket under the shard's seed), and how a
// copy of a bucket or of an overflow block is recognised as one (or as a table that changed
// under its reader). The geometry every other part of the store (lookup, TableTxn, Scan,
// statistics, the shard directory) works on.
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: none needed (values and pure functions).
#ifndef FARM_KV_INTERNAL_SHARD_H_
#define FARM_KV_INTERNAL_SHARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/global_address.h"
#include "platform/hash.h"
#include "txn/object.h"

namespace farm {
namespace kv {

// The seed of the hash that picks a key's shard: every node must agree on it before it knows any
// shard, so it is fixed (rendezvous hashing over a handful of nodes gives a flood nothing to
// collide in). Inside a shard, keys hash with the shard's own random seed (ShardInfo::seed).
inline constexpr uint64_t kPlacementSeed = 0x6b76'7461'626c'6531;  // "kvtable1"

// A key's 64-bit hash under `seed`: every byte counts (the rings' FrameHash reads whole words
// only). Not a cryptographic hash: the random seed keeps clients from choosing keys that share
// a home bucket without knowing it (hash flooding), as seeded table hashes do.
uint64_t KeyHash(uint64_t seed, absl::string_view key);

// A shard as every node sees it (the Describe RPC's answer).
struct ShardInfo {
  uint32_t node = 0;
  // Random, drawn by the node that formatted the shard: the seed of its keys' hashes (KeyHash)
  // and of its overflow blocks' identity (BlockIdentity).
  uint64_t seed = 0;
  GlobalAddress first;   // bucket 0
  uint64_t buckets = 0;  // home buckets
  uint64_t total = 0;    // buckets + neighbourhood - 1: a neighbourhood never wraps
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

// The shard node of a key: rendezvous hashing over the shard nodes (the configuration's nodes
// that form the cluster, the same list on every node).
size_t ShardOf(const std::vector<uint32_t>& nodes, uint64_t h);

// A shard's random seed (ShardInfo::seed).
uint64_t NewSeed();

// An overflow block's payload: an identity word, then a bucket's layout (kv/bucket.h: link,
// entries). A reader follows a link it read earlier; by the time its READ arrives the block may
// have been freed and its slot reused, by another chain's block or by an out-of-line item of the
// same size whose bytes are a user's. The identity names the chain (its home bucket) under the
// shard's random seed, so neither can pass for the block the link pointed to: the reader sees
// that the chain changed and starts again, instead of parsing user bytes as entries.
inline constexpr uint64_t kBlockIdentityBytes = 8;

uint64_t BlockIdentity(const ShardInfo& s, uint64_t home);

// The bucket-layout part of block `payload` of home bucket `home`'s chain; false if the payload
// is not such a block (any more).
bool BlockEntries(const ShardInfo& s, uint64_t home, absl::string_view payload,
                  absl::string_view* entries);

// DataLoss for memory where a bucket should be that holds no bucket: free, or an object of
// another size. Buckets are never freed or resized, so that is not a change to wait out: the
// shard's memory was overwritten, or the description of the shard is not the shard's.
absl::Status NotABucket(const ShardInfo& s, absl::string_view what);

// A copy of a bucket: true if consistent (`v` is its view), false if it was being written
// (locked or torn: read it again), DataLoss if it is not a bucket.
absl::StatusOr<bool> BucketView(const ShardInfo& s, const char* copy, txn::ObjectView* v);

// NotFound or InvalidArgument from an object that an entry or a link pointed to: it was freed,
// or reused with another size, by a commit after the transaction read the pointer, so the
// transaction cannot commit: Aborted (Worker::Run runs it again). Other errors pass on.
absl::Status TableChanged(absl::Status st);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_SHARD_H_
