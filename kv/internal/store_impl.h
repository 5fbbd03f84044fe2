// kv/internal/store_impl.h: a node's store (Store::Impl): its own shard, the shard directory
// (what this node knows of the other shards, and how it learns more: kv/shard_directory.cc),
// and the RPC handlers it serves (GET: kv/get_rpc.cc; the batched GET: kv/multi_get.cc;
// statistics: kv/stats.cc). Made by Store::Create (kv/store.cc).
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: safe for concurrent use (the directory is guarded by `mu`).
#ifndef FARM_KV_INTERNAL_STORE_IMPL_H_
#define FARM_KV_INTERNAL_STORE_IMPL_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "farm/farm.h"
#include "kv/internal/lookup.h"
#include "kv/internal/shard.h"
#include "kv/internal/wire.h"
#include "kv/kv.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {

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
    std::thread thread;  // guarded by join_mu
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

  // The store (kv/store.cc).

  // Copies of this node's own memory (what the RPC handlers read).
  absl::Status LocalCopy(absl::Span<const txn::Range> ranges, std::vector<std::string>* out);

  // The description of `node`'s shard, with this store's options (every node's).
  ShardInfo MakeShard(uint64_t node, uint64_t first, uint64_t buckets, uint64_t seed) const;

  // The shard directory (kv/shard_directory.cc).

  // DataLoss for a shard that lost its keys in a restart (see `lost`).
  absl::Status LostError(uint32_t node) const;

  // The shard whose bucket array starts at the packed address at the front of `request` (the
  // rest is returned in `rest`), as ServedShardAt.
  absl::StatusOr<ShardInfo> ServedShard(absl::string_view request, absl::string_view* rest);

  // The shard whose bucket array starts at `first`, if this node serves its region: its own, or
  // one whose region was promoted here. FailedPrecondition otherwise (the caller resolves the
  // region anew).
  absl::StatusOr<ShardInfo> ServedShardAt(GlobalAddress first);

  // Whether region `id` is in this node's current membership (served, or recovering).
  bool RegionExists(uint32_t id) const;

  // The node that serves the region of `addr` now: its shard node's, or a promoted backup.
  absl::StatusOr<uint32_t> ServingNode(GlobalAddress addr) const;

  // This node's own shard as others should use it: the one it took back after a restart, or the
  // one it formed (nullopt if it holds none).
  std::optional<ShardInfo> Own() const;  // mu held

  // Every shard this node knows, its own included (unless it restarted and lost it), on the wire.
  std::string EncodeKnown();  // mu held

  // Takes in the shards of `entries` (ShardEntry each) whose regions exist, for the nodes this
  // node knows no valid shard of; a restarted node takes its previous shard back.
  void Learn(absl::string_view entries);

  // The Describe RPC: takes in what the asker knows; answers with this node's shard and what it
  // knows.
  std::string Describe(absl::string_view request);

  // Asks `node` to describe its shard (telling it what this node knows) and takes in what it
  // knows. Its own shard, or the error to report for it: FailedPrecondition for a node that
  // holds none or uses other options, DataLoss if it restarted and lost its keys; Unavailable
  // if it cannot be asked.
  absl::StatusOr<ShardInfo> Ask(Worker& w, uint32_t node, absl::Duration timeout);

  // A valid shard of `node` this node knows (its own included).
  std::optional<ShardInfo> Known(uint32_t node);

  // Shard node `node`'s shard: known already, or asked of the node itself, or, when it cannot
  // answer (gone) or lost its keys in a restart, of the other members, which may know the shard
  // (its region lives on at its promoted backup). Unavailable while nobody can describe it (its
  // keys are unreachable); DataLoss once it restarted and its old shard is gone.
  absl::StatusOr<ShardInfo> DescribeNode(Worker& w, uint32_t node);

  // On a shard node: asks every other shard node for its shard until each was described, so
  // that this node can describe them all to clients after any of them failed (their regions
  // served by promoted backups), and takes its own previous shard back if it restarted.
  // A node that answered without a shard (it holds none, uses other options, or restarted and
  // lost its keys) is not asked again; one that is not a member is asked once it is back.
  void Gather();

  // The RPC handlers' lookups and answers (kv/get_rpc.cc, kv/multi_get.cc, kv/stats.cc).

  // One lookup of `key` in shard `s`, served by this node, in its own memory: the GET RPCs'. A
  // handler must not wait for a commit (this thread applies it): kRetry goes back to the caller.
  // Its value was the key's at the moment its bucket (or item) was copied, during the handler,
  // which runs between the caller's call and its return.
  absl::StatusOr<Lookup> LookupServed(const ShardInfo& s, absl::string_view key,
                                      std::vector<std::string>* scratch, std::string* value);

  absl::StatusOr<std::string> ServeGet(absl::string_view request);

  // The batched GET (MultiGetRequest, MultiGetAnswer): each key exactly as ServeGet, its
  // shard's errors (not served here, lost) and its lookup's for that key alone.
  absl::StatusOr<std::string> ServeMultiGet(absl::string_view request);

  absl::StatusOr<StatsReply> ServeStats(absl::string_view request);
};

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_STORE_IMPL_H_
