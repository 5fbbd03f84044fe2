// SchedProbe: what a lease thread could expect of this machine's scheduler while a benchmark
// runs. A thread at the lease threads' priority (platform/priority.h: SCHED_RR 1 where allowed)
// asks to wake every millisecond and records how late it woke: a gap of G ms means that a
// heartbeat sent or acknowledged by such a thread could have been held up that long, whatever
// the protocol does. Beside it, the steal time the kernel accounted over the run (/proc/stat:
// time a virtual machine's vCPUs were runnable but the hypervisor ran something else), which
// tells a virtual machine's pauses from the guest's own load.
//
//   SchedProbe probe;            // starts its thread
//   ... run the cluster ...
//   SchedProbe::Result r = probe.Stop();
//
// Thread safety: Stop is called once, from one thread.
#ifndef FARM_TOOLS_SCHED_PROBE_H_
#define FARM_TOOLS_SCHED_PROBE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/string_view.h"

namespace farm {

class SchedProbe {
 public:
  struct Result {
    bool realtime = false;  // the probe ran at the lease threads' real-time priority
    uint64_t wakeups = 0;   // 1 ms sleeps completed
    double max_gap_ms = 0;  // the longest time between two wake-ups (1 ms when on time)
    uint64_t gaps_over_5ms = 0;
    uint64_t gaps_over_10ms = 0;
    double steal_ms = -1;  // all CPUs' steal time over the probe's life; -1: unknown
    double seconds = 0;    // how long the probe ran
  };

  SchedProbe();
  ~SchedProbe();  // stops the thread if Stop was not called
  SchedProbe(const SchedProbe&) = delete;
  SchedProbe& operator=(const SchedProbe&) = delete;

  Result Stop();

  // The steal time, in USER_HZ ticks, of /proc/stat's aggregate "cpu" line (its 8th value);
  // nullopt if `stat` has no such line or the kernel does not report it.
  static std::optional<uint64_t> ParseSteal(absl::string_view stat);

 private:
  void Run();

  std::atomic<bool> stop_{false};
  Result result_;  // written by the thread; read after it joined
  std::thread thread_;
};

}  // namespace farm

#endif  // FARM_TOOLS_SCHED_PROBE_H_
