// The peers of //tools:kvbench: memcached (through libmemcached) and Redis (through hiredis),
// real servers from Debian's packages started for the run by tools/bench_peers.sh on a private
// Unix socket or on 127.0.0.1, under `taskset -c cpus`, and stopped when the target is destroyed.
//
//   PeerOptions o{script, Transport::kUnix, /*cpus=*/"1"};
//   ASSIGN_OR_RETURN(std::unique_ptr<KvTarget> mc, StartMemcached(space, o));
//
// A round (KvConnection::Round) on a peer:
//  - one operation: memcached_get / memcached_set (waits for STORED); Redis GET / SET;
//  - several (pipelining): Redis appends every GET and SET of the round to one pipeline
//    (redisAppendCommand) and then reads all replies; memcached sends the round's sets without
//    waiting for their replies (libmemcached's NOREPLY: "set ... noreply") and then asks for all
//    of the round's keys in one multi-key get (memcached_mget), whose answer arrives after the
//    sets were applied (memcached serves a connection's commands in order); a round without
//    reads ends with a get of its last set key, for the same reason.
// Preloading pipelines the same way, 1000 keys at a time (memcached: noreply sets and one get to
// confirm; Redis: a pipeline of SETs).
//
// Thread safety: as KvTarget and KvConnection.
#ifndef FARM_TOOLS_KV_PEERS_H_
#define FARM_TOOLS_KV_PEERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tools/bench_peers.h"
#include "tools/kv_target.h"
#include "tools/kv_workload.h"

namespace farm {
namespace kvbench {

struct PeerOptions {
  std::string script;  // tools/bench_peers.sh
  Transport transport = Transport::kUnix;
  std::string cpus;            // the store's CPUs (taskset -c); empty: not pinned
  int memcached_threads = 1;   // memcached -t
  uint64_t memcached_mb = 64;  // memcached -m: item memory in MiB
};

// FailedPrecondition when the server's package is not installed; Unavailable when it cannot be
// reached.
absl::StatusOr<std::unique_ptr<KvTarget>> StartMemcached(const KeySpace& space,
                                                         const PeerOptions& o);
absl::StatusOr<std::unique_ptr<KvTarget>> StartRedis(const KeySpace& space, const PeerOptions& o);

// memcached -m for `space`: room for every item (about twice its key, value and memcached's
// 56-byte item header, rounded up to whole slab pages), at least 64 MiB.
uint64_t MemcachedMegabytes(const KeySpace& space);

}  // namespace kvbench
}  // namespace farm

#endif  // FARM_TOOLS_KV_PEERS_H_
