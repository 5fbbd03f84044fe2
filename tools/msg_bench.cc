// msg_bench: RPC round trip and message rate over the messaging layer, side by side with a raw
// one-sided WRITE ping-pong between the same two node processes, in the same run.
//
//   bazel run //tools:msg_bench -- --provider='tcp;ofi_rxm'
//   bazel run //tools:msg_bench -- --provider=shm --sizes=8,64,4K --json
//
// The bench starts a two-node cluster on this machine: it re-executes itself as the target node
// (node 0, also the configuration manager) and joins as node 1. Both nodes run a Messenger and
// an Rpc; the target serves an echo method. For every size:
//  - RPC round trip: one echo call at a time (request and response of `size` bytes, verified),
//    p50 and p99 in microseconds;
//  - raw round trip: node 1 WRITEs `size` bytes into an area of the target whose last word
//    carries a sequence number; a poller task on the target sees the word change and WRITEs the
//    bytes back; node 1 polls its own copy of the word. Its WRITEs complete as the ring's do
//    (unplaced on tcp, OpBatch::set_placed_completion). No framing, no checksum, no dispatch:
//    the floor the messaging layer is measured against. Both run through the same fabric
//    layer, the same poller thread on the target, in alternating blocks of 100 so that drift
//    affects both alike;
//  - message rate: --window echo calls queued on one lane and flushed together (one WRITE),
//    then awaited, repeated for --duration_ms; calls (each a request and a response) per second.
// As in fabric_bench, node 1 stops its own poller after joining and drives progress itself
// while it waits, so on a small machine only the bench thread and the target's poller spin.
//
// Output: a table, or with --json one object per size:
//   {"provider":"tcp;ofi_rxm","size":64,"rtt_p50_us":..,"rtt_p99_us":..,"raw_rtt_p50_us":..,
//    "raw_rtt_p99_us":..,"ratio_p50":..,"msgs_per_s":..,"poll":"busy","ring_size":..}
// The ring size (bytes per ring, chosen from the largest size and --window unless --ring_size is
// given) is reported because it moves the shm ratio for messages of a few KiB: every message
// lands in fresh ring memory, and a larger ring is colder.
// Logs go to standard error. Exit status: 0 success, 1 runtime failure, 2 bad flags, 3 data
// mismatch.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "messaging/messenger.h"
#include "messaging/rpc.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/node.h"
#include "platform/poller.h"
#include "platform/region.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/bench_util.h"
#include "tools/child_process.h"

ABSL_FLAG(std::string, provider, "auto",
          "fabric provider: auto, verbs, tcp;ofi_rxm, tcp, shm or sockets");
ABSL_FLAG(std::string, poll, "busy", "the target node's polling mode: busy or adaptive");
ABSL_FLAG(std::string, sizes, "8,64,512,4096",
          "comma-separated message sizes in bytes; a K suffix multiplies by 1024");
ABSL_FLAG(int, iters, 2000, "round trips measured per size and kind (RPC, raw)");
ABSL_FLAG(int, window, 32, "calls queued together for the message-rate measurement");
ABSL_FLAG(int, duration_ms, 300, "milliseconds per message-rate point (0 skips it)");
ABSL_FLAG(int64_t, ring_size, 0,
          "bytes per message ring; 0 picks one that fits the largest size and the window");
ABSL_FLAG(bool, cores_awake, true,
          "keep every core out of idle for the whole run (/dev/cpu_dma_latency, root), as kvbench "
          "and txn_bench do; false measures the machine as it idles (the target's sleeps then end "
          "with an idle core's wake-up)");
ABSL_FLAG(bool, json, false,
          "print one JSON object per size (keys provider, size, rtt_p50_us, rtt_p99_us, "
          "raw_rtt_p50_us, msgs_per_s, ...) instead of a table");
ABSL_FLAG(std::string, host, "127.0.0.1", "address both nodes bind to");
ABSL_FLAG(int, timeout_s, 30, "seconds to wait for the two-node cluster to form");
ABSL_FLAG(std::string, log_level, "warn", "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, role, "", "internal: 'target' when re-executed as the target node");
ABSL_FLAG(std::string, config, "", "internal: cluster configuration of the target role");

namespace farm {

// Whether --cores_awake is held for the run (set by main); every JSON line says so.
bool g_cores_awake = false;
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitMismatch = 3;
constexpr uint32_t kTargetId = 0;
constexpr uint32_t kBenchId = 1;
constexpr uint16_t kEcho = 1;
constexpr char kRawPurpose[] = "raw_pingpong";
constexpr uint64_t kMaxSize = 1 << 20;
constexpr int kBlock = 100;  // round trips per kind before switching to the other
constexpr absl::Duration kOpTimeout = absl::Seconds(10);

uint64_t RoundUpToPage(uint64_t n) { return (n + 4095) / 4096 * 4096; }

// Both roles derive the same layout from the flags.
struct Layout {
  uint64_t max_size = 0;
  MessengerOptions messaging;
  uint64_t raw_area = 0;  // bytes; the sequence word is its last 8
};

absl::StatusOr<Layout> MakeLayout(const std::vector<uint64_t>& sizes) {
  Layout l;
  l.max_size = *std::max_element(sizes.begin(), sizes.end());
  l.messaging.lanes = 1;
  uint64_t ring = static_cast<uint64_t>(absl::GetFlag(FLAGS_ring_size));
  if (ring == 0) {
    // The largest request (plus the RPC envelope) must fit a quarter ring; a window of calls
    // should fit half of it, so the head write-back never stalls the sender.
    const uint64_t frame = l.max_size + 16 + 64;
    const uint64_t window = static_cast<uint64_t>(absl::GetFlag(FLAGS_window));
    ring = uint64_t{64} << 10;
    while (ring < 4 * frame || ring < 2 * window * frame) ring *= 2;
  }
  if (absl::Status s = ValidateRingSize(ring); !s.ok()) return s;
  if (MaxPayload(ring) < l.max_size + 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ring_size=", ring, " carries messages of up to ", MaxPayload(ring) - 16,
                     " bytes of RPC payload; the largest size is ", l.max_size));
  }
  l.messaging.ring_size = ring;
  l.raw_area = RoundUpToPage(l.max_size + 64);
  return l;
}

NodeOptions MakeNodeOptions(const config::ClusterConfig& cfg, const Layout& l, uint32_t id) {
  NodeOptions o;
  o.config = cfg;
  o.node_id = static_cast<int>(id);
  o.areas.push_back(Messenger::Area(cfg, l.messaging));
  o.areas.push_back(AreaRequest{kRawPurpose, l.raw_area});
  o.join_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  return o;
}

// The raw ping-pong: `size` bytes WRITTEN to [word + 8 - size, word + 8) of the peer's raw area,
// the last 8 bytes being (sequence << 32 | size).
class RawPingPong {
 public:
  static absl::StatusOr<std::unique_ptr<RawPingPong>> Create(Node* node, uint32_t peer,
                                                             uint64_t area_size) {
    std::unique_ptr<RawPingPong> r(new RawPingPong(node, area_size));
    std::vector<control::RegionInfo> areas = node->RegionsOf(peer, kRawPurpose);
    r->local_ = node->local_area(kRawPurpose);
    if (areas.empty() || r->local_ == nullptr) {
      return absl::FailedPreconditionError("the raw ping-pong area is missing");
    }
    r->remote_ = GlobalAddress{areas[0].region_id(), 0};
    absl::StatusOr<std::unique_ptr<Region>> buf = Region::Allocate(area_size, false);
    if (!buf.ok()) return buf.status();
    r->buffer_ = std::move(*buf);
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        node->RegisterBuffer(r->buffer_->data(), area_size);
    if (!mr.ok()) return mr.status();
    r->mr_ = std::move(*mr);
    return r;
  }
  ~RawPingPong() { mr_.reset(); }

  // The sequence word of this node's area, as last placed by the peer.
  uint64_t LocalWord() const {
    // Acquire: pairs with nothing on the (remote) writer's side; keeps the load in the loop.
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(local_ + word_at_), __ATOMIC_ACQUIRE);
  }
  // Where the peer's `size`-byte ping starts in this node's area.
  const char* Received(uint64_t size) const { return local_ + word_at_ + 8 - size; }
  // WRITEs `size` bytes to the peer: size - 8 bytes of `payload`, then `word`.
  absl::Status Send(uint64_t size, uint64_t word, const char* payload) {
    char* out = buffer_->data() + word_at_ + 8 - size;
    std::memcpy(out, payload, size - 8);
    std::memcpy(out + size - 8, &word, 8);
    Node::Batch batch(node_);
    // The same completion as the ring's WRITEs (Messenger's Posting): the baseline of a message
    // is the WRITE the messenger would post, without the framing.
    batch.set_placed_completion(false);
    absl::Status s =
        batch.Write(remote_ + (word_at_ + 8 - size), LocalBuffer{mr_.get(), out, size});
    absl::Status w = batch.Wait(kOpTimeout);
    return s.ok() ? w : s;
  }

 private:
  RawPingPong(Node* node, uint64_t area_size) : node_(node), word_at_(area_size - 8) {}
  Node* node_;
  const uint64_t word_at_;
  char* local_ = nullptr;
  GlobalAddress remote_;
  std::unique_ptr<Region> buffer_;
  std::unique_ptr<MemoryRegistration> mr_;
};

// ---------------------------------------------------------------------------------------------
// Target role

int TargetMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "target"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(absl::GetFlag(FLAGS_config));
  absl::StatusOr<PollMode> mode = ParsePollMode(absl::GetFlag(FLAGS_poll));
  absl::StatusOr<std::vector<uint64_t>> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes), 8, kMaxSize);
  absl::StatusOr<Layout> layout = sizes.ok() ? MakeLayout(*sizes) : sizes.status();
  for (const absl::Status& s : {cfg.status(), mode.status(), layout.status()}) {
    if (!s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return kExitUsage;
    }
  }
  NodeOptions opts = MakeNodeOptions(*cfg, *layout, kTargetId);
  opts.poll.mode = *mode;
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(opts);
  if (!node.ok()) {
    spdlog::error("target node could not start: {}", std::string(node.status().message()));
    return kExitRuntime;
  }
  int rc = 0;
  {
    absl::StatusOr<std::unique_ptr<Messenger>> m =
        Messenger::Create(node->get(), layout->messaging);
    absl::StatusOr<std::unique_ptr<RawPingPong>> raw =
        RawPingPong::Create(node->get(), kBenchId, layout->raw_area);
    for (const absl::Status& s : {m.status(), raw.status()}) {
      if (!s.ok()) {
        spdlog::error("target: {}", std::string(s.message()));
        return kExitRuntime;
      }
    }
    Rpc rpc(m->get());
    // The echo writes its response straight into the reply ring (no string in between).
    rpc.RegisterInPlaceHandler(kEcho, [](const RpcRequest& r, RpcResponder& out) {
      absl::StatusOr<char*> body = out.Allocate(r.payload.size());
      if (!body.ok()) return body.status();
      std::memcpy(*body, r.payload.data(), r.payload.size());
      return absl::OkStatus();
    });
    // The raw ponger: a poller task, like the messenger's scan.
    auto pong = std::make_shared<std::atomic<RawPingPong*>>(raw->get());
    (*node)->poller()->AddTask([pong, last = uint64_t{0}]() mutable -> int {
      RawPingPong* r = pong->load(std::memory_order_acquire);  // pairs with the store below
      if (r == nullptr) return 0;
      const uint64_t word = r->LocalWord();
      if (word == last) return 0;
      last = word;
      const uint64_t size = word & 0xffffffff;
      if (absl::Status s = r->Send(size, word, r->Received(size)); !s.ok()) {
        spdlog::error("target: raw pong failed: {}", std::string(s.message()));
      }
      return 1;
    });
    std::printf("READY {\"node\":%u,\"provider\":\"%s\"}\n", kTargetId,
                (*node)->provider().c_str());
    std::fflush(stdout);
    // Serve until the bench closes our standard input.
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
    }
    // The task outlives `raw`; detach it first. Release: pairs with the task's acquire load.
    (*node)->poller()->Stop();
    pong->store(nullptr, std::memory_order_release);
  }
  node->reset();
  return rc;
}

// ---------------------------------------------------------------------------------------------
// Bench role

struct Point {
  uint64_t size = 0;
  double rtt_p50 = 0, rtt_p99 = 0, raw_p50 = 0, raw_p99 = 0, msgs_per_s = 0;
};

double MicrosSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

class Bench {
 public:
  Bench(Node* node, Rpc* rpc, Messenger::Lane* lane, RawPingPong* raw)
      : node_(node), rpc_(rpc), lane_(lane), raw_(raw) {}

  absl::Status Measure(uint64_t size, int iters, int window, int duration_ms, Point* p) {
    p->size = size;
    request_.assign(size, '\0');
    for (uint64_t i = 0; i < size; ++i) request_[i] = static_cast<char>(i * 7 + size);
    std::vector<double> rpc_us, raw_us;
    for (int done = -kBlock; done < iters; done += kBlock) {  // the first block warms up
      for (int i = 0; i < kBlock; ++i) {
        double us;
        if (absl::Status s = RpcRoundTrip(&us); !s.ok()) return s;
        if (done >= 0) rpc_us.push_back(us);
        if (absl::Status s = RawRoundTrip(size, &us); !s.ok()) return s;
        if (done >= 0) raw_us.push_back(us);
      }
    }
    std::sort(rpc_us.begin(), rpc_us.end());
    std::sort(raw_us.begin(), raw_us.end());
    p->rtt_p50 = Percentile(rpc_us, 0.5);
    p->rtt_p99 = Percentile(rpc_us, 0.99);
    p->raw_p50 = Percentile(raw_us, 0.5);
    p->raw_p99 = Percentile(raw_us, 0.99);
    if (duration_ms > 0) return Rate(window, absl::Milliseconds(duration_ms), &p->msgs_per_s);
    return absl::OkStatus();
  }

 private:
  absl::Status RpcRoundTrip(double* us) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> r = rpc_->Call(*lane_, kTargetId, kEcho, request_, kOpTimeout);
    *us = MicrosSince(t0);
    if (!r.ok()) return r.status();
    if (*r != request_) {
      return absl::DataLossError(
          absl::StrCat("the ", request_.size(), "-byte echo came back different"));
    }
    return absl::OkStatus();
  }

  absl::Status RawRoundTrip(uint64_t size, double* us) {
    const uint64_t word = (++raw_seq_ << 32) | size;
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = raw_->Send(size, word, request_.data()); !s.ok()) return s;
    const absl::Time deadline = absl::Now() + kOpTimeout;
    for (uint64_t n = 0; raw_->LocalWord() != word; ++n) {
      node_->fabric()->Progress();  // our poller is stopped: the pong lands with our progress
      if (n % 4096 == 0 && absl::Now() > deadline) {
        return absl::DeadlineExceededError("the raw pong did not come back within 10 s");
      }
    }
    *us = MicrosSince(t0);
    return absl::OkStatus();
  }

  absl::Status Rate(int window, absl::Duration duration, double* per_s) {
    uint64_t calls = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(duration));
    while (std::chrono::steady_clock::now() < end) {
      std::vector<std::shared_ptr<Rpc::Pending>> batch;
      for (int i = 0; i < window; ++i) {
        absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
            rpc_->Start(*lane_, kTargetId, kEcho, request_, kOpTimeout);
        if (!p.ok()) return p.status();
        batch.push_back(*p);
      }
      for (auto& p : batch) {
        absl::StatusOr<std::string> r = rpc_->Await(*lane_, *p);
        if (!r.ok()) return r.status();
        if (r->size() != request_.size()) return absl::DataLossError("echo of the wrong size");
        ++calls;
      }
    }
    *per_s = calls / (MicrosSince(t0) / 1e6);
    return absl::OkStatus();
  }

  Node* node_;
  Rpc* rpc_;
  Messenger::Lane* lane_;
  RawPingPong* raw_;
  std::string request_;
  uint64_t raw_seq_ = 0;
};

std::string JsonLine(const std::string& provider, const std::string& poll, uint64_t ring_size,
                     const Point& p) {
  return absl::StrFormat(
      "{\"provider\":\"%s\",\"size\":%d,\"rtt_p50_us\":%.3f,\"rtt_p99_us\":%.3f,"
      "\"raw_rtt_p50_us\":%.3f,\"raw_rtt_p99_us\":%.3f,\"ratio_p50\":%.3f,\"msgs_per_s\":%.1f,"
      "\"poll\":\"%s\",\"ring_size\":%d,\"cores_awake\":%s}",
      provider, p.size, p.rtt_p50, p.rtt_p99, p.raw_p50, p.raw_p99,
      p.raw_p50 > 0 ? p.rtt_p50 / p.raw_p50 : 0.0, p.msgs_per_s, poll, ring_size,
      g_cores_awake ? "true" : "false");
}

int RunBench(Node* node, const std::vector<uint64_t>& sizes, const Layout& layout,
             const std::string& poll) {
  absl::StatusOr<std::unique_ptr<Messenger>> m = Messenger::Create(node, layout.messaging);
  if (!m.ok()) {
    spdlog::error("{}", std::string(m.status().message()));
    return kExitRuntime;
  }
  absl::StatusOr<std::unique_ptr<RawPingPong>> raw =
      RawPingPong::Create(node, kTargetId, layout.raw_area);
  if (!raw.ok()) {
    spdlog::error("{}", std::string(raw.status().message()));
    return kExitRuntime;
  }
  RpcOptions ro;
  ro.spin = absl::InfiniteDuration();  // the bench thread is the only one driving progress
  Rpc rpc(m->get(), ro);
  absl::StatusOr<Messenger::LaneLease> lane = (*m)->AcquireLane();
  if (!lane.ok()) {
    spdlog::error("{}", std::string(lane.status().message()));
    return kExitRuntime;
  }
  Bench bench(node, &rpc, lane->get(), raw->get());
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) {
    std::printf("msg_bench: provider %s, target poll %s, ring %s KiB, window %d\n",
                node->provider().c_str(), poll.c_str(),
                absl::StrCat(layout.messaging.ring_size >> 10).c_str(),
                absl::GetFlag(FLAGS_window));
    std::printf("%8s %12s %12s %12s %12s %7s %12s\n", "size", "rpc_p50_us", "rpc_p99_us",
                "raw_p50_us", "raw_p99_us", "ratio", "msgs/s");
  }
  for (uint64_t size : sizes) {
    Point p;
    absl::Status s = bench.Measure(size, absl::GetFlag(FLAGS_iters), absl::GetFlag(FLAGS_window),
                                   absl::GetFlag(FLAGS_duration_ms), &p);
    if (!s.ok()) {
      spdlog::error("{} bytes: {}", size, std::string(s.message()));
      return absl::IsDataLoss(s) ? kExitMismatch : kExitRuntime;
    }
    if (json) {
      std::printf("%s\n", JsonLine(node->provider(), poll, layout.messaging.ring_size, p).c_str());
    } else {
      std::printf("%8lu %12.2f %12.2f %12.2f %12.2f %7.2f %12.0f\n",
                  static_cast<unsigned long>(size), p.rtt_p50, p.rtt_p99, p.raw_p50, p.raw_p99,
                  p.raw_p50 > 0 ? p.rtt_p50 / p.raw_p50 : 0.0, p.msgs_per_s);
    }
    std::fflush(stdout);
  }
  return 0;
}

int BenchMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "msg_bench"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const std::string provider = absl::GetFlag(FLAGS_provider);
  if (absl::Status s = CheckProvider(provider); !s.ok()) {
    spdlog::error("--provider: {}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<PollMode> mode = ParsePollMode(absl::GetFlag(FLAGS_poll));
  absl::StatusOr<std::vector<uint64_t>> sizes = ParseSizes(absl::GetFlag(FLAGS_sizes), 8, kMaxSize);
  absl::StatusOr<Layout> layout = sizes.ok() ? MakeLayout(*sizes) : sizes.status();
  for (const absl::Status& s : {mode.status(), layout.status()}) {
    if (!s.ok()) {
      spdlog::error("{}", std::string(s.message()));
      return kExitUsage;
    }
  }
  const int iters = absl::GetFlag(FLAGS_iters), window = absl::GetFlag(FLAGS_window);
  const int duration_ms = absl::GetFlag(FLAGS_duration_ms),
            timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (iters < 1 || iters > 10000000 || window < 1 || window > 4096 || duration_ms < 0 ||
      timeout_s < 1) {
    spdlog::error(
        "--iters must be 1..10000000, --window 1..4096, --duration_ms >= 0 and "
        "--timeout_s >= 1");
    return kExitUsage;
  }
  absl::StatusOr<config::ClusterConfig> cfg =
      LocalClusterConfig(2, provider, absl::GetFlag(FLAGS_host));
  if (!cfg.ok()) {
    spdlog::error("{}", std::string(cfg.status().message()));
    return kExitUsage;
  }
  cfg->set_join_timeout_s(static_cast<uint32_t>(timeout_s));
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("msg_bench");
  absl::StatusOr<std::string> path =
      dir.ok() ? (*dir)->Write("cluster.textproto", ToText(*cfg)) : dir.status();
  if (!path.ok()) {
    spdlog::error("{}", std::string(path.status().message()));
    return kExitRuntime;
  }
  std::vector<std::string> args = {"--role=target", absl::StrCat("--config=", *path)};
  args.push_back(absl::StrCat("--poll=", absl::GetFlag(FLAGS_poll)));
  args.push_back(absl::StrCat("--sizes=", absl::GetFlag(FLAGS_sizes)));
  args.push_back(absl::StrCat("--window=", window));
  args.push_back(absl::StrCat("--ring_size=", absl::GetFlag(FLAGS_ring_size)));
  args.push_back(absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level)));
  absl::StatusOr<std::unique_ptr<ChildProcess>> target = ChildProcess::SpawnSelf(args);
  if (!target.ok()) {
    spdlog::error("cannot start the target node: {}", std::string(target.status().message()));
    return kExitRuntime;
  }
  NodeOptions opts = MakeNodeOptions(*cfg, *layout, kBenchId);
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(opts);
  if (!node.ok()) {
    spdlog::error("node {} could not join the target's cluster: {} (the target {})", kBenchId,
                  std::string(node.status().message()), (*target)->Stop(absl::Seconds(1)));
    return kExitRuntime;
  }
  absl::StatusOr<std::string> ready =
      (*target)->WaitForLine("READY", absl::Now() + absl::Seconds(timeout_s));
  int rc = kExitRuntime;
  if (!ready.ok()) {
    spdlog::error("the target node did not become ready: {}",
                  std::string(ready.status().message()));
  } else {
    (*node)->poller()->Stop();  // see the file comment
    rc = RunBench(node->get(), *sizes, *layout, absl::GetFlag(FLAGS_poll));
  }
  node->reset();
  const std::string how = (*target)->Stop();
  if (rc == 0 && how != "exited with status 0") {
    spdlog::warn("the target node {} at the end of the run", how);
  }
  return rc;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures RPC round trips (p50, p99) and message rate over the messaging layer, side by "
      "side with a raw one-sided WRITE ping-pong, between two node processes on this machine.\n"
      "  msg_bench [--provider=tcp;ofi_rxm] [--poll=busy|adaptive] [--sizes=8,64,4K] [--json]\n"
      "It starts the target node itself (a second copy of this program). Exit status: 0 ok, "
      "1 runtime failure, 2 bad flags, 3 data mismatch.");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_role) == "target") return farm::TargetMain();
  if (!absl::GetFlag(FLAGS_role).empty()) {
    std::fprintf(stderr, "--role: only 'target' (internal) is accepted\n");
    return farm::kExitUsage;
  }
  // Held for the whole run, the target node (a child process) included.
  const farm::CoresAwake awake(absl::GetFlag(FLAGS_cores_awake));
  if (absl::GetFlag(FLAGS_cores_awake) && !awake.held()) {
    spdlog::warn("cannot keep the cores out of idle ({}): idle wake-ups are measured too",
                 awake.why_not());
  }
  farm::g_cores_awake = awake.held();
  return farm::BenchMain();
}
