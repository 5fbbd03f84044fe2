// Fabric: one-sided RDMA over libfabric.
//
// This is the only part of the project that talks to libfabric (or verbs). Everything above
// platform/ sees opaque endpoint addresses, registration handles and Status values.
//
// A Fabric owns one reliable-datagram (FI_EP_RDM) endpoint, one completion queue and one address
// vector. RDM works on every provider we support: verbs (through ofi_rxm), tcp;ofi_rxm, tcp and
// shm. We use only RMA READ and WRITE: no atomics and no remote CQ data, because SoftiWARP (siw)
// has neither.
//
// Progress: shm and tcp;ofi_rxm make progress only when someone polls the completion queue, even
// for operations that *target* this process. Every process that serves memory must therefore call
// Progress() regularly (see Poller), and a thread waiting for its own operations drives progress
// itself, so waiting never depends on another thread being awake.
//
// Example:
//   FabricOptions opts;
//   opts.provider = "tcp;ofi_rxm";
//   opts.bind_host = "127.0.0.1";
//   ASSIGN_OR_RETURN(std::unique_ptr<Fabric> fabric, Fabric::Open(opts));
//   ASSIGN_OR_RETURN(auto mr, fabric->Register(buf, len));
//   ASSIGN_OR_RETURN(PeerId peer, fabric->AddPeer(peer_address_bytes));
//   OpBatch batch(fabric.get());
//   batch.Read(peer, RemoteBuffer{raddr, rkey}, mr->Slice(buf, 64));
//   RETURN_IF_ERROR(batch.Wait(absl::Seconds(5)));
//
// Per-thread channels (FaRM's thread model): Fabric::OpenChannel gives a thread an initiator
// context of its own, a FabricChannel, with its own endpoint(s) and its own completion queue. An
// OpBatch built on a channel posts on the channel's endpoint, and its Wait reaps only the
// channel's queue: the thread sees its own completions and nobody else's, without a hand-off
// through a queue that other threads (or the poller) also read. The Fabric's own endpoint keeps
// serving this process's memory to peers and keeps carrying Fabric-level OpBatches.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<FabricChannel> channel, fabric->OpenChannel());
//   OpBatch batch(channel.get());  // on the thread that owns `channel`
//   batch.Read(peer, RemoteBuffer{raddr, rkey}, mr->Slice(buf, 64));
//   RETURN_IF_ERROR(batch.Wait(absl::Seconds(5)));
//
// Environment: a program that links this sets FI_OFI_RXM_USE_SRX=1 before main() unless it is set
// already: on libfabric 1.17, closing a verbs;ofi_rxm endpoint without ofi_rxm's shared receive
// context can crash (fabric.cc says why). Open warns when it was turned off.
//
// Thread safety: all methods of Fabric are safe for concurrent use (the endpoint is opened with
// FI_THREAD_SAFE). An OpBatch is owned by one thread; a FabricChannel, and every OpBatch built
// on it, by one thread at a time.
#ifndef FARM_PLATFORM_FABRIC_H_
#define FARM_PLATFORM_FABRIC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "platform/doorbell.h"
#include "platform/mutex.h"

namespace farm {

// Handle of a peer endpoint inserted with Fabric::AddPeer.
using PeerId = uint64_t;

// The provider names a user may pass. "auto" picks verbs when an RDMA device is present,
// else tcp;ofi_rxm.
inline constexpr const char* kProviderNames[] = {"auto", "verbs", "tcp;ofi_rxm",
                                                 "tcp",  "shm",   "sockets"};

// Endpoint types. RDM (reliable datagram) works on every provider (verbs through ofi_rxm); MSG
// (reliable connected, like the RC queue pairs FaRM uses) only on verbs and tcp, with one
// connection per peer and direction. kAuto picks MSG for the tcp provider (whose RDM endpoint is
// tcp;ofi_rxm) and RDM otherwise.
enum class EndpointType { kAuto, kRdm, kMsg };

// Parses "auto", "rdm" or "msg".
absl::StatusOr<EndpointType> ParseEndpointType(absl::string_view s);
std::string EndpointTypeName(EndpointType type);

struct FabricOptions {
  // One of kProviderNames.
  std::string provider = "auto";
  EndpointType endpoint = EndpointType::kAuto;
  // Local IP address (or host name) to bind network providers to, e.g. "127.0.0.1". Empty lets
  // the provider choose. Ignored by shm.
  std::string bind_host;
  // Give the completion queue a file-descriptor wait object where the provider has one, so that
  // WaitForProgress can block (an adaptive poller's idle wait). It is not free: with it, every
  // progress call of tcp;ofi_rxm goes through the provider's wait set (epoll_wait instead of
  // poll), and a target node's busy poller with a wait object added 0.7-1.4 us to an 8-byte
  // READ's p50 (fabric_bench --compare_bare). A busy-polling node does not need it.
  bool wait_object = true;
};

// OK if `provider` is one of kProviderNames; otherwise InvalidArgument naming it and listing
// the names.
absl::Status CheckProvider(absl::string_view provider);

// Resolves "auto" to the provider it stands for on this machine; other names are returned as
// they are. Never fails.
std::string ResolveProvider(absl::string_view provider);

// True if the machine has an RDMA device that libfabric's verbs provider can open.
bool HasRdmaDevice();

// The shm provider's shared-memory files (in /dev/shm) of this project's endpoints are named
// kShmNamePrefix + "PID-N-RANDOM".
inline constexpr char kShmNamePrefix[] = "farm-";
// A fresh name for this process's next shm endpoint.
std::string ShmEndpointName();
// Removes the files in `dir` named by ShmEndpointName() whose process no longer exists (a node
// killed with SIGKILL cannot remove its own); returns how many. Every shm endpoint calls it
// before it creates its own file.
int RemoveStaleShmFiles(const std::string& dir = "/dev/shm");

class Fabric;

// A registered piece of local memory. Remote peers may READ and WRITE it when they know
// remote_base() and key(); local operations use it as source or sink. Deregisters on
// destruction; the memory itself is owned by the caller and must outlive the registration.
class MemoryRegistration {
 public:
  MemoryRegistration(const MemoryRegistration&) = delete;
  MemoryRegistration& operator=(const MemoryRegistration&) = delete;
  ~MemoryRegistration();

  char* base() const { return base_; }
  size_t size() const { return size_; }
  // Remote key that peers pass with their READs and WRITEs.
  uint64_t key() const { return key_; }
  // The address peers use for base(): the virtual address when the provider uses virtual
  // addressing (FI_MR_VIRT_ADDR), else 0 (offset addressing).
  uint64_t remote_base() const { return remote_base_; }
  // Local descriptor for FI_MR_LOCAL providers (verbs); may be null.
  void* desc() const { return desc_; }
  // True if [p, p + len) lies inside this registration.
  bool Contains(const void* p, size_t len) const;

 private:
  friend class Fabric;
  MemoryRegistration() = default;

  char* base_ = nullptr;
  size_t size_ = 0;
  uint64_t key_ = 0;
  uint64_t remote_base_ = 0;
  void* desc_ = nullptr;
  void* mr_ = nullptr;  // struct fid_mr*
};

// Where a one-sided operation lands on the peer: an address in the peer's addressing scheme
// (see MemoryRegistration::remote_base) and the region's key.
struct RemoteBuffer {
  uint64_t addr = 0;
  uint64_t key = 0;
};

// Local side of a one-sided operation: bytes inside a registration.
struct LocalBuffer {
  const MemoryRegistration* mr = nullptr;
  char* data = nullptr;
  size_t size = 0;
};

class OpBatch;
class FabricChannel;

class Fabric {
 public:
  // Opens the provider named in `options`. Errors: InvalidArgument for an unknown provider name,
  // Unavailable when the provider has no usable RDM endpoint with RMA on this machine (the message
  // lists what is available).
  static absl::StatusOr<std::unique_ptr<Fabric>> Open(const FabricOptions& options);

  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;
  ~Fabric();

  // The provider actually opened, e.g. "tcp;ofi_rxm" or "verbs;ofi_rxm".
  const std::string& provider() const { return provider_; }
  // kRdm or kMsg (never kAuto).
  EndpointType endpoint_type() const { return endpoint_; }
  // Opaque address of this endpoint; peers pass it to AddPeer.
  const std::string& address() const { return address_; }
  // Largest single READ or WRITE the provider accepts.
  size_t max_rma_size() const { return max_rma_size_; }
  // A WRITE longer than write_piece() and at most write_split_limit() bytes is posted as pieces
  // of write_piece() bytes (0: never split). Set for shm only, where a WRITE up to its inject size
  // is copied through the shared command buffer and a longer one goes through a cross-memory
  // attach with a round trip to the target's progress: 4 KiB + 1 byte took 4x as long as 4 KiB
  // (msg_bench, raw and framed). A WRITE promises nothing about the order its bytes land in, so
  // the pieces change nothing a reader may rely on.
  // Not where direct_writes(): a longer WRITE is then one system call whatever its size.
  size_t write_piece() const { return direct_writes() ? 0 : write_piece_; }
  size_t write_split_limit() const { return direct_writes() ? 0 : write_split_limit_; }
  // shm: true where this process places its WRITEs longer than shm's inject size (4 KiB) in the
  // target's memory itself, with a cross-memory attach (process_vm_writev), as it does its READs:
  // such a WRITE then completes without the target's progress, and its completion means that its
  // bytes are in the target's memory (the system call returned), as on RDMA hardware. libfabric's
  // shm takes that path (its "fast RMA") for a WRITE that does not ask for FI_DELIVERY_COMPLETE
  // once it found that it may attach to peers' processes (the same user, and ptrace access; not
  // with FI_SHM_DISABLE_CMA). Where it may not, a WRITE without that flag would complete as soon
  // as its bytes were copied into the peer's command queue, before they are placed: so WRITEs ask
  // for FI_DELIVERY_COMPLETE until shm says it may attach (it decides once, when it maps its first
  // peer; the endpoint's shared memory holds the answer). Shorter WRITEs keep the flag and go
  // through the target's command queue (a copy, no system call): direct, their commit latency
  // under load rose (txn_bench, 3 nodes on 2 cores: commit p50 44 -> 64 us), as shm holds a
  // spinlock of the target's shared memory across the system call. Measured with a target that
  // never polls: a WRITE placed directly completes in 2.4 us; one through the queue, never.
  bool direct_writes() const;
  // True where a WRITE's completion does not mean its bytes are in the target's memory: verbs on
  // iWARP (SoftiWARP included), where it only means the data was handed to the connection
  // (libfabric's verbs provider offers neither transmit- nor delivery-complete there, and ofi_rxm
  // passes RMA through). There OpBatch::Wait ends every batch that WRITEs to a peer with a READ
  // from that peer on the same connection: iWARP answers a READ only after the WRITEs before it
  // were placed, so the batch completes once the WRITEs are visible, or fails if they were lost.
  // For the same reason a WRITE completes there before a READ posted ahead of it on the same
  // connection, while libfabric 1.17's verbs provider assumes a connection's completions come in
  // posting order (out of order, it frees bookkeeping that is still linked, and a later
  // completion crashes in fi_cq_read). So a WRITE is posted only when no READ to its peer is in
  // flight on that endpoint (Fabric::Post waits, progressing the queue). Not FI_FENCE: SoftiWARP
  // queues an arriving READ request behind the WQE at the head of its send queue (siw's
  // siw_init_rresp), so a fenced WRITE waiting there for its own READ holds up the peer's READ,
  // and two ends fencing on one connection can wait for each other for good (a 3-node
  // msg-endpoint cluster of the SoftiWARP lane hung so once, with FI_FENCE).
  bool write_fence() const { return write_fence_; }

  // Registers [base, base + size) for local use and remote READ/WRITE. Errors carry the
  // provider's message; a failure caused by the locked-memory limit says how to raise it.
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> Register(void* base, size_t size);

  // Makes a peer reachable. `address` is the peer's address() bytes. With MSG endpoints this
  // starts connecting; operations to the peer wait for the connection (within their deadline).
  absl::StatusOr<PeerId> AddPeer(absl::string_view address);

  // Opens a channel: an initiator context for one thread (see FabricChannel). Errors: Unavailable
  // with the provider's message when it cannot open another endpoint or completion queue.
  // Every channel must be destroyed before the Fabric.
  absl::StatusOr<std::unique_ptr<FabricChannel>> OpenChannel();

  // Reads completions and fires their OpBatch bookkeeping. Returns the number of completions
  // seen plus, where the provider counts them (FI_RMA_EVENT: shm, tcp;ofi_rxm), the peers' READs
  // and WRITEs this endpoint served since the last call; 0 when idle. Safe to call from any
  // thread, concurrently.
  int Progress();

  // Blocks until this endpoint has something to progress (an incoming READ or WRITE, a
  // connection request, a completion) or `max_wait` passed, then progresses as Progress() does.
  // Returns how much happened: the completions seen, plus 1 if the provider's wait object
  // reported activity (a peer's READ served by this call produces no completion here, but
  // counts); 0 means max_wait passed quietly. For the poller of an idle node: unlike a sleep, a
  // peer's operation does not wait for the sleep to end.
  //
  // Blocking needs a completion queue with a file-descriptor wait object (tcp and tcp;ofi_rxm
  // have one) or, on shm (whose queue has none), the endpoint's doorbell (platform/doorbell.h):
  // a same-host peer that posts an operation to this endpoint while it sleeps wakes it. Elsewhere
  // (verbs, which serves peers' operations in hardware, without this node's progress) this
  // sleeps for max_wait and then progresses. Safe to call concurrently with Progress(); meant
  // for one thread.
  int WaitForProgress(absl::Duration max_wait);
  // Ends a WaitForProgress that sleeps on the doorbell now (so a poller stops without waiting
  // out its sleep); a no-op without one.
  void Wake();
  // MSG: connections this endpoint accepted (peers' main endpoints and channels) that are still
  // open; a connection its peer closed is closed here by the next Progress calls that read the
  // event queue. 0 for RDM.
  int accepted_connections() const;

  // True if WaitForProgress blocks on the provider's wait object or the doorbell instead of
  // sleeping.
  bool can_wait() const { return wait_fd_ >= 0 || bell_ != nullptr; }
  // shm: this endpoint's doorbell (peers ring it after posting to us), else null.
  const Doorbell* doorbell() const { return bell_.get(); }

  // shm endpoints of this process that were closed while another shm endpoint of this process
  // was open, and are kept open until the last one closes (see Fabric::~Fabric).
  static int ParkedShmEndpointsForTesting();

  // One posted operation's bookkeeping, defined in fabric.cc (opaque here).
  struct OpContext;

 private:
  friend class OpBatch;
  friend class FabricChannel;
  struct Handles;  // libfabric objects, defined in fabric.cc.

  // Reads the completion queue `cq` (a struct fid_cq*) dry and fires the OpBatch bookkeeping of
  // each completion. Returns the number of completions seen.
  static int ReapCompletions(void* cq);
  // The address `peer` was added with (AddPeer), or NotFound.
  absl::StatusOr<std::string> PeerAddress(PeerId peer) const;
  // MSG: creates an endpoint on `eq` and `cq` (struct fid_eq*, fid_cq*) and starts connecting it
  // to the passive endpoint at `address`; FI_CONNECTED arrives on `eq`. `created`, if set, is
  // called with the endpoint before it connects: whoever reads `eq` must be able to tell the
  // endpoint's events from then on. On failure the endpoint is closed (after `created`).
  absl::Status ConnectMsg(absl::string_view address, void* eq, void* cq, void** ep,
                          const std::function<void(void*)>& created = nullptr);

  Fabric();
  // One attempt of Open.
  static absl::StatusOr<std::unique_ptr<Fabric>> OpenOnce(const FabricOptions& options);
  // Closes every libfabric object in `h` and frees the operations left on its queue.
  static void CloseHandles(Handles* h);
  absl::Status OpenEndpoint();
  // MSG: accepts connection requests and tracks connection state. Returns events handled.
  int ProgressConnections();
  // Peers' operations served since the last call (0 without a remote-access counter).
  int RemoteAccesses();
  // The endpoint and destination to post an operation to `peer` on; for MSG, waits up to
  // `timeout` for the connection.
  absl::Status EndpointFor(PeerId peer, absl::Duration timeout, void** ep, uint64_t* dest);
  // Posts one READ (is_read) or WRITE; retries while the provider is busy, driving progress,
  // for up to `timeout`, or until `abandon` (if set) returns an error, which it returns. The
  // clock is read only once the provider pushes back. `channel` null posts on the Fabric's own
  // endpoint.
  absl::Status Post(FabricChannel* channel, bool is_read, PeerId peer, RemoteBuffer remote,
                    LocalBuffer local, OpContext* ctx, absl::Duration timeout,
                    const std::function<absl::Status()>& abandon, bool placed);

  std::unique_ptr<Handles> h_;
  std::string provider_;
  std::string address_;
  size_t max_rma_size_ = 0;
  size_t write_piece_ = 0;
  size_t write_split_limit_ = 0;
  bool virt_addr_ = false;
  EndpointType endpoint_ = EndpointType::kRdm;
  uint64_t write_completion_ = 0;  // FI_DELIVERY_COMPLETE, or FI_TRANSMIT_COMPLETE
  // What a WRITE of a batch that does not need placement (OpBatch::set_placed_completion)
  // asks for: 0 where that is cheaper (tcp), else write_completion_ (shm: see Create).
  uint64_t unplaced_completion_ = 0;
  bool attach_writes_ = false;     // shm offers its own path for WRITEs (direct_writes())
  bool write_fence_ = false;
  // Where write_fence(): the fence READs' landing place (their bytes are never looked at).
  alignas(64) char fence_buffer_[64] = {};
  std::unique_ptr<MemoryRegistration> fence_mr_;
  int wait_fd_ = -1;               // The CQ's wait object (owned by libfabric), or -1.
  std::unique_ptr<Doorbell> bell_;  // shm: see doorbell()
  // shm only: this process's posts to one peer take turns on a sleeping lock (by PeerId, striped).
  // shm holds a spinlock in the peer's shared memory across the whole operation (a READ's
  // process_vm_readv included); when this process's threads outnumber its cores, a thread
  // preempted while holding it left the others spinning out their time slices (43 % of a
  // 2-thread kvbench client's time on one core, measured with perf). Waiting here sleeps.
  static constexpr size_t kPostStripes = 64;
  std::unique_ptr<std::mutex[]> post_mu_;
  // Channels not yet destroyed; the destructor complains if some outlive the Fabric.
  std::atomic<int> open_channels_{0};
};

// FabricChannel: one thread's initiator context on a Fabric.
//
// A channel has its own completion queue and its own endpoint(s), opened on the Fabric's domain
// (so every MemoryRegistration of the Fabric works on it) and reaching the same PeerIds:
//  - RDM (shm, tcp;ofi_rxm, verbs;ofi_rxm): one endpoint. It shares the Fabric's address vector
//    where the provider lets two endpoints bind one; otherwise it keeps its own and inserts a
//    peer's address the first time it posts to it, so PeerIds mean the same on every channel.
//  - MSG (tcp, verbs): one connection per peer, set up on the first operation to that peer (the
//    post waits for it, within the operation's timeout) and accepted by the peer's passive
//    endpoint like any other.
// Nothing here is provider-specific: verbs (RDM through ofi_rxm, and MSG) takes the same path as
// the software providers, though only shm, tcp;ofi_rxm and tcp are tested here.
//
// The channel only initiates. Peers' operations on this process's memory are served by the
// Fabric's own endpoint, so the process still needs its Poller (or someone calling
// Fabric::Progress) - also for a channel's operations that target this same process.
//
// Thread safety: owned by one thread at a time, like the OpBatches built on it; nothing in a
// channel is synchronized. Destroy it before its Fabric, and only when its batches have
// completed (operations still in flight are abandoned: their bookkeeping is never freed).
class FabricChannel {
 public:
  FabricChannel(const FabricChannel&) = delete;
  FabricChannel& operator=(const FabricChannel&) = delete;
  ~FabricChannel();

  Fabric* fabric() const { return fabric_; }

  // Reads this channel's completion queue and fires its OpBatch bookkeeping. Returns the number
  // of completions seen (only this channel's operations; 0 when none completed).
  int Progress();

 private:
  friend class OpBatch;
  friend class Fabric;
  struct Handles;  // libfabric objects, defined in fabric.cc.

  explicit FabricChannel(Fabric* fabric);
  absl::Status Open();
  // The endpoint and destination to post to `peer` on; inserts the peer's address or connects
  // to it (MSG, waiting up to `timeout`) the first time.
  absl::Status EndpointFor(PeerId peer, absl::Duration timeout, void** ep, uint64_t* dest);
  absl::Status Connect(PeerId peer, absl::Duration timeout, void** ep);

  Fabric* const fabric_;
  std::unique_ptr<Handles> h_;
  uint32_t progress_calls_ = 0;
};

// A set of one-sided operations posted together and waited for together.
//
// Operations are posted immediately (Read/Write return as soon as the provider accepted them);
// Wait() drives progress until all of them completed or the deadline passed. If Wait() times
// out, the operations still in flight keep their bookkeeping alive until they complete, but the
// local buffers they use must not be reused: treat the peer as unreachable.
//
// A batch built on a Fabric posts on the Fabric's endpoint and completes on its shared queue
// (any thread's Progress may reap it); one built on a FabricChannel posts on the channel's
// endpoint, and only the channel's queue completes it: Wait progresses nothing else.
//
// Owned by one thread. Destroying a batch with operations in flight abandons them as above.
class OpBatch {
  struct State;

 public:
  explicit OpBatch(Fabric* fabric);
  // `channel` must outlive the batch; use both on the channel's owner thread only.
  explicit OpBatch(FabricChannel* channel);
  OpBatch(const OpBatch&) = delete;
  OpBatch& operator=(const OpBatch&) = delete;
  ~OpBatch();

  // Posts a READ of local.size bytes from `remote` on `peer` into `local`. Errors here
  // (invalid buffer, provider refusal) are also reported by Wait().
  absl::Status Read(PeerId peer, RemoteBuffer remote, LocalBuffer local);
  // Posts a WRITE of `local` to `remote` on `peer`.
  absl::Status Write(PeerId peer, RemoteBuffer remote, LocalBuffer local);

  // Waits for every posted operation. Returns the first error seen, DeadlineExceeded if some
  // did not complete within `timeout`, or OK.
  absl::Status Wait(absl::Duration timeout);
  // As above, and gives up early with `abandon`'s error once it returns one. It is asked while
  // the operations make no progress (every few microseconds of polling): it must be cheap, e.g.
  // an atomic load that says whether anything changed. Operations still in flight are
  // abandoned as after a timeout (see the class comment).
  absl::Status Wait(absl::Duration timeout, const std::function<absl::Status()>& abandon);

  // Operations posted and not yet completed.
  int outstanding() const;

  // Asked between the attempts of a post that finds the provider busy (-FI_EAGAIN, e.g. ofi_rxm
  // connecting to a peer that died): its error ends the post at once instead of after the post
  // timeout (10 s). Cheap, like Wait's `abandon`; null (the default): retry until the timeout.
  void set_post_abandon(std::function<absl::Status()> abandon) {
    post_abandon_ = std::move(abandon);
  }

  // false: this batch's WRITEs may complete once their local buffers may be reused, before
  // their bytes are in the target's memory. For protocols that learn of delivery otherwise, as
  // the messenger does (a reply, a head report). On tcp;ofi_rxm and tcp they then ask for
  // neither FI_DELIVERY_COMPLETE nor FI_TRANSMIT_COMPLETE, which there both cost an
  // acknowledgement message from the target and its progress (two system calls on each side
  // and a round trip before the WRITE completes). shm and verbs complete them as placed WRITEs:
  // without the flag, shm places every WRITE itself with process_vm_writev (its "fast RMA",
  // where it may attach: see direct_writes), a system call under a spinlock of the target's
  // shared memory, where a short delivery-complete WRITE is a copy through the target's queue
  // (an RPC round trip measured 4.4 against 1.4 us, msg_bench); verbs asks for nothing either
  // way (iWARP keeps its fence READ, see Fabric::write_fence). Default true.
  void set_placed_completion(bool placed) { placed_ = placed; }

  // The batch's operations in flight, as a handle that outlives the batch: done() once each
  // of them completed. Operations that never complete (their peer is gone) keep it not done
  // until their endpoint closes, which discards them.
  class InFlight {
   public:
    bool done() const;

   private:
    friend class OpBatch;
    std::shared_ptr<const State> state_;
  };
  InFlight in_flight() const;

 private:
  friend class Fabric;
  absl::Status Add(bool is_read, PeerId peer, RemoteBuffer remote, LocalBuffer local);
  // Posts one operation with its own completion context.
  absl::Status Post(bool is_read, PeerId peer, RemoteBuffer remote, LocalBuffer local);

  Fabric* fabric_;
  FabricChannel* channel_ = nullptr;  // null: the Fabric's own endpoint and queue
  std::shared_ptr<State> state_;
  absl::Duration post_timeout_ = absl::Seconds(10);
  std::function<absl::Status()> post_abandon_;
  bool placed_ = true;  // set_placed_completion
  // Where fabric_->write_fence(): per peer WRITTEN to since the last Wait, a remote byte of it.
  std::vector<std::pair<PeerId, RemoteBuffer>> fence_;
};

}  // namespace farm

#endif  // FARM_PLATFORM_FABRIC_H_
