// farm/kv/shard_stats.h: one shard's statistics, as kv::Client::Stats reports them (farm/kv/kv.h).
// A header of its own, with nothing but the structure, so that tools that only print statistics
// (//tools:kvsh_lib) need not depend on the store.
#ifndef FARM_KV_SHARD_STATS_H_
#define FARM_KV_SHARD_STATS_H_

#include <cstdint>

namespace farm {
namespace kv {

struct ShardStats {
  uint32_t node = 0;
  uint64_t buckets = 0;
  uint64_t bucket_bytes = 0;
  uint64_t items = 0;              // keys stored
  uint64_t inline_items = 0;       // ... with the value in the bucket
  uint64_t displaced_items = 0;    // ... in a bucket after their home bucket (hopscotch)
  uint64_t overflow_blocks = 0;    // chained overflow objects
  uint64_t out_of_line_bytes = 0;  // bytes of the slots of out-of-line items
  uint64_t memory_bytes = 0;       // buckets + overflow + out-of-line slots
};

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_SHARD_STATS_H_
