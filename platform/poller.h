// Poller: the thread that keeps a node's fabric making progress.
//
// shm and tcp;ofi_rxm complete one-sided operations that *target* this node only while someone
// polls its completion queue, so every node runs a Poller for as long as it serves memory.
// Higher layers add tasks (e.g. scanning message rings) that run on the same thread.
//
// Modes:
//  - kBusy: poll without pause. Lowest latency; burns a core. For benchmarks. A node that polls
//    busily opens its completion queue without a wait object (FabricOptions::wait_object):
//    nobody blocks on it, and the provider would signal it on every completion.
//  - kAdaptive: after activity, keep polling for a spin window (giving the core away now and then,
//    like kBusy); when idle, wait up to max_sleep at a time. The default for local clusters,
//    where several nodes share a few cores. How an idle node waits depends on the provider
//    (Fabric::can_wait):
//      * tcp, tcp;ofi_rxm: it blocks on the completion queue's wait object, which wakes up when a
//        peer's operation arrives, so a remote READ to an idle node costs a wake-up (tens of
//        microseconds) rather than a sleep.
//      * shm (its queue cannot block): it sleeps on the endpoint's doorbell (platform/doorbell.h),
//        which a peer rings after posting an operation to it.
//      * verbs: it sleeps in growing steps up to max_sleep (the NIC serves peers without it).
//    The spin window yields (IdleYield): a poller woken by a peer tends to be placed on the
//    waker's core, and one that spun there without yielding kept the waker, waiting for its
//    operation's completion on that core, off the CPU until the window ended (every WRITE to an
//    idle shm node then took the whole window, ~220 us). Ending the window at a yield that came
//    back late (another thread wanted the core), so that only threads with work would run, was
//    tried: with the RPC callers doing the same it gave 0.5-0.9x the transactions at 1 thread
//    per node (txn_bench, 3 nodes on 2 cores): each hop then paid a wake-up.
//    What it costs, measured with tools/fabric_bench (8-byte operations to the target, 2 cores,
//    loopback; "idle" = 2 ms between operations, so every one finds the target waiting):
//                         busy p50/p99 us   adaptive p50/p99 us   adaptive, idle p50/p99 us
//      tcp;ofi_rxm READ       15 / 32             17 / 42               113 / 245
//      shm WRITE             1.4 / 3.2          1.6 / 3.2               20 / 46
//    (tcp;ofi_rxm: 2026-11-23; shm: 2026-11-29, one run each. Before the doorbell an idle shm node
//    served a WRITE after 943 / 1105 us, sleeping out max_sleep. An 8-byte shm READ needs no
//    progress of the target: 4.6 us idle either way.) An idle adaptive node uses about 2% of a
//    core (3-node cluster, tcp;ofi_rxm or shm).
//    On 2026-11-23 an idle tcp;ofi_rxm target answered a READ up to ~2 ms late in some runs;
//    re-measured on a quiet VM on 2026-11-29 (README, Polling) the idle p50 was 87-90 us in
//    every run, the ppoll waking within tens of microseconds of the peer's send.
//
// Thread safety: AddTask and Stop may be called from any thread.
#ifndef FARM_PLATFORM_POLLER_H_
#define FARM_PLATFORM_POLLER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/mutex.h"
#include "absl/time/time.h"
#include "platform/fabric.h"

namespace farm {

enum class PollMode { kBusy, kAdaptive };

// Parses "busy" or "adaptive".
absl::StatusOr<PollMode> ParsePollMode(absl::string_view s);
std::string PollModeName(PollMode mode);

struct PollerOptions {
  PollMode mode = PollMode::kAdaptive;
  // Adaptive: how long to keep spinning after the last activity.
  absl::Duration spin = absl::Microseconds(200);
  // Adaptive: the longest sleep between polls when idle.
  absl::Duration max_sleep = absl::Milliseconds(1);
};

class Poller {
 public:
  // A task returns how much work it did (0 when idle); it runs on the poller thread.
  using Task = std::function<int()>;

  // Starts the thread. `fabric` must outlive the poller.
  Poller(Fabric* fabric, PollerOptions options);
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller();  // Stops the thread.

  void AddTask(Task task);
  void Stop();

  // Loop iterations so far (for tests and idle-cost measurements).
  uint64_t iterations() const { return iterations_.load(std::memory_order_relaxed); }

 private:
  void Run();
  int RunTasks();

  Fabric* const fabric_;
  const PollerOptions options_;
  farm::Mutex mu_;
  std::vector<Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> has_tasks_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> exited_{false};  // Run returned
  std::atomic<uint64_t> iterations_{0};
  std::thread thread_;
};

}  // namespace farm

#endif  // FARM_PLATFORM_POLLER_H_
