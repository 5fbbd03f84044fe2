#include "platform/poller.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/idle_yield.h"

namespace farm {

absl::StatusOr<PollMode> ParsePollMode(absl::string_view s) {
  if (s == "busy") return PollMode::kBusy;
  if (s == "adaptive") return PollMode::kAdaptive;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown poll mode '", s, "'; use busy or adaptive"));
}

std::string PollModeName(PollMode mode) { return mode == PollMode::kBusy ? "busy" : "adaptive"; }

Poller::Poller(Fabric* fabric, PollerOptions options)
    : fabric_(fabric), options_(options), thread_([this] { Run(); }) {}

Poller::~Poller() { Stop(); }

void Poller::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    // A poller asleep on the doorbell would see stop_ only when its sleep ends; ring until it
    // left (a ring just before it lies down is consumed by its look for work).
    while (!exited_.load(std::memory_order_acquire)) {
      fabric_->Wake();
      absl::SleepFor(absl::Microseconds(100));
    }
    thread_.join();
  }
}

void Poller::AddTask(Task task) {
  farm::MutexLock l(&mu_);
  tasks_.push_back(std::move(task));
  has_tasks_.store(true, std::memory_order_release);
}

int Poller::RunTasks() {
  if (!has_tasks_.load(std::memory_order_acquire)) return 0;
  farm::MutexLock l(&mu_);
  int work = 0;
  for (Task& t : tasks_) work += t();
  return work;
}

void Poller::Run() {
  absl::Time last_activity = absl::Now();
  absl::Duration sleep = absl::Microseconds(1);
  IdleYield idle;
  while (!stop_.load(std::memory_order_relaxed)) {
    iterations_.fetch_add(1, std::memory_order_relaxed);
    int work = fabric_->Progress() + RunTasks();
    if (options_.mode == PollMode::kBusy) {
      // Give the core away now and then while idle (platform/idle_yield.h): with more spinning
      // threads than cores (a few nodes and their clients on one machine), a poller that never
      // yields keeps the thread it is waiting for off the CPU for whole time slices.
      if (work > 0) {
        idle.Worked();
      } else {
        idle.Idle();
      }
      continue;
    }
    const absl::Time now = absl::Now();
    if (work > 0) {
      last_activity = now;
      sleep = absl::Microseconds(1);
      idle.Worked();
      continue;
    }
    if (now - last_activity < options_.spin) {
      idle.Idle();
      continue;
    }
    if (fabric_->can_wait()) {
      // Block on the completion queue's wait object: a peer's READ or WRITE wakes us at once,
      // and we spin again for a while in case more follow.
      if (fabric_->WaitForProgress(options_.max_sleep) > 0) last_activity = absl::Now();
      continue;
    }
    absl::SleepFor(sleep);
    sleep = std::min(sleep * 2, options_.max_sleep);
  }
  exited_.store(true, std::memory_order_release);
}

}  // namespace farm
