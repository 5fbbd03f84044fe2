// The seam through which every one-sided WRITE passes on its way to the provider, for the
// fault injection of tests (platform/fault_injection.h). Only platform/fabric.cc calls
// InterceptWrite, and only FaultInjection installs an interceptor; nobody else uses this file.
//
//   // In OpBatch::Add, before posting a WRITE:
//   if (std::optional<absl::Status> s = fault_injection_internal::InterceptWrite(...)) return *s;
//
// In NDEBUG (release) builds InterceptWrite is an inline nullopt: the seam costs nothing and no
// fault can be injected. Otherwise it costs one relaxed atomic load while nothing is installed.
//
// Thread safety: InterceptWrite is safe for concurrent use; SetWriteInterceptor too, and it
// waits for interceptions in progress before it returns.
#ifndef FARM_PLATFORM_FAULT_INJECTION_HOOK_H_
#define FARM_PLATFORM_FAULT_INJECTION_HOOK_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace farm {

class Fabric;
class OpBatch;
struct RemoteBuffer;
struct LocalBuffer;

namespace fault_injection_internal {

// Decides what happens to one WRITE. nullopt: post it as usual. A status: the interceptor dealt
// with the WRITE (posted it its own way, or not at all) and this is what OpBatch::Write returns.
class WriteInterceptor {
 public:
  virtual ~WriteInterceptor() = default;
  virtual std::optional<absl::Status> Intercept(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                                const RemoteBuffer& remote,
                                                const LocalBuffer& local) = 0;
};

// Installs `interceptor` (nullptr: none). Returns after every interception by the previous one
// has finished, so the caller may destroy it then.
void SetWriteInterceptor(WriteInterceptor* interceptor);

// While one exists on a thread, that thread's WRITEs are not intercepted: the interceptor posts
// the WRITEs it decided on (a duplicate, a corrupted copy) through OpBatch like anyone else.
class ScopedBypass {
 public:
  ScopedBypass();
  ~ScopedBypass();
  ScopedBypass(const ScopedBypass&) = delete;
  ScopedBypass& operator=(const ScopedBypass&) = delete;

 private:
  bool was_;
};

#ifdef NDEBUG
inline std::optional<absl::Status> InterceptWrite(Fabric*, OpBatch*, uint64_t, const RemoteBuffer&,
                                                  const LocalBuffer&) {
  return std::nullopt;
}
#else
extern std::atomic<bool> g_installed;
std::optional<absl::Status> InterceptWriteSlow(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                               const RemoteBuffer& remote,
                                               const LocalBuffer& local);
inline std::optional<absl::Status> InterceptWrite(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                                  const RemoteBuffer& remote,
                                                  const LocalBuffer& local) {
  // Relaxed: only a hint; InterceptWriteSlow reads the interceptor under its lock.
  if (!g_installed.load(std::memory_order_relaxed)) return std::nullopt;
  return InterceptWriteSlow(fabric, batch, peer, remote, local);
}
#endif

}  // namespace fault_injection_internal
}  // namespace farm

#endif  // FARM_PLATFORM_FAULT_INJECTION_HOOK_H_
