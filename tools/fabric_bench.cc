// fabric_bench: one-sided READ and WRITE latency and throughput between two node processes.
//
//   bazel run //tools:fabric_bench -- --provider='tcp;ofi_rxm'
//   bazel run //tools:fabric_bench -- --provider=shm --poll=adaptive --json
//   bazel run //tools:fabric_bench -- --provider=tcp --endpoint=msg --sizes=8,4K --gap_us=2000
//
// The bench starts a two-node cluster on this machine: it re-executes itself as the target node
// (node 0, also the configuration manager, with one region of at least 4 MiB) and joins as node 1.
// Both are ordinary farm::Node instances. The measuring side registers its own buffer and posts
// zero-copy operations with Node::Batch into the target's region:
//  - latency: one operation posted and waited for at a time (--iters samples per size; fewer for
//    large sizes), reported as p50 and p99 in microseconds;
//  - throughput: --window operations kept in flight for --duration_ms, reported as operations per
//    second and GB/s (10^9 bytes per second).
// Data is verified for every size before it is measured: a READ is compared with the pattern the
// target filled its region with, then a fresh pattern is written, read back and compared.
//
// --poll sets the target's polling mode. shm and tcp;ofi_rxm progress operations that target a
// node only while that node polls, so the target's mode shows up directly in READ latency. The
// measuring node's own poller is stopped after joining: nobody accesses its memory, and waiting
// for an operation drives progress itself, so on a small machine the only threads polling are the
// bench's and the target's.
//
// The measuring thread posts on a Node::Channel of its own (--channel, the default): its own
// endpoint and completion queue, as every application thread has in FaRM's thread model.
// --channel=false posts on the node's shared endpoint instead.
//
// Two other measurements replace the table:
//  - --threads=1,2,4: READ throughput of 1, 2 and 4 application threads, each on its own channel
//    with its own --window, for the sizes in --thread_sizes (8 B and 4 KiB). On a 2-core machine
//    the threads share the cores with the target's poller, so expect little scaling there.
//  - --compare_bare: 8-byte READ p50 against the bare-libfabric reference program
//    (//tools/reference:rma_reference, run as a server and a client process on the same
//    provider), in --compare_blocks blocks of --iters READs that alternate with ours, so both see
//    the same machine; the medians of the blocks' p50 and their ratio. Our target is stopped
//    (SIGSTOP) while the reference runs, so that its busy poller does not take a core from it.
//
//   bazel run //tools:fabric_bench -- --provider='tcp;ofi_rxm' --compare_bare
//   bazel run //tools:fabric_bench -- --provider=shm --threads=1,2,4 --json
//
// Output: a table on standard output, or with --json one JSON object per line:
//   {"provider":"tcp;ofi_rxm","op":"read","size":8,"p50_us":..,"p99_us":..,"ops_per_s":..,
//    "gbytes_per_s":..}
// (--threads adds "threads", "channels", "window_per_thread" and "per_thread_ops_per_s";
// --compare_bare prints "farm_p50_us", "bare_p50_us", "ratio" and the blocks' p50s.)
// Logs go to standard error. Exit status: 0 success, 1 runtime failure (the target did not come
// up, an operation failed or timed out), 2 bad flags, 3 data mismatch.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/global_address.h"
#include "platform/logging.h"
#include "platform/node.h"
#include "platform/poller.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/bench_util.h"
#include "tools/child_process.h"

ABSL_FLAG(std::string, provider, "auto",
          "fabric provider: auto, verbs, tcp;ofi_rxm, tcp, shm or sockets");
ABSL_FLAG(std::string, endpoint, "auto",
          "fabric endpoint type: auto, rdm or msg (connected; tcp and verbs only)");
ABSL_FLAG(std::string, poll, "busy",
          "the target node's polling mode: busy or adaptive (adaptive shows what an idle node "
          "costs in latency)");
ABSL_FLAG(std::string, sizes, "8,64,512,4096,32768,262144,1048576",
          "comma-separated operation sizes in bytes; a K or M suffix multiplies by 1024 or "
          "1048576 (e.g. 8,4K,1M)");
ABSL_FLAG(int, iters, 2000,
          "latency samples per operation and size; large sizes use fewer (at most 128 MiB "
          "moved per point, but at least min(iters, 200) samples)");
ABSL_FLAG(int, gap_us, 0,
          "microseconds to sleep before each latency sample; with --poll=adaptive a gap longer "
          "than the target's spin window (200 us) measures operations that reach an idle target");
ABSL_FLAG(int, window, 16, "operations kept in flight for the throughput measurement");
ABSL_FLAG(int, duration_ms, 500, "milliseconds per throughput point (0 skips throughput)");
ABSL_FLAG(bool, cores_awake, true,
          "keep every core out of idle for the whole run (/dev/cpu_dma_latency, root), as kvbench "
          "and txn_bench do; false measures the machine as it idles (the target's sleeps then end "
          "with an idle core's wake-up)");
ABSL_FLAG(bool, json, false,
          "print one JSON object per line (keys provider, op, size, p50_us, p99_us, ops_per_s, "
          "gbytes_per_s) instead of a table");
ABSL_FLAG(bool, channel, true,
          "post through a Node::Channel of the measuring thread (its own endpoint and completion "
          "queue); false posts on the node's shared endpoint");
ABSL_FLAG(std::string, threads, "",
          "comma-separated application thread counts, e.g. 1,2,4: instead of the latency table, "
          "measure READ throughput with that many threads, each on its own channel with its own "
          "--window, for the sizes in --thread_sizes");
ABSL_FLAG(std::string, thread_sizes, "8,4096", "operation sizes for --threads");
ABSL_FLAG(bool, compare_bare, false,
          "instead of the latency table, compare the 8-byte READ p50 with the bare-libfabric "
          "reference program (tools/reference:rma_reference) on the same provider, in "
          "--compare_blocks alternating blocks of --iters READs");
ABSL_FLAG(int, compare_blocks, 6, "blocks of each side for --compare_bare");
ABSL_FLAG(std::string, rma_reference, "",
          "path of the rma_reference binary for --compare_bare; empty: reference/rma_reference "
          "beside this program (where bazel puts it)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address both nodes bind to");
ABSL_FLAG(int, base_port, 0,
          "control port of the target node (the measuring node gets base_port+1); 0 picks free "
          "ports");
ABSL_FLAG(int, timeout_s, 30, "seconds to wait for the two-node cluster to form");
ABSL_FLAG(std::string, log_level, "warn", "trace, debug, info, warn, error or off");
ABSL_FLAG(std::string, role, "",
          "internal: 'target' when the bench re-executes itself as the target node");
ABSL_FLAG(std::string, config, "", "internal: cluster configuration file of the target role");

namespace farm {

// Whether --cores_awake is held for the run (set by main); every JSON line says so.
bool g_cores_awake = false;
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr int kExitMismatch = 3;
constexpr uint32_t kTargetId = 0;
constexpr uint32_t kBenchId = 1;
constexpr uint64_t kMinRegionSize = uint64_t{4} << 20;
constexpr uint64_t kMaxOpSize = uint64_t{1} << 30;
constexpr uint64_t kLatencyByteBudget = uint64_t{128} << 20;
constexpr absl::Duration kOpTimeout = absl::Seconds(10);
constexpr absl::Duration kTargetExitGrace = absl::Seconds(5);

// ---------------------------------------------------------------------------------------------
// Target role: a plain node that serves its region until its standard input closes.

int TargetMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "target"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<config::ClusterConfig> cfg = LoadClusterConfig(absl::GetFlag(FLAGS_config));
  if (!cfg.ok()) {
    spdlog::error("{}", std::string(cfg.status().message()));
    return kExitUsage;
  }
  absl::StatusOr<PollMode> mode = ParsePollMode(absl::GetFlag(FLAGS_poll));
  if (!mode.ok()) {
    spdlog::error("{}", std::string(mode.status().message()));
    return kExitUsage;
  }
  NodeOptions opts;
  opts.config = *cfg;
  opts.node_id = kTargetId;
  opts.poll.mode = *mode;
  opts.fill_pattern = true;  // The bench verifies its first READ of every size against it.
  opts.join_timeout = absl::Seconds(cfg->join_timeout_s());
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(opts);
  if (!node.ok()) {
    spdlog::error("target node {} could not start: {}", kTargetId,
                  std::string(node.status().message()));
    return kExitRuntime;
  }
  std::string ready = absl::StrFormat("READY {\"node\":%d,\"provider\":\"%s\",\"poll\":\"%s\"}\n",
                                      (*node)->id(), (*node)->provider(), PollModeName(*mode));
  (void)!write(STDOUT_FILENO, ready.data(), ready.size());
  // Serve until the bench closes our standard input (or dies: then the kernel closes it, and
  // PR_SET_PDEATHSIG has already signalled us).
  char buf[256];
  for (;;) {
    ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0 && errno != EINTR) break;
  }
  node->reset();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The target child process.

// For the signal handler: what to kill and remove if the bench is interrupted.
volatile sig_atomic_t g_child_pid = 0;
char g_temp_dir[256];
char g_config_path[sizeof(g_temp_dir) + 32];

void RemoveTempFiles() {
  if (g_config_path[0] != '\0') unlink(g_config_path);
  if (g_temp_dir[0] != '\0') rmdir(g_temp_dir);
  g_config_path[0] = '\0';
  g_temp_dir[0] = '\0';
}

void OnFatalSignal(int sig) {
  // Only async-signal-safe calls here.
  pid_t child = g_child_pid;
  if (child > 0) {
    kill(child, SIGTERM);  // SIGTERM lets shm remove its files; nothing blocks it.
    kill(child, SIGCONT);  // --compare_bare stops the target while the reference runs.
  }
  RemoveTempFiles();
  signal(sig, SIG_DFL);
  raise(sig);
}

// The target node: a ChildProcess of this program in --role=target, whose pid the signal handler
// knows.
class TargetProcess {
 public:
  ~TargetProcess() { Stop(); }

  absl::Status Spawn(const std::vector<std::string>& args) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> c = ChildProcess::SpawnSelf(args);
    if (!c.ok()) return c.status();
    proc_ = std::move(*c);
    g_child_pid = proc_->pid();
    return absl::OkStatus();
  }

  pid_t pid() const { return proc_ == nullptr ? 0 : std::abs(proc_->pid()); }

  // Non-blocking: true (and the description) if the child has exited; reaps it.
  bool Exited(std::string* how) {
    if (proc_ == nullptr || !proc_->Exited(how)) return false;
    g_child_pid = 0;
    return true;
  }

  // Waits up to `timeout` for a line on the child's standard output that starts with `prefix`.
  bool PollLine(absl::string_view prefix, absl::Duration timeout) {
    return proc_ != nullptr && proc_->WaitForLine(prefix, absl::Now() + timeout).ok();
  }

  // Asks the child to leave (closes its standard input), waits, then escalates to SIGTERM and
  // SIGKILL. Always reaps. Returns how it ended, or empty if it was not running.
  std::string Stop() {
    if (proc_ == nullptr) return "";
    std::string how = proc_->Stop(kTargetExitGrace);
    g_child_pid = 0;
    return how;
  }

  // Kills at once (error paths).
  void Kill() {
    if (proc_ == nullptr) return;
    proc_->Kill(SIGKILL);
    proc_->Stop(absl::ZeroDuration());
    g_child_pid = 0;
  }

 private:
  std::unique_ptr<ChildProcess> proc_;
};

// ---------------------------------------------------------------------------------------------
// Set-up helpers.

// Two distinct free TCP ports on `host` (bound to port 0, then released).
absl::StatusOr<std::pair<int, int>> PickFreePorts(const std::string& host) {
  int fds[2] = {-1, -1};
  int ports[2] = {0, 0};
  absl::Status status;
  for (int i = 0; i < 2 && status.ok(); ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    if (fds[i] < 0 || inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 ||
        bind(fds[i], reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      status = absl::InvalidArgumentError(
          absl::StrCat("cannot bind a port on --host=", host,
                       " (an IPv4 address of this machine is needed): ", std::strerror(errno)));
      break;
    }
    socklen_t len = sizeof(a);
    getsockname(fds[i], reinterpret_cast<sockaddr*>(&a), &len);
    ports[i] = ntohs(a.sin_port);
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  if (!status.ok()) return status;
  return std::make_pair(ports[0], ports[1]);
}

// Page-aligned anonymous memory for the measuring side's buffer.
class Buffer {
 public:
  explicit Buffer(size_t size) : size_((size + 4095) / 4096 * 4096) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  ~Buffer() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  size_t size_;
  char* data_;
};

// ---------------------------------------------------------------------------------------------
// Measurements.

struct Result {
  std::string op;
  uint64_t size = 0;
  int samples = 0;
  double p50_us = 0;
  double p99_us = 0;
  double ops_per_s = 0;
  double gbytes_per_s = 0;
};

// One measuring thread's view: its batches (on its own Node::Channel, or on the node's shared
// endpoint when `channel` is null) and its slots of the registered buffer.
class Bench {
 public:
  Bench(Node* node, Node::Channel* channel, GlobalAddress target, uint64_t region_size,
        const MemoryRegistration* mr, int window, int first_slot = 0)
      : node_(node),
        channel_(channel),
        target_(target),
        region_size_(region_size),
        mr_(mr),
        window_(window),
        first_slot_(first_slot) {}

  // Slots a Bench uses in the buffer: SlotsPerBench() from first_slot.
  static int SlotsPerBench(int window) { return window + 2; }

  // Local slot `i` of `size` bytes; slots [0, window) are for operations, window and window+1
  // for verification.
  LocalBuffer Slot(int i, uint64_t size) const {
    return LocalBuffer{mr_, mr_->base() + static_cast<size_t>(first_slot_ + i) * size, size};
  }

  std::unique_ptr<Node::Batch> NewBatch() const {
    return channel_ != nullptr ? std::make_unique<Node::Batch>(channel_)
                               : std::make_unique<Node::Batch>(node_);
  }
  GlobalAddress Remote(uint64_t seq, uint64_t size) const {
    const uint64_t slots = std::max<uint64_t>(1, region_size_ / size);
    return target_ + (seq % slots) * size;
  }

  absl::Status Op(Node::Batch& batch, bool is_read, GlobalAddress addr, LocalBuffer local) {
    absl::Status s = is_read ? batch.Read(addr, local) : batch.Write(addr, local);
    absl::Status w = batch.Wait(kOpTimeout);
    if (s.ok()) s = w;
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(is_read ? "READ" : "WRITE", " of ", local.size,
                                                 " bytes at ", addr.ToString(), " on target node ",
                                                 kTargetId, ": ", s.message()));
    }
    return absl::OkStatus();
  }

  // READ [0, size) and compare with the pattern the target filled its region with. Valid only
  // before the first WRITE.
  absl::Status CheckFillPattern(uint64_t size) {
    std::unique_ptr<Node::Batch> b = NewBatch();
    Node::Batch& batch = *b;
    LocalBuffer dst = Slot(window_ + 1, size);
    std::memset(dst.data, 0, size);
    if (absl::Status s = Op(batch, true, target_, dst); !s.ok()) return s;
    for (uint64_t i = 0; i < size; ++i) {
      if (dst.data[i] != SelfCheckPattern(kTargetId, 0, i)) {
        return absl::DataLossError(absl::StrFormat(
            "READ of %d bytes returned wrong data: byte %d is 0x%02x, the target holds 0x%02x",
            size, i, static_cast<unsigned char>(dst.data[i]),
            static_cast<unsigned char>(SelfCheckPattern(kTargetId, 0, i))));
      }
    }
    return absl::OkStatus();
  }

  // WRITE a size-specific pattern to [0, size), READ it back and compare.
  absl::Status CheckRoundTrip(uint64_t size) {
    std::unique_ptr<Node::Batch> b = NewBatch();
    Node::Batch& batch = *b;
    LocalBuffer src = Slot(window_, size);
    LocalBuffer dst = Slot(window_ + 1, size);
    for (uint64_t i = 0; i < size; ++i) {
      src.data[i] = static_cast<char>((i * 131 + size * 7 + (i >> 8)) ^ 0x5a);
    }
    std::memset(dst.data, 0, size);
    if (absl::Status s = Op(batch, false, target_, src); !s.ok()) return s;
    if (absl::Status s = Op(batch, true, target_, dst); !s.ok()) return s;
    if (std::memcmp(src.data, dst.data, size) != 0) {
      uint64_t i = 0;
      while (src.data[i] == dst.data[i]) ++i;
      return absl::DataLossError(absl::StrFormat(
          "WRITE of %d bytes then READ back differ at byte %d: wrote 0x%02x, read 0x%02x", size, i,
          static_cast<unsigned char>(src.data[i]), static_cast<unsigned char>(dst.data[i])));
    }
    return absl::OkStatus();
  }

  // One operation at a time, each after a sleep of `gap`.
  absl::Status Latency(bool is_read, uint64_t size, int iters, absl::Duration gap, Result* r) {
    std::unique_ptr<Node::Batch> b = NewBatch();
    Node::Batch& batch = *b;
    const int warmup = std::min(iters, 20);
    std::vector<double> us;
    us.reserve(iters);
    for (int i = 0; i < warmup + iters; ++i) {
      const GlobalAddress addr = Remote(i, size);
      const LocalBuffer local = Slot(i % window_, size);
      if (gap > absl::ZeroDuration()) absl::SleepFor(gap);
      const auto t0 = std::chrono::steady_clock::now();
      if (absl::Status s = Op(batch, is_read, addr, local); !s.ok()) return s;
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    r->samples = iters;
    r->p50_us = Percentile(us, 0.50);
    r->p99_us = Percentile(us, 0.99);
    return absl::OkStatus();
  }

  // `window` operations in flight for `duration`: a ring of single-operation batches, retired in
  // posting order; each one is re-posted as soon as it completed.
  absl::Status Throughput(bool is_read, uint64_t size, absl::Duration duration, Result* r) {
    std::vector<std::unique_ptr<Node::Batch>> ring;
    for (int i = 0; i < window_; ++i) ring.push_back(NewBatch());
    uint64_t seq = 0;
    auto post = [&](int slot) -> absl::Status {
      Node::Batch& b = *ring[slot];
      const GlobalAddress addr = Remote(seq++, size);
      const LocalBuffer local = Slot(slot, size);
      return is_read ? b.Read(addr, local) : b.Write(addr, local);
    };
    auto wait = [&](int slot) -> absl::Status {
      absl::Status s = ring[slot]->Wait(kOpTimeout);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(is_read ? "READ" : "WRITE", " of ", size,
                                                   " bytes to target node ", kTargetId,
                                                   " (throughput run): ", s.message()));
      }
      return s;
    };
    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(duration));
    std::vector<bool> in_flight(window_, false);
    absl::Status status;
    for (int i = 0; i < window_ && status.ok(); ++i) {
      status = post(i);
      in_flight[i] = status.ok();
    }
    uint64_t completed = 0;
    for (int slot = 0; status.ok(); slot = (slot + 1) % window_) {
      status = wait(slot);
      in_flight[slot] = false;
      if (!status.ok()) break;
      ++completed;
      if (std::chrono::steady_clock::now() >= end) break;
      status = post(slot);
      in_flight[slot] = status.ok();
    }
    // Drain the rest (also after an error, so that no buffer is in use when we return).
    for (int i = 0; i < window_; ++i) {
      if (!in_flight[i]) continue;
      absl::Status s = wait(i);
      if (s.ok()) {
        ++completed;
      } else if (status.ok()) {
        status = s;
      }
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (!status.ok()) return status;
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    r->ops_per_s = completed / secs;
    r->gbytes_per_s = completed * static_cast<double>(size) / secs / 1e9;
    return absl::OkStatus();
  }

 private:
  Node* node_;
  Node::Channel* channel_;
  GlobalAddress target_;
  uint64_t region_size_;
  const MemoryRegistration* mr_;
  int window_;
  int first_slot_;
};

int LatencyIters(uint64_t size, int iters) {
  const uint64_t budget = kLatencyByteBudget / size;
  const int floor = std::min(iters, 200);
  return static_cast<int>(std::max<uint64_t>(floor, std::min<uint64_t>(iters, budget)));
}

std::string JsonLine(const std::string& provider, const Result& r) {
  return absl::StrFormat(
      "{\"provider\":\"%s\",\"op\":\"%s\",\"size\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f,"
      "\"ops_per_s\":%.1f,\"gbytes_per_s\":%.6f,\"cores_awake\":%s}",
      provider, r.op, r.size, r.p50_us, r.p99_us, r.ops_per_s, r.gbytes_per_s,
      g_cores_awake ? "true" : "false");
}

void Print(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// --threads: READ throughput of several application threads, each on its own channel.

struct ThreadScaling {
  double ops_per_s = 0;
  double gbytes_per_s = 0;
  std::vector<double> per_thread_ops_per_s;
};

absl::Status MeasureThreads(Node* node, bool use_channel, GlobalAddress target,
                            uint64_t region_size, const MemoryRegistration* mr, int window,
                            int threads, uint64_t size, absl::Duration duration,
                            ThreadScaling* out) {
  std::vector<Result> results(threads);
  std::vector<absl::Status> status(threads);
  // Every thread opens its channel and connects before anyone measures.
  std::atomic<int> ready{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::unique_ptr<Node::Channel> channel;
      if (use_channel) {
        absl::StatusOr<std::unique_ptr<Node::Channel>> c = node->OpenChannel();
        if (c.ok()) {
          channel = std::move(*c);
        } else {
          status[t] = c.status();
        }
      }
      Bench bench(node, channel.get(), target, region_size, mr, window,
                  t * Bench::SlotsPerBench(window));
      if (status[t].ok()) {
        std::unique_ptr<Node::Batch> batch = bench.NewBatch();
        status[t] = bench.Op(*batch, true, target, bench.Slot(0, size));
      }
      // Pairs with the acquire loads below: all threads are set up before the first measures.
      ready.fetch_add(1, std::memory_order_acq_rel);
      while (ready.load(std::memory_order_acquire) < threads) std::this_thread::yield();
      if (status[t].ok()) status[t] = bench.Throughput(true, size, duration, &results[t]);
    });
  }
  for (std::thread& w : workers) w.join();
  *out = ThreadScaling{};
  for (int t = 0; t < threads; ++t) {
    if (!status[t].ok()) {
      return absl::Status(status[t].code(),
                          absl::StrCat("thread ", t, " of ", threads, ": ", status[t].message()));
    }
    out->ops_per_s += results[t].ops_per_s;
    out->gbytes_per_s += results[t].gbytes_per_s;
    out->per_thread_ops_per_s.push_back(results[t].ops_per_s);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// --compare_bare: the bare-libfabric reference, run as a pair of processes.

// Runs `args` (args[0] is the program) and returns its standard output; standard error is
// passed through. Kills it after `timeout`.
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& args,
                                       absl::Duration timeout) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> c = ChildProcess::SpawnCommand(args);
  if (!c.ok()) return c.status();
  std::string output;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    pollfd p{(*c)->stdout_fd(), POLLIN, 0};
    const int ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (ms == 0 || poll(&p, 1, ms) <= 0) break;
    std::vector<std::string> lines;
    const bool more = (*c)->ReadLines(&lines);
    for (const std::string& line : lines) absl::StrAppend(&output, line, "\n");
    if (!more) break;
  }
  // The output ended (or the time is up): give the program a moment to exit.
  std::string how;
  const absl::Time exit_deadline = std::max(deadline, absl::Now() + absl::Seconds(2));
  while (!(*c)->Exited(&how)) {
    if (absl::Now() > exit_deadline) {
      (*c)->Kill(SIGKILL);
      (*c)->Stop(absl::ZeroDuration());
      return absl::DeadlineExceededError(
          absl::StrCat(args[0], " did not finish within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
  return output;
}

// One block of the reference: its server (polling its queue, like a busy target node) and its
// client (`iters` 8-byte READs, one at a time) on `provider`. Returns the client's READ p50.
absl::StatusOr<double> RunReferenceBlock(const std::string& program, const std::string& provider,
                                         EndpointType endpoint, const std::string& host,
                                         int iters) {
  const char* tmp = std::getenv("TMPDIR");
  if (tmp == nullptr || *tmp == '\0' || std::strlen(tmp) > 200) tmp = "/tmp";
  std::string dir = absl::StrCat(tmp, "/rma_reference.XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", dir, ": ", std::strerror(errno)));
  }
  const std::string oob = dir + "/oob";
  absl::StatusOr<std::pair<int, int>> ports = PickFreePorts(host);
  if (!ports.ok()) return ports.status();
  const bool shm = provider == "shm";
  std::vector<std::string> common = {
      absl::StrCat("--prov=", provider),
      absl::StrCat("--ep_type=", endpoint == EndpointType::kMsg ? "msg" : "rdm"),
      absl::StrCat("--node=", shm ? "" : host),
      absl::StrCat("--port=", ports->first),
      absl::StrCat("--oob=", oob),
      absl::StrCat("--iters=", iters),
      "--bw_secs=0"};
  std::vector<std::string> server = {program, "--role=server"};
  server.insert(server.end(), common.begin(), common.end());
  // Its output is not wanted; it leaves once the client wrote its .done file.
  ChildProcess::Options quiet;
  quiet.stdout_path = "/dev/null";
  absl::StatusOr<std::unique_ptr<ChildProcess>> server_proc =
      ChildProcess::SpawnCommand(server, quiet);
  std::vector<std::string> client = {program, "--role=client"};
  client.insert(client.end(), common.begin(), common.end());
  absl::StatusOr<std::string> out = server_proc.ok() ? RunCapture(client, absl::Seconds(120))
                                                     : server_proc.status();
  if (server_proc.ok()) (*server_proc)->Stop(absl::Seconds(5));  // SIGTERM, SIGKILL if it stays
  for (const char* suffix : {".info", ".done", ".tmp"}) unlink((oob + suffix).c_str());
  rmdir(dir.c_str());
  if (!out.ok()) return out.status();
  // "[client] fi_read 8B x2000: avg 9.1 us, p50 8.4 us, ..."
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (!absl::StrContains(line, "fi_read 8B")) continue;
    size_t at = line.find("p50 ");
    double p50 = 0;
    if (at != absl::string_view::npos) {
      absl::string_view rest = line.substr(at + 4);
      rest = rest.substr(0, rest.find(' '));
      if (absl::SimpleAtod(rest, &p50)) return p50;
    }
  }
  return absl::UnavailableError(
      absl::StrCat("the reference printed no READ latency; its output:\n", *out));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// --threads: one line per thread count.
absl::Status RunThreads(Node* node, bool use_channel, GlobalAddress base, uint64_t region_size,
                        const MemoryRegistration* mr, int window,
                        const std::vector<int>& thread_counts, uint64_t size,
                        absl::Duration duration, bool json, const std::string& provider) {
  for (int threads : thread_counts) {
    ThreadScaling r;
    absl::Status s = MeasureThreads(node, use_channel, base, region_size, mr, window, threads, size,
                                    duration, &r);
    if (!s.ok()) return s;
    if (json) {
      Print(absl::StrFormat(
          "{\"provider\":\"%s\",\"op\":\"read\",\"size\":%d,\"threads\":%d,\"channels\":%s,"
          "\"window_per_thread\":%d,\"ops_per_s\":%.1f,\"gbytes_per_s\":%.6f,"
          "\"per_thread_ops_per_s\":[%s],\"cores_awake\":%s}",
          provider, size, threads, use_channel ? "true" : "false", window, r.ops_per_s,
          r.gbytes_per_s,
          absl::StrJoin(r.per_thread_ops_per_s, ",",
                        [](std::string* out, double v) { absl::StrAppendFormat(out, "%.1f", v); }),
          g_cores_awake ? "true" : "false"));
    } else {
      Print(absl::StrFormat(
          "read %9s  %d thread(s), %s: %12.0f ops/s %9.4f GB/s  (per thread: %s)", HumanSize(size),
          threads, use_channel ? "a channel each" : "shared endpoint", r.ops_per_s, r.gbytes_per_s,
          absl::StrJoin(r.per_thread_ops_per_s, " ", [](std::string* out, double v) {
            absl::StrAppendFormat(out, "%.0f", v);
          })));
    }
  }
  return absl::OkStatus();
}

// --compare_bare: blocks of our 8-byte READ latency alternate with blocks of the reference
// program's, so that both see the same machine load. While the reference runs, our target node
// is stopped (SIGSTOP): its busy poller would otherwise take a core from the reference's pair.
absl::Status RunCompare(Bench& bench, pid_t target_pid, const std::string& reference,
                        const std::string& provider, EndpointType endpoint, const std::string& host,
                        int iters, int blocks, bool json) {
  std::vector<double> ours, bare;
  for (int b = 0; b < blocks; ++b) {
    Result r;
    if (absl::Status s = bench.Latency(true, 8, iters, absl::ZeroDuration(), &r); !s.ok()) {
      return s;
    }
    ours.push_back(r.p50_us);
    // (Never kill(0, ...): that would stop our own process group.)
    if (target_pid > 0) kill(target_pid, SIGSTOP);
    absl::StatusOr<double> p50 = RunReferenceBlock(reference, provider, endpoint, host, iters);
    if (target_pid > 0) kill(target_pid, SIGCONT);
    if (!p50.ok()) {
      return absl::Status(p50.status().code(),
                          absl::StrCat("the reference program: ", p50.status().message()));
    }
    bare.push_back(*p50);
  }
  const double ours_p50 = Median(ours), bare_p50 = Median(bare);
  auto list = [](const std::vector<double>& v) {
    return absl::StrJoin(v, " ",
                         [](std::string* out, double x) { absl::StrAppendFormat(out, "%.2f", x); });
  };
  if (json) {
    Print(absl::StrFormat(
        "{\"provider\":\"%s\",\"op\":\"read\",\"size\":8,\"compare\":\"bare_libfabric\","
        "\"blocks\":%d,\"iters_per_block\":%d,\"farm_p50_us\":%.3f,\"bare_p50_us\":%.3f,"
        "\"ratio\":%.3f,\"farm_block_p50_us\":[%s],\"bare_block_p50_us\":[%s],"
        "\"cores_awake\":%s}",
        provider, blocks, iters, ours_p50, bare_p50, ours_p50 / bare_p50,
        absl::StrReplaceAll(list(ours), {{" ", ","}}),
        absl::StrReplaceAll(list(bare), {{" ", ","}}), g_cores_awake ? "true" : "false"));
  } else {
    Print(absl::StrFormat("8 B READ p50, median of %d alternating blocks of %d:", blocks, iters));
    Print(absl::StrFormat("  fabric_bench    %7.2f us   (blocks: %s)", ours_p50, list(ours)));
    Print(absl::StrFormat("  bare libfabric  %7.2f us   (blocks: %s)", bare_p50, list(bare)));
    Print(absl::StrFormat("  ratio           %7.2f", ours_p50 / bare_p50));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Bench role.

// Node::Start runs on its own thread so the main thread can watch the target process meanwhile.
struct StartResult {
  std::mutex mu;
  bool done = false;
  absl::StatusOr<std::unique_ptr<Node>> node = absl::UnknownError("not started");
};

// Leaves without joining a thread that is still inside Node::Start (it may wait for a CM that
// will never answer): everything that needs cleaning up has been cleaned up by then.
[[noreturn]] void Abandon(int code) {
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

int BenchMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "fabric_bench"); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  const std::string provider_flag = absl::GetFlag(FLAGS_provider);
  if (absl::Status s = CheckProvider(provider_flag); !s.ok()) {
    spdlog::error("--provider: {}", std::string(s.message()));
    return kExitUsage;
  }
  absl::StatusOr<PollMode> mode = ParsePollMode(absl::GetFlag(FLAGS_poll));
  if (!mode.ok()) {
    spdlog::error("--poll: {}", std::string(mode.status().message()));
    return kExitUsage;
  }
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  if (absl::Status s = ParseEndpointType(endpoint).status(); !s.ok()) {
    spdlog::error("--endpoint: {}", std::string(s.message()));
    return kExitUsage;
  }
  const bool compare_bare = absl::GetFlag(FLAGS_compare_bare);
  const int compare_blocks = absl::GetFlag(FLAGS_compare_blocks);
  const bool use_channel = absl::GetFlag(FLAGS_channel);
  std::vector<int> thread_counts;
  for (absl::string_view t : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(t, &n) || n < 1 || n > 64) {
      spdlog::error("--threads: '{}' is not a thread count between 1 and 64", std::string(t));
      return kExitUsage;
    }
    thread_counts.push_back(n);
  }
  if (compare_bare && !thread_counts.empty()) {
    spdlog::error("--compare_bare and --threads are separate runs; pick one");
    return kExitUsage;
  }
  if (compare_blocks < 1 || compare_blocks > 100) {
    spdlog::error("--compare_blocks={} must be between 1 and 100", compare_blocks);
    return kExitUsage;
  }
  std::string reference = absl::GetFlag(FLAGS_rma_reference);
  if (compare_bare && reference.empty()) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(".");
    dir = dir.substr(0, dir.rfind('/'));
    reference = dir + "/reference/rma_reference";
  }
  if (compare_bare && access(reference.c_str(), X_OK) != 0) {
    spdlog::error(
        "--compare_bare needs the reference program, not found at {} (bazel build "
        "//tools/reference:rma_reference, or pass --rma_reference)",
        reference);
    return kExitUsage;
  }
  // What is measured decides the sizes: the reference measures 8-byte READs only.
  absl::StatusOr<std::vector<uint64_t>> sizes =
      compare_bare
          ? std::vector<uint64_t>{8}
          : ParseSizes(absl::GetFlag(thread_counts.empty() ? FLAGS_sizes : FLAGS_thread_sizes), 1,
                       kMaxOpSize);
  if (!sizes.ok()) {
    spdlog::error("{}", std::string(sizes.status().message()));
    return kExitUsage;
  }
  const int max_threads =
      thread_counts.empty() ? 1 : *std::max_element(thread_counts.begin(), thread_counts.end());
  const int iters = absl::GetFlag(FLAGS_iters);
  const int window = absl::GetFlag(FLAGS_window);
  const int duration_ms = absl::GetFlag(FLAGS_duration_ms);
  const int base_port = absl::GetFlag(FLAGS_base_port);
  const int timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const int gap_us = absl::GetFlag(FLAGS_gap_us);
  const absl::Duration gap = absl::Microseconds(gap_us);
  const std::string host = absl::GetFlag(FLAGS_host);
  if (iters < 1 || iters > 10000000) {
    spdlog::error("--iters={} must be between 1 and 10000000", iters);
    return kExitUsage;
  }
  if (gap_us < 0 || gap_us > 10000000) {
    spdlog::error("--gap_us={} must be between 0 and 10000000", gap_us);
    return kExitUsage;
  }
  if (window < 1 || window > 1024) {
    spdlog::error("--window={} must be between 1 and 1024", window);
    return kExitUsage;
  }
  if (duration_ms < 0 || duration_ms > 3600 * 1000) {
    spdlog::error("--duration_ms={} must be between 0 and 3600000", duration_ms);
    return kExitUsage;
  }
  if (base_port < 0 || base_port > 65534) {
    spdlog::error("--base_port={} must be 0 (pick free ports) or a port below 65535", base_port);
    return kExitUsage;
  }
  if (timeout_s < 1 || timeout_s > 3600) {
    spdlog::error("--timeout_s={} must be between 1 and 3600", timeout_s);
    return kExitUsage;
  }
  const uint64_t max_size = *std::max_element(sizes->begin(), sizes->end());
  // The local buffer holds, for each thread, `window` operation slots plus two for verification.
  const uint64_t buffer_bytes =
      static_cast<uint64_t>(max_threads) * Bench::SlotsPerBench(window) * max_size;
  if (buffer_bytes > (uint64_t{4} << 30)) {
    spdlog::error(
        "--window={} with {}-byte operations needs a {} MiB buffer; use a smaller "
        "window or size",
        window, max_size, buffer_bytes >> 20);
    return kExitUsage;
  }
  int target_port = base_port, bench_port = base_port + 1;
  if (base_port == 0) {
    absl::StatusOr<std::pair<int, int>> ports = PickFreePorts(host);
    if (!ports.ok()) {
      spdlog::error("{}", std::string(ports.status().message()));
      return kExitUsage;
    }
    std::tie(target_port, bench_port) = *ports;
  }

  // The cluster configuration, in a private temporary directory.
  config::ClusterConfig cfg;
  cfg.set_provider(provider_flag);
  cfg.set_endpoint(endpoint);
  cfg.set_region_size(std::max(kMinRegionSize, (max_size + 4095) / 4096 * 4096));
  cfg.set_region_count(1);
  cfg.set_cm_node_id(kTargetId);
  cfg.set_join_timeout_s(static_cast<uint32_t>(timeout_s));
  cfg.set_lock_memory(false);
  for (auto [id, port] : {std::pair<uint32_t, int>{kTargetId, target_port},
                          std::pair<uint32_t, int>{kBenchId, bench_port}}) {
    config::NodeConfig* n = cfg.add_node();
    n->set_id(id);
    n->set_host(host);
    n->set_control_port(static_cast<uint32_t>(port));
  }
  if (absl::Status s = ValidateAndComplete(&cfg); !s.ok()) {
    spdlog::error("generated configuration is invalid: {}", std::string(s.message()));
    return kExitUsage;
  }
  const char* tmp = std::getenv("TMPDIR");
  if (tmp == nullptr || *tmp == '\0' || std::strlen(tmp) > 200) tmp = "/tmp";
  std::snprintf(g_temp_dir, sizeof(g_temp_dir), "%s/fabric_bench.XXXXXX", tmp);
  if (mkdtemp(g_temp_dir) == nullptr) {
    spdlog::error("cannot create a temporary directory {}: {}", g_temp_dir, std::strerror(errno));
    g_temp_dir[0] = '\0';
    return kExitRuntime;
  }
  std::snprintf(g_config_path, sizeof(g_config_path), "%s/cluster.textproto", g_temp_dir);
  {
    FILE* f = std::fopen(g_config_path, "w");
    const std::string text = ToText(cfg);
    if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
        std::fclose(f) != 0) {
      spdlog::error("cannot write {}: {}", g_config_path, std::strerror(errno));
      RemoveTempFiles();
      return kExitRuntime;
    }
  }
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);

  // The target: node 0, the configuration manager.
  TargetProcess target;
  const std::string target_name =
      absl::StrCat("target node ", kTargetId, " (", host, ":", target_port, ")");
  if (absl::Status s =
          target.Spawn({"--role=target", absl::StrCat("--config=", g_config_path),
                        absl::StrCat("--poll=", PollModeName(*mode)),
                        absl::StrCat("--log_level=", absl::GetFlag(FLAGS_log_level))});
      !s.ok()) {
    spdlog::error("cannot start the {}: {}", target_name, std::string(s.message()));
    RemoveTempFiles();
    return kExitRuntime;
  }
  spdlog::info("started the {} as pid {}; joining as node {}", target_name, target.pid(), kBenchId);

  // Join as node 1 while watching the target.
  auto start = std::make_shared<StartResult>();
  NodeOptions opts;
  opts.config = cfg;
  opts.node_id = kBenchId;
  opts.poll.mode = PollMode::kAdaptive;  // Stopped once we are a member; see the file comment.
  opts.join_timeout = absl::Seconds(timeout_s);
  std::thread starter([start, opts] {
    absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(opts);
    std::lock_guard<std::mutex> l(start->mu);
    start->node = std::move(node);
    start->done = true;
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(timeout_s) + absl::Seconds(2);
  bool target_ready = false;
  std::string failure;
  for (;;) {
    std::string how;
    if (target.Exited(&how)) {
      failure = absl::StrCat("the ", target_name, " ", how,
                             " before the benchmark could start (its log is above)");
      break;
    }
    if (!target_ready) target_ready = target.PollLine("READY", absl::Milliseconds(20));
    bool done;
    {
      std::lock_guard<std::mutex> l(start->mu);
      done = start->done;
    }
    if (done && !start->node.ok()) {
      failure = absl::StrCat("node ", kBenchId, " could not join the cluster of the ", target_name,
                             ": ", start->node.status().message());
      break;
    }
    if (done && target_ready) break;
    if (!target_ready) {
      // PollLine waited already.
    } else {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (absl::Now() > deadline) {
      failure =
          absl::StrCat("the ", target_name, " (pid ", target.pid(), ") did not come up within ",
                       timeout_s, " s", done ? "" : " (node 1 is still waiting to join)");
      break;
    }
  }
  if (!failure.empty()) {
    spdlog::error("{}", failure);
    target.Kill();
    RemoveTempFiles();
    bool done;
    {
      std::lock_guard<std::mutex> l(start->mu);
      done = start->done;
    }
    if (done) {
      starter.join();
      return kExitRuntime;
    }
    starter.detach();
    Abandon(kExitRuntime);
  }
  starter.join();
  // Both nodes have read the configuration: remove it now, so that not even SIGKILL leaves it.
  RemoveTempFiles();
  std::unique_ptr<Node> node = std::move(*start->node);
  node->poller()->Stop();

  int exit_code = 0;
  {
    const std::string provider = node->provider();
    std::vector<control::RegionInfo> regions = node->RegionsOf(kTargetId);
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<MemoryRegistration> mr;
    std::unique_ptr<Node::Channel> channel;
    std::string error;
    int error_code = kExitRuntime;
    if (regions.empty()) {
      error = absl::StrCat("the ", target_name, " offers no region");
    } else if (max_size > node->fabric()->max_rma_size()) {
      error = absl::StrCat(max_size, "-byte operations exceed the ", node->fabric()->max_rma_size(),
                           "-byte limit of provider ", provider);
      error_code = kExitUsage;
    } else {
      buffer = std::make_unique<Buffer>(buffer_bytes);
      if (buffer->data() == nullptr) {
        error = absl::StrCat("cannot map a ", buffer_bytes, "-byte buffer");
      } else {
        absl::StatusOr<std::unique_ptr<MemoryRegistration>> r =
            node->RegisterBuffer(buffer->data(), buffer->size());
        if (!r.ok()) {
          error = std::string(r.status().message());
        } else {
          mr = std::move(*r);
        }
      }
      if (error.empty() && use_channel) {
        absl::StatusOr<std::unique_ptr<Node::Channel>> c = node->OpenChannel();
        if (!c.ok()) {
          error = std::string(c.status().message());
        } else {
          channel = std::move(*c);
        }
      }
    }
    if (!error.empty()) {
      spdlog::error("{}", error);
      exit_code = error_code;
    } else {
      const GlobalAddress base{regions[0].region_id(), 0};
      Bench bench(node.get(), channel.get(), base, regions[0].size(), mr.get(), window);
      const bool json = absl::GetFlag(FLAGS_json);
      if (!json) {
        Print(absl::StrFormat(
            "fabric_bench: provider %s (%s endpoints), target poll %s, %s, %d-op window, %d ms per "
            "throughput point%s",
            provider, EndpointTypeName(node->fabric()->endpoint_type()), PollModeName(*mode),
            use_channel ? "posting on a channel" : "posting on the shared endpoint", window,
            duration_ms,
            gap_us > 0 ? absl::StrCat(", ", gap_us, " us between latency samples") : ""));
        if (thread_counts.empty() && !compare_bare) {
          Print(absl::StrFormat("%-5s %9s %7s %10s %10s %12s %9s", "op", "size", "samples",
                                "p50_us", "p99_us", "ops/s", "GB/s"));
        }
      }
      // Every size is checked twice: READs against the target's fill pattern (all sizes first,
      // before any WRITE changes the region), then a WRITE/READ round trip just before the
      // size is measured.
      absl::Status s;
      for (uint64_t size : *sizes) {
        s = bench.CheckFillPattern(size);
        if (!s.ok()) {
          spdlog::error("{} bytes: {}", size, std::string(s.message()));
          exit_code = absl::IsDataLoss(s) ? kExitMismatch : kExitRuntime;
          break;
        }
      }
      for (uint64_t size : *sizes) {
        if (exit_code != 0) break;
        s = bench.CheckRoundTrip(size);
        if (s.ok() && !thread_counts.empty()) {
          s = RunThreads(node.get(), use_channel, base, regions[0].size(), mr.get(), window,
                         thread_counts, size, absl::Milliseconds(duration_ms), json, provider);
        } else if (s.ok() && compare_bare) {
          s = RunCompare(bench, target.pid(), reference, provider, node->fabric()->endpoint_type(),
                         host, iters, compare_blocks, json);
        }
        for (bool is_read : {true, false}) {
          if (!thread_counts.empty() || compare_bare) break;
          if (!s.ok()) break;
          Result r;
          r.op = is_read ? "read" : "write";
          r.size = size;
          s = bench.Latency(is_read, size, LatencyIters(size, iters), gap, &r);
          if (s.ok() && duration_ms > 0) {
            s = bench.Throughput(is_read, size, absl::Milliseconds(duration_ms), &r);
          }
          if (!s.ok()) break;
          if (json) {
            Print(JsonLine(provider, r));
          } else {
            Print(absl::StrFormat("%-5s %9s %7d %10.2f %10.2f %12.0f %9.4f", r.op, HumanSize(size),
                                  r.samples, r.p50_us, r.p99_us, r.ops_per_s, r.gbytes_per_s));
          }
        }
        if (!s.ok()) {
          spdlog::error("{} bytes: {}", size, std::string(s.message()));
          exit_code = absl::IsDataLoss(s) ? kExitMismatch : kExitRuntime;
          break;
        }
      }
    }
    channel.reset();
    mr.reset();
  }
  node.reset();  // Leaves the cluster.
  std::string how = target.Stop();
  if (exit_code == 0 && !how.empty() && how != "exited with status 0") {
    spdlog::warn("the {} {} at the end of the run", target_name, how);
  }
  RemoveTempFiles();
  return exit_code;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Measures one-sided READ and WRITE latency (p50, p99) and throughput between two node "
      "processes on this machine.\n"
      "  fabric_bench [--provider=tcp;ofi_rxm] [--poll=busy|adaptive] [--sizes=8,4K,1M] "
      "[--json]\n"
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
