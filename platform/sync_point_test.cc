// SyncPoint: dependencies order threads, callbacks see the point's argument, and nothing happens
// while processing is disabled.
#include "platform/sync_point.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace farm {
namespace {

// Records the order in which threads got somewhere.
class Trace {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back(what);
  }
  std::vector<std::string> events() {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> events_;
};

}  // namespace

#ifndef NDEBUG
TEST_CASE("a successor waits until its predecessor was passed", "[sync_point]") {
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->LoadDependency({{"Test::A:Done", "Test::B:Start"}, {"Test::B:Done", "Test::C:Start"}});
  sp->EnableProcessing();
  Trace trace;
  // Started in the reverse of the order the dependencies impose: C, then B, then A.
  std::thread c([&] {
    FARM_SYNC_POINT("Test::C:Start");
    trace.Add("C");
  });
  std::thread b([&] {
    FARM_SYNC_POINT("Test::B:Start");
    trace.Add("B");
    FARM_SYNC_POINT("Test::B:Done");
  });
  std::thread a([&] {
    trace.Add("A");
    FARM_SYNC_POINT("Test::A:Done");
  });
  a.join();
  b.join();
  c.join();
  CHECK(trace.events() == std::vector<std::string>{"A", "B", "C"});
  sp->Reset();
}

TEST_CASE("a callback runs at its point with the point's argument", "[sync_point]") {
  SyncPoint* sp = SyncPoint::GetInstance();
  int seen = 0;
  void* arg = nullptr;
  sp->SetCallBack("Test::Point:Here", [&](void* a) {
    ++seen;
    arg = a;
  });
  int value = 5;
  FARM_SYNC_POINT_CALLBACK("Test::Point:Here", &value);  // not enabled yet: nothing happens
  CHECK(seen == 0);
  sp->EnableProcessing();
  FARM_SYNC_POINT_CALLBACK("Test::Point:Here", &value);
  CHECK(seen == 1);
  CHECK(arg == &value);
  FARM_SYNC_POINT("Test::Point:Elsewhere");  // no callback there
  CHECK(seen == 1);
  sp->ClearCallBack("Test::Point:Here");
  FARM_SYNC_POINT_CALLBACK("Test::Point:Here", &value);
  CHECK(seen == 1);
  sp->Reset();
}

TEST_CASE("disabling processing releases a thread waiting for a predecessor", "[sync_point]") {
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->LoadDependency({{"Test::Never:Passed", "Test::Waiter:Start"}});
  sp->EnableProcessing();
  std::atomic<bool> passed{false};
  std::thread t([&] {
    FARM_SYNC_POINT("Test::Waiter:Start");  // blocks until processing is disabled
    passed = true;
  });
  while (sp->WaitingThreads() == 0) std::this_thread::yield();  // it is blocked there
  CHECK(!passed);
  sp->Reset();
  t.join();  // returns: the waiter was released
  CHECK(passed);
  CHECK(sp->WaitingThreads() == 0);
}

TEST_CASE("the trace and the dependencies can be reloaded", "[sync_point]") {
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->LoadDependency({{"Test::X:Done", "Test::Y:Start"}});
  sp->EnableProcessing();
  FARM_SYNC_POINT("Test::X:Done");
  FARM_SYNC_POINT("Test::Y:Start");  // X was passed: does not block
  sp->ClearTrace();
  sp->LoadDependency({});
  FARM_SYNC_POINT("Test::Y:Start");  // no dependency any more
  sp->Reset();
  SUCCEED();
}
#else
TEST_CASE("sync points compile to nothing in a release build", "[sync_point]") {
  SyncPoint* sp = SyncPoint::GetInstance();
  int seen = 0;
  sp->SetCallBack("Test::Point:Here", [&](void*) { ++seen; });
  sp->EnableProcessing();
  FARM_SYNC_POINT_CALLBACK("Test::Point:Here", nullptr);
  CHECK(seen == 0);
  sp->Reset();
}
#endif

}  // namespace farm
