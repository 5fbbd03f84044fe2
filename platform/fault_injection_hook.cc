#include "platform/fault_injection_hook.h"

#include <mutex>
#include <shared_mutex>

namespace farm {
namespace fault_injection_internal {
namespace {

// Held shared while an interception runs, exclusively while the interceptor changes.
std::shared_mutex& InterceptorMutex() {
  static auto* mu = new std::shared_mutex();
  return *mu;
}
WriteInterceptor* g_interceptor = nullptr;  // guarded by InterceptorMutex()
thread_local bool t_bypass = false;

}  // namespace

std::atomic<bool> g_installed{false};

void SetWriteInterceptor(WriteInterceptor* interceptor) {
  std::unique_lock<std::shared_mutex> l(InterceptorMutex());
  g_interceptor = interceptor;
  g_installed.store(interceptor != nullptr, std::memory_order_relaxed);
}

ScopedBypass::ScopedBypass() : was_(t_bypass) { t_bypass = true; }
ScopedBypass::~ScopedBypass() { t_bypass = was_; }

#ifndef NDEBUG
std::optional<absl::Status> InterceptWriteSlow(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                               const RemoteBuffer& remote,
                                               const LocalBuffer& local) {
  if (t_bypass) return std::nullopt;
  std::shared_lock<std::shared_mutex> l(InterceptorMutex());
  if (g_interceptor == nullptr) return std::nullopt;
  return g_interceptor->Intercept(fabric, batch, peer, remote, local);
}
#endif

}  // namespace fault_injection_internal
}  // namespace farm
