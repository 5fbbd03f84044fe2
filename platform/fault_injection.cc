#include "platform/fault_injection.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace farm {

using fault_injection_internal::ScopedBypass;

std::function<bool(const WriteInfo&)> WritesInto(const Fabric* fabric, PeerId peer,
                                                 RemoteBuffer remote, uint64_t size,
                                                 size_t min_length, size_t max_length) {
  return [=](const WriteInfo& w) {
    return w.fabric == fabric && w.peer == peer && w.remote.key == remote.key &&
           w.remote.addr < remote.addr + size && remote.addr < w.remote.addr + w.length &&
           w.length >= min_length && w.length <= max_length;
  };
}

FaultInjection::FaultInjection() {
  poster_ = std::thread([this] { RunPoster(); });
  fault_injection_internal::SetWriteInterceptor(this);
}

FaultInjection::~FaultInjection() {
  fault_injection_internal::SetWriteInterceptor(nullptr);  // waits for interceptions in progress
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  poster_.join();
  std::lock_guard<std::mutex> l(mu_);
  if (!held_.empty()) {
    spdlog::info("fault injection: {} held WRITE(s) discarded, never posted", held_.size());
  }
  held_.clear();
  spent_.clear();  // deregisters the copies (their fabrics must still be open)
}

int FaultInjection::Add(WriteFaultRule rule) {
  std::lock_guard<std::mutex> l(mu_);
  rules_.push_back(Rule{std::move(rule)});
  return static_cast<int>(rules_.size()) - 1;
}

int FaultInjection::fired(int id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int>(rules_.size()) ? rules_[id].fired : 0;
}

int FaultInjection::held() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(held_.size());
}

std::optional<WriteFaultRule> FaultInjection::Decide(const WriteInfo& w) {
  std::lock_guard<std::mutex> l(mu_);
  for (Rule& r : rules_) {
    if (r.spec.count >= 0 && r.fired >= r.spec.count) continue;  // spent
    if (!r.spec.match || !r.spec.match(w)) continue;
    if (r.seen++ < r.spec.skip) return std::nullopt;  // let through, as the rule asks
    ++r.fired;
    return r.spec;
  }
  return std::nullopt;
}

std::optional<absl::Status> FaultInjection::Intercept(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                                      const RemoteBuffer& remote,
                                                      const LocalBuffer& local) {
  std::optional<WriteFaultRule> rule = Decide(WriteInfo{fabric, peer, remote, local.size});
  if (!rule) return std::nullopt;
  if (rule->fault == WriteFault::kDrop) return absl::OkStatus();
  if (rule->fault == WriteFault::kDuplicate && !rule->delay) {
    ScopedBypass bypass;
    absl::Status first = batch->Write(peer, remote, local);
    absl::Status second = batch->Write(peer, remote, local);
    return first.ok() ? second : first;
  }
  absl::StatusOr<std::unique_ptr<Copy>> copy = MakeCopy(fabric, peer, remote, local);
  if (!copy.ok()) {
    spdlog::error("fault injection: WRITE of {} bytes passed untouched: {}", local.size,
                  std::string(copy.status().message()));
    return std::nullopt;
  }
  Copy& c = **copy;
  switch (rule->fault) {
    case WriteFault::kCorrupt: {
      c.bytes[std::min(rule->corrupt_offset, c.length - 1)] ^=
          static_cast<char>(rule->corrupt_mask);
      absl::Status s;
      {
        ScopedBypass bypass;
        s = batch->Write(peer, remote, LocalBuffer{c.mr.get(), c.bytes.get(), c.length});
      }
      std::lock_guard<std::mutex> l(mu_);
      spent_.push_back(std::move(*copy));  // registered until the WRITE is long done
      return s;
    }
    case WriteFault::kDelay:
    case WriteFault::kDuplicate: {
      const absl::Duration delay = rule->delay.value_or(absl::InfiniteDuration());
      c.post_at = delay == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + delay;
      Hold(std::move(*copy));
      // kDelay: the sender's completion now, the bytes later; kDuplicate: the original as usual.
      if (rule->fault == WriteFault::kDelay) return absl::OkStatus();
      return std::nullopt;
    }
    case WriteFault::kDrop:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FaultInjection::Copy>> FaultInjection::MakeCopy(
    Fabric* fabric, PeerId peer, const RemoteBuffer& remote, const LocalBuffer& local) {
  auto c = std::make_unique<Copy>();
  c->fabric = fabric;
  c->peer = peer;
  c->remote = remote;
  c->length = local.size;
  c->bytes = std::make_unique<char[]>(local.size);
  std::memcpy(c->bytes.get(), local.data, local.size);
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
      fabric->Register(c->bytes.get(), c->length);
  if (!mr.ok()) return mr.status();
  c->mr = std::move(*mr);
  return c;
}

void FaultInjection::Hold(std::unique_ptr<Copy> copy) {
  {
    std::lock_guard<std::mutex> l(mu_);
    held_.push_back(std::move(copy));
  }
  changed_.notify_all();
}

void FaultInjection::Post(const Copy& c) {
  ScopedBypass bypass;
  OpBatch batch(c.fabric);
  absl::Status s = batch.Write(c.peer, c.remote, LocalBuffer{c.mr.get(), c.bytes.get(), c.length});
  if (s.ok()) s = batch.Wait(absl::Seconds(10));
  if (!s.ok()) {
    spdlog::warn("fault injection: a held WRITE of {} bytes failed when posted: {}", c.length,
                 std::string(s.message()));
  }
}

int FaultInjection::Release() {
  std::vector<std::unique_ptr<Copy>> due;
  {
    std::lock_guard<std::mutex> l(mu_);
    due.swap(held_);
  }
  for (const auto& c : due) Post(*c);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& c : due) spent_.push_back(std::move(c));
  return static_cast<int>(due.size());
}

void FaultInjection::RunPoster() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    std::vector<std::unique_ptr<Copy>> due;
    for (auto it = held_.begin(); it != held_.end();) {
      if ((*it)->post_at <= now) {
        due.push_back(std::move(*it));
        it = held_.erase(it);
      } else {
        next = std::min(next, (*it)->post_at);
        ++it;
      }
    }
    if (!due.empty()) {
      l.unlock();
      for (const auto& c : due) Post(*c);
      l.lock();
      for (auto& c : due) spent_.push_back(std::move(c));
      continue;
    }
    if (next == absl::InfiniteFuture()) {
      changed_.wait(l);
    } else {
      changed_.wait_for(l, absl::ToChronoNanoseconds(next - now));
    }
  }
}

}  // namespace farm
