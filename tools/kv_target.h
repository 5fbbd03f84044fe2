// The stores //tools:kvbench measures, behind one interface so that one generator and one
// measurement loop (tools/kv_workload.h) drive all of them:
//
//   ASSIGN_OR_RETURN(std::unique_ptr<KvTarget> t, StartMemcached(...));   // or farm, redis
//   ASSIGN_OR_RETURN(std::unique_ptr<KvConnection> c, t->Connect());      // one per thread
//   RETURN_IF_ERROR(c->Load(0, 1000));          // preload keys 0..999 at version 0
//   RETURN_IF_ERROR(c->Round(ops));             // one round: ops issued together
//   ASSIGN_OR_RETURN(MemoryReport m, t->Memory());
//
// Implementations: tools/kv_farm.h (farm: one-sided GETs; farm-rpc: GETs by RPC) and
// tools/kv_peers.h (memcached through libmemcached, plain and with buffered requests; Redis
// through hiredis).
//
// Thread safety: a KvTarget is safe for concurrent Connect calls; a KvConnection belongs to one
// thread.
#ifndef FARM_TOOLS_KV_TARGET_H_
#define FARM_TOOLS_KV_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tools/kv_workload.h"

namespace farm {
namespace kvbench {

// One client thread's connection.
class KvConnection {
 public:
  virtual ~KvConnection() = default;
  // Issues `ops` together and returns once every one has completed (see the target's comment
  // for what "together" means there). A read checks the value it got with `check` (a missing
  // key, a value of another key or a stale one is DataLoss). An update stores
  // KeySpace::ValueInto(key, version). The caller reports the completed round to `check`.
  virtual absl::Status Round(absl::Span<const Op> ops, const ReadCheck& check) = 0;
  // Stores keys [first, first + count) at version 0, as fast as the store allows (preloading).
  virtual absl::Status Load(uint64_t first, uint64_t count) = 0;
};

// How much memory the store uses per item, and how that was measured.
struct MemoryReport {
  uint64_t items = 0;
  uint64_t bytes = 0;
  std::string method;  // e.g. "memcached stats: total_malloced + hash_bytes"
  // Like with like for every store: the resident memory (VmRSS) of the store's processes, fixed
  // costs included (farm: its shard nodes, whose regions are locked in memory whole); 0 when
  // unknown (a cluster attached to, not started).
  uint64_t resident_bytes = 0;
  double per_item() const { return items == 0 ? 0 : static_cast<double>(bytes) / items; }
  double resident_per_item() const {
    return items == 0 ? 0 : static_cast<double>(resident_bytes) / items;
  }
};

// A store under test, started for the run and stopped on destruction.
class KvTarget {
 public:
  virtual ~KvTarget() = default;
  // "farm", "farm-rpc", "memcached", "memcached-buf", "redis".
  virtual std::string name() const = 0;
  // Why the target does not measure rounds of `in_flight` operations (a sentence for the run's
  // log), or empty when it does.
  virtual std::string WhyNotMeasured(int in_flight) const { return ""; }
  // How clients reach it: farm's provider ("shm", "tcp;ofi_rxm"), or "unix" / "tcp".
  virtual std::string transport() const = 0;
  virtual absl::StatusOr<std::unique_ptr<KvConnection>> Connect() = 0;
  // The store's memory over its items, read from the store itself.
  virtual absl::StatusOr<MemoryReport> Memory() = 0;
};

}  // namespace kvbench
}  // namespace farm

#endif  // FARM_TOOLS_KV_TARGET_H_
