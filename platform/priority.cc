#include "platform/priority.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstring>

#include "spdlog/spdlog.h"

namespace farm {
namespace {

std::atomic<bool> raised{false};
std::atomic<bool> refusal_logged{false};

bool IsRealTime() {
  int policy = 0;
  sched_param p{};
  return pthread_getschedparam(pthread_self(), &policy, &p) == 0 && policy == SCHED_RR;
}

}  // namespace

bool RaiseToLeasePriority() {
  sched_param p{};
  p.sched_priority = 1;
  const int err = pthread_setschedparam(pthread_self(), SCHED_RR, &p);
  if (err == 0) {
    raised = true;
    return true;
  }
  if (!refusal_logged.exchange(true)) {
    spdlog::info(
        "lease threads run at normal priority (real-time priority refused: {}); on a loaded "
        "machine a longer lease avoids false evictions",
        std::strerror(err));
  }
  return false;
}

bool LeasePriorityRaised() { return raised.load(); }

NormalPriority::NormalPriority() {
  if (!IsRealTime()) return;
  sched_param p{};
  p.sched_priority = 0;
  restore_ = pthread_setschedparam(pthread_self(), SCHED_OTHER, &p) == 0;
}

NormalPriority::~NormalPriority() {
  if (!restore_) return;
  sched_param p{};
  p.sched_priority = 1;
  (void)pthread_setschedparam(pthread_self(), SCHED_RR, &p);
}

}  // namespace farm
