#include "platform/sync_point.h"

namespace farm {

SyncPoint* SyncPoint::GetInstance() {
  static SyncPoint* const instance = new SyncPoint();
  return instance;
}

void SyncPoint::LoadDependency(const std::vector<Dependency>& dependencies) {
  std::lock_guard<std::mutex> l(mu_);
  predecessors_.clear();
  is_predecessor_.clear();
  passed_.clear();
  for (const Dependency& d : dependencies) {
    predecessors_[d.successor].push_back(d.predecessor);
    is_predecessor_.insert(d.predecessor);
  }
  cv_.notify_all();
}

void SyncPoint::SetCallBack(const std::string& point, Callback callback) {
  std::lock_guard<std::mutex> l(mu_);
  callbacks_[point] = std::move(callback);
}

void SyncPoint::ClearCallBack(const std::string& point) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return running_callbacks_ == 0; });
  callbacks_.erase(point);
}

void SyncPoint::ClearAllCallBacks() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [this] { return running_callbacks_ == 0; });
  callbacks_.clear();
}

void SyncPoint::ClearTrace() {
  std::lock_guard<std::mutex> l(mu_);
  passed_.clear();
}

void SyncPoint::EnableProcessing() { enabled_.store(true, std::memory_order_relaxed); }

void SyncPoint::DisableProcessing() {
  std::lock_guard<std::mutex> l(mu_);
  enabled_.store(false, std::memory_order_relaxed);
  cv_.notify_all();  // waiting successors give up
}

int SyncPoint::WaitingThreads() {
  std::lock_guard<std::mutex> l(mu_);
  return waiting_threads_;
}

void SyncPoint::Reset() {
  DisableProcessing();
  ClearAllCallBacks();
  LoadDependency({});
}

bool SyncPoint::PredecessorsPassed(const std::string& point) const {
  auto it = predecessors_.find(point);
  if (it == predecessors_.end()) return true;
  for (const std::string& p : it->second) {
    if (passed_.count(p) == 0) return false;
  }
  return true;
}

void SyncPoint::ProcessSlow(const char* name, void* arg) {
  const std::string point(name);
  std::unique_lock<std::mutex> l(mu_);
  // Relaxed loads of enabled_ under mu_: DisableProcessing stores it under mu_ too.
  auto may_go = [&] {
    return !enabled_.load(std::memory_order_relaxed) || PredecessorsPassed(point);
  };
  if (!may_go()) {
    ++waiting_threads_;
    cv_.wait(l, may_go);
    --waiting_threads_;
  }
  if (!enabled_.load(std::memory_order_relaxed)) return;
  auto cb = callbacks_.find(point);
  if (cb != callbacks_.end()) {
    Callback callback = cb->second;  // a copy: the callback may replace or clear itself
    ++running_callbacks_;
    l.unlock();
    callback(arg);
    l.lock();
    --running_callbacks_;
  }
  if (is_predecessor_.count(point) != 0) passed_.insert(point);
  cv_.notify_all();
}

}  // namespace farm
