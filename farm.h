// farm/farm.h: the public API of the farm platform. An application includes this header only and
// depends on the Bazel target //:farm.
//
// A farm cluster is a set of symmetric node processes: each serves its share of the cluster's
// shared memory and runs the application. The application is a normal program that hands the
// platform two functions, `setup` (register RPC handlers: runs before the node can be reached)
// and `run` (the application itself: runs on every node once the cluster has formed):
//
//   #include "farm/farm.h"
//
//   constexpr farm::Method<int64_t, int64_t> kSquare{1};  // request and response types
//
//   int main(int argc, char** argv) {
//     farm::App app;
//     app.name = "squares";
//     app.setup = [](farm::Runtime& rt) {
//       // Handlers run on this node's handler thread, one at a time (see "Threads" below).
//       return kSquare.Serve(rt, [](uint32_t from, const int64_t& x) -> absl::StatusOr<int64_t> {
//         return x * x;
//       });
//     };
//     app.run = [](farm::Runtime& rt) -> absl::Status {
//       // Every thread that touches the cluster uses a Worker of its own.
//       absl::StatusOr<std::unique_ptr<farm::Worker>> w = rt.NewWorker();
//       if (!w.ok()) return w.status();
//       // Write into this node's first region, read the next node's first 8 bytes.
//       const farm::RegionRef mine = rt.Regions(rt.node_id())[0];
//       const int64_t v = rt.node_id();
//       if (absl::Status s = (*w)->Write(mine.base(), &v, sizeof(v)); !s.ok()) return s;
//       for (uint32_t peer : rt.members()) {
//         absl::StatusOr<int64_t> sq = kSquare.Call(**w, peer, v);  // an RPC to every node
//         if (!sq.ok()) return sq.status();
//       }
//       return absl::OkStatus();
//     };
//     return farm::RunNode(argc, argv, app);   // parses the standard node flags
//   }
//
// Build it with the `farm_app` macro (//:defs.bzl), which also makes a target that launches a
// local cluster of it:
//
//   load("//:defs.bzl", "farm_app")
//   farm_app(name = "squares", srcs = ["squares.cc"])
//   $ bazel run //path:squares_cluster -- --nodes=3 --provider=shm
//
// or start each node by hand: `squares --config=cluster.textproto --node_id=N` (the flags of
// //tools:node; `--help` lists them).
//
// Memory. The cluster's memory is a set of regions, each owned by one node; a GlobalAddress is
// (region id, offset). Regions(node) lists a node's regions. Every access is checked against the
// region map before anything is posted: an address outside every region, or a range crossing a
// region's end, is refused with OutOfRange, never sent to the fabric. Remote regions are read and
// written with one-sided RDMA READs and WRITEs (the owner's CPU is not involved on RDMA NICs);
// this node's own regions with a memory copy, or directly through Runtime::Local.
//
// Threads. Runtime's methods are safe on any thread. A Worker belongs to one thread at a time:
// it holds that thread's own messaging lane, registered buffers and completion context, so a
// thread's operations complete on that thread without a hand-off and threads never wait for each
// other's staging buffers; make one per application thread (NewWorker fails with
// ResourceExhausted when RuntimeOptions::workers are all in use). RPC handlers run on the node's
// handler thread (its poller), one at a time, never on an application thread, so a handler may
// take a lock that an application thread holds while it waits for a call. A handler must not
// block for long (it holds up every other request to this node) and must not make calls itself.
//
// Objects and transactions (FaRM's programming model). Application data lives in objects that
// the platform allocates in the nodes' regions; a transaction reads and writes any of them,
// local or remote, and commits atomically (strictly serializable, optimistic: conflicts abort
// the transaction, which the application runs again; Worker::Run does that):
//
//   absl::Status s = worker->Run([&](farm::Txn& t) -> absl::Status {
//     absl::StatusOr<int64_t> a = t.Get<int64_t>(account_a);   // READ of the object
//     absl::StatusOr<int64_t> b = t.Get<int64_t>(account_b);
//     if (!a.ok()) return a.status();
//     if (!b.ok()) return b.status();
//     if (absl::Status w = t.Put(account_a, *a - 10); !w.ok()) return w;  // buffered
//     return t.Put(account_b, *b + 10);
//   });                                                          // committed, or the error
//
// An object is created with Txn::Alloc (placed by an AllocHint: this node, a given node, near
// another object, or spread by a key) and freed with Txn::Free, both taking effect at commit.
// Worker::LockFreeRead reads one object consistently without a transaction. The regions that
// hold objects must not be written raw (Worker::Write) at the same time.
//
// Errors are absl::Status values: InvalidArgument (bad arguments), OutOfRange (address outside
// every region), Unavailable (the node left or cannot be reached, or a node's lease with the
// configuration manager expired: this node's, and it then reads and commits nothing, or the
// target's, which then serves nothing), DeadlineExceeded (no answer in time), DataLoss (corrupt
// messages from that node), Unimplemented (no handler for the method), ResourceExhausted
// (back-pressure; retry, or memory full for Alloc), Aborted (a transaction conflicted with another,
// or a request was refused unexecuted because it was sent just before a configuration change its
// target had applied; run it again), NotFound (no object at the address: freed or never
// allocated), FailedPrecondition (a transaction used after Commit or Abort), or the handler's own
// error, prefixed with the node.
#ifndef FARM_FARM_H_
#define FARM_FARM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "messaging/codec.h"
#include "platform/global_address.h"

namespace farm {

// How a node starts. RunNode fills these from the command line; Runtime::Start takes them
// directly (tests, programs that embed a node).
struct RuntimeOptions {
  // The cluster configuration file (protobuf text, see README), or its text in config_text.
  std::string config_path;
  std::string config_text;
  // This node's id in the configuration; -1 lets the configuration manager choose.
  int node_id = -1;
  // Override the configuration's provider / endpoint when not empty.
  std::string provider;
  std::string endpoint;
  // Overrides ClusterConfig.zookeeper when not empty: "host:port,host:port", the ZooKeeper
  // servers in which the configuration manager records every configuration before publishing it.
  std::string zookeeper;
  // "busy" (lowest latency, one core) or "adaptive".
  std::string poll = "adaptive";
  // How many Workers may exist at once (each owns a messaging lane; the transaction engine has
  // one more). 1..63.
  int workers = 8;
  // Bytes of each message ring; the largest RPC is a quarter of it. Same on every node.
  uint64_t ring_size = 64 << 10;
  // Bytes of each Worker's registered buffer: larger READs and WRITEs go in pieces of this size.
  uint64_t worker_buffer = 1 << 20;
  // Fill the regions with the self-check pattern before joining (for //tools:cluster's check).
  bool fill_pattern = false;
  // A directory of this node's own in which its regions are kept as files, so that a cluster
  // stopped as a whole (every node finished its application, or //tools:cluster was stopped) and
  // started again on the same directories serves every committed object again, at the same
  // addresses. At that end each node stops granting locks, waits until nothing is locked, writes
  // its regions to disk and marks the directory clean. A directory whose node did not leave that
  // way (killed, crashed, or stopped alone) restarts from its backup copies and its backup
  // journal, where each COMMIT-BACKUP record is written before it is acknowledged: with f >= 1
  // a cluster whose every node was killed at once loses nothing committed (with f = 0 such a
  // directory is refused). The journal is written without fsync: it survives the processes, not
  // a machine failure. Empty: memory only (the default).
  std::string data_dir;
};

// A region of the shared address space.
struct RegionRef {
  uint32_t id = 0;    // cluster-wide region id
  uint32_t node = 0;  // owner: the primary copy, the one READs and transactions use
  uint64_t size = 0;  // bytes
  // Replication (ClusterConfig.f backups per region): the nodes holding a complete backup copy,
  // and those given a backup that are still copying the region from its primary (after a node
  // left: re-replication). A region is fully replicated when `backups` has f nodes and `syncing`
  // is empty; with f = 0 both are empty.
  std::vector<uint32_t> backups;
  std::vector<uint32_t> syncing;
  // Its primary was promoted from a backup in this membership and does not serve yet (recovery,
  // a few lease periods at most); accesses meanwhile wait or fail with Unavailable.
  bool recovering = false;
  GlobalAddress base() const { return GlobalAddress{id, 0}; }
};

// An RPC request as a handler sees it.
struct Request {
  uint32_t from = 0;  // calling node
  uint16_t method = 0;
  absl::string_view payload;  // valid during the handler only
};
using Handler = std::function<absl::StatusOr<std::string>(const Request& request)>;
// One call of Worker::CallAll: `method` on `node` with `request` (which must stay valid until
// CallAll returns).
struct CallRequest {
  uint32_t node = 0;
  uint16_t method = 0;
  absl::string_view request;
};
// A shipped function (Worker::Ship): runs on the node that owns `addr`, with the bytes from
// `addr` to the end of its region in this node's memory.
using ShippedHandler = std::function<absl::StatusOr<std::string>(
    GlobalAddress addr, absl::Span<char> data, absl::string_view request)>;

// Method ids from kFirstReservedMethod up are the platform's own.
inline constexpr uint16_t kFirstReservedMethod = 0xff00;

// Largest object the heap's slots hold, in bytes (an object of n bytes occupies a slot of the
// next power of two at or above n + 24). A node's limit also depends on its messaging rings
// (a commit carries new values in messages): Runtime::max_object_size().
inline constexpr uint64_t kMaxObjectSize = (64 << 10) - 24;

// Where Txn::Alloc places a new object.
struct AllocHint {
  enum class Kind { kLocal, kOnNode, kNear, kAnywhere };
  Kind kind = Kind::kLocal;
  uint32_t node = 0;
  GlobalAddress near;
  uint64_t key = 0;
  // On this node (the default).
  static AllocHint Local() { return AllocHint{}; }
  // On `node`.
  static AllocHint OnNode(uint32_t node) { return AllocHint{Kind::kOnNode, node, {}, 0}; }
  // On the node that owns `addr` (e.g. next to the object that will point to it).
  static AllocHint Near(GlobalAddress addr) { return AllocHint{Kind::kNear, 0, addr, 0}; }
  // On a member chosen by consistent (rendezvous) hashing of `key`: keys spread evenly over the
  // nodes, and a membership change moves only the keys of the nodes that came or went.
  static AllocHint Anywhere(uint64_t key) { return AllocHint{Kind::kAnywhere, 0, {}, key}; }
};

class Worker;
class Txn;

// The platform on this node: membership, memory map, RPC handlers, workers.
// Thread safety: safe for concurrent use. Destroy every Worker before the Runtime.
class Runtime {
 public:
  // Starts the node: joins the cluster (waits until it has formed), starts messaging and RPC.
  // Requests are not served until Serve(). Errors: InvalidArgument (bad options or
  // configuration), Unavailable (configuration manager unreachable), FailedPrecondition (the
  // cluster could not form; names the missing node), ResourceExhausted (locked-memory limit).
  static absl::StatusOr<std::unique_ptr<Runtime>> Start(const RuntimeOptions& options);
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  ~Runtime();  // leaves the cluster

  uint32_t node_id() const;
  // The provider actually in use, e.g. "shm" or "tcp;ofi_rxm".
  std::string provider() const;
  // Node ids of the current members, ascending (this node included).
  std::vector<uint32_t> members() const;
  // Membership epoch: grows whenever a node leaves or joins.
  uint64_t epoch() const;
  // The node acting as configuration manager in the current membership: the configured one
  // (ClusterConfig.cm_node_id), or, with ZooKeeper, a node that took the role over after it
  // failed.
  uint32_t configuration_manager() const;
  // This node's lease with the configuration manager (ClusterConfig.lease_ms) and the round
  // trips of its heartbeats so far, from sending one to its acknowledgement: a lease many times
  // the p99 is one that healthy nodes do not miss.
  struct LeaseStats {
    absl::Duration lease;
    uint64_t heartbeats = 0;  // acknowledged
    absl::Duration rtt_p50, rtt_p99, rtt_max;
  };
  LeaseStats lease_stats() const;
  // Largest object a transaction may allocate, read or write: kMaxObjectSize, or less with
  // smaller messaging rings (about 15 KiB with the default 64 KiB; RuntimeOptions::ring_size).
  uint64_t max_object_size() const;
  // Data regions of `node` in the current membership, in the node's order.
  std::vector<RegionRef> Regions(uint32_t node) const;
  // This node's own memory at [addr, addr + len): OutOfRange unless it lies inside one of this
  // node's regions. The bytes may be changed by other nodes' WRITEs at any time.
  absl::StatusOr<absl::Span<char>> Local(GlobalAddress addr, uint64_t len) const;

  // Roots: small named records of this node's own, kept in its data directory beside its regions
  // (RuntimeOptions.data_dir), by which an application finds its data again when the cluster
  // restarts from the directories (e.g. the address of its top object, which stays the same).
  // SaveRoot replaces the record `name` (1 to 90 of [A-Za-z0-9._-]) atomically and durably;
  // FailedPrecondition without a data directory. LoadRoot returns it; NotFound when there is none
  // (no data directory, or one the node did not restart from: a node that starts afresh forgets
  // its directory's roots with its regions).
  absl::Status SaveRoot(const std::string& name, absl::string_view bytes);
  absl::StatusOr<std::string> LoadRoot(const std::string& name) const;

  // Registers the handler of `method` (below kFirstReservedMethod). Call before Serve() so that no
  // request finds it missing; later registrations take effect at once.
  absl::Status Handle(uint16_t method, Handler handler);
  absl::Status HandleShipped(uint16_t method, ShippedHandler handler);
  // Starts serving requests. Requests that arrived earlier waited in their rings and are
  // served now, in order. Idempotent.
  void Serve();

  // A context for the calling thread (see "Threads"). ResourceExhausted when
  // RuntimeOptions::workers Workers exist already.
  absl::StatusOr<std::unique_ptr<Worker>> NewWorker();

  struct Impl;  // internal

 private:
  friend struct RuntimeAccess;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One application thread's access to the cluster. Owned by one thread at a time.
class Worker {
 public:
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker();

  uint32_t node_id() const;

  // Copies `len` bytes at `addr` into `dst`, or `src` to `addr`: one-sided READs / WRITEs for a
  // remote region (in pieces of RuntimeOptions::worker_buffer), a copy for a local one. A
  // completed Write is in the target's memory. Errors: OutOfRange, InvalidArgument (empty
  // access), Unavailable (also for an operation in flight to a node that leaves the cluster:
  // it ends when this node applies the membership without it, not at the timeout),
  // DeadlineExceeded.
  absl::Status Read(GlobalAddress addr, void* dst, uint64_t len,
                    absl::Duration timeout = absl::Seconds(10));
  absl::Status Write(GlobalAddress addr, const void* src, uint64_t len,
                     absl::Duration timeout = absl::Seconds(10));

  // Calls `method` on `node` (this node included) and waits for the response.
  absl::StatusOr<std::string> Call(uint32_t node, uint16_t method, absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));
  // Several calls in flight together: every request is sent (those to one node in one WRITE)
  // before any response is awaited, so calls to k nodes take about one round trip, not k. One
  // result per call, in order: its response, or its own error, as Call would give it; a call
  // that cannot be sent (a node that is not a member or not configured, a WRITE to it that
  // failed) fails alone, and the others go out and are answered. Each call's deadline is
  // `timeout` from the start of CallAll. Requests to one node are served in order.
  std::vector<absl::StatusOr<std::string>> CallAll(absl::Span<const CallRequest> calls,
                                                   absl::Duration timeout = absl::Seconds(10));
  // Runs the ShippedHandler of `method` on the node that owns `addr`.
  absl::StatusOr<std::string> Ship(GlobalAddress addr, uint16_t method, absl::string_view request,
                                   absl::Duration timeout = absl::Seconds(10));

  // Starts a transaction on this worker (see "Objects and transactions"). It must not outlive
  // the Worker; one at a time per Worker is the usual use (several are allowed).
  std::unique_ptr<Txn> Begin();
  // Runs `fn` in a new transaction and commits it; runs it again (with a short random pause,
  // growing to 1 ms) as long as it fails with Aborted, for up to `budget` of time. Returns OK
  // once a run committed, fn's own error (the transaction is then aborted), or the last Aborted.
  // The default budget (zero) is 10 leases of the cluster (ClusterConfig.lease_ms), at least
  // 30 s: longer than it takes to detect a dead coordinator, whose locks are released only when
  // the cluster learns that it left. With backups (ClusterConfig.f > 0) a run that failed with
  // Unavailable because a node left meanwhile is run again too, if nothing of it was applied:
  // the departed node's regions are served by their promoted backups (after a short recovery,
  // during which they answer Unavailable: "region 5 is recovering ..."). A participant may know
  // of the departure first (an evicted node refuses every LOCK): such a run waits up to a lease
  // for this node to apply the new membership, and returns its Unavailable if none comes.
  absl::Status Run(const std::function<absl::Status(Txn&)>& fn,
                   absl::Duration budget = absl::ZeroDuration());
  // A consistent copy of the object at `addr` (exactly `len` bytes, the object's size) outside
  // any transaction: one READ, retried while a commit is writing the object. Errors: NotFound,
  // InvalidArgument (not an object of that size), Aborted (stayed locked), OutOfRange.
  absl::Status LockFreeRead(GlobalAddress addr, void* dst, uint64_t len);
  template <typename T>
  absl::StatusOr<T> LockFreeGet(GlobalAddress addr) {
    static_assert(std::is_trivially_copyable<T>::value, "use LockFreeRead for other types");
    T v;
    absl::Status s = LockFreeRead(addr, &v, sizeof(T));
    if (!s.ok()) return s;
    return v;
  }

  struct Impl;  // internal

 private:
  friend class Runtime;
  friend struct RuntimeAccess;
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A transaction (Worker::Begin). Reads see one committed version of each object (and this
// transaction's own writes); writes, allocations and frees are buffered until Commit, which
// applies all of them or none. Belongs to the worker's thread. Destroying an uncommitted Txn
// aborts it.
class Txn {
 public:
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  ~Txn();

  // The object at `addr`, exactly `len` bytes (its size). Errors: NotFound (no object there),
  // InvalidArgument (another size, or not an object's address), Aborted (it is being changed:
  // run the transaction again), OutOfRange, Unavailable.
  absl::Status Read(GlobalAddress addr, void* dst, uint64_t len);
  template <typename T>
  absl::StatusOr<T> Get(GlobalAddress addr) {
    static_assert(std::is_trivially_copyable<T>::value, "use Read for other types");
    T v;
    absl::Status s = Read(addr, &v, sizeof(T));
    if (!s.ok()) return s;
    return v;
  }
  // Replaces the object's value (same size). The object is read first if this transaction has
  // not read it.
  absl::Status Write(GlobalAddress addr, const void* src, uint64_t len);
  template <typename T>
  absl::Status Put(GlobalAddress addr, const T& value) {
    static_assert(std::is_trivially_copyable<T>::value, "use Write for other types");
    return Write(addr, &value, sizeof(T));
  }
  // A new object of `size` bytes (1 .. Runtime::max_object_size(); zeros until written), placed by
  // `hint` and created at commit. Errors: InvalidArgument (size), ResourceExhausted (that node's
  // memory is full), Unavailable.
  absl::StatusOr<GlobalAddress> Alloc(uint64_t size, const AllocHint& hint = AllocHint::Local());
  // Frees the object at commit. Its slot may be reused at once: a transaction still holding its
  // address finds it freed or changed (versions never repeat) and aborts.
  absl::Status Free(GlobalAddress addr);

  // Commits: OK, or Aborted (a conflict: nothing was applied; run it again), Unavailable (a
  // node involved left before the decision: nothing was applied; or, rarely, every owner left or
  // this node was evicted after the decision and before any owner confirmed it: the message says
  // the outcome is unknown), FailedPrecondition (already committed or aborted). Once the decision
  // to commit is taken it is carried out at every owner that stays in the cluster, even if this
  // node fails: a commit is never half-applied among the nodes that remain.
  absl::Status Commit();
  // Drops every buffered change; releases what the transaction holds. Idempotent.
  void Abort();

  struct Impl;  // internal

 private:
  friend class Worker;
  friend struct RuntimeAccess;
  explicit Txn(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A typed method: requests of type Req answered with Resp, each a trivially copyable type or a
// protobuf message (see messaging/codec.h).
template <typename Req, typename Resp>
struct Method {
  uint16_t id;

  absl::Status Serve(Runtime& rt,
                     std::function<absl::StatusOr<Resp>(uint32_t from, const Req&)> fn) const {
    return rt.Handle(id, [fn = std::move(fn)](const Request& r) -> absl::StatusOr<std::string> {
      absl::StatusOr<Req> req = RpcCodec<Req>::Decode(r.payload);
      if (!req.ok()) return absl::InvalidArgumentError(std::string(req.status().message()));
      absl::StatusOr<Resp> resp = fn(r.from, *req);
      if (!resp.ok()) return resp.status();
      return RpcCodec<Resp>::Encode(*resp);
    });
  }
  absl::StatusOr<Resp> Call(Worker& w, uint32_t node, const Req& req,
                            absl::Duration timeout = absl::Seconds(10)) const {
    absl::StatusOr<std::string> bytes = w.Call(node, id, RpcCodec<Req>::Encode(req), timeout);
    if (!bytes.ok()) return bytes.status();
    return RpcCodec<Resp>::Decode(*bytes);
  }
};

// A cluster application: what RunNode runs on every node.
struct App {
  // Shown in logs and in the READY line //tools:cluster reads.
  std::string name = "app";
  // Registers handlers; runs after the node joined, before it serves requests. May be empty.
  std::function<absl::Status(Runtime&)> setup;
  // The application. Runs once the cluster has formed and this node serves requests; the node
  // keeps serving until every member's `run` has returned (or the member left), then leaves.
  // Empty: the node serves until SIGINT/SIGTERM (what //tools:node does).
  std::function<absl::Status(Runtime&)> run;
  // False: the node leaves as soon as its own `run` returns, without waiting for the other
  // members' (for a client that joins a cluster of serving nodes, e.g. a shell).
  bool wait_for_peers = true;
};

// The main function of a node binary: parses the standard node flags (--config, --node_id,
// --provider, --endpoint, --poll, --workers, --log_level, ...; --help lists them) with absl,
// starts the Runtime, runs app.setup, serves, runs app.run, waits for the other nodes' apps,
// leaves. Returns the process exit status: 0 when this node's app succeeded, 1 when it failed
// or the node could not start, 2 for bad flags or configuration. Call it from main() once.
int RunNode(int argc, char** argv, const App& app);

}  // namespace farm

#endif  // FARM_FARM_H_
