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
// (OpBatch::Wait, Rpc::Await) do not adapt this way (it made an RPC GET with one node per core
// slower: p50 1.6-3.3 -> 4.3 us, A/B runs alternated); they yield after a span of idle time
// (WaitYield below).
#ifndef FARM_PLATFORM_IDLE_YIELD_H_
#define FARM_PLATFORM_IDLE_YIELD_H_

#include <sched.h>
#include <time.h>

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
  // A round that found nothing: gives the core away when due. True when it did and the yield
  // came back late: another thread wanted the core (a waiter that may sleep should, now).
  bool Idle() {
    if (++rounds_ < yield_after_) return false;
    rounds_ = 0;
    const int64_t before = absl::GetCurrentTimeNanos();
    sched_yield();
    const bool late = absl::GetCurrentTimeNanos() - before > kLateNanos;
    yield_after_ = late ? 1 : std::min(2 * yield_after_, kMaxRounds);
    return late;
  }
  // Idle rounds before the next yield.
  int yield_after() const { return yield_after_; }

 private:
  int rounds_ = 0;
  int yield_after_ = kMaxRounds;
};

// WaitYield: when a thread waiting for a completion or a response gives its core away: after it
// found nothing for kSpan of its own time, whatever one round costs (a round of a software
// provider's progress is a system call of a few microseconds on tcp;ofi_rxm, well under one on
// shm, so a count of rounds yields 30x later on tcp than on shm).
//
//   WaitYield y;
//   while (!done()) { if (Poll() > 0) y.Worked(); else y.Idle(); }
class WaitYield {
 public:
  static constexpr int64_t kSpanNanos = 4000;

  void Worked() { idle_since_ = 0; }
  // True when it yielded and the yield came back late (IdleYield::kLateNanos): another thread
  // wanted the core.
  bool Idle() {
    if ((++rounds_ & 7) != 0) return false;  // a clock read costs ~40 ns: one in 8 rounds
    const int64_t now = Now();
    if (idle_since_ == 0) {
      idle_since_ = now;
      return false;
    }
    if (now - idle_since_ < kSpanNanos) return false;
    sched_yield();
    ++yields_;
    idle_since_ = Now();
    return idle_since_ - now > IdleYield::kLateNanos;
  }
  // Yields so far.
  uint64_t yields() const { return yields_; }

 private:
  static int64_t Now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  uint32_t rounds_ = 0;
  int64_t idle_since_ = 0;  // 0: not idle (or not yet looked at the clock)
  uint64_t yields_ = 0;
};

}  // namespace farm

#endif  // FARM_PLATFORM_IDLE_YIELD_H_
