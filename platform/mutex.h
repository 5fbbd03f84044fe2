// Mutex: the project's lock, built on the C++ standard library so that ThreadSanitizer sees it.
//
// Debian's abseil is a prebuilt, uninstrumented shared library: ThreadSanitizer cannot see the
// synchronisation inside absl::Mutex, so every access guarded by one is reported as a race (the
// TSan lane of .ci/run found 16 such reports). std::shared_mutex and std::condition_variable_any
// go through pthreads, which TSan intercepts. farm::Mutex keeps the part of absl::Mutex's
// interface the project uses (exclusive and shared locking, TryLock, Await with a timeout, RAII
// guards) and its thread-safety annotations, so clang's -Wthread-safety keeps checking
// ABSL_GUARDED_BY fields.
//
//   farm::Mutex mu;
//   std::vector<int> free ABSL_GUARDED_BY(mu);
//   {
//     farm::MutexLock l(&mu);
//     if (!mu.AwaitWithTimeout([&] { return !free.empty(); }, absl::Seconds(1))) return Busy();
//     Use(free.back());
//   }
//
// Await semantics as absl's: the condition is evaluated with the lock held, and again whenever
// another thread releases an exclusive lock on this mutex, so a condition must depend only on
// state written under the lock (or the writer must take and release the lock after writing it).
//
// Thread safety: all methods are safe for concurrent use, with the usual locking rules.
#ifndef FARM_PLATFORM_MUTEX_H_
#define FARM_PLATFORM_MUTEX_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace farm {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    // Notify before unlocking: once mu_ is free, a waiter may return from Await and destroy this
    // Mutex (a Notification that goes out of scope), so nothing here may touch it afterwards
    // (ThreadSanitizer caught notify_all on a destroyed condition variable). A woken waiter
    // blocks on mu_ until the unlock below. Relaxed is enough: waiters_ changes only under mu_.
    if (waiters_.load(std::memory_order_relaxed) > 0) cv_.notify_all();
    mu_.unlock();
  }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

  // With the lock held exclusively: waits until cond() is true or `timeout` passed (the lock is
  // released while waiting and held again on return). Returns cond()'s last value.
  template <typename Cond>
  bool AwaitWithTimeout(Cond cond, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    const auto deadline =
        timeout >= absl::Hours(24 * 365)
            ? std::chrono::steady_clock::time_point::max()
            : std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())));
    RawLock raw{&mu_};
    while (!cond()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      waiters_.fetch_add(1, std::memory_order_relaxed);
      if (deadline == std::chrono::steady_clock::time_point::max()) {
        cv_.wait(raw);
      } else {
        cv_.wait_until(raw, deadline);
      }
      waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    return true;
  }
  template <typename Cond>
  void Await(Cond cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AwaitWithTimeout(cond, absl::InfiniteDuration());
  }

 private:
  // What the condition variable unlocks and relocks while waiting: the mutex itself, without
  // Unlock's notification (nothing changed).
  struct RawLock {
    std::shared_mutex* mu;
    void lock() { mu->lock(); }
    void unlock() { mu->unlock(); }
  };

  std::shared_mutex mu_;
  std::condition_variable_any cv_;
  std::atomic<int> waiters_{0};
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }

 private:
  Mutex* const mu_;
};

// A one-shot event: Notify once, any number of threads wait for it.
class Notification {
 public:
  void Notify() {
    MutexLock l(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() {
    MutexLock l(&mu_);
    return notified_;
  }
  void WaitForNotification() {
    MutexLock l(&mu_);
    mu_.Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; });
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    MutexLock l(&mu_);
    return mu_.AwaitWithTimeout([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return notified_; },
                                timeout);
  }

 private:
  Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace farm

#endif  // FARM_PLATFORM_MUTEX_H_
