#include "platform/mutex.h"

#include <atomic>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace farm {
namespace {

TEST_CASE("MutexLock excludes other threads") {
  Mutex mu;
  int64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock l(&mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(counter == 80000);
}

TEST_CASE("Await wakes up when another thread changes the state under the lock") {
  Mutex mu;
  int value = 0;
  std::thread setter([&] {
    for (int i = 1; i <= 5; ++i) {
      MutexLock l(&mu);
      value = i;
    }
  });
  {
    MutexLock l(&mu);
    REQUIRE(mu.AwaitWithTimeout([&] { return value == 5; }, absl::Seconds(30)));
  }
  setter.join();
}

TEST_CASE("AwaitWithTimeout returns false when the condition stays false") {
  Mutex mu;
  MutexLock l(&mu);
  REQUIRE_FALSE(mu.AwaitWithTimeout([] { return false; }, absl::Milliseconds(20)));
  REQUIRE(mu.AwaitWithTimeout([] { return true; }, absl::ZeroDuration()));
}

TEST_CASE("readers share the lock; a writer waits for them") {
  Mutex mu;
  std::atomic<bool> written{false};
  std::thread writer;
  {
    ReaderMutexLock r1(&mu);
    ReaderMutexLock r2(&mu);  // would deadlock if shared locks excluded each other
    writer = std::thread([&] {
      MutexLock l(&mu);
      written = true;
    });
    // Whatever the scheduling, the writer cannot get in while the reader locks are held.
    REQUIRE_FALSE(written.load());
  }
  writer.join();
  REQUIRE(written.load());
}

TEST_CASE("Notification releases every waiter") {
  Notification n;
  std::atomic<int> released{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      n.WaitForNotification();
      released.fetch_add(1);
    });
  }
  REQUIRE_FALSE(n.WaitForNotificationWithTimeout(absl::Milliseconds(10)));
  n.Notify();
  for (auto& t : waiters) t.join();
  REQUIRE(released.load() == 3);
  REQUIRE(n.HasBeenNotified());
}

}  // namespace
}  // namespace farm
