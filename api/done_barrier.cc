#include "api/done_barrier.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"

namespace farm {

DoneBarrier::DoneBarrier(Runtime::Impl& rt) : rt_(rt) {
  rt_.rpc->RegisterHandler(kAppDoneMethod,
                           [this](const RpcRequest& r) -> absl::StatusOr<std::string> {
                             // Tests refuse a notice here, as a reconfiguration's fence would.
                             Notice n{r.from, rt_.node->id(), false};
                             FARM_SYNC_POINT_CALLBACK("DoneBarrier::Notice", &n);
                             if (n.refuse) return absl::UnavailableError("refused by the test");
                             MutexLock l(&mu_);
                             done_.insert(r.from);
                             return std::string();
                           });
}

bool DoneBarrier::Arrive(const std::function<bool()>& wait) {
  const uint32_t self = rt_.node->id();
  std::set<uint32_t> told;  // members that acknowledged this node's notice
  auto tell = [&](absl::Duration timeout) {
    for (uint32_t peer : rt_.node->members()) {
      if (told.count(peer) > 0) continue;
      absl::StatusOr<std::string> r = rt_.rpc->Call(peer, kAppDoneMethod, "", timeout);
      if (r.ok()) {
        told.insert(peer);
      } else {
        spdlog::debug("node {}: done notice to node {}: {}", self, peer, r.status().ToString());
      }
    }
  };
  tell(absl::Seconds(5));
  absl::Time retry_at = absl::Now() + kRetry;
  for (bool logged = false;;) {
    std::vector<uint32_t> waiting;
    {
      MutexLock l(&mu_);
      for (uint32_t m : rt_.node->members()) {
        if (done_.count(m) == 0) waiting.push_back(m);
      }
    }
    if (!rt_.node->evicted().ok()) {
      // This node's application has finished; nodes leave one by one once all have, and the
      // configuration manager's node leaving evicts the rest (a notice may still be on its way
      // to us then). Nothing is left for this node to do either way.
      spdlog::info("node {}: left the cluster after its application finished: {}", self,
                   std::string(rt_.node->evicted().message()));
      return true;
    }
    if (waiting.empty()) return true;
    if (!logged) {
      spdlog::info("node {}: application finished; waiting for node(s) {} to finish theirs", self,
                   absl::StrJoin(waiting, ", "));
      logged = true;
    }
    if (!wait()) return false;
    if (absl::Now() >= retry_at) {
      if (!FARM_MUTANT("done_notice_once")) tell(absl::Seconds(1));
      retry_at = absl::Now() + kRetry;
    }
  }
}

}  // namespace farm
