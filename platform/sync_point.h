// Sync points: named places in the code where a test can force an interleaving of threads or run
// a callback, after RocksDB's TEST_SYNC_POINT. A test of a race loads "B waits until A was
// passed" dependencies, or runs code at a point (e.g. completes the bytes of a frame between two
// loads of a reader), so the interleaving it wants happens every time instead of once in a
// thousand runs.
//
//   // In the code under test:
//   FARM_SYNC_POINT("Txn::Commit:AfterLock");
//   FARM_SYNC_POINT_CALLBACK("RingReader::Peek:BeforeHash", ring_ + pos);
//
//   // In the test:
//   SyncPoint* sp = SyncPoint::GetInstance();
//   sp->LoadDependency({{"Test:Crashed", "Txn::Commit:AfterLock"}});  // commit waits for the test
//   sp->SetCallBack("RingReader::Peek:BeforeHash", [&](void* arg) { Complete(arg); });
//   sp->EnableProcessing();
//   ...
//   sp->Reset();  // disables processing and forgets dependencies, callbacks and passed points
//
// Names are "Class::Method:Where". A point does nothing unless processing is enabled (one relaxed
// atomic load), and in a release build (NDEBUG defined: `bazel build --config=release`, or
// `-c opt`) the macros compile to nothing at all: no call, and their arguments are not evaluated.
//
// Thread safety: SyncPoint's methods are safe for concurrent use. Callbacks run on the thread
// that passes the point, without SyncPoint's lock held (a callback may itself pass sync points or
// wait for other threads).
#ifndef FARM_PLATFORM_SYNC_POINT_H_
#define FARM_PLATFORM_SYNC_POINT_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace farm {

class SyncPoint {
 public:
  // "successor waits until predecessor was passed".
  struct Dependency {
    std::string predecessor;
    std::string successor;
  };
  using Callback = std::function<void(void* arg)>;

  // The process-wide instance (never destroyed).
  static SyncPoint* GetInstance();

  SyncPoint() = default;
  SyncPoint(const SyncPoint&) = delete;
  SyncPoint& operator=(const SyncPoint&) = delete;

  // Replaces the dependencies and forgets which points were passed. A thread reaching a
  // successor blocks until every one of its predecessors has been passed (by any thread) since
  // this call, or until processing is disabled.
  void LoadDependency(const std::vector<Dependency>& dependencies);
  // Runs `callback` with the point's argument (nullptr for FARM_SYNC_POINT) each time `point` is
  // passed, after its dependencies are met. Replaces an earlier callback of the same point.
  void SetCallBack(const std::string& point, Callback callback);
  // Removes callbacks; returns once no callback is running any more.
  void ClearCallBack(const std::string& point);
  void ClearAllCallBacks();
  // Forgets which points were passed.
  void ClearTrace();

  // Points do nothing until processing is enabled. Disabling releases every waiting thread.
  void EnableProcessing();
  void DisableProcessing();
  // Threads blocked at a point right now, waiting for its predecessors (for tests that must know
  // a thread got there before they go on).
  int WaitingThreads();

  // Disables processing, then clears dependencies, callbacks (waiting for running ones) and the
  // trace: what a test does at its end.
  void Reset();

  // Called by the macros. Cheap while processing is disabled.
  void Process(const char* point, void* arg = nullptr) {
    // Relaxed: a thread that passes a point just as a test enables processing may miss it either
    // way; tests enable processing before they start the threads they steer.
    if (!enabled_.load(std::memory_order_relaxed)) return;
    ProcessSlow(point, arg);
  }

 private:
  void ProcessSlow(const char* point, void* arg);
  bool PredecessorsPassed(const std::string& point) const;  // mu_ held

  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // a point was passed, a callback ended, or processing stopped
  std::unordered_map<std::string, std::vector<std::string>> predecessors_;  // by successor
  std::unordered_set<std::string> is_predecessor_;
  std::unordered_map<std::string, Callback> callbacks_;
  std::unordered_set<std::string> passed_;  // predecessors passed (others are not recorded)
  int running_callbacks_ = 0;
  int waiting_threads_ = 0;
};

}  // namespace farm

#ifdef NDEBUG
#define FARM_SYNC_POINT(name)
#define FARM_SYNC_POINT_CALLBACK(name, arg)
#else
#define FARM_SYNC_POINT(name) ::farm::SyncPoint::GetInstance()->Process(name)
#define FARM_SYNC_POINT_CALLBACK(name, arg) ::farm::SyncPoint::GetInstance()->Process(name, arg)
#endif

#endif  // FARM_PLATFORM_SYNC_POINT_H_
