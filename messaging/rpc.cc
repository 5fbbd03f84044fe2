#include "messaging/rpc.h"

#include <sched.h>

#include <algorithm>
#include <vector>

#include "platform/idle_yield.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

// How long a caller that stopped spinning sleeps at most before driving the scan again (in case
// no poller thread is running); a response delivered by the poller wakes it at once.
constexpr absl::Duration kNap = absl::Milliseconds(1);

}  // namespace

Rpc::Rpc(Messenger* messenger, RpcOptions options)
    : messenger_(messenger), options_(options), sweeper_(std::make_shared<Sweeper>()) {
  messenger_->SetCloseListener(
      [this](uint32_t node, const absl::Status& why) { OnClosed(node, why); });
  {
    std::lock_guard<std::mutex> l(sweeper_->mu);
    sweeper_->rpc = this;
  }
  // The poller keeps its tasks until the node stops: the task outlives this Rpc and finds it gone.
  messenger_->node()->poller()->AddTask([sweeper = sweeper_]() -> int {
    std::unique_lock<std::mutex> l(sweeper->mu, std::try_to_lock);
    if (!l.owns_lock() || sweeper->rpc == nullptr) return 0;
    return sweeper->rpc->SweepExpired();
  });
  if (options_.serve_at_once) Serve();
}

void Rpc::Serve() {
  if (serving_.exchange(true, std::memory_order_acq_rel)) return;
  messenger_->SetReceiver(
      [this](const Message& m, Messenger::Lane* reply) { OnMessage(m, reply); });
}

Rpc::~Rpc() {
  {
    std::lock_guard<std::mutex> l(sweeper_->mu);  // waits for a sweep in progress
    sweeper_->rpc = nullptr;
  }
  messenger_->SetReceiver(nullptr);  // waits for a scan in progress
  messenger_->SetCloseListener(nullptr);
  for (auto& p : pending_.TakeIf([](const Pending&) { return true; }))
    Complete(*p, absl::CancelledError("the RPC layer is shutting down"));
}

void Rpc::RegisterHandler(uint16_t method, RpcHandler handler) {
  RegisterInPlaceHandler(
      method,
      [handler = std::move(handler)](const RpcRequest& r, RpcResponder& out) -> absl::Status {
        absl::StatusOr<std::string> result = handler(r);
        if (!result.ok()) return result.status();
        absl::StatusOr<char*> body = out.Allocate(result->size());
        if (!body.ok()) return body.status();
        if (!result->empty()) std::memcpy(*body, result->data(), result->size());
        return absl::OkStatus();
      });
}

void Rpc::RegisterInPlaceHandler(uint16_t method, RpcInPlaceHandler handler) {
  farm::MutexLock l(&handlers_mu_);
  std::atomic<HandlerPage*>& slot = handler_pages_[method >> 8];
  HandlerPage* page = slot.load(std::memory_order_relaxed);
  if (page == nullptr) {
    handler_page_store_.push_back(std::make_unique<HandlerPage>());
    page = handler_page_store_.back().get();
    // Release: pairs with the acquire load in FindHandler (the page's zeroed entries).
    slot.store(page, std::memory_order_release);
  }
  handler_store_.push_back(std::make_unique<const RpcInPlaceHandler>(std::move(handler)));
  // Release: pairs with the acquire load in FindHandler (the handler's contents).
  page->handler[method & 0xff].store(handler_store_.back().get(), std::memory_order_release);
}

const RpcInPlaceHandler* Rpc::FindHandler(uint16_t method) const {
  const HandlerPage* page = handler_pages_[method >> 8].load(std::memory_order_acquire);
  if (page == nullptr) return nullptr;
  return page->handler[method & 0xff].load(std::memory_order_acquire);
}

void Rpc::RegisterShipped(uint16_t method, RpcShippedHandler handler) {
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

namespace {
// A shipped call's payload: the packed address, then the request.
std::string ShippedPayload(GlobalAddress addr, absl::string_view request) {
  const uint64_t packed = addr.Pack();
  std::string payload(reinterpret_cast<const char*>(&packed), sizeof(packed));
  payload.append(request.data(), request.size());
  return payload;
}
}  // namespace

absl::StatusOr<std::string> Rpc::Ship(GlobalAddress addr, uint16_t method,
                                      absl::string_view request, absl::Duration timeout) {
  absl::StatusOr<RemoteTarget> t = messenger_->node()->Resolve(addr, 1);
  if (!t.ok()) return t.status();
  return Call(t->node_id, method, ShippedPayload(addr, request), timeout);
}

absl::StatusOr<std::string> Rpc::Ship(Messenger::Lane& lane, GlobalAddress addr, uint16_t method,
                                      absl::string_view request, absl::Duration timeout) {
  absl::StatusOr<RemoteTarget> t = messenger_->node()->Resolve(addr, 1);
  if (!t.ok()) return t.status();
  return Call(lane, t->node_id, method, ShippedPayload(addr, request), timeout);
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

absl::StatusOr<std::shared_ptr<Rpc::Pending>> Rpc::NewCall(uint32_t node, uint16_t method,
                                                           absl::Duration timeout, Envelope* e) {
  if (absl::Status s = messenger_->ReceiveStatus(node); !s.ok()) return s;
  auto p = std::make_shared<Pending>();
  p->id_ = next_id_.fetch_add(1, std::memory_order_relaxed);
  p->node_ = node;
  p->method_ = method;
  p->timeout_ = timeout;
  p->deadline_ = CoarseDeadline(timeout);
  pending_.Insert(p->id_, p);
  uint32_t epoch = EpochWord(messenger_->membership_epoch());
  // Tests stamp an older epoch here (platform/sync_point.h; compiled out in NDEBUG).
  FARM_SYNC_POINT_CALLBACK("Rpc::Start:Epoch", &epoch);
  *e = Envelope{p->id_, method, 0, epoch};
  return p;
}

absl::Status Rpc::StartFailed(const Pending& p, const absl::Status& s) {
  Take(p.id_);
  return absl::Status(s.code(), absl::StrCat("request for method ", p.method_, " to node ", p.node_,
                                             ": ", s.message()));
}

absl::StatusOr<std::shared_ptr<Rpc::Pending>> Rpc::Start(Messenger::Lane& lane, uint32_t node,
                                                         uint16_t method, absl::string_view request,
                                                         absl::Duration timeout) {
  Envelope e;
  absl::StatusOr<std::shared_ptr<Pending>> p = NewCall(node, method, timeout, &e);
  if (!p.ok()) return p;
  absl::Status s = lane.Send(node, kRequestType, {Bytes(e), request}, timeout);
  if (!s.ok()) return StartFailed(**p, s);
  return p;
}

absl::StatusOr<std::shared_ptr<Rpc::Pending>> Rpc::StartInPlace(
    Messenger::Lane& lane, uint32_t node, uint16_t method, size_t size,
    absl::FunctionRef<void(char*)> write, absl::Duration timeout) {
  Envelope e;
  absl::StatusOr<std::shared_ptr<Pending>> p = NewCall(node, method, timeout, &e);
  if (!p.ok()) return p;
  absl::StatusOr<char*> at = lane.Reserve(node, kRequestType, sizeof(e) + size);
  if (at.ok()) {
    std::memcpy(*at, &e, sizeof(e));
    write(*at + sizeof(e));
    return p;
  }
  absl::Status s = at.status();
  if (absl::IsResourceExhausted(s)) {
    // No room now: aside, then as Start does (which waits for room, or keeps it in order).
    std::string request(size, '\0');
    write(request.data());
    s = lane.Send(node, kRequestType, {Bytes(e), request}, timeout);
  }
  if (!s.ok()) return StartFailed(**p, s);
  return p;
}

absl::StatusOr<std::string> Rpc::Await(Messenger::Lane& lane, Pending& p) {
  if (lane.has_unflushed()) {
    if (absl::Status s = lane.Flush(); !s.ok()) {
      if (Take(p.id_) != nullptr) return s;
    }
  }
  // The clock is read only every 32nd round (a round, one Poll, takes well under a
  // microsecond, so deadlines are still met within tens of microseconds); a response that comes
  // back within the first rounds costs no clock read at all.
  FastClock::time_point last_work{};  // set at the first clock read
  bool worked = true;
  const auto spin = options_.spin >= absl::Hours(24 * 365 * 100)
                        ? FastClock::duration::max()
                        : std::chrono::duration_cast<FastClock::duration>(
                              absl::ToChronoNanoseconds(options_.spin));
  WaitYield yield;
  for (uint32_t spins = 1; !p.done_.load(std::memory_order_acquire); ++spins) {
    // Drive progress and the scan ourselves: the response may be waiting for exactly that.
    if (messenger_->Poll() > 0) {
      worked = true;
      yield.Worked();
    } else {
      yield.Idle();  // see OpBatch::Wait: let the thread we wait for run on a busy machine
    }
    if (spins % 32 != 0) continue;
    const FastClock::time_point now = FastClock::now();
    if (worked) {
      last_work = now;
      worked = false;
    }
    const CoarseClock::time_point coarse_now = CoarseClock::now();
    if (coarse_now >= p.deadline_) {
      if (Take(p.id_) != nullptr) return DeadlineError(p);
      continue;  // completed just now (or swept: then its result is DeadlineError too)
    }
    if (now - last_work < spin) continue;
    // Seq_cst: see Pending (Complete either sees sleeping_ or we see done_).
    p.sleeping_.store(true, std::memory_order_seq_cst);
    farm::MutexLock l(&p.mu_);
    auto done = [&p] { return p.done_.load(std::memory_order_seq_cst); };
    p.mu_.AwaitWithTimeout(done, std::min(kNap, absl::FromChrono(p.deadline_ - coarse_now)));
  }
  // done_ was seen (acquire): result_ is final and nobody writes it any more.
  return std::move(p.result_);
}

absl::Status Rpc::DeadlineError(const Pending& p) {
  return absl::DeadlineExceededError(absl::StrCat("node ", p.node_, " did not answer method ",
                                                  p.method_, " within ",
                                                  absl::FormatDuration(p.timeout_)));
}

int Rpc::SweepExpired() {
  const CoarseClock::time_point now = CoarseClock::now();
  if (now < next_sweep_) return 0;
  next_sweep_ = now + std::chrono::duration_cast<CoarseClock::duration>(
                          absl::ToChronoNanoseconds(kSweepInterval));
  // The overflow map once per pass, with the slots from 0.
  std::vector<std::shared_ptr<Pending>> expired =
      pending_.TakeIfIn(sweep_cursor_, kSweepSlots, /*overflow=*/sweep_cursor_ == 0,
                        [now](const Pending& p) { return p.deadline_ <= now; });
  sweep_cursor_ = (sweep_cursor_ + kSweepSlots) % CallTable<Pending>::kSlots;
  for (auto& p : expired) Complete(*p, DeadlineError(*p));
  return static_cast<int>(expired.size());
}

void Rpc::Complete(Pending& p, absl::StatusOr<std::string> result) {
  // Called once per call (by whoever took it from pending_), while the caller may be reading
  // done_ but not result_.
  p.result_ = std::move(result);
  // Seq_cst (includes release, pairing with the acquire loads in Await, which then read
  // result_): ordered before the load of sleeping_ below (see Pending).
  p.done_.store(true, std::memory_order_seq_cst);
  if (p.sleeping_.load(std::memory_order_seq_cst)) {
    farm::MutexLock l(&p.mu_);  // the unlock makes a sleeping Await re-check done_
  }
}

void Rpc::OnMessage(const Message& m, Messenger::Lane* reply) {
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
    if (reply == nullptr) {
      // A request on a scanning lane, where only responses travel: its handler would run on
      // whichever thread polls, which the threading rule (rpc.h) forbids.
      spdlog::warn("rpc: node {} drops request {} of node {}: it came on a reply lane",
                   messenger_->node()->id(), e.id, m.from);
      return;
    }
    OnRequest(m.from, e, body, *reply);
  } else {
    OnResponse(m.from, e, body);
  }
}

void Rpc::OnRequest(uint32_t from, const Envelope& e, absl::string_view body,
                    Messenger::Lane& reply) {
  const RpcInPlaceHandler* handler = FindHandler(e.method);
  RpcResponder out(reply, from, e.id, e.method,
                   MaxPayload(messenger_->options().ring_size) - sizeof(Envelope));
  Node* node = messenger_->node();
  // A node whose lease ended serves nothing: the CM may have removed it already, and a request
  // that waited in a ring (this process was paused) may be stale. A request sent before a
  // configuration change that this node has applied (a peer left or restarted) is refused too:
  // its sender acted on a configuration that no longer holds (see rpc.h).
  const uint64_t fence = messenger_->fence_epoch();
  const absl::Status result =
      !node->lease_held() ? absl::UnavailableError(absl::StrCat(
                                "node ", node->id(), "'s lease expired: it serves no requests"))
      : e.epoch < EpochWord(fence)
          ? absl::AbortedError(absl::StrCat(
                "refused unexecuted: it was sent in membership epoch ", e.epoch, ", before epoch ",
                fence, " (in which a node left or restarted, or backups were added); retry"))
      : handler != nullptr
          ? (*handler)(RpcRequest{from, e.method, body}, out)
          : absl::UnimplementedError(absl::StrCat("no handler for method ", e.method));
  absl::Status s = out.Finish(result);
  if (!s.ok()) {
    spdlog::warn("rpc: node {} cannot answer request {} of node {}: {}", messenger_->node()->id(),
                 e.id, from, std::string(s.message()));
  }
}

void Rpc::OnResponse(uint32_t from, const Envelope& e, absl::string_view body) {
  if (e.id == 0) return;  // voided by its handler (RpcResponder::Finish); the real one follows
  // Only the node the call went to may answer it: a response with the id of another node's call
  // (a confused or stale peer) must not complete it, and the real response must still find it.
  std::shared_ptr<Pending> p =
      pending_.Take(e.id, [from](const Pending& c) { return c.node_ == from; });
  if (p == nullptr) {
    spdlog::debug(
        "rpc: node {} ignores response {} from node {}: no call with that id is waiting for that "
        "node (its caller gave up, or the id belongs to a call to another node)",
        messenger_->node()->id(), e.id, from);
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
  for (auto& p : pending_.TakeIf([node](const Pending& p) { return p.node_ == node; })) {
    // DataLoss: a ring between us was found corrupt, in either direction; otherwise the node
    // left or restarted. `why` says which and names the node.
    Complete(*p, absl::Status(why.code(), absl::StrCat("call of method ", p->method_,
                                                       " failed: ", why.message())));
  }
}

// ---------------------------------------------------------------------------------------------
// RpcResponder

absl::StatusOr<char*> RpcResponder::Allocate(size_t size) {
  if (allocated_) {
    return absl::FailedPreconditionError("RpcResponder::Allocate called twice for one request");
  }
  if (size > limit_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", size, "-byte response exceeds the ", limit_, "-byte message limit"));
  }
  absl::StatusOr<char*> slot =
      reply_.Reserve(to_, Rpc::kResponseType, sizeof(Rpc::Envelope) + size);
  if (slot.ok()) {
    allocated_ = true;
    in_ring_ = *slot;
    const Rpc::Envelope e{id_, method_, 0, 0};
    std::memcpy(in_ring_, &e, sizeof(e));
    return in_ring_ + sizeof(e);
  }
  if (!absl::IsResourceExhausted(slot.status())) return slot.status();
  // No space in the ring right now: build it aside; Finish sends it through the backlog.
  allocated_ = true;
  buffer_.assign(size, '\0');
  return buffer_.data();
}

absl::Status RpcResponder::Finish(const absl::Status& result) {
  if (result.ok()) {
    if (in_ring_ != nullptr) return absl::OkStatus();  // written in place
    const Rpc::Envelope e{id_, method_, 0, 0};
    return reply_.Send(to_, Rpc::kResponseType, {Rpc::Bytes(e), buffer_});
  }
  if (in_ring_ != nullptr) {
    // The frame is queued already: void it (the caller ignores id 0) and send the error after.
    const Rpc::Envelope voided{0, method_, 0, 0};
    std::memcpy(in_ring_, &voided, sizeof(voided));
  }
  const Rpc::Envelope e{id_, method_, static_cast<uint16_t>(result.code()), 0};
  return reply_.Send(to_, Rpc::kResponseType, {Rpc::Bytes(e), result.message().substr(0, limit_)});
}

}  // namespace farm
