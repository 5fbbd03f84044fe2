#include "platform/idle_yield.h"

#include <pthread.h>
#include <sched.h>

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

}  // namespace farm
