#include "platform/idle_yield.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

namespace farm {

TEST_CASE("work resets the rounds; idle rounds yield, at most kMaxRounds apart", "[idle_yield]") {
  IdleYield idle;
  CHECK(idle.yield_after() == IdleYield::kMaxRounds);
  for (int i = 0; i < 10 * IdleYield::kMaxRounds; ++i) {
    idle.Idle();
    if (i % 7 == 0) idle.Worked();
  }
  CHECK(idle.yield_after() >= 1);
  CHECK(idle.yield_after() <= IdleYield::kMaxRounds);
}

TEST_CASE("a yield that ran another thread makes the next come after one idle round",
          "[idle_yield]") {
  // This thread and a spinning one share CPU 0: every yield hands the core to the spinner, which
  // keeps it until the scheduler takes it back (far longer than kLateNanos).
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  cpu_set_t before;
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(before), &before) == 0);
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0);
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread spinner([&] {
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    started = true;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  while (!started) sched_yield();
  IdleYield idle;
  bool contended = false;
  for (int i = 0; i < 100 * IdleYield::kMaxRounds && !contended; ++i) {
    idle.Idle();
    contended = idle.yield_after() == 1;
  }
  stop = true;
  spinner.join();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  CHECK(contended);
}

TEST_CASE("a wait yields after kRounds idle rounds or kSpanNanos of them, whichever is first",
          "[idle_yield]") {
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(FastClock::now().time_since_epoch())
        .count();
  };
  // Cheap rounds: a yield at kRounds at the latest, and before it only once kSpanNanos passed
  // (lower bounds, which no load can break).
  WaitYield fast;
  for (int i = 0; i < 5; ++i) {
    const int64_t start = now();
    const uint64_t yields = fast.yields();
    uint32_t rounds = 0;
    while (fast.yields() == yields) {
      const uint64_t before = fast.yields();
      const bool yielded = fast.Idle();  // true exactly when it gave the core away
      CHECK(yielded == (fast.yields() != before));
      ++rounds;
    }
    CHECK(rounds <= WaitYield::kRounds);
    CHECK((rounds == WaitYield::kRounds || now() - start >= WaitYield::kSpanNanos));
    fast.Worked();
  }
  // Rounds of at least 1 us each (a poll(2) on tcp;ofi_rxm): the clock is read in round 8 and
  // again in round 16, at least 8 us later, past kSpanNanos: the yield comes in round 16.
  static_assert(WaitYield::kSpanNanos <= 8000, "the slow rounds below assume it");
  WaitYield slow;
  uint32_t rounds = 0;
  while (slow.yields() == 0) {
    const int64_t until = now() + 1000;
    while (now() < until) {
    }
    slow.Idle();
    ++rounds;
  }
  CHECK(rounds == 16);
  // Work before the yield is due starts the count afresh.
  WaitYield never;
  for (int i = 0; i < 1000; ++i) {
    for (int k = 0; k < 7; ++k) never.Idle();  // no clock read, never kRounds
    never.Worked();
  }
  CHECK(never.yields() == 0);
}

}  // namespace farm
