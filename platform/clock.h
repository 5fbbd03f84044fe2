// Clocks for deadlines on hot paths.
//
// absl::Now() costs about 170 ns per call with Debian's abseil on the machines this was measured
// on (it is a shared-library call that reads the cycle counter under a seqlock); a small RPC
// round trip on shm takes about 4 us, so a few clock reads per operation are a visible share of
// it. Two cheaper clocks, both monotonic:
//
//  - FastClock: std::chrono::steady_clock (clock_gettime(CLOCK_MONOTONIC) through the vDSO),
//    about 40 ns, nanosecond resolution. For spin windows and timings.
//  - CoarseClock: CLOCK_MONOTONIC_COARSE, about 10 ns, but it only advances once per kernel tick
//    (4 ms here; 1 to 10 ms on usual kernels). For deadlines of tens of milliseconds and more,
//    where being late by a tick does not matter: operation timeouts, wait slices.
//
//   const CoarseClock::time_point deadline = CoarseDeadline(absl::Seconds(10));
//   while (!done()) {
//     if (Progress() == 0 && CoarseClock::now() >= deadline) return TimedOut();
//   }
#ifndef FARM_PLATFORM_CLOCK_H_
#define FARM_PLATFORM_CLOCK_H_

#include <time.h>

#include <chrono>

#include "absl/time/time.h"

namespace farm {

using FastClock = std::chrono::steady_clock;

struct CoarseClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<CoarseClock>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return time_point(duration(static_cast<rep>(ts.tv_sec) * 1000000000 + ts.tv_nsec));
  }
};

// `from` + `timeout`, saturating: InfiniteDuration (and anything beyond a century) never
// expires, and a negative timeout has already expired.
template <typename Clock>
typename Clock::time_point DeadlineAfter(typename Clock::time_point from, absl::Duration timeout) {
  if (timeout >= absl::Hours(24 * 365 * 100)) return Clock::time_point::max();
  if (timeout <= absl::ZeroDuration()) return from;
  return from +
         std::chrono::duration_cast<typename Clock::duration>(absl::ToChronoNanoseconds(timeout));
}

inline CoarseClock::time_point CoarseDeadline(absl::Duration timeout) {
  return DeadlineAfter<CoarseClock>(CoarseClock::now(), timeout);
}

// CoarseClock::now() as an absl::Time, for code that measures absl::Durations. Not the wall
// time (the epoch is the boot): only differences mean something.
inline absl::Time CoarseNowAsTime() {
  return absl::UnixEpoch() + absl::FromChrono(CoarseClock::now().time_since_epoch());
}

}  // namespace farm

#endif  // FARM_PLATFORM_CLOCK_H_
