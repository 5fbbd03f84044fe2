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
// slower: p50 1.6-3.3 -> 4.3 us, A/B runs alternated); they yield after 64 idle rounds or 4 us
// of them, whichever comes first (WaitYield below).
#ifndef FARM_PLATFORM_IDLE_YIELD_H_
#define FARM_PLATFORM_IDLE_YIELD_H_

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "platform/clock.h"

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
    const FastClock::time_point before = FastClock::now();
    sched_yield();
    yield_after_ = FastClock::now() - before > std::chrono::nanoseconds(kLateNanos)
                       ? 1
                       : std::min(2 * yield_after_, kMaxRounds);
  }
  // Idle rounds before the next yield.
  int yield_after() const { return yield_after_; }

 private:
  int rounds_ = 0;
  int yield_after_ = kMaxRounds;
};

// WaitYield: when a thread waiting for a completion or a response gives its core away: after
// kRounds rounds without work or kSpanNanos of them, whichever comes first. A round of a software
// provider's progress costs well under a microsecond on shm but is a poll(2) of the provider's
// sockets on tcp;ofi_rxm, a few microseconds, so a count of rounds alone (64, as before) spun
// ~150 us between yields on tcp while the thread waited for sat behind it, and a span alone
// yields later than the count on shm, where 64 rounds take less than 4 us (txn_bench on shm,
// adaptive, 3 nodes on 2 cores: a 4 us span alone gave 0.8-0.9x the transactions of the count,
// 16 us about 0.5x; README, Performance).
//
//   WaitYield y;
//   while (!done()) {
//     if (Poll() > 0) y.Worked();
//     else if (y.Idle()) CheckSomethingSlower();  // true: it just yielded
//   }
class WaitYield {
 public:
  static constexpr uint32_t kRounds = 64;
  static constexpr int64_t kSpanNanos = 4000;

  void Worked() { rounds_ = 0; }
  // A round that found nothing: true when it gave the core away (at most kRounds idle rounds
  // apart), a cadence for checks too slow for every round.
  bool Idle() {
    ++rounds_;
    if (rounds_ < kRounds) {
      if ((rounds_ & 7) != 0) return false;  // a clock read costs ~40 ns: one in 8 rounds
      const FastClock::time_point now = FastClock::now();
      if (rounds_ == 8) {  // the first look at the clock in this idle spell
        idle_since_ = now;
        return false;
      }
      if (now - idle_since_ < std::chrono::nanoseconds(kSpanNanos)) return false;
    }
    sched_yield();
    ++yields_;
    rounds_ = 0;
    return true;
  }
  // Yields so far.
  uint64_t yields() const { return yields_; }

 private:
  uint32_t rounds_ = 0;               // idle rounds since the last work or yield
  FastClock::time_point idle_since_;  // the clock at idle round 8 (set when rounds_ >= 8)
  uint64_t yields_ = 0;
};

}  // namespace farm

#endif  // FARM_PLATFORM_IDLE_YIELD_H_
