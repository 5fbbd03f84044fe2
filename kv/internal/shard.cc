#include "kv/internal/shard.h"

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/mutant.h"

namespace farm {
namespace kv {

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

uint64_t NewSeed() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) ^ rd();
  return Mix64(r ^ static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())));
}

uint64_t BlockIdentity(const ShardInfo& s, uint64_t home) {
  return Mix64(s.seed ^ 0x6f76'6572'666c'6f77ull /* "overflow" */ ^ s.Bucket(home).Pack());
}

bool BlockEntries(const ShardInfo& s, uint64_t home, absl::string_view payload,
                  absl::string_view* entries) {
  if (payload.size() < kBlockIdentityBytes) return false;
  uint64_t identity;
  std::memcpy(&identity, payload.data(), 8);
  if (identity != BlockIdentity(s, home) && !FARM_MUTANT("kv_skip_block_identity")) return false;
  *entries = payload.substr(kBlockIdentityBytes);
  return true;
}

absl::Status NotABucket(const ShardInfo& s, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("kv: the shard on node ", s.node, " at ",
                                          s.first.ToString(), " does not hold buckets there (",
                                          what, "): its memory was overwritten"));
}

absl::StatusOr<bool> BucketView(const ShardInfo& s, const char* copy, txn::ObjectView* v) {
  const txn::ObjectState state = txn::DecodeObject(copy, s.payload(), v);
  if (state == txn::ObjectState::kOk) return true;
  if (state == txn::ObjectState::kFree || state == txn::ObjectState::kWrongSize) {
    return NotABucket(s, txn::ObjectStateName(state));
  }
  return false;
}

absl::Status TableChanged(absl::Status st) {
  if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) {
    return absl::AbortedError(
        absl::StrCat("kv: the table changed while it was read (", st.message(), ")"));
  }
  return st;
}

}  // namespace kv
}  // namespace farm
