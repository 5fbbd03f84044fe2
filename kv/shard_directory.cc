// The shard directory: how a node learns every shard's description (the Describe RPC, Gather),
// keeps it while the shard's region exists, serves the shards whose regions it holds, and finds
// a key's shard (Client::Impl::ShardAt, Shard).

#include <chrono>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/store_impl.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace kv {

absl::Status Store::Impl::LostError(uint32_t node) const {
  return absl::DataLossError(absl::StrCat(
      "kv: node ", node,
      " restarted and lost the keys its shard held (without replication, "
      "f = 0, the store keeps one copy of each key, on its shard node, and a shard node's "
      "death loses its keys; with it, they are lost once every copy of the shard's region "
      "is); its shard refuses to serve rather than pose as empty. Start the whole cluster "
      "again"));
}

absl::StatusOr<ShardInfo> Store::Impl::ServedShard(absl::string_view request,
                                                   absl::string_view* rest) {
  if (request.size() < 8) return absl::InvalidArgumentError("kv: a request without its shard");
  uint64_t packed = 0;
  std::memcpy(&packed, request.data(), 8);
  *rest = request.substr(8);
  return ServedShardAt(GlobalAddress::Unpack(packed));
}

absl::StatusOr<ShardInfo> Store::Impl::ServedShardAt(GlobalAddress first) {
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

bool Store::Impl::RegionExists(uint32_t id) const {
  const control::Membership m = RuntimeAccess::Of(*rt).node->membership();
  for (const control::RegionInfo& r : m.regions()) {
    if (r.region_id() == id) return true;
  }
  return false;
}

absl::StatusOr<uint32_t> Store::Impl::ServingNode(GlobalAddress addr) const {
  absl::StatusOr<RemoteTarget> t = RuntimeAccess::Of(*rt).node->Resolve(addr, 8);
  if (!t.ok()) return t.status();
  return t->node_id;
}

std::optional<ShardInfo> Store::Impl::Own() const {
  if (adopted.has_value()) return adopted;
  return local;
}

std::string Store::Impl::EncodeKnown() {
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

void Store::Impl::Learn(absl::string_view entries) {
  if (entries.size() % sizeof(ShardEntry) != 0) return;  // not from this store
  for (size_t i = 0; i < entries.size(); i += sizeof(ShardEntry)) {
    ShardEntry e;
    std::memcpy(&e, entries.data() + i, sizeof(e));
    if (e.buckets == 0 || e.buckets > (uint64_t{1} << 40)) continue;
    const ShardInfo info = MakeShard(e.node, e.first, e.buckets, e.seed);
    if (e.node == rt->node_id()) {
      if (!lost || adopted.has_value() || !RegionExists(info.first.region)) continue;
      adopted = info;
      spdlog::warn(
          "kv: node {} restarted and takes its previous shard back (region {}, "
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

std::string Store::Impl::Describe(absl::string_view request) {
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

absl::StatusOr<ShardInfo> Store::Impl::Ask(Worker& w, uint32_t node, absl::Duration timeout) {
  std::string request;
  {
    std::lock_guard<std::mutex> l(mu);
    request = EncodeKnown();
  }
  absl::StatusOr<std::string> r = w.Call(node, describe_method(), request, timeout);
  if (!r.ok()) {
    return absl::UnavailableError(
        absl::StrCat("kv: the shard on node ", node, " cannot be reached: ", r.status().message()));
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
        d.neighbourhood, "; this node uses ", options.bucket_bytes, " and ", options.neighbourhood,
        " (every node must use the same options)"));
  }
  if (d.has_shard == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kv: node ", node,
        " forms the cluster but holds no shard (start the nodes with --kv, "
        "or create their Store with hold_shard; client-only nodes must be late nodes)"));
  }
  if (d.lost != 0) return LostError(node);
  const ShardInfo s = MakeShard(node, d.first, d.buckets, d.seed);
  std::lock_guard<std::mutex> l(mu);
  if (node != rt->node_id()) known[node] = s;
  return s;
}

std::optional<ShardInfo> Store::Impl::Known(uint32_t node) {
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

absl::StatusOr<ShardInfo> Store::Impl::DescribeNode(Worker& w, uint32_t node) {
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

void Store::Impl::Gather() {
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

absl::StatusOr<const ShardInfo*> Client::Impl::ShardAt(size_t i) {
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

absl::StatusOr<const ShardInfo*> Client::Impl::Shard(absl::string_view key, uint64_t* h) {
  absl::StatusOr<const ShardInfo*> s =
      ShardAt(ShardOf(store->shard_nodes, KeyHash(kPlacementSeed, key)));
  if (s.ok()) *h = KeyHash((*s)->seed, key);
  return s;
}

absl::StatusOr<const ShardInfo*> Client::Impl::CheckedShard(absl::string_view key, uint64_t* h) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  return Shard(key, h);
}

}  // namespace kv
}  // namespace farm
