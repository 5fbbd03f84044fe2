// Store::Create: a node's store, its shard formatted (or found again in the data directory
// after a restart of the cluster), and its RPC handlers registered.

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "kv/bucket.h"
#include "kv/internal/store_impl.h"
#include "kv/internal/value.h"
#include "platform/config.pb.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"

namespace farm {
namespace kv {

namespace {

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

}  // namespace

absl::Status Store::Impl::LocalCopy(absl::Span<const txn::Range> ranges,
                                    std::vector<std::string>* out) {
  out->resize(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    absl::StatusOr<absl::Span<char>> m = rt->Local(ranges[i].addr, ranges[i].len);
    if (!m.ok()) return m.status();
    (*out)[i].resize(ranges[i].len);
    txn::CopyLocalObject(m->data(), (*out)[i].data(), ranges[i].len);
  }
  return absl::OkStatus();
}

ShardInfo Store::Impl::MakeShard(uint64_t node, uint64_t first, uint64_t buckets,
                                 uint64_t seed) const {
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

absl::StatusOr<std::unique_ptr<Store>> Store::Create(Runtime& runtime, const Options& options) {
  const uint32_t bb = options.bucket_bytes;
  if (bb < 128 || bb > 4096 || (bb & (bb - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv: bucket_bytes must be a power of two from 128 to 4096, not ", bb));
  }
  if (options.neighbourhood < 1 || options.neighbourhood > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv: neighbourhood must be 1 to 64 buckets, not ", options.neighbourhood));
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
      spdlog::error(
          "kv: node {} joined a running cluster: the keys its shard held before it "
          "restarted are lost, and its shard answers DataLoss",
          runtime.node_id());
    } else if (impl->lost) {
      spdlog::warn(
          "kv: node {} joined a running cluster: it takes its previous shard back once "
          "another node describes it (served by its region's backup since); if that is "
          "gone too, its shard answers DataLoss",
          runtime.node_id());
    }
  }
  Impl* p = impl.get();
  absl::Status st = runtime.Handle(
      p->describe_method(),
      [p](const Request& r) -> absl::StatusOr<std::string> { return p->Describe(r.payload); });
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

}  // namespace kv
}  // namespace farm
