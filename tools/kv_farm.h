// farm as a target of //tools:kvbench: a cluster of real //tools:node processes, each holding a
// shard of the key-value store (--kv), started under `taskset -c store_cpus`, and this process
// joined as one more node that holds no shard and runs the benchmark's client threads (so farm's
// clients sit in a process of their own, as memcached's and Redis's do):
//
//   FarmOptions o;  o.provider = "shm";  o.kv.buckets = 131072;  o.store_cpus = "1";
//   ASSIGN_OR_RETURN(std::unique_ptr<FarmCluster> cluster, FarmCluster::Start(o, space));
//   std::unique_ptr<KvTarget> gets = cluster->Target(/*rpc=*/false);   // "farm"
//   std::unique_ptr<KvTarget> rpcs = cluster->Target(/*rpc=*/true);    // "farm-rpc"
//   std::unique_ptr<KvTarget> batched = cluster->Target(false, kv::MultiGetPath::kRpc);
//
// A round (KvConnection::Round), with one Worker and one kv::Client per connection:
//  - farm: the round's reads with kv::Client::MultiGet on the target's kv::MultiGetPath
//    (kOneSided: their neighbourhood READs posted together; kRpc: one batched GET per shard
//    node, all in flight together; kAuto: the provider's choice; one read: Client::Get, one
//    one-sided READ), then its updates with Client::Put, one transaction each, one after the
//    other (the store has no multi-key put);
//  - farm-rpc: the same, with each read a Client::GetRpc, one after the other (the public API
//    has no asynchronous call).
// Preloading puts `load_batch` keys per transaction (Client::Put(Txn&, ...) in Worker::Run).
// Both targets share the cluster, which must outlive them; destroying the cluster leaves it and
// stops the nodes.
//
// Thread safety: as KvTarget and KvConnection; FarmCluster's methods are safe for concurrent use.
#ifndef FARM_TOOLS_KV_FARM_H_
#define FARM_TOOLS_KV_FARM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "tools/child_process.h"
#include "tools/kv_target.h"
#include "tools/kv_workload.h"

namespace farm {
namespace kvbench {

struct FarmOptions {
  std::string provider = "shm";
  std::string poll = "adaptive";
  std::string host = "127.0.0.1";
  std::string store_cpus;  // the shard nodes' CPUs (taskset -c); empty: not pinned
  std::string log_level = "warn";
  int nodes = 3;        // shard nodes (this process joins as one more)
  kv::Options kv;       // per shard node; hold_shard is ignored
  int workers = 16;     // Workers this process may hold (client threads + preload threads)
  int load_batch = 16;  // keys per preload transaction
  int timeout_s = 60;   // cluster formation and node start-up
  // Not empty: the configuration of a running cluster whose nodes hold the shards (with the same
  // kv options); this process joins it as a free late node instead of starting nodes, and leaves
  // the keys behind.
  std::string attach_config;
};

class FarmCluster {
 public:
  // InvalidArgument for options the nodes refuse; Unavailable / DeadlineExceeded when the
  // cluster does not form (the message names the node and how it ended).
  static absl::StatusOr<std::unique_ptr<FarmCluster>> Start(const FarmOptions& o,
                                                            const KeySpace& space);
  FarmCluster(const FarmCluster&) = delete;
  FarmCluster& operator=(const FarmCluster&) = delete;
  ~FarmCluster();

  // "farm" (one-sided GETs, MultiGet by `multi_get`) or "farm-rpc" (GETs by RPC) on this
  // cluster.
  std::unique_ptr<KvTarget> Target(bool rpc, kv::MultiGetPath multi_get = kv::MultiGetPath::kAuto);
  // The path "farm"'s MultiGet takes for `multi_get` here (kAuto resolved for the provider).
  kv::MultiGetPath MultiGetPathFor(kv::MultiGetPath multi_get) const;
  // The shard size every node's region holds, in bytes.
  static uint64_t ShardBytes(const kv::Options& kv);

 private:
  FarmCluster() = default;
  // Takes this process's joined runtime and opens the store on it as a client (no shard).
  absl::Status Join(std::unique_ptr<Runtime> rt, const kv::Options& kv);
  friend class FarmTarget;

  FarmOptions options_;
  const KeySpace* space_ = nullptr;
  std::unique_ptr<TempDir> dir_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<kv::Store> store_;
};

}  // namespace kvbench
}  // namespace farm

#endif  // FARM_TOOLS_KV_FARM_H_
