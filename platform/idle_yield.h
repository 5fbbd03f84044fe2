// IdleYield: when a busy poller gives its core away.
//
// A busy poller gives the core away with sched_yield after some idle rounds, so that the thread
// it waits for, often on the same core when threads outnumber cores (several nodes and their
// clients on one machine, software providers that need the target's process to run), gets to
// run. How soon adapts: a yield that came back late ran another thread, so the core is
// contended and the next yield comes after one idle round; yields that return at once (the core
// is this thread's: a syscall of ~0.2 us) double the rounds between yields back up to kMaxRounds.
//
//   IdleYield idle;
//   while (!stop) { if (Poll() > 0) idle.Worked(); else idle.Idle(); }
//
// Measured (kvbench, shm, 3 shard nodes' pollers on one core): an RPC GET's p50 went from 37 to
// 7 us; with one node per core nothing changed. The waits for completions and RPC responses
// (OpBatch::Wait, Rpc::Await) keep yielding every 64 idle rounds: adapting them as well made an
// RPC GET with one node per core slower (p50 1.6-3.3 -> 4.3 us, A/B runs alternated).
#ifndef FARM_PLATFORM_IDLE_YIELD_H_
#define FARM_PLATFORM_IDLE_YIELD_H_

#include <sched.h>

#include <algorithm>
#include <cstdint>

#include "absl/time/clock.h"

namespace farm {

class IdleYield {
 public:
  static constexpr int kMaxRounds = 64;
  // A sched_yield that took longer than this ran another thread meanwhile.
  static constexpr int64_t kLateNanos = 2000;

  // A round that found work.
  void Worked() { rounds_ = 0; }
  // A round that found nothing: gives the core away when due.
  void Idle() {
    if (++rounds_ < yield_after_) return;
    rounds_ = 0;
    const int64_t before = absl::GetCurrentTimeNanos();
    sched_yield();
    yield_after_ = absl::GetCurrentTimeNanos() - before > kLateNanos
                       ? 1
                       : std::min(2 * yield_after_, kMaxRounds);
  }
  // Idle rounds before the next yield.
  int yield_after() const { return yield_after_; }

 private:
  int rounds_ = 0;
  int yield_after_ = kMaxRounds;
};

}  // namespace farm

#endif  // FARM_PLATFORM_IDLE_YIELD_H_
