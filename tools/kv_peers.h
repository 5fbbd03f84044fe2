// The peers of //tools:kvbench: memcached (through libmemcached) and Redis (through hiredis),
// real servers from Debian's packages started for the run by tools/bench_peers.sh on a private
// Unix socket or on 127.0.0.1, under `taskset -c cpus`, and stopped when the target is destroyed.
//
//   PeerOptions o{script, Transport::kUnix, /*cpus=*/"1"};
//   ASSIGN_OR_RETURN(std::unique_ptr<KvTarget> mc,
//                    StartMemcached(space, o, MemcachedSets::kBufferedNoReply));
//
// A round (KvConnection::Round) on a peer:
//  - one operation: memcached_get / memcached_set (waits for STORED); Redis GET / SET;
//  - several (pipelining): Redis appends every GET and SET of the round to one pipeline
//    (redisAppendCommand) and then reads all replies; memcached sends the round's sets without
//    waiting for their replies (libmemcached's NOREPLY: "set ... noreply") and then asks for all
//    of the round's keys in one multi-key get (memcached_mget), whose answer arrives after the
//    sets were applied (memcached serves a connection's commands in order); a round without
//    reads ends with a get of its last set key, for the same reason.
// memcached comes in two targets, the two ways libmemcached sends those sets:
//  - "memcached": each noreply set is written to the socket as it is made (a send per set, then
//    one for the get);
//  - "memcached-buf": libmemcached's MEMCACHED_BEHAVIOR_BUFFER_REQUESTS keeps the noreply sets in
//    the connection's write buffer, and the get follows them into the same write (one send per
//    round while the round fits the buffer's 8,196 bytes; a fuller buffer is written as it
//    fills). The sets still reach the socket before the get, so the get's answer still follows
//    them. Only noreply sets: a buffered set with a reply has its reply read and dropped by the
//    next get (libmemcached's mget), a second round trip that swallows errors. A round of one
//    operation has nothing to buffer (it is the one command "memcached" sends): kvbench does not
//    measure memcached-buf at 1 in flight (KvTarget::WhyNotMeasured).
// A noreply set gets no answer, so a set the server did not store is not reported by the set: it
// shows up as a stale or missing value when the thread reads the key again (ReadCheck), or as
// evictions (MemcachedTarget::Memory). A failure to send or to read, or an answer other than the
// get's values, fails the round.
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

// How a memcached connection sends a round's sets (see above).
enum class MemcachedSets {
  kNoReply,          // "memcached": each noreply set written at once
  kBufferedNoReply,  // "memcached-buf": noreply sets buffered, written with the round's get
};

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
                                                         const PeerOptions& o, MemcachedSets sets);
absl::StatusOr<std::unique_ptr<KvTarget>> StartRedis(const KeySpace& space, const PeerOptions& o);

// memcached -m for `space`: room for every item (about twice its key, value and memcached's
// 56-byte item header, rounded up to whole slab pages), at least 64 MiB.
uint64_t MemcachedMegabytes(const KeySpace& space);

}  // namespace kvbench
}  // namespace farm

#endif  // FARM_TOOLS_KV_PEERS_H_
