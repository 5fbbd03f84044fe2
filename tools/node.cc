// node: one symmetric cluster member with no application of its own. Serves its regions and RPC,
// joins through the configuration manager (hosting it when the configuration names this node),
// and runs until SIGINT/SIGTERM. The same main function (farm::RunNode) runs every cluster
// application; see farm.h for its flags and the status lines it prints for tools/cluster.
//
// With --kv it also holds a shard of the key-value store (kv/kv.h), which clients on any node
// (//tools:kvsh, //tools:kvbench, applications) use:
//
//   bazel run //tools:node -- --config=cluster.textproto --node_id=1 --kv --kv_buckets=65536
//
// A node with a shard refuses //tools:cluster's self-check, which overwrites the regions' ends.
#include <memory>

#include "absl/flags/flag.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"

ABSL_FLAG(bool, kv, false,
          "hold a shard of the key-value store (every node of a KV cluster uses the same --kv_* "
          "flags)");
ABSL_FLAG(uint64_t, kv_buckets, 8192,
          "buckets in this node's KV shard; the shard takes kv_buckets * kv_bucket_bytes "
          "contiguous bytes of one region");
ABSL_FLAG(uint32_t, kv_bucket_bytes, 256, "bytes per KV bucket: a power of two, 128..4096");
ABSL_FLAG(uint32_t, kv_neighbourhood, 8,
          "KV hopscotch neighbourhood H: a GET reads H buckets with one READ");

int main(int argc, char** argv) {
  std::unique_ptr<farm::kv::Store> store;
  farm::App node;
  node.name = "node";
  node.setup = [&store](farm::Runtime& rt) -> absl::Status {
    if (!absl::GetFlag(FLAGS_kv)) return absl::OkStatus();
    farm::kv::Options o;
    o.buckets = absl::GetFlag(FLAGS_kv_buckets);
    o.bucket_bytes = absl::GetFlag(FLAGS_kv_bucket_bytes);
    o.neighbourhood = absl::GetFlag(FLAGS_kv_neighbourhood);
    absl::StatusOr<std::unique_ptr<farm::kv::Store>> s = farm::kv::Store::Create(rt, o);
    if (!s.ok()) return s.status();
    store = std::move(*s);
    return absl::OkStatus();
  };
  return farm::RunNode(argc, argv, node);
}
