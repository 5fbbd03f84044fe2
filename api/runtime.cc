// farm::Runtime and farm::Worker (farm.h) on the node runtime, the messenger and RPC.
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "farm.h"
#include "platform/config.h"
#include "platform/poller.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"

namespace farm {

static_assert(kMaxObjectSize == txn::kMaxObjectSize, "farm.h and txn/object.h disagree");

namespace {

absl::StatusOr<config::ClusterConfig> LoadConfig(const RuntimeOptions& o) {
  if (!o.config_text.empty()) return ParseClusterConfig(o.config_text, "RuntimeOptions");
  if (o.config_path.empty()) {
    return absl::InvalidArgumentError(
        "no cluster configuration: set --config (or RuntimeOptions::config_path)");
  }
  return LoadClusterConfig(o.config_path);
}

absl::Status CheckOptions(const RuntimeOptions& o) {
  if (o.workers < 1 || o.workers > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers must be between 1 and 63, not ", o.workers));
  }
  if (o.worker_buffer < 4096 || o.worker_buffer % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_buffer must be a positive multiple of 4096, not ", o.worker_buffer));
  }
  if (!o.provider.empty()) {
    if (absl::Status s = CheckProvider(o.provider); !s.ok()) return s;
  }
  if (!o.endpoint.empty()) {
    if (absl::Status s = ParseEndpointType(o.endpoint).status(); !s.ok()) return s;
  }
  return ParsePollMode(o.poll).status();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Runtime

absl::Status Runtime::SaveRoot(const std::string& name, absl::string_view bytes) {
  return impl_->node->SaveRoot(name, bytes);
}

absl::StatusOr<std::string> Runtime::LoadRoot(const std::string& name) const {
  return impl_->node->LoadRoot(name);
}

absl::Status Runtime::Impl::KeepForRestart(absl::Duration timeout) {
  if (options.data_dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::map<uint32_t, control::RegionLayout>> layouts = txn->Quiesce(timeout);
  if (!layouts.ok()) return layouts.status();
  return node->SealDataDir(*layouts);
}

Runtime::Impl::~Impl() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> l(stop_hooks_mu);
    hooks.swap(stop_hooks);
  }
  for (const std::function<void()>& hook : hooks) hook();
  // Stop serving before the engine goes: the protocol's handlers hold its participant, and the
  // poller runs them until the Rpc is gone.
  if (txn != nullptr) txn->Stop();
  FARM_SYNC_POINT("Runtime::Impl::~Impl:EngineStopped");
  rpc.reset();
  txn.reset();
  messenger.reset();
  node.reset();
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Start(const RuntimeOptions& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  absl::StatusOr<config::ClusterConfig> cfg = LoadConfig(options);
  if (!cfg.ok()) return cfg.status();
  if (options.node_id >= 0 && FindNode(*cfg, static_cast<uint32_t>(options.node_id)) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id ", options.node_id, " is not in the cluster configuration"));
  }
  MessengerOptions mo;
  // And two for the transaction engine: its recovery, and re-replication's copier.
  mo.lanes = options.workers + 2;
  mo.ring_size = options.ring_size;
  NodeOptions no;
  no.config = *cfg;
  if (!options.zookeeper.empty()) no.config.set_zookeeper(options.zookeeper);
  no.node_id = options.node_id;
  no.provider = options.provider;
  no.endpoint = options.endpoint;
  no.poll.mode = *ParsePollMode(options.poll);
  no.fill_pattern = options.fill_pattern;
  no.data_dir = options.data_dir;
  no.areas.push_back(Messenger::Area(*cfg, mo));

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  absl::StatusOr<std::unique_ptr<Node>> node = Node::Start(std::move(no));
  if (!node.ok()) return node.status();
  impl->node = std::move(*node);
  absl::StatusOr<std::unique_ptr<Messenger>> m = Messenger::Create(impl->node.get(), mo);
  if (!m.ok()) return m.status();
  impl->messenger = std::move(*m);
  RpcOptions ro;
  ro.serve_at_once = false;  // Serve() after the application registered its handlers
  if (no.poll.mode == PollMode::kBusy) ro.spin = absl::InfiniteDuration();
  impl->rpc = std::make_unique<Rpc>(impl->messenger.get(), ro);
  absl::StatusOr<std::unique_ptr<txn::Engine>> engine =
      txn::Engine::Start(impl->node.get(), impl->rpc.get());
  if (!engine.ok()) return engine.status();
  impl->txn = std::move(*engine);
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

uint32_t Runtime::node_id() const { return impl_->node->id(); }
std::string Runtime::provider() const { return impl_->node->provider(); }
std::vector<uint32_t> Runtime::members() const { return impl_->node->members(); }
uint64_t Runtime::epoch() const { return impl_->messenger->membership_epoch(); }
uint32_t Runtime::configuration_manager() const { return impl_->node->membership().cm_node_id(); }

Runtime::LeaseStats Runtime::lease_stats() const {
  const ConfigurationManager::HeartbeatStats h = impl_->node->heartbeat_stats();
  LeaseStats out;
  out.lease = absl::Milliseconds(impl_->node->config().lease_ms());
  out.heartbeats = h.count;
  out.rtt_p50 = h.p50;
  out.rtt_p99 = h.p99;
  out.rtt_max = h.max;
  return out;
}
uint64_t Runtime::max_object_size() const { return impl_->txn->max_object_size(); }

std::vector<RegionRef> Runtime::Regions(uint32_t node) const {
  std::vector<RegionRef> out;
  for (const control::RegionInfo& r : impl_->node->RegionsOf(node)) {
    RegionRef ref{r.region_id(), r.node_id(), r.size()};
    for (uint32_t b : r.backup_node()) {
      const bool syncing = std::find(r.syncing_backup().begin(), r.syncing_backup().end(), b) !=
                           r.syncing_backup().end();
      (syncing ? ref.syncing : ref.backups).push_back(b);
    }
    ref.recovering = r.recovering();
    out.push_back(std::move(ref));
  }
  return out;
}

absl::StatusOr<absl::Span<char>> Runtime::Local(GlobalAddress addr, uint64_t len) const {
  absl::StatusOr<RemoteTarget> t = impl_->node->Resolve(addr, len);
  if (!t.ok()) return t.status();
  if (t->local == nullptr) {
    return absl::OutOfRangeError(absl::StrCat("address ", addr.ToString(), " belongs to node ",
                                              t->node_id, ", not to this node (", impl_->node->id(),
                                              ")"));
  }
  return absl::Span<char>(t->local, len);
}

absl::Status Runtime::Handle(uint16_t method, Handler handler) {
  if (method >= kFirstReservedMethod) {
    return absl::InvalidArgumentError(absl::StrCat("method ", method,
                                                   " is reserved for the platform (use ids below ",
                                                   kFirstReservedMethod, ")"));
  }
  if (!handler) return absl::InvalidArgumentError("empty handler");
  impl_->rpc->RegisterHandler(
      method, [handler = std::move(handler)](const RpcRequest& r) -> absl::StatusOr<std::string> {
        return handler(Request{r.from, r.method, r.payload});
      });
  return absl::OkStatus();
}

absl::Status Runtime::HandleShipped(uint16_t method, ShippedHandler handler) {
  if (method >= kFirstReservedMethod) {
    return absl::InvalidArgumentError(absl::StrCat("method ", method,
                                                   " is reserved for the platform (use ids below ",
                                                   kFirstReservedMethod, ")"));
  }
  if (!handler) return absl::InvalidArgumentError("empty handler");
  impl_->rpc->RegisterShipped(
      method, [handler = std::move(handler)](GlobalAddress addr, char* data, uint64_t available,
                                             absl::string_view request) {
        return handler(addr, absl::Span<char>(data, available), request);
      });
  return absl::OkStatus();
}

void Runtime::Serve() { impl_->rpc->Serve(); }

absl::StatusOr<std::unique_ptr<Worker>> Runtime::NewWorker() {
  if (impl_->workers.fetch_add(1, std::memory_order_relaxed) >= impl_->options.workers) {
    impl_->workers.fetch_sub(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", impl_->options.workers,
                     " workers are in use: raise RuntimeOptions::workers (--workers) or destroy "
                     "a Worker first"));
  }
  auto w = std::make_unique<Worker::Impl>();
  w->rt = impl_.get();  // from here on ~Impl gives the count back
  absl::StatusOr<Messenger::LaneLease> lane = impl_->messenger->AcquireLane(absl::ZeroDuration());
  if (!lane.ok()) return lane.status();
  w->lane = std::move(*lane);
  absl::StatusOr<std::unique_ptr<Node::Channel>> channel = impl_->node->OpenChannel();
  if (!channel.ok()) return channel.status();
  w->channel = std::move(*channel);
  // The thread's messages go out on its own channel too: their completions are its own.
  w->lane->UseChannel(w->channel->fabric_channel());
  absl::StatusOr<std::unique_ptr<Node::StagingBuffer>> staging = Node::StagingBuffer::Create(
      impl_->node.get(), impl_->options.worker_buffer, impl_->node->config().lock_memory());
  if (!staging.ok()) return staging.status();
  w->staging = std::move(*staging);
  w->txn_context.engine = impl_->txn.get();
  w->txn_context.lane = w->lane.get();
  w->txn_context.channel = w->channel.get();
  w->txn_context.staging = w->staging.get();
  return std::unique_ptr<Worker>(new Worker(std::move(w)));
}

// ---------------------------------------------------------------------------------------------
// Worker

Worker::Impl::~Impl() {
  // The lane goes back to the shared endpoint (its WRITEs in flight on the channel complete
  // first) before the channel closes.
  if (lane.get() != nullptr && channel != nullptr) lane->UseChannel(nullptr);
  channel.reset();  // discards operations still in flight into the staging memory
  staging.reset();
  if (rt != nullptr) rt->workers.fetch_sub(1, std::memory_order_relaxed);
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() = default;

uint32_t Worker::node_id() const { return impl_->rt->node->id(); }

absl::Status Worker::Impl::Access(bool is_read, GlobalAddress addr, char* local, uint64_t len,
                                  absl::Duration timeout) {
  if (len == 0) return absl::InvalidArgumentError("empty access");
  Node& node = *rt->node;
  // The whole range is checked before any byte moves: a refused access changes nothing.
  absl::StatusOr<RemoteTarget> whole = node.Resolve(addr, std::min<uint64_t>(len, 1));
  if (!whole.ok()) return whole.status();
  if (absl::Status s = node.Resolve(addr + (len - 1), 1).status(); !s.ok()) return s;
  for (uint64_t done = 0; done < len;) {
    const uint64_t piece = std::min<uint64_t>(len - done, staging->size());
    const GlobalAddress at = addr + done;
    absl::StatusOr<RemoteTarget> t = node.Resolve(at, piece);
    if (!t.ok()) return t.status();
    if (t->local != nullptr) {
      if (is_read) {
        std::memcpy(local + done, t->local, piece);
      } else {
        std::memcpy(t->local, local + done, piece);
      }
    } else {
      if (!is_read) std::memcpy(staging->data(), local + done, piece);
      Node::Batch batch(channel.get());  // completes on this thread's own queue
      const LocalBuffer lb = staging->At(0, piece);
      // A refused post is reported again by Wait.
      (is_read ? batch.Read(at, lb) : batch.Write(at, lb)).IgnoreError();
      const absl::Status s = batch.Wait(timeout);
      if (!s.ok()) {
        if (absl::Status r = staging->Retire(batch.in_flight()); !r.ok()) {
          spdlog::error("node {}: {}", node.id(), std::string(r.message()));
        }
        return absl::Status(
            s.code(), absl::StrCat(is_read ? "READ" : "WRITE", " of ", piece, " bytes at ",
                                   at.ToString(), " on node ", t->node_id, ": ", s.message()));
      }
      if (is_read) std::memcpy(local + done, staging->data(), piece);
    }
    done += piece;
  }
  return absl::OkStatus();
}

absl::Status Worker::Read(GlobalAddress addr, void* dst, uint64_t len, absl::Duration timeout) {
  return impl_->Access(true, addr, static_cast<char*>(dst), len, timeout);
}

absl::Status Worker::Write(GlobalAddress addr, const void* src, uint64_t len,
                           absl::Duration timeout) {
  return impl_->Access(false, addr, static_cast<char*>(const_cast<void*>(src)), len, timeout);
}

absl::StatusOr<std::string> Worker::Call(uint32_t node, uint16_t method, absl::string_view request,
                                         absl::Duration timeout) {
  return impl_->rt->rpc->Call(*impl_->lane, node, method, request, timeout);
}

std::vector<absl::StatusOr<std::string>> Worker::CallAll(absl::Span<const CallRequest> calls,
                                                         absl::Duration timeout) {
  Rpc& rpc = *impl_->rt->rpc;
  Messenger::Lane& lane = *impl_->lane;
  std::vector<absl::StatusOr<std::string>> out(calls.size(), absl::UnknownError("not called"));
  std::vector<std::shared_ptr<Rpc::Pending>> started(calls.size());
  bool failed = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
        rpc.Start(lane, calls[i].node, calls[i].method, calls[i].request, timeout);
    if (p.ok()) {
      started[i] = std::move(*p);
    } else {
      out[i] = p.status();
      failed = true;  // perhaps a flush for ring space that failed another node's requests
    }
  }
  // One flush for every destination here rather than in the first Await, which would hand a
  // failed WRITE's error to whichever call it awaits, of any node: a destination whose WRITE
  // failed fails its own calls only (their requests were lost; the table's sweep drops them
  // after their deadline, rpc.h). A stalled one (DeadlineExceeded) may still deliver them.
  if (!lane.Flush().ok() || failed) {
    for (size_t i = 0; i < calls.size(); ++i) {
      if (started[i] == nullptr) continue;
      if (absl::Status s = lane.SendStatus(calls[i].node); !s.ok()) {
        out[i] =
            absl::Status(s.code(), absl::StrCat("request for method ", calls[i].method, " to node ",
                                                calls[i].node, ": ", s.message()));
        started[i].reset();
      }
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    if (started[i] != nullptr) out[i] = rpc.Await(lane, *started[i]);
  }
  return out;
}

absl::StatusOr<std::string> Worker::Ship(GlobalAddress addr, uint16_t method,
                                         absl::string_view request, absl::Duration timeout) {
  return impl_->rt->rpc->Ship(*impl_->lane, addr, method, request, timeout);
}

// ---------------------------------------------------------------------------------------------
// Transactions

std::unique_ptr<Txn> Worker::Begin() {
  return std::unique_ptr<Txn>(new Txn(std::make_unique<Txn::Impl>(&impl_->txn_context)));
}

absl::Status Worker::Run(const std::function<absl::Status(Txn&)>& fn, absl::Duration budget) {
  if (budget < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("a negative budget for Worker::Run");
  }
  if (budget == absl::ZeroDuration()) {
    budget =
        std::max(absl::Seconds(30), 10 * absl::Milliseconds(impl_->rt->node->config().lease_ms()));
  }
  const absl::Time deadline = absl::Now() + budget;
  absl::Status last;
  // Random pauses after a conflict, growing, so that transactions that keep colliding spread.
  uint64_t seed =
      reinterpret_cast<uintptr_t>(this) ^ static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  absl::Duration cap = absl::Microseconds(2);
  // At least one attempt; then until the budget is spent.
  Node* node = impl_->rt->node.get();
  for (int attempt = 0; attempt == 0 || absl::Now() < deadline; ++attempt) {
    const uint64_t map_before = node->map_version();
    std::unique_ptr<Txn> t = Begin();
    absl::Status s = fn(*t);
    if (s.ok()) s = t->Commit();
    if (!absl::IsAborted(s)) {
      if (!s.ok()) t->Abort();
      // A node that left during the attempt (Unavailable) is a conflict with the
      // reconfiguration when the cluster keeps backups: its regions moved to them, so the attempt
      // is retried, if nothing of it was applied (an outcome that is unknown is returned).
      // So is a region that is recovering (a backup took it over and the cluster has not yet
      // activated it): the attempt is retried until it serves again.
      const bool may_move = absl::IsUnavailable(s) && node->f() > 0 && t->impl_->t.aborted();
      auto reconfigured = [&] {
        return node->map_version() != map_before || node->recovering_regions() > 0;
      };
      bool moved = may_move && reconfigured();
      if (may_move && !moved) {
        // A participant can learn of a reconfiguration before this node applies it: an evicted
        // node refuses every LOCK as soon as it knows, and its refusal may arrive here before
        // the membership without it (replication_test saw it once under ASan). The CM has
        // decided by then; give this node up to a lease (within the budget) to apply it.
        FARM_SYNC_POINT("Worker::Run:WaitForMembership");
        const absl::Time wait_until =
            std::min(deadline, absl::Now() + absl::Milliseconds(node->config().lease_ms()));
        while (!reconfigured() && absl::Now() < wait_until) absl::SleepFor(absl::Microseconds(200));
        moved = reconfigured();
      }
      if (!moved) return s;
    }
    last = s;
    t.reset();
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    absl::SleepFor(cap * (static_cast<double>(seed >> 11) / 9007199254740992.0));
    cap = std::min(cap * 2, absl::Milliseconds(1));
  }
  return last;
}

absl::Status Worker::LockFreeRead(GlobalAddress addr, void* dst, uint64_t len) {
  std::string value;
  absl::Status s = txn::LockFreeRead(impl_->txn_context, addr, len, &value);
  if (!s.ok()) return s;
  std::memcpy(dst, value.data(), len);
  return absl::OkStatus();
}

Txn::Txn(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Txn::~Txn() = default;  // the Transaction aborts itself if still active

absl::Status Txn::Read(GlobalAddress addr, void* dst, uint64_t len) {
  std::string value;
  absl::Status s = impl_->t.Read(addr, len, &value);
  if (!s.ok()) return s;
  std::memcpy(dst, value.data(), len);
  return absl::OkStatus();
}

absl::Status Txn::Write(GlobalAddress addr, const void* src, uint64_t len) {
  if (len == 0) return absl::InvalidArgumentError("an object has at least 1 byte");
  return impl_->t.Write(addr, absl::string_view(static_cast<const char*>(src), len));
}

absl::StatusOr<GlobalAddress> Txn::Alloc(uint64_t size, const AllocHint& hint) {
  txn::AllocHint h;
  h.kind = static_cast<txn::AllocHint::Kind>(hint.kind);
  h.node = hint.node;
  h.near = hint.near;
  h.key = hint.key;
  return impl_->t.Alloc(size, h);
}

absl::Status Txn::Free(GlobalAddress addr) { return impl_->t.Free(addr); }
absl::Status Txn::Commit() { return impl_->t.Commit(); }
void Txn::Abort() { impl_->t.Abort(); }

}  // namespace farm
