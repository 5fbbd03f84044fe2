#include "txn/engine.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "messaging/ring.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"

namespace farm {
namespace txn {

absl::StatusOr<GlobalAddress> Engine::CreateObjectArray(uint64_t size, uint64_t count) {
  absl::StatusOr<GlobalAddress> first = allocator_->ReserveArray(size, count);
  if (!first.ok()) return first.status();
  uint64_t slot = 0;
  absl::StatusOr<char*> base = allocator_->SlotOf(*first, &slot);
  if (!base.ok()) return base.status();
  const std::string zeros(size, '\0');
  for (uint64_t i = 0; i < count; ++i) {
    char* object = *base + i * slot;
    uint64_t seen = 0;
    // Fresh memory: lock word 0 (version 0, free); nobody else knows these slots yet.
    if (!TryLock(object, 0, &seen)) {
      return absl::InternalError("a freshly carved slot is not empty");
    }
    InstallObject(object, 1, zeros.data(), size);
  }
  return *first;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(Node* node, Rpc* rpc) {
  std::unique_ptr<Engine> e(new Engine(node, rpc));
  std::vector<LocalRegion> regions;
  const std::vector<control::RegionInfo> infos = node->RegionsOf(node->id());
  for (size_t i = 0; i < infos.size(); ++i) {
    if (static_cast<int>(infos[i].index()) >= node->local_region_count()) continue;
    regions.push_back(LocalRegion{infos[i].region_id(), node->local_region_data(static_cast<int>(infos[i].index())),
                                  infos[i].size()});
  }
  e->allocator_ = std::make_unique<Allocator>(std::move(regions));
  e->participant_ = std::make_unique<Participant>(
      e->allocator_.get(), [node](uint32_t n) { return node->IsMember(n); });
  // RPC's envelope is 16 bytes of the ring message.
  e->max_message_ = MaxPayload(rpc->messenger()->options().ring_size) - 16;
  if (e->max_message_ <= kLockOverhead + 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("rings of ", rpc->messenger()->options().ring_size,
                     " bytes are too small for transactions (use at least 16 KiB)"));
  }
  e->max_object_size_ =
      std::min(e->allocator_->max_object_size(), e->max_message_ - kLockOverhead);
  // Sequence numbers start at the wall clock in microseconds, shifted so that a coordinator
  // would need a million transactions per microsecond to catch up with its successor's start.
  e->next_seq_.store(static_cast<uint64_t>(absl::ToUnixMicros(absl::Now())) << 20);

  Participant* p = e->participant_.get();
  rpc->RegisterHandler(kLockMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<LockRequest> req = DecodeLock(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Lock(r.from, *req, r.payload);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kCommitMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<DecisionRequest> req = DecodeDecision(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Commit(r.from, *req);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kAbortMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<DecisionRequest> req = DecodeDecision(r.payload);
    if (!req.ok()) return req.status();
    absl::Status s = p->Abort(r.from, *req);
    if (!s.ok()) return s;
    return std::string();
  });
  rpc->RegisterHandler(kReserveMethod, [p](const RpcRequest& r) -> absl::StatusOr<std::string> {
    absl::StatusOr<ReserveRequest> req = DecodeReserve(r.payload);
    if (!req.ok()) return req.status();
    absl::StatusOr<GlobalAddress> a = p->Reserve(r.from, *req);
    if (!a.ok()) return a.status();
    const uint64_t packed = a->Pack();
    return std::string(reinterpret_cast<const char*>(&packed), sizeof(packed));
  });
  Engine* raw = e.get();
  e->listener_ =
      node->AddMembershipListener([raw](const control::Membership& m) { raw->OnMembership(m); });
  return e;
}

Engine::~Engine() {
  if (listener_ >= 0) node_->RemoveMembershipListener(listener_);
}

void Engine::OnMembership(const control::Membership& m) {
  for (const auto& [id, why] : m.departed()) {
    if (id == node_->id()) continue;
    spdlog::debug("txn: node {} left ({}): aborting its transactions locked here", id, why);
    participant_->CoordinatorLeft(id);
  }
}

TxnId Engine::NextId() {
  return TxnId{node_->id(), next_seq_.fetch_add(1, std::memory_order_relaxed)};
}

std::vector<uint64_t> Engine::TakeTruncations(uint32_t owner, size_t max) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = truncations_.find(owner);
  if (it == truncations_.end()) return {};
  std::vector<uint64_t>& all = it->second;
  const size_t n = std::min(max, all.size());
  std::vector<uint64_t> out(all.begin(), all.begin() + n);
  all.erase(all.begin(), all.begin() + n);
  if (all.empty()) truncations_.erase(it);
  return out;
}

void Engine::AddTruncation(uint32_t owner, uint64_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  truncations_[owner].push_back(seq);
}

}  // namespace txn
}  // namespace farm
