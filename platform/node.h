// Node: the runtime of one symmetric cluster member.
//
// A node owns memory regions, registers them with the fabric, joins the cluster through the
// configuration manager (hosting the CM itself if the configuration names it), learns every
// peer's fabric address and region keys, and serves one-sided access to its regions from its
// poller thread. Application code on the node reads and writes anywhere in the shared address
// space by GlobalAddress.
//
//   NodeOptions opts;
//   opts.config = *LoadClusterConfig("cluster.textproto");
//   opts.node_id = 1;
//   ASSIGN_OR_RETURN(std::unique_ptr<Node> node, Node::Start(opts));
//   char buf[64];
//   RETURN_IF_ERROR(node->Read(GlobalAddress{5, 128}, buf, sizeof(buf)));
//
// Every remote access is checked against the region map before anything is posted: an address
// outside every region, or a range crossing a region's end, is refused with OutOfRange.
//
// Per-thread channels: a thread that accesses remote memory often opens a Node::Channel of its
// own (FaRM's thread model). Its operations post on the channel's own endpoint and complete on the
// channel's own completion queue, which only that thread reads: no other thread (not the poller,
// not another application thread) touches its completions.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Node::Channel> channel, node->OpenChannel());
//   ASSIGN_OR_RETURN(auto mr, channel->RegisterBuffer(buf, sizeof(buf)));
//   RETURN_IF_ERROR(channel->Read(GlobalAddress{5, 128}, LocalBuffer{mr.get(), buf, 64}));
//   RETURN_IF_ERROR(channel->Wait());
//
// Thread safety: all public methods are safe for concurrent use. A Batch is owned by one thread;
// a Channel, and every Batch built on it, by one thread at a time.
#ifndef FARM_PLATFORM_NODE_H_
#define FARM_PLATFORM_NODE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/config.pb.h"
#include "platform/configuration_manager.h"
#include "platform/control.pb.h"
#include "platform/data_dir.h"
#include "platform/fabric.h"
#include "platform/global_address.h"
#include "platform/mutex.h"
#include "platform/poller.h"
#include "platform/region.h"

namespace farm {

// An extra registered area a layer above asks for (e.g. message rings). Areas get region ids
// and are addressable like data regions, but hold the layer's own structures; peers find them
// with Node::RegionsOf(node, purpose).
struct AreaRequest {
  std::string purpose;  // non-empty
  uint64_t size = 0;    // multiple of 4096
};

struct NodeOptions {
  config::ClusterConfig config;  // Validated (see LoadClusterConfig).
  // This node's id from the configuration; -1 lets the CM assign the lowest free one.
  int node_id = -1;
  // Override config.provider / config.endpoint when not empty.
  std::string provider;
  std::string endpoint;
  PollerOptions poll;
  // Fill local regions with SelfCheckPattern bytes before joining (for the self-check).
  bool fill_pattern = false;
  std::vector<AreaRequest> areas;
  // How long to wait for the cluster to form; default: config.join_timeout_s plus a margin.
  absl::Duration join_timeout = absl::ZeroDuration();
  // A directory of this node's own (platform/data_dir.h) in which its data regions and the
  // copies of other nodes' regions it holds are files mapped as shared memory, so that they
  // outlive the process, with a manifest (control.DataManifest) of which region each file holds,
  // rewritten at every membership. At the cluster's end (Engine::Quiesce, SealDataDir) the
  // manifest is marked clean; a node started again on such a directory serves the regions it
  // served then, under their ids (the CM forms the cluster with them). A directory whose node
  // did not leave cleanly (killed, crashed, or stopped alone) restarts from its backup copies
  // and its journal (txn/backup_log.h): the CM promotes one in-sync copy of every region, and
  // the transactions of the crashed run are decided by the recovery vote (needs f >= 1; with
  // f = 0 such a directory is refused). Empty: anonymous memory.
  std::string data_dir;
};

// A member that forms the cluster holds backup copies when f > 0 (f of every region on average,
// more after failures) and locks them in RAM like its own regions. Its own regions are checked
// against the locked-memory limit when they are allocated (a clear error, before joining); its
// share of copies arrives later, and a copy that cannot be locked is then kept unlocked with a
// warning. So that nobody learns this only after joining, Init warns at start when `limit` (bytes,
// RLIMIT_MEMLOCK) cannot hold both: this returns that warning, empty when there is none (no
// locking, f = 0, a late node, or a limit large enough).
std::string MemlockWarningForBackups(const config::ClusterConfig& cfg,
                                     const config::NodeConfig* self, uint64_t limit);

// Where a global address lives, resolved from the region map.
struct RemoteTarget {
  uint32_t node_id = 0;
  PeerId peer = 0;
  RemoteBuffer buffer;
  char* local = nullptr;  // Set when the region is this node's own.
};

class Node {
 public:
  static absl::StatusOr<std::unique_ptr<Node>> Start(NodeOptions options);

  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();  // Leaves the cluster and stops serving.

  uint32_t id() const { return id_; }
  const std::string& provider() const { return fabric_->provider(); }
  uint64_t region_size() const { return region_size_; }
  const config::ClusterConfig& config() const { return options_.config; }
  // Current membership (a copy; it changes when nodes leave or join).
  control::Membership membership() const;
  // Node ids of the current members, ascending.
  std::vector<uint32_t> members() const;
  // Whether this node runs the cluster's configuration manager (it was started with it).
  bool serves_cm() const { return cm_server_ != nullptr; }
  // Changes whenever a membership (or the eviction) is applied: cheap, for seeing whether the
  // configuration moved during an operation.
  uint64_t map_version() const { return map_version_.load(std::memory_order_acquire); }
  // How many data regions of the current membership are recovering (RegionInfo.recovering:
  // promoted, not yet activated by the CM); Resolve refuses them with Unavailable meanwhile.
  // Cheap, for retry loops.
  int recovering_regions() const { return recovering_.load(std::memory_order_relaxed); }
  // Whether `node_id` is a current member (no copy: for per-message checks).
  bool IsMember(uint32_t node_id) const;
  // Data regions (purpose "") or areas of `node_id` in the current membership, by index.
  std::vector<control::RegionInfo> RegionsOf(uint32_t node_id,
                                             const std::string& purpose = "") const;

  // Replication (ClusterConfig.f). Every data region has a primary copy, the one RegionsOf,
  // Resolve, READs and LOCKs see, and up to f backup copies on nodes in other failure domains
  // (platform/placement.h), which hold the region's memory and apply the commit protocol's
  // records to it. A node allocates its copy of a region when a membership first names it as a
  // backup (zeroed: a region's copies are made when the region is new), registers it with the
  // fabric and tells the CM (ConfigurationManager::ReportBackupCopy), and frees it when a
  // membership no longer names it. When the primary leaves, the CM promotes a backup: the region
  // keeps its id and its memory is that node's copy from then on (RegionInfo.promoted; Resolve
  // gives the copy as the region's local memory).
  uint32_t f() const { return options_.config.f(); }
  // The nodes holding backup copies of data region `region_id` in the current membership
  // (fewer than f while it is degraded; empty for f = 0 or an unknown region).
  std::vector<uint32_t> BackupsOf(uint32_t region_id) const;
  // Data region `region_id`'s primary and backups, both of the current membership (one look at
  // the map: Resolve and BackupsOf called one after the other may see two memberships, e.g. the
  // old primary with the backups of the membership that promoted one of them, i.e. none).
  // OutOfRange for an unknown region, Unavailable for one that is recovering, as Resolve.
  struct Copies {
    uint32_t primary = 0;
    std::vector<uint32_t> backups;
  };
  absl::StatusOr<Copies> CopiesOf(uint32_t region_id) const;
  // This node's backup copy of `region_id`, or null if it holds none. The memory stays valid
  // while the caller holds the pointer, even if a later membership drops the copy.
  std::shared_ptr<Region> BackupCopy(uint32_t region_id) const;
  // The data regions this node holds backup copies of, ascending.
  std::vector<uint32_t> BackupRegions() const;

  // This node's own data regions.
  int local_region_count() const { return static_cast<int>(regions_.size()); }
  char* local_region_data(int index) const { return regions_[index]->data(); }
  // This node's area for `purpose` (see AreaRequest), or null.
  char* local_area(const std::string& purpose) const;

  // Resolves [addr, addr + len) to its owner. OutOfRange for an unknown region or a range that
  // leaves it; InvalidArgument for an empty or oversized range; Unavailable for a region that is
  // recovering (recovering_regions()).
  absl::StatusOr<RemoteTarget> Resolve(GlobalAddress addr, size_t len) const;

  // Copies len bytes at addr into dst (any memory), or dst into addr. Local regions are accessed
  // directly; remote ones with one one-sided operation through a registered staging buffer of
  // region_size() bytes: a longer remote access is InvalidArgument (an area may be larger).
  absl::Status Read(GlobalAddress addr, void* dst, size_t len,
                    absl::Duration timeout = absl::Seconds(10));
  absl::Status Write(GlobalAddress addr, const void* src, size_t len,
                     absl::Duration timeout = absl::Seconds(10));

  // Registers caller memory for zero-copy batches.
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> RegisterBuffer(void* base, size_t size) {
    return fabric_->Register(base, size);
  }

  class Channel;

  // Many one-sided operations posted together, addressed by GlobalAddress.
  class Batch {
   public:
    // On the node's shared endpoint; completions may be reaped by any thread.
    explicit Batch(Node* node) : node_(node), ops_(node->fabric_.get()) {}
    // On `channel` (see Channel): posted on its endpoint, completed on its queue only. Use the
    // batch on the channel's owner thread; the channel must outlive it.
    explicit Batch(Channel* channel);
    // Resolve + post. Errors are returned here and again by Wait().
    absl::Status Read(GlobalAddress addr, LocalBuffer local);
    absl::Status Write(GlobalAddress addr, LocalBuffer local);
    // Waits for every posted operation; returns the first error (including refused posts).
    // Gives up early, with Unavailable ("node 2 left the cluster (membership epoch 5): its
    // lease expired ..."), once a membership without the node of one of the batch's regions
    // is applied: an operation to a node that left ends at the reconfiguration, not at the
    // timeout. So does one to a region whose primary moved (a promoted backup serves it), and
    // the batch is checked once more after its last completion: an operation that completed at
    // the old primary after this node applied the move does not count. After an error, operations
    // may still be in flight (outstanding() > 0): their local memory must not be reused
    // (StagingBuffer::Retire).
    absl::Status Wait(absl::Duration timeout = absl::Seconds(10));
    // Operations posted and not yet completed.
    int outstanding() const { return ops_.outstanding(); }
    // See OpBatch::set_placed_completion (the messenger's WRITEs, and msg_bench's raw baseline
    // of them, complete unplaced).
    void set_placed_completion(bool placed) { ops_.set_placed_completion(placed); }
    // Those operations, as a handle that outlives the batch (StagingBuffer::Retire).
    OpBatch::InFlight in_flight() const { return ops_.in_flight(); }

   private:
    absl::Status Post(bool is_read, GlobalAddress addr, LocalBuffer local);
    // Unavailable once a region the batch posted to is no longer in the membership, or is served
    // by another node than the one posted to.
    absl::Status CheckTargets();
    Node* node_;
    OpBatch ops_;
    absl::Status early_error_;
    // The regions posted to (few: a batch mostly goes to one or two nodes), with their nodes.
    absl::InlinedVector<std::pair<uint32_t, uint32_t>, 4> targets_;
    uint64_t checked_version_ = 0;  // Node::map_version_ when targets_ were last checked
  };

  // One thread's initiator context (see the file comment and FabricChannel): its own endpoint
  // and completion queue on this node's fabric, reaching every member. Read and Write resolve and
  // bounds-check a GlobalAddress exactly like Batch (Resolve: OutOfRange outside every region or
  // across a region's end, InvalidArgument for empty or oversized ranges) and post into the
  // channel's default batch; Wait waits for it. More batches on the channel: Batch(channel).
  //
  // The node's own memory is still served by its poller, also to its own channels.
  //
  // Thread safety: owned by one thread at a time; not synchronized. Destroy it before the Node,
  // and only once its batches completed (an operation in flight keeps its local buffer in use).
  class Channel {
   public:
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;
    ~Channel();

    // Resolve + post in the default batch. Errors are returned here and again by Wait().
    absl::Status Read(GlobalAddress addr, LocalBuffer local) { return batch_.Read(addr, local); }
    absl::Status Write(GlobalAddress addr, LocalBuffer local) { return batch_.Write(addr, local); }
    // Waits for the default batch, progressing only this channel's queue.
    absl::Status Wait(absl::Duration timeout = absl::Seconds(10)) { return batch_.Wait(timeout); }
    // Operations of the default batch posted and not yet completed.
    int outstanding() const { return batch_.outstanding(); }
    // Reaps this channel's completions (every batch's); returns how many.
    int Progress() { return channel_->Progress(); }
    // Registers caller memory for this channel's operations (and any other of the node's: a
    // registration belongs to the node's fabric domain). Keep it until the operations using it
    // completed.
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> RegisterBuffer(void* base, size_t size) {
      return node_->RegisterBuffer(base, size);
    }
    Node* node() const { return node_; }
    FabricChannel* fabric_channel() const { return channel_.get(); }

   private:
    friend class Node;
    Channel(Node* node, std::unique_ptr<FabricChannel> channel);
    Node* const node_;
    std::unique_ptr<FabricChannel> channel_;
    Batch batch_;  // after channel_: built on it, destroyed before it
  };

  // Opens a Channel for the calling thread. Unavailable when the provider cannot open another
  // endpoint or completion queue (the message says which).
  absl::StatusOr<std::unique_ptr<Channel>> OpenChannel();

  // Registered memory that one thread stages its one-sided operations in (e.g. a worker's
  // buffer). A batch whose Wait failed may still have operations in flight (the peer left the
  // cluster, or did not answer in time), and a late READ would land in the memory after it is
  // reused: Retire sets the memory aside until those operations complete and switches to fresh
  // memory of the same size, so that a late completion never overwrites a later operation's
  // bytes. Memory set aside is freed once its operations completed (checked at each Retire), or
  // with this object.
  //
  // Thread safety: owned by one thread. Destroy it after the channels that posted into it
  // (closing a channel discards its operations) and before the Node.
  class StagingBuffer {
   public:
    static absl::StatusOr<std::unique_ptr<StagingBuffer>> Create(Node* node, size_t size,
                                                                 bool lock_memory);
    StagingBuffer(const StagingBuffer&) = delete;
    StagingBuffer& operator=(const StagingBuffer&) = delete;
    ~StagingBuffer();

    char* data() const { return current_.memory->data(); }
    size_t size() const { return size_; }
    const MemoryRegistration* registration() const { return current_.registration.get(); }
    LocalBuffer At(size_t offset, size_t len) const {
      return LocalBuffer{registration(), data() + offset, len};
    }

    // Sets the current memory aside until `in_flight` is done and switches to fresh memory
    // (data() and registration() change). Does nothing if it is done already. Errors: the
    // fresh memory cannot be mapped or registered (the old memory stays current).
    absl::Status Retire(OpBatch::InFlight in_flight);
    // Memory set aside and not yet freed.
    int retired() const { return static_cast<int>(retired_.size()); }

   private:
    struct Memory {
      std::unique_ptr<Region> memory;
      std::unique_ptr<MemoryRegistration> registration;  // declared after: destroyed first
    };
    StagingBuffer(Node* node, size_t size, bool lock_memory)
        : node_(node), size_(size), lock_memory_(lock_memory) {}
    absl::Status Allocate(Memory* m) const;

    Node* const node_;
    const size_t size_;
    const bool lock_memory_;
    Memory current_;
    std::vector<std::pair<OpBatch::InFlight, Memory>> retired_;
  };

  Fabric* fabric() { return fabric_.get(); }
  Poller* poller() { return poller_.get(); }

  // Membership listeners, for layers that keep per-peer state (e.g. messaging). `listener` is
  // called on the configuration manager's thread with every membership received after the
  // first, once this node has applied it (RegionsOf, Resolve etc. already answer from it), in
  // epoch order; a membership that arrives out of date may be passed again (compare epochs).
  // It must return quickly and must not call Add/RemoveMembershipListener. Returns an id for
  // RemoveMembershipListener. A caller that read the membership of epoch `seen_epoch` before
  // (e.g. to set itself up) gets the current one at once if it is newer, so that none applied
  // in between is missed.
  int AddMembershipListener(std::function<void(const control::Membership&)> listener,
                            uint64_t seen_epoch = UINT64_MAX);
  // Removes a listener. When this returns, the listener is not running and will not run again.
  void RemoveMembershipListener(int id);

  // Eviction (fail-stop). OK while this node is a member; FailedPrecondition ("node 2 was
  // evicted from the cluster: its lease expired ...") once it learnt it is not: its lease with
  // the CM expired, the CM evicted it or closed its connection, or a membership without it
  // arrived. From then on the node no longer acts as a member: the membership listeners get one
  // last membership that lists no node (with an epoch above every earlier one), Resolve refuses
  // every address, and no later membership is applied. A process should exit; a new process may
  // join again under the same id.
  absl::Status evicted() const;
  // Whether this node's lease with the CM still runs (ConfigurationManager::lease_expiry). Once
  // it ended the node must not serve, answer or commit anything: the CM may have removed it and
  // the others may have moved on, even if no eviction reached this node yet (a paused process,
  // resumed). Cheap: a clock read and an atomic load.
  bool lease_held() const;
  // This node's heartbeat round trips to the CM so far (ConfigurationManager::heartbeat_stats).
  ConfigurationManager::HeartbeatStats heartbeat_stats() const {
    return cm_ == nullptr ? ConfigurationManager::HeartbeatStats{} : cm_->heartbeat_stats();
  }
  // Waits up to `timeout` for the eviction; true if the node was evicted. On true the eviction is
  // complete: the node lists no member, resolves no address, and its listeners were told.
  bool WaitForEviction(absl::Duration timeout);
  // Asks the CM to evict member `node`, which this node can no longer talk to (e.g. a ring from
  // it stays corrupt), so that every node agrees it is gone. Returns at once.
  void ReportSuspect(uint32_t node, const std::string& reason);
  // Tells the CM that this node's backup copy of `region_id`, listed as syncing, is complete
  // (ConfigurationManager::ReportBackupSynced; best effort: txn::Resync says it again until the
  // membership no longer lists the copy as syncing).
  void ReportBackupSynced(uint32_t region_id);
  // Tells the CM that this node, the primary of data region `region_id` that the membership
  // marks handing_off, holds nothing locked in it any more (ConfigurationManager::
  // ReportHandOffReady).
  void ReportHandOffReady(uint32_t region_id);
  // Tells the CM that data region `region_id`, which this node serves, holds data now
  // (ConfigurationManager::ReportRegionInUse).
  void ReportRegionInUse(uint32_t region_id);
  // With a data directory, at the cluster's end, once nothing changes the regions any more
  // (txn::Engine::Quiesce): writes every region file to disk and then the manifest marked clean
  // with `layouts` (the allocator layout of every data region the node serves), which later
  // memberships no longer replace. OK without a data directory.
  absl::Status SealDataDir(const std::map<uint32_t, control::RegionLayout>& layouts);
  // Roots (farm.h Runtime::SaveRoot): file "root-<name>" of the data directory.
  absl::Status SaveRoot(const std::string& name, absl::string_view bytes);
  absl::StatusOr<std::string> LoadRoot(const std::string& name) const;
  // Restarted from a data directory: the allocator layout of data region `region`, which this
  // node served when the cluster stopped and serves again (its objects are in its memory), or
  // null.
  const control::RegionLayout* RestoredLayout(uint32_t region) const;
  // The data directory (with NodeOptions::data_dir), or null.
  DataDir* data_dir() const { return data_dir_.get(); }
  // Started on a data directory that holds a manifest (a restart, clean or not).
  bool restarted() const { return restarted_; }
  // A restart after a crash (Membership.restart_fence) promoted copies to this node: it does not
  // acknowledge a membership (so the CM does not let those regions serve) until its transaction
  // layer replayed its journal and took the copies' recovery locks, and says so here. Then
  // acknowledges the latest membership. Idempotent; nothing to do otherwise.
  void FinishRestore();
  // Every member finished the application: when this node leaves, it tells the CM that the
  // cluster ends, and the members then leave with their regions (ConfigurationManager::
  // MarkClusterEnding).
  void MarkClusterEnding();

 private:
  struct RegionEntry {
    control::RegionInfo info;
    PeerId peer = 0;
    char* local = nullptr;
  };

  explicit Node(NodeOptions options) : options_(std::move(options)) {}
  absl::Status Init();
  // Makes `m` the current membership (if newer), with the copies it asks this node to hold, and
  // reports the copies made for it to the CM.
  absl::Status ApplyMembership(const control::Membership& m);
  // A backup copy this node holds, registered with the fabric (a promoted copy is READ by peers).
  struct BackupEntry {
    std::shared_ptr<Region> copy;
    std::shared_ptr<MemoryRegistration> registration;
  };
  // The copies membership `m` asks this node to hold (as a backup, or as the primary of a
  // promoted region): the ones it holds already, and new zeroed ones, which are added to `fresh`.
  absl::flat_hash_map<uint32_t, BackupEntry> BackupCopiesFor(const control::Membership& m,
                                                             std::vector<uint32_t>* fresh);
  // ApplyMembership's part under map_mu_.
  absl::Status InstallMembership(const control::Membership& m,
                                 absl::flat_hash_map<uint32_t, BackupEntry> backups);
  // Applies a membership from the CM and tells the listeners (the CM client's thread).
  void Deliver(const control::Membership& m);
  void Evict(const std::string& reason);
  void EvictLocked(const std::string& reason);  // listeners_mu_ held
  // Local memory of one of this node's regions or areas, or null.
  char* LocalBase(const control::RegionInfo& r) const;
  // `size` bytes for a data region or a copy of one: file `name` of the data directory, else
  // anonymous memory; zeroed unless `keep` (a region restored from the directory).
  absl::StatusOr<std::shared_ptr<Region>> MapDataRegion(const std::string& name, size_t size,
                                                        bool lock, bool keep = false);
  // Reads the data directory's manifest, if any, into `*restored`: a clean one (the node left
  // with the whole cluster), whose regions served here are then kept, or one of a node that
  // crashed (restarted from its backup copies; refused with f = 0).
  absl::Status LoadManifest(control::DataManifest* restored);
  // Rewrites the data directory's manifest for membership `m` (with data_dir; after it was
  // installed), unless a later one was written already, and removes the files of copies this
  // node no longer holds.
  void WriteManifest(const control::Membership& m);
  // The file of each copy in backups_ (control.DataManifest.copy_files).
  std::map<uint32_t, std::string> CopyFiles() const;
  absl::Status Access(bool is_read, GlobalAddress addr, char* buf, size_t len,
                      absl::Duration timeout);

  NodeOptions options_;
  uint32_t id_ = 0;
  uint64_t region_size_ = 0;
  std::shared_ptr<DataDir> data_dir_;  // with options_.data_dir
  std::mutex apply_mu_;                // ApplyMembership, one at a time
  std::mutex manifest_mu_;             // std::mutex: ThreadSanitizer sees it
  uint64_t manifest_epoch_ = 0;        // guarded by manifest_mu_: the membership last written
  bool sealed_ = false;                // guarded by manifest_mu_: SealDataDir wrote the last one
  control::DataManifest manifest_;     // guarded by manifest_mu_: the last WriteManifest wrote
  std::set<uint32_t> in_use_;          // guarded by manifest_mu_: ReportRegionInUse's regions
  // The layouts of the regions restored from the data directory (set by Init, then read-only).
  std::map<uint32_t, control::RegionLayout> restored_layouts_;
  bool restarted_ = false;  // set by Init, then read-only
  // Guarded by listeners_mu_: memberships are applied but not acknowledged (FinishRestore).
  bool hold_acks_ = false;
  uint64_t unacked_epoch_ = 0;
  std::unique_ptr<Fabric> fabric_;
  std::vector<std::shared_ptr<Region>> regions_;  // data regions
  std::vector<std::pair<std::string, std::unique_ptr<Region>>> areas_;
  std::vector<std::unique_ptr<MemoryRegistration>> registrations_;
  std::unique_ptr<CmServer> cm_server_;
  std::unique_ptr<ConfigurationManager> cm_;
  std::unique_ptr<Poller> poller_;

  // Held while listeners run (memberships and the eviction are delivered under it, in order),
  // so that removing one waits for a call in progress. std::mutex: ThreadSanitizer sees it.
  std::mutex listeners_mu_;
  int next_listener_id_ = 0;  // guarded by listeners_mu_
  std::vector<std::pair<int, std::function<void(const control::Membership&)>>>
      listeners_;  // guarded by listeners_mu_

  mutable std::mutex eviction_mu_;
  std::condition_variable eviction_cv_;
  absl::Status eviction_;          // guarded by eviction_mu_; OK while a member
  bool eviction_applied_ = false;  // guarded by eviction_mu_: the fail-stop membership is applied

  mutable farm::Mutex map_mu_;
  // Bumped (under map_mu_) whenever region_map_ changes; read without the lock by batches that
  // wait, to see cheaply whether a membership arrived.
  std::atomic<uint64_t> map_version_{0};
  std::atomic<int> recovering_{0};  // recovering_regions(), written under map_mu_
  control::Membership membership_ ABSL_GUARDED_BY(map_mu_);
  absl::flat_hash_map<uint32_t, RegionEntry> region_map_ ABSL_GUARDED_BY(map_mu_);
  absl::flat_hash_map<std::string, PeerId> peers_by_address_ ABSL_GUARDED_BY(map_mu_);
  // The backup copies this node holds (promoted ones included), by region id.
  absl::flat_hash_map<uint32_t, BackupEntry> backups_ ABSL_GUARDED_BY(map_mu_);

  // Staging buffer for Read/Write of unregistered memory; one operation at a time.
  farm::Mutex staging_mu_;
  std::unique_ptr<StagingBuffer> staging_ ABSL_GUARDED_BY(staging_mu_);
};

// The byte the self-check expects at `offset` of region `index` of node `node_id` when the node
// was started with fill_pattern.
inline char SelfCheckPattern(uint32_t node_id, uint32_t index, uint64_t offset) {
  uint64_t x = (uint64_t{node_id} << 48) ^ (uint64_t{index} << 40) ^ offset;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return static_cast<char>(x);
}

}  // namespace farm

#endif  // FARM_PLATFORM_NODE_H_
