#include "platform/node.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "platform/config.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "platform/zookeeper_store.h"
#include "spdlog/spdlog.h"

namespace farm {

absl::StatusOr<std::unique_ptr<Node>> Node::Start(NodeOptions options) {
  std::unique_ptr<Node> node(new Node(std::move(options)));
  absl::Status s = node->Init();
  if (!s.ok()) return s;
  return node;
}

Node::~Node() {
  if (cm_ != nullptr) cm_->Leave();
  if (poller_ != nullptr) poller_->Stop();
  cm_server_.reset();
  // Registrations before the fabric, regions after their registrations.
  {
    farm::MutexLock l(&staging_mu_);
    staging_.reset();
  }
  registrations_.clear();
}

namespace {

// Whether node `id` is among `ids` (a region's backups, or those of them still syncing).
bool Lists(const google::protobuf::RepeatedField<uint32_t>& ids, uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::string MemlockWarningForBackups(const config::ClusterConfig& cfg,
                                     const config::NodeConfig* self, uint64_t limit) {
  if (!cfg.lock_memory() || cfg.f() == 0 || self == nullptr || self->late()) return "";
  const uint64_t own = uint64_t{cfg.region_count()} * cfg.region_size();
  const uint64_t copies = own * cfg.f();
  if (limit >= own + copies) return "";
  return absl::StrCat("node ", self->id(), ": with f = ", cfg.f(), " this node holds about ",
                      copies / 1024,
                      " KiB of other nodes' regions as backup copies beside its own ", own / 1024,
                      " KiB, more than it can lock in RAM: ", MemlockAdvice(),
                      "; copies beyond the limit will be kept in memory that may be paged out");
}

absl::Status Node::Init() {
  const config::ClusterConfig& cfg = options_.config;
  const config::NodeConfig* self =
      options_.node_id >= 0 ? FindNode(cfg, static_cast<uint32_t>(options_.node_id)) : nullptr;
  if (options_.node_id >= 0 && self == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id ", options_.node_id, " is not in the cluster configuration"));
  }
  const config::NodeConfig* cm_node = FindNode(cfg, cfg.cm_node_id());
  region_size_ = cfg.region_size();
  if (options_.node_id >= 0) id_ = static_cast<uint32_t>(options_.node_id);
  if (!options_.data_dir.empty()) {
    if (options_.node_id < 0) {
      return absl::InvalidArgumentError(
          "a node with a data directory needs its id (--node_id): the directory is that node's");
    }
    absl::StatusOr<std::unique_ptr<DataDir>> dir = DataDir::Open(options_.data_dir);
    if (!dir.ok()) return dir.status();
    data_dir_ = std::move(*dir);
  }
  // The data regions this node served when the cluster stopped, kept in its data directory:
  // its own by index (slot), and copies promoted to it.
  control::DataManifest restored;
  if (absl::Status s = LoadManifest(&restored); !s.ok()) return s;
  restarted_ = restored.has_membership();
  if (data_dir_ != nullptr && !restarted_) {
    // Starting afresh: roots of an earlier run would point into regions that are not restored.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(data_dir_->path(), ec)) {
      const std::string name = entry.path().filename().string();
      if (!absl::StartsWith(name, "root-")) continue;
      if (absl::Status s = data_dir_->RemoveFile(name); !s.ok()) return s;
    }
  }
  absl::flat_hash_map<uint32_t, uint32_t> restored_slots;  // index -> region id
  std::vector<control::RegionInfo> restored_copies;
  for (const control::RegionInfo& r : restored.membership().regions()) {
    if (!r.purpose().empty()) continue;
    if (!restored.clean()) {
      // After a crash: the copies this node kept in sync as a backup (its own regions and the
      // copies promoted to it may hold locks and half-applied commits; the CM promotes one of
      // the backups' copies instead, whose journals kept the records).
      const bool backup = Lists(r.backup_node(), id_);
      const bool syncing = Lists(r.syncing_backup(), id_);
      if (backup && !syncing) restored_copies.push_back(r);
      continue;
    }
    if (r.node_id() != id_ || !restored.layouts().contains(r.region_id())) continue;
    if (r.promoted()) {
      restored_copies.push_back(r);
    } else if (r.index() < cfg.region_count()) {
      restored_slots[r.index()] = r.region_id();
    }
    restored_layouts_[r.region_id()] = restored.layouts().at(r.region_id());
  }
  for (const control::RegionInfo& r : restored_copies) {
    // A copy kept in the memory of one of this node's own regions (a primary hand-off's old
    // primary keeps its memory as the copy) goes to a file of its own first: the slot is mapped
    // (and starts afresh) below.
    const std::string name = absl::StrCat("copy-", r.region_id());
    if (auto f = restored.copy_files().find(r.region_id());
        f != restored.copy_files().end() && f->second != name) {
      if (absl::Status s = data_dir_->CopyFile(f->second, name); !s.ok()) return s;
    }
  }
  if (rlimit lim{}; getrlimit(RLIMIT_MEMLOCK, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    const std::string warning = MemlockWarningForBackups(cfg, self, lim.rlim_cur);
    if (!warning.empty()) spdlog::warn("{}", warning);
  }

  FabricOptions fopts;
  fopts.provider = options_.provider.empty() ? cfg.provider() : options_.provider;
  absl::StatusOr<EndpointType> endpoint =
      ParseEndpointType(options_.endpoint.empty() ? cfg.endpoint() : options_.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  fopts.endpoint = *endpoint;
  fopts.bind_host = self != nullptr ? self->host() : cm_node->host();
  // Only an adaptive poller blocks on the queue's wait object; a busy one would pay for it on
  // every completion (see FabricOptions::wait_object).
  fopts.wait_object = options_.poll.mode != PollMode::kBusy;
  absl::StatusOr<std::unique_ptr<Fabric>> fabric = Fabric::Open(fopts);
  if (!fabric.ok()) return fabric.status();
  fabric_ = std::move(*fabric);

  control::JoinRequest join;
  join.set_requested_id(options_.node_id);
  join.set_config_fingerprint(Fingerprint(cfg));
  join.mutable_node()->set_host(fopts.bind_host);
  join.mutable_node()->set_fabric_address(fabric_->address());
  join.mutable_node()->set_provider(fabric_->provider());
  join.mutable_node()->set_pid(static_cast<uint32_t>(getpid()));
  for (uint32_t i = 0; i < cfg.region_count(); ++i) {
    const auto kept = restored_slots.find(i);
    absl::StatusOr<std::shared_ptr<Region>> region =
        MapDataRegion(absl::StrCat("slot-", i), region_size_, cfg.lock_memory(),
                      /*keep=*/kept != restored_slots.end());
    if (!region.ok()) return region.status();
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        fabric_->Register((*region)->data(), region_size_);
    if (!mr.ok()) return mr.status();
    if (options_.fill_pattern && kept == restored_slots.end()) {
      char* p = (*region)->data();
      for (uint64_t off = 0; off < region_size_; ++off) {
        p[off] = SelfCheckPattern(options_.node_id < 0 ? 0 : options_.node_id, i, off);
      }
    }
    control::RegionInfo* info = join.add_regions();
    info->set_index(i);
    info->set_size(region_size_);
    info->set_remote_base((*mr)->remote_base());
    info->set_rkey((*mr)->key());
    if (kept != restored_slots.end()) info->set_region_id(kept->second);  // claimed again
    regions_.push_back(std::move(*region));
    registrations_.push_back(std::move(*mr));
  }
  for (const control::RegionInfo& r : restored_copies) {
    // A copy that was promoted to this node: served again from the same memory, as a promoted
    // region (Node keeps it with the backup copies). After a crash, a backup copy offered for
    // promotion (dropped by the first membership unless the CM promotes it).
    absl::StatusOr<std::shared_ptr<Region>> copy =
        MapDataRegion(absl::StrCat("copy-", r.region_id()), r.size(), cfg.lock_memory(),
                      /*keep=*/true);
    if (!copy.ok()) return copy.status();
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        fabric_->Register((*copy)->data(), r.size());
    if (!mr.ok()) return mr.status();
    control::RegionInfo* info = join.add_regions();
    info->set_region_id(r.region_id());
    info->set_size(r.size());
    info->set_remote_base((*mr)->remote_base());
    info->set_rkey((*mr)->key());
    info->set_promoted(true);
    farm::MutexLock l(&map_mu_);
    backups_[r.region_id()] =
        BackupEntry{std::move(*copy), std::shared_ptr<MemoryRegistration>(std::move(*mr))};
  }
  if (restarted_) {
    restored.clear_layouts();  // the CM needs the regions and who served them, not the layouts
    *join.mutable_restored() = std::move(restored);
  }
  for (const AreaRequest& area : options_.areas) {
    if (area.purpose.empty() || area.size == 0 || area.size % 4096 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "area '", area.purpose, "' needs a name and a size that is a multiple of 4096"));
    }
    absl::StatusOr<std::unique_ptr<Region>> region = Region::Allocate(area.size, cfg.lock_memory());
    if (!region.ok()) return region.status();
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        fabric_->Register((*region)->data(), area.size);
    if (!mr.ok()) return mr.status();
    control::RegionInfo* info = join.add_regions();
    info->set_index(static_cast<uint32_t>(areas_.size()));
    info->set_size(area.size);
    info->set_remote_base((*mr)->remote_base());
    info->set_rkey((*mr)->key());
    info->set_purpose(area.purpose);
    areas_.emplace_back(area.purpose, std::move(*region));
    registrations_.push_back(std::move(*mr));
  }
  absl::StatusOr<std::unique_ptr<StagingBuffer>> staging =
      StagingBuffer::Create(this, region_size_, false);
  if (!staging.ok()) return staging.status();
  {
    farm::MutexLock l(&staging_mu_);
    staging_ = std::move(*staging);
  }

  // Serve before joining: peers may access our regions as soon as they learn the membership.
  poller_ = std::make_unique<Poller>(fabric_.get(), options_.poll);

  std::shared_ptr<ConfigurationStore> store;
  if (!cfg.zookeeper().empty()) {
    ZooKeeperStoreOptions zk;
    zk.connect = cfg.zookeeper();
    zk.cluster_name = cfg.cluster_name().empty() ? "farm" : cfg.cluster_name();
    absl::StatusOr<std::unique_ptr<ConfigurationStore>> s = NewZooKeeperConfigurationStore(zk);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the configuration store (zookeeper: \"", cfg.zookeeper(),
                       "\", cluster_name: \"", zk.cluster_name, "\"): ", s.status().message()));
    }
    store = std::move(*s);
  }
  // With a store, another node may have taken the CM's role over (CM takeover): join through it.
  const uint32_t join_cm =
      store != nullptr ? FindConfigurationManager(cfg, *store, options_.node_id) : cfg.cm_node_id();
  cm_node = FindNode(cfg, join_cm);
  const bool is_cm = options_.node_id >= 0 &&
                     static_cast<uint32_t>(options_.node_id) == cfg.cm_node_id() &&
                     join_cm == cfg.cm_node_id();
  if (is_cm) {
    absl::StatusOr<std::unique_ptr<CmServer>> server = CmServer::Start(cfg, store);
    if (!server.ok()) return server.status();
    cm_server_ = std::move(*server);
  }
  cm_ = store != nullptr
            ? NewTcpConfigurationManager(cfg, join_cm, absl::Milliseconds(cfg.lease_ms()), store)
            : NewTcpConfigurationManager(cm_node->host(),
                                         static_cast<uint16_t>(cm_node->control_port()),
                                         absl::Milliseconds(cfg.lease_ms()));
  cm_->OnMembershipChange([this](const control::Membership& m) { Deliver(m); });
  cm_->OnEviction([this](const std::string& reason) { Evict(reason); });
  absl::Duration timeout = options_.join_timeout;
  if (timeout == absl::ZeroDuration()) timeout = absl::Seconds(cfg.join_timeout_s() + 5);
  spdlog::info("joining the cluster through the configuration manager (node {} at {}:{})", join_cm,
               cm_node->host(), cm_node->control_port());
  {
    // A restart may be one after a crash (the first membership says): then no membership is
    // acknowledged before FinishRestore, not even one that arrives while this one is applied.
    std::lock_guard<std::mutex> l(listeners_mu_);
    hold_acks_ = restarted_;
  }
  absl::StatusOr<control::Membership> membership = cm_->Join(join, timeout);
  if (!membership.ok()) return membership.status();
  for (const control::NodeInfo& n : membership->nodes()) {
    if (n.fabric_address() == fabric_->address()) id_ = n.node_id();
  }
  if (options_.fill_pattern && options_.node_id < 0 && id_ != 0) {
    // Our id was assigned by the CM: refill so the pattern matches it.
    for (size_t i = 0; i < regions_.size(); ++i) {
      for (uint64_t off = 0; off < region_size_; ++off) {
        regions_[i]->data()[off] = SelfCheckPattern(id_, static_cast<uint32_t>(i), off);
      }
    }
  }
  absl::Status s = ApplyMembership(*membership);
  if (!s.ok()) return s;
  if (data_dir_ != nullptr) {
    // A clean manifest must not outlive the first change to the regions it describes: a node
    // that crashed later would look clean.
    std::lock_guard<std::mutex> l(manifest_mu_);
    if (manifest_epoch_ < membership->epoch()) {
      return absl::InternalError(absl::StrCat("node ", id_, " cannot record its membership in ",
                                              data_dir_->path(), " (see the log)"));
    }
  }
  {
    std::lock_guard<std::mutex> l(listeners_mu_);
    unacked_epoch_ = std::max(unacked_epoch_, membership->epoch());
    if (membership->restart_fence() == 0) {
      hold_acks_ = false;
      cm_->AckMembership(unacked_epoch_);
    }
    // Else restarted after a crash: the regions restored here are replayed and their recovery
    // locks taken first (FinishRestore).
  }
  spdlog::info("node {} is a member: epoch {}, {} node(s), {} region(s), provider {}", id_,
               membership->epoch(), membership->nodes_size(), membership->regions_size(),
               fabric_->provider());
  return absl::OkStatus();
}

absl::flat_hash_map<uint32_t, Node::BackupEntry> Node::BackupCopiesFor(
    const control::Membership& m, std::vector<uint32_t>* fresh) {
  absl::flat_hash_map<uint32_t, BackupEntry> held;
  // Data regions this node serves from its own memory now (a primary hand-off makes that memory
  // its backup copy), by index.
  absl::flat_hash_map<uint32_t, uint32_t> own;
  {
    farm::MutexLock l(&map_mu_);
    held = backups_;
    for (const auto& [id, e] : region_map_) {
      if (e.info.node_id() == id_ && e.info.purpose().empty() && !e.info.promoted() &&
          e.info.index() < regions_.size()) {
        own[id] = e.info.index();
      }
    }
  }
  absl::flat_hash_map<uint32_t, BackupEntry> out;
  for (const control::RegionInfo& r : m.regions()) {
    const bool backup = Lists(r.backup_node(), id_);
    const bool promoted = r.promoted() && r.node_id() == id_;
    if (!backup && !promoted) continue;
    if (auto it = held.find(r.region_id()); it != held.end()) {
      out.insert(*it);
      continue;
    }
    // Mutant: the old primary gets a fresh (zeroed) copy, as for a new backup, but no copying.
    if (auto o = own.find(r.region_id());
        o != own.end() && !promoted && !FARM_MUTANT("hand_off_fresh_copy")) {
      // Handed over to another node (RegionInfo.handing_off): this node's memory of it holds
      // every committed write (nothing was locked in it when it moved), so it is a complete
      // backup copy at once. Owned by the node (regions_), not by the entry.
      out.emplace(
          r.region_id(),
          BackupEntry{std::shared_ptr<Region>(std::shared_ptr<Region>(), regions_[o->second].get()),
                      std::shared_ptr<MemoryRegistration>(std::shared_ptr<MemoryRegistration>(),
                                                          registrations_[o->second].get())});
      fresh->push_back(r.region_id());  // reported, so that a CM that takes over knows it
      continue;
    }
    if (promoted) {
      // Promoted copies are ones this node held as a backup; it never had this one.
      spdlog::error("node {}: region {} was promoted to this node, which holds no copy of it", id_,
                    r.region_id());
      continue;
    }
    // Outside map_mu_: mapping and locking a region takes a while, and Resolve waits for it.
    const std::string file = absl::StrCat("copy-", r.region_id());
    absl::StatusOr<std::shared_ptr<Region>> copy =
        MapDataRegion(file, r.size(), options_.config.lock_memory());
    if (!copy.ok() && options_.config.lock_memory()) {
      // A copy in memory that may be paged out still keeps the region's data; one that does not
      // exist keeps nothing.
      spdlog::warn("node {}: backup copy of region {} is not locked in RAM: {}", id_, r.region_id(),
                   std::string(copy.status().message()));
      copy = MapDataRegion(file, r.size(), false);
    }
    if (!copy.ok()) {
      spdlog::error("node {}: cannot hold the backup copy of region {} ({} bytes): {}", id_,
                    r.region_id(), r.size(), std::string(copy.status().message()));
      continue;
    }
    // Registered now, so that a promotion needs no extra round: the CM learns the key at once.
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        fabric_->Register((*copy)->data(), r.size());
    if (!mr.ok()) {
      spdlog::error("node {}: cannot register the backup copy of region {}: {}", id_, r.region_id(),
                    std::string(mr.status().message()));
      continue;
    }
    out.emplace(r.region_id(),
                BackupEntry{std::move(*copy), std::shared_ptr<MemoryRegistration>(std::move(*mr))});
    fresh->push_back(r.region_id());
  }
  return out;
}

std::vector<uint32_t> Node::BackupsOf(uint32_t region_id) const {
  farm::ReaderMutexLock l(&map_mu_);
  auto it = region_map_.find(region_id);
  if (it == region_map_.end()) return {};
  return std::vector<uint32_t>(it->second.info.backup_node().begin(),
                               it->second.info.backup_node().end());
}

absl::StatusOr<Node::Copies> Node::CopiesOf(uint32_t region_id) const {
  farm::ReaderMutexLock l(&map_mu_);
  auto it = region_map_.find(region_id);
  if (it == region_map_.end()) {
    return absl::OutOfRangeError(
        absl::StrCat("region ", region_id, " is not in the current membership"));
  }
  const control::RegionInfo& info = it->second.info;
  if (info.recovering()) {
    return absl::UnavailableError(absl::StrCat("region ", region_id, " is recovering: node ",
                                               info.node_id(), " took it over; retry"));
  }
  Copies c;
  c.primary = info.node_id();
  c.backups.assign(info.backup_node().begin(), info.backup_node().end());
  return c;
}

std::shared_ptr<Region> Node::BackupCopy(uint32_t region_id) const {
  farm::ReaderMutexLock l(&map_mu_);
  auto it = backups_.find(region_id);
  return it == backups_.end() ? nullptr : it->second.copy;
}

std::vector<uint32_t> Node::BackupRegions() const {
  std::vector<uint32_t> out;
  {
    farm::MutexLock l(&map_mu_);
    for (const auto& [id, copy] : backups_) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::shared_ptr<Region>> Node::MapDataRegion(const std::string& name, size_t size,
                                                            bool lock, bool keep) {
  if (data_dir_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Region>> region = Region::Allocate(size, lock);
    if (!region.ok()) return region.status();
    return std::shared_ptr<Region>(std::move(*region));
  }
  bool created = false;
  absl::StatusOr<std::unique_ptr<Region>> region = data_dir_->MapRegion(name, size, lock, &created);
  if (!region.ok()) return region.status();
  if (created && keep) {
    (void)data_dir_->RemoveFile(name);
    return absl::DataLossError(absl::StrCat(
        "the data directory ", data_dir_->path(), " lacks ", name,
        ", which its manifest says held a region this node served: move the directory away (or "
        "give the node an empty one) to start it empty"));
  }
  // A file of an earlier run that is not restored (a region served elsewhere when the cluster
  // stopped, a copy that was dropped) holds nothing of this one's.
  if (!created && !keep) std::memset((*region)->data(), 0, size);
  return std::shared_ptr<Region>(std::move(*region));
}

absl::Status Node::LoadManifest(control::DataManifest* restored) {
  if (data_dir_ == nullptr || !data_dir_->Exists("manifest")) return absl::OkStatus();
  absl::StatusOr<std::string> bytes = data_dir_->ReadFile("manifest");
  if (!bytes.ok()) return bytes.status();
  control::DataManifest m;
  const std::string where = absl::StrCat("the data directory ", data_dir_->path());
  const std::string start_empty =
      "move the directory away (or give the node an empty one) to start it empty";
  if (!m.ParseFromString(*bytes)) {
    return absl::DataLossError(
        absl::StrCat(where, " holds a manifest that cannot be read: ", start_empty));
  }
  if (m.node_id() != id_ || m.cluster_name() != options_.config.cluster_name()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " belongs to node ", m.node_id(), " of cluster '", m.cluster_name(),
                     "', not to node ", id_, " of cluster '", options_.config.cluster_name(), "'"));
  }
  if (m.region_size() != options_.config.region_size() ||
      m.region_count() != options_.config.region_count()) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, " was made for regions of ", m.region_size(), " bytes, ",
                     m.region_count(), " per node, and the configuration says ",
                     options_.config.region_size(), " bytes, ", options_.config.region_count(),
                     ": start the node with the region_size and "
                     "region_count it ran with, or ",
                     start_empty));
  }
  if (!m.clean() && options_.config.f() == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        where,
        " holds the regions of a node that did not leave cleanly with the whole cluster "
        "(it was killed, crashed, or stopped alone), and with f = 0 no backup copy holds what "
        "they may miss (committed writes that only the log records held, half-applied "
        "commits): a crash of the cluster is survived with f >= 1. ",
        start_empty));
  }
  *restored = std::move(m);
  if (restored->clean()) {
    spdlog::info("node {}: restarting from {} (its membership epoch {} when the cluster stopped)",
                 id_, data_dir_->path(), restored->membership().epoch());
  } else {
    spdlog::warn(
        "node {}: restarting from {}, which it did not leave cleanly (membership epoch {}): its "
        "regions are recovered from their backup copies and journals",
        id_, data_dir_->path(), restored->membership().epoch());
  }
  return absl::OkStatus();
}

absl::Status Node::SaveRoot(const std::string& name, absl::string_view bytes) {
  if (data_dir_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", id_, " has no data directory to keep root '", name, "' in"));
  }
  if (name.size() > 90) {
    return absl::InvalidArgumentError(absl::StrCat("root name '", name, "' is too long"));
  }
  return data_dir_->WriteFile("root-" + name, bytes);
}

absl::StatusOr<std::string> Node::LoadRoot(const std::string& name) const {
  if (data_dir_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("node ", id_, " has no data directory (no roots)"));
  }
  if (name.size() > 90) {
    return absl::InvalidArgumentError(absl::StrCat("root name '", name, "' is too long"));
  }
  return data_dir_->ReadFile("root-" + name);
}

const control::RegionLayout* Node::RestoredLayout(uint32_t region) const {
  auto it = restored_layouts_.find(region);
  return it == restored_layouts_.end() ? nullptr : &it->second;
}

std::map<uint32_t, std::string> Node::CopyFiles() const {
  std::map<uint32_t, std::string> out;
  farm::MutexLock l(&map_mu_);
  for (const auto& [id, e] : backups_) {
    std::string name = absl::StrCat("copy-", id);
    for (size_t i = 0; i < regions_.size(); ++i) {
      if (regions_[i].get() == e.copy.get()) name = absl::StrCat("slot-", i);
    }
    out[id] = std::move(name);
  }
  return out;
}

void Node::WriteManifest(const control::Membership& m) {
  if (data_dir_ == nullptr) return;
  const std::map<uint32_t, std::string> copy_files = CopyFiles();
  std::lock_guard<std::mutex> l(manifest_mu_);
  if (sealed_ || m.epoch() <= manifest_epoch_) return;
  control::DataManifest manifest;
  for (const auto& [id, name] : copy_files) (*manifest.mutable_copy_files())[id] = name;
  for (uint32_t region : in_use_) manifest.add_regions_in_use(region);
  manifest.set_node_id(id_);
  manifest.set_cluster_name(options_.config.cluster_name());
  manifest.set_region_size(options_.config.region_size());
  manifest.set_region_count(options_.config.region_count());
  *manifest.mutable_membership() = m;
  if (absl::Status s = data_dir_->WriteFile("manifest", manifest.SerializeAsString()); !s.ok()) {
    // The regions stay correct in memory; what fails is only their description on disk.
    spdlog::error("node {}: cannot record membership {} in the data directory: {}", id_, m.epoch(),
                  std::string(s.message()));
    return;
  }
  manifest_epoch_ = m.epoch();
  manifest_ = manifest;
  // The files of copies this node no longer holds.
  std::set<std::string> held;
  for (const control::RegionInfo& r : m.regions()) {
    const bool backup = Lists(r.backup_node(), id_);
    if (backup || (r.promoted() && r.node_id() == id_)) {
      held.insert(absl::StrCat("copy-", r.region_id()));
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir_->path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "copy-") && !held.count(name)) {
      if (absl::Status s = data_dir_->RemoveFile(name); !s.ok()) {
        spdlog::warn("node {}: {}", id_, std::string(s.message()));
      }
    }
  }
}

absl::Status Node::SealDataDir(const std::map<uint32_t, control::RegionLayout>& layouts) {
  if (data_dir_ == nullptr) return absl::OkStatus();
  std::vector<std::shared_ptr<Region>> files(regions_.begin(), regions_.end());
  control::DataManifest manifest;
  {
    farm::MutexLock l(&map_mu_);
    for (const auto& [id, e] : backups_) files.push_back(e.copy);
    *manifest.mutable_membership() = membership_;
  }
  for (const std::shared_ptr<Region>& r : files) {
    if (absl::Status s = r->Sync(0, r->size()); !s.ok()) return s;
  }
  manifest.set_node_id(id_);
  manifest.set_cluster_name(options_.config.cluster_name());
  manifest.set_region_size(options_.config.region_size());
  manifest.set_region_count(options_.config.region_count());
  manifest.set_clean(true);
  for (const auto& [region, layout] : layouts) (*manifest.mutable_layouts())[region] = layout;
  for (const auto& [id, name] : CopyFiles()) (*manifest.mutable_copy_files())[id] = name;
  std::lock_guard<std::mutex> l(manifest_mu_);
  for (uint32_t region : in_use_) manifest.add_regions_in_use(region);
  if (absl::Status s = data_dir_->WriteFile("manifest", manifest.SerializeAsString()); !s.ok()) {
    return s;
  }
  sealed_ = true;
  spdlog::info("node {}: its regions are on disk in {} (membership epoch {}, {} region(s))", id_,
               data_dir_->path(), manifest.membership().epoch(), layouts.size());
  return absl::OkStatus();
}

absl::Status Node::ApplyMembership(const control::Membership& m) {
  // One membership at a time: the manifest's clean-up of copy files must not remove one that a
  // later membership's copy was just created in.
  std::lock_guard<std::mutex> applying(apply_mu_);
  std::vector<uint32_t> fresh;
  absl::flat_hash_map<uint32_t, BackupEntry> backups = BackupCopiesFor(m, &fresh);
  absl::Status s = InstallMembership(m, std::move(backups));
  if (s.ok()) WriteManifest(m);
  if (!s.ok() || cm_ == nullptr || fresh.empty()) return s;
  // The copies made for `m` as installed (none if a newer membership was installed first), under
  // one look at the map, then reported outside it.
  std::vector<control::BackupCopy> reports;
  {
    farm::MutexLock l(&map_mu_);
    for (uint32_t region : fresh) {
      auto it = backups_.find(region);
      if (it == backups_.end()) continue;
      control::BackupCopy& report = reports.emplace_back();
      report.set_region_id(region);
      report.set_remote_base(it->second.registration->remote_base());
      report.set_rkey(it->second.registration->key());
    }
  }
  for (const control::BackupCopy& report : reports) cm_->ReportBackupCopy(report);
  return s;
}

absl::Status Node::InstallMembership(const control::Membership& m,
                                     absl::flat_hash_map<uint32_t, BackupEntry> backups) {
  farm::MutexLock l(&map_mu_);
  if (m.epoch() <= membership_.epoch()) return absl::OkStatus();
  // Forget the addresses of nodes that left: a later process may reuse an address (an
  // ephemeral port), and must get a fresh peer (a new connection), not the dead one's.
  absl::flat_hash_map<std::string, PeerId> still_present;
  for (const control::NodeInfo& n : m.nodes()) {
    auto it = peers_by_address_.find(n.fabric_address());
    if (it != peers_by_address_.end()) still_present.insert(*it);
  }
  peers_by_address_ = std::move(still_present);
  absl::flat_hash_map<uint32_t, PeerId> peer_of_node;
  for (const control::NodeInfo& n : m.nodes()) {
    if (n.provider() != fabric_->provider()) {
      return absl::FailedPreconditionError(absl::StrCat("node ", n.node_id(), " uses provider ",
                                                        n.provider(), ", this node ",
                                                        fabric_->provider()));
    }
    auto it = peers_by_address_.find(n.fabric_address());
    if (it == peers_by_address_.end()) {
      absl::StatusOr<PeerId> peer = fabric_->AddPeer(n.fabric_address());
      if (!peer.ok()) return peer.status();
      it = peers_by_address_.emplace(n.fabric_address(), *peer).first;
    }
    peer_of_node[n.node_id()] = it->second;
  }
  absl::flat_hash_map<uint32_t, RegionEntry> map;
  int recovering = 0;
  for (const control::RegionInfo& r : m.regions()) {
    recovering += r.recovering();
    RegionEntry e;
    e.info = r;
    e.peer = peer_of_node[r.node_id()];
    if (r.node_id() == id_ && r.promoted()) {
      auto it = backups.find(r.region_id());
      if (it != backups.end()) e.local = it->second.copy->data();
    } else if (r.node_id() == id_) {
      e.local = LocalBase(r);
    }
    map[r.region_id()] = e;
  }
  region_map_ = std::move(map);
  recovering_.store(recovering, std::memory_order_relaxed);
  backups_ = std::move(backups);
  membership_ = m;
  map_version_.fetch_add(1, std::memory_order_release);
  return absl::OkStatus();
}

void Node::Deliver(const control::Membership& m) {
  // Tests hold a node's application of a membership here (the argument: {node id, &m}).
  std::pair<uint32_t, const control::Membership*> delivered{id_, &m};
  FARM_SYNC_POINT_CALLBACK("Node::Deliver", &delivered);
  std::lock_guard<std::mutex> l(listeners_mu_);
  if (!evicted().ok()) return;  // fail-stop: nothing after the eviction
  bool listed = false;
  for (const control::NodeInfo& n : m.nodes()) listed |= n.node_id() == id_;
  if (!listed) {
    EvictLocked(absl::StrCat("a membership without it arrived (epoch ", m.epoch(), ")"));
    return;
  }
  absl::Status s = ApplyMembership(m);
  if (!s.ok()) {
    spdlog::error("node {}: cannot apply membership epoch {}: {}", id_, m.epoch(),
                  std::string(s.message()));
    return;
  }
  for (const auto& [id, listener] : listeners_) listener(m);
  // After the listeners: a promoted region's new primary has taken its recovery locks.
  if (hold_acks_) {
    unacked_epoch_ = std::max(unacked_epoch_, m.epoch());
    return;
  }
  if (cm_ != nullptr) cm_->AckMembership(m.epoch());
}

void Node::FinishRestore() {
  std::lock_guard<std::mutex> l(listeners_mu_);
  if (!hold_acks_) return;
  hold_acks_ = false;
  spdlog::info("node {}: the copies promoted to it after the crash took their recovery locks", id_);
  if (cm_ != nullptr && evicted().ok()) cm_->AckMembership(unacked_epoch_);
}

bool Node::lease_held() const {
  return cm_ == nullptr || std::chrono::steady_clock::now() < cm_->lease_expiry();
}

void Node::Evict(const std::string& reason) {
  std::lock_guard<std::mutex> l(listeners_mu_);
  EvictLocked(reason);
}

void Node::EvictLocked(const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(eviction_mu_);
    if (!eviction_.ok()) return;
    // Set first: the listeners below describe their peers with it (Messenger::DescribePeer).
    eviction_ = absl::FailedPreconditionError(
        absl::StrCat("node ", id_, " was evicted from the cluster: ", reason));
  }
  spdlog::error("node {} was evicted from the cluster: {}; it no longer acts as a member", id_,
                reason);
  // Fail-stop: a last membership that lists nobody, above every epoch seen, so that Resolve
  // refuses every address and the layers above drop every peer.
  control::Membership none;
  none.set_epoch(membership().epoch() + 1);
  none.set_cm_node_id(options_.config.cm_node_id());
  if (absl::Status s = ApplyMembership(none); !s.ok()) {
    spdlog::error("node {}: {}", id_, std::string(s.message()));
  }
  // Tests hold an evicted node here, its map empty and its layers not yet told (the argument:
  // the node's id): its participant refuses every LOCK while its messenger still answers.
  uint32_t evicted_id = id_;
  FARM_SYNC_POINT_CALLBACK("Node::EvictLocked:BeforeListeners", &evicted_id);
  for (const auto& [id, listener] : listeners_) listener(none);
  // Only now are waiters told: whoever returns from WaitForEviction sees the node fail-stopped
  // (no member, no region, the listeners told).
  {
    std::lock_guard<std::mutex> l(eviction_mu_);
    eviction_applied_ = true;
  }
  eviction_cv_.notify_all();
}

absl::Status Node::evicted() const {
  std::lock_guard<std::mutex> l(eviction_mu_);
  return eviction_;
}

bool Node::WaitForEviction(absl::Duration timeout) {
  std::unique_lock<std::mutex> l(eviction_mu_);
  return eviction_cv_.wait_for(l, absl::ToChronoMilliseconds(timeout),
                               [this] { return eviction_applied_; });
}

void Node::ReportSuspect(uint32_t node, const std::string& reason) {
  if (!evicted().ok() || cm_ == nullptr) return;
  spdlog::warn("node {} reports node {} to the configuration manager: {}", id_, node, reason);
  cm_->ReportSuspect(node, reason);
}

void Node::ReportRegionInUse(uint32_t region_id) {
  if (data_dir_ != nullptr) {
    // Recorded before anything is written in it: a restart after a crash tells a region that
    // held nothing (served again empty if no backup copy is left) from one that did.
    std::lock_guard<std::mutex> l(manifest_mu_);
    if (in_use_.insert(region_id).second && !sealed_ && manifest_epoch_ > 0) {
      manifest_.add_regions_in_use(region_id);
      if (absl::Status s = data_dir_->WriteFile("manifest", manifest_.SerializeAsString());
          !s.ok()) {
        spdlog::error("node {}: cannot record that region {} holds data in the data directory: {}",
                      id_, region_id, std::string(s.message()));
      }
    }
  }
  if (!evicted().ok() || cm_ == nullptr) return;
  cm_->ReportRegionInUse(region_id);
}

void Node::MarkClusterEnding() {
  if (cm_ != nullptr) cm_->MarkClusterEnding();
}

void Node::ReportHandOffReady(uint32_t region_id) {
  if (!evicted().ok() || cm_ == nullptr) return;
  cm_->ReportHandOffReady(region_id);
}

void Node::ReportBackupSynced(uint32_t region_id) {
  if (!evicted().ok() || cm_ == nullptr) return;
  // Tests lose reports here, as a report sent while the CM changes is (the argument: the region;
  // set it to 0 to drop the report).
  FARM_SYNC_POINT_CALLBACK("Node::ReportBackupSynced", &region_id);
  if (region_id == 0) return;
  cm_->ReportBackupSynced(region_id);
}

int Node::AddMembershipListener(std::function<void(const control::Membership&)> listener,
                                uint64_t seen_epoch) {
  std::lock_guard<std::mutex> l(listeners_mu_);
  if (const control::Membership m = membership(); m.epoch() > seen_epoch && evicted().ok()) {
    listener(m);  // applied since the caller looked: passed as Deliver would have
  }
  listeners_.emplace_back(next_listener_id_, std::move(listener));
  return next_listener_id_++;
}

void Node::RemoveMembershipListener(int id) {
  std::lock_guard<std::mutex> l(listeners_mu_);  // waits for a call in progress
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [id](const auto& e) { return e.first == id; }),
                   listeners_.end());
}

control::Membership Node::membership() const {
  farm::ReaderMutexLock l(&map_mu_);
  return membership_;
}

std::vector<uint32_t> Node::members() const {
  farm::ReaderMutexLock l(&map_mu_);
  std::vector<uint32_t> ids;
  for (const control::NodeInfo& n : membership_.nodes()) ids.push_back(n.node_id());
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool Node::IsMember(uint32_t node_id) const {
  farm::ReaderMutexLock l(&map_mu_);
  for (const control::NodeInfo& n : membership_.nodes()) {
    if (n.node_id() == node_id) return true;
  }
  return false;
}

char* Node::local_area(const std::string& purpose) const {
  for (const auto& [name, region] : areas_) {
    if (name == purpose) return region->data();
  }
  return nullptr;
}

char* Node::LocalBase(const control::RegionInfo& r) const {
  if (r.purpose().empty())
    return r.index() < regions_.size() ? regions_[r.index()]->data() : nullptr;
  return r.index() < areas_.size() ? areas_[r.index()].second->data() : nullptr;
}

std::vector<control::RegionInfo> Node::RegionsOf(uint32_t node_id,
                                                 const std::string& purpose) const {
  farm::ReaderMutexLock l(&map_mu_);
  std::vector<control::RegionInfo> out;
  for (const control::RegionInfo& r : membership_.regions()) {
    if (r.node_id() == node_id && r.purpose() == purpose) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const control::RegionInfo& a, const control::RegionInfo& b) {
    return a.index() < b.index();
  });
  return out;
}

absl::StatusOr<RemoteTarget> Node::Resolve(GlobalAddress addr, size_t len) const {
  if (len == 0) return absl::InvalidArgumentError("empty access");
  if (len > fabric_->max_rma_size()) {
    return absl::InvalidArgumentError(absl::StrCat(len, "-byte access exceeds the provider's ",
                                                   fabric_->max_rma_size(), "-byte limit"));
  }
  // Shared: every READ, WRITE and LOCK of every thread resolves here; only a membership change
  // writes the map.
  farm::ReaderMutexLock l(&map_mu_);
  auto it = region_map_.find(addr.region);
  if (it == region_map_.end()) {
    return absl::OutOfRangeError(
        absl::StrCat("address ", addr.ToString(), " is in no region of the current membership"));
  }
  const RegionEntry& e = it->second;
  if (addr.offset > e.info.size() || len > e.info.size() - addr.offset) {
    return absl::OutOfRangeError(absl::StrCat("access of ", len, " bytes at ", addr.ToString(),
                                              " leaves region ", addr.region, " (node ",
                                              e.info.node_id(), ", ", e.info.size(), " bytes)"));
  }
  if (e.info.recovering()) {
    return absl::UnavailableError(
        absl::StrCat("region ", addr.region, " is recovering: node ", e.info.node_id(),
                     " took it over from its failed primary and serves it once every member "
                     "applied the change; retry"));
  }
  RemoteTarget t;
  t.node_id = e.info.node_id();
  t.peer = e.peer;
  t.buffer = RemoteBuffer{e.info.remote_base() + addr.offset, e.info.rkey()};
  if (e.local != nullptr) t.local = e.local + addr.offset;
  return t;
}

absl::Status Node::Access(bool is_read, GlobalAddress addr, char* buf, size_t len,
                          absl::Duration timeout) {
  absl::StatusOr<RemoteTarget> t = Resolve(addr, len);
  if (!t.ok()) return t.status();
  if (t->local != nullptr) {
    if (is_read) {
      std::memcpy(buf, t->local, len);
    } else {
      std::memcpy(t->local, buf, len);
    }
    return absl::OkStatus();
  }
  // Checked before the copy below: an area may be larger than the region-sized staging buffer.
  if (len > region_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        is_read ? "READ" : "WRITE", " of ", len, " bytes at ", addr.ToString(), " exceeds the ",
        region_size_,
        "-byte staging buffer of Node::Read/Write: split it, or use a Node::Batch with "
        "registered memory"));
  }
  farm::MutexLock l(&staging_mu_);
  Batch batch(this);
  if (!is_read) std::memcpy(staging_->data(), buf, len);
  absl::Status s =
      is_read ? batch.Read(addr, staging_->At(0, len)) : batch.Write(addr, staging_->At(0, len));
  if (s.ok()) s = batch.Wait(timeout);
  if (!s.ok()) {
    // A READ that completes later must not land in the next operation's bytes.
    if (absl::Status r = staging_->Retire(batch.in_flight()); !r.ok()) {
      spdlog::warn("node {}: {}", id_, std::string(r.message()));
    }
    return absl::Status(s.code(),
                        absl::StrCat(is_read ? "READ" : "WRITE", " of ", len, " bytes at ",
                                     addr.ToString(), " on node ", t->node_id, ": ", s.message()));
  }
  if (is_read) std::memcpy(buf, staging_->data(), len);
  return absl::OkStatus();
}

absl::Status Node::Read(GlobalAddress addr, void* dst, size_t len, absl::Duration timeout) {
  return Access(true, addr, static_cast<char*>(dst), len, timeout);
}

absl::Status Node::Write(GlobalAddress addr, const void* src, size_t len, absl::Duration timeout) {
  return Access(false, addr, static_cast<char*>(const_cast<void*>(src)), len, timeout);
}

absl::Status Node::Batch::Post(bool is_read, GlobalAddress addr, LocalBuffer local) {
  if (targets_.empty()) checked_version_ = node_->map_version_.load(std::memory_order_acquire);
  absl::StatusOr<RemoteTarget> t = node_->Resolve(addr, local.size);
  if (!t.ok()) {
    if (early_error_.ok()) early_error_ = t.status();
    return t.status();
  }
  bool known = false;
  for (const auto& [region, node] : targets_) known |= region == addr.region;
  if (!known) targets_.emplace_back(addr.region, t->node_id);
  return is_read ? ops_.Read(t->peer, t->buffer, local) : ops_.Write(t->peer, t->buffer, local);
}

absl::Status Node::Batch::CheckTargets() {
  // Acquire: pairs with the release in ApplyMembership; the lock below sees that map or later.
  const uint64_t version = node_->map_version_.load(std::memory_order_acquire);
  if (version == checked_version_) return absl::OkStatus();
  checked_version_ = version;
  uint32_t gone = 0;
  bool found = false, member = false;
  uint64_t epoch = 0;
  std::string why;
  std::optional<std::pair<uint32_t, uint32_t>> moved;  // a region and its primary now
  {
    farm::ReaderMutexLock l(&node_->map_mu_);
    for (const auto& [region, node] : targets_) {
      auto r = node_->region_map_.find(region);
      // A region whose primary moved (a backup promoted) is abandoned too: an operation that
      // completes at the old primary after this node applied the move may have read memory
      // that the new primary has written over since (once every member acknowledged the move).
      if (r != node_->region_map_.end() &&
          (r->second.info.node_id() == node || FARM_MUTANT("count_moved_reads"))) {
        continue;
      }
      if (r != node_->region_map_.end()) moved.emplace(region, r->second.info.node_id());
      found = true;
      gone = node;
      const control::Membership& m = node_->membership_;
      epoch = m.epoch();
      if (auto it = m.departed().find(node); it != m.departed().end()) why = it->second;
      for (const control::NodeInfo& n : m.nodes()) member |= n.node_id() == node;
      break;
    }
  }
  if (!found) return absl::OkStatus();
  if (absl::Status evicted = node_->evicted(); !evicted.ok()) {
    return absl::UnavailableError(absl::StrCat("the RDMA operation(s) to node ", gone,
                                               " were abandoned: ", evicted.message()));
  }
  if (moved.has_value()) {
    return absl::UnavailableError(
        absl::StrCat("region ", moved->first, " moved from node ", gone, " to node ", moved->second,
                     " (membership epoch ", epoch,
                     why.empty() ? "" : absl::StrCat("; node ", gone, " left the cluster: ", why),
                     "); the RDMA operation(s) to node ", gone, " were abandoned"));
  }
  return absl::UnavailableError(absl::StrCat(
      "node ", gone, member ? " restarted" : " left the cluster", " (membership epoch ", epoch, ")",
      why.empty() ? "" : absl::StrCat(": ", why), "; the RDMA operation(s) to it were abandoned"));
}

absl::Status Node::Batch::Wait(absl::Duration timeout) {
  absl::Status s =
      targets_.empty() ? ops_.Wait(timeout) : ops_.Wait(timeout, [this] { return CheckTargets(); });
  // Once more after the last completion: a membership applied while the operations completed
  // decides whether their results count.
  if (s.ok() && !targets_.empty()) s = CheckTargets();
  if (!early_error_.ok()) {
    s = early_error_;
    early_error_ = absl::OkStatus();
  }
  return s;
}

Node::Batch::Batch(Channel* channel) : node_(channel->node()), ops_(channel->fabric_channel()) {}

absl::StatusOr<std::unique_ptr<Node::StagingBuffer>> Node::StagingBuffer::Create(Node* node,
                                                                                 size_t size,
                                                                                 bool lock_memory) {
  std::unique_ptr<StagingBuffer> b(new StagingBuffer(node, size, lock_memory));
  if (absl::Status s = b->Allocate(&b->current_); !s.ok()) return s;
  return b;
}

Node::StagingBuffer::~StagingBuffer() = default;

absl::Status Node::StagingBuffer::Allocate(Memory* m) const {
  absl::StatusOr<std::unique_ptr<Region>> memory = Region::Allocate(size_, lock_memory_);
  if (!memory.ok()) return memory.status();
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
      node_->RegisterBuffer((*memory)->data(), (*memory)->size());
  if (!mr.ok()) return mr.status();
  m->memory = std::move(*memory);
  m->registration = std::move(*mr);
  return absl::OkStatus();
}

absl::Status Node::StagingBuffer::Retire(OpBatch::InFlight in_flight) {
  // Free what earlier abandoned operations held, once they all completed.
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [](const auto& r) { return r.first.done(); }),
                 retired_.end());
  if (in_flight.done()) return absl::OkStatus();
  Memory fresh;
  if (absl::Status s = Allocate(&fresh); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("cannot replace a staging buffer that operations still in flight "
                               "may write to: ",
                               s.message()));
  }
  retired_.emplace_back(std::move(in_flight), std::move(current_));
  current_ = std::move(fresh);
  if (retired_.size() % 16 == 0) {
    spdlog::warn(
        "node {}: {} staging buffers of {} bytes are held by operations that never "
        "completed (their peers are gone or unresponsive)",
        node_->id(), retired_.size(), size_);
  }
  return absl::OkStatus();
}

Node::Channel::Channel(Node* node, std::unique_ptr<FabricChannel> channel)
    : node_(node), channel_(std::move(channel)), batch_(this) {}

Node::Channel::~Channel() = default;

absl::StatusOr<std::unique_ptr<Node::Channel>> Node::OpenChannel() {
  absl::StatusOr<std::unique_ptr<FabricChannel>> channel = fabric_->OpenChannel();
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<Channel>(new Channel(this, std::move(*channel)));
}

absl::Status Node::Batch::Read(GlobalAddress addr, LocalBuffer local) {
  return Post(true, addr, local);
}

absl::Status Node::Batch::Write(GlobalAddress addr, LocalBuffer local) {
  return Post(false, addr, local);
}

}  // namespace farm
