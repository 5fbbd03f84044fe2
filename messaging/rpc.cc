#include "messaging/rpc.h"

#include <algorithm>
#include <vector>

#include "spdlog/spdlog.h"

namespace farm {
namespace {

// How long a caller that stopped spinning sleeps at most before driving the scan again (in case
// no poller thread is running); a response delivered by the poller wakes it at once.
constexpr absl::Duration kNap = absl::Milliseconds(1);

}  // namespace

Rpc::Rpc(Messenger* messenger, RpcOptions options) : messenger_(messenger), options_(options) {
  messenger_->SetCloseListener(
      [this](uint32_t node, const absl::Status& why) { OnClosed(node, why); });
  messenger_->SetReceiver(
      [this](const Message& m, Messenger::Lane& reply) { OnMessage(m, reply); });
}

Rpc::~Rpc() {
  messenger_->SetReceiver(nullptr);  // waits for a scan in progress
  messenger_->SetCloseListener(nullptr);
  std::vector<std::shared_ptr<Pending>> left;
  {
    absl::MutexLock l(&pending_mu_);
    for (auto& [id, p] : pending_) left.push_back(p);
    pending_.clear();
  }
  for (auto& p : left) Complete(*p, absl::CancelledError("the RPC layer is shutting down"));
}

void Rpc::RegisterHandler(uint16_t method, RpcHandler handler) {
  absl::MutexLock l(&handlers_mu_);
  handlers_[method] = std::make_shared<const RpcHandler>(std::move(handler));
}

void Rpc::RegisterShipped(uint16_t method, ShippedHandler handler) {
  Node* node = messenger_->node();
  RegisterHandler(
      method,
      [node, handler = std::move(handler)](const RpcRequest& r) -> absl::StatusOr<std::string> {
        uint64_t packed;
        if (r.payload.size() < sizeof(packed)) {
          return absl::InvalidArgumentError("shipped call without an address");
        }
        std::memcpy(&packed, r.payload.data(), sizeof(packed));
        const GlobalAddress addr = GlobalAddress::Unpack(packed);
        absl::StatusOr<RemoteTarget> t = node->Resolve(addr, 1);
        if (!t.ok()) return t.status();
        if (t->local == nullptr) {
          return absl::FailedPreconditionError(absl::StrCat("address ", addr.ToString(),
                                                            " belongs to node ", t->node_id,
                                                            ", not node ", node->id()));
        }
        uint64_t available = 0;
        for (const control::RegionInfo& ri : node->RegionsOf(node->id())) {
          if (ri.region_id() == addr.region) available = ri.size() - addr.offset;
        }
        return handler(addr, t->local, available, r.payload.substr(sizeof(packed)));
      });
}

absl::StatusOr<std::string> Rpc::Ship(GlobalAddress addr, uint16_t method,
                                      absl::string_view request, absl::Duration timeout) {
  absl::StatusOr<RemoteTarget> t = messenger_->node()->Resolve(addr, 1);
  if (!t.ok()) return t.status();
  const uint64_t packed = addr.Pack();
  std::string payload(reinterpret_cast<const char*>(&packed), sizeof(packed));
  payload.append(request.data(), request.size());
  return Call(t->node_id, method, payload, timeout);
}

absl::StatusOr<std::string> Rpc::Call(uint32_t node, uint16_t method, absl::string_view request,
                                      absl::Duration timeout) {
  absl::StatusOr<Messenger::LaneLease> lane = messenger_->AcquireLane(timeout);
  if (!lane.ok()) return lane.status();
  return Call(**lane, node, method, request, timeout);
}

absl::StatusOr<std::string> Rpc::Call(Messenger::Lane& lane, uint32_t node, uint16_t method,
                                      absl::string_view request, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<Pending>> p = Start(lane, node, method, request, timeout);
  if (!p.ok()) return p.status();
  return Await(lane, **p);
}

absl::StatusOr<std::shared_ptr<Rpc::Pending>> Rpc::Start(Messenger::Lane& lane, uint32_t node,
                                                         uint16_t method, absl::string_view request,
                                                         absl::Duration timeout) {
  if (absl::Status s = messenger_->ReceiveStatus(node); !s.ok()) return s;
  auto p = std::make_shared<Pending>();
  p->id_ = next_id_.fetch_add(1, std::memory_order_relaxed);
  p->node_ = node;
  p->method_ = method;
  p->timeout_ = timeout;
  p->deadline_ = absl::Now() + timeout;
  {
    absl::MutexLock l(&pending_mu_);
    pending_[p->id_] = p;
  }
  const Envelope e{p->id_, method, 0, 0};
  absl::Status s = lane.Send(node, kRequestType, {Bytes(e), request}, timeout);
  if (!s.ok()) {
    Take(p->id_);
    return absl::Status(s.code(), absl::StrCat("request for method ", method, " to node ", node,
                                               ": ", s.message()));
  }
  return p;
}

absl::StatusOr<std::string> Rpc::Await(Messenger::Lane& lane, Pending& p) {
  if (lane.has_unflushed()) {
    if (absl::Status s = lane.Flush(); !s.ok()) {
      if (Take(p.id_) != nullptr) return s;
    }
  }
  absl::Time last_work = absl::Now();
  while (!p.done_.load(std::memory_order_acquire)) {
    const absl::Time now = absl::Now();
    if (now >= p.deadline_) {
      if (Take(p.id_) != nullptr) {
        return absl::DeadlineExceededError(absl::StrCat("node ", p.node_, " did not answer method ",
                                                        p.method_, " within ",
                                                        absl::FormatDuration(p.timeout_)));
      }
      continue;  // completed just now
    }
    // Drive progress and the scan ourselves: the response may be waiting for exactly that.
    if (messenger_->Poll() > 0) {
      last_work = now;
      continue;
    }
    if (now - last_work < options_.spin) continue;
    absl::MutexLock l(&p.mu_);
    auto done = [&p] { return p.done_.load(std::memory_order_acquire); };
    p.mu_.AwaitWithDeadline(absl::Condition(&done), std::min(now + kNap, p.deadline_));
  }
  absl::MutexLock l(&p.mu_);
  return std::move(p.result_);
}

std::shared_ptr<Rpc::Pending> Rpc::Take(uint64_t id) {
  absl::MutexLock l(&pending_mu_);
  auto it = pending_.find(id);
  if (it == pending_.end()) return nullptr;
  std::shared_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  return p;
}

void Rpc::Complete(Pending& p, absl::StatusOr<std::string> result) {
  absl::MutexLock l(&p.mu_);
  p.result_ = std::move(result);
  // Release: pairs with the acquire loads in Await, which then read result_.
  p.done_.store(true, std::memory_order_release);
}

void Rpc::OnMessage(const Message& m, Messenger::Lane& reply) {
  const bool request = m.type == kRequestType;
  if (!request && m.type != kResponseType) {
    spdlog::warn("rpc: node {} ignores a message of unknown type {} from node {}",
                 messenger_->node()->id(), m.type, m.from);
    return;
  }
  Envelope e;
  absl::string_view body;
  if (m.payload.size() < sizeof(Envelope)) {
    spdlog::warn("rpc: node {} drops a {}-byte {} from node {}: shorter than its envelope",
                 messenger_->node()->id(), m.payload.size(), request ? "request" : "response",
                 m.from);
    return;
  }
  std::memcpy(&e, m.payload.data(), sizeof(Envelope));
  body = m.payload.substr(sizeof(Envelope));
  if (request) {
    OnRequest(m.from, e, body, reply);
  } else {
    OnResponse(m.from, e, body);
  }
}

void Rpc::OnRequest(uint32_t from, const Envelope& e, absl::string_view body,
                    Messenger::Lane& reply) {
  std::shared_ptr<const RpcHandler> handler;
  {
    absl::MutexLock l(&handlers_mu_);
    auto it = handlers_.find(e.method);
    if (it != handlers_.end()) handler = it->second;
  }
  absl::StatusOr<std::string> result =
      handler != nullptr
          ? (*handler)(RpcRequest{from, e.method, body})
          : absl::UnimplementedError(absl::StrCat("no handler for method ", e.method));
  const uint64_t limit = MaxPayload(messenger_->options().ring_size) - sizeof(Envelope);
  if (result.ok() && result->size() > limit) {
    result = absl::ResourceExhaustedError(absl::StrCat(
        "the ", result->size(), "-byte response exceeds the ", limit, "-byte message limit"));
  }
  const Envelope out{e.id, e.method, static_cast<uint16_t>(result.status().code()), 0};
  const absl::string_view out_body =
      result.ok() ? absl::string_view(*result) : result.status().message();
  absl::Status s = reply.Send(from, kResponseType, {Bytes(out), out_body});
  if (!s.ok()) {
    spdlog::warn("rpc: node {} cannot answer request {} of node {}: {}", messenger_->node()->id(),
                 e.id, from, std::string(s.message()));
  }
}

void Rpc::OnResponse(uint32_t from, const Envelope& e, absl::string_view body) {
  std::shared_ptr<Pending> p = Take(e.id);
  if (p == nullptr) {
    spdlog::debug("rpc: late response {} from node {} (its caller gave up)", e.id, from);
    return;
  }
  if (e.code == 0) {
    Complete(*p, std::string(body));
  } else {
    Complete(*p, absl::Status(static_cast<absl::StatusCode>(e.code),
                              absl::StrCat("node ", from, ", method ", e.method, ": ", body)));
  }
}

void Rpc::OnClosed(uint32_t node, const absl::Status& why) {
  std::vector<std::shared_ptr<Pending>> failed;
  {
    absl::MutexLock l(&pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second->node_ == node) {
        failed.push_back(std::move(it->second));
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& p : failed) {
    if (absl::IsDataLoss(why)) {
      Complete(*p, absl::DataLossError(absl::StrCat("responses from node ", node,
                                                    " can no longer be read: ", why.message())));
    } else {
      // The node left or restarted; `why` names it.
      Complete(*p, absl::Status(why.code(), absl::StrCat("call of method ", p->method_,
                                                         " failed: ", why.message())));
    }
  }
}

}  // namespace farm
