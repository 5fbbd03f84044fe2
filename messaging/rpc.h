// Rpc: requests and responses over the Messenger's rings.
//
// A request goes out on the caller's lane to the target node; the target's poller thread runs
// the handler registered for the request's method and sends the response back on its scanning
// lane (the reverse ring). Every request carries a 64-bit id that the response repeats; a caller
// waits for its id until the deadline. Requests queued together on one lane (Start ... Start,
// then Await or Flush) go out in one WRITE per destination.
//
//   Rpc rpc(messenger.get());
//   rpc.RegisterHandler(kEcho, [](const RpcRequest& r) -> absl::StatusOr<std::string> {
//     return std::string(r.payload);
//   });
//   absl::StatusOr<std::string> reply = rpc.Call(/*node=*/2, kEcho, "ping", absl::Seconds(1));
//
//   // Several calls, one WRITE per destination:
//   ASSIGN_OR_RETURN(Messenger::LaneLease lane, messenger->AcquireLane());
//   std::vector<std::shared_ptr<Rpc::Pending>> calls;
//   for (uint32_t n : {1, 2}) calls.push_back(*rpc.Start(*lane, n, kEcho, "x", absl::Seconds(1)));
//   for (auto& c : calls) RETURN_IF_ERROR(rpc.Await(*lane, *c).status());
//
// Function shipping: Ship() runs a handler registered with RegisterShipped() on the node that
// owns a GlobalAddress, with a pointer to the addressed bytes in its own memory.
//
// In-place responses: a handler registered with RegisterInPlaceHandler writes its response
// straight into the reply ring (RpcResponder::Allocate), without building a string first:
//
//   rpc.RegisterInPlaceHandler(kEcho, [](const RpcRequest& r, RpcResponder& out) -> absl::Status {
//     absl::StatusOr<char*> p = out.Allocate(r.payload.size());
//     if (!p.ok()) return p.status();
//     std::memcpy(*p, r.payload.data(), r.payload.size());
//     return absl::OkStatus();
//   });
//
// In-place requests: StartInPlace has the caller write its request straight into the lane's
// staging buffer (the transaction layer encodes its LOCKs there), falling back to a copy sent as
// Start sends it when the ring has no room now.
//
// Errors seen by callers: DeadlineExceeded (no response in time), DataLoss (a ring between us and
// that node was found corrupt, in either direction: the messages on it are lost), Unimplemented (no
// handler for the method there), ResourceExhausted (back-pressure: the request could not be queued
// in time), Unavailable (the WRITE failed, or the target's lease with the configuration manager
// ended), Aborted (fenced: see below), or the handler's own error, prefixed with the node and
// method.
//
// Configuration fencing (FaRM's configuration ids): every request carries the membership epoch
// its sender had applied when it was started. A node refuses, without running the handler, a
// request sent in an epoch below the latest one in which it saw a peer leave or restart, or that
// added backups to regions holding data (Messenger::fence_epoch): its sender acted on a
// configuration that no longer holds. The caller
// gets Aborted ("... refused unexecuted ..."); nothing ran, so it may simply retry, and by then
// it has normally applied the new membership. Epochs are carried in 32 bits, saturating.
//
// Calls nobody awaits: a call that was started and never awaited (its caller dropped the
// Pending, or keeps it and never asks) leaves the call table once its deadline has passed, so
// memory and TakeIf scans do not grow with abandoned calls. A task on the node's poller sweeps a
// bounded share of the table every few milliseconds (kSweepSlots slots every kSweepInterval, a
// whole pass in about 40 ms) and completes the expired calls with DeadlineExceeded, as Await
// would have. A sweep rather than a handle whose destruction removes its call: it also covers
// callers that keep the handle without awaiting it, adds nothing to a call's critical path, and
// leaves Start's return type alone. pending_calls() tells tests how many calls are in the table.
//
// Which calls may run on which thread:
//  - Handlers (of every kind: RegisterHandler, RegisterInPlaceHandler, RegisterShipped) run on
//    the target node's poller thread, one at a time, and never on an application thread: a
//    thread waiting in Await or Call does not run the handlers of requests that reach its node
//    meanwhile. So a handler may take the application's own locks (briefly): a thread holding
//    one while it awaits a call still completes, because
//  - responses are delivered by whichever thread polls, the awaiting caller included: a caller
//    completes its own call even while the poller is blocked in a handler.
//  - A handler must not wait for another RPC (no Call from inside a handler): the node's
//    requests, including the one it would wait for if it called its own node, are served by the
//    thread it blocks. While a handler runs, the node serves no other request.
//  - Call, Start, Await, Ship and the Register functions may be called from any application
//    thread (not from a handler, for Call/Await/Ship).
// Thread safety: all methods are safe for concurrent use; a lane is used by one thread at a time
// (see Messenger). The Rpc must be destroyed before its Messenger, and it installs itself as the
// Messenger's receiver (one Rpc per Messenger).
#ifndef FARM_MESSAGING_RPC_H_
#define FARM_MESSAGING_RPC_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "messaging/call_table.h"
#include "messaging/codec.h"
#include "messaging/messenger.h"
#include "platform/clock.h"
#include "platform/global_address.h"
#include "platform/mutex.h"

namespace farm {

struct RpcRequest {
  uint32_t from = 0;
  uint16_t method = 0;
  absl::string_view payload;  // valid during the handler only
};

using RpcHandler = std::function<absl::StatusOr<std::string>(const RpcRequest&)>;

// Where an in-place handler writes its response. Used on the handler thread (the node's poller),
// during the handler only.
class RpcResponder {
 public:
  RpcResponder(const RpcResponder&) = delete;
  RpcResponder& operator=(const RpcResponder&) = delete;

  // Room for a response of exactly `size` bytes, valid until the handler returns: in the reply
  // ring when it has space now, else in a buffer that is sent (in order) once it has. At most
  // one call per request; a handler that returns OK without calling it sends an empty response.
  // If the handler then returns an error, the caller gets that error and not these bytes.
  // Errors: ResourceExhausted when `size` is above the message limit, FailedPrecondition on a
  // second call, Unavailable (and the like) when the caller's node cannot be answered.
  absl::StatusOr<char*> Allocate(size_t size);

 private:
  friend class Rpc;
  RpcResponder(Messenger::Lane& reply, uint32_t to, uint64_t id, uint16_t method, uint64_t limit)
      : reply_(reply), to_(to), id_(id), method_(method), limit_(limit) {}
  // Completes the response after the handler returned `result`.
  absl::Status Finish(const absl::Status& result);

  Messenger::Lane& reply_;
  const uint32_t to_;
  const uint64_t id_;
  const uint16_t method_;
  const uint64_t limit_;  // largest response body
  bool allocated_ = false;
  char* in_ring_ = nullptr;  // the response's envelope in the reply ring, if it went there
  std::string buffer_;       // the body otherwise
};

using RpcInPlaceHandler = std::function<absl::Status(const RpcRequest&, RpcResponder&)>;
// A shipped function: `data` points at the addressed bytes in the owner's memory, `available`
// says how many bytes from there to the end of their region.
using RpcShippedHandler = std::function<absl::StatusOr<std::string>(
    GlobalAddress addr, char* data, uint64_t available, absl::string_view request)>;

struct RpcOptions {
  // How long a waiting caller spins (driving progress and the response scan itself) after the last
  // sign of activity before it sleeps in short steps until the poller delivers its response.
  // InfiniteDuration for benchmarks (always spin), as PollMode::kBusy.
  absl::Duration spin = absl::Microseconds(200);
  // Serve requests from construction on. False: requests wait in their rings until Serve(), so
  // that every handler can be registered before the first request is looked at (otherwise a
  // request that arrives between the constructor and RegisterHandler gets Unimplemented).
  bool serve_at_once = true;
};

class Rpc {
 public:
  // Message types on the Messenger used by RPC.
  static constexpr uint16_t kRequestType = 0x5251;   // "RQ"
  static constexpr uint16_t kResponseType = 0x5250;  // "RP"

  // A call in flight. Obtained from Start, completed by Await.
  class Pending {
   public:
    uint64_t id() const { return id_; }
    uint32_t node() const { return node_; }

   private:
    friend class Rpc;
    uint64_t id_ = 0;
    uint32_t node_ = 0;
    uint16_t method_ = 0;
    // On the coarse clock (platform/clock.h): read on every call's critical path, and a
    // timeout is milliseconds or more (it may end up to one kernel tick late).
    CoarseClock::time_point deadline_;
    absl::Duration timeout_;
    // Completion without a lock on the fast path: Complete writes result_, then sets done_
    // (seq_cst); a waiter reads result_ only after seeing done_ (acquire). mu_ is taken only to
    // wake a waiter that went to sleep: it sets sleeping_ (seq_cst) before waiting on done_, and
    // Complete locks mu_ (which re-evaluates the waiter's condition) when it sees sleeping_.
    // One of the two seq_cst stores is seen by the other side's load, so no wake-up is lost.
    std::atomic<bool> done_{false};
    std::atomic<bool> sleeping_{false};
    farm::Mutex mu_;
    // Written once, by Complete, before done_; no allocation for the placeholder.
    absl::StatusOr<std::string> result_{absl::Status(absl::StatusCode::kUnknown, "")};
  };

  explicit Rpc(Messenger* messenger, RpcOptions options = {});
  Rpc(const Rpc&) = delete;
  Rpc& operator=(const Rpc&) = delete;
  ~Rpc();

  // Registers the handler for `method` (replacing an earlier one). Safe at any time; requests
  // for a method without handler get Unimplemented.
  void RegisterHandler(uint16_t method, RpcHandler handler);
  // The same for a handler that writes its response in place (see RpcResponder).
  void RegisterInPlaceHandler(uint16_t method, RpcInPlaceHandler handler);

  // Starts serving requests (see RpcOptions::serve_at_once). Idempotent.
  void Serve();

  // One call: leases a lane (waiting up to `timeout` for one), sends, flushes, waits.
  absl::StatusOr<std::string> Call(uint32_t node, uint16_t method, absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));
  // One call on a lane the caller holds.
  absl::StatusOr<std::string> Call(Messenger::Lane& lane, uint32_t node, uint16_t method,
                                   absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));

  // Queues a request on `lane` without flushing it. The deadline starts now.
  absl::StatusOr<std::shared_ptr<Pending>> Start(Messenger::Lane& lane, uint32_t node,
                                                 uint16_t method, absl::string_view request,
                                                 absl::Duration timeout = absl::Seconds(10));
  // Start with the request written in place: `write` fills its `size` bytes straight in the
  // lane's registered staging buffer (no request string, no copy into the buffer). When the ring
  // to `node` has no room now (or messages to it wait for room), the request is built aside and
  // queued as Start queues it (waiting for room up to `timeout`). `write` runs once, before this
  // returns.
  absl::StatusOr<std::shared_ptr<Pending>> StartInPlace(Messenger::Lane& lane, uint32_t node,
                                                        uint16_t method, size_t size,
                                                        absl::FunctionRef<void(char*)> write,
                                                        absl::Duration timeout = absl::Seconds(10));
  // Flushes `lane` if it holds queued requests, then waits for `call`'s response.
  absl::StatusOr<std::string> Await(Messenger::Lane& lane, Pending& call);

  // Function shipping: runs the handler registered for `method` with RegisterShipped on the node
  // that owns `addr` (this one included).
  absl::StatusOr<std::string> Ship(GlobalAddress addr, uint16_t method, absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));
  // The same on a lane the caller holds.
  absl::StatusOr<std::string> Ship(Messenger::Lane& lane, GlobalAddress addr, uint16_t method,
                                   absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));
  void RegisterShipped(uint16_t method, RpcShippedHandler handler);

  Messenger* messenger() const { return messenger_; }

  // Calls in the table: started and neither completed nor swept after their deadline. A
  // snapshot that visits every slot of the table: for tests and diagnostics.
  size_t pending_calls() { return pending_.Count(); }

 private:
  // The sweep of expired calls (see the header comment): a poller task, which outlives the Rpc,
  // holds the Sweeper; mu is held while a sweep runs, and the destructor clears rpc under it.
  struct Sweeper {
    std::mutex mu;
    Rpc* rpc = nullptr;  // guarded by mu
  };
  static constexpr size_t kSweepSlots = 512;
  static constexpr absl::Duration kSweepInterval = absl::Milliseconds(5);
  // Completes the expired calls in the next kSweepSlots slots if kSweepInterval has passed since
  // the last sweep. Poller thread, under Sweeper::mu. Returns the calls completed.
  int SweepExpired();
  static absl::Status DeadlineError(const Pending& p);
  friend class RpcResponder;
  void OnMessage(const Message& m, Messenger::Lane* reply);
  // Leads every request and response payload.
  struct Envelope {
    uint64_t id;  // of the call; 0 in a response written in place and then voided
    uint16_t method;
    uint16_t code;   // absl::StatusCode of a response; 0 in requests
    uint32_t epoch;  // requests: the sender's membership epoch (EpochWord); responses: 0
  };
  static uint32_t EpochWord(uint64_t epoch) {
    return epoch > UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(epoch);
  }
  static_assert(sizeof(Envelope) == 16, "envelope layout");
  static absl::string_view Bytes(const Envelope& e) {
    return absl::string_view(reinterpret_cast<const char*>(&e), sizeof(e));
  }
  // A new call to `node`: in the table, with its request's envelope (Start, StartInPlace).
  absl::StatusOr<std::shared_ptr<Pending>> NewCall(uint32_t node, uint16_t method,
                                                   absl::Duration timeout, Envelope* e);
  // A call whose request could not be queued (`s`): out of the table, and the error to return.
  absl::Status StartFailed(const Pending& p, const absl::Status& s);
  void OnRequest(uint32_t from, const Envelope& e, absl::string_view body, Messenger::Lane& reply);
  void OnResponse(uint32_t from, const Envelope& e, absl::string_view body);
  void OnClosed(uint32_t node, const absl::Status& why);
  void Complete(Pending& p, absl::StatusOr<std::string> result);
  std::shared_ptr<Pending> Take(uint64_t id) { return pending_.Take(id); }

  Messenger* const messenger_;
  const RpcOptions options_;
  std::atomic<bool> serving_{false};
  std::atomic<uint64_t> next_id_{1};
  // Handlers by method, read without a lock by the scanning thread: a two-level table of atomic
  // pointers (256 pages of 256 methods, pages created on registration). A replaced handler may
  // still be running, so every registered handler is kept until the Rpc is destroyed.
  const RpcInPlaceHandler* FindHandler(uint16_t method) const;
  struct HandlerPage {
    std::atomic<const RpcInPlaceHandler*> handler[256] = {};
  };
  std::atomic<HandlerPage*> handler_pages_[256] = {};
  farm::Mutex handlers_mu_;  // serialises RegisterHandler
  std::vector<std::unique_ptr<HandlerPage>> handler_page_store_ ABSL_GUARDED_BY(handlers_mu_);
  std::vector<std::unique_ptr<const RpcInPlaceHandler>> handler_store_
      ABSL_GUARDED_BY(handlers_mu_);
  // Calls in flight: inserted by Start, taken once by whoever completes them (the response, the
  // deadline, a failing peer, the destructor).
  CallTable<Pending> pending_;
  std::shared_ptr<Sweeper> sweeper_;
  // Owned by the sweep (poller thread, under Sweeper::mu).
  CoarseClock::time_point next_sweep_{};
  size_t sweep_cursor_ = 0;  // the next slot to visit
};

// A typed method: requests of type Req answered with Resp.
//
//   struct Add { int64_t a, b; };
//   constexpr RpcMethod<Add, int64_t> kAdd{7};
//   kAdd.Serve(rpc, [](uint32_t from, const Add& x) -> absl::StatusOr<int64_t> { return x.a + x.b;
//   }); absl::StatusOr<int64_t> sum = kAdd.Call(rpc, /*node=*/1, Add{2, 3});
template <typename Req, typename Resp>
struct RpcMethod {
  uint16_t id;

  void Serve(Rpc& rpc, std::function<absl::StatusOr<Resp>(uint32_t from, const Req&)> fn) const {
    rpc.RegisterHandler(id,
                        [fn = std::move(fn)](const RpcRequest& r) -> absl::StatusOr<std::string> {
                          absl::StatusOr<Req> req = RpcCodec<Req>::Decode(r.payload);
                          if (!req.ok())
                            return absl::InvalidArgumentError(std::string(req.status().message()));
                          absl::StatusOr<Resp> resp = fn(r.from, *req);
                          if (!resp.ok()) return resp.status();
                          return RpcCodec<Resp>::Encode(*resp);
                        });
  }
  absl::StatusOr<Resp> Call(Rpc& rpc, uint32_t node, const Req& req,
                            absl::Duration timeout = absl::Seconds(10)) const {
    absl::StatusOr<std::string> bytes = rpc.Call(node, id, RpcCodec<Req>::Encode(req), timeout);
    if (!bytes.ok()) return bytes.status();
    return RpcCodec<Resp>::Decode(*bytes);
  }
};

}  // namespace farm

#endif  // FARM_MESSAGING_RPC_H_
