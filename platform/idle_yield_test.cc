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

TEST_CASE("a wait yields after kSpanNanos of idle rounds, however many rounds that is",
          "[idle_yield]") {
  // Measured from the clock the class reads: no yield before kSpanNanos of idleness (a lower
  // bound, which no load can break), one after it, and work starts the span afresh.
  auto now = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  WaitYield y;
  for (int i = 0; i < 3; ++i) {
    const int64_t start = now();
    const uint64_t yields = y.yields();
    uint64_t rounds = 0;
    while (y.yields() == yields) {
      y.Idle();
      ++rounds;
    }
    CHECK(now() - start >= WaitYield::kSpanNanos);
    CHECK(rounds >= 16);  // the first clock read starts the span, the next may end it
    y.Worked();
  }
  // Work in every 8th round (the rounds that read the clock) never lets the span run out.
  WaitYield busy;
  const int64_t start = now();
  while (now() - start < 20 * WaitYield::kSpanNanos) {
    for (int i = 0; i < 7; ++i) busy.Idle();
    busy.Worked();
  }
  CHECK(busy.yields() == 0);
}

}  // namespace farm
