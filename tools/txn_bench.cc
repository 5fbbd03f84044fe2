// txn_bench: commit latency and throughput of farm's transactions on a cluster of real node
// processes, side by side with the same bank transfer on Redis and PostgreSQL (issue 9).
//
//   bazel run //tools:txn_bench -- --provider=shm,'tcp;ofi_rxm' --threads=1,2,4
//   bazel run //tools:txn_bench -- --provider=shm --targets=farm --duration_ms=200 --json
//
// For every provider the bench writes a cluster configuration, re-executes itself as --nodes node
// processes (farm::RunNode with the App below, `--role=node`), and reads the results from node
// 0's standard output. Inside the cluster:
//  - set-up: node 0 allocates --objects objects of 8 bytes (an int64), each placed by
//    AllocHint::Anywhere(index) so they spread over every node, in transactions of 128; the
//    other nodes fetch the addresses from node 0 by RPC (kAddresses);
//  - for every point (distribution x kind x threads per node): the nodes meet at a barrier
//    (kArrive on node 0), each runs `threads` client threads, each with its own Worker, for
//    --warmup_ms + --duration_ms, and sends what it measured to node 0 (kResult), which merges
//    the histograms and prints one RESULT line (node 0 prints the window first, WINDOW, for
//    the driver to measure the node processes' CPU time over it);
//  - at the end node 0 reads every object and checks that the sum is what the committed
//    increments (write_1: +1, write_4: +1 each, bank: moves 1) make it (when points of those
//    kinds ran), and audits TATP's tables (when tatp points ran).
// The transactions (tools/txn_workload.h): read_only reads 4 objects; write_1 reads one and writes
// it + 1; write_4 the same on 4; bank reads 2 accounts and moves 1 from the first to the second;
// tatp runs TATP's mix of 7 transactions (tools/tatp_workload.h) on its 4 tables, which node 0
// loads with --subscribers subscribers (tools/tatp_farm.h: a subscriber's rows on one node, the
// sub_nbr index spread over all), and audits at the end (the index, no call forwarding without
// its special facility, the rows added and removed). A tatp point's "found%" is TATP's success
// rate: committed transactions that found what they looked for.
// Objects are chosen uniformly or by scrambled Zipf(--zipf_theta) (tools/bench_util.h), the
// same generator and the same seeds for every target: a peer's client i draws what farm's thread
// i % threads of node i / threads draws.
// Commit latency is the Commit() call of the attempt that committed; a transaction's latency
// (txn_p50/p99) runs from its start to its commit, retries included.
// The loop (tools/txn_workload.h, the same for every target and kind): closed by default, each
// client's next transaction as soon as the last one committed; with --rate R open (no
// coordinated omission, as kvbench's --rate): R transactions a second offered at every point by
// all client threads of the target together, each thread R / clients, every transaction due at
// its time on a fixed schedule from the start of the point (warm-up included), started then or
// at once when the thread is behind, and its latency counted from its due time. Counted: the
// transactions due inside the window; those due inside it that a thread never started, because
// it fell a whole window behind, are missed_tx (and a warning: the rate is beyond what the
// target serves at that point).
//
// Peers (--targets redis, redis-lua, postgres, postgres-fn: each store used in its usual ways,
// tools/txn_peers.h; the targets in words compare farm with each store's best): the bank
// transfer, and TATP on postgres (one prepared statement per transaction at SERIALIZABLE; the
// other peers skip tatp points with a line), with as many client threads and connections as the
// farm cluster has client threads (nodes x threads), on servers that
// tools/bench_peers.sh starts on private sockets and stops afterwards: Unix sockets against
// shm, TCP on 127.0.0.1 against every other provider. --cpus pins this process before anything
// starts, so the nodes, the servers and the peers' client threads all run on the same cores.
//
// Reference (--msg_iters > 0): //tools:msg_bench's RPC round trip (64 B) on the same provider in
// the same run. Message rounds per commit follow from the protocol (txn/transaction.h): LOCK and
// COMMIT-PRIMARY for a transaction that writes, none for a read-only one; the table also shows
// FaRM's count for f = 0, Pw*(f+3) one-sided writes + Pr READs (Pw: primaries written, Pr:
// objects only read).
//
// CPU time per transaction (cpu_us_per_tx, and tx_per_s_per_core = 10^6 / it), measured the same
// way on every side, by this process over the window node 0 announces or its own (from /proc:
// every thread, and children that ended within it; bench_util.h's TreeCpuMicros): farm's is its
// node processes' (clients, pollers, serving); a peer's its server's process tree's plus this
// process's (the clients). A server whose process cannot be found fails its target.
// Output: a table, or with --json one object per point:
//   {"target":"farm","provider":"shm","transport":"shm","kind":"tatp","dist":"nurand",
//    "threads":1,"clients":3,"f":0,"tx_per_s":..,"p50_us":..,"p99_us":..,"txn_p50_us":..,
//    "txn_p99_us":..,"loop":"open","rate":20000.0,"missed_tx":0,"abort_rate":..,"msg_rounds":2,
//    "msg_rounds_read_only":0,"remote_p50_us":..,"rpc_rtt_p50_us":..,"socket_rtt_p50_us":..,
//    "success_rate":..,"cpu_us_per_tx":..,"tx_per_s_per_core":..,"placement":"data_nodes",
//    "poll":"adaptive","repeat":1,"repeats":1,"schema":2,"tool":"txn_bench","commit":..,
//    "host":..,"seed":1,"duration_ms":..,"warmup_ms":..,"cores_awake":true,"load_avg":..}
// (msg_rounds: per writing transaction, msg_rounds_read_only: per read-only one; success_rate:
// TATP's, 1 for the other kinds; placement: data_nodes, client_node or client_process; poll:
// farm's --poll, "none" for a peer; p50_us/p99_us: farm's commit step, a peer's commit step or,
// for postgres's tatp, its whole statement, which runs and commits in one round trip;
// txn_p50_us/txn_p99_us: the whole transaction's, from its due time in the open loop; loop:
// "closed", or "open" at --rate tx/s (rate 0.0 when closed); missed_tx: open loop, the
// transactions due inside the window but never started)
// (tools/bench_driver.h's RunInfoJson; --cores_awake keeps every core out of idle for the whole
// run, so that no target pays an idle core's wake-up per request). With --repeat N every target
// runs N times, taking turns, and a summary line per point follows (repeat 0: the runs' medians
// of every measured field, with tx_per_s_min/max, p50_us_min/max and
// tx_per_s_per_core_min/max).
// Exit status: 0 success, 1 runtime failure (or an audit that does not add up), 2 bad flags.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farm/farm.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/mutex.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/bench_peers.h"
#include "tools/child_process.h"
#include "tools/sched_probe.h"
#include "tools/tatp_farm.h"
#include "tools/tatp_workload.h"
#include "tools/txn_peers.h"
#include "tools/txn_workload.h"

// --provider, --poll, --log_level, --config and --node_id are the node flags of farm::RunNode
// (api/node_main.cc), which this binary links: the bench reads them too.
ABSL_DECLARE_FLAG(std::string, provider);
ABSL_DECLARE_FLAG(std::string, poll);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_FLAG(std::string, threads, "1,2,4", "client threads per node, a comma-separated list");
ABSL_FLAG(std::string, kinds, "read_only,write_1,write_4,bank",
          "transactions to measure: read_only, write_1, write_4, bank, tatp (TATP's mix of 7 "
          "transactions on its 4 tables, --subscribers; farm and postgres only)");
ABSL_FLAG(std::string, dists, "uniform,zipf",
          "object choice (tatp: subscriber choice): uniform, zipf (Zipf over the objects, "
          "scrambled), ycsb-zipf (YCSB's scrambled Zipf over 10^10 items, hashed onto the "
          "objects), nurand (TATP's standard non-uniform choice)");
// Farm's node 0 loaded 100,000 subscribers in 38 s (2,700 a second) on a loaded 2-core VM, shm;
// --subscribers is held to a third of that rate over --timeout_s, which the other nodes wait.
constexpr int64_t kSubscribersPerTimeoutSecond = 1000;
ABSL_FLAG(int64_t, subscribers, 10000,
          "TATP's population (--kinds=tatp): subscribers in the farm cluster and in PostgreSQL; "
          "at most 1000 per second of --timeout_s (what farm's node 0 loads in time)");
ABSL_FLAG(double, zipf_theta, 0.99, "Zipf skew (0 < theta < 1)");
ABSL_FLAG(int64_t, objects, 10000, "objects (accounts) in the cluster and in each peer");
ABSL_FLAG(int, nodes, 3, "node processes in the farm cluster (2..8)");
ABSL_FLAG(int, active_nodes, 0,
          "nodes that run client threads (the first ones; the others only serve their objects); "
          "0: all. The peers get threads x active nodes clients");
ABSL_FLAG(bool, client_node, false,
          "farm's client threads run on one more node that holds no objects (a process of its "
          "own, as the peers' clients are: every commit sends its messages), and the --nodes data "
          "nodes run none; false: every node (or --active_nodes) runs clients beside its objects, "
          "so a transaction on local objects sends no message");
ABSL_FLAG(std::string, f, "0",
          "backups per region of the farm cluster (FaRM's f), a comma-separated list: each value "
          "runs a cluster of its own, every node process its own failure domain (e.g. 0,1 shows "
          "what replication costs)");
ABSL_FLAG(std::string, lease_ms, "",
          "the farm cluster's lease with the configuration manager, a comma-separated list of "
          "milliseconds (each value runs a cluster of its own; empty: the default, 3000). Each "
          "run also prints the heartbeats' round trips under the bench's own load and how many "
          "nodes were evicted, to choose the shortest lease that evicts no healthy node");
ABSL_FLAG(int, duration_ms, 2000, "measured milliseconds per point");
ABSL_FLAG(int, warmup_ms, 300, "milliseconds run before each point's measurement");
ABSL_FLAG(std::string, targets, "farm,redis,redis-lua,postgres,postgres-fn",
          "what to measure: farm, redis (WATCH/MULTI/EXEC), redis-lua (one script call), postgres "
          "(an interactive transaction of prepared statements; tatp: one prepared statement per "
          "transaction), postgres-fn (one call of a PL/pgSQL function); tatp runs on farm and "
          "postgres only");
ABSL_FLAG(bool, json, false, "print one JSON object per point instead of a table");
ABSL_FLAG(double, rate, 0,
          "open loop: transactions per second offered at every point (all client threads of the "
          "target together, each thread its share), each transaction due at its time and its "
          "latency (txn_p50/p99) counted from then, retries included (no coordinated "
          "omission); 0: closed loop, each client's next transaction as soon as the last "
          "committed");
ABSL_FLAG(int, repeat, 1,
          "runs of every target, taking turns (farm, redis, ..., farm, redis, ...: each run starts "
          "its cluster or server afresh); above 1, a summary per point: the median and the spread "
          "(min to max) of the runs");
ABSL_FLAG(std::string, cpus, "",
          "pin everything (nodes, peer servers, peer clients) to these CPUs, e.g. 0-1 or 0,1; "
          "empty: leave the affinity as it is");
ABSL_FLAG(bool, private_dev_shm, false,
          "run in a private mount namespace with an empty /dev/shm (root only): libfabric's shm "
          "provider names its files after process ids, and a stale file left by a killed process "
          "keeps a node that reuses its pid from starting");
ABSL_FLAG(int, socket_iters, 20000,
          "64-byte socket round trips for the peers' transport reference (a Unix socket against "
          "shm, TCP otherwise; both ends blocking in read; 0 skips it)");
ABSL_FLAG(int, msg_iters, 20000,
          "round trips of //tools:msg_bench's 64-byte RPC for the reference (0 skips it)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the nodes bind to");
ABSL_FLAG(int, timeout_s, 120, "seconds any step (cluster start, set-up, barrier) may take");
ABSL_FLAG(uint64_t, seed, 1, "seed of the object choice");
ABSL_FLAG(bool, cores_awake, true,
          "keep every core out of idle for the whole run (/dev/cpu_dma_latency, root), so that "
          "no target pays an idle core's wake-up per request; false measures the machine as it "
          "idles");
ABSL_FLAG(std::string, peers_script, "", "tools/bench_peers.sh (found in the runfiles when empty)");
ABSL_FLAG(std::string, role, "", "internal: 'node' when re-executed as a node process");

namespace farm {
namespace txnbench {
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kMaxThreads = 16;
constexpr int64_t kInitialValue = 1000000000;
constexpr int kAllocBatch = 128;
constexpr int kChunk = 1024;  // addresses per kAddresses answer (8 KiB: a quarter ring holds it)

// ---------------------------------------------------------------------------------------------
// What every process derives from the flags.

struct Point {
  Distribution dist;
  Kind kind;
  int threads;
};

struct Options {
  std::vector<int> threads;
  std::vector<Kind> kinds;
  std::vector<Distribution> dists;
  double theta = 0.99;
  uint64_t objects = 0;
  uint32_t subscribers = 0;  // TATP's population
  bool tatp = false;         // a tatp point: the cluster holds TATP's tables
  bool objects_kinds = false;  // a point of another kind: the cluster holds --objects objects
  int nodes = 3;
  int active_nodes = 3;      // nodes 0 .. active_nodes-1 run clients (without client_node)
  bool client_node = false;  // node `nodes` (late, no objects) runs every client
  int duration_ms = 0, warmup_ms = 0, timeout_s = 0;
  uint64_t seed = 0;
  double rate = 0;  // --rate: transactions a second of all clients together (0: closed loop)

  std::vector<Point> Points() const {
    std::vector<Point> out;
    for (Distribution d : dists) {
      for (Kind k : kinds) {
        for (int t : threads) out.push_back(Point{d, k, t});
      }
    }
    return out;
  }
  absl::Duration PointTime() const { return absl::Milliseconds(duration_ms + warmup_ms); }
  // Node processes: the data nodes, and the client node.
  int processes() const { return nodes + (client_node ? 1 : 0); }
  bool RunsClients(uint32_t node) const {
    return client_node ? static_cast<int>(node) == nodes : static_cast<int>(node) < active_nodes;
  }
  // Client threads in all at `threads` per client-running node.
  int Clients(int threads) const { return threads * (client_node ? 1 : active_nodes); }
  // One client's share of --rate at `threads` per node (0: the closed loop).
  double ClientRate(int threads) const { return rate / Clients(threads); }
  // The node whose clients a peer's client `i` plays (at `threads` per node).
  uint32_t NodeOfClient(int i, int threads) const {
    return static_cast<uint32_t>(client_node ? nodes : i / threads);
  }
};

absl::StatusOr<Options> OptionsFromFlags() {
  Options o;
  absl::StatusOr<std::vector<int>> threads =
      ParseThreads(absl::GetFlag(FLAGS_threads), kMaxThreads);
  if (!threads.ok())
    return absl::InvalidArgumentError(absl::StrCat("--threads: ", threads.status().message()));
  absl::StatusOr<std::vector<Kind>> kinds = ParseKinds(absl::GetFlag(FLAGS_kinds));
  if (!kinds.ok())
    return absl::InvalidArgumentError(absl::StrCat("--kinds: ", kinds.status().message()));
  absl::StatusOr<std::vector<Distribution>> dists = ParseDistributions(absl::GetFlag(FLAGS_dists));
  if (!dists.ok())
    return absl::InvalidArgumentError(absl::StrCat("--dists: ", dists.status().message()));
  o.threads = *threads;
  o.kinds = *kinds;
  o.dists = *dists;
  o.theta = absl::GetFlag(FLAGS_zipf_theta);
  o.nodes = absl::GetFlag(FLAGS_nodes);
  o.active_nodes = absl::GetFlag(FLAGS_active_nodes);
  o.client_node = absl::GetFlag(FLAGS_client_node);
  if (o.client_node && o.active_nodes != 0) {
    return absl::InvalidArgumentError("--client_node and --active_nodes exclude each other");
  }
  if (o.active_nodes == 0) o.active_nodes = o.nodes;
  o.duration_ms = absl::GetFlag(FLAGS_duration_ms);
  o.warmup_ms = absl::GetFlag(FLAGS_warmup_ms);
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.rate = absl::GetFlag(FLAGS_rate);
  if (!(o.rate == 0 || (o.rate >= 1 && o.rate <= 1e9))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rate must be 0 (the closed loop) or 1..1e9 transactions a second, not ",
                     absl::GetFlag(FLAGS_rate)));
  }
  for (Kind k : o.kinds) (k == Kind::kTatp ? o.tatp : o.objects_kinds) = true;
  const int64_t subscribers = absl::GetFlag(FLAGS_subscribers);
  if (subscribers < 1 || subscribers > 10000000)
    return absl::InvalidArgumentError("--subscribers must be 1..10000000");
  o.subscribers = static_cast<uint32_t>(subscribers);
  const int64_t objects = absl::GetFlag(FLAGS_objects);
  if (!(o.theta > 0 && o.theta < 1))
    return absl::InvalidArgumentError("--zipf_theta must be in (0, 1)");
  if (objects < 8 || objects > 10000000)
    return absl::InvalidArgumentError("--objects must be 8..10000000");
  if (o.nodes < 2 || o.nodes > 8) return absl::InvalidArgumentError("--nodes must be 2..8");
  if (o.active_nodes < 1 || o.active_nodes > o.nodes) {
    return absl::InvalidArgumentError("--active_nodes must be 0 (all) or 1..--nodes");
  }
  if (o.duration_ms < 1 || o.duration_ms > 3600000)
    return absl::InvalidArgumentError("--duration_ms must be 1..3600000");
  if (o.warmup_ms < 0 || o.warmup_ms > 600000)
    return absl::InvalidArgumentError("--warmup_ms must be 0..600000");
  if (o.timeout_s < 1) return absl::InvalidArgumentError("--timeout_s must be at least 1");
  if (o.tatp && subscribers > kSubscribersPerTimeoutSecond * o.timeout_s) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--subscribers=", subscribers,
        ": farm's node 0 loads about 2,700 subscribers a second "
        "(100,000 in 38 s on a loaded 2-core machine) while the other nodes wait --timeout_s=",
        o.timeout_s, " s for it: at most ", kSubscribersPerTimeoutSecond * o.timeout_s,
        " subscribers (", kSubscribersPerTimeoutSecond,
        " per second of --timeout_s); raise --timeout_s to load more"));
  }
  o.objects = static_cast<uint64_t>(objects);
  return o;
}

// The open loop in words, for the table's header and the targets (empty for the closed loop).
std::string OpenLoopText(const Options& o) {
  return o.rate > 0 ? absl::StrFormat("open loop at %.0f tx/s offered", o.rate) : "";
}

// What the points run on: "10000 objects", "10000 TATP subscribers", or both.
std::string PopulationText(const Options& o) {
  std::vector<std::string> parts;
  if (o.objects_kinds) parts.push_back(absl::StrCat(o.objects, " objects"));
  if (o.tatp) parts.push_back(absl::StrCat(o.subscribers, " TATP subscribers"));
  return absl::StrJoin(parts, " and ");
}

// Bytes of farm regions each node process holds: objects take 64-byte slots, TATP's rows
// TatpFarm::Bytes; room for twice an even share, in whole 4 MiB regions.
constexpr uint64_t kRegionBytes = 4 << 20;
uint64_t RegionBytesPerNode(const Options& o) {
  const uint64_t bytes =
      (o.objects_kinds ? 64 * o.objects : 0) + (o.tatp ? TatpFarm::Bytes(o.subscribers) : 0);
  const uint64_t per_node = 2 * bytes / o.nodes + kRegionBytes;
  return (per_node + kRegionBytes - 1) / kRegionBytes * kRegionBytes;
}

// OK when the farm cluster's regions fit in the memory this machine has available now
// (/proc/meminfo's MemAvailable; not checked where it cannot be read).
absl::Status CheckClusterMemory(const Options& o) {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return absl::OkStatus();
  char line[256];
  uint64_t available_kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long kib = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1) available_kib = kib;
  }
  std::fclose(f);
  const uint64_t need = RegionBytesPerNode(o) * o.processes();
  if (available_kib == 0 || need <= available_kib * 1024) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "--subscribers=%d --objects=%d: the farm cluster's regions take %d MiB (%d node processes "
      "x %d MiB), more than the %d MiB this machine has available",
      o.subscribers, o.objects, need >> 20, o.processes(), RegionBytesPerNode(o) >> 20,
      available_kib >> 10));
}

// The seed of client thread `thread` of node `node` (farm) or of the peers' client playing it:
// client = node * kMaxThreads + thread.
uint64_t ClientSeed(const Options& o, size_t point, uint64_t client) {
  return o.seed * 0x9e3779b97f4a7c15ull + point * 1000003 + client;
}

// ---------------------------------------------------------------------------------------------
// The node processes' RPCs (all served by node 0).

struct AddressRequest {
  uint64_t first = 0;
};
struct AddressChunk {
  uint64_t total = 0;
  uint32_t count = 0;
  uint64_t packed[kChunk] = {};
};
struct ArriveRequest {
  int32_t point = 0;
};
struct ArriveReply {
  uint32_t arrived = 0;
  uint32_t cancelled = 0;  // node 0 gave up: every node stops
};
struct NodeResult {
  int32_t point = 0;
  uint32_t node = 0;
  ClientStats stats;
  uint64_t all_commits = 0;     // warm-up included
  uint64_t owners_written = 0;  // over all_commits: distinct nodes owning the written objects
  uint64_t remote_commits = 0;  // over all_commits: some written object on another node
  // Commit latency of the commits that sent messages (a written object on another node; the
  // others commit locally, without a message round) and ended inside the window (the open loop
  // counts transactions by their due time instead; a commit step's duration is the same sample
  // either way).
  LatencyHistogram remote_commit;
  char error[256] = {};
};
struct Ack {
  uint32_t ok = 1;
};

constexpr Method<AddressRequest, AddressChunk> kAddresses{1};
constexpr Method<ArriveRequest, ArriveReply> kArrive{2};
constexpr Method<NodeResult, Ack> kResult{3};

// Node 0's side of the set-up, the barriers and the results. Handlers (on the poller thread)
// only record and answer; node 0's application thread waits on the mutex.
// Thread safety: safe for concurrent use.
class Conductor {
 public:
  void Publish(std::vector<uint64_t> packed) {
    MutexLock l(&mu_);
    addresses_ = std::move(packed);
    published_ = true;
  }
  absl::StatusOr<AddressChunk> Chunk(uint64_t first) {
    MutexLock l(&mu_);
    if (!published_) return absl::FailedPreconditionError("objects not allocated yet");
    AddressChunk c;
    c.total = addresses_.size();
    for (uint64_t i = first; i < addresses_.size() && c.count < kChunk; ++i) {
      c.packed[c.count++] = addresses_[i];
    }
    return c;
  }
  ArriveReply Arrive(int point, uint32_t node) {
    MutexLock l(&mu_);
    arrived_[point].insert(node);
    return ArriveReply{static_cast<uint32_t>(arrived_[point].size()), cancelled_ ? 1u : 0u};
  }
  bool AwaitArrivals(int point, size_t n, absl::Duration timeout) {
    MutexLock l(&mu_);
    return mu_.AwaitWithTimeout([&] { return arrived_[point].size() >= n; }, timeout);
  }
  void AddResult(const NodeResult& r) {
    MutexLock l(&mu_);
    results_[r.point].push_back(r);
  }
  bool AwaitResults(int point, size_t n, absl::Duration timeout, std::vector<NodeResult>* out) {
    MutexLock l(&mu_);
    if (!mu_.AwaitWithTimeout([&] { return results_[point].size() >= n; }, timeout)) return false;
    *out = results_[point];
    return true;
  }
  void Cancel() {
    MutexLock l(&mu_);
    cancelled_ = true;
  }

 private:
  Mutex mu_;
  bool published_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> addresses_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::set<uint32_t>> arrived_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::vector<NodeResult>> results_ ABSL_GUARDED_BY(mu_);
};

Conductor& TheConductor() {
  static Conductor* c = new Conductor();
  return *c;
}

void Emit(const std::string& line) {
  std::printf("TXNBENCH %s\n", line.c_str());
  std::fflush(stdout);
}

absl::Status NodeSetup(Runtime& rt) {
  Conductor& c = TheConductor();
  for (absl::Status s :
       {kAddresses.Serve(rt, [&c](uint32_t, const AddressRequest&r) { return c.Chunk(r.first); }),
        kArrive.Serve(rt,
                      [&c](uint32_t from, const ArriveRequest&r) -> absl::StatusOr<ArriveReply> {
                        return c.Arrive(r.point, from);
                      }),
        kResult.Serve(rt, [&c](uint32_t, const NodeResult&r) -> absl::StatusOr<Ack> {
          c.AddResult(r);
          return Ack{};
        })}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Node side.

// Everything one node's clients need.
struct Cluster {
  Runtime* rt = nullptr;
  Options options;
  std::vector<GlobalAddress> objects;
  std::vector<uint32_t> owner;  // per object
  std::map<uint32_t, uint32_t> region_owner;  // region id -> its primary's node
  std::unique_ptr<TatpFarm> tatp;             // with a tatp point: TATP's tables
  std::vector<std::unique_ptr<Worker>> workers;
};

// The objects node 0 allocates and publishes: the --objects ones (for the kinds other than
// tatp), then TATP's (tools/tatp_farm.h).
uint64_t AddressCount(const Options& o) {
  return (o.objects_kinds ? o.objects : 0) + (o.tatp ? TatpFarm::Objects(o.subscribers) : 0);
}

// Node 0 allocates the objects: spread over every member by rendezvous hashing, or with a
// client node round-robin over the data nodes 0 .. data_nodes-1 only.
absl::StatusOr<std::vector<uint64_t>> AllocateObjects(Worker& w, uint64_t n, const Options& o) {
  std::vector<uint64_t> packed;
  for (uint64_t begin = 0; begin < n; begin += kAllocBatch) {
    const uint64_t end = std::min<uint64_t>(n, begin + kAllocBatch);
    std::vector<uint64_t> batch;
    absl::Status s = w.Run([&](Txn& t) -> absl::Status {
      batch.clear();
      for (uint64_t i = begin; i < end; ++i) {
        const AllocHint hint = o.client_node ? AllocHint::OnNode(static_cast<uint32_t>(i % o.nodes))
                                             : AllocHint::Anywhere(i);
        absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(int64_t), hint);
        if (!a.ok()) return a.status();
        if (absl::Status p = t.Put(*a, kInitialValue); !p.ok()) return p;
        batch.push_back(a->Pack());
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("allocating objects: ", s.message()));
    packed.insert(packed.end(), batch.begin(), batch.end());
  }
  return packed;
}

// Node 0: every object of AddressCount, in its order. TATP's rows of a subscriber go where its
// s_id's hint says (the client node holds none), the rest near them (TatpFarm::Load).
absl::StatusOr<std::vector<uint64_t>> AllocateAll(Worker& w, const Options& o) {
  std::vector<uint64_t> packed;
  if (o.objects_kinds) {
    absl::StatusOr<std::vector<uint64_t>> b = AllocateObjects(w, o.objects, o);
    if (!b.ok()) return b.status();
    packed = std::move(*b);
  }
  if (o.tatp) {
    auto place = [&o](uint64_t key) {
      return o.client_node ? AllocHint::OnNode(static_cast<uint32_t>(key % o.nodes))
                           : AllocHint::Anywhere(key);
    };
    absl::StatusOr<std::vector<uint64_t>> t = TatpFarm::Load(w, o.subscribers, o.seed, place);
    if (!t.ok()) return t.status();
    packed.insert(packed.end(), t->begin(), t->end());
  }
  return packed;
}

absl::StatusOr<std::vector<uint64_t>> FetchObjects(Worker& w, const Options& o) {
  std::vector<uint64_t> packed;
  const absl::Time deadline = absl::Now() + absl::Seconds(o.timeout_s);
  const uint64_t total = AddressCount(o);
  while (packed.size() < total) {
    absl::StatusOr<AddressChunk> c = kAddresses.Call(w, 0, AddressRequest{packed.size()});
    if (absl::IsFailedPrecondition(c.status()) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    if (!c.ok())
      return absl::Status(
          c.status().code(),
          absl::StrCat("fetching the objects' addresses from node 0: ", c.status().message()));
    if (c->total != total || c->count == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("node 0 has ", c->total, " objects, not ", total));
    }
    packed.insert(packed.end(), c->packed, c->packed + c->count);
  }
  return packed;
}

absl::Status PrepareCluster(Runtime& rt, Cluster* c) {
  absl::StatusOr<std::unique_ptr<Worker>> w = rt.NewWorker();
  if (!w.ok()) return w.status();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::vector<uint64_t>> packed =
      rt.node_id() == 0 ? AllocateAll(**w, c->options) : FetchObjects(**w, c->options);
  if (!packed.ok()) return packed.status();
  if (rt.node_id() == 0) {
    TheConductor().Publish(*packed);
    Emit(absl::StrFormat("SETUP objects=%d seconds=%.2f", packed->size(),
                         absl::ToDoubleSeconds(absl::Now() - t0)));
  }
  std::map<uint32_t, uint32_t>& region_owner = c->region_owner;
  for (uint32_t n : rt.members()) {
    for (const RegionRef& r : rt.Regions(n)) region_owner[r.id] = r.node;
  }
  const uint64_t objects = c->options.objects_kinds ? c->options.objects : 0;
  for (uint64_t i = 0; i < objects; ++i) {
    c->objects.push_back(GlobalAddress::Unpack((*packed)[i]));
    c->owner.push_back(region_owner[c->objects.back().region]);
  }
  if (c->options.tatp) {
    std::vector<GlobalAddress> rows;
    for (uint64_t i = objects; i < packed->size(); ++i)
      rows.push_back(GlobalAddress::Unpack((*packed)[i]));
    absl::StatusOr<TatpFarm> t = TatpFarm::Make(c->options.subscribers, std::move(rows));
    if (!t.ok()) return t.status();
    c->tatp = std::make_unique<TatpFarm>(std::move(*t));
  }
  c->workers.push_back(std::move(*w));
  const int most = *std::max_element(c->options.threads.begin(), c->options.threads.end());
  while (static_cast<int>(c->workers.size()) < most) {
    absl::StatusOr<std::unique_ptr<Worker>> more = rt.NewWorker();
    if (!more.ok()) return more.status();
    c->workers.push_back(std::move(*more));
  }
  return absl::OkStatus();
}

// One attempt of a farm transaction (see the file comment).
absl::Status FarmAttempt(Worker& w, Kind kind, const Cluster& c,
                         const std::vector<uint64_t>& objects, double* commit_us) {
  std::unique_ptr<Txn> t = w.Begin();
  int64_t values[4];
  for (size_t i = 0; i < objects.size(); ++i) {
    absl::StatusOr<int64_t> v = t->Get<int64_t>(c.objects[objects[i]]);
    if (!v.ok()) return v.status();
    values[i] = *v;
  }
  for (size_t i = 0; i < objects.size() && kind != Kind::kReadOnly; ++i) {
    const int64_t delta = kind != Kind::kBank ? 1 : i == 0 ? -1 : 1;
    if (absl::Status s = t->Put(c.objects[objects[i]], values[i] + delta); !s.ok()) return s;
  }
  const Clock::time_point t0 = Clock::now();
  absl::Status s = t->Commit();
  *commit_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  return s;
}

// CPU time (microseconds) of the process trees of `pids` (TreeCpuMicros: the same count for farm's
// node processes and a peer's server and clients) over `window`, sampled from this thread at its
// start and end; returns after its end. Sampled later than the window's start (the caller learnt
// of it late), it is the CPU time of the span sampled scaled to the window's length.
absl::StatusOr<double> CpuOverWindow(const Window& window, const std::vector<int>& pids) {
  std::this_thread::sleep_until(window.start);
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<double> before = TreeCpuMicros(pids);
  if (!before.ok()) return before.status();
  std::this_thread::sleep_until(window.end);
  const Clock::time_point t1 = Clock::now();
  absl::StatusOr<double> after = TreeCpuMicros(pids);
  if (!after.ok()) return after.status();
  const double sampled = std::chrono::duration<double>(t1 - t0).count();
  return sampled > 0 ? (*after - *before) * window.seconds() / sampled : 0.0;
}

// Runs one point on this node: `threads` clients, each on its own Worker (tatp: `tatp`'s mix on
// TATP's tables, else `keys`' objects). Node 0 prints the window (WINDOW start_ns end_ns on the
// steady clock, which every process of the host shares), for the driver to measure the node
// processes' CPU time over it.
NodeResult RunNodePoint(Cluster& c, int index, const Point& p, const KeyChooser& keys,
                        const TatpGenerator& tatp) {
  NodeResult r;
  r.point = index;
  r.node = c.rt->node_id();
  const int clients = c.options.RunsClients(r.node) ? p.threads : 0;
  std::vector<NodeResult> per(clients);
  std::vector<absl::Status> status(clients);
  const Window window = Window::After(c.options.warmup_ms, c.options.duration_ms);
  if (r.node == 0) {
    auto ns = [](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    };
    Emit(absl::StrFormat("WINDOW %d %d", ns(window.start), ns(window.end)));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      NodeResult& mine = per[i];
      Worker& w = *c.workers[i];
      const uint32_t self = c.rt->node_id();
      const uint64_t seed = ClientSeed(c.options, index, uint64_t{self} * kMaxThreads + i);
      const double rate = c.options.ClientRate(p.threads);
      // A committed transaction that wrote objects of `owners`: whether it sent messages.
      auto record_writes = [&](const std::set<uint32_t>& owners, double commit_us) {
        ++mine.all_commits;
        mine.owners_written += owners.size();
        const bool remote = owners.size() > 1 || *owners.begin() != self;
        mine.remote_commits += remote;
        const Clock::time_point now = Clock::now();
        if (remote && now >= window.start && now < window.end) mine.remote_commit.Add(commit_us);
      };
      if (p.kind == Kind::kTatp) {
        std::vector<GlobalAddress> written;
        TatpAttempt attempt = [&](const TatpTxn& t, TatpOutcome* out, double* commit_us) {
          absl::Status s = c.tatp->Attempt(w, t, out, commit_us, &written);
          if (s.ok() && !written.empty()) {
            std::set<uint32_t> owners;
            for (const GlobalAddress& a : written) owners.insert(c.region_owner.at(a.region));
            record_writes(owners, *commit_us);
          }
          return s;
        };
        status[i] = RunTatpClient(tatp, window, rate, seed, attempt, &mine.stats);
        return;
      }
      Attempt attempt = [&](const std::vector<uint64_t>& objects, double* commit_us) {
        absl::Status s = FarmAttempt(w, p.kind, c, objects, commit_us);
        if (s.ok() && p.kind != Kind::kReadOnly) {
          std::set<uint32_t> owners;
          for (uint64_t o : objects) owners.insert(c.owner[o]);
          record_writes(owners, *commit_us);
        }
        return s;
      };
      status[i] = RunClient(keys, p.kind, window, rate, seed, attempt, &mine.stats);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < clients; ++i) {
    r.stats.Merge(per[i].stats);
    r.all_commits += per[i].all_commits;
    r.owners_written += per[i].owners_written;
    r.remote_commits += per[i].remote_commits;
    r.remote_commit.Merge(per[i].remote_commit);
    if (!status[i].ok() && r.error[0] == 0) {
      absl::SNPrintF(r.error, sizeof(r.error), "node %d: %s", r.node, status[i].ToString());
    }
  }
  return r;
}

// Every node waits here until all have arrived at `point`. Cancelled when node 0 gave up.
absl::Status Barrier(Cluster& c, int point) {
  const size_t n = static_cast<size_t>(c.options.processes());
  const absl::Duration timeout = absl::Seconds(c.options.timeout_s);
  if (c.rt->node_id() == 0) {
    TheConductor().Arrive(point, 0);
    if (TheConductor().AwaitArrivals(point, n, timeout)) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat("not every node reached point ", point));
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<ArriveReply> r = kArrive.Call(*c.workers[0], 0, ArriveRequest{point});
    if (!r.ok()) return r.status();
    if (r->cancelled) return absl::CancelledError("node 0 gave up the run");
    if (r->arrived >= n) return absl::OkStatus();
    if (absl::Now() > deadline) return absl::DeadlineExceededError("the barrier timed out");
    absl::SleepFor(absl::Microseconds(200));
  }
}

// Node 0: the merged result of one point, as a RESULT line:
//   RESULT kind dist threads commits aborts seconds tx_per_s p50 p99 txn_p50 txn_p99 pw remote
//          remote_p50 found missed_tx
absl::Status Report(const Point& p, const std::vector<NodeResult>& results) {
  ClientStats all;
  double tx_per_s = 0;
  uint64_t commits = 0, owners = 0, remote = 0;
  LatencyHistogram remote_commit;
  for (const NodeResult& r : results) {
    if (r.error[0] != 0) return absl::InternalError(r.error);
    all.Merge(r.stats);
    if (r.stats.seconds > 0) tx_per_s += r.stats.commits / r.stats.seconds;
    commits += r.all_commits;
    owners += r.owners_written;
    remote += r.remote_commits;
    remote_commit.Merge(r.remote_commit);
  }
  const double pw = commits == 0 ? 0 : static_cast<double>(owners) / commits;
  const double remote_share = commits == 0 ? 0 : static_cast<double>(remote) / commits;
  Emit(absl::StrFormat("RESULT %s %s %d %d %d %.3f %.1f %.3f %.3f %.3f %.3f %.3f %.3f %.3f %d %d",
                       KindName(p.kind), DistributionName(p.dist), p.threads, all.commits,
                       all.aborts, all.seconds, tx_per_s, all.commit.Percentile(0.5),
                       all.commit.Percentile(0.99), all.txn.Percentile(0.5),
                       all.txn.Percentile(0.99), pw, remote_share, remote_commit.Percentile(0.5),
                       all.found, all.missed_tx));
  return absl::OkStatus();
}

// Node 0, after every point: the objects' sum must be what the committed increments made it.
absl::Status Audit(Cluster& c, int64_t increments) {
  int64_t sum = 0;
  for (const GlobalAddress& a : c.objects) {
    absl::StatusOr<int64_t> v = c.workers[0]->LockFreeGet<int64_t>(a);
    if (!v.ok()) return v.status();
    sum += *v;
  }
  const int64_t want = static_cast<int64_t>(c.objects.size()) * kInitialValue + increments;
  Emit(absl::StrFormat("AUDIT sum=%d expected=%d %s", sum, want, sum == want ? "ok" : "MISMATCH"));
  if (sum != want) {
    return absl::DataLossError(absl::StrCat("the objects sum to ", sum, ", not ", want));
  }
  return absl::OkStatus();
}

absl::Status RunPoints(Cluster& c) {
  const std::vector<Point> points = c.options.Points();
  std::map<Distribution, std::unique_ptr<KeyChooser>> choosers;
  std::map<Distribution, std::unique_ptr<TatpGenerator>> tatp;
  for (Distribution d : c.options.dists) {
    choosers[d] = std::make_unique<KeyChooser>(d, c.options.objects, c.options.theta);
    tatp[d] = std::make_unique<TatpGenerator>(d, c.options.subscribers, c.options.theta);
  }
  int64_t increments = 0, cf_delta = 0;
  const bool leader = c.rt->node_id() == 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (absl::Status s = Barrier(c, static_cast<int>(i)); !s.ok()) return s;
    NodeResult mine = RunNodePoint(c, static_cast<int>(i), points[i], *choosers[points[i].dist],
                                   *tatp[points[i].dist]);
    if (!leader) {
      absl::StatusOr<Ack> a = kResult.Call(*c.workers[0], 0, mine);
      if (!a.ok()) return a.status();
      if (mine.error[0] != 0) return absl::InternalError(mine.error);
      continue;
    }
    TheConductor().AddResult(mine);
    std::vector<NodeResult> all;
    if (!TheConductor().AwaitResults(static_cast<int>(i), c.options.processes(),
                                     c.options.PointTime() + absl::Seconds(c.options.timeout_s),
                                     &all)) {
      return absl::DeadlineExceededError("not every node sent its result");
    }
    if (absl::Status s = Report(points[i], all); !s.ok()) return s;
    for (const NodeResult& r : all) {
      (points[i].kind == Kind::kTatp ? cf_delta : increments) += r.stats.increments;
    }
  }
  if (!leader) return absl::OkStatus();
  if (c.tatp != nullptr) {
    absl::StatusOr<std::string> line = c.tatp->Audit(*c.workers[0], c.options.seed, cf_delta);
    if (!line.ok()) {
      Emit(absl::StrCat("AUDIT tatp MISMATCH ", line.status().message()));
      return line.status();
    }
    Emit(absl::StrCat("AUDIT tatp ", *line, " ok"));
  }
  return c.options.objects_kinds ? Audit(c, increments) : absl::OkStatus();
}

absl::Status NodeRun(Runtime& rt) {
  absl::StatusOr<Options> o = OptionsFromFlags();
  if (!o.ok()) return o.status();
  Cluster c;
  c.rt = &rt;
  c.options = *o;
  // The data nodes form the cluster; the client node (late) may or may not have joined yet.
  const size_t members = rt.members().size();
  if (members < static_cast<size_t>(o->nodes) || members > static_cast<size_t>(o->processes())) {
    return absl::FailedPreconditionError(absl::StrCat("the cluster has ", members, " nodes, not ",
                                                      o->nodes, o->client_node ? " (+1)" : ""));
  }
  absl::Status s = PrepareCluster(rt, &c);
  if (s.ok()) s = RunPoints(c);
  // This node's heartbeats under the bench's load (the driver reads every node's line).
  const Runtime::LeaseStats l = rt.lease_stats();
  Emit(absl::StrFormat("LEASE %d %d %d %.3f %.3f %.3f", rt.node_id(),
                       absl::ToInt64Milliseconds(l.lease), l.heartbeats,
                       absl::ToDoubleMicroseconds(l.rtt_p50), absl::ToDoubleMicroseconds(l.rtt_p99),
                       absl::ToDoubleMicroseconds(l.rtt_max)));
  if (rt.node_id() == 0) {
    if (!s.ok()) TheConductor().Cancel();
    Emit(s.ok() ? std::string("DONE") : absl::StrCat("FAILED ", s.ToString()));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Driver side.

// One line of the output.
struct Row {
  std::string target, provider, transport;
  Kind kind = Kind::kBank;
  Distribution dist = Distribution::kUniform;
  int threads = 0, clients = 0;
  int f = 0;  // backups per region (farm; 0 for the peers, which keep one copy)
  double tx_per_s = 0, p50 = 0, p99 = 0, txn_p50 = 0, txn_p99 = 0, abort_rate = 0;
  uint64_t missed_tx = 0;  // open loop: due inside the window, never started
  int msg_rounds = 0;  // per writing transaction (every transaction, for the peers)
  // Per read-only transaction: farm's read_only, and farm's tatp transactions that write nothing
  // (0: they validate by one-sided READs); msg_rounds where every transaction is alike.
  int msg_rounds_read_only = 0;
  double pw = 0, remote_share = 0;  // farm only
  double remote_p50 = 0;            // farm only: commits that sent messages
  // The committed transactions that found what they looked for (TATP's successful ones; every
  // transaction of the other kinds does).
  double success_rate = 1;
  // CPU time per committed transaction over the window: farm, every node process (clients and
  // serving); a peer, its server's process tree and this process (the clients).
  double cpu_us_per_tx = 0;
  double per_core = 0;              // tx_per_s_per_core: 10^6 / cpu_us_per_tx (0: not measured)
  double rpc_rtt = 0;               // msg_bench's, same provider (0: not measured)
  double socket_rtt = 0;            // a 64 B round trip on the peers' transport (0: not measured)
  int repeat = 1, repeats = 1;      // the run (1..repeats); 0: the summary of every run
  // The summary's spread.
  double tx_min = 0, tx_max = 0, p50_min = 0, p50_max = 0, per_core_min = 0, per_core_max = 0;
  // Where the clients ran: "data_nodes" (farm's clients beside the objects), "client_node"
  // (farm's clients on a node of their own), "client_process" (a peer's clients).
  std::string placement = "client_process";
  std::string poll = "none";  // farm: its nodes' poll mode (--poll)
};

std::string JsonRow(const Row& r, const Options& o, const RunInfo& info) {
  return absl::StrFormat(
      "{\"target\":\"%s\",\"provider\":\"%s\",\"transport\":\"%s\",\"kind\":\"%s\","
      "\"dist\":\"%s\",\"threads\":%d,\"clients\":%d,\"f\":%d,\"tx_per_s\":%.1f,"
      "\"p50_us\":%.3f,"
      "\"p99_us\":%.3f,\"txn_p50_us\":%.3f,\"txn_p99_us\":%.3f,\"loop\":\"%s\",\"rate\":%.1f,"
      "\"missed_tx\":%d,\"abort_rate\":%.5f,"
      "\"msg_rounds\":%d,\"msg_rounds_read_only\":%d,\"remote_p50_us\":%.3f,\"rpc_rtt_p50_us\":%."
      "3f,"
      "\"socket_rtt_p50_us\":%.3f,\"success_rate\":%.4f,\"cpu_us_per_tx\":%.2f,"
      "\"tx_per_s_per_core\":%.1f,\"placement\":\"%s\",\"poll\":\"%s\",\"repeat\":%d,"
      "\"repeats\":%d%s%s}",
      r.target, r.provider, r.transport, KindName(r.kind), DistributionName(r.dist), r.threads,
      r.clients, r.f, r.tx_per_s, r.p50, r.p99, r.txn_p50, r.txn_p99,
      o.rate > 0 ? "open" : "closed", o.rate, r.missed_tx, r.abort_rate, r.msg_rounds,
      r.msg_rounds_read_only, r.remote_p50, r.rpc_rtt, r.socket_rtt, r.success_rate,
      r.cpu_us_per_tx, r.per_core, r.placement, r.poll, r.repeat, r.repeats,
      r.repeat == 0 ? absl::StrFormat(
                          ",\"tx_per_s_min\":%.1f,\"tx_per_s_max\":%.1f,"
                          "\"p50_us_min\":%.3f,\"p50_us_max\":%.3f,"
                          "\"tx_per_s_per_core_min\":%.1f,\"tx_per_s_per_core_max\":%.1f",
                          r.tx_min, r.tx_max, r.p50_min, r.p50_max, r.per_core_min, r.per_core_max)
                    : std::string(),
      RunInfoJson(info));
}

// success_rate, cpu_us_per_tx and per_core of `r` from its committed transactions, those that
// found what they looked for, and the CPU time over the window.
void SetRates(double commits, double found, double cpu_us, Row* r) {
  r->success_rate = commits == 0 ? 0 : found / commits;
  r->cpu_us_per_tx = commits == 0 ? 0 : cpu_us / commits;
  r->per_core = r->cpu_us_per_tx > 0 ? 1e6 / r->cpu_us_per_tx : 0;
}

// FaRM's message count: Pw*(f+3) one-sided writes + Pr one-sided READs.
std::string FarmFormula(const Row& r) {
  if (r.target != "farm" || r.kind == Kind::kTatp) return "";
  const int pr = ObjectsOf(r.kind) - WritesOf(r.kind);
  return absl::StrFormat("%.1fw+%dr", (3 + r.f) * r.pw, pr);
}

void PrintTableHeader() {
  std::printf("%-11s %1s %-11s %-9s %-9s %3s %4s %10s %9s %9s %9s %9s %7s %6s %9s %6s %8s\n",
              "target", "f", "transport", "kind", "dist", "thr", "cli", "tx/s", "commit50",
              "commit99", "remote50", "txn50", "abort%", "rounds", "FaRM", "found%", "cpuus/tx");
}

// The table's "rounds": msg_rounds, or "writing/read-only" where they differ (farm's tatp: "2/0").
std::string RoundsText(const Row& r) {
  return r.msg_rounds == r.msg_rounds_read_only
             ? absl::StrCat(r.msg_rounds)
             : absl::StrCat(r.msg_rounds, "/", r.msg_rounds_read_only);
}

void PrintTableRow(const Row& r) {
  const std::string remote = r.target == "farm" && r.kind != Kind::kReadOnly
                                 ? absl::StrFormat("%.2f", r.remote_p50)
                                 : std::string("-");
  std::printf(
      "%-11s %1d %-11s %-9s %-9s %3d %4d %10.0f %9.2f %9.2f %9s %9.2f %7.2f %6s %9s %6.1f %8.1f\n",
      r.target.c_str(), r.f, r.transport.c_str(), KindName(r.kind).c_str(),
      DistributionName(r.dist).c_str(), r.threads, r.clients, r.tx_per_s, r.p50, r.p99,
      remote.c_str(), r.txn_p50, 100 * r.abort_rate, RoundsText(r).c_str(), FarmFormula(r).c_str(),
      100 * r.success_rate, r.cpu_us_per_tx);
  std::fflush(stdout);
}

// msg_bench's 64-byte RPC round trip p50 on `provider`, in microseconds.
absl::StatusOr<double> MeasureRpcRoundTrip(const std::string& provider, int iters) {
  absl::StatusOr<std::vector<std::string>> lines =
      RunTool("tools/msg_bench", {absl::StrCat("--provider=", provider), "--sizes=64",
                                  "--duration_ms=0", "--json", absl::StrCat("--iters=", iters)});
  if (!lines.ok()) return lines.status();
  for (const std::string& line : *lines) {
    if (absl::StatusOr<double> rtt = JsonNumber(line, "rtt_p50_us"); rtt.ok()) return *rtt;
  }
  return absl::InternalError("msg_bench printed no rtt_p50_us");
}

// Parses a RESULT line of node 0 (see Report) into a row; `cpu_us`: the node processes' CPU time
// over the point's window.
absl::StatusOr<Row> ParseResult(absl::string_view line, const std::string& provider,
                                double cpu_us) {
  std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  Row r;
  r.target = "farm";
  r.provider = r.transport = provider;
  // RESULT kind dist threads commits aborts seconds tx_per_s p50 p99 txn_p50 txn_p99 pw remote
  //        remote_p50 found missed_tx
  const bool sized = f.size() == 17;
  absl::StatusOr<Kind> kind = sized ? ParseKind(f[1]) : absl::InvalidArgumentError("");
  absl::StatusOr<Distribution> dist =
      sized ? ParseDistribution(f[2]) : absl::InvalidArgumentError("");
  double commits = 0, aborts = 0, found = 0;
  if (!kind.ok() || !dist.ok() || !absl::SimpleAtoi(f[3], &r.threads) ||
      !absl::SimpleAtod(f[4], &commits) || !absl::SimpleAtod(f[5], &aborts) ||
      !absl::SimpleAtod(f[7], &r.tx_per_s) || !absl::SimpleAtod(f[8], &r.p50) ||
      !absl::SimpleAtod(f[9], &r.p99) || !absl::SimpleAtod(f[10], &r.txn_p50) ||
      !absl::SimpleAtod(f[11], &r.txn_p99) || !absl::SimpleAtod(f[12], &r.pw) ||
      !absl::SimpleAtod(f[13], &r.remote_share) || !absl::SimpleAtod(f[14], &r.remote_p50) ||
      !absl::SimpleAtod(f[15], &found) || !absl::SimpleAtoi(f[16], &r.missed_tx)) {
    return absl::InternalError(absl::StrCat("cannot read node 0's line: ", line));
  }
  r.kind = *kind;
  r.dist = *dist;
  r.abort_rate = commits + aborts == 0 ? 0 : aborts / (commits + aborts);
  SetRates(commits, found, cpu_us, &r);
  // LOCK + COMMIT-PRIMARY (f = 0) for a transaction that writes; tatp: 2 for its writing
  // transactions (at most 20 % of the mix), 0 for its read-only ones, which send none.
  r.msg_rounds = r.kind == Kind::kReadOnly ? 0 : 2;
  r.msg_rounds_read_only = r.kind == Kind::kTatp ? 0 : r.msg_rounds;
  return r;
}

// A configuration of o.nodes local nodes on `provider`, written into `dir`; its path.
absl::StatusOr<std::string> WriteClusterConfig(const std::string& provider, int f, int lease_ms,
                                               const Options& o, TempDir& dir) {
  absl::StatusOr<config::ClusterConfig> cfg =
      LocalClusterConfig(o.processes(), provider, absl::GetFlag(FLAGS_host));
  if (!cfg.ok()) return cfg.status();
  // The client node joins the formed cluster; its objects are placed on the data nodes only
  // (AllocateObjects).
  if (o.client_node) cfg->mutable_node(o.nodes)->set_late(true);
  // Every node process is a failure domain of its own (as //tools:cluster makes them).
  cfg->set_f(static_cast<uint32_t>(f));
  if (lease_ms > 0) cfg->set_lease_ms(static_cast<uint32_t>(lease_ms));
  for (config::NodeConfig& n : *cfg->mutable_node()) {
    n.set_failure_domain(absl::StrCat("process ", n.id()));
  }
  if (absl::Status s = ValidateAndComplete(&*cfg); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--f=", f, " --lease_ms=", lease_ms, ": ", s.message()));
  }
  cfg->set_region_size(kRegionBytes);
  cfg->set_region_count(static_cast<uint32_t>(RegionBytesPerNode(o) / kRegionBytes));
  cfg->set_join_timeout_s(static_cast<uint32_t>(o.timeout_s));
  return dir.Write("cluster.textproto", ToText(*cfg));
}

// Node i as a copy of this program: the node flags and the workload's flags as given here.
absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnNode(int i, const std::string& config,
                                                        const std::string& provider) {
  const std::string log_level = absl::GetFlag(FLAGS_log_level);
  std::vector<std::string> args = {
      "--role=node",
      absl::StrCat("--config=", config),
      absl::StrCat("--node_id=", i),
      absl::StrCat("--provider=", provider),
      absl::StrCat("--poll=", absl::GetFlag(FLAGS_poll)),
      absl::StrCat("--log_level=", log_level == "info" ? "warn" : log_level),
      absl::StrCat("--workers=", kMaxThreads + 2)};
  for (const char* flag :
       {"threads", "kinds", "dists", "zipf_theta", "objects", "subscribers", "nodes",
        "active_nodes", "client_node", "duration_ms", "warmup_ms", "timeout_s", "seed", "rate"}) {
    args.push_back(absl::StrCat("--", flag, "=", absl::FindCommandLineFlag(flag)->CurrentValue()));
  }
  return ChildProcess::SpawnSelf(args);
}

// A "WINDOW start_ns end_ns" line of node 0 (see RunNodePoint).
absl::StatusOr<Window> ParseWindow(absl::string_view line) {
  std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  int64_t start = 0, end = 0;
  if (f.size() != 3 || !absl::SimpleAtoi(f[1], &start) || !absl::SimpleAtoi(f[2], &end) ||
      end < start) {
    return absl::InternalError(absl::StrCat("cannot read node 0's line: ", line));
  }
  Window w;
  w.start = Clock::time_point(std::chrono::nanoseconds(start));
  w.end = Clock::time_point(std::chrono::nanoseconds(end));
  return w;
}

// Reads node 0's TXNBENCH lines until DONE (OK) or FAILED; prints a row per RESULT, with the
// CPU time of the processes `nodes` over the window of the WINDOW line before it.
absl::Status ReadNodeZero(ChildProcess& node0, const std::vector<int>& nodes,
                          const std::string& provider, const Options& o,
                          const std::function<void(const Row&)>& print,
                          std::vector<std::string>* lease_lines) {
  const absl::Duration step = o.PointTime() + absl::Seconds(o.timeout_s);
  std::optional<double> cpu_us;  // over the last WINDOW
  for (;;) {
    absl::StatusOr<std::string> line = node0.WaitForLine("TXNBENCH", absl::Now() + step);
    if (!line.ok()) {
      return absl::Status(line.status().code(), absl::StrCat("node 0: ", line.status().message()));
    }
    absl::string_view rest = *line;
    absl::ConsumePrefix(&rest, "TXNBENCH ");
    if (absl::StartsWith(rest, "WINDOW ")) {
      absl::StatusOr<Window> w = ParseWindow(rest);
      if (!w.ok()) return w.status();
      absl::StatusOr<double> cpu = CpuOverWindow(*w, nodes);
      if (!cpu.ok()) {
        return absl::Status(
            cpu.status().code(),
            absl::StrCat("the CPU time of the node processes: ", cpu.status().message()));
      }
      cpu_us = *cpu;
    } else if (absl::StartsWith(rest, "RESULT ")) {
      if (!cpu_us.has_value()) return absl::InternalError("node 0 sent a RESULT without a WINDOW");
      absl::StatusOr<Row> r = ParseResult(rest, provider, *cpu_us);
      cpu_us.reset();
      if (!r.ok()) return r.status();
      r->clients = o.Clients(r->threads);
      r->placement = o.client_node ? "client_node" : "data_nodes";
      r->poll = absl::GetFlag(FLAGS_poll);
      print(*r);
    } else if (absl::StartsWith(rest, "LEASE ")) {
      if (lease_lines != nullptr) lease_lines->push_back(std::string(rest));
    } else if (absl::StartsWith(rest, "SETUP ") || absl::StartsWith(rest, "AUDIT ")) {
      spdlog::info("{}: {}", provider, std::string(rest));
    } else if (absl::StartsWith(rest, "DONE")) {
      return absl::OkStatus();
    } else {
      return absl::InternalError(std::string(rest));
    }
  }
}

// One cluster's lease: its heartbeats' round trips on every node that reported them (the worst
// node's percentiles), the nodes evicted (status 3: a lease that healthy nodes miss), and how late
// a thread at the lease threads' priority in the driver woke up meanwhile (tools/sched_probe.h):
// a lease shorter than that cannot hold on this machine, whatever the heartbeats' round trip.
struct LeaseRow {
  std::string provider;
  int f = 0, lease_ms = 0, nodes = 0, reported = 0, evictions = 0;
  uint64_t heartbeats = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  SchedProbe::Result probe;  // the driver's probe thread over the cluster's life
};

std::string JsonLease(const LeaseRow& l, const RunInfo& info) {
  return absl::StrFormat(
      "{\"target\":\"farm\",\"kind\":\"lease\",\"provider\":\"%s\",\"f\":%d,"
      "\"lease_ms\":%d,\"nodes\":%d,\"nodes_reported\":%d,\"heartbeats\":%d,"
      "\"hb_rtt_p50_us\":%.3f,\"hb_rtt_p99_us\":%.3f,\"hb_rtt_max_us\":%.3f,"
      "\"evictions\":%d,\"probe_realtime\":%s,\"probe_s\":%.1f,\"probe_gap_max_ms\":%.2f,"
      "\"probe_gaps_over_5ms\":%d,\"probe_gaps_over_10ms\":%d,\"steal_ms\":%.0f%s}",
      l.provider, l.f, l.lease_ms, l.nodes, l.reported, l.heartbeats, l.p50_us, l.p99_us, l.max_us,
      l.evictions, l.probe.realtime ? "true" : "false", l.probe.seconds, l.probe.max_gap_ms,
      l.probe.gaps_over_5ms, l.probe.gaps_over_10ms, l.probe.steal_ms, RunInfoJson(info));
}

void PrintLease(const LeaseRow& l) {
  std::printf(
      "lease %d ms (f=%d): heartbeat round trip p50 %.1f us, p99 %.1f us, max %.1f us (worst of "
      "%d nodes, %d heartbeats); lease = %.0fx the p99; nodes evicted: %d; a %s thread sleeping "
      "1 ms saw up to %.1f ms between wake-ups (%d gaps over 10 ms in %.0f s), steal time %.0f "
      "ms\n",
      l.lease_ms, l.f, l.p50_us, l.p99_us, l.max_us, l.reported, static_cast<int>(l.heartbeats),
      l.p99_us > 0 ? 1000.0 * l.lease_ms / l.p99_us : 0.0, l.evictions,
      l.probe.realtime ? "real-time" : "normal-priority", l.probe.max_gap_ms,
      static_cast<int>(l.probe.gaps_over_10ms), l.probe.seconds, l.probe.steal_ms);
  std::fflush(stdout);
}

// Adds a node's "LEASE node lease_ms count p50 p99 max" line to `l`.
void AddLeaseLine(absl::string_view line, LeaseRow* l) {
  std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  uint64_t count = 0;
  double p50 = 0, p99 = 0, max = 0;
  if (f.size() != 7 || !absl::SimpleAtoi(f[3], &count) || !absl::SimpleAtod(f[4], &p50) ||
      !absl::SimpleAtod(f[5], &p99) || !absl::SimpleAtod(f[6], &max)) {
    spdlog::warn("cannot read a node's lease line: {}", std::string(line));
    return;
  }
  ++l->reported;
  l->heartbeats += count;
  l->p50_us = std::max(l->p50_us, p50);
  l->p99_us = std::max(l->p99_us, p99);
  l->max_us = std::max(l->max_us, max);
}

// Starts the cluster on `provider` and runs every point; prints a row per point, then the
// lease's row.
absl::Status RunFarm(const std::string& provider, int f, int lease_ms, const Options& o,
                     const std::function<void(const Row&)>& print,
                     const std::function<void(const LeaseRow&)>& print_lease) {
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("txn_bench");
  if (!dir.ok()) return dir.status();
  absl::StatusOr<std::string> config = WriteClusterConfig(provider, f, lease_ms, o, **dir);
  if (!config.ok()) return config.status();
  // From the first node's start to the last lease line: what the scheduler did meanwhile.
  SchedProbe probe;
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int i = 0; i < o.processes(); ++i) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = SpawnNode(i, *config, provider);
    if (!child.ok()) return child.status();
    nodes.push_back(std::move(*child));
  }
  // The rows of this cluster: its f, and COMMIT-BACKUP's round when it keeps backups.
  auto print_f = [&](const Row& r) {
    Row with = r;
    with.f = f;
    if (f > 0 && with.kind != Kind::kReadOnly) {
      ++with.msg_rounds;
      if (with.kind != Kind::kTatp) with.msg_rounds_read_only = with.msg_rounds;
    }
    print(with);
  };
  std::vector<std::string> lease_lines;
  std::vector<int> pids;
  for (const auto& n : nodes) pids.push_back(n->pid());
  absl::Status status = ReadNodeZero(*nodes[0], pids, provider, o, print_f, &lease_lines);
  for (size_t i = 1; i < nodes.size() && status.ok(); ++i) {
    absl::StatusOr<std::string> line =
        nodes[i]->WaitForLine("TXNBENCH LEASE", absl::Now() + absl::Seconds(o.timeout_s));
    if (line.ok()) lease_lines.push_back(line->substr(strlen("TXNBENCH ")));
  }
  LeaseRow lease;
  lease.probe = probe.Stop();
  lease.provider = provider;
  lease.f = f;
  lease.lease_ms = lease_ms > 0 ? lease_ms : static_cast<int>(kDefaultLeaseMs);
  lease.nodes = o.processes();
  for (const std::string& l : lease_lines) AddLeaseLine(l, &lease);
  for (auto& n : nodes) {
    const std::string how = n->Stop(absl::Seconds(status.ok() ? 30 : 2));
    // farm::RunNode exits with status 3 once evicted (also a node reaped before Stop).
    const int ws = n->wait_status();
    if (n->reaped() && WIFEXITED(ws) && WEXITSTATUS(ws) == 3) ++lease.evictions;
    if (status.ok() && how != "exited with status 0") {
      status = absl::InternalError(absl::StrCat("a node ", how));
    }
  }
  print_lease(lease);
  return status;
}

// What one peer client thread runs: its transactions until the window's end.
using PeerClient =
    std::function<absl::Status(int i, uint64_t seed, const Window& window, ClientStats* stats)>;

// One point against a peer: `clients` threads running `client`, the CPU time of the server's
// process tree (`server_pid`) and of this process (the clients) over the window in *cpu_us.
absl::StatusOr<ClientStats> RunPeerClients(const Point& p, size_t index, int clients,
                                           const Options& o, int server_pid,
                                           const PeerClient& client, double* cpu_us) {
  std::vector<ClientStats> stats(clients);
  std::vector<absl::Status> status(clients);
  const Window window = Window::After(o.warmup_ms, o.duration_ms);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      // Client i plays farm's thread i % threads of node i / threads (of the client node with
      // --client_node): the same seed, so the same transactions in the same order.
      const uint64_t seed = ClientSeed(
          o, index, uint64_t{o.NodeOfClient(i, p.threads)} * kMaxThreads + i % p.threads);
      status[i] = client(i, seed, window, &stats[i]);
    });
  }
  absl::StatusOr<double> cpu = CpuOverWindow(window, {getpid(), server_pid});
  for (std::thread& t : threads) t.join();
  if (!cpu.ok()) {
    return absl::Status(
        cpu.status().code(),
        absl::StrCat("the CPU time of the server and the clients: ", cpu.status().message()));
  }
  *cpu_us = *cpu;
  ClientStats all;
  for (int i = 0; i < clients; ++i) {
    if (!status[i].ok()) return status[i];
    all.Merge(stats[i]);
  }
  // Summed per client like farm's per node (each over its own window; all.seconds is the
  // longest, past the flag's duration only where a client's window ran on to its first commit).
  return all;
}

// A peer's row for point `p` from what its clients measured.
Row PeerRow(const std::string& target, const std::string& provider, const Point& p, int clients,
            int msg_rounds, const ClientStats& all, double cpu_us) {
  Row r;
  r.target = target;
  r.provider = provider;
  r.transport = TransportName(TransportFor(provider));
  r.kind = p.kind;
  r.dist = p.dist;
  r.threads = p.threads;
  r.clients = clients;
  r.msg_rounds = r.msg_rounds_read_only = msg_rounds;
  r.tx_per_s = all.commits / all.seconds;
  r.p50 = all.commit.Percentile(0.5);
  r.p99 = all.commit.Percentile(0.99);
  r.txn_p50 = all.txn.Percentile(0.5);
  r.txn_p99 = all.txn.Percentile(0.99);
  r.abort_rate = all.abort_rate();
  r.missed_tx = all.missed_tx;
  SetRates(all.commits, all.found, cpu_us, &r);
  return r;
}

// The server's pid, whose process tree's CPU time counts: without it, no point can be measured.
absl::StatusOr<int> ServerPid(const absl::StatusOr<int>& pid, const std::string& target) {
  if (pid.ok()) return *pid;
  return absl::Status(pid.status().code(),
                      absl::StrCat(target, ": no server process to measure the CPU time of: ",
                                   pid.status().message()));
}

// The bank transfer against one peer: every distribution and thread count of the farm points.
absl::Status RunPeer(Peer peer, const std::string& provider, const Options& o,
                     const std::function<void(const Row&)>& print) {
  const std::vector<Point> points = o.Points();
  if (std::none_of(points.begin(), points.end(),
                   [](const Point& p) { return p.kind == Kind::kBank; })) {
    return absl::OkStatus();
  }
  const Transport transport = TransportFor(provider);
  absl::StatusOr<std::string> script = PeersScript(absl::GetFlag(FLAGS_peers_script));
  if (!script.ok()) return script.status();
  absl::StatusOr<std::unique_ptr<PeerStore>> store =
      PeerStore::Start(peer, transport, *script, o.objects, kInitialValue);
  if (!store.ok()) return store.status();
  absl::StatusOr<int> pid = ServerPid((*store)->server_pid(), PeerName(peer));
  if (!pid.ok()) return pid.status();
  for (size_t index = 0; index < points.size(); ++index) {
    const Point& p = points[index];
    if (p.kind != Kind::kBank) continue;
    const int clients = o.Clients(p.threads);
    const KeyChooser keys(p.dist, o.objects, o.theta);
    std::vector<std::unique_ptr<BankConnection>> conns;
    for (int i = 0; i < clients; ++i) {
      absl::StatusOr<std::unique_ptr<BankConnection>> c = (*store)->Connect();
      if (!c.ok()) return c.status();
      conns.push_back(std::move(*c));
    }
    PeerClient client = [&](int i, uint64_t seed, const Window& window, ClientStats* stats) {
      Attempt attempt = [&](const std::vector<uint64_t>& objects, double* commit_us) {
        return conns[i]->Transfer(objects[0], objects[1], commit_us);
      };
      return RunClient(keys, Kind::kBank, window, o.ClientRate(p.threads), seed, attempt, stats);
    };
    double cpu_us = 0;
    absl::StatusOr<ClientStats> all = RunPeerClients(p, index, clients, o, *pid, client, &cpu_us);
    if (!all.ok()) return all.status();
    print(PeerRow(PeerName(peer), provider, p, clients, (*store)->msg_rounds(), *all, cpu_us));
  }
  absl::StatusOr<int64_t> sum = (*store)->Sum();
  if (!sum.ok()) return sum.status();
  const int64_t want = static_cast<int64_t>(o.objects) * kInitialValue;
  if (*sum != want) {
    return absl::DataLossError(
        absl::StrCat(PeerName(peer), "'s accounts sum to ", *sum, ", not ", want));
  }
  return absl::OkStatus();
}

// TATP against PostgreSQL (the postgres target; the others say they skip it): every tatp point,
// then the audit.
absl::Status RunTatpPeer(Peer peer, const std::string& provider, const Options& o,
                         const std::function<void(const Row&)>& print) {
  const std::vector<Point> points = o.Points();
  if (!o.tatp) return absl::OkStatus();
  if (peer != Peer::kPostgres) {
    spdlog::info("{}: no TATP there (postgres runs it): its tatp points are skipped",
                 PeerName(peer));
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> script = PeersScript(absl::GetFlag(FLAGS_peers_script));
  if (!script.ok()) return script.status();
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<TatpStore>> store =
      TatpStore::Start(TransportFor(provider), *script, o.subscribers, o.seed);
  if (!store.ok()) return store.status();
  spdlog::info("{}: TATP loaded: {} subscribers in {:.2f} s", PeerName(peer), o.subscribers,
               absl::ToDoubleSeconds(absl::Now() - t0));
  absl::StatusOr<int> pid = ServerPid((*store)->server_pid(), PeerName(peer));
  if (!pid.ok()) return pid.status();
  int64_t cf_delta = 0;
  for (size_t index = 0; index < points.size(); ++index) {
    const Point& p = points[index];
    if (p.kind != Kind::kTatp) continue;
    const int clients = o.Clients(p.threads);
    const TatpGenerator gen(p.dist, o.subscribers, o.theta);
    std::vector<std::unique_ptr<TatpConnection>> conns;
    for (int i = 0; i < clients; ++i) {
      absl::StatusOr<std::unique_ptr<TatpConnection>> c = (*store)->Connect();
      if (!c.ok()) return c.status();
      conns.push_back(std::move(*c));
    }
    PeerClient client = [&](int i, uint64_t seed, const Window& window, ClientStats* stats) {
      TatpAttempt attempt = [&](const TatpTxn& t, TatpOutcome* out, double* commit_us) {
        return conns[i]->Run(t, out, commit_us);
      };
      return RunTatpClient(gen, window, o.ClientRate(p.threads), seed, attempt, stats);
    };
    double cpu_us = 0;
    absl::StatusOr<ClientStats> all = RunPeerClients(p, index, clients, o, *pid, client, &cpu_us);
    if (!all.ok()) return all.status();
    cf_delta += all->increments;
    print(PeerRow(PeerName(peer), provider, p, clients, (*store)->msg_rounds(), *all, cpu_us));
  }
  absl::StatusOr<std::string> audit = (*store)->Audit(cf_delta);
  if (!audit.ok()) return audit.status();
  spdlog::info("{}: AUDIT tatp {} ok", PeerName(peer), *audit);
  return absl::OkStatus();
}

// The targets, in words, for one provider's rows.
void PrintTargets(const std::vector<Row>& rows, const std::string& provider) {
  auto find = [&](const std::string& target, Kind k, Distribution d, int threads) -> const Row* {
    for (const Row& r : rows) {
      if (r.provider == provider && r.target == target && r.kind == k && r.dist == d &&
          r.threads == threads) {
        return &r;
      }
    }
    return nullptr;
  };
  for (const Row& f : rows) {
    if (f.provider != provider || f.target != "farm") continue;
    if (f.f > 0) {
      // Replication's cost: against the same point of the cluster without backups.
      for (const Row& z : rows) {
        if (z.provider != provider || z.target != "farm" || z.f != 0 || z.kind != f.kind ||
            z.dist != f.dist || z.threads != f.threads || f.kind == Kind::kReadOnly ||
            z.tx_per_s <= 0) {
          continue;
        }
        const double drop = 1 - f.tx_per_s / z.tx_per_s;
        std::printf(
            "  %s %-7s %d thr: f=%d %.0f tx/s vs f=0 %.0f tx/s: %.0f%% lower (target <= 35%%: "
            "%s); remote commit p50 %.2f vs %.2f us (%+.2f us; one RPC RTT %.2f us)\n",
            KindName(f.kind).c_str(), DistributionName(f.dist).c_str(), f.threads, f.f,
            f.tx_per_s, z.tx_per_s, 100 * drop, drop <= 0.35 ? "met" : "MISSED", f.remote_p50,
            z.remote_p50, f.remote_p50 - z.remote_p50, f.rpc_rtt);
      }
    }
    if (f.kind == Kind::kBank && f.f == 0) {
      // Against each store's best variant (redis or redis-lua; postgres or postgres-fn).
      for (const char* server : {"redis", "postgres"}) {
        const Row* best = nullptr;
        for (Peer peer : kPeers) {
          if (PeerServer(peer) != server) continue;
          const Row* p = find(PeerName(peer), Kind::kBank, f.dist, f.threads);
          if (p != nullptr && p->tx_per_s > 0 && (best == nullptr || p->tx_per_s > best->tx_per_s))
            best = p;
        }
        if (best == nullptr) continue;
        const double want = std::string(server) == "redis" ? 2 : 5;
        const double ratio = f.tx_per_s / best->tx_per_s;
        std::printf(
            "  bank %-9s %d thr: farm %.0f tx/s = %.2fx %s (%s's best) over %s (target >= %.0fx: "
            "%s)\n",
            DistributionName(f.dist).c_str(), f.threads, f.tx_per_s, ratio, best->target.c_str(),
            server, best->transport.c_str(), want, ratio >= want ? "met" : "MISSED");
      }
    }
    if (f.kind == Kind::kTatp && f.f == 0) {
      // FaRM (SOSP 2015): 140 M TATP tx/s on 90 machines of 16 cores each.
      constexpr double kFarmPerCore = 140e6 / (90 * 16);
      const Row* pg = find("postgres", Kind::kTatp, f.dist, f.threads);
      std::printf(
          "  tatp %-9s %d thr: farm %.0f tx/s, %.1f CPU-us/tx = %.0f tx/s per core (FaRM's "
          "published %.0f tx/s per core: 140 M tx/s on 90 x 16 cores)",
          DistributionName(f.dist).c_str(), f.threads, f.tx_per_s, f.cpu_us_per_tx, f.per_core,
          kFarmPerCore);
      if (pg != nullptr && pg->tx_per_s > 0) {
        const double ratio = f.tx_per_s / pg->tx_per_s;
        std::printf("; %.2fx postgres (%.1f CPU-us/tx) (target >= 5x: %s)", ratio,
                    pg->cpu_us_per_tx, ratio >= 5 ? "met" : "MISSED");
      }
      std::printf(
          "\n    (tatp's commit50/99: farm's the commit step; postgres's the whole statement, one "
          "round trip that runs and commits it; rounds 2/0: writing/read-only transactions)\n");
    }
    if (f.kind == Kind::kWrite1 && f.rpc_rtt > 0 && f.f == 0) {
      // Judged on the commits that sent their 2 rounds (the local ones send none).
      const double bound = f.msg_rounds * f.rpc_rtt;
      std::printf(
          "  write_1 %-7s %d thr: remote commit p50 %.2f us vs %d x RPC RTT %.2f us = %.2f us: "
          "%.2fx (target <= 1.3x: %s; all commits p50 %.2f us, %.0f%% remote)\n",
          DistributionName(f.dist).c_str(), f.threads, f.remote_p50, f.msg_rounds, f.rpc_rtt, bound,
          f.remote_p50 / bound, f.remote_p50 <= 1.3 * bound ? "met" : "MISSED", f.p50,
          100 * f.remote_share);
    }
  }
}

// One summary row (repeat 0) per target, f and point of `provider`'s runs: the runs' medians of
// every measured field (throughput, latency, abort, remote, success and CPU rates, missed_tx), with
// the spread of tx/s, commit p50 and tx/s per core; the rest (the point, msg_rounds, placement) is
// run 1's, which every run shares.
std::vector<Row> Summaries(const std::vector<Row>& rows, const std::string& provider) {
  std::vector<Row> out;
  for (const Row& first : rows) {
    if (first.provider != provider || first.repeat != 1) continue;
    std::vector<double> tx, p50, p99, txn50, txn99, aborts, remote, share, pw, found, cpu, per_core,
        missed;
    for (const Row& r : rows) {
      if (r.provider != provider || r.repeat == 0 || r.target != first.target || r.f != first.f ||
          r.kind != first.kind || r.dist != first.dist || r.threads != first.threads) {
        continue;
      }
      tx.push_back(r.tx_per_s);
      p50.push_back(r.p50);
      p99.push_back(r.p99);
      txn50.push_back(r.txn_p50);
      txn99.push_back(r.txn_p99);
      aborts.push_back(r.abort_rate);
      remote.push_back(r.remote_p50);
      share.push_back(r.remote_share);
      pw.push_back(r.pw);
      found.push_back(r.success_rate);
      cpu.push_back(r.cpu_us_per_tx);
      per_core.push_back(r.per_core);
      missed.push_back(static_cast<double>(r.missed_tx));
    }
    Row s = first;
    s.repeat = 0;
    const Spread t = SpreadOf(tx), c = SpreadOf(p50);
    s.tx_per_s = t.median;
    s.tx_min = t.min;
    s.tx_max = t.max;
    s.p50 = c.median;
    s.p50_min = c.min;
    s.p50_max = c.max;
    s.p99 = SpreadOf(p99).median;
    s.txn_p50 = SpreadOf(txn50).median;
    s.txn_p99 = SpreadOf(txn99).median;
    s.abort_rate = SpreadOf(aborts).median;
    s.missed_tx = static_cast<uint64_t>(SpreadOf(missed).median);
    s.remote_p50 = SpreadOf(remote).median;
    s.remote_share = SpreadOf(share).median;
    s.pw = SpreadOf(pw).median;
    s.success_rate = SpreadOf(found).median;
    s.cpu_us_per_tx = SpreadOf(cpu).median;
    const Spread k = SpreadOf(per_core);
    s.per_core = k.median;
    s.per_core_min = k.min;
    s.per_core_max = k.max;
    out.push_back(s);
  }
  return out;
}

struct DriverOptions {
  Options bench;
  std::vector<std::string> providers;
  std::vector<int> fs;      // --f
  std::vector<int> leases;  // --lease_ms (0: the default)
  bool farm = false;
  std::vector<Peer> peers;  // in the order asked
};

absl::StatusOr<DriverOptions> DriverOptionsFromFlags() {
  DriverOptions d;
  absl::StatusOr<Options> o = OptionsFromFlags();
  if (!o.ok()) return o.status();
  d.bench = *o;
  std::string providers = absl::GetFlag(FLAGS_provider);
  if (providers.empty()) providers = "shm";
  for (absl::string_view p : absl::StrSplit(providers, ',')) {
    if (absl::Status s = CheckProvider(p); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--provider: ", s.message()));
    }
    d.providers.emplace_back(p);
  }
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_targets), ',')) {
    bool known = t == "farm";
    if (known) d.farm = true;
    for (Peer peer : kPeers) {
      if (t != PeerName(peer)) continue;
      known = true;
      if (std::find(d.peers.begin(), d.peers.end(), peer) == d.peers.end()) d.peers.push_back(peer);
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--targets: unknown target '", t, "' (farm, redis, redis-lua, postgres, postgres-fn)"));
    }
  }
  if (d.farm) {
    if (absl::Status s = CheckClusterMemory(d.bench); !s.ok()) return s;
  }
  if (!absl::GetFlag(FLAGS_cpus).empty()) {
    if (absl::Status s = PinTo(absl::GetFlag(FLAGS_cpus)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--cpus: ", s.message()));
    }
  }
  if (absl::GetFlag(FLAGS_private_dev_shm)) {
    if (absl::Status s = UsePrivateDevShm(); !s.ok()) return s;
  }
  if (absl::GetFlag(FLAGS_msg_iters) < 0 || absl::GetFlag(FLAGS_socket_iters) < 0)
    return absl::InvalidArgumentError("--msg_iters and --socket_iters must be >= 0");
  for (absl::string_view v : absl::StrSplit(absl::GetFlag(FLAGS_f), ',')) {
    int f = -1;
    if (!absl::SimpleAtoi(v, &f) || f < 0 || f > static_cast<int>(kMaxF) || f + 1 > o->nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--f: '", v, "' is not a number of backups from 0 to ", std::min<int>(kMaxF, o->nodes - 1),
          " (each of the ", o->nodes, " node processes is one failure domain)"));
    }
    d.fs.push_back(f);
  }
  const std::string leases = absl::GetFlag(FLAGS_lease_ms);
  for (absl::string_view v : absl::StrSplit(leases, ',', absl::SkipEmpty())) {
    int ms = 0;
    if (!absl::SimpleAtoi(v, &ms) || ms < static_cast<int>(kMinLeaseMs) || ms > 600000) {
      return absl::InvalidArgumentError(absl::StrCat("--lease_ms: '", v, "' is not a lease from ",
                                                     kMinLeaseMs, " to 600000 ms"));
    }
    d.leases.push_back(ms);
  }
  if (d.leases.empty()) d.leases.push_back(0);
  return d;
}

int DriverMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "txn_bench"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<DriverOptions> d = DriverOptionsFromFlags();
  if (!d.ok()) {
    spdlog::error("{}", std::string(d.status().message()));
    return kExitUsage;
  }
  const Options& o = d->bench;
  const bool json = absl::GetFlag(FLAGS_json);
  const CoresAwake awake(absl::GetFlag(FLAGS_cores_awake));
  if (absl::GetFlag(FLAGS_cores_awake) && !awake.held()) {
    spdlog::warn("cannot keep the cores out of idle ({}): targets pay idle wake-ups",
                 awake.why_not());
  }
  const RunInfo info{"txn_bench", o.seed, o.duration_ms, o.warmup_ms, awake.held()};
  const int repeats = absl::GetFlag(FLAGS_repeat);
  if (repeats < 1 || repeats > 100) {
    spdlog::error("--repeat must be 1..100");
    return kExitUsage;
  }
  std::vector<Row> rows;
  bool failed = false;
  for (const std::string& provider : d->providers) {
    double rtt = 0;
    if (absl::GetFlag(FLAGS_msg_iters) > 0) {
      absl::StatusOr<double> r = MeasureRpcRoundTrip(provider, absl::GetFlag(FLAGS_msg_iters));
      if (r.ok())
        rtt = *r;
      else
        spdlog::warn("RPC round-trip reference: {}", r.status().ToString());
    }
    double socket_rtt = 0;
    if (absl::GetFlag(FLAGS_socket_iters) > 0 && !d->peers.empty()) {
      absl::StatusOr<double> r =
          SocketRoundTripP50(TransportFor(provider), 64, absl::GetFlag(FLAGS_socket_iters));
      if (r.ok())
        socket_rtt = *r;
      else
        spdlog::warn("socket round-trip reference: {}", r.status().ToString());
    }
    if (!json) {
      std::printf(
          "\ntxn_bench: provider %s, %d nodes%s, poll %s, %s, %d ms per point "
          "(+%d ms warm-up)%s, cpus %s, cores %s; msg_bench 64 B RPC p50 %.2f us; 64 B %s socket "
          "round trip p50 %.2f us\n",
          provider.c_str(), o.nodes, o.client_node ? " (+ a client node running every client)" : "",
          absl::GetFlag(FLAGS_poll).c_str(), PopulationText(o).c_str(), o.duration_ms, o.warmup_ms,
          o.rate > 0 ? absl::StrCat(", ", OpenLoopText(o),
                                    " (all clients together; txn50: from each transaction's due "
                                    "time)")
                           .c_str()
                     : "",
          AffinityText().c_str(), info.cores_awake ? "kept out of idle" : "left to idle", rtt,
          TransportName(TransportFor(provider)).c_str(), socket_rtt);
      PrintTableHeader();
    }
    int run = 1;
    auto print = [&](const Row& r) {
      Row with = r;
      with.rpc_rtt = rtt;
      with.socket_rtt = socket_rtt;
      with.repeat = run;
      with.repeats = repeats;
      if (with.missed_tx > 0) {
        spdlog::warn(
            "{} ({}), {} {} {} thr: {} transactions due at --rate={} were never started: "
            "the rate is beyond what it serves at this point",
            with.target, with.transport, KindName(with.kind), DistributionName(with.dist),
            with.threads, with.missed_tx, o.rate);
      }
      rows.push_back(with);
      if (json) {
        std::printf("%s\n", JsonRow(with, o, info).c_str());
        std::fflush(stdout);
      } else {
        PrintTableRow(with);
      }
    };
    std::vector<std::pair<std::string, std::function<absl::Status()>>> runs;
    auto print_lease = [&](const LeaseRow& l) {
      if (json) {
        std::printf("%s\n", JsonLease(l, info).c_str());
        std::fflush(stdout);
      } else {
        PrintLease(l);
      }
    };
    if (d->farm) {
      for (int f : d->fs) {
        for (int lease : d->leases) {
          runs.emplace_back(absl::StrCat("farm (f = ", f, ", lease ", lease, " ms)"), [&, f, lease] {
            return RunFarm(provider, f, lease, o, print, print_lease);
          });
        }
      }
    }
    for (Peer peer : d->peers) {
      runs.emplace_back(PeerName(peer), [&, peer] {
        absl::Status s = RunPeer(peer, provider, o, print);
        return s.ok() ? RunTatpPeer(peer, provider, o, print) : s;
      });
    }
    // Every target once per run, so that the targets take turns.
    for (run = 1; run <= repeats; ++run) {
      for (auto& [name, target] : runs) {
        if (absl::Status s = target(); !s.ok()) {
          spdlog::error("{} on {}: {}", name, provider, s.ToString());
          failed = true;
        }
      }
    }
    std::vector<Row> judged;
    for (const Row& r : rows) {
      if (r.provider == provider) judged.push_back(r);
    }
    if (repeats > 1) {
      judged = Summaries(rows, provider);
      if (!json) {
        std::printf(
            "median of %d runs (min - max):\n%-11s %1s %-11s %-9s %-9s %3s %10s %19s %9s "
            "%17s %9s\n",
            repeats, "target", "f", "transport", "kind", "dist", "thr", "tx/s", "(min - max)",
            "commit50", "(min - max)", "commit99");
      }
      for (const Row& r : judged) {
        rows.push_back(r);
        if (json) {
          std::printf("%s\n", JsonRow(r, o, info).c_str());
        } else {
          std::printf("%-11s %1d %-11s %-9s %-9s %3d %10.0f %19s %9.2f %17s %9.2f\n",
                      r.target.c_str(), r.f, r.transport.c_str(), KindName(r.kind).c_str(),
                      DistributionName(r.dist).c_str(), r.threads, r.tx_per_s,
                      absl::StrFormat("(%.0f - %.0f)", r.tx_min, r.tx_max).c_str(), r.p50,
                      absl::StrFormat("(%.2f - %.2f)", r.p50_min, r.p50_max).c_str(), r.p99);
        }
      }
    }
    if (!json) {
      std::printf("targets (issue 9%s%s):\n", repeats > 1 ? ", on the runs' medians" : "",
                  o.rate > 0 ? absl::StrCat(", ", OpenLoopText(o)).c_str() : "");
      PrintTargets(judged, provider);
    }
  }
  return failed ? kExitRuntime : 0;
}

}  // namespace
}  // namespace txnbench
}  // namespace farm

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--role=node") {
      farm::App app;
      app.name = "txn_bench";
      app.setup = farm::txnbench::NodeSetup;
      app.run = farm::txnbench::NodeRun;
      return farm::RunNode(argc, argv, app);
    }
  }
  absl::SetProgramUsageMessage(
      "Measures farm's transactions (commit latency p50/p99, transactions per second, abort "
      "rate) on a cluster of node processes it starts, and the same bank transfer on Redis and "
      "PostgreSQL servers it starts on private sockets.\n"
      "  txn_bench [--provider=shm,tcp;ofi_rxm] [--threads=1,2,4] [--kinds=read_only,write_1,"
      "write_4,bank,tatp] [--subscribers=10000] [--dists=uniform,zipf,nurand] "
      "[--targets=farm,redis,redis-lua,postgres,postgres-fn] "
      "[--f=0,1] "
      "[--cpus=0-1] [--rate=20000] [--json]\n"
      "--provider takes a comma-separated list here (default shm); --rate runs an open loop (0, "
      "the default: closed). Exit status: 0 ok, 1 runtime failure, 2 bad flags.");
  if (!farm::FlagsAreValid("txn_bench", argc, argv)) return farm::txnbench::kExitUsage;
  absl::ParseCommandLine(argc, argv);
  if (!absl::GetFlag(FLAGS_role).empty()) {
    std::fprintf(stderr, "txn_bench: --role: only 'node' (internal) is accepted\n");
    return farm::txnbench::kExitUsage;
  }
  return farm::txnbench::DriverMain();
}
