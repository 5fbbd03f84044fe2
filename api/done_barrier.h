// DoneBarrier: the end of an application run (farm::RunNode with App::wait_for_peers). Every node
// tells every member that its `run` returned, and leaves only once every current member has told
// it the same (or left), so that no node goes away while others may still call it.
//
// Thread safety: Arrive is called by one thread; the handler it registers runs on RPC threads.
#ifndef FARM_API_DONE_BARRIER_H_
#define FARM_API_DONE_BARRIER_H_

#include <cstdint>
#include <functional>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "api/runtime_impl.h"
#include "platform/mutex.h"

namespace farm {

class DoneBarrier {
 public:
  // What the sync point "DoneBarrier::Notice" passes to a test's callback, which may refuse the
  // notice (as a reconfiguration's fence refuses requests sent in the membership before it).
  struct Notice {
    uint32_t from = 0;
    uint32_t to = 0;
    bool refuse = false;
  };
  // How often a notice that failed is sent again.
  static constexpr absl::Duration kRetry = absl::Milliseconds(200);

  // Registers the runtime's kAppDoneMethod handler (before the node serves requests).
  explicit DoneBarrier(Runtime::Impl& rt);

  // Tells every member; then waits until all are done or gone (or this node was evicted), calling
  // `wait` between its checks: `wait` blocks a little (e.g. for 20 ms, or until an event) and
  // returns false to give up (a signal, a closed control input). Returns false if `wait` did.
  // A notice that failed goes again, every kRetry, while its peer stays a member (e.g. one
  // refused because it was sent in the membership before a reconfiguration): that peer waits for
  // it.
  bool Arrive(const std::function<bool()>& wait);

 private:
  Runtime::Impl& rt_;
  Mutex mu_;
  std::set<uint32_t> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace farm

#endif  // FARM_API_DONE_BARRIER_H_
