#include "platform/fabric.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "platform/clock.h"
#include "platform/doorbell.h"
#include "platform/fault_injection_hook.h"
#include "platform/idle_yield.h"
#include "platform/libsiw_post_send.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

constexpr uint32_t kFiVersion = FI_VERSION(1, 17);
constexpr size_t kCqSize = 4096;
constexpr size_t kMaxRma = size_t{1} << 30;
// shm: WRITEs of up to this many inject-sized pieces are split (Fabric::write_piece). Measured
// with msg_bench --sizes on the 2-vCPU VM: see README, "Messaging".
constexpr size_t kShmSplitPieces = 2;

// An event read from an event queue may carry an fi_info that its reader must free: always a
// connection request's (freed where it is handled), and with some providers (tcp) the other
// connection events' too (found by LeakSanitizer). Frees it for every event but FI_CONNREQ.
void FreeEventInfo(uint32_t event, ssize_t n, const char* buf) {
  if (event == FI_CONNREQ || n < static_cast<ssize_t>(sizeof(fi_eq_cm_entry))) return;
  fi_info* info = reinterpret_cast<const fi_eq_cm_entry*>(buf)->info;
  if (info != nullptr) fi_freeinfo(info);
}

// Under ThreadSanitizer: the provider plays the NIC. While a libfabric call drives progress it
// places peers' one-sided WRITEs into our registered memory, and the results of our READs into
// our buffers, with memcpy (an interceptor TSan sees, called from uninstrumented code) - the DMA
// of RDMA hardware, which is by design not synchronised with the code that polls that memory
// (messaging/ring.cc says why that is safe). TSan would report every such copy against the
// ring's loads, and when the copying thread's history is gone it cannot even attribute the
// write to libfabric for a suppression (CI, 2026-11-22: "failed to restore the stack" against
// DecodeHeadSlot). So each call into the provider that can copy data runs with this thread's
// memory accesses ignored: ThreadIgnoreBegin hides the provider's reads and writes of memory
// only, while its mutexes and the thread's other synchronisation stay visible (unlike
// `called_from_lib`, which hides those too; see tools/sanitizers/tsan.supp). Our own code never
// runs inside these calls (libfabric has no callbacks), so no access of ours is hidden.
// The same holds for the calls that write the shm provider's shared regions: fi_av_insert and
// fi_enable both copy peer names into every bound endpoint's region (libfabric 1.17,
// smr_map_to_endpoint), the insert under the AV's lock and the enable without it, so a channel
// enabled while the membership thread inserts a peer (both allowed at FI_THREAD_SAFE) writes the
// same bytes twice at once: libfabric's own benign race, which TSan reported (kv_test, TSan
// lane, 2026-11-27).
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
class ProviderCopies {
 public:
  ProviderCopies() { __tsan_ignore_thread_begin(); }
  ~ProviderCopies() { __tsan_ignore_thread_end(); }
  ProviderCopies(const ProviderCopies&) = delete;
  ProviderCopies& operator=(const ProviderCopies&) = delete;
};
#else
class ProviderCopies {
 public:
  ProviderCopies() {}
};
#endif

// Calls `f` (a libfabric call) as a ProviderCopies scope and returns its result.
template <typename F>
auto ProviderCall(F&& f) {
  ProviderCopies scope;
  return f();
}

// ofi_rxm over verbs, on libfabric 1.17, and the close of an endpoint. Unless ofi_rxm uses a
// shared receive context, verbs gives each connection flow control, and the two sides of a new
// connection send each other a credit message. rxm_close_conn (called by fi_close of the RDM
// endpoint, and by fi_av_remove) closes the connection's verbs endpoint first and reads the rest
// of its completion queue afterwards; a credit message still unread by then is handled on the
// freed endpoint (rxm_handle_credit -> rxm_post_recv -> fi_recv): SIGSEGV in ~Fabric, or an
// assertion in a debug build of libfabric (libfabric issue #11828 describes the same sequence,
// still open in 2.4). With a shared receive context (FI_OFI_RXM_USE_SRX=1, ofi_rxm's default on
// tcp already) verbs has no flow control, no credit message is ever sent, and receive buffers go
// back to the shared context, which is closed after the connections. We use only RMA, which
// needs no receive buffer at all, so nothing is lost. Set before main() (no other thread reads
// the environment yet); a value the user set is kept, and Fabric::Open warns if it is off.
constexpr char kRxmSharedReceive[] = "FI_OFI_RXM_USE_SRX";
[[maybe_unused]] const bool kRxmSharedReceiveSet = setenv(kRxmSharedReceive, "1", 0) == 0;

// libfabric's memory-registration cache, which verbs uses (tcp and shm do not), and memory
// monitors. To learn when cached memory is freed, libfabric 1.17's default monitor, "memhooks",
// patches the code of libc's mmap, munmap, mremap, madvise, brk and shmdt: it overwrites their
// first bytes with a jump while the process runs, when the first verbs domain opens, and writes
// the original bytes back when the last one closes. Any other thread in those functions at that
// moment (malloc and free call madvise and munmap) runs half-written code; in-process test
// clusters open and close domains over and over, and crashed inside free (SIGSEGV in heap_trim,
// about 1 run in 30 of rpc_test on SoftiWARP). We register a few long-lived regions once per
// node, which a cache cannot speed up: max count 0 turns the cache off, and no monitor ever
// starts. Set before main(), like the variable above; a value the user set is kept, and
// Fabric::Open warns if it turns the cache on.
constexpr char kMrCacheMaxCount[] = "FI_MR_CACHE_MAX_COUNT";
[[maybe_unused]] const bool kMrCacheMaxCountSet = setenv(kMrCacheMaxCount, "0", 0) == 0;

// True if the environment turned libfabric's registration cache on (see above).
bool MrCacheOn() {
  const char* v = std::getenv(kMrCacheMaxCount);
  if (v == nullptr) return false;
  uint64_t n = 0;
  return !absl::SimpleAtoi(v, &n) || n != 0;
}

// True unless the environment turned ofi_rxm's shared receive context off (see above).
bool RxmSharedReceiveOn() {
  const char* v = std::getenv(kRxmSharedReceive);
  if (v == nullptr) return true;
  const std::string s = absl::AsciiStrToLower(v);
  return !(s == "0" || s == "no" || s == "false" || s == "off");
}

std::string FiError(const char* what, int ret) {
  return absl::StrCat(what, " failed: ", fi_strerror(-ret), " (", ret, ")");
}

// The libfabric provider string we ask for, given a user-facing name and the endpoint type.
// verbs gives RDM only through the ofi_rxm utility provider.
std::string LibfabricProviderName(absl::string_view provider, EndpointType type) {
  if (provider == "verbs" && type == EndpointType::kRdm) return "verbs;ofi_rxm";
  return std::string(provider);
}

// "10.0.0.1" and "7300" from a sockaddr_in/sockaddr_in6 endpoint name (MSG addresses).
bool SockaddrToHostPort(const std::string& addr, std::string* host, std::string* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.size() >= sizeof(sockaddr_in) &&
      reinterpret_cast<const sockaddr*>(addr.data())->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, addr.data(), sizeof(in));
    inet_ntop(AF_INET, &in.sin_addr, buf, sizeof(buf));
    *port = std::to_string(ntohs(in.sin_port));
  } else if (addr.size() >= sizeof(sockaddr_in6) &&
             reinterpret_cast<const sockaddr*>(addr.data())->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, addr.data(), sizeof(in6));
    inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof(buf));
    *port = std::to_string(ntohs(in6.sin6_port));
  } else {
    return false;
  }
  *host = buf;
  return true;
}

std::string DescribeLimit(rlim_t v) {
  if (v == RLIM_INFINITY) return "unlimited";
  return absl::StrCat(v / 1024, " KiB");
}

// Lists the RDM+RMA providers this machine offers, for error messages.
std::string AvailableProviders() {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_RMA;
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* info = nullptr;
  std::set<std::string> names;
  if (fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints, &info) == 0) {
    for (fi_info* i = info; i; i = i->next) names.insert(i->fabric_attr->prov_name);
    fi_freeinfo(info);
  }
  fi_freeinfo(hints);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// What libfabric's shm decided about cross-memory attach for one of our endpoints
// (Fabric::direct_writes), read where shm keeps it: the head of the endpoint's shared-memory
// region, /dev/shm/<endpoint name> (libfabric 1.17's struct smr_region, include/ofi_shm.h,
// SMR_VERSION 4). The head is checked against what this process knows (the version, our pid):
// a region of another layout gives no answer, and WRITEs keep asking for delivery-complete.
class ShmAttachState {
 public:
  static std::unique_ptr<ShmAttachState> Open(const std::string& name) {
    const int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) {
      spdlog::warn(
          "shm: cannot open {} to learn whether WRITEs may skip the target ({}); they "
          "wait for its progress",
          name, strerror(errno));
      return nullptr;
    }
    void* p = mmap(nullptr, sizeof(Head), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return nullptr;
    const Head* head = static_cast<const Head*>(p);
    if (head->version != kVersion || head->pid != getpid()) {
      spdlog::warn(
          "shm: the region {} is not of the layout this build knows (libfabric 1.17's; "
          "version {}); WRITEs wait for their target's progress",
          name, head->version);
      munmap(p, sizeof(Head));
      return nullptr;
    }
    return std::unique_ptr<ShmAttachState>(new ShmAttachState(head));
  }
  ~ShmAttachState() { munmap(const_cast<Head*>(head_), sizeof(Head)); }

  // Whether shm places this endpoint's WRITEs to `self` (its own endpoint) or to other endpoints
  // itself. shm decides each once (when it maps the first such peer) and never changes it.
  bool on(bool self) {
    std::atomic<bool>& known = self ? self_on_ : peer_on_;
    if (known.load(std::memory_order_relaxed)) return true;
    const uint8_t v =
        __atomic_load_n(self ? &head_->cma_cap_self : &head_->cma_cap_peer, __ATOMIC_ACQUIRE);
    if (v != kOn) return false;
    known.store(true, std::memory_order_relaxed);
    return true;
  }

 private:
  struct Head {
    uint8_t version;
    uint8_t resv;
    uint16_t flags;
    int pid;
    uint8_t cma_cap_peer;  // SMR_CMA_CAP_NA 0, _ON 1, _OFF 2
    uint8_t cma_cap_self;
  };
  static constexpr uint8_t kVersion = 4;
  static constexpr uint8_t kOn = 1;
  explicit ShmAttachState(const Head* head) : head_(head) {}
  const Head* const head_;
  std::atomic<bool> peer_on_{false}, self_on_{false};
};

// Whether FI_SHM_DISABLE_CMA turns shm's cross-memory attach off.
bool ShmAttachDisabled() {
  // As libfabric reads its boolean parameters.
  const char* v = std::getenv("FI_SHM_DISABLE_CMA");
  if (v == nullptr) return false;
  const std::string s = absl::AsciiStrToLower(v);
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

}  // namespace

absl::StatusOr<EndpointType> ParseEndpointType(absl::string_view s) {
  if (s == "auto") return EndpointType::kAuto;
  if (s == "rdm") return EndpointType::kRdm;
  if (s == "msg") return EndpointType::kMsg;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown endpoint type '", s, "'; use auto, rdm or msg"));
}

std::string EndpointTypeName(EndpointType type) {
  switch (type) {
    case EndpointType::kAuto:
      return "auto";
    case EndpointType::kRdm:
      return "rdm";
    case EndpointType::kMsg:
      return "msg";
  }
  return "?";
}

absl::Status CheckProvider(absl::string_view provider) {
  for (const char* p : kProviderNames) {
    if (provider == p) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown provider '", provider, "'; use one of: ", absl::StrJoin(kProviderNames, ", ")));
}

bool HasRdmaDevice() {
  DIR* dir = opendir("/sys/class/infiniband");
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') found = true;
  }
  closedir(dir);
  return found;
}

std::string ResolveProvider(absl::string_view provider) {
  if (provider != "auto") return std::string(provider);
  return HasRdmaDevice() ? "verbs" : "tcp;ofi_rxm";
}

class InFlightOps;

// Per-operation bookkeeping handed to libfabric as the operation context. fi_context2 must come
// first: providers that ask for FI_CONTEXT/FI_CONTEXT2 use that space.
struct Fabric::OpContext {
  // Where the context is in its life. Only the thread that moves it from kPosted to kDone acts
  // on its completion: a completion reported twice finds it kDone or kFree and is dropped (see
  // InFlightOps).
  enum Life : uint32_t { kFree = 0, kPosted = 1, kDone = 2 };

  fi_context2 fi_ctx;
  std::atomic<uint32_t> life{kFree};
  OpContext* prev = nullptr;  // in `owner`'s list of posted operations, or its free queue
  OpContext* next = nullptr;
  InFlightOps* owner = nullptr;  // the queue it completes on
  std::shared_ptr<OpBatch::State> state;
  bool is_read = false;
  PeerId peer = 0;
  uint64_t remote_addr = 0;
  size_t len = 0;
  std::atomic<int>* read_gate = nullptr;  // iWARP READs: their count in the endpoint's ReadGate
};

// The operations posted on one completion queue (a Fabric's or a channel's) and not yet reaped,
// and the storage of their contexts.
//
// A provider never completes an operation whose peer went away (shm, rxm), and closing the queue
// does not hand its context back either: the queue's owner takes back what is left here once the
// queue is closed, so no operation's bookkeeping outlives its Fabric (LeakSanitizer found them
// at process exit).
//
// Contexts are never handed back to malloc while the queue is open, and a released one is reused
// only after kQuarantine others were released after it. A completion that names a context no
// longer posted then reads a context in state kFree (or kDone) and is dropped, instead of
// freeing heap memory twice. That happens on verbs over SoftiWARP (libfabric 1.17, rdma-core's
// libsiw): libsiw writes a send request into the queue pair's memory-mapped send queue and then
// rings the kernel's doorbell; when the connection is closing the doorbell fails, the call fails
// (verbs turns it into -FI_EAGAIN, so the post is tried again) and verbs and ofi_rxm free their
// contexts of the request, but the request stays valid in the queue, and when the queue pair
// enters its error state the kernel flushes it: a completion whose context was freed, or already
// reused for another operation. Without this, in-process test clusters on SoftiWARP freed an
// OpContext twice about once in 30 runs of runtime_test with netem's delay (glibc: "double free
// detected in tcache 2", then garbage in unrelated objects). What cannot be undone here: a flush
// that lands on a reused verbs context ends that context's current operation early (with an
// error, and its own completion later names the next user of the context). Only operations
// posted while a peer's connection is closing start that; on hardware RNICs a request posted to
// a queue pair in the error state is flushed with its own context.
class InFlightOps {
 public:
  using OpContext = Fabric::OpContext;
  static constexpr size_t kQuarantine = 1024;

  InFlightOps() {
    posted_.prev = posted_.next = &posted_;
    free_.prev = free_.next = &free_;
  }
  ~InFlightOps() = default;  // storage_ holds every context

  // A context in state kPosted, listed before posting: the completion may be reaped on another
  // thread at once.
  OpContext* Acquire() {
    std::lock_guard<std::mutex> g(mu_);
    OpContext* c;
    if (free_count_ > kQuarantine) {
      c = free_.next;
      Unlink(c);
      --free_count_;
    } else {
      storage_.push_back(std::make_unique<OpContext>());
      c = storage_.back().get();
    }
    c->owner = this;
    c->life.store(OpContext::kPosted, std::memory_order_relaxed);
    PushFront(&posted_, c);
    return c;
  }

  // Takes `c` from the posted list and puts it at the end of the free queue. The caller moved
  // it from kPosted to kDone (so no other thread releases it), or the queue is closed.
  void Release(OpContext* c) {
    c->state.reset();
    c->read_gate = nullptr;
    std::lock_guard<std::mutex> g(mu_);
    Unlink(c);
    c->life.store(OpContext::kFree, std::memory_order_relaxed);
    PushBack(&free_, c);
    ++free_count_;
  }

  // Releases every operation still posted; call after the queue was closed.
  void ReleaseAll() {
    std::vector<OpContext*> left;
    {
      std::lock_guard<std::mutex> g(mu_);
      for (OpContext* c = posted_.next; c != &posted_; c = c->next) left.push_back(c);
    }
    for (OpContext* c : left) Release(c);
  }

 private:
  static void Unlink(OpContext* c) {
    c->prev->next = c->next;
    c->next->prev = c->prev;
  }
  static void PushFront(OpContext* head, OpContext* c) {
    c->next = head->next;
    c->prev = head;
    head->next->prev = c;
    head->next = c;
  }
  static void PushBack(OpContext* head, OpContext* c) {
    c->prev = head->prev;
    c->next = head;
    head->prev->next = c;
    head->prev = c;
  }

  std::mutex mu_;
  OpContext posted_;  // sentinels of circular lists
  OpContext free_;
  size_t free_count_ = 0;
  std::vector<std::unique_ptr<OpContext>> storage_;
};

// shm endpoints of this process. libfabric 1.17's shm maps a peer that is an endpoint of the same
// process by pointing at that endpoint's own region (smr_map_to_region finds it by name), and
// closing the endpoint unmaps the region while the peer's map keeps the pointer. That happens
// only with several nodes in one process (the in-process test clusters: a node leaves while the
// others still talk to it until the membership tells them); peers in other processes map the
// region themselves, and cost nothing here. Two kinds of access follow a close:
//  - An operation posted to it takes the spinlock inside the unmapped region: SIGSEGV, or a write
//    into whatever was mapped there since. So each such endpoint has a liveness record: a post to
//    it holds the record shared for the provider call and fails once it is closed; its Fabric
//    marks it closed, exclusively, before it closes the endpoint.
//  - The others' progress, which no post guards: a peer reaping the answer to an operation the
//    closed endpoint served returns the borrowed buffer into the closed endpoint's region (and
//    takes its lock); a peer serving a READ that the closed endpoint posted writes the answer
//    into it (smr_progress_resp_entry, smr_progress_cmd_rma). SIGSEGV in the peer's poller (ASan
//    rpc_test on shm, about 1 run in 75: a node stopped while the others served it). So an shm
//    endpoint closed while another of this process is open is parked instead: marked closed,
//    never progressed again, its libfabric objects (and so its region) kept until the last shm
//    endpoint of the process closes, which closes them all. One process per node, as deployed,
//    never parks.
struct LocalShmEndpoint {
  std::shared_mutex mu;  // shared: a post to this endpoint is in the provider; unique: closing
  bool closed = false;   // guarded by mu
};

class LocalShmEndpoints {
 public:
  static LocalShmEndpoints& Get() {
    static LocalShmEndpoints* const registry = new LocalShmEndpoints();
    return *registry;
  }
  std::shared_ptr<LocalShmEndpoint> Add(const std::string& address) {
    auto e = std::make_shared<LocalShmEndpoint>();
    std::lock_guard<std::mutex> l(mu_);
    by_address_[address] = e;
    return e;
  }
  // The live endpoint of this process at `address`, or null.
  std::shared_ptr<LocalShmEndpoint> Find(const std::string& address) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = by_address_.find(address);
    return it == by_address_.end() ? nullptr : it->second;
  }
  // Marks the endpoint closed once no post to it is in the provider, and forgets it. If another
  // shm endpoint of this process is still open, parks `close` (the endpoint's libfabric objects
  // stay open) and returns nothing; otherwise returns every parked close and `close`, to run now.
  std::vector<std::function<void()>> CloseOrPark(const std::string& address, LocalShmEndpoint& e,
                                                 std::function<void()> close) {
    {
      std::unique_lock<std::shared_mutex> l(e.mu);
      e.closed = true;
    }
    std::lock_guard<std::mutex> l(mu_);
    by_address_.erase(address);
    if (!by_address_.empty()) {
      parked_.push_back(std::move(close));
      return {};
    }
    std::vector<std::function<void()>> now = std::move(parked_);
    parked_.clear();
    now.push_back(std::move(close));
    return now;
  }
  int parked() {
    std::lock_guard<std::mutex> l(mu_);
    return static_cast<int>(parked_.size());
  }

 private:
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LocalShmEndpoint>> by_address_;
  std::vector<std::function<void()>> parked_;  // closes of parked endpoints
};

// iWARP only (Fabric::write_fence): per endpoint, the READs in flight to each peer (striped by
// PeerId), so that no WRITE is posted behind one on the same connection (see Fabric::Post).
struct ReadGate {
  static constexpr int kStripes = 64;
  ReadGate() {
    for (auto& r : reads) r.store(0, std::memory_order_relaxed);
  }
  // Held while a READ is counted and posted, and while a WRITE checks the count and is posted.
  std::mutex mu[kStripes];
  std::atomic<int> reads[kStripes];
};

struct Fabric::Handles {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;  // RDM
  fid_ep* ep = nullptr;  // RDM
  std::atomic<uint64_t> next_key{1};
  InFlightOps in_flight;  // operations on `cq` (see InFlightOps)
  ReadGate read_gate;     // iWARP only

  // MSG: a passive endpoint accepts peers' connections (which serve their operations on us);
  // each peer we send to gets an active endpoint of its own, connected by AddPeer.
  struct MsgPeer {
    fid_ep* ep = nullptr;
    // 0 connecting, 1 connected, -1 failed. Release stores pair with EndpointFor's acquire loads
    // (error is written before state becomes -1).
    std::atomic<int> state{0};
    std::string error;
    std::string address;  // the peer's passive endpoint, for channels' own connections
  };
  fi_info* msg_hints = nullptr;  // to resolve each peer's connection info
  fid_eq* eq = nullptr;
  fid_pep* pep = nullptr;
  farm::Mutex peers_mu;
  std::vector<std::unique_ptr<MsgPeer>> peers ABSL_GUARDED_BY(peers_mu);  // PeerId = index
  // RDM: each peer's address, for channels that cannot share `av`.
  absl::flat_hash_map<PeerId, std::string> rdm_addresses ABSL_GUARDED_BY(peers_mu);
  farm::Mutex eq_mu;  // one thread reads the event queue at a time
  std::vector<fid_ep*> accepted ABSL_GUARDED_BY(eq_mu);
  std::atomic<int> connecting{0};
  std::atomic<uint32_t> progress_calls{0};

  // Counts peers' READs and WRITEs served by this endpoint (FI_RMA_EVENT), where the provider
  // offers it: Progress() reports them, so an adaptive poller sees serving peers as activity.
  fid_cntr* remote_cntr = nullptr;
  std::atomic<uint64_t> remote_seen{0};

  // shm: this endpoint's liveness record, and those of the peers that are endpoints of this
  // process (see LocalShmEndpoints); has_local_peers keeps the lookup off other posts.
  std::shared_ptr<LocalShmEndpoint> local_shm;
  absl::flat_hash_map<PeerId, std::shared_ptr<LocalShmEndpoint>> local_peers
      ABSL_GUARDED_BY(peers_mu);
  std::atomic<bool> has_local_peers{false};

  // shm: the doorbells of peers on this host (all of them: shm reaches no other), by PeerId
  // (fi_addr_t: small, in insertion order), rung after every post to them. A peer whose id does
  // not fit, or that has no doorbell, is not rung (a sleeping peer then serves us late).
  static constexpr size_t kMaxBellPeers = 1024;
  std::vector<std::unique_ptr<Doorbell>> peer_bells ABSL_GUARDED_BY(peers_mu);
  std::array<std::atomic<Doorbell*>, kMaxBellPeers> bell_of{};
  // shm: see Fabric::direct_writes; self_peer is the PeerId of this endpoint's own address.
  std::unique_ptr<ShmAttachState> attach;
  std::atomic<PeerId> self_peer{std::numeric_limits<PeerId>::max()};
};

struct FabricChannel::Handles {
  fid_cq* cq = nullptr;
  InFlightOps in_flight;  // operations on `cq` (see InFlightOps)
  ReadGate read_gate;     // iWARP only
  // RDM: the channel's endpoint, bound to the Fabric's address vector or, where the provider
  // refuses a second endpoint on it, to own_av.
  fid_ep* ep = nullptr;
  fid_av* own_av = nullptr;
  absl::flat_hash_map<PeerId, fi_addr_t> own_addr;  // PeerId -> address in own_av
  // MSG: the channel's connections, by PeerId, and the event queue their events arrive on.
  fid_eq* eq = nullptr;
  absl::flat_hash_map<PeerId, fid_ep*> conns;
  std::unique_ptr<ShmAttachState> attach;  // shm: see Fabric::direct_writes
};

struct OpBatch::State {
  std::atomic<int> outstanding{0};
  farm::Mutex mu;
  absl::Status first_error ABSL_GUARDED_BY(mu);

  void Fail(absl::Status s) {
    farm::MutexLock l(&mu);
    if (first_error.ok()) first_error = std::move(s);
  }
};

MemoryRegistration::~MemoryRegistration() {
  if (mr_ != nullptr) fi_close(&static_cast<fid_mr*>(mr_)->fid);
}

bool MemoryRegistration::Contains(const void* p, size_t len) const {
  const char* c = static_cast<const char*>(p);
  return c >= base_ && len <= size_ && c - base_ <= static_cast<ptrdiff_t>(size_ - len);
}

Fabric::Fabric() : h_(std::make_unique<Handles>()) {}

Fabric::~Fabric() {
  fence_mr_.reset();  // before the domain closes
  if (int n = open_channels_.load(std::memory_order_relaxed); n > 0) {
    spdlog::error("a Fabric is destroyed while {} of its channels are open; destroy them first", n);
  }
  if (h_->local_shm != nullptr) {
    // Posts of this process to it finish, later ones fail; then it is closed, or parked until
    // the process's last shm endpoint closes (see LocalShmEndpoints).
    std::shared_ptr<Handles> h(std::move(h_));
    std::vector<std::function<void()>> closes = LocalShmEndpoints::Get().CloseOrPark(
        address_, *h->local_shm, [h] { CloseHandles(h.get()); });
    for (const std::function<void()>& close : closes) close();
    return;
  }
  CloseHandles(h_.get());
}

int Fabric::ParkedShmEndpointsForTesting() { return LocalShmEndpoints::Get().parked(); }

void Fabric::CloseHandles(Handles* h) {
  {
    farm::MutexLock l(&h->peers_mu);
    for (auto& p : h->peers) {
      if (p->ep) fi_close(&p->ep->fid);
    }
  }
  {
    farm::MutexLock l(&h->eq_mu);
    for (fid_ep* ep : h->accepted) fi_close(&ep->fid);
  }
  if (h->pep) {
    // Connection requests still unread in the event queue carry an fi_info that only their
    // reader frees (closing the queue does not): refuse them and free it.
    alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
    auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
    uint32_t event = 0;
    for (ssize_t n; (n = fi_eq_read(h->eq, &event, buf, sizeof(buf), 0)) != -FI_EAGAIN;) {
      if (n == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        if (fi_eq_readerr(h->eq, &err, 0) < 0) break;
        continue;
      }
      if (n < 0) break;
      FreeEventInfo(event, n, buf);
      if (event == FI_CONNREQ && entry->info != nullptr) {
        fi_reject(h->pep, entry->info->handle, nullptr, 0);
        fi_freeinfo(entry->info);
      }
    }
    fi_close(&h->pep->fid);
  }
  if (h->ep) fi_close(&h->ep->fid);
  if (h->remote_cntr) fi_close(&h->remote_cntr->fid);
  if (h->av) fi_close(&h->av->fid);
  if (h->cq) fi_close(&h->cq->fid);
  // Operations that never completed (their peer went away): nothing refers to them any more.
  h->in_flight.ReleaseAll();
  if (h->domain) fi_close(&h->domain->fid);
  if (h->eq) fi_close(&h->eq->fid);
  if (h->fabric) fi_close(&h->fabric->fid);
  if (h->info) fi_freeinfo(h->info);
  if (h->msg_hints) fi_freeinfo(h->msg_hints);
}

namespace {

// Enabling a verbs endpoint makes the RDMA connection manager listen on a port it picks itself.
// On iWARP (SoftiWARP included) that port is a TCP port of the host, but the RDMA CM's choice
// does not know the TCP stack's: now and then it picks one a TCP socket already uses, and the
// enable fails with EADDRINUSE (a verbs test cluster failed to start so in CI). Another attempt
// picks another port. The status of such a failure carries this payload.
constexpr char kAddressInUsePayload[] = "farm.fabric/address-in-use";
constexpr int kEnableAttempts = 8;

// fi_enable (or fi_listen) of `what`, as a status; tests replace the provider's answer at the
// sync point "Fabric::Enable" (an int*).
absl::Status EnableResult(const char* what, int ret) {
  FARM_SYNC_POINT_CALLBACK("Fabric::Enable", &ret);
  if (ret == 0) return absl::OkStatus();
  absl::Status s = absl::UnavailableError(FiError(what, ret));
  if (ret == -FI_EADDRINUSE) s.SetPayload(kAddressInUsePayload, absl::Cord("1"));
  return s;
}

bool AddressInUse(const absl::Status& s) {
  return s.GetPayload(kAddressInUsePayload).has_value();
}

std::string AfterAttempts(const absl::Status& s, int attempts) {
  return absl::StrCat(s.message(), " (", attempts,
                      " attempts: the ports the RDMA connection manager picked were in use)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Fabric>> Fabric::Open(const FabricOptions& options) {
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<std::unique_ptr<Fabric>> f = OpenOnce(options);
    if (f.ok() || !AddressInUse(f.status())) return f;
    if (attempt == kEnableAttempts) {
      return absl::UnavailableError(AfterAttempts(f.status(), attempt));
    }
    spdlog::info("fabric: {}; trying another port", std::string(f.status().message()));
  }
}

absl::StatusOr<std::unique_ptr<Fabric>> Fabric::OpenOnce(const FabricOptions& options) {
  if (absl::Status s = CheckProvider(options.provider); !s.ok()) return s;
  const std::string provider = ResolveProvider(options.provider);
  EndpointType type = options.endpoint;
  if (type == EndpointType::kAuto)
    type = provider == "tcp" ? EndpointType::kMsg : EndpointType::kRdm;
  const std::string prov_name = LibfabricProviderName(provider, type);
  const bool msg = type == EndpointType::kMsg;

  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  // FI_RX_CQ_DATA (verbs MSG) only constrains receiving remote CQ data, which we never use.
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  hints->ep_attr->type = msg ? FI_EP_MSG : FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(prov_name.c_str());
  // Network providers bind to the given host; "0" asks for an ephemeral port.
  const bool bind = !options.bind_host.empty() && provider != "shm";
  // A WRITE counts as complete only once its bytes are visible in the target's memory
  // (FI_DELIVERY_COMPLETE), as on RDMA hardware where the ACK follows placement: an
  // application's Write relies on that. The messenger's WRITEs do not (a reply or a head report
  // tells it the bytes arrived) and may ask for less (OpBatch::set_placed_completion).
  // Providers that cannot promise it get FI_TRANSMIT_COMPLETE, with a warning.
  fi_info* info = nullptr;
  int ret = -FI_ENODATA;
  // verbs MSG endpoints offer neither flag: their WRITE completes when the peer's NIC
  // acknowledged it, as on the RC queue pairs FaRM uses.
  // Remote-access counting (FI_RMA_EVENT) is asked for where the provider needs this process's
  // progress to serve peers, i.e. everywhere but verbs.
  const uint64_t base_caps = hints->caps;
  for (int attempt = 0; attempt < 6 && ret != 0; ++attempt) {
    const bool rma_event = attempt < 3 && provider != "verbs";
    if (attempt < 3 && !rma_event) continue;
    const uint64_t completion = std::array<uint64_t, 3>{
        uint64_t{FI_DELIVERY_COMPLETE}, uint64_t{FI_TRANSMIT_COMPLETE}, uint64_t{0}}[attempt % 3];
    hints->caps = base_caps | (rma_event ? FI_RMA_EVENT : 0);
    hints->tx_attr->op_flags = completion;
    ret = fi_getinfo(kFiVersion, bind ? options.bind_host.c_str() : nullptr, bind ? "0" : nullptr,
                     bind ? FI_SOURCE : 0, hints, &info);
    if (ret == 0) {
      if (completion != FI_DELIVERY_COMPLETE) {
        spdlog::info("provider {} does not offer delivery-complete WRITEs; using {}", provider,
                     completion == 0 ? "its default completions (the peer's acknowledgement)"
                                     : "transmit-complete");
      }
      break;
    }
  }
  std::unique_ptr<Fabric> f(new Fabric());
  if (msg && ret == 0) f->h_->msg_hints = fi_dupinfo(hints);
  fi_freeinfo(hints);
  if (ret != 0 || info == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("provider '", provider, "' has no ",
                     msg ? "connected (MSG) endpoint with RMA (MSG works on verbs and tcp)"
                         : "reliable-datagram endpoint with RMA",
                     bind ? absl::StrCat(" on host ", options.bind_host) : "", " (",
                     fi_strerror(-ret), "); providers available here: ", AvailableProviders()));
  }

  if (prov_name == "verbs;ofi_rxm" && !RxmSharedReceiveOn()) {
    spdlog::warn("{} is off: with verbs;ofi_rxm, libfabric 1.17 may crash when an endpoint is "
                 "closed (see platform/fabric.cc)",
                 kRxmSharedReceive);
  }
  if (absl::StartsWith(prov_name, "verbs") && MrCacheOn()) {
    spdlog::warn("{} is not 0: libfabric's registration cache is on, and its memory monitor "
                 "patches libc's memory functions while the process runs (see platform/fabric.cc)",
                 kMrCacheMaxCount);
  }
  Handles& h = *f->h_;
  h.info = info;
  f->endpoint_ = type;
  f->write_completion_ = info->tx_attr->op_flags & (FI_DELIVERY_COMPLETE | FI_TRANSMIT_COMPLETE);
  // libfabric 1.17's tcp acknowledges a WRITE that asks for either flag with a message back
  // (tcpx_set_ack_flags); shm keeps them (OpBatch::set_placed_completion says why).
  f->unplaced_completion_ =
      std::string(info->fabric_attr->prov_name) == "shm" ? f->write_completion_ : 0;
  // ofi_rxm reports its core provider's fabric name; verbs names iWARP devices' fabric so.
  f->write_fence_ = absl::StartsWith(prov_name, "verbs") && info->fabric_attr->name != nullptr &&
                    absl::StrContains(info->fabric_attr->name, "iWARP");
  f->provider_ = info->fabric_attr->prov_name;
  f->virt_addr_ = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  f->max_rma_size_ = std::min<size_t>(info->ep_attr->max_msg_size, kMaxRma);
  // shm's own path for WRITEs (Fabric::direct_writes) needs virtual addresses and no RMA
  // ordering asked for (libfabric 1.17's smr_fast_rma_enabled), and cross-memory attach.
  if (f->provider_ == "shm") {
    constexpr uint64_t kRmaOrder = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_RAS | FI_ORDER_WAR |
                                   FI_ORDER_WAW | FI_ORDER_WAS | FI_ORDER_SAR | FI_ORDER_SAW;
    f->attach_writes_ =
        f->virt_addr_ && (info->tx_attr->msg_order & kRmaOrder) == 0 && !ShmAttachDisabled();
    if (!f->attach_writes_) {
      spdlog::info("shm: WRITEs are placed by their target's progress (cross-memory attach {})",
                   ShmAttachDisabled() ? "is off: FI_SHM_DISABLE_CMA" : "is not offered");
    }
  }
  if (f->provider_ == "shm") f->post_mu_ = std::make_unique<std::mutex[]>(kPostStripes);
  if (f->provider_ == "shm" && info->tx_attr->inject_size > 0) {
    f->write_piece_ = info->tx_attr->inject_size;
    f->write_split_limit_ = kShmSplitPieces * f->write_piece_;
  }

  if ((ret = fi_fabric(info->fabric_attr, &h.fabric, nullptr)) != 0) {
    return absl::UnavailableError(FiError("fi_fabric", ret));
  }
  if (msg) {
    fi_eq_attr eq_attr{};
    eq_attr.size = 256;
    eq_attr.wait_obj = FI_WAIT_NONE;
    if ((ret = fi_eq_open(h.fabric, &eq_attr, &h.eq, nullptr)) != 0) {
      return absl::UnavailableError(FiError("fi_eq_open", ret));
    }
  }
  if ((ret = fi_domain(h.fabric, info, &h.domain, nullptr)) != 0) {
    return absl::UnavailableError(FiError("fi_domain", ret));
  }
  // Before any request is posted: SoftiWARP's libsiw reports a request it queued as refused when
  // the kernel's doorbell fails, and verbs then reuses the request's context (libsiw_post_send.h).
  if (absl::StartsWith(f->provider_, "verbs")) RepairLibsiwPostSend();
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = kCqSize;
  // A file-descriptor wait object lets an idle poller block until a peer's operation arrives
  // (WaitForProgress). Not for verbs: the NIC serves peers' READs and WRITEs without our
  // progress, so there is nothing to wake up for. Providers without one (shm) get none.
  const bool want_wait = options.wait_object && provider != "verbs";
  cq_attr.wait_obj = want_wait ? FI_WAIT_FD : FI_WAIT_NONE;
  ret = fi_cq_open(h.domain, &cq_attr, &h.cq, nullptr);
  if (ret != 0 && want_wait) {
    spdlog::debug("provider {} has no CQ wait object ({}); idle polling will sleep", provider,
                  fi_strerror(-ret));
    cq_attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(h.domain, &cq_attr, &h.cq, nullptr);
  }
  if (ret != 0) return absl::UnavailableError(FiError("fi_cq_open", ret));
  if (info->caps & FI_RMA_EVENT) {
    fi_cntr_attr cntr_attr{};
    cntr_attr.events = FI_CNTR_EVENTS_COMP;
    cntr_attr.wait_obj = FI_WAIT_NONE;
    if ((ret = fi_cntr_open(h.domain, &cntr_attr, &h.remote_cntr, nullptr)) != 0) {
      spdlog::debug("no remote-access counter: {}", FiError("fi_cntr_open", ret));
      h.remote_cntr = nullptr;
    }
  }
  if (absl::Status st = f->OpenEndpoint(); !st.ok()) return st;
  if (cq_attr.wait_obj == FI_WAIT_FD) {
    int fd = -1;
    if ((ret = fi_control(&h.cq->fid, FI_GETWAIT, &fd)) == 0 && fd >= 0) {
      f->wait_fd_ = fd;
    } else {
      spdlog::debug("fi_control(FI_GETWAIT) failed ({}); idle polling will sleep", ret);
    }
  }
  if (f->write_fence_) {
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        f->Register(f->fence_buffer_, sizeof(f->fence_buffer_));
    if (!mr.ok()) return mr.status();
    f->fence_mr_ = std::move(*mr);
    spdlog::info("{} on iWARP: a WRITE completes at its sender before it is placed, and before "
                 "the READs posted ahead of it; WRITEs wait for the READs to their peer in "
                 "flight, and batches with WRITEs end with a READ from each peer written",
                 f->provider_);
  }
  spdlog::debug(
      "fabric open: provider={} endpoint={} virt_addr={} max_rma={} addrlen={} cq_wait={}",
      f->provider_, EndpointTypeName(type), f->virt_addr_, f->max_rma_size_, f->address_.size(),
      f->can_wait());
  return f;
}

std::string ShmEndpointName() {
  static std::atomic<uint32_t> next{0};
  uint64_t nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != sizeof(nonce)) {
    nonce = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  }
  return absl::StrCat(kShmNamePrefix, getpid(), "-", next.fetch_add(1), "-",
                      absl::Hex(nonce & 0xffffffffffff));
}

int RemoveStaleShmFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    absl::string_view n(e->d_name);
    if (!absl::ConsumePrefix(&n, kShmNamePrefix)) continue;
    const size_t dash = n.find('-');
    int pid = 0;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(n.substr(0, dash), &pid) || pid <= 0) {
      continue;
    }
    // Only files whose process is gone (a process that exists, whoever it is now, keeps them).
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string path = absl::StrCat(dir, "/", e->d_name);
    if (unlink(path.c_str()) == 0) {
      ++removed;
      spdlog::info("removed {}: left by process {}, which is gone", path, pid);
    }
  }
  closedir(d);
  return removed;
}

namespace {

// shm names an endpoint's shared-memory file after the process (/dev/shm/PID:N:M) unless told a
// name. A process killed with SIGKILL leaves that file behind, and a later process that gets the
// same id cannot enable its endpoint ("Device or resource busy"). Our own names carry a random
// part, and files of ours whose process is gone are removed first. A no-op on other providers.
// Sets *name to the name given.
absl::Status NameShmEndpoint(const std::string& provider, fid_ep* ep, std::string* name) {
  if (provider != "shm") return absl::OkStatus();
  RemoveStaleShmFiles();
  const std::string own = ShmEndpointName();
  if (int ret = fi_setname(&ep->fid, const_cast<char*>(own.c_str()), own.size() + 1); ret != 0) {
    return absl::UnavailableError(FiError("fi_setname", ret));
  }
  *name = own;
  return absl::OkStatus();
}

// The doorbell of the shm endpoint named `name` (a peer's address: the name and a NUL), a file
// beside the endpoint's own in /dev/shm, whose name RemoveStaleShmFiles also recognises.
std::string ShmDoorbellPath(absl::string_view name) {
  while (!name.empty() && name.back() == '\0') name.remove_suffix(1);
  return absl::StrCat("/dev/shm/", name, ".bell");
}

}  // namespace

absl::Status Fabric::OpenEndpoint() {
  Handles& h = *h_;
  int ret;
  char name[256];
  size_t name_len = sizeof(name);
  if (endpoint_ == EndpointType::kMsg) {
    if ((ret = fi_passive_ep(h.fabric, h.info, &h.pep, nullptr)) != 0) {
      return absl::UnavailableError(FiError("fi_passive_ep", ret));
    }
    if ((ret = fi_pep_bind(h.pep, &h.eq->fid, 0)) != 0) {
      return absl::UnavailableError(FiError("fi_pep_bind", ret));
    }
    if (absl::Status st = EnableResult("fi_listen", fi_listen(h.pep)); !st.ok()) return st;
    if ((ret = fi_getname(&h.pep->fid, name, &name_len)) != 0) {
      return absl::UnavailableError(FiError("fi_getname", ret));
    }
    address_.assign(name, name_len);
    return absl::OkStatus();
  }
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_UNSPEC;
  if ((ret = fi_av_open(h.domain, &av_attr, &h.av, nullptr)) != 0) {
    return absl::UnavailableError(FiError("fi_av_open", ret));
  }
  if ((ret = fi_endpoint(h.domain, h.info, &h.ep, nullptr)) != 0) {
    return absl::UnavailableError(FiError("fi_endpoint", ret));
  }
  if ((ret = fi_ep_bind(h.ep, &h.av->fid, 0)) != 0 ||
      (ret = fi_ep_bind(h.ep, &h.cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return absl::UnavailableError(FiError("fi_ep_bind", ret));
  }
  if (h.remote_cntr != nullptr &&
      (ret = fi_ep_bind(h.ep, &h.remote_cntr->fid, FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0) {
    return absl::UnavailableError(FiError("fi_ep_bind(counter)", ret));
  }
  std::string shm_name;
  if (absl::Status st = NameShmEndpoint(provider_, h.ep, &shm_name); !st.ok()) return st;
  if (!shm_name.empty()) {
    // Before the address exists: a peer that learns it finds the doorbell.
    absl::StatusOr<std::unique_ptr<Doorbell>> bell = Doorbell::Create(ShmDoorbellPath(shm_name));
    if (!bell.ok()) return bell.status();
    bell_ = std::move(*bell);
  }
  if (absl::Status st = EnableResult("fi_enable", ProviderCall([&] { return fi_enable(h.ep); }));
      !st.ok()) {
    return st;
  }
  if ((ret = fi_getname(&h.ep->fid, name, &name_len)) != 0) {
    return absl::UnavailableError(FiError("fi_getname", ret));
  }
  address_.assign(name, name_len);
  if (provider_ == "shm") h.local_shm = LocalShmEndpoints::Get().Add(address_);
  if (attach_writes_) h.attach = ShmAttachState::Open(shm_name);
  return absl::OkStatus();
}

namespace {

// Creates an endpoint from `info` on the fabric's event queue and completion queue.
// `cntr`, if set, counts the peer's operations served by this endpoint.
int MakeMsgEndpoint(fid_domain* domain, fi_info* info, fid_eq* eq, fid_cq* cq, fid_cntr* cntr,
                    fid_ep** ep) {
  int ret = fi_endpoint(domain, info, ep, nullptr);
  if (ret != 0) return ret;
  if ((ret = fi_ep_bind(*ep, &eq->fid, 0)) != 0 ||
      (ret = fi_ep_bind(*ep, &cq->fid, FI_TRANSMIT | FI_RECV)) != 0 ||
      (cntr != nullptr &&
       (ret = fi_ep_bind(*ep, &cntr->fid, FI_REMOTE_READ | FI_REMOTE_WRITE)) != 0) ||
      (ret = fi_enable(*ep)) != 0) {
    fi_close(&(*ep)->fid);
    *ep = nullptr;
  }
  return ret;
}

}  // namespace

int Fabric::ProgressConnections() {
  Handles& h = *h_;
  if (!h.eq_mu.TryLock()) return 0;  // another thread is at it
  int events = 0;
  alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
  auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
  auto find_peer = [&](fid_t fid) -> Handles::MsgPeer* {
    farm::ReaderMutexLock l(&h.peers_mu);
    for (auto& p : h.peers) {
      if (p->ep != nullptr && &p->ep->fid == fid) return p.get();
    }
    return nullptr;
  };
  auto fail_peer = [&](Handles::MsgPeer* p, std::string why) {
    if (p->state.load(std::memory_order_acquire) == 0) h.connecting.fetch_sub(1);
    p->error = std::move(why);
    p->state.store(-1, std::memory_order_release);
  };
  for (;;) {
    uint32_t event = 0;
    ssize_t n = fi_eq_read(h.eq, &event, buf, sizeof(buf), 0);
    if (n == -FI_EAGAIN) break;
    ++events;
    if (n == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      if (fi_eq_readerr(h.eq, &err, 0) < 0) break;
      const char* detail = fi_eq_strerror(h.eq, err.prov_errno, err.err_data, nullptr, 0);
      std::string why = absl::StrCat("connection failed: ", fi_strerror(err.err),
                                     detail ? " / " : "", detail ? detail : "");
      if (Handles::MsgPeer* p = find_peer(err.fid)) {
        fail_peer(p, why);
      } else {
        spdlog::debug("incoming connection: {}", why);
      }
      continue;
    }
    if (n < 0) {
      spdlog::warn("fi_eq_read: {}", fi_strerror(-static_cast<int>(n)));
      break;
    }
    FreeEventInfo(event, n, buf);  // the handling below needs only entry->fid for these
    if (event == FI_CONNREQ) {
      fid_ep* ep = nullptr;
      int ret = MakeMsgEndpoint(h.domain, entry->info, h.eq, h.cq, h.remote_cntr, &ep);
      if (ret == 0) ret = fi_accept(ep, nullptr, 0);
      if (ret != 0) {
        spdlog::warn("cannot accept a connection: {}", FiError("fi_accept", ret));
        if (ep != nullptr) fi_close(&ep->fid);
        fi_reject(h.pep, entry->info->handle, nullptr, 0);
      } else {
        h.accepted.push_back(ep);
      }
      fi_freeinfo(entry->info);
    } else if (event == FI_CONNECTED) {
      if (Handles::MsgPeer* p = find_peer(entry->fid)) {
        h.connecting.fetch_sub(1);
        p->state.store(1, std::memory_order_release);
      }
    } else if (event == FI_SHUTDOWN) {
      if (Handles::MsgPeer* p = find_peer(entry->fid)) {
        fail_peer(p, "the peer closed the connection");
      } else {
        // A connection we accepted was closed by its peer (e.g. a channel that was destroyed):
        // it only served the peer's operations, so nothing of ours is in flight on it.
        auto it = std::find_if(h.accepted.begin(), h.accepted.end(),
                               [&](fid_ep* ep) { return &ep->fid == entry->fid; });
        if (it != h.accepted.end()) {
          fi_close(&(*it)->fid);
          h.accepted.erase(it);
        }
      }
    }
  }
  h.eq_mu.Unlock();
  return events;
}

int Fabric::accepted_connections() const {
  farm::MutexLock l(&h_->eq_mu);
  return static_cast<int>(h_->accepted.size());
}

absl::Status Fabric::EndpointFor(PeerId peer, absl::Duration timeout, void** ep, uint64_t* dest) {
  if (endpoint_ == EndpointType::kRdm) {
    *ep = h_->ep;
    *dest = peer;
    return absl::OkStatus();
  }
  Handles::MsgPeer* p = nullptr;
  {
    farm::ReaderMutexLock l(&h_->peers_mu);
    if (peer < h_->peers.size()) p = h_->peers[peer].get();
  }
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown peer ", peer));
  const absl::Time deadline = absl::Now() + timeout;  // off the fast path: MSG is connecting
  while (p->state.load(std::memory_order_acquire) == 0) {
    Progress();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError("the connection to the peer was not established in time");
    }
  }
  if (p->state.load(std::memory_order_acquire) < 0) return absl::UnavailableError(p->error);
  *ep = p->ep;
  *dest = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<MemoryRegistration>> Fabric::Register(void* base, size_t size) {
  if (base == nullptr || size == 0) {
    return absl::InvalidArgumentError("cannot register an empty buffer");
  }
  std::unique_ptr<MemoryRegistration> r(new MemoryRegistration());
  fid_mr* mr = nullptr;
  const uint64_t requested_key = h_->next_key.fetch_add(1, std::memory_order_relaxed);
  int ret = fi_mr_reg(h_->domain, base, size, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                      0, requested_key, 0, &mr, nullptr);
  if (ret != 0) {
    std::string msg = absl::StrCat("registering ", size, " bytes with provider ", provider_, ": ",
                                   FiError("fi_mr_reg", ret));
    rlimit lim{};
    getrlimit(RLIMIT_MEMLOCK, &lim);
    if (ret == -FI_ENOMEM || ret == -FI_EFAULT || ret == -FI_EPERM || ret == -FI_EACCES) {
      absl::StrAppend(&msg, "; the locked-memory limit is ", DescribeLimit(lim.rlim_cur),
                      ": raise it with `ulimit -l unlimited` (or a memlock line in "
                      "/etc/security/limits.conf, or LimitMEMLOCK= for a systemd service)");
    }
    return absl::ResourceExhaustedError(msg);
  }
  r->mr_ = mr;
  r->base_ = static_cast<char*>(base);
  r->size_ = size;
  r->key_ = fi_mr_key(mr);
  r->desc_ = fi_mr_desc(mr);
  r->remote_base_ = virt_addr_ ? reinterpret_cast<uint64_t>(base) : 0;
  return r;
}

absl::StatusOr<PeerId> Fabric::AddPeer(absl::string_view address) {
  if (endpoint_ == EndpointType::kMsg) {
    // The peer is listed, with its endpoint, before the endpoint connects: another thread's
    // ProgressConnections may read the connection's FI_CONNECTED (or its error) at once, and an
    // event for an endpoint it cannot find is dropped, which left the peer connecting for good
    // (a 3-node msg cluster on SoftiWARP that never became ready, about 1 start in 30).
    Handles::MsgPeer* listed = nullptr;
    PeerId id = 0;
    void* ep = nullptr;
    absl::Status st = ConnectMsg(address, h_->eq, h_->cq, &ep, [&](void* created) {
      auto peer = std::make_unique<Handles::MsgPeer>();
      peer->address = std::string(address);
      peer->ep = static_cast<fid_ep*>(created);
      listed = peer.get();
      h_->connecting.fetch_add(1);
      farm::MutexLock l(&h_->peers_mu);
      h_->peers.push_back(std::move(peer));
      id = static_cast<PeerId>(h_->peers.size() - 1);
    });
    FARM_SYNC_POINT("Fabric::AddPeer:Connecting");
    if (!st.ok()) {
      if (listed != nullptr) {
        // The slot stays (PeerIds are indexes), failed and without its closed endpoint.
        farm::MutexLock l(&h_->peers_mu);
        if (listed->state.load(std::memory_order_acquire) == 0) h_->connecting.fetch_sub(1);
        listed->error = std::string(st.message());
        listed->ep = nullptr;
        listed->state.store(-1, std::memory_order_release);
      }
      return st;
    }
    return id;
  }
  fi_addr_t addr = FI_ADDR_UNSPEC;
  int n =
      ProviderCall([&] { return fi_av_insert(h_->av, address.data(), 1, &addr, 0, nullptr); });
  if (n != 1) {
    return absl::InvalidArgumentError(absl::StrCat("fi_av_insert rejected a peer address of ",
                                                   address.size(), " bytes (", n, ")"));
  }
  std::unique_ptr<Doorbell> bell;
  if (provider_ == "shm" && static_cast<PeerId>(addr) < Handles::kMaxBellPeers) {
    absl::StatusOr<std::unique_ptr<Doorbell>> opened = Doorbell::Open(ShmDoorbellPath(address));
    if (opened.ok()) {
      bell = std::move(*opened);
    } else {
      spdlog::warn("peer {} has no usable doorbell ({}): while it sleeps, it serves this node late",
                   addr, opened.status().ToString());
    }
  }
  if (address == address_)
    h_->self_peer.store(static_cast<PeerId>(addr), std::memory_order_relaxed);
  farm::MutexLock l(&h_->peers_mu);
  h_->rdm_addresses[static_cast<PeerId>(addr)] = std::string(address);
  if (bell != nullptr) {
    h_->bell_of[addr].store(bell.get(), std::memory_order_release);
    h_->peer_bells.push_back(std::move(bell));
  }
  if (provider_ == "shm") {
    if (auto local = LocalShmEndpoints::Get().Find(std::string(address)); local != nullptr) {
      h_->local_peers[static_cast<PeerId>(addr)] = std::move(local);
      h_->has_local_peers.store(true, std::memory_order_release);
    }
  }
  return static_cast<PeerId>(addr);
}

absl::Status Fabric::ConnectMsg(absl::string_view address, void* eq, void* cq, void** ep,
                                const std::function<void(void*)>& created) {
  std::string host, port;
  if (!SockaddrToHostPort(std::string(address), &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a peer address of ", address.size(), " bytes is no IP socket address"));
  }
  fi_info* info = nullptr;
  int ret = fi_getinfo(kFiVersion, host.c_str(), port.c_str(), 0, h_->msg_hints, &info);
  if (ret != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve peer ", host, ":", port, ": ", fi_strerror(-ret)));
  }
  fid_ep* e = nullptr;
  ret = MakeMsgEndpoint(h_->domain, info, static_cast<fid_eq*>(eq), static_cast<fid_cq*>(cq),
                        nullptr, &e);
  if (ret == 0 && created) created(e);
  if (ret == 0) ret = fi_connect(e, info->dest_addr, nullptr, 0);
  fi_freeinfo(info);
  if (ret != 0) {
    if (e != nullptr) fi_close(&e->fid);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to peer ", host, ":", port, ": ", FiError("fi_connect", ret)));
  }
  *ep = e;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Fabric::PeerAddress(PeerId peer) const {
  farm::ReaderMutexLock l(&h_->peers_mu);
  if (endpoint_ == EndpointType::kMsg) {
    if (peer < h_->peers.size()) return h_->peers[peer]->address;
  } else if (auto it = h_->rdm_addresses.find(peer); it != h_->rdm_addresses.end()) {
    return it->second;
  }
  return absl::NotFoundError(absl::StrCat("unknown peer ", peer));
}

int Fabric::Progress() {
  int total = 0;
  // Connection events are rare: look at the event queue every 16th call, or every call while a
  // connection of ours is being set up.
  if (h_->eq != nullptr &&
      ((h_->progress_calls.fetch_add(1, std::memory_order_relaxed) & 15) == 0 ||
       h_->connecting.load(std::memory_order_relaxed) > 0)) {
    total += ProgressConnections();
  }
  total += ReapCompletions(h_->cq);
  return total + RemoteAccesses();
}

namespace {

// Moves a reaped completion's context from kPosted to kDone: true if this completion is the
// operation's, false if the context was not posted (a completion reported twice, or for a
// request the provider said it had not taken; see InFlightOps), which is then dropped. `error`:
// the completion's error, empty for a successful one, named in the warning of a drop (the
// context's other fields may belong to the request that took it since: not read here).
bool Finish(Fabric::OpContext* ctx, absl::string_view error = {}) {
  uint32_t posted = Fabric::OpContext::kPosted;
  if (ctx->life.compare_exchange_strong(posted, Fabric::OpContext::kDone,
                                        std::memory_order_acq_rel)) {
    return true;
  }
  static std::atomic<uint64_t> dropped{0};
  const uint64_t n = dropped.fetch_add(1, std::memory_order_relaxed) + 1;
  if ((n & (n - 1)) == 0) {  // 1, 2, 4, 8, ...: a few lines, however many there are
    spdlog::warn(
        "fabric: dropped a completion for an operation that is not in flight ({} so far): the "
        "provider reported it twice, or for a request it had refused (libsiw does while a "
        "connection closes); this one reported {} (its context {})",
        n, error.empty() ? std::string("success") : std::string(error),
        posted == Fabric::OpContext::kDone ? "had completed" : "was free");
  }
  return false;
}

}  // namespace

int Fabric::ReapCompletions(void* cq_ptr) {
  fid_cq* cq = static_cast<fid_cq*>(cq_ptr);
  fi_cq_entry entries[32];
  int total = 0;
  for (;;) {
    ssize_t n = ProviderCall([&] { return fi_cq_read(cq, entries, 32); });
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        auto* ctx = static_cast<OpContext*>(entries[i].op_context);
        if (!Finish(ctx)) continue;
        if (ctx->read_gate != nullptr) ctx->read_gate->fetch_sub(1, std::memory_order_release);
        ctx->state->outstanding.fetch_sub(1, std::memory_order_release);
        ctx->owner->Release(ctx);
      }
      total += static_cast<int>(n);
      if (n < 32) break;
      continue;
    }
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (ProviderCall([&] { return fi_cq_readerr(cq, &err, 0); }) != 1) break;
      auto* ctx = static_cast<OpContext*>(err.op_context);
      const char* detail = fi_cq_strerror(cq, err.prov_errno, err.err_data, nullptr, 0);
      std::string msg = absl::StrCat(
          ctx && ctx->is_read ? "READ" : "WRITE", " of ", ctx ? ctx->len : 0,
          " bytes at remote address 0x", absl::Hex(ctx ? ctx->remote_addr : 0),
          " failed: ", fi_strerror(err.err), detail ? " / " : "", detail ? detail : "");
      spdlog::debug("{}", msg);
      if (ctx != nullptr && Finish(ctx, absl::StrCat(fi_strerror(err.err), detail ? " / " : "",
                                                     detail ? detail : ""))) {
        if (ctx->read_gate != nullptr) ctx->read_gate->fetch_sub(1, std::memory_order_release);
        ctx->state->Fail(absl::UnavailableError(msg));
        ctx->state->outstanding.fetch_sub(1, std::memory_order_release);
        ctx->owner->Release(ctx);
      }
      ++total;
      continue;
    }
    break;  // -FI_EAGAIN: nothing more right now.
  }
  return total;
}

int Fabric::RemoteAccesses() {
  if (h_->remote_cntr == nullptr) return 0;
  const uint64_t now = ProviderCall([&] { return fi_cntr_read(h_->remote_cntr); });
  const uint64_t before = h_->remote_seen.exchange(now, std::memory_order_relaxed);
  return now > before ? static_cast<int>(std::min<uint64_t>(now - before, 1 << 20)) : 0;
}

int Fabric::WaitForProgress(absl::Duration max_wait) {
  int done = Progress();
  if (done > 0) return done;
  if (bell_ != nullptr) {
    // The doorbell's protocol (platform/doorbell.h): raise the flag, look once more, sleep.
    const uint32_t ticket = bell_->PrepareSleep();
    if ((done = Progress()) > 0) {
      bell_->CancelSleep();
      return done;
    }
    const bool rung = bell_->Sleep(ticket, max_wait);
    return Progress() + (rung ? 1 : 0);
  }
  if (wait_fd_ < 0) {
    absl::SleepFor(max_wait);
    return Progress();
  }
  // fi_trywait progresses the provider and says whether blocking is safe: -FI_EAGAIN means
  // there is work already (e.g. bytes the provider buffered, which the fd would not report).
  fid* fids[1] = {&h_->cq->fid};
  int ret = ProviderCall([&] { return fi_trywait(h_->fabric, fids, 1); });
  if (ret == -FI_EAGAIN) return Progress() + 1;
  if (ret != 0) {
    absl::SleepFor(max_wait);
    return Progress();
  }
  pollfd p{wait_fd_, POLLIN, 0};
  const timespec ts = absl::ToTimespec(max_wait);
  const int ready = ppoll(&p, 1, &ts, nullptr);
  return Progress() + (ready > 0 ? 1 : 0);
}

bool Fabric::direct_writes() const { return h_->attach != nullptr && h_->attach->on(false); }

void Fabric::Wake() {
  if (bell_ != nullptr) bell_->Ring();
}

absl::Status Fabric::Post(FabricChannel* channel, bool is_read, PeerId peer, RemoteBuffer remote,
                          LocalBuffer local, OpContext* ctx, absl::Duration timeout,
                          const std::function<absl::Status()>& abandon, bool placed) {
  void* ep_ptr = nullptr;
  uint64_t dest = 0;
  absl::Status s = channel != nullptr ? channel->EndpointFor(peer, timeout, &ep_ptr, &dest)
                                      : EndpointFor(peer, timeout, &ep_ptr, &dest);
  if (!s.ok()) return s;
  fid_ep* ep = static_cast<fid_ep*>(ep_ptr);
  iovec iov{local.data, local.size};
  void* desc = local.mr->desc();
  fi_rma_iov rma{remote.addr, local.size, remote.key};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = dest;
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = &ctx->fi_ctx;
  // The completion semantics are asked for on every WRITE: some providers (tcp) ignore the
  // endpoint's default op_flags.
  std::shared_ptr<LocalShmEndpoint> in_process;  // the peer, if an shm endpoint of this process
  if (h_->has_local_peers.load(std::memory_order_acquire)) {
    farm::ReaderMutexLock l(&h_->peers_mu);
    if (auto it = h_->local_peers.find(peer); it != h_->local_peers.end()) in_process = it->second;
  }
  // iWARP: a WRITE waits until no READ to its peer is in flight on this endpoint (Fabric's
  // write_fence comment says why).
  // shm: no FI_DELIVERY_COMPLETE where shm places the WRITE itself (see direct_writes): one
  // longer than its inject size (a shorter one is copied through the target's command queue).
  ShmAttachState* attach = channel != nullptr ? channel->h_->attach.get() : h_->attach.get();
  const bool direct =
      attach != nullptr &&
      attach->on(channel == nullptr && peer == h_->self_peer.load(std::memory_order_relaxed));
  const uint64_t write_flags = FI_COMPLETION | (direct && local.size > write_piece_ ? 0
                                                : placed ? write_completion_
                                                         : unplaced_completion_);
  ReadGate* gate = nullptr;
  if (write_fence_) gate = channel != nullptr ? &channel->h_->read_gate : &h_->read_gate;
  const size_t stripe = peer % ReadGate::kStripes;
  bool behind_read = false;  // the last attempt found a READ in flight
  CoarseClock::time_point deadline = CoarseClock::time_point::max();  // set on the first EAGAIN
  for (;;) {
    std::shared_lock<std::shared_mutex> alive;
    if (in_process != nullptr) {
      alive = std::shared_lock<std::shared_mutex>(in_process->mu);
      if (in_process->closed) {
        return absl::UnavailableError(
            "the peer's shm endpoint, in this process, was closed (its node left)");
      }
    }
    std::unique_lock<std::mutex> turn;
    if (post_mu_ != nullptr) turn = std::unique_lock<std::mutex>(post_mu_[peer % kPostStripes]);
    std::unique_lock<std::mutex> gate_turn;
    if (gate != nullptr) gate_turn = std::unique_lock<std::mutex>(gate->mu[stripe]);
    behind_read = gate != nullptr && !is_read &&
                  gate->reads[stripe].load(std::memory_order_acquire) > 0;
    // Tests make the provider look busy here (the argument: whether it is), as ofi_rxm is while
    // it tries to connect to a peer that died.
    bool busy = false;
    FARM_SYNC_POINT_CALLBACK("Fabric::Post:Busy", &busy);
    ssize_t ret = -FI_EAGAIN;
    if (!behind_read && !busy) {
      // Counted before posting: the completion may be reaped on another thread at once.
      if (gate != nullptr && is_read) {
        ctx->read_gate = &gate->reads[stripe];
        ctx->read_gate->fetch_add(1, std::memory_order_relaxed);
      }
      ret = ProviderCall([&] {
        return is_read ? fi_readmsg(ep, &msg, FI_COMPLETION) : fi_writemsg(ep, &msg, write_flags);
      });
      if (ret != 0 && ctx->read_gate != nullptr) {
        ctx->read_gate->fetch_sub(1, std::memory_order_relaxed);
        ctx->read_gate = nullptr;
      }
    }
    if (gate_turn.owns_lock()) gate_turn.unlock();
    if (turn.owns_lock()) turn.unlock();
    // A READ that shm served itself needs nothing of the peer (a WRITE may be a message that
    // the peer's poller is to find).
    if ((ret == -FI_EAGAIN || (ret == 0 && !(is_read && direct))) &&
        peer < Handles::kMaxBellPeers) {
      // A same-host peer whose poller sleeps would serve the operation only when it wakes; and
      // what makes shm push back is mostly the peer's progress (its queue is full, or it has
      // yet to answer our first contact), so a post that must retry rings too.
      if (Doorbell* bell = h_->bell_of[peer].load(std::memory_order_acquire)) bell->Ring();
    }
    if (ret == 0) return absl::OkStatus();
    if (ret != -FI_EAGAIN) {
      return absl::UnavailableError(FiError(is_read ? "fi_read" : "fi_write", ret));
    }
    // The queue that is full, or the endpoint that is busy, is the one we post on.
    if (channel != nullptr) {
      channel->Progress();
    } else {
      Progress();
    }
    if (abandon) {
      if (absl::Status a = abandon(); !a.ok()) return a;
    }
    if (deadline == CoarseClock::time_point::max()) deadline = CoarseDeadline(timeout);
    if (CoarseClock::now() > deadline) {
      if (behind_read) {
        return absl::DeadlineExceededError(
            "WRITE could not be posted: a READ from the same peer, which it must not overtake "
            "on iWARP, did not complete (is the peer alive?)");
      }
      return absl::DeadlineExceededError(
          absl::StrCat(is_read ? "READ" : "WRITE",
                       " could not be posted: the provider stayed busy "
                       "(is the peer alive and polling?)"));
    }
  }
}

OpBatch::OpBatch(Fabric* fabric) : fabric_(fabric), state_(std::make_shared<State>()) {}

OpBatch::OpBatch(FabricChannel* channel)
    : fabric_(channel->fabric()), channel_(channel), state_(std::make_shared<State>()) {}

OpBatch::~OpBatch() = default;  // In-flight contexts hold their own reference to state_.

int OpBatch::outstanding() const { return state_->outstanding.load(std::memory_order_acquire); }

OpBatch::InFlight OpBatch::in_flight() const {
  InFlight f;
  f.state_ = state_;
  return f;
}

bool OpBatch::InFlight::done() const {
  return state_ == nullptr || state_->outstanding.load(std::memory_order_acquire) == 0;
}

absl::Status OpBatch::Read(PeerId peer, RemoteBuffer remote, LocalBuffer local) {
  return Add(true, peer, remote, local);
}

absl::Status OpBatch::Write(PeerId peer, RemoteBuffer remote, LocalBuffer local) {
  return Add(false, peer, remote, local);
}

absl::Status OpBatch::Add(bool is_read, PeerId peer, RemoteBuffer remote, LocalBuffer local) {
  absl::Status s;
  if (local.mr == nullptr || local.size == 0 || !local.mr->Contains(local.data, local.size)) {
    s = absl::InvalidArgumentError("local buffer is empty or not inside its registration");
  } else if (local.size > fabric_->max_rma_size()) {
    s = absl::InvalidArgumentError(absl::StrCat(local.size, "-byte operation exceeds the ",
                                                fabric_->max_rma_size(), "-byte limit of provider ",
                                                fabric_->provider()));
  }
  if (s.ok() && !is_read) {
    // Tests drop, delay, duplicate or corrupt WRITEs here (platform/fault_injection.h); a no-op
    // in NDEBUG builds.
    if (std::optional<absl::Status> injected =
            fault_injection_internal::InterceptWrite(fabric_, this, peer, remote, local)) {
      if (!injected->ok()) state_->Fail(*injected);
      return *injected;
    }
  }
  if (s.ok()) {
    const size_t piece = fabric_->write_piece();
    if (!is_read && piece > 0 && local.size > piece && local.size <= fabric_->write_split_limit()) {
      for (size_t at = 0; s.ok() && at < local.size; at += piece) {
        const size_t len = std::min(piece, local.size - at);
        s = Post(is_read, peer, RemoteBuffer{remote.addr + at, remote.key},
                 LocalBuffer{local.mr, local.data + at, len});
      }
    } else {
      s = Post(is_read, peer, remote, local);
    }
  }
  if (s.ok() && !is_read && fabric_->write_fence()) {
    auto it = std::find_if(fence_.begin(), fence_.end(),
                           [peer](const auto& f) { return f.first == peer; });
    if (it == fence_.end()) fence_.emplace_back(peer, remote);
  }
  if (!s.ok()) state_->Fail(s);
  return s;
}

absl::Status OpBatch::Post(bool is_read, PeerId peer, RemoteBuffer remote, LocalBuffer local) {
  // Listed before posting: the completion may be reaped on another thread at once.
  InFlightOps* owner = channel_ != nullptr ? &channel_->h_->in_flight : &fabric_->h_->in_flight;
  Fabric::OpContext* ctx = owner->Acquire();
  ctx->state = state_;
  ctx->is_read = is_read;
  ctx->peer = peer;
  ctx->remote_addr = remote.addr;
  ctx->len = local.size;
  state_->outstanding.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = fabric_->Post(channel_, is_read, peer, remote, local, ctx, post_timeout_,
                                 post_abandon_, placed_);
  // Not posted, as far as the provider said (InFlightOps says when it was anyway); unless a
  // completion that names the context was reaped meanwhile and counted it as done.
  uint32_t posted = Fabric::OpContext::kPosted;
  if (!s.ok() && ctx->life.compare_exchange_strong(posted, Fabric::OpContext::kDone)) {
    state_->outstanding.fetch_sub(1, std::memory_order_relaxed);
    owner->Release(ctx);
  }
  return s;
}

absl::Status OpBatch::Wait(absl::Duration timeout) { return Wait(timeout, nullptr); }

absl::Status OpBatch::Wait(absl::Duration timeout,
                           const std::function<absl::Status()>& abandon) {
  // iWARP: the READ goes after the WRITEs on the same connection, and its answer after their
  // placement (see Fabric::write_fence). A fence that cannot be posted fails the batch.
  for (const auto& [peer, remote] : fence_) {
    absl::Status s =
        Post(true, peer, remote, LocalBuffer{fabric_->fence_mr_.get(), fabric_->fence_buffer_, 1});
    if (!s.ok()) state_->Fail(s);
  }
  fence_.clear();
  // The coarse clock: this loop is on every operation's path, and a timeout is seconds.
  const CoarseClock::time_point deadline = CoarseDeadline(timeout);
  WaitYield yield;
  while (outstanding() > 0) {
    const int done = channel_ != nullptr ? channel_->Progress() : fabric_->Progress();
    // Software providers complete an operation only when the target process polls. When this
    // machine has fewer cores than spinning threads, spinning here keeps the target off the CPU
    // for a whole time slice; yielding after a few microseconds of nothing lets it run (a
    // syscall of ~0.2 us when the core has nothing else to run). By time, not by rounds: a
    // round on tcp;ofi_rxm is a poll(2) of the provider's sockets, and 64 rounds were ~150 us.
    // The caller's abandon check runs at each yield: at least every 64 idle rounds.
    if (done > 0) {
      yield.Worked();
    } else if (yield.Idle() && abandon != nullptr) {
      if (absl::Status s = abandon(); !s.ok()) return s;
    }
    if (done == 0 && CoarseClock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(outstanding(), " RDMA operation(s) did not complete within ",
                       absl::FormatDuration(timeout), " (is the peer alive and polling?)"));
    }
  }
  farm::MutexLock l(&state_->mu);
  absl::Status s = state_->first_error;
  state_->first_error = absl::OkStatus();
  return s;
}

// ---------------------------------------------------------------------------------------------
// FabricChannel

FabricChannel::FabricChannel(Fabric* fabric) : fabric_(fabric), h_(std::make_unique<Handles>()) {
  fabric_->open_channels_.fetch_add(1, std::memory_order_relaxed);
}

FabricChannel::~FabricChannel() {
  for (auto& [peer, ep] : h_->conns) fi_close(&ep->fid);
  if (h_->ep) fi_close(&h_->ep->fid);
  if (h_->own_av) fi_close(&h_->own_av->fid);
  if (h_->cq) fi_close(&h_->cq->fid);
  if (h_->eq) fi_close(&h_->eq->fid);
  // Operations that never completed (their peer went away): nothing refers to them any more.
  h_->in_flight.ReleaseAll();
  fabric_->open_channels_.fetch_sub(1, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<FabricChannel>> Fabric::OpenChannel() {
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<FabricChannel> c(new FabricChannel(this));
    absl::Status s = c->Open();
    if (s.ok()) return c;
    if (AddressInUse(s) && attempt < kEnableAttempts) {
      spdlog::info("fabric: channel: {}; trying another port", std::string(s.message()));
      continue;
    }
    return absl::Status(s.code(), absl::StrCat("cannot open a channel on provider ", provider_,
                                               ": ", AddressInUse(s)
                                                         ? AfterAttempts(s, attempt)
                                                         : std::string(s.message())));
  }
}

absl::Status FabricChannel::Open() {
  Fabric::Handles& f = *fabric_->h_;
  Handles& h = *h_;
  // No wait object: the owner thread polls its queue while it waits (OpBatch::Wait), and a
  // file-descriptor wait object would make the provider signal it on every completion.
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_CONTEXT;
  cq_attr.size = kCqSize;
  cq_attr.wait_obj = FI_WAIT_NONE;
  int ret = fi_cq_open(f.domain, &cq_attr, &h.cq, nullptr);
  if (ret != 0) return absl::UnavailableError(FiError("fi_cq_open", ret));
  if (fabric_->endpoint_type() == EndpointType::kMsg) {
    fi_eq_attr eq_attr{};
    eq_attr.size = 64;
    eq_attr.wait_obj = FI_WAIT_NONE;
    if ((ret = fi_eq_open(f.fabric, &eq_attr, &h.eq, nullptr)) != 0) {
      return absl::UnavailableError(FiError("fi_eq_open", ret));
    }
    return absl::OkStatus();
  }
  if ((ret = fi_endpoint(f.domain, f.info, &h.ep, nullptr)) != 0) {
    return absl::UnavailableError(FiError("fi_endpoint", ret));
  }
  if (fi_ep_bind(h.ep, &f.av->fid, 0) != 0) {
    // The provider wants an address vector per endpoint: keep our own, filled on demand.
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_UNSPEC;
    if ((ret = fi_av_open(f.domain, &av_attr, &h.own_av, nullptr)) != 0) {
      return absl::UnavailableError(FiError("fi_av_open", ret));
    }
    if ((ret = fi_ep_bind(h.ep, &h.own_av->fid, 0)) != 0) {
      return absl::UnavailableError(FiError("fi_ep_bind(av)", ret));
    }
    spdlog::debug("provider {}: channels keep their own address vector", fabric_->provider());
  }
  if ((ret = fi_ep_bind(h.ep, &h.cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
    return absl::UnavailableError(FiError("fi_ep_bind(cq)", ret));
  }
  std::string shm_name;  // a channel only initiates: it needs no doorbell
  if (absl::Status st = NameShmEndpoint(fabric_->provider(), h.ep, &shm_name); !st.ok()) return st;
  if (absl::Status st = EnableResult("fi_enable", ProviderCall([&] { return fi_enable(h.ep); }));
      !st.ok()) {
    return st;
  }
  if (fabric_->attach_writes_) h.attach = ShmAttachState::Open(shm_name);
  return absl::OkStatus();
}

int FabricChannel::Progress() {
  // Our connections' events (a peer that closed one) are rare and change nothing here: the
  // operations on that connection fail through the completion queue. Drain them now and then so
  // that the event queue never overflows.
  if (h_->eq != nullptr && (++progress_calls_ & 1023) == 0) {
    uint32_t event = 0;
    alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
    ssize_t n;
    while ((n = fi_eq_read(h_->eq, &event, buf, sizeof(buf), 0)) != -FI_EAGAIN) {
      if (n == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        if (fi_eq_readerr(h_->eq, &err, 0) < 0) break;
      } else if (n < 0) {
        break;
      } else {
        FreeEventInfo(event, n, buf);
      }
    }
  }
  return Fabric::ReapCompletions(h_->cq);
}

absl::Status FabricChannel::EndpointFor(PeerId peer, absl::Duration timeout, void** ep,
                                        uint64_t* dest) {
  if (h_->eq != nullptr) {  // MSG
    *dest = 0;
    if (auto it = h_->conns.find(peer); it != h_->conns.end()) {
      *ep = it->second;
      return absl::OkStatus();
    }
    return Connect(peer, timeout, ep);
  }
  *ep = h_->ep;
  if (h_->own_av == nullptr) {
    *dest = peer;
    return absl::OkStatus();
  }
  if (auto it = h_->own_addr.find(peer); it != h_->own_addr.end()) {
    *dest = it->second;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> address = fabric_->PeerAddress(peer);
  if (!address.ok()) return address.status();
  fi_addr_t addr = FI_ADDR_UNSPEC;
  int n = ProviderCall(
      [&] { return fi_av_insert(h_->own_av, address->data(), 1, &addr, 0, nullptr); });
  if (n != 1) {
    return absl::UnavailableError(absl::StrCat("fi_av_insert rejected peer ", peer, " (", n, ")"));
  }
  h_->own_addr[peer] = addr;
  *dest = addr;
  return absl::OkStatus();
}

absl::Status FabricChannel::Connect(PeerId peer, absl::Duration timeout, void** ep) {
  absl::StatusOr<std::string> address = fabric_->PeerAddress(peer);
  if (!address.ok()) return address.status();
  void* e = nullptr;
  if (absl::Status s = fabric_->ConnectMsg(*address, h_->eq, h_->cq, &e); !s.ok()) return s;
  fid_ep* conn = static_cast<fid_ep*>(e);
  // The channel connects one peer at a time, on its owner thread: wait here for this
  // connection's outcome. Reading the event queue drives the connection's progress; the peer's
  // poller accepts it.
  const absl::Time deadline = absl::Now() + timeout;
  alignas(fi_eq_cm_entry) char buf[sizeof(fi_eq_cm_entry) + 256];
  auto* entry = reinterpret_cast<fi_eq_cm_entry*>(buf);
  absl::Status status;
  for (;;) {
    uint32_t event = 0;
    ssize_t n = fi_eq_read(h_->eq, &event, buf, sizeof(buf), 0);
    if (n >= 0) FreeEventInfo(event, n, buf);
    if (n >= 0 && event == FI_CONNECTED && entry->fid == &conn->fid) break;
    if (n == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      if (fi_eq_readerr(h_->eq, &err, 0) >= 0 && err.fid == &conn->fid) {
        const char* detail = fi_eq_strerror(h_->eq, err.prov_errno, err.err_data, nullptr, 0);
        status = absl::UnavailableError(absl::StrCat("connection failed: ", fi_strerror(err.err),
                                                     detail ? " / " : "", detail ? detail : ""));
        break;
      }
      continue;
    }
    if (n == -FI_EAGAIN && absl::Now() > deadline) {
      status =
          absl::DeadlineExceededError("the connection to the peer was not established in time");
      break;
    }
  }
  if (!status.ok()) {
    fi_close(&conn->fid);
    return status;
  }
  h_->conns[peer] = conn;
  *ep = conn;
  return absl::OkStatus();
}

}  // namespace farm
