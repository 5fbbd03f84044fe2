// kvbench: YCSB workloads against farm's key-value store and, in the same run, against memcached
// and Redis servers started from Debian's packages (issue: //tools:kvbench).
//
//   bazel run //tools:kvbench -- --provider='shm,tcp;ofi_rxm' --store_cpus=1 --client_cpus=0
//   bazel run //tools:kvbench -- --targets=farm,memcached --workloads=c --keys=10000 --json
//
// For every provider: farm's targets on a cluster of --nodes //tools:node processes holding the
// shards (tools/kv_farm.h), then memcached and Redis on the transport of the same class (Unix
// sockets against shm, TCP on 127.0.0.1 against the others; tools/kv_peers.h): memcached as two
// targets, "memcached" (a round's noreply sets written one by one, then a multi-key get) and
// "memcached-buf" (libmemcached's BUFFER_REQUESTS: the sets and the get in one write; not
// measured at 1 in flight, where there is nothing to buffer), and the targets in words compare
// farm with memcached's better one at each point, as txn_bench does with redis and redis-lua.
// Each store is preloaded with --keys keys (a progress bar on a terminal or with --progress) and
// then measured at every point: workload x distribution x client threads x operations in flight.
// farm's targets send a round's updates as one kv::Client::MultiPut (one Put when there is
// one): a batching like the peers' (memcached-buf's buffered noreply sets, Redis's pipelined
// SETs), with a stronger guarantee than theirs: the round's updates are one transaction, all
// committed or none. One generator drives every target (tools/kv_workload.h). Pinning: this
// process (the client threads of every target) runs on --client_cpus; the store (the shard
// nodes, memcached, redis-server) on --store_cpus, with memcached getting one worker thread per
// store CPU.
//
// References, in the same run: //tools:fabric_bench's one-sided READ of a GET's neighbourhood
// (--kv_neighbourhood x --kv_bucket_bytes bytes) on the same provider, for the GET
// latency target (farm's rows); a 64-byte round trip on the peers' socket transport, both ends
// blocking in read (tools/bench_peers.h's SocketRoundTripP50; the peers' rows).
//
// Output: a table and the issue's targets in words, or with --json one object per point:
//   {"target":"farm","provider":"shm","transport":"shm","workload":"ycsb-b",
//    "distribution":"zipf","threads":2,"in_flight":8,"ops_per_s":..,"latency_of":"round",
//    "p50_us":..,"p99_us":..,"p999_us":..,"keys":..,"key_size":16,"value_size":32,
//    "bytes_per_item":..,"read_ref_p50_us":..,"socket_ref_p50_us":..,"store_cpus":"1",
//    "client_cpus":"0","nodes":1,"poll":"busy",
//    "schema":2,"tool":"kvbench","commit":..,"host":..,"seed":1,"duration_ms":..,"warmup_ms":..,
//    "cores_awake":true,"load_avg":..}
// and on "farm"'s lines "multi_get":"read"|"rpc" (the path its MultiGet took: one-sided READs or
// batched GETs by RPC, kv::MultiGetPath) and "multi_get_asked" (--multi_get: auto, read, rpc)
// (tools/bench_driver.h's RunInfoJson: load_avg is the 1-minute load average after the point,
// cores_awake says whether every core was kept out of idle for the whole run, --cores_awake).
// tools/kvbench_plot.py draws throughput and latency per target from these lines.
// Exit status: 0 success, 1 a target failed (the others still ran), 2 bad flags.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farm/kv/kv.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/bench_peers.h"
#include "tools/bench_util.h"
#include "tools/kv_farm.h"
#include "tools/kv_peers.h"
#include "tools/kv_target.h"
#include "tools/kv_workload.h"

// --provider, --poll and --log_level are the node flags of farm::RunNode (api/node_main.cc),
// which this binary links; kvbench reads them too (--provider takes a list here).
ABSL_DECLARE_FLAG(std::string, provider);
ABSL_DECLARE_FLAG(std::string, poll);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_FLAG(std::string, targets, "farm,farm-rpc,memcached,memcached-buf,redis",
          "stores to measure: farm (GETs by one-sided READ, a round's reads by MultiGet: see "
          "--multi_get; a round's updates by one MultiPut, one atomic transaction), farm-rpc "
          "(GETs by RPC to the shard's node; updates as farm's), memcached (a round's noreply sets "
          "each written at once, then one multi-key get), "
          "memcached-buf (libmemcached's BUFFER_REQUESTS: the round's noreply sets and its get in "
          "one write; not measured at 1 in flight), redis; farm's targets in words compare with "
          "memcached's better variant");
ABSL_FLAG(std::string, multi_get, "auto",
          "how farm's MultiGet reads a round's reads (kv::MultiGetPath), a comma-separated list "
          "measured in turn on the same cluster: read (one-sided READs posted together), rpc (one "
          "batched GET per shard node, in flight together), auto (the provider's choice: rpc on "
          "tcp;ofi_rxm and tcp, read on verbs and shm)");
ABSL_FLAG(std::string, workloads, "a,b,c,w",
          "YCSB workloads: a (50% reads, 50% updates), b (95/5), c (reads only), w (updates only)");
ABSL_FLAG(std::string, dists, "uniform,zipf",
          "key choice: uniform, zipf (Zipf over the keys, scrambled onto them), ycsb-zipf (YCSB's "
          "ScrambledZipfianGenerator: Zipf over 10^10 items, hashed onto the keys), nurand "
          "(TATP's non-uniform choice, (rand(0, A) | rand(1, n)) % n)");
ABSL_FLAG(double, zipf_theta, 0.99, "Zipf skew (0 < theta < 1)");
ABSL_FLAG(int64_t, keys, 1000000, "keys preloaded into every store (and chosen from)");
ABSL_FLAG(int, key_size, 16, "bytes per key (\"user\" + zero-padded number)");
ABSL_FLAG(int, value_size, 32, "bytes per value");
ABSL_FLAG(std::string, threads, "1,2",
          "client threads (each with its own connection / farm Worker), a comma-separated list");
ABSL_FLAG(std::string, in_flight, "1,8",
          "operations in flight per client thread, a comma-separated list: a round issues this "
          "many operations together and ends when all have completed (farm: one MultiGet for the "
          "reads, one MultiPut transaction for the updates; memcached: noreply sets + one "
          "multi-key get, memcached-buf: the same in one "
          "write; Redis: one pipeline); 1 is no "
          "pipelining. An operation's latency is its round's");
ABSL_FLAG(int, warmup_ms, 500, "milliseconds run before each point's measurement");
ABSL_FLAG(int, duration_ms, 2000, "measured milliseconds per point");
ABSL_FLAG(std::string, store_cpus, "",
          "CPUs of the store's processes (farm's shard nodes, memcached, redis-server), e.g. 1; "
          "empty: not pinned");
ABSL_FLAG(std::string, client_cpus, "",
          "CPUs of this process, which runs every target's client threads, e.g. 0; empty: not "
          "pinned");
ABSL_FLAG(int, nodes, 1,
          "farm shard nodes (1..8), each a process with one poller: 1 per store core is how "
          "memcached (-t per store CPU) and single-threaded Redis run; kvbench joins as one "
          "more, without a shard");
ABSL_FLAG(uint64_t, kv_buckets, 0,
          "buckets per farm shard; 0: enough for --keys at --kv_fill of the buckets' bytes");
ABSL_FLAG(double, kv_fill, 0.8, "with --kv_buckets=0: the share of bucket bytes the keys fill");
ABSL_FLAG(uint32_t, kv_bucket_bytes, 256, "bytes per KV bucket: a power of two, 128..4096");
ABSL_FLAG(uint32_t, kv_neighbourhood, 8, "KV hopscotch neighbourhood H: a GET reads H buckets");
ABSL_FLAG(int, memcached_threads, 0, "memcached -t; 0: one per --store_cpus CPU (all if unset)");
ABSL_FLAG(int, load_threads, 4, "threads preloading each store");
ABSL_FLAG(int, farm_load_batch, 16, "keys per farm preload transaction (1..256)");
ABSL_FLAG(bool, progress, false, "show the preload progress bar even when stderr is no terminal");
ABSL_FLAG(bool, json, false, "print one JSON object per point instead of a table");
ABSL_FLAG(int, read_ref_iters, 2000,
          "fabric_bench READs measured for the GET latency reference (0 skips it)");
ABSL_FLAG(int, socket_ref_iters, 20000,
          "64-byte socket round trips measured for the peers' transport reference (a Unix socket "
          "against shm, TCP otherwise; both ends blocking in read, the echo on --store_cpus; 0 "
          "skips it)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the operation generators");
ABSL_FLAG(int, repeat, 1,
          "runs of every target, interleaved (farm, memcached, redis, farm, ...: each run starts "
          "and preloads its targets afresh); above 1, a summary per point: the median and the "
          "spread (min to max) of the runs");
ABSL_FLAG(double, rate, 0,
          "open loop: operations per second offered at every point (all client threads together), "
          "each round due at its time and its latency counted from then (no coordinated "
          "omission); 0: closed loop, each thread's next round as soon as the last completed");
ABSL_FLAG(bool, cores_awake, true,
          "keep every core out of idle for the whole run (/dev/cpu_dma_latency, root), so that "
          "no target pays an idle core's wake-up per request; false measures the machine as it "
          "idles");
ABSL_FLAG(int, timeout_s, 120, "seconds the farm cluster may take to form");
ABSL_FLAG(bool, private_dev_shm, false,
          "run in a private mount namespace with an empty /dev/shm (root only; see txn_bench)");
ABSL_FLAG(std::string, peers_script, "", "tools/bench_peers.sh (found in the runfiles when empty)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the farm nodes bind to");
ABSL_FLAG(std::string, cluster_config, "",
          "measure farm on a running cluster instead of starting one: its configuration (e.g. "
          "from //tools:cluster --late_nodes=1 --write_config=F -- --kv); kvbench joins as a free "
          "late node, with the nodes' default --workers (8), on the cluster's provider, and "
          "leaves its keys there.");

namespace farm {
namespace kvbench {
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kMaxThreads = 16;
constexpr int kMaxInFlight = 64;
constexpr uint64_t kLoadChunk = 1000;

const char* const kTargetNames[] = {"farm", "farm-rpc", "memcached", "memcached-buf", "redis"};

// The peers' targets: each a way of using one server (tools/kv_peers.h).
struct Peer {
  const char* target;
  const char* server;
};
constexpr Peer kPeers[] = {
    {"memcached", "memcached"}, {"memcached-buf", "memcached"}, {"redis", "redis"}};

struct Point {
  Workload workload;
  Distribution dist;
  int threads;
  int in_flight;
};

struct Options {
  KeySpace space;
  std::vector<std::string> providers;
  std::vector<std::string> targets;
  std::vector<Workload> workloads;
  std::vector<Distribution> dists;
  std::vector<int> threads, in_flight;
  double theta = 0.99;
  uint64_t seed = 1;
  int warmup_ms = 0, duration_ms = 0, load_threads = 0;
  std::string store_cpus, client_cpus;
  int memcached_threads = 1;
  FarmOptions farm;
  bool json = false, progress = false;
  double rate = 0;                 // --rate (0: closed loop)
  int repeat = 1;                  // --repeat
  std::vector<std::string> polls;  // farm's poll modes (--poll), each a cluster of its own
  std::vector<kv::MultiGetPath> multi_gets;  // --multi_get, each a run of "farm"
  RunInfo info;                    // set by DriverMain

  bool Wants(const std::string& target) const {
    return std::find(targets.begin(), targets.end(), target) != targets.end();
  }
  std::vector<Point> Points() const {
    std::vector<Point> out;
    for (Workload w : workloads) {
      for (Distribution d : dists) {
        for (int t : threads) {
          for (int k : in_flight) out.push_back(Point{w, d, t, k});
        }
      }
    }
    return out;
  }
  int max_threads() const { return *std::max_element(threads.begin(), threads.end()); }
};

absl::Status Prefixed(const std::string& flag, const absl::Status& s) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", s.message()));
}

// --multi_get's names of kv::MultiGetPath.
std::string MultiGetName(kv::MultiGetPath p) {
  return p == kv::MultiGetPath::kAuto ? "auto" : p == kv::MultiGetPath::kRpc ? "rpc" : "read";
}
absl::StatusOr<kv::MultiGetPath> ParseMultiGet(const std::string& name) {
  for (kv::MultiGetPath p :
       {kv::MultiGetPath::kAuto, kv::MultiGetPath::kOneSided, kv::MultiGetPath::kRpc}) {
    if (name == MultiGetName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown path '", name, "' (auto, read, rpc)"));
}

// The farm shard size for `space`: buckets enough that the entries (8 bytes of header, key and
// value each) fill `fill` of the buckets' payload (kv/bucket.h: a 24-byte object header and an
// 8-byte overflow link per bucket).
uint64_t AutoBuckets(const KeySpace& space, int nodes, uint32_t bucket_bytes, double fill) {
  const double entry = 8.0 + space.key_size + space.value_size;
  const double payload = static_cast<double>(bucket_bytes) - 32;
  const double per_node = static_cast<double>(space.keys) / nodes;
  return std::max<uint64_t>(64, static_cast<uint64_t>(per_node * entry / (fill * payload)) + 1);
}

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  std::string providers = absl::GetFlag(FLAGS_provider);
  int attach_shards = 0;  // --cluster_config: the cluster's shard (not late) nodes
  if (const std::string attach = absl::GetFlag(FLAGS_cluster_config); !attach.empty()) {
    // The cluster's own provider, unless --provider names it.
    absl::StatusOr<config::ClusterConfig> c = LoadClusterConfig(attach);
    if (!c.ok()) return Prefixed("cluster_config", c.status());
    const std::string theirs = ResolveProvider(c->provider().empty() ? "auto" : c->provider());
    for (const config::NodeConfig& n : c->node()) attach_shards += n.late() ? 0 : 1;
    if (providers.empty()) providers = theirs;
    if (ResolveProvider(providers) != theirs) {
      return absl::InvalidArgumentError(absl::StrCat("--provider=", providers,
                                                     " but the cluster of --cluster_config runs ",
                                                     theirs));
    }
  }
  if (providers.empty()) providers = "shm";
  for (const std::string& p : SplitList(providers)) {
    if (absl::Status s = CheckProvider(p); !s.ok()) return Prefixed("provider", s);
    o.providers.push_back(p);
  }
  for (const std::string& t : SplitList(absl::GetFlag(FLAGS_targets))) {
    if (std::find(std::begin(kTargetNames), std::end(kTargetNames), t) == std::end(kTargetNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--targets: unknown target '", t, "' (known: ", absl::StrJoin(kTargetNames, ", "), ")"));
    }
    o.targets.push_back(t);
  }
  absl::StatusOr<std::vector<Workload>> w = ParseWorkloads(absl::GetFlag(FLAGS_workloads));
  if (!w.ok()) return Prefixed("workloads", w.status());
  o.workloads = *w;
  absl::StatusOr<std::vector<Distribution>> d = ParseDistributions(absl::GetFlag(FLAGS_dists));
  if (!d.ok()) return Prefixed("dists", d.status());
  o.dists = *d;
  absl::StatusOr<std::vector<int>> t = ParseThreads(absl::GetFlag(FLAGS_threads), kMaxThreads);
  if (!t.ok()) return Prefixed("threads", t.status());
  o.threads = *t;
  absl::StatusOr<std::vector<int>> k = ParseThreads(absl::GetFlag(FLAGS_in_flight), kMaxInFlight);
  if (!k.ok()) return Prefixed("in_flight", k.status());
  o.in_flight = *k;
  o.theta = absl::GetFlag(FLAGS_zipf_theta);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (!(o.theta > 0 && o.theta < 1)) {
    return absl::InvalidArgumentError("--zipf_theta must be in (0, 1)");
  }
  const int64_t keys = absl::GetFlag(FLAGS_keys);
  if (keys < 1 || keys > 100000000) return absl::InvalidArgumentError("--keys must be 1..1e8");
  o.space = KeySpace{static_cast<uint64_t>(keys), absl::GetFlag(FLAGS_key_size),
                     absl::GetFlag(FLAGS_value_size)};
  if (absl::Status s = o.space.Check(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keys/--key_size/--value_size: ", s.message()));
  }
  o.warmup_ms = absl::GetFlag(FLAGS_warmup_ms);
  o.duration_ms = absl::GetFlag(FLAGS_duration_ms);
  if (o.duration_ms < 1 || o.duration_ms > 3600000) {
    return absl::InvalidArgumentError("--duration_ms must be 1..3600000");
  }
  if (o.warmup_ms < 0 || o.warmup_ms > 600000) {
    return absl::InvalidArgumentError("--warmup_ms must be 0..600000");
  }
  o.load_threads = absl::GetFlag(FLAGS_load_threads);
  if (o.load_threads < 1 || o.load_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--load_threads must be 1..", kMaxThreads));
  }
  o.store_cpus = absl::GetFlag(FLAGS_store_cpus);
  o.client_cpus = absl::GetFlag(FLAGS_client_cpus);
  int store_cpu_count = static_cast<int>(std::thread::hardware_concurrency());
  for (auto [flag, value] : {std::pair<const char*, std::string>{"store_cpus", o.store_cpus},
                             {"client_cpus", o.client_cpus}}) {
    if (value.empty()) continue;
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(value);
    if (!cpus.ok()) return Prefixed(flag, cpus.status());
    for (int c : *cpus) {
      if (c >= static_cast<int>(std::thread::hardware_concurrency())) {
        return absl::InvalidArgumentError(absl::StrCat("--", flag, ": CPU ", c,
                                                       " does not exist (this machine has ",
                                                       std::thread::hardware_concurrency(), ")"));
      }
    }
    if (std::string(flag) == "store_cpus") store_cpu_count = static_cast<int>(cpus->size());
  }
  o.memcached_threads = absl::GetFlag(FLAGS_memcached_threads);
  if (o.memcached_threads < 0 || o.memcached_threads > 64) {
    return absl::InvalidArgumentError("--memcached_threads must be 0..64");
  }
  if (o.memcached_threads == 0) o.memcached_threads = std::max(1, store_cpu_count);
  o.json = absl::GetFlag(FLAGS_json);
  o.progress = absl::GetFlag(FLAGS_progress) || isatty(STDERR_FILENO);

  o.repeat = absl::GetFlag(FLAGS_repeat);
  if (o.repeat < 1 || o.repeat > 100) return absl::InvalidArgumentError("--repeat must be 1..100");
  o.rate = absl::GetFlag(FLAGS_rate);
  if (!(o.rate >= 0 && o.rate <= 1e9)) return absl::InvalidArgumentError("--rate must be 0..1e9");
  FarmOptions& f = o.farm;
  o.polls = SplitList(absl::GetFlag(FLAGS_poll));
  for (const std::string& mode : o.polls) {
    if (mode != "busy" && mode != "adaptive") {
      return absl::InvalidArgumentError(
          absl::StrCat("--poll: unknown mode '", mode, "' (busy, adaptive)"));
    }
  }
  if (o.polls.empty()) return absl::InvalidArgumentError("--poll: no mode");
  for (const std::string& m : SplitList(absl::GetFlag(FLAGS_multi_get))) {
    absl::StatusOr<kv::MultiGetPath> path = ParseMultiGet(m);
    if (!path.ok()) return Prefixed("multi_get", path.status());
    o.multi_gets.push_back(*path);
  }
  if (o.multi_gets.empty()) return absl::InvalidArgumentError("--multi_get: no path");
  f.poll = o.polls[0];
  f.host = absl::GetFlag(FLAGS_host);
  f.store_cpus = o.store_cpus;
  const std::string log_level = absl::GetFlag(FLAGS_log_level);
  f.log_level = log_level == "info" ? "warn" : log_level;
  f.nodes = absl::GetFlag(FLAGS_nodes);
  if (f.nodes < 1 || f.nodes > 8) return absl::InvalidArgumentError("--nodes must be 1..8");
  f.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (f.timeout_s < 1) return absl::InvalidArgumentError("--timeout_s must be at least 1");
  f.workers = o.max_threads() + o.load_threads + 2;
  f.attach_config = absl::GetFlag(FLAGS_cluster_config);
  if (!f.attach_config.empty() && o.polls.size() > 1) {
    return absl::InvalidArgumentError(
        "--poll: one mode with --cluster_config (the running cluster's nodes poll as started)");
  }
  if (!f.attach_config.empty()) {
    f.nodes = attach_shards;
    f.workers = RuntimeOptions{}.workers;  // every node's lanes must match the running nodes'
    if (o.max_threads() + o.load_threads > f.workers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cluster_config: at most ", f.workers, " client and preload threads together"));
    }
  }
  f.load_batch = absl::GetFlag(FLAGS_farm_load_batch);
  if (f.load_batch < 1 || f.load_batch > 256) {
    return absl::InvalidArgumentError("--farm_load_batch must be 1..256");
  }
  f.kv.bucket_bytes = absl::GetFlag(FLAGS_kv_bucket_bytes);
  f.kv.neighbourhood = absl::GetFlag(FLAGS_kv_neighbourhood);
  const uint32_t bb = f.kv.bucket_bytes;
  if (bb < 128 || bb > 4096 || (bb & (bb - 1)) != 0) {
    return absl::InvalidArgumentError("--kv_bucket_bytes must be a power of two, 128..4096");
  }
  if (f.kv.neighbourhood < 1 || f.kv.neighbourhood > 64) {
    return absl::InvalidArgumentError("--kv_neighbourhood must be 1..64");
  }
  const double fill = absl::GetFlag(FLAGS_kv_fill);
  if (!(fill > 0 && fill <= 1)) return absl::InvalidArgumentError("--kv_fill must be in (0, 1]");
  f.kv.buckets = absl::GetFlag(FLAGS_kv_buckets);
  if (f.kv.buckets == 0) f.kv.buckets = AutoBuckets(o.space, f.nodes, bb, fill);
  if (FarmCluster::ShardBytes(f.kv) > (uint64_t{16} << 30)) {
    return absl::InvalidArgumentError(
        "a farm shard would take more than 16 GiB: fewer --keys or "
        "--kv_buckets");
  }
  if (absl::GetFlag(FLAGS_read_ref_iters) < 0 || absl::GetFlag(FLAGS_socket_ref_iters) < 0) {
    return absl::InvalidArgumentError("--read_ref_iters and --socket_ref_iters must be >= 0");
  }
  return o;
}

// ---------------------------------------------------------------------------------------------
// Output.

struct Row {
  std::string target, provider, transport;
  Point point;
  double ops_per_s = 0, p50 = 0, p99 = 0, p999 = 0;
  double bytes_per_item = 0;
  double resident_per_item = 0;  // the store processes' VmRSS over items (0: unknown)
  double read_ref_p50 = 0;    // fabric_bench READ of a neighbourhood, same provider (0: none)
  double socket_ref_p50 = 0;  // peers: a 64-byte socket round trip on their transport (0: none)
  std::string poll = "none";  // farm: its nodes' and client's poll mode
  // "farm": MultiGet's path taken ("read", "rpc") and asked (--multi_get); empty for the others.
  std::string multi_get, multi_get_asked;
  uint64_t missed_ops = 0;    // open loop: due inside the window, never issued
  int repeat = 1;             // the run (1..--repeat); 0: the summary of every run
  // The summary's spread over the runs (ops_per_s, p50, p99 are the runs' medians).
  double ops_min = 0, ops_max = 0, p50_min = 0, p50_max = 0;
};

std::string JsonRow(const Row& r, const Options& o) {
  return absl::StrFormat(
      "{\"target\":\"%s\",\"provider\":\"%s\",\"transport\":\"%s\",\"workload\":\"%s\","
      "\"distribution\":\"%s\",\"threads\":%d,\"in_flight\":%d,\"ops_per_s\":%.1f,"
      "\"latency_of\":\"%s\",\"loop\":\"%s\",\"rate\":%.1f,\"missed_ops\":%d,"
      "\"p50_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,\"keys\":%d,\"key_size\":%d,"
      "\"value_size\":%d,\"bytes_per_item\":%.1f,\"resident_per_item\":%.1f,"
      "\"read_ref_p50_us\":%.3f,"
      "\"socket_ref_p50_us\":%.3f,"
      "\"store_cpus\":\"%s\",\"client_cpus\":\"%s\",\"nodes\":%d,\"poll\":\"%s\","
      "\"repeat\":%d,\"repeats\":%d%s%s%s}",
      r.target, r.provider, r.transport, WorkloadName(r.point.workload),
      DistributionName(r.point.dist), r.point.threads, r.point.in_flight, r.ops_per_s,
      r.point.in_flight > 1 ? "round" : "operation", o.rate > 0 ? "open" : "closed", o.rate,
      r.missed_ops, r.p50, r.p99, r.p999, o.space.keys, o.space.key_size, o.space.value_size,
      r.bytes_per_item, r.resident_per_item, r.read_ref_p50, r.socket_ref_p50, o.store_cpus,
      o.client_cpus, o.farm.nodes, r.poll, r.repeat, o.repeat,
      r.repeat == 0 ? absl::StrFormat(",\"ops_per_s_min\":%.1f,\"ops_per_s_max\":%.1f,"
                                      "\"p50_us_min\":%.3f,\"p50_us_max\":%.3f",
                                      r.ops_min, r.ops_max, r.p50_min, r.p50_max)
                    : std::string(),
      r.multi_get.empty() ? std::string()
                          : absl::StrFormat(",\"multi_get\":\"%s\",\"multi_get_asked\":\"%s\"",
                                            r.multi_get, r.multi_get_asked),
      RunInfoJson(o.info));
}

// The target column: "farm" with its MultiGet path as asked ("farm/rpc", "farm/read", or
// "farm/auto": kAuto batches only to the nodes that serve kv::kAutoMinBatch of a round's keys and
// reads the others' keys one-sided, so it is neither path alone).
std::string Shown(const Row& r) {
  return r.multi_get.empty() ? r.target : absl::StrCat(r.target, "/", r.multi_get_asked);
}

// farm's MultiGet path in words, for the targets' lines.
std::string MultiGetWords(const Row& r) {
  if (r.multi_get_asked != "auto") return r.multi_get;
  return r.multi_get == "rpc"
             ? absl::StrCat("auto: batches to nodes serving >= ", kv::kAutoMinBatch,
                            " of the keys, READs to the others")
             : std::string("auto: READs");
}

void PrintTableHeader() {
  std::printf("%-13s %-11s %-8s %-10s %-9s %3s %4s %12s %9s %9s %9s\n", "target", "transport",
              "poll", "workload", "dist", "thr", "infl", "ops/s", "p50 us", "p99 us", "p99.9 us");
}

void PrintTableRow(const Row& r) {
  std::printf("%-13s %-11s %-8s %-10s %-9s %3d %4d %12.0f %9.2f %9.2f %9.2f\n", Shown(r).c_str(),
              r.transport.c_str(), r.poll == "none" ? "-" : r.poll.c_str(),
              WorkloadName(r.point.workload).c_str(), DistributionName(r.point.dist).c_str(),
              r.point.threads, r.point.in_flight, r.ops_per_s, r.p50, r.p99, r.p999);
  std::fflush(stdout);
}

// The targets, in words, for one provider's rows.
void PrintTargets(const std::vector<Row>& rows, const std::string& provider) {
  auto find = [&](const std::string& target, const Point& p) -> const Row* {
    for (const Row& r : rows) {
      if (r.provider == provider && r.target == target && r.point.workload == p.workload &&
          r.point.dist == p.dist && r.point.threads == p.threads &&
          r.point.in_flight == p.in_flight) {
        return &r;
      }
    }
    return nullptr;
  };
  for (const Row& f : rows) {
    if (f.provider != provider || f.target != "farm") continue;
    const Point& p = f.point;
    if (p.workload == Workload::kC && p.threads == 1 && p.in_flight == 1 && f.read_ref_p50 > 0) {
      const double ratio = f.p50 / f.read_ref_p50;
      std::printf(
          "  GET p50 (poll %s, ycsb-c %s, 1 thread, 1 in flight) %.2f us vs fabric_bench READ "
          "%.2f us: %.2fx (target <= 1.25x: %s)\n",
          f.poll.c_str(), DistributionName(p.dist).c_str(), f.p50, f.read_ref_p50, ratio,
          ratio <= 1.25 ? "met" : "MISSED");
    }
    if (p.workload != Workload::kB && p.workload != Workload::kC) continue;
    // Against each server's best target at this point (memcached or memcached-buf).
    for (const char* server : {"memcached", "redis"}) {
      const Row* best = nullptr;
      int measured = 0;
      for (const Peer& peer : kPeers) {
        const Row* r = find(peer.target, p);
        if (std::string(peer.server) != server || r == nullptr || r->ops_per_s <= 0) continue;
        ++measured;
        if (best == nullptr || r->ops_per_s > best->ops_per_s) best = r;
      }
      if (best == nullptr) continue;
      const double ratio = f.ops_per_s / best->ops_per_s;
      std::printf(
          "  %s %-7s %d thr %2d in flight: farm (poll %s, %s) %.0f ops/s = %.2fx %s%s "
          "over %s (target >= 2x: %s)\n",
          WorkloadName(p.workload).c_str(), DistributionName(p.dist).c_str(), p.threads,
          p.in_flight, f.poll.c_str(),
          // At one in flight a round is one Get: no MultiGet path to name.
          p.in_flight > 1 ? absl::StrCat("MultiGet ", MultiGetWords(f)).c_str() : "one Get a round",
          f.ops_per_s, ratio, best->target.c_str(),
          measured > 1 ? absl::StrCat(" (", server, "'s best)").c_str() : "",
          best->transport.c_str(), ratio >= 2 ? "met" : "MISSED");
    }
  }
  // The peers against their transport's own round trip.
  for (const Row& r : rows) {
    const Point& p = r.point;
    if (r.provider != provider || r.socket_ref_p50 <= 0 || p.workload != Workload::kC ||
        p.threads != 1 || p.in_flight != 1) {
      continue;
    }
    std::printf(
        "  %s GET p50 (ycsb-c %s, 1 thread, 1 in flight) %.2f us vs a 64 B %s socket round trip "
        "%.2f us: %.2fx (its transport's reference)\n",
        r.target.c_str(), DistributionName(p.dist).c_str(), r.p50, r.transport.c_str(),
        r.socket_ref_p50, r.p50 / r.socket_ref_p50);
  }
}

// ---------------------------------------------------------------------------------------------
// Running a target.

// A progress bar on standard error: "preloading memcached (unix): 530000/1000000 keys (53%)".
class ProgressBar {
 public:
  ProgressBar(bool show, std::string what, uint64_t total)
      : show_(show), what_(std::move(what)), total_(total), start_(absl::Now()) {}
  void Update(uint64_t done) {
    if (!show_) return;
    const double s = absl::ToDoubleSeconds(absl::Now() - start_);
    const int width = 30;
    const int filled = static_cast<int>(width * done / std::max<uint64_t>(1, total_));
    std::fprintf(stderr, "\r%s [%s%s] %llu/%llu keys (%3d%%) %.0f keys/s ", what_.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                 static_cast<int>(100 * done / std::max<uint64_t>(1, total_)),
                 s > 0 ? done / s : 0.0);
    std::fflush(stderr);
  }
  void Finish() {
    if (show_) std::fprintf(stderr, "\n");
    spdlog::info("{}: {} keys in {:.1f} s", what_, total_,
                 absl::ToDoubleSeconds(absl::Now() - start_));
  }

 private:
  bool show_;
  std::string what_;
  uint64_t total_;
  absl::Time start_;
};

absl::Status PreloadTarget(KvTarget& t, const Options& o) {
  std::vector<std::unique_ptr<KvConnection>> conns;
  for (int i = 0; i < o.load_threads; ++i) {
    absl::StatusOr<std::unique_ptr<KvConnection>> c = t.Connect();
    if (!c.ok()) return c.status();
    conns.push_back(std::move(*c));
  }
  ProgressBar bar(o.progress, absl::StrCat("preloading ", t.name(), " (", t.transport(), ")"),
                  o.space.keys);
  absl::Status s = Preload(
      o.space.keys, o.load_threads, kLoadChunk,
      [&](int thread, uint64_t first, uint64_t count) {
        return conns[static_cast<size_t>(thread)]->Load(first, count);
      },
      [&](uint64_t done) { bar.Update(done); });
  bar.Finish();
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("preloading: ", s.message()));
  return absl::OkStatus();
}

// One point: `threads` client threads, each on its own connection, from one window.
absl::StatusOr<ClientResult> RunPoint(std::vector<std::unique_ptr<KvConnection>>& conns,
                                      std::vector<ReadCheck>& checks, std::vector<uint64_t>& counts,
                                      const KeyChooser& chooser, const Point& p, size_t index,
                                      const Options& o) {
  std::vector<ClientResult> results(static_cast<size_t>(p.threads));
  std::vector<absl::Status> status(static_cast<size_t>(p.threads));
  const Window window = Window::After(o.warmup_ms, o.duration_ms);
  std::vector<std::thread> threads;
  for (int i = 0; i < p.threads; ++i) {
    threads.emplace_back([&, i] {
      ReadCheck& check = checks[static_cast<size_t>(i)];
      uint64_t& count = counts[static_cast<size_t>(i)];
      OpGenerator gen(chooser, p.workload, ThreadSeed(o.seed, index, i), check.writer(), count);
      KvConnection& c = *conns[static_cast<size_t>(i)];
      const RoundFn round = [&c, &check](absl::Span<const Op> ops) {
        absl::Status s = c.Round(ops, check);
        if (s.ok()) check.Completed(ops);
        return s;
      };
      ClientResult* r = &results[static_cast<size_t>(i)];
      status[static_cast<size_t>(i)] =
          o.rate > 0 ? RunClientOpenLoop(gen, p.in_flight, window, o.rate / p.threads / p.in_flight,
                                         round, r)
                     : RunClient(gen, p.in_flight, window, round, r);
      count = gen.count();
    });
  }
  for (std::thread& t : threads) t.join();
  ClientResult all;
  for (int i = 0; i < p.threads; ++i) {
    if (!status[static_cast<size_t>(i)].ok()) return status[static_cast<size_t>(i)];
    all.Merge(results[static_cast<size_t>(i)]);
  }
  return all;
}

// Preloads one target, then runs every point on it; prints a row per point.
absl::Status RunTarget(KvTarget& t, bool preload, const std::string& provider,
                       const std::string& poll, double read_ref, double socket_ref,
                       const Options& o,
                       std::map<Distribution, std::unique_ptr<KeyChooser>>& choosers,
                       const std::function<void(const Row&)>& print) {
  const std::vector<Point> points = o.Points();
  bool any = false;
  for (const Point& p : points) any |= t.WhyNotMeasured(p.in_flight).empty();
  for (int k : o.in_flight) {
    if (const std::string why = t.WhyNotMeasured(k); !why.empty()) {
      spdlog::info("{} ({}): not measured at {} in flight: {}", t.name(), t.transport(), k, why);
    }
  }
  if (!any) return absl::OkStatus();
  if (preload) {
    if (absl::Status s = PreloadTarget(t, o); !s.ok()) return s;
  }
  absl::StatusOr<MemoryReport> memory = t.Memory();
  if (!memory.ok()) return memory.status();
  if (memory->items != o.space.keys) {
    return absl::DataLossError(absl::StrCat(t.name(), " holds ", memory->items,
                                            " items after "
                                            "preloading ",
                                            o.space.keys, " keys"));
  }
  spdlog::info(
      "{} ({}): {:.1f} bytes per item ({}); {:.1f} resident bytes per item (the store "
      "processes' VmRSS, {} bytes)",
      t.name(), t.transport(), memory->per_item(), memory->method, memory->resident_per_item(),
      memory->resident_bytes);
  std::vector<std::unique_ptr<KvConnection>> conns;
  std::vector<ReadCheck> checks;  // thread i's: writer i + 1, kept over every point
  std::vector<uint64_t> counts(static_cast<size_t>(o.max_threads()));  // thread i's updates
  for (int i = 0; i < o.max_threads(); ++i) {
    absl::StatusOr<std::unique_ptr<KvConnection>> c = t.Connect();
    if (!c.ok()) return c.status();
    conns.push_back(std::move(*c));
    checks.emplace_back(o.space, static_cast<uint32_t>(i + 1));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const Point& p = points[i];
    // A point keeps its index (its generators' seeds) whatever the target skips.
    if (!t.WhyNotMeasured(p.in_flight).empty()) continue;
    absl::StatusOr<ClientResult> r = RunPoint(conns, checks, counts, *choosers[p.dist], p, i, o);
    if (!r.ok()) {
      return absl::Status(
          r.status().code(),
          absl::StrCat(WorkloadName(p.workload), " ", DistributionName(p.dist), " ", p.threads,
                       " threads ", p.in_flight, " in flight: ", r.status().message()));
    }
    Row row;
    row.target = t.name();
    row.provider = provider;
    row.transport = t.transport();
    row.point = p;
    row.ops_per_s = r->measured_seconds > 0 ? r->ops / r->measured_seconds
                                            : r->ops / (o.duration_ms / 1000.0);
    row.p50 = r->latency.Percentile(0.5);
    row.p99 = r->latency.Percentile(0.99);
    row.p999 = r->latency.Percentile(0.999);
    row.missed_ops = r->missed_ops;
    if (r->missed_ops > 0) {
      spdlog::warn(
          "{} ({}): {} operations due at --rate={} were never issued: the rate is "
          "beyond what it serves at this point",
          t.name(), t.transport(), r->missed_ops, o.rate);
    }
    row.bytes_per_item = memory->per_item();
    row.resident_per_item = memory->resident_per_item();
    row.read_ref_p50 = read_ref;
    row.socket_ref_p50 = socket_ref;
    row.poll = poll;
    print(row);
  }
  uint64_t judged = 0;
  for (const ReadCheck& c : checks) judged += c.judged();
  spdlog::info(
      "{} ({}): {} reads judged against the reading thread's own earlier update "
      "(read-your-writes), none stale",
      t.name(), t.transport(), judged);
  return absl::OkStatus();
}

// fabric_bench's one-sided READ of a GET's neighbourhood on `provider`: its p50 in µs. It runs
// on the store's and the clients' CPUs together (its initiator and target, like a client thread
// and a shard node).
absl::StatusOr<double> MeasureReadReference(const std::string& provider, const std::string& poll,
                                            const Options& o) {
  const uint64_t bytes = uint64_t{o.farm.kv.neighbourhood} * o.farm.kv.bucket_bytes;
  std::string cpus;
  if (!o.store_cpus.empty() && !o.client_cpus.empty()) {
    cpus = absl::StrCat(o.store_cpus, ",", o.client_cpus);
  }
  absl::StatusOr<std::vector<std::string>> lines =
      RunTool("tools/fabric_bench",
              {absl::StrCat("--provider=", provider), absl::StrCat("--sizes=", bytes),
               "--duration_ms=0", "--json", absl::StrCat("--poll=", poll),
               absl::StrCat("--iters=", absl::GetFlag(FLAGS_read_ref_iters))},
              cpus);
  if (!lines.ok()) return lines.status();
  for (const std::string& line : *lines) {
    if (line.find("\"op\":\"read\"") == std::string::npos) continue;
    return JsonNumber(line, "p50_us");
  }
  return absl::InternalError("fabric_bench printed no READ line");
}

// Every wanted target on `provider`: farm's, then the peers on the matching transport.
bool RunProvider(const std::string& provider, const Options& o,
                 const std::function<void(const Row&)>& print) {
  bool ok = true;
  std::map<Distribution, std::unique_ptr<KeyChooser>> choosers;
  for (Distribution d : o.dists)
    choosers[d] = std::make_unique<KeyChooser>(d, o.space.keys, o.theta);
  auto fail = [&](const std::string& what, const absl::Status& s) {
    spdlog::error("{} on {}: {}", what, provider, s.ToString());
    ok = false;
  };
  // farm once per poll mode, each a cluster of its own with its own READ reference.
  for (const std::string& poll : o.polls) {
    if (!o.Wants("farm") && !o.Wants("farm-rpc")) break;
    double read_ref = 0;
    if (absl::GetFlag(FLAGS_read_ref_iters) > 0 && o.Wants("farm")) {
      absl::StatusOr<double> r = MeasureReadReference(provider, poll, o);
      if (r.ok()) {
        read_ref = *r;
      } else {
        spdlog::warn("READ reference on {} (poll {}): {}", provider, poll, r.status().ToString());
      }
    }
    FarmOptions f = o.farm;
    f.provider = provider;
    f.poll = poll;
    absl::StatusOr<std::unique_ptr<FarmCluster>> cluster = FarmCluster::Start(f, o.space);
    if (!cluster.ok()) {
      fail(absl::StrCat("farm (poll ", poll, ")"), cluster.status());
      continue;
    }
    bool loaded = false;
    // "farm" once per --multi_get path, its rows saying which; then "farm-rpc".
    auto run = [&](bool rpc, std::optional<kv::MultiGetPath> multi_get) {
      std::unique_ptr<KvTarget> t =
          (*cluster)->Target(rpc, multi_get.value_or(kv::MultiGetPath::kAuto));
      if (!o.Wants(t->name())) return;
      const std::function<void(const Row&)> labelled = [&](const Row& r) {
        Row with = r;
        with.multi_get = MultiGetName((*cluster)->MultiGetPathFor(*multi_get));
        with.multi_get_asked = MultiGetName(*multi_get);
        print(with);
      };
      absl::Status s = RunTarget(*t, !loaded, provider, poll, read_ref, 0, o, choosers,
                                 multi_get.has_value() ? labelled : print);
      loaded = true;
      if (!s.ok()) fail(absl::StrCat(t->name(), " (poll ", poll, ")"), s);
    };
    for (kv::MultiGetPath m : o.multi_gets) run(false, m);
    run(true, std::nullopt);
  }
  absl::StatusOr<std::string> script = PeersScript(absl::GetFlag(FLAGS_peers_script));
  PeerOptions po;
  po.transport = TransportFor(provider);
  po.cpus = o.store_cpus;
  po.memcached_threads = o.memcached_threads;
  po.memcached_mb = MemcachedMegabytes(o.space);
  double socket_ref = 0;
  const bool any_peer = std::any_of(std::begin(kPeers), std::end(kPeers),
                                    [&](const Peer& p) { return o.Wants(p.target); });
  if (absl::GetFlag(FLAGS_socket_ref_iters) > 0 && any_peer) {
    absl::StatusOr<double> r =
        SocketRoundTripP50(po.transport, 64, absl::GetFlag(FLAGS_socket_ref_iters), o.store_cpus);
    if (r.ok()) {
      socket_ref = *r;
    } else {
      spdlog::warn("socket reference on {}: {}", TransportName(po.transport),
                   r.status().ToString());
    }
  }
  for (const Peer& peer : kPeers) {
    if (!o.Wants(peer.target)) continue;
    if (!script.ok()) {
      fail(peer.target, script.status());
      continue;
    }
    po.script = *script;
    const std::string name = peer.target;
    absl::StatusOr<std::unique_ptr<KvTarget>> t =
        name == "redis" ? StartRedis(o.space, po)
                        : StartMemcached(o.space, po,
                                         name == "memcached-buf" ? MemcachedSets::kBufferedNoReply
                                                                 : MemcachedSets::kNoReply);
    absl::Status s = t.ok()
                         ? RunTarget(**t, true, provider, "none", 0, socket_ref, o, choosers, print)
                         : t.status();
    if (!s.ok()) fail(peer.target, s);
  }
  return ok;
}

// One summary row (repeat 0) per target, poll and point of `provider`'s runs.
std::vector<Row> Summaries(const std::vector<Row>& rows, const std::string& provider) {
  std::vector<Row> out;
  for (const Row& first : rows) {
    if (first.provider != provider || first.repeat != 1) continue;
    std::vector<double> ops, p50, p99, p999;
    for (const Row& r : rows) {
      if (r.provider != provider || r.repeat == 0 || r.target != first.target ||
          r.multi_get_asked != first.multi_get_asked || r.poll != first.poll ||
          r.point.workload != first.point.workload || r.point.dist != first.point.dist ||
          r.point.threads != first.point.threads || r.point.in_flight != first.point.in_flight) {
        continue;
      }
      ops.push_back(r.ops_per_s);
      p50.push_back(r.p50);
      p99.push_back(r.p99);
      p999.push_back(r.p999);
    }
    Row s = first;
    s.repeat = 0;
    const Spread o = SpreadOf(ops), m = SpreadOf(p50);
    s.ops_per_s = o.median;
    s.ops_min = o.min;
    s.ops_max = o.max;
    s.p50 = m.median;
    s.p50_min = m.min;
    s.p50_max = m.max;
    s.p99 = SpreadOf(p99).median;
    s.p999 = SpreadOf(p999).median;
    out.push_back(s);
  }
  return out;
}

void PrintSummaryTable(const std::vector<Row>& summaries, int repeats) {
  std::printf("median of %d runs (min - max):\n", repeats);
  std::printf("%-13s %-11s %-8s %-10s %-9s %3s %4s %12s %21s %9s %17s %9s\n", "target", "transport",
              "poll", "workload", "dist", "thr", "infl", "ops/s", "(min - max)", "p50 us",
              "(min - max)", "p99 us");
  for (const Row& r : summaries) {
    std::printf("%-13s %-11s %-8s %-10s %-9s %3d %4d %12.0f %21s %9.2f %17s %9.2f\n",
                Shown(r).c_str(), r.transport.c_str(), r.poll == "none" ? "-" : r.poll.c_str(),
                WorkloadName(r.point.workload).c_str(), DistributionName(r.point.dist).c_str(),
                r.point.threads, r.point.in_flight, r.ops_per_s,
                absl::StrFormat("(%.0f - %.0f)", r.ops_min, r.ops_max).c_str(), r.p50,
                absl::StrFormat("(%.2f - %.2f)", r.p50_min, r.p50_max).c_str(), r.p99);
  }
}

int DriverMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "kvbench"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<Options> o = OptionsFromFlags();
  if (!o.ok()) {
    spdlog::error("{}", std::string(o.status().message()));
    return kExitUsage;
  }
  if (!o->client_cpus.empty()) {
    if (absl::Status s = PinTo(o->client_cpus); !s.ok()) {
      spdlog::error("--client_cpus: {}", std::string(s.message()));
      return kExitUsage;
    }
  }
  if (absl::GetFlag(FLAGS_private_dev_shm)) {
    if (absl::Status s = UsePrivateDevShm(); !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return kExitUsage;
    }
  }
  const CoresAwake awake(absl::GetFlag(FLAGS_cores_awake));
  if (absl::GetFlag(FLAGS_cores_awake) && !awake.held()) {
    spdlog::warn("cannot keep the cores out of idle ({}): targets pay idle wake-ups",
                 awake.why_not());
  }
  o->info = RunInfo{"kvbench", o->seed, o->duration_ms, o->warmup_ms, awake.held()};
  std::vector<Row> rows;
  bool failed = false;
  for (const std::string& provider : o->providers) {
    if (!o->json) {
      std::printf(
          "\nkvbench: provider %s (peers over %s), %llu keys of %d B, values of %d B, %d ms per "
          "point (+%d ms warm-up); store on CPUs %s (%s; memcached -t %d; redis-server), clients "
          "on CPUs %s, farm's client node polling as its cluster; cores %s\n",
          provider.c_str(), TransportName(TransportFor(provider)).c_str(),
          static_cast<unsigned long long>(o->space.keys), o->space.key_size, o->space.value_size,
          o->duration_ms, o->warmup_ms, o->store_cpus.empty() ? "any" : o->store_cpus.c_str(),
          o->farm.attach_config.empty()
              ? absl::StrFormat(
                    "%d farm nodes, poll %s (a cluster each), %llu buckets of %u B each",
                    o->farm.nodes, absl::StrJoin(o->polls, " and "),
                    static_cast<unsigned long long>(o->farm.kv.buckets), o->farm.kv.bucket_bytes)
                    .c_str()
              : absl::StrFormat("farm: the running cluster of %s, %d shard nodes",
                                o->farm.attach_config, o->farm.nodes)
                    .c_str(),
          o->memcached_threads, o->client_cpus.empty() ? "any" : AffinityText().c_str(),
          o->info.cores_awake ? "kept out of idle"
                              : "left to idle (--cores_awake=false or not root)");
    }
    int run = 1;
    bool header_shown = false;  // at the first row: no empty table when every target fails
    auto print = [&](const Row& r) {
      Row with = r;
      with.repeat = run;
      rows.push_back(with);
      if (o->json) {
        std::printf("%s\n", JsonRow(with, *o).c_str());
        std::fflush(stdout);
      } else {
        if (!std::exchange(header_shown, true)) PrintTableHeader();
        PrintTableRow(with);
      }
    };
    // The runs: every target once per run, so that the targets take turns.
    for (; run <= o->repeat; ++run) {
      if (!RunProvider(provider, *o, print)) failed = true;
    }
    // What the targets in words judge: the runs' medians when there are several.
    std::vector<Row> judged;
    for (const Row& r : rows) {
      if (r.provider == provider) judged.push_back(r);
    }
    if (judged.empty()) {
      // Every target failed (each said why as it did): no table, memory or targets to show.
      if (!o->json) {
        std::printf(
            "no results on provider %s: every target failed (its error, on standard error, says "
            "why)\n",
            provider.c_str());
      }
      failed = true;
      continue;
    }
    if (o->repeat > 1) {
      judged = Summaries(rows, provider);
      for (const Row& r : judged) {
        rows.push_back(r);
        if (o->json) std::printf("%s\n", JsonRow(r, *o).c_str());
      }
      if (!o->json) PrintSummaryTable(judged, o->repeat);
    }
    if (!o->json) {
      std::printf(
          "(latency at 1 in flight: an operation's; above: its round's, from the round's first "
          "issue to its last completion; JSON latency_of%s)\n",
          o->rate > 0 ? absl::StrFormat("; open loop at %.0f ops/s offered: from each round's "
                                        "due time",
                                        o->rate)
                            .c_str()
                      : "");
      std::printf("memory per item (the store's own count; resident: its processes' VmRSS):\n");
      std::map<std::string, std::pair<double, double>> seen;
      for (const Row& r : rows) {
        if (r.provider == provider) {
          seen[absl::StrCat(r.target, " (", r.transport, ")")] = {r.bytes_per_item,
                                                                  r.resident_per_item};
        }
      }
      for (const auto& [what, bytes] : seen) {
        std::printf("  %-22s %8.1f B, resident %8.1f B\n", what.c_str(), bytes.first, bytes.second);
      }
      std::printf("targets (issue%s):\n", o->repeat > 1 ? ", on the runs' medians" : "");
      PrintTargets(judged, provider);
    }
  }
  return failed ? kExitRuntime : 0;
}

}  // namespace
}  // namespace kvbench
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures farm's key-value store (GETs by one-sided READ and by RPC) against memcached and "
      "Redis with YCSB workloads, in one run: throughput and p50/p99/p99.9 latency per point.\n"
      "  kvbench [--provider=shm,tcp;ofi_rxm] "
      "[--targets=farm,farm-rpc,memcached,memcached-buf,redis] "
      "[--workloads=a,b,c,w] [--dists=uniform,zipf] [--keys=1000000] [--threads=1,2] "
      "[--in_flight=1,8] [--store_cpus=1 --client_cpus=0] [--poll=busy,adaptive] [--json]\n"
      "--provider and --poll take comma-separated lists here (default shm; farm runs a cluster "
      "per poll mode); the peers run over Unix "
      "sockets against shm and TCP on 127.0.0.1 against the others. Exit status: 0 ok, 1 a "
      "target failed, 2 bad flags.");
  if (!farm::FlagsAreValid("kvbench", argc, argv)) return farm::kvbench::kExitUsage;
  absl::ParseCommandLine(argc, argv);
  return farm::kvbench::DriverMain();
}
