#include "platform/configuration_manager.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/config.h"
#include "platform/configuration_store.h"
#include "platform/control_channel.h"
#include "platform/mutant.h"
#include "platform/placement.h"
#include "platform/priority.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(50);
// The shortest a leaving node waits for the CM's release (TcpConfigurationManager::Leave).
constexpr absl::Duration kLeaveWait = absl::Seconds(2);
constexpr absl::Duration kFirstMessageTimeout = absl::Seconds(5);
// How long the CM waits before it tries again to record a membership that the configuration
// store did not take (unreachable, or refused it).
constexpr std::chrono::seconds kStoreRetry{1};

constexpr char kLeft[] = "it left";

// Leases are measured on a monotonic clock: a wall-clock step must not evict anyone.
using Clock = std::chrono::steady_clock;

control::ControlMessage RefusalMessage(const std::string& reason) {
  control::ControlMessage m;
  m.mutable_refusal()->set_reason(reason);
  return m;
}

// How long a CM that took over waits for the members of the configuration it took over to
// reconnect (each notices the failed CM when its own lease with it ends, then reads the record
// and connects): those that did not by then are removed.
absl::Duration ReconnectWindow(absl::Duration lease) { return 4 * lease + absl::Seconds(3); }

// A CM that takes over: the record it wrote to claim the role (CM takeover) and what it took
// over from.
struct Takeover {
  control::Membership record;  // its epoch, members and regions, naming this CM
  int64_t version = 0;         // its version in the store
  uint32_t failed_cm = 0;      // the CM it replaces
  std::string why;             // why that one is gone
};

// The CM service: admission, region-id assignment and membership broadcast.
//
// Thread-compatible: all state is owned by the service thread.
class CmServerImpl : public CmServer {
 public:
  // The CM of node `self`. With `takeover`, it continues the configuration another CM recorded
  // (ContinueFrom) instead of forming a cluster.
  CmServerImpl(config::ClusterConfig config, uint32_t self,
               std::unique_ptr<ControlListener> listener, std::shared_ptr<ConfigurationStore> store,
               std::optional<Takeover> takeover)
      : config_(std::move(config)),
        self_(self),
        listener_(std::move(listener)),
        join_deadline_(absl::Now() + absl::Seconds(config_.join_timeout_s())),
        lease_(std::chrono::milliseconds(config_.lease_ms())),
        store_(std::move(store)) {
    if (takeover.has_value()) ContinueFrom(std::move(*takeover));
    thread_ = std::thread([this] { Run(); });
  }

  ~CmServerImpl() override {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
    if (commit_.valid()) commit_.wait();  // a store call ends within its timeout
  }

 private:
  struct Member {
    control::NodeInfo info;
    std::vector<control::RegionInfo> regions;  // region_id assigned
    std::unique_ptr<ControlChannel> channel;
    Clock::time_point last_heard;  // anything received renews the lease
    uint64_t acked_epoch = 0;      // the last membership it said it applied (MembershipAck)
    // It restarts from its data directory (JoinRequest.restored): what it said of the stopped
    // cluster.
    std::optional<control::DataManifest> restored;
  };

  // Takes over the configuration `t.record`: its members are members, with the regions it
  // lists, and reconnect one by one (Readmit); once all did, or the reconnection window passed,
  // the failed CM and those that did not are removed like nodes whose leases expired
  // (MaybeFinishTakeover).
  void ContinueFrom(Takeover t) {
    const Clock::time_point now = Clock::now();
    formed_ = true;
    epoch_ = t.record.epoch();
    fence_epoch_ = t.record.fence_epoch();
    restart_fence_ = t.record.restart_fence();
    first_epoch_ = t.record.first_epoch();
    store_version_ = t.version;
    uint32_t next_id = t.record.next_region_id();
    for (const control::NodeInfo& n : t.record.nodes()) {
      Member& m = members_[n.node_id()];
      m.info = n;
      // The members' leases with the failed CM end no later than a lease from now.
      m.last_heard = now;
    }
    for (const control::RegionInfo& r : t.record.regions()) {
      next_id = std::max(next_id, r.region_id() + 1);
      auto m = members_.find(r.node_id());
      if (m == members_.end()) {
        spdlog::error("CM: the record lists region {} on node {}, which it does not list",
                      r.region_id(), r.node_id());
        continue;
      }
      m->second.regions.push_back(r);
    }
    next_region_id_ = std::max(next_region_id_, next_id);
    taking_over_ = true;
    takeover_failed_cm_ = t.failed_cm;
    takeover_why_ = t.why;
    takeover_start_ = now;
    takeover_deadline_ =
        now + absl::ToChronoMilliseconds(ReconnectWindow(absl::FromChrono(lease_)));
    spdlog::warn(
        "CM: node {} takes over as configuration manager from node {} ({}) at membership epoch "
        "{}; waiting up to {} for its {} member(s) to reconnect",
        self_, t.failed_cm, t.why, epoch_,
        absl::FormatDuration(absl::FromChrono(takeover_deadline_ - now)), Awaited());
  }

  // A member that said Leave, waiting for its release (see ReleaseLeavers).
  struct Leaving {
    std::unique_ptr<ControlChannel> channel;
    uint64_t epoch;  // the first membership without it; 0: none (no member left)
  };

  // The second step of a graceful leave. A node that leaves closes its fabric once released:
  // when every member has acknowledged a membership without it (epoch `epoch` or a later one),
  // none of them posts to it any more, so no operation is in flight to a connection that closes
  // (SoftiWARP flushes requests posted to a closing connection later, with contexts that other
  // operations reuse by then: README "Providers"). The release is an Eviction that says it left;
  // the leaving node waits for it for a bounded time only, so a member that never acknowledges
  // costs a shutdown that bound, not more.
  void ReleaseLeavers() {
    for (auto it = leaving_.begin(); it != leaving_.end();) {
      bool closed = false;
      for (;;) {  // anything it still sends (a heartbeat sent before its Leave) is of no use
        absl::StatusOr<control::ControlMessage> msg = it->channel->Receive(absl::ZeroDuration());
        if (msg.ok()) continue;
        closed = !absl::IsDeadlineExceeded(msg.status());
        break;
      }
      bool applied = true;
      for (const auto& [id, m] : members_) applied &= m.acked_epoch >= it->epoch;
      if (!closed && !applied) {
        ++it;
        continue;
      }
      if (!closed) {
        control::ControlMessage release;
        release.mutable_eviction()->set_reason(kLeft);
        (void)it->channel->Send(release);
      }
      it->channel->Shutdown();
      it = leaving_.erase(it);
    }
  }

  // A connection accepted, waiting for its join request.
  struct Pending {
    std::unique_ptr<ControlChannel> channel;
    absl::Time deadline;
  };

  void Run() {
    RaiseToLeasePriority();
    // Tests hold a CM back here, before its first turn, as a loaded machine can (the argument:
    // its node's id): one that took over answers its members late.
    [[maybe_unused]] uint32_t self = self_;
    FARM_SYNC_POINT_CALLBACK("CmServer::Run:Start", &self);
    if (taking_over_) {
      spdlog::info("configuration manager listening on port {}, for the members to reconnect",
                   listener_->port());
    } else {
      spdlog::info("configuration manager listening on port {}, expecting {} node(s)",
                   listener_->port(), RequiredNodes());
    }
    std::vector<pollfd> fds;
    last_turn_ = Clock::now();
    while (!stop_.load(std::memory_order_relaxed)) {
      if (stepped_down_) {  // admits and watches nothing more (StepDown)
        absl::SleepFor(kTick);
        continue;
      }
      // Tests stall the CM here, as a stopped process would be.
      FARM_SYNC_POINT("CmServer::Run:Turn");
      if (StepDownIfPaused(last_turn_, Clock::now(), Clock::duration::zero())) continue;
      // Wakes as soon as a connection or a message arrives (a heartbeat is acknowledged at once,
      // so that short leases work), else after a tick to judge leases and pending joins.
      fds.clear();
      fds.push_back({listener_->fd(), POLLIN, 0});
      for (const Pending& p : pending_) fds.push_back({p.channel->fd(), POLLIN, 0});
      for (const auto& [id, m] : members_) {
        if (m.channel != nullptr) fds.push_back({m.channel->fd(), POLLIN, 0});
      }
      const Clock::time_point before_poll = Clock::now();
      const int ready =
          poll(fds.data(), fds.size(), static_cast<int>(absl::ToInt64Milliseconds(kTick)));
      if (StepDownIfPaused(before_poll, Clock::now(), absl::ToChronoNanoseconds(kTick))) continue;
      if (ready > 0 && (fds[0].revents & POLLIN) != 0) {
        absl::StatusOr<std::unique_ptr<ControlChannel>> ch =
            listener_->Accept(absl::ZeroDuration());
        if (ch.ok()) pending_.push_back({std::move(*ch), absl::Now() + kFirstMessageTimeout});
      }
      AdmitPending();
      if (taking_over_) MaybeFinishTakeover();
      if (!formed_ && !failed_ && absl::Now() > join_deadline_) FailFormation();
      if (formed_) WatchMembers();
      ReleaseLeavers();
      if (store_ != nullptr && !stepped_down_) PollCommit();
      last_turn_ = Clock::now();
    }
  }

  // A CM that did not run for a lease (its process was stopped, or starved) renewed no lease
  // meanwhile, its own node's included: that node has stopped acting as a member, and the others
  // may be taking the role over. It must not judge anyone on what it saw before: it steps down
  // (without writing the store) once it finds that from `from` to `to` it ran for no more than
  // `waited` (a poll's timeout) of it. Without a store nobody takes the role over: it goes on
  // (reading the heartbeats that waited) rather than evict every member.
  bool StepDownIfPaused(Clock::time_point from, Clock::time_point to, Clock::duration waited) {
    const Clock::duration gap = to - from - waited;
    if (!formed_ || store_ == nullptr || gap < lease_ - lease_ / kLeaseSlackDivisor) return false;
    StepDown(absl::StrCat("it did not run for ", absl::FormatDuration(absl::FromChrono(to - from)),
                          " (its process was stopped or starved), a lease or more: its own "
                          "node's lease ended, and another node may take its role over"));
    return true;
  }

  // Whether the CM's own node goes without a lease renewal now. With a configuration store,
  // another node may take the role over once this CM has not answered it for a lease (and a
  // lease more), and serves this node's regions elsewhere a lease after that: this node must
  // have stopped serving by then, though a CM cut off from the others (not stopped: a network
  // partition) goes on running. So a CM that has not heard from a member that could take over
  // (one that forms the cluster and is connected to it) for a lease, or whose removal of such a
  // member the store has not recorded yet, renews its own node's lease no more until that
  // changes: once the removal is recorded, that member's compare-and-set fails. A member that
  // failed costs the CM's node nothing while the store records its removal within the rest of
  // the node's lease; a CM cut off from the others and from the store loses its node's lease
  // within two leases of last hearing from them (its node then stops acting as a member), before
  // a takeover, which waits two leases from the same time, can activate its regions elsewhere a
  // lease later. The price: with the store unreachable, a member's failure ends the CM's node's
  // lease too (nobody can tell a store that is down from one cut off from the CM).
  bool OwnLeaseWithheld(Clock::time_point now) const {
    if (store_ == nullptr || !formed_ || taking_over_) return false;
    if (FARM_MUTANT("cm_keeps_own_lease")) return false;
    auto could_take_over = [&](uint32_t id) {
      const config::NodeConfig* n = FindNode(config_, id);
      return id != self_ && n != nullptr && !n->late();
    };
    for (const auto& [id, m] : members_) {
      if (m.channel != nullptr && could_take_over(id) && now - m.last_heard > lease_) return true;
    }
    for (const auto& [id, why] : pending_departed_) {
      if (why != kLeft && could_take_over(id)) return true;
    }
    return false;
  }

  // Admits the pending connections whose join request arrived and drops those that sent
  // something else, closed, or sent nothing in kFirstMessageTimeout. Never waits for a
  // connection that has sent nothing: members' heartbeats are acknowledged between two looks,
  // however long it stays silent (a port probe, a stuck client). One that stops in the middle of
  // a frame holds the CM for up to the 2 s ControlChannel::Receive gives the rest of a frame.
  void AdmitPending() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      absl::StatusOr<control::ControlMessage> msg = it->channel->Receive(absl::ZeroDuration());
      if (!msg.ok() && absl::IsDeadlineExceeded(msg.status()) && absl::Now() < it->deadline) {
        ++it;
        continue;
      }
      std::unique_ptr<ControlChannel> channel = std::move(it->channel);
      it = pending_.erase(it);
      if (!msg.ok() || !msg->has_join()) {
        spdlog::warn("CM: dropped a connection from {} that sent no join request ({})",
                     channel->peer(), msg.ok() ? "other message" : msg.status().ToString());
        continue;
      }
      Admit(std::move(channel), msg->join());
    }
  }

  // The nodes the cluster forms with (all but the late ones).
  int RequiredNodes() const {
    int n = 0;
    for (const config::NodeConfig& c : config_.node()) n += c.late() ? 0 : 1;
    return n;
  }
  bool AllRequiredJoined() const {
    for (const config::NodeConfig& n : config_.node()) {
      if (!n.late() && !members_.count(n.id())) return false;
    }
    return true;
  }

  std::string MissingNodes() const {
    std::vector<std::string> missing;
    for (const config::NodeConfig& n : config_.node()) {
      if (!n.late() && !members_.count(n.id())) {
        missing.push_back(
            absl::StrCat("node ", n.id(), " (", n.host(), ":", n.control_port(), ")"));
      }
    }
    return absl::StrJoin(missing, ", ");
  }

  // The cluster does not form, for `reason` (default: nodes missing at the join timeout).
  void FailFormation(std::string reason = "") {
    failed_ = true;
    if (reason.empty()) {
      reason = absl::StrCat("the cluster did not form: ", MissingNodes(), " did not join within ",
                            config_.join_timeout_s(), " s");
    }
    spdlog::error("{}", reason);
    for (auto& [id, m] : members_) (void)m.channel->Send(RefusalMessage(reason));
    members_.clear();
  }

  // Picks the id for a join request, or returns a refusal reason.
  absl::StatusOr<uint32_t> ChooseId(const control::JoinRequest& req) const {
    if (req.config_fingerprint() != Fingerprint(config_)) {
      return absl::FailedPreconditionError(
          "the node was started with a different cluster configuration than the CM's");
    }
    if (req.requested_id() < 0) {
      // The CM's own node joins with its id; never hand that id to someone else.
      for (const config::NodeConfig& n : config_.node()) {
        if (!members_.count(n.id()) && n.id() != self_) return n.id();
      }
      return absl::FailedPreconditionError("every configured node id is already taken");
    }
    uint32_t id = static_cast<uint32_t>(req.requested_id());
    if (FindNode(config_, id) == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("node id ", id, " is not in the cluster configuration"));
    }
    if (members_.count(id)) {
      return absl::FailedPreconditionError(absl::StrCat("node id ", id, " is already a member"));
    }
    if (req.has_restored() && formed_ && !req.restored().clean()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", id,
          " restarts from the data directory it did not leave cleanly (it crashed or was "
          "killed), but the cluster runs without it: what node ",
          id,
          " served is served by its backups now (or lost, with f = 0). Start it on an empty "
          "data directory (move this one away) to join as a new member; a directory not left "
          "cleanly restarts only with the whole cluster"));
    }
    if (req.has_restored() && formed_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", id,
          " restarts from its data directory, but the cluster formed without it: "
          "a cluster restarts from its nodes' data directories with all of them at once"));
    }
    int data_regions = 0;
    for (const control::RegionInfo& r : req.regions()) {
      data_regions += r.purpose().empty() && !r.promoted();  // promoted: a restored copy
    }
    if (data_regions != static_cast<int>(config_.region_count())) {
      return absl::FailedPreconditionError(absl::StrCat("node offers ", data_regions,
                                                        " data regions, the configuration says ",
                                                        config_.region_count()));
    }
    return id;
  }

  void Admit(std::unique_ptr<ControlChannel> ch, const control::JoinRequest& req) {
    if (req.rejoin_joined_epoch() != 0) {
      Readmit(std::move(ch), req);
      return;
    }
    if (taking_over_) {  // admitted once the members reconnected (MaybeFinishTakeover)
      deferred_joins_.emplace_back(std::move(ch), req);
      return;
    }
    absl::StatusOr<uint32_t> id =
        failed_
            ? absl::StatusOr<uint32_t>(absl::FailedPreconditionError("the cluster failed to form"))
            : ChooseId(req);
    if (!id.ok()) {
      spdlog::warn("CM: refused join from {}: {}", ch->peer(), std::string(id.status().message()));
      (void)ch->Send(RefusalMessage(std::string(id.status().message())));
      return;
    }
    Member m;
    m.info = req.node();
    m.info.set_node_id(*id);
    // The broadcast that lists it: the formation's (epoch 1) or the one right below.
    m.info.set_joined_epoch(formed_ ? epoch_ + 1 : 1);
    for (control::RegionInfo r : req.regions()) {
      r.set_node_id(*id);
      m.regions.push_back(r);
    }
    if (req.has_restored()) m.restored = req.restored();
    control::ControlMessage accepted;
    accepted.mutable_accepted()->set_node_id(*id);
    if (!ch->Send(accepted).ok()) return;
    m.channel = std::move(ch);
    m.last_heard = Clock::now();
    spdlog::info("CM: admitted node {} from {} ({}/{})", *id, m.channel->peer(),
                 members_.size() + 1, RequiredNodes());
    members_[*id] = std::move(m);
    ending_ = false;  // a node joins: the cluster goes on
    if (formed_) {
      AssignRegionIds(members_[*id]);
      PlaceBackups({&members_[*id]});
      Broadcast();
    } else if (AllRequiredJoined()) {
      if (absl::Status restart = CheckRestart(); !restart.ok()) {
        FailFormation(std::string(restart.message()));
        return;
      }
      formed_ = true;
      // Leases start now: nodes renew them once they have the first membership.
      for (auto& [mid, member] : members_) {
        AssignRegionIds(member);
        member.last_heard = Clock::now();
      }
      std::vector<Member*> all;
      for (auto& [mid, member] : members_) all.push_back(&member);
      PlaceBackups(all);
      // Restored regions hold data: their new backups copy it (txn/resync.h).
      if (!restored_.empty()) Rereplicate();
      const uint64_t published = Broadcast();
      if (restart_fence_ != 0) {
        // After a crash: the restored regions serve once every member replayed its journal
        // and their new primaries took their recovery locks (acknowledged the membership).
        // Every process of the crashed run is gone (each held its data directory's lock).
        recovery_epoch_ = published;
        recovery_start_ = Clock::now();
        recovery_not_before_ = recovery_start_;
        recovery_warned_ = false;
      }
    }
  }

  // A member of the configuration this CM took over reconnects (JoinRequest.rejoin_joined_epoch):
  // it keeps its id, its regions and its incarnation, and its backup copies can be promoted.
  void Readmit(std::unique_ptr<ControlChannel> ch, const control::JoinRequest& req) {
    const uint32_t id = static_cast<uint32_t>(std::max(req.requested_id(), 0));
    auto it = members_.find(id);
    std::string refusal;
    if (req.config_fingerprint() != Fingerprint(config_)) {
      refusal = "the node was started with a different cluster configuration than the CM's";
    } else if (it == members_.end() || !taking_over_) {
      refusal =
          absl::StrCat("node ", id, " is not a member of the configuration (membership epoch ",
                       epoch_, ") that node ", self_, " took over or runs as CM",
                       taking_over_ ? "" : ", or did not reconnect in time");
    } else if (it->second.info.joined_epoch() != req.rejoin_joined_epoch()) {
      refusal = absl::StrCat("node ", id, " of membership epoch ", req.rejoin_joined_epoch(),
                             " is not the incarnation the configuration lists (epoch ",
                             it->second.info.joined_epoch(), ")");
    }
    if (!refusal.empty()) {
      spdlog::warn("CM: refused node {} reconnecting from {}: {}", id, ch->peer(), refusal);
      (void)ch->Send(RefusalMessage(refusal));
      return;
    }
    control::ControlMessage accepted;
    accepted.mutable_accepted()->set_node_id(id);
    if (!ch->Send(accepted).ok()) return;
    Member& m = it->second;
    // Reconnected before: the node gave that connection up (its answer came late) and tried
    // again, so this one replaces it.
    if (m.channel != nullptr) m.channel->Shutdown();
    m.channel = std::move(ch);
    m.last_heard = Clock::now();
    // Judged gone earlier in the takeover (a peer that could not reach it while its lease lapsed
    // reported it): it is back, and stays.
    takeover_gone_.erase(id);
    for (const control::BackupCopy& c : req.backup_copies())
      backup_copies_[{c.region_id(), id}] = c;
    regions_in_use_.insert(req.regions_in_use().begin(), req.regions_in_use().end());
    spdlog::info("CM: node {} reconnected from {} ({} of {} member(s))", id, m.channel->peer(),
                 Connected(), Awaited());
  }

  // Taking over: the members expected to reconnect (all but the failed CM), and those that did.
  size_t Awaited() const { return members_.size() - members_.count(takeover_failed_cm_); }
  size_t Connected() const {
    size_t n = 0;
    for (const auto& [id, m] : members_) n += m.channel != nullptr;
    return n;
  }

  // Ends the takeover once every member but the failed CM reconnected, or the window passed:
  // the failed CM, and the members that did not reconnect, are removed (their regions promoted
  // where backups are left), in the first membership this CM publishes.
  void MaybeFinishTakeover() {
    const Clock::time_point now = Clock::now();
    bool all = true;
    for (const auto& [id, m] : members_) {
      all = all && (m.channel != nullptr || id == takeover_failed_cm_ || takeover_gone_.count(id));
    }
    if (!all && now < takeover_deadline_) return;
    std::map<uint32_t, std::string> gone = std::move(takeover_gone_);
    takeover_gone_.clear();
    for (const auto& [id, m] : members_) {
      if (id == takeover_failed_cm_) {
        gone[id] = absl::StrCat("it was the configuration manager and failed (", takeover_why_,
                                "); node ", self_, " took over");
      } else if (m.channel == nullptr && !gone.count(id)) {
        gone[id] = absl::StrCat(
            "it did not reconnect to node ", self_,
            ", which took over as configuration manager, within ",
            absl::FormatDuration(absl::FromChrono(takeover_deadline_ - takeover_start_)));
      }
    }
    taking_over_ = false;
    spdlog::warn(
        "CM: node {} ends its takeover ({} after it began): {} of {} member(s) "
        "reconnected",
        self_, absl::FormatDuration(absl::FromChrono(now - takeover_start_)), Connected(),
        Awaited());
    const uint64_t published = RemoveMembers(gone, now);
    // Nodes that asked to join meanwhile (the failed CM's node started again, say).
    std::vector<std::pair<std::unique_ptr<ControlChannel>, control::JoinRequest>> joins =
        std::move(deferred_joins_);
    deferred_joins_.clear();
    for (auto& [ch, req] : joins) Admit(std::move(ch), req);
    // Regions the failed CM was still recovering are activated as if this CM had promoted them.
    bool recovering = false;
    for (const auto& [id, m] : members_) {
      for (const control::RegionInfo& r : m.regions) recovering = recovering || r.recovering();
    }
    if (recovering && recovery_epoch_ == 0 && published != 0) {
      recovery_epoch_ = published;
      recovery_start_ = now;
      recovery_warned_ = false;
    }
  }

  // Ids for the member's new regions (those a restarted node claims keep theirs).
  void AssignRegionIds(Member& m) {
    for (control::RegionInfo& r : m.regions) {
      if (r.region_id() == 0) r.set_region_id(next_region_id_++);
    }
  }

  // A restart from the members' data directories (JoinRequest.restored), checked once all joined:
  // every claimed region id is claimed once, and every data region that a node served when the
  // cluster stopped (as any member's manifest says) is claimed by that node again, else the
  // cluster would form without its data. Fresh regions get ids above every id of the stopped
  // cluster. Fills restored_.
  absl::Status CheckRestart() {
    // A restart continues the stopped run's epochs: its processes' transaction ids (their
    // incarnations, the epochs they joined in) are never reused.
    uint64_t base = 0;
    bool crashed = false;
    for (const auto& [id, m] : members_) {
      if (!m.restored.has_value()) continue;
      base = std::max(base, m.restored->membership().epoch());
      crashed = crashed || !m.restored->clean();
    }
    if (base > 0) {
      epoch_ = std::max(epoch_, base);
      first_epoch_ = epoch_ + 1;
      for (auto& [id, m] : members_) m.info.set_joined_epoch(first_epoch_);
    }
    if (crashed) return CheckCrashRestart();
    std::map<uint32_t, uint32_t> claimed;  // region id -> node
    for (const auto& [id, m] : members_) {
      for (const control::RegionInfo& r : m.regions) {
        if (r.region_id() == 0) continue;
        auto [it, fresh] = claimed.emplace(r.region_id(), id);
        if (!fresh) {
          return absl::FailedPreconditionError(
              absl::StrCat("the cluster did not form: region ", r.region_id(),
                           " is claimed by node ", it->second, " and node ", id,
                           " (data directories of different runs of the cluster?)"));
        }
      }
    }
    uint32_t next = 0;
    for (const auto& [id, m] : members_) {
      if (!m.restored.has_value()) continue;
      const control::Membership& was = m.restored->membership();
      next = std::max(next, was.next_region_id());
      for (const control::RegionInfo& r : was.regions()) {
        next = std::max(next, r.region_id() + 1);
        const config::NodeConfig* primary = FindNode(config_, r.node_id());
        // A late node's regions end with it (it holds no backups, so none was promoted to it).
        if (!r.purpose().empty() || (primary != nullptr && primary->late())) continue;
        auto c = claimed.find(r.region_id());
        if (c != claimed.end() && c->second == r.node_id()) continue;
        return absl::FailedPreconditionError(absl::StrCat(
            "the cluster did not form: region ", r.region_id(), " was served by node ", r.node_id(),
            " when the cluster stopped (membership epoch ", was.epoch(), ", says node ", id,
            "'s data directory), and node ", r.node_id(),
            primary == nullptr ? " is not in the configuration any more" : " restarts without it",
            ": forming the cluster would lose its data. Start node ", r.node_id(),
            " on its own data directory, or every node on an empty one"));
      }
    }
    for (const auto& [region, node] : claimed) {
      restored_.insert(region);
      next = std::max(next, region + 1);
    }
    next_region_id_ = std::max(next_region_id_, next);
    if (!restored_.empty()) {
      spdlog::info(
          "CM: the cluster restarts from its nodes' data directories: {} data region(s) keep "
          "their ids and contents",
          restored_.size());
    }
    return absl::OkStatus();
  }

  // A restart after a crash (some member's data directory was not left cleanly): of every data
  // region of the newest membership any member recorded, a clean member that served it keeps
  // it; else one of its backups that was in sync and restarted with its copy becomes its
  // primary (promoted and recovering, as after a failure; its journal holds the records of
  // the transactions to decide), and the other offered copies are dropped. A region with
  // neither fails the formation. The regions serve once every member acknowledged the first
  // membership (Node::FinishRestore), which carries restart_fence. Fills restored_.
  absl::Status CheckCrashRestart() {
    const control::Membership* newest = nullptr;
    for (const auto& [id, m] : members_) {
      if (!m.restored.has_value()) continue;
      if (newest == nullptr || m.restored->membership().epoch() > newest->epoch()) {
        newest = &m.restored->membership();
      }
    }
    // Who offers what: region id -> members (a clean member's own or promoted region, or an
    // unclean one's backup copy).
    std::map<uint32_t, std::set<uint32_t>> offered;
    for (const auto& [id, m] : members_) {
      for (const control::RegionInfo& r : m.regions) {
        if (r.region_id() != 0) offered[r.region_id()].insert(id);
      }
    }
    auto clean = [&](uint32_t node) {
      auto it = members_.find(node);
      return it != members_.end() && it->second.restored.has_value() &&
             it->second.restored->clean();
    };
    std::set<uint32_t> in_use;  // regions some member says held data
    for (const auto& [id, m] : members_) {
      if (!m.restored.has_value()) continue;
      in_use.insert(m.restored->regions_in_use().begin(), m.restored->regions_in_use().end());
    }
    std::map<uint32_t, uint32_t> winner;  // region id -> the member that serves it now
    std::vector<uint32_t> empty;          // regions without a copy that never held data
    uint32_t next = newest->next_region_id();
    for (const control::RegionInfo& r : newest->regions()) {
      next = std::max(next, r.region_id() + 1);
      const config::NodeConfig* primary = FindNode(config_, r.node_id());
      if (!r.purpose().empty() || (primary != nullptr && primary->late())) continue;
      const std::set<uint32_t>& by = offered[r.region_id()];
      if (clean(r.node_id()) && by.count(r.node_id())) {
        winner[r.region_id()] = r.node_id();
        continue;
      }
      std::vector<uint32_t> in_sync;
      for (uint32_t b : r.backup_node()) {
        if (!IsSyncing(r, b)) in_sync.push_back(b);
      }
      for (uint32_t b : in_sync) {
        if (by.count(b) && !clean(b)) {
          winner[r.region_id()] = b;
          break;
        }
      }
      if (winner.count(r.region_id())) continue;
      if (!in_use.count(r.region_id())) {
        // Nothing was ever allocated in it (e.g. a client's region, promoted when it left):
        // nothing to lose; its id is not given again.
        empty.push_back(r.region_id());
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "the cluster did not form: it restarts after a crash (membership epoch ", newest->epoch(),
          "), and region ", r.region_id(), ", served by node ", r.node_id(),
          " then, has no backup copy that was in sync among the restarted nodes (its in-sync "
          "backups then: ",
          in_sync.empty() ? std::string("none, the region was degraded")
                          : absl::StrCat("node(s) ", absl::StrJoin(in_sync, ", ")),
          "): forming the cluster would lose its data. Start every node on its own data "
          "directory, or every node on an empty one"));
    }
    for (auto& [id, m] : members_) {
      std::vector<control::RegionInfo> kept;
      for (control::RegionInfo& r : m.regions) {
        if (r.region_id() == 0) {
          kept.push_back(std::move(r));
          continue;
        }
        auto w = winner.find(r.region_id());
        if (w != winner.end() && w->second == id) {
          r.set_recovering(true);  // until every member replayed its journal
          kept.push_back(std::move(r));
        } else if (!r.promoted()) {
          r.set_region_id(0);  // one of its own that another copy replaces: starts empty
          kept.push_back(std::move(r));
        }
        // else an offered copy another was chosen over: dropped
      }
      m.regions = std::move(kept);
    }
    for (const auto& [region, node] : winner) restored_.insert(region);
    next_region_id_ = std::max(next_region_id_, next);
    restart_fence_ = first_epoch_;
    spdlog::warn(
        "CM: the cluster restarts after a crash (membership epoch {} when it crashed): {} data "
        "region(s) recovered from their backup copies and journals, serving once every member "
        "replayed its journal{}",
        newest->epoch(), restored_.size(),
        empty.empty() ? std::string()
                      : absl::StrCat("; region(s) ", absl::StrJoin(empty, ", "),
                                     " held no data and had no copy left: not restored"));
    return absl::OkStatus();
  }

  std::string DomainOf(uint32_t node) const {
    const config::NodeConfig* n = FindNode(config_, node);
    return n == nullptr ? absl::StrCat("node ", node) : FailureDomainOf(*n);
  }

  // The members that may hold backups (those that form the cluster: late nodes come and go),
  // and how many backups each holds now (`load`).
  std::vector<PlacementNode> BackupCandidates(absl::flat_hash_map<uint32_t, uint64_t>* load) const {
    std::vector<PlacementNode> candidates;
    for (const auto& [id, member] : members_) {
      const config::NodeConfig* n = FindNode(config_, id);
      if (n != nullptr && !n->late()) candidates.push_back(PlacementNode{id, DomainOf(id)});
      for (const control::RegionInfo& r : member.regions) {
        for (uint32_t b : r.backup_node()) ++(*load)[b];
      }
    }
    return candidates;
  }

  // Places the f backups of the new members' data regions (they are empty, as are the copies
  // the backups allocate, so nothing needs copying) on members that form the cluster, in other
  // failure domains than the region's other copies (platform/placement.h), in turns (each new
  // member's first region, then each one's second, ...) so that the backups spread evenly. Late
  // nodes come and go (clients), so they hold no backups. A region placed while too few domains
  // are up (a node restarted while another is down) gets fewer backups, and the log says so.
  void PlaceBackups(const std::vector<Member*>& new_members) {
    if (config_.f() == 0) return;
    absl::flat_hash_map<uint32_t, uint64_t> load;
    const std::vector<PlacementNode> candidates = BackupCandidates(&load);
    for (size_t k = 0;; ++k) {
      bool any = false;
      for (Member* m : new_members) {
        if (k >= m->regions.size()) continue;
        any = true;
        control::RegionInfo& r = m->regions[k];
        if (!r.purpose().empty() || r.backup_node_size() > 0) continue;
        if (restored_.count(r.region_id())) continue;  // holds data: Rereplicate copies it
        const uint32_t primary = m->info.node_id();
        BackupChoice c = ChooseBackups(r.region_id(), {primary}, {DomainOf(primary)}, config_.f(),
                                       candidates, &load);
        for (uint32_t b : c.nodes) r.add_backup_node(b);
        if (!c.shortfall.empty()) {
          spdlog::warn("CM: region {} of node {} has {} of f = {} backups: {}", r.region_id(),
                       primary, c.nodes.size(), config_.f(), c.shortfall);
        }
      }
      if (!any) break;
    }
  }

  // Whether backup `b` of region `r` may take the region over from a departing primary once the
  // CM knows its registered copy: it stays (not in `gone`, still a member) and its copy is
  // complete (a copy still being made, IsSyncing, lacks what the primary held before it started).
  // `allow_syncing` only for the mutant that breaks the second rule. PromoteBackups promotes by
  // it and AwaitsCopyReport waits by it, so the two cannot disagree on who may take over.
  bool MayTakeOver(const control::RegionInfo& r, uint32_t b,
                   const std::map<uint32_t, std::string>& gone, bool allow_syncing = false) const {
    if (gone.count(b) || !members_.count(b)) return false;
    return allow_syncing || !IsSyncing(r, b);
  }

  // The data regions of departed primaries move to one of their backups that stays (the first
  // one listed whose registered copy the CM knows): the region keeps its id, so every address
  // into it stays valid, and its memory is now that node's copy (RegionInfo.promoted). A region
  // with no such backup is lost with its primary. Called before the departed are erased.
  // Returns how many regions it promoted.
  int PromoteBackups(const std::map<uint32_t, std::string>& gone) {
    int promoted = 0;
    for (const auto& [id, why] : gone) {
      auto m = members_.find(id);
      if (m == members_.end()) continue;
      for (const control::RegionInfo& r : m->second.regions) {
        if (!r.purpose().empty()) continue;
        const control::BackupCopy* copy = nullptr;
        uint32_t to = 0;
        for (uint32_t b : r.backup_node()) {
          auto c = backup_copies_.find({r.region_id(), b});
          if (c == backup_copies_.end()) continue;
          if (!MayTakeOver(r, b, gone, /*allow_syncing=*/FARM_MUTANT("promote_syncing_backup"))) {
            continue;
          }
          copy = &c->second;
          to = b;
          break;
        }
        if (copy == nullptr) {
          if (config_.f() > 0) {
            spdlog::error("CM: region {} of node {} is lost: no backup copy of it is left",
                          r.region_id(), id);
          }
          continue;
        }
        control::RegionInfo p = r;
        p.set_node_id(to);
        p.set_remote_base(copy->remote_base());
        p.set_rkey(copy->rkey());
        p.set_promoted(true);
        p.set_recovering(true);  // until ActivateRecovered
        p.clear_backup_node();
        for (uint32_t b : r.backup_node()) {
          if (b != to && !gone.count(b)) p.add_backup_node(b);
        }
        p.clear_syncing_backup();
        for (uint32_t b : r.syncing_backup()) {
          if (b != to && !gone.count(b)) p.add_syncing_backup(b);
        }
        spdlog::warn(
            "CM: region {} of node {} is now served by node {}, its backup ({} of f = {} "
            "backups left)",
            r.region_id(), id, to, p.backup_node_size(), config_.f());
        members_[to].regions.push_back(std::move(p));
        ++promoted;
      }
    }
    return promoted;
  }

  // Whether a data region of a member in `gone` has no backup copy the CM could promote now
  // while one of its backups stays and has yet to report the copy it made (a node reports its
  // fresh copies after it applied the membership that named it, ApplyMembership): that copy may
  // hold committed writes already (COMMIT-BACKUP reaches it as soon as its node installed it), so
  // the departure waits for the report (WatchMembers; up to a lease) rather than lose the region.
  // Seen in node_test: a node that left right after the cluster formed lost a region whose
  // backup's report was still on its way.
  bool AwaitsCopyReport(const std::map<uint32_t, std::string>& gone) const {
    for (const auto& [id, why] : gone) {
      auto m = members_.find(id);
      if (m == members_.end()) continue;
      for (const control::RegionInfo& r : m->second.regions) {
        if (!r.purpose().empty()) continue;
        bool promotable = false, awaited = false;
        for (uint32_t b : r.backup_node()) {
          if (!MayTakeOver(r, b, gone)) continue;
          if (backup_copies_.count({r.region_id(), b})) {
            promotable = true;
          } else {
            awaited = true;
          }
        }
        if (!promotable && awaited) return true;
      }
    }
    return false;
  }

  static bool IsBackup(const control::RegionInfo& r, uint32_t node) {
    return std::find(r.backup_node().begin(), r.backup_node().end(), node) != r.backup_node().end();
  }

  bool BalancePrimaries() const {
    return config_.f() > 0 && (!config_.has_balance_primaries() || config_.balance_primaries());
  }

  // Primary balancing: when nothing recovers, syncs or is being handed over, and a member that
  // forms the cluster is the primary of at least two data regions more than another one that
  // holds a complete, registered backup copy of one of them, marks that region handing_off to it
  // (one at a time, as ChooseHandOff ranks them: a region that holds data (RegionInUse) first,
  // never to a node that serves as many regions holding data, then the largest gap). Every
  // node brings the same number of regions, so only failures (promotions) and restarts (new
  // regions) make a gap: where the application put its data is left alone otherwise. Its primary
  // drains it and says HandOffReady (txn/engine.h); MoveHandedOff moves it then. True if a region
  // was marked.
  bool Rebalance(Clock::time_point now) {
    if (!BalancePrimaries() || recovery_epoch_ != 0 || ending_) return false;
    absl::flat_hash_map<uint32_t, int> serves;  // members that form the cluster: data regions
    for (const auto& [id, m] : members_) {
      const config::NodeConfig* n = FindNode(config_, id);
      if (n != nullptr && !n->late()) serves[id] = 0;
    }
    for (const auto& [id, m] : members_) {
      for (const control::RegionInfo& r : m.regions) {
        if (!r.purpose().empty()) continue;
        if (r.recovering() || r.handing_off() || r.syncing_backup_size() > 0) return false;
        if (auto s = serves.find(id); s != serves.end()) ++s->second;
      }
    }
    // A complete, registered backup copy on a member that forms the cluster.
    auto can_take = [&](const control::RegionInfo& r, uint32_t b) {
      return serves.contains(b) && IsBackup(r, b) && !IsSyncing(r, b) &&
             backup_copies_.count({r.region_id(), b}) > 0;
    };
    std::vector<uint32_t> nodes;
    for (const auto& [id, count] : serves) nodes.push_back(id);
    std::vector<ServedRegion> regions;
    for (const auto& [id, m] : members_) {
      for (const control::RegionInfo& r : m.regions) {
        if (!r.purpose().empty()) continue;
        ServedRegion& s = regions.emplace_back();
        s.region_id = r.region_id();
        s.primary = id;
        s.holds_data = regions_in_use_.count(r.region_id()) > 0;
        for (uint32_t b : r.backup_node()) {
          if (can_take(r, b)) s.takers.push_back(b);
        }
      }
    }
    const HandOffChoice chosen = ChooseHandOff(nodes, regions);
    std::pair<uint32_t, uint32_t> choice{chosen.region_id, chosen.to};  // region (0: none), to
    // Tests choose the region to hand over here (the argument: region id, 0 for none, and the
    // backup to hand it to).
    FARM_SYNC_POINT_CALLBACK("CmServer::Rebalance", &choice);
    if (choice.first == 0) return false;
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (r.region_id() != choice.first || !r.purpose().empty()) continue;
        if (!serves.contains(id) || !can_take(r, choice.second)) return false;
        r.set_handing_off(true);
        r.set_handing_off_to(choice.second);
        hand_off_since_[r.region_id()] = now;
        spdlog::info(
            "CM: region {} moves from node {} (primary of {} data region(s)) to node {} (of {}), "
            "its backup (primary balancing); node {} drains it first",
            r.region_id(), id, serves[id], choice.second, serves[choice.second], id);
        return true;
      }
    }
    return false;
  }

  // Moves the regions whose primaries said HandOffReady (`ready`: region, from): the backup it
  // is handed to serves it (promoted and recovering until ActivateRecovered, as after a failure,
  // but its old primary stays: no lease to wait for) and the old primary becomes a backup, its
  // memory the copy (complete: nothing was locked in it). A hand-off that cannot finish (its
  // target is no complete backup any more) or that did not drain in time is called off
  // (`changed`). True if a region moved.
  bool MoveHandedOff(const std::vector<std::pair<uint32_t, uint32_t>>& ready, Clock::time_point now,
                     bool* changed) {
    bool moved = false;
    for (const auto& [region, from] : ready) {
      auto m = members_.find(from);
      if (m == members_.end()) continue;
      std::vector<control::RegionInfo>& regions = m->second.regions;
      auto it = std::find_if(regions.begin(), regions.end(), [&](const control::RegionInfo& r) {
        return r.region_id() == region && r.handing_off();
      });
      if (it == regions.end()) continue;  // a late or repeated report
      const uint32_t to = it->handing_off_to();
      auto copy = backup_copies_.find({region, to});
      hand_off_since_.erase(region);
      if (!members_.count(to) || copy == backup_copies_.end() || !IsBackup(*it, to) ||
          IsSyncing(*it, to)) {
        spdlog::warn("CM: region {} stays on node {}: node {} holds no complete copy of it now",
                     region, from, to);
        it->set_handing_off(false);
        it->set_handing_off_to(0);
        *changed = true;
        continue;
      }
      control::RegionInfo p = *it;
      p.set_node_id(to);
      p.set_remote_base(copy->second.remote_base());
      p.set_rkey(copy->second.rkey());
      p.set_promoted(true);
      p.set_recovering(true);  // until ActivateRecovered
      p.set_handing_off(false);
      p.set_handing_off_to(0);
      p.clear_backup_node();
      for (uint32_t b : it->backup_node()) {
        if (b != to) p.add_backup_node(b);
      }
      p.add_backup_node(from);
      // The old primary's memory is its copy now (Node), registered as the primary's was.
      control::BackupCopy own;
      own.set_region_id(region);
      own.set_remote_base(it->remote_base());
      own.set_rkey(it->rkey());
      backup_copies_[{region, from}] = own;
      regions.erase(it);
      members_[to].regions.push_back(std::move(p));
      spdlog::warn("CM: region {} is served by node {} now, handed over by node {} (a backup now)",
                   region, to, from);
      moved = true;
    }
    // A hand-off that does not drain (a transaction that holds a lock in the region for this
    // long) is called off; balancing may mark it again later.
    const Clock::duration limit = std::max<Clock::duration>(20 * lease_, std::chrono::seconds(5));
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (!r.handing_off()) continue;
        auto since = hand_off_since_.try_emplace(r.region_id(), now).first;
        if (now - since->second < limit) continue;
        spdlog::warn("CM: region {} stays on node {}: it did not drain within {}", r.region_id(),
                     id, absl::FormatDuration(absl::FromChrono(limit)));
        r.set_handing_off(false);
        r.set_handing_off_to(0);
        hand_off_since_.erase(since);
        *changed = true;
      }
    }
    return moved;
  }

  // Calls off the hand-offs whose primary or target is among the departed (`gone`).
  void CancelHandOffs(const std::map<uint32_t, std::string>& gone) {
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (!r.handing_off() || (!gone.count(id) && !gone.count(r.handing_off_to()))) continue;
        if (!gone.count(id)) {
          spdlog::warn("CM: region {} stays on node {}: node {}, to which it was handed, left",
                       r.region_id(), id, r.handing_off_to());
        }
        r.set_handing_off(false);
        r.set_handing_off_to(0);
        hand_off_since_.erase(r.region_id());
      }
    }
  }

  // Drops the departed nodes' backup copies from the regions they backed up. The regions stay
  // with the copies they have left (degraded) until re-replication copies them anew.
  void DropBackups(const std::map<uint32_t, std::string>& gone) {
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        auto* backups = r.mutable_backup_node();
        // A backup that left on purpose (a shutdown) is no surprise; a failed one is.
        bool lost = false, failed = false;
        for (uint32_t b : *backups) {
          auto it = gone.find(b);
          if (it == gone.end()) continue;
          lost = true;
          failed |= it->second != kLeft;
        }
        if (!lost) continue;
        backups->erase(std::remove_if(backups->begin(), backups->end(),
                                      [&](uint32_t b) { return gone.count(b) > 0; }),
                       backups->end());
        auto* syncing = r.mutable_syncing_backup();
        syncing->erase(std::remove_if(syncing->begin(), syncing->end(),
                                      [&](uint32_t b) { return gone.count(b) > 0; }),
                       syncing->end());
        spdlog::log(failed    ? spdlog::level::warn
                    : ending_ ? spdlog::level::debug
                              : spdlog::level::info,
                    "CM: region {} of node {} lost a backup: {} of f = {} left", r.region_id(), id,
                    backups->size(), config_.f());
      }
    }
  }

  static bool IsSyncing(const control::RegionInfo& r, uint32_t node) {
    return std::find(r.syncing_backup().begin(), r.syncing_backup().end(), node) !=
           r.syncing_backup().end();
  }

  // Node `node` finished copying region `region_id` (control.BackupSynced): it becomes a backup
  // like the others. False if nothing changed (a late or repeated report).
  bool MarkSynced(uint32_t region_id, uint32_t node) {
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (r.region_id() != region_id || !IsSyncing(r, node)) continue;
        auto* syncing = r.mutable_syncing_backup();
        syncing->erase(std::remove(syncing->begin(), syncing->end(), node), syncing->end());
        spdlog::warn("CM: node {} holds a full copy of region {} (of node {}) now", node, region_id,
                     id);
        return true;
      }
    }
    spdlog::debug("CM: node {} reports a full copy of region {}, not listed as syncing (again)",
                  node, region_id);
    return false;
  }

  // Re-replication: a data region that serves with fewer than f backups (one was lost, or it was
  // promoted) gets new ones among the members that form the cluster, in other failure domains
  // than its copies (as PlaceBackups). They are listed as syncing until they copied the region
  // (txn/resync.h), and the membership that adds them fences requests sent before it. A
  // recovering region waits until it serves. True if a backup was added. Runs every tick: the
  // placement's inputs are gathered only when some region needs a backup.
  bool Rereplicate() {
    if (config_.f() == 0 || ending_) return false;
    auto wants_backup = [&](const control::RegionInfo& r) {
      return r.purpose().empty() && !r.recovering() &&
             r.backup_node_size() < static_cast<int>(config_.f());
    };
    bool any = false;
    for (const auto& [id, m] : members_) {
      any = any || std::any_of(m.regions.begin(), m.regions.end(), wants_backup);
    }
    if (!any) return false;
    absl::flat_hash_map<uint32_t, uint64_t> load;
    const std::vector<PlacementNode> candidates = BackupCandidates(&load);
    bool added = false;
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (!wants_backup(r)) continue;
        std::vector<uint32_t> holders{id};
        std::vector<std::string> domains{DomainOf(id)};
        for (uint32_t b : r.backup_node()) {
          holders.push_back(b);
          domains.push_back(DomainOf(b));
        }
        const uint32_t wanted = config_.f() - r.backup_node_size();
        BackupChoice c = ChooseBackups(r.region_id(), holders, domains, wanted, candidates, &load);
        if (c.nodes.empty()) continue;  // no domain left: said when the region became degraded
        for (uint32_t b : c.nodes) {
          r.add_backup_node(b);
          r.add_syncing_backup(b);
          spdlog::warn("CM: region {} of node {} gets a new backup on node {} (it copies it)",
                       r.region_id(), id, b);
        }
        added = true;
      }
    }
    fence_next_ |= added;
    return added;
  }

  // Publishes the current membership; `departed` says why nodes dropped since the last one are
  // gone. Without a configuration store it goes to every member at once. With one (ZooKeeper),
  // it is first recorded there by compare-and-set, on another thread so that heartbeats are
  // acknowledged meanwhile, and sent once recorded (PollCommit); a change made while a record
  // is being written goes out in the next membership. Returns the epoch of the first membership
  // that will carry the current state: a member that acknowledged it (or a later one) applied
  // everything changed so far.
  uint64_t Broadcast(const std::map<uint32_t, std::string>& departed = {}) {
    for (const auto& [id, why] : departed) pending_departed_[id] = why;
    if (stepped_down_) return epoch_;
    if (store_ != nullptr && (commit_.valid() || Clock::now() < retry_at_)) {
      dirty_ = true;
      return epoch_ + 1;
    }
    control::ControlMessage msg;
    control::Membership* mem = msg.mutable_membership();
    for (const auto& [id, why] : pending_departed_) (*mem->mutable_departed())[id] = why;
    if (store_ == nullptr) pending_departed_.clear();
    mem->set_epoch(++epoch_);
    mem->set_cm_node_id(self_);
    mem->set_next_region_id(next_region_id_);
    mem->set_f(config_.f());
    if (fence_next_) fence_epoch_ = epoch_;
    fence_next_ = false;
    mem->set_fence_epoch(fence_epoch_);
    mem->set_restart_fence(restart_fence_);
    mem->set_first_epoch(first_epoch_);
    for (const auto& [id, m] : members_) {
      *mem->add_nodes() = m.info;
      for (const control::RegionInfo& r : m.regions) *mem->add_regions() = r;
    }
    int degraded = 0;
    for (const control::RegionInfo& r : mem->regions()) {
      degraded += r.purpose().empty() && r.backup_node_size() < static_cast<int>(config_.f());
    }
    spdlog::info("CM: membership epoch {}: {} node(s), {} region(s), f = {}{}", epoch_,
                 mem->nodes_size(), mem->regions_size(), config_.f(),
                 degraded > 0 ? absl::StrCat(" (", degraded, " region(s) with fewer backups)")
                              : std::string());
    if (store_ == nullptr) {
      Send(msg);
      return epoch_;
    }
    std::string payload = mem->SerializeAsString();
    in_flight_ = std::move(msg);
    commit_ = std::async(std::launch::async,
                         [this, payload = std::move(payload)] { return Commit(payload); });
    return epoch_;
  }

  // Sends membership `msg` to the members it lists (one admitted after it was built learns of
  // itself from the next).
  void Send(const control::ControlMessage& msg) {
    for (const control::NodeInfo& n : msg.membership().nodes()) {
      auto it = members_.find(n.node_id());
      if (it == members_.end() || it->second.channel == nullptr) continue;  // gone since
      absl::Status s = it->second.channel->Send(msg);
      if (!s.ok()) {
        spdlog::warn("CM: could not send membership to node {}: {}", n.node_id(),
                     std::string(s.message()));
      }
    }
  }

  // What became of a membership the CM tried to record in its configuration store.
  struct CommitResult {
    enum Outcome { kRecorded, kRetry, kLost } outcome = kRetry;
    std::string why;  // kRetry, kLost: the store's error
  };

  // Records `payload` (a Membership) in the store, on the commit thread (one commit at a time:
  // the CM thread starts the next only after taking this one's result, so store_version_ and
  // last_attempt_ need no lock).
  CommitResult Commit(const std::string& payload) {
    bool contested = false;
    absl::StatusOr<int64_t> v = Write(payload, &contested);
    if (!v.ok() && contested && !last_attempt_.empty()) {
      // The previous write that timed out may have been applied after all: then it is ours.
      absl::StatusOr<VersionedRecord> current = store_->Read();
      if (current.ok() && current->data == last_attempt_) {
        store_version_ = current->version;
        v = Write(payload, &contested);
      }
    }
    if (v.ok()) {
      store_version_ = *v;
      last_attempt_.clear();
      return {CommitResult::kRecorded, ""};
    }
    if (absl::IsUnavailable(v.status())) last_attempt_ = payload;
    std::string why = absl::StrCat(store_->Describe(), ": ", v.status().message());
    if (contested) return {CommitResult::kLost, std::move(why)};
    return {CommitResult::kRetry, std::move(why)};
  }

  // One write of the record: a compare-and-set on the version this CM wrote last or, for its
  // first, on whatever the store holds (a previous run's record), or its creation. `contested`:
  // another writer's record won.
  absl::StatusOr<int64_t> Write(const std::string& payload, bool* contested) {
    *contested = false;
    absl::StatusOr<int64_t> v;
    if (store_version_ >= 0) {
      v = store_->CompareAndSet(store_version_, payload);
    } else {
      absl::StatusOr<VersionedRecord> current = store_->Read();
      if (absl::IsNotFound(current.status())) {
        v = store_->Create(payload);
      } else if (!current.ok()) {
        return current.status();  // unreachable, another cluster's, damaged: not a lost race
      } else {
        v = store_->CompareAndSet(current->version, payload);
      }
    }
    *contested = absl::IsFailedPrecondition(v.status()) || absl::IsAlreadyExists(v.status());
    return v;
  }

  // Takes the result of the record being written, if it is there: sends the membership once
  // recorded, tries again later if the store did not take it (the members keep the current one
  // meanwhile), and steps down if another configuration won.
  void PollCommit() {
    if (!commit_.valid()) {
      if (dirty_ && Clock::now() >= retry_at_) {
        dirty_ = false;
        Broadcast();
      }
      return;
    }
    if (commit_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    const CommitResult result = commit_.get();
    const uint64_t epoch = in_flight_.membership().epoch();
    switch (result.outcome) {
      case CommitResult::kRecorded:
        if (store_unavailable_since_.has_value()) {
          spdlog::warn("CM: {} takes configurations again (membership epoch {} recorded)",
                       store_->Describe(), epoch);
          store_unavailable_since_.reset();
        }
        for (const auto& [id, why] : in_flight_.membership().departed()) {
          pending_departed_.erase(id);
        }
        Send(in_flight_);
        if (dirty_) {
          dirty_ = false;
          Broadcast();
        }
        break;
      case CommitResult::kRetry:
        if (!store_unavailable_since_.has_value()) {
          store_unavailable_since_ = Clock::now();
          spdlog::error(
              "CM: cannot record membership epoch {} ({}): no reconfiguration until the "
              "configuration store takes it; the members keep the current configuration and "
              "the CM tries again every {} s",
              epoch, result.why, kStoreRetry.count());
        }
        retry_at_ = Clock::now() + kStoreRetry;
        dirty_ = true;  // a new membership (a new epoch) with the state of then
        break;
      case CommitResult::kLost:
        StepDown(absl::StrCat("another configuration was recorded in the configuration store (",
                              result.why, ")"));
        break;
    }
  }

  // Another configuration manager's configuration won: this one must not publish any more, and
  // its members cannot stay members of a configuration that lost. Evicts them all and stops.
  void StepDown(const std::string& why) {
    spdlog::error("CM: {}: this configuration manager stops, and evicts its {} member(s)", why,
                  members_.size());
    control::ControlMessage eviction;
    eviction.mutable_eviction()->set_reason(
        absl::StrCat("the configuration manager stopped: ", why));
    eviction.mutable_eviction()->set_cm_stepped_down(true);
    for (auto& [id, m] : members_) {
      if (m.channel == nullptr) continue;
      (void)m.channel->Send(eviction);
      m.channel->Shutdown();
    }
    members_.clear();
    for (Leaving& l : leaving_) l.channel->Shutdown();  // released: nobody is left to post
    leaving_.clear();
    // Closed, like the port: a node joining or reconnecting here learns at once that this CM
    // answers nothing more, instead of waiting out its timeout on an open connection.
    pending_.clear();
    deferred_joins_.clear();
    listener_.reset();
    stepped_down_ = true;
  }

  // Reads everything each member sent (heartbeats renew its lease; suspicions are collected),
  // then drops members whose connection closed, who said Leave, whose lease expired or whom a
  // peer reported, and tells the rest. Everything queued is read before leases are judged, so a
  // CM thread that was itself held up (a loaded machine) never evicts a node whose heartbeats were
  // waiting in its socket (held up for a lease or more, with a store, it steps down instead:
  // StepDownIfPaused).
  void WatchMembers() {
    std::map<uint32_t, std::string> gone;  // id -> why
    std::set<uint32_t> closed;             // of those, the ones whose connection closed
    std::vector<control::Suspect> suspects;
    std::vector<std::pair<uint32_t, uint32_t>> hand_off_ready;  // region, from
    const Clock::time_point now = Clock::now();
    for (auto& [id, m] : members_) {
      if (m.channel == nullptr) continue;  // taking over: not reconnected yet
      for (;;) {
        absl::StatusOr<control::ControlMessage> msg = m.channel->Receive(absl::ZeroDuration());
        if (!msg.ok()) {
          if (!absl::IsDeadlineExceeded(msg.status())) {
            gone[id] = absl::StrCat("its connection closed (", msg.status().message(), ")");
            closed.insert(id);
          }
          break;
        }
        // Read after the message arrived, so after the node sent it: the node's lease, which runs
        // from its send time, ends before this view of it (the time judged below is `now`, from
        // before the reads, so a message read late never counts against the node).
        m.last_heard = std::max(m.last_heard, Clock::now());
        if (msg->has_leave()) {
          gone[id] = kLeft;
          if (msg->leave().cluster_ending() && !ending_) {
            ending_ = true;
            spdlog::info(
                "CM: the cluster ends (node {} says: every node finished the application, or "
                "the cluster is being stopped): the members leave with their regions",
                id);
          }
          break;
        }
        if (msg->has_heartbeat()) {
          if (id == self_ && OwnLeaseWithheld(now)) continue;
          control::ControlMessage ack;
          ack.mutable_heartbeat_ack()->set_epoch(epoch_);
          ack.mutable_heartbeat_ack()->set_seq(msg->heartbeat().seq());
          (void)m.channel->Send(ack);  // a failed send shows up as a closed connection next
        } else if (msg->has_membership_ack()) {
          m.acked_epoch = std::max(m.acked_epoch, msg->membership_ack().epoch());
        } else if (msg->has_backup_copy()) {
          backup_copies_[{msg->backup_copy().region_id(), id}] = msg->backup_copy();
        } else if (msg->has_backup_synced()) {
          synced_ |= MarkSynced(msg->backup_synced().region_id(), id);
        } else if (msg->has_region_in_use()) {
          regions_in_use_.insert(msg->region_in_use().region_id());
        } else if (msg->has_hand_off_ready()) {
          hand_off_ready.emplace_back(msg->hand_off_ready().region_id(), id);
        } else if (msg->has_suspect()) {
          control::Suspect suspect = msg->suspect();
          if (suspect.node_id() == self_) {
            // Evicting the CM's own node would take the CM, and so every lease, with it: the
            // node that cannot talk to it goes instead.
            suspect.set_reason(absl::StrCat("it cannot talk to node ", suspect.node_id(),
                                            ", the configuration manager's: ", suspect.reason()));
            suspect.set_node_id(id);
            suspects.push_back(std::move(suspect));
          } else if (suspect.node_id() != id) {
            suspect.set_reason(absl::StrCat("node ", id, " reported it: ", suspect.reason()));
            suspects.push_back(std::move(suspect));
          }
        }
      }
      // Tests hold a node's expiry back here (the argument: its id, whether to evict it now), as
      // a CM scheduled late would: the node's own lease has ended all the same
      // (tests/txn_fault_test.sh). The check repeats on every round.
      std::pair<uint32_t, bool> expire(id, true);
      if (!gone.count(id) && now - m.last_heard > lease_) {
        FARM_SYNC_POINT_CALLBACK("CmServer::Expire", &expire);
      }
      if (!gone.count(id) && now - m.last_heard > lease_ && expire.second) {
        gone[id] = absl::StrCat("its lease expired (no heartbeat for ",
                                absl::FormatDuration(absl::FromChrono(now - m.last_heard)),
                                ", lease ", absl::FormatDuration(absl::FromChrono(lease_)), ")");
      }
    }
    for (const control::Suspect& s : suspects) {
      if (members_.count(s.node_id()) && !gone.count(s.node_id())) gone[s.node_id()] = s.reason();
    }
    // Departures held back for a backup's copy report (AwaitsCopyReport) are still departures.
    for (const auto& [id, why] : deferred_gone_) {
      if (members_.count(id)) gone.try_emplace(id, why);
    }
    // A pause anywhere in this turn (after the check at its start) shows here, before anyone is
    // judged on it: the turn ran for no more than a poll's wait of the time since the last one.
    if (!gone.empty() &&
        StepDownIfPaused(last_turn_, Clock::now(), absl::ToChronoNanoseconds(kTick))) {
      return;
    }
    if (taking_over_) {
      // Removed with the failed CM when the takeover ends: no membership goes out before. A
      // member whose connection closed only counts as not reconnected (yet): it gave that
      // connection up when this CM was late to answer, and tries again within the window.
      for (const auto& [id, why] : gone) {
        Member& m = members_[id];
        if (m.channel != nullptr) m.channel->Shutdown();
        m.channel.reset();
        if (!closed.count(id) || FARM_MUTANT("reconnect_gives_up_at_once")) {
          takeover_gone_.emplace(id, why);
        }
      }
      return;
    }
    if (!gone.empty() && !ending_ && AwaitsCopyReport(gone)) {
      if (deferred_gone_.empty()) deferred_since_ = now;
      if (now - deferred_since_ < lease_) {
        deferred_gone_ = gone;
        return;
      }
      spdlog::error(
          "CM: a backup did not report its copy within a lease ({}); the regions it "
          "backs up are lost with their primary",
          absl::FormatDuration(absl::FromChrono(lease_)));
    }
    deferred_gone_.clear();
    if (gone.empty()) {
      ActivateRecovered(now);
      bool changed = false;
      const bool moved = MoveHandedOff(hand_off_ready, now, &changed);
      const bool added = Rereplicate();
      // Balancing waits for a quiet cluster: nothing recovering, syncing or moving.
      const bool marked = !moved && !added && !synced_ && !changed && Rebalance(now);
      if (moved || added || marked || changed || synced_) {
        synced_ = false;
        const uint64_t published = Broadcast();
        if (moved) {
          // Activated as promoted regions are (ActivateRecovered), without a lease to wait for:
          // the old primary stays, and locks nothing in them.
          if (recovery_epoch_ == 0) {
            recovery_start_ = now;
            recovery_warned_ = false;
          }
          recovery_epoch_ = published;
        }
      }
      return;
    }
    RemoveMembers(gone, now);
  }

  // Removes the members in `gone` (id -> why): evicts them, promotes backups of their regions,
  // drops their backup copies and publishes the membership without them. Returns the epoch that
  // will carry the change (0 if no member is left).
  uint64_t RemoveMembers(const std::map<uint32_t, std::string>& gone, Clock::time_point now) {
    std::vector<std::unique_ptr<ControlChannel>> leavers;  // released later (ReleaseLeavers)
    for (const auto& [id, why] : gone) {
      if (why == kLeft) {
        spdlog::info("CM: node {} left", id);
      } else {
        spdlog::warn("CM: node {} is no longer a member: {}", id, why);
      }
      Member& m = members_[id];
      if (m.channel == nullptr) continue;
      if (why == kLeft) {
        leavers.push_back(std::move(m.channel));
        continue;
      }
      control::ControlMessage eviction;
      eviction.mutable_eviction()->set_reason(why);
      (void)m.channel->Send(eviction);  // it may be gone already; then nobody needs to know
      m.channel->Shutdown();
    }
    CancelHandOffs(gone);
    // At the cluster's end the members leave with their regions: a backup promoted now would
    // leave next, and "lost" is what the application asked for.
    const int recovering = ending_ ? 0 : PromoteBackups(gone);
    for (const auto& [id, why] : gone) {
      // A node that failed may still be alive (paused, cut off) and act until its own lease
      // ends, no later than the CM's view of it: what it served is not taken over before.
      if (why != kLeft) {
        recovery_not_before_ = std::max(recovery_not_before_, members_[id].last_heard + lease_);
      }
      members_.erase(id);
      for (auto it = backup_copies_.begin(); it != backup_copies_.end();) {
        it = it->first.second == id ? backup_copies_.erase(it) : std::next(it);
      }
    }
    DropBackups(gone);
    const uint64_t published = members_.empty() ? 0 : Broadcast(gone);
    for (auto& channel : leavers) leaving_.push_back({std::move(channel), published});
    if (members_.empty()) return 0;
    if (recovering > 0) {
      recovery_epoch_ = published;
      recovery_start_ = now;
      recovery_warned_ = false;
    }
    return published;
  }

  // The second phase of a reconfiguration that promoted backups (FaRM's NEW-CONFIG-COMMIT): once
  // every member acknowledged the membership that made regions recovering (or a later one), so
  // that nobody READs their old primaries with an older map and their new primaries took their
  // recovery locks, and the failed old primaries' leases ran out (they commit nothing more),
  // the regions serve again, in a new membership.
  void ActivateRecovered(Clock::time_point now) {
    if (recovery_epoch_ == 0) return;
    if (now < recovery_not_before_ && !FARM_MUTANT("activate_before_lease")) return;
    std::vector<uint32_t> waiting;
    for (const auto& [id, m] : members_) {
      if (m.acked_epoch < recovery_epoch_ && !FARM_MUTANT("activate_without_acks")) {
        waiting.push_back(id);
      }
    }
    if (!waiting.empty()) {
      if (!recovery_warned_ && now - recovery_start_ > 2 * lease_) {
        recovery_warned_ = true;
        spdlog::warn(
            "CM: promoted regions still wait for node(s) {} to acknowledge membership epoch {}: "
            "they stay unavailable until then",
            absl::StrJoin(waiting, ", "), recovery_epoch_);
      }
      return;
    }
    // Tests hold the activation back here (the argument: whether to activate now).
    bool activate = true;
    FARM_SYNC_POINT_CALLBACK("CmServer::Activate", &activate);
    if (!activate) return;
    std::vector<uint32_t> regions;
    for (auto& [id, m] : members_) {
      for (control::RegionInfo& r : m.regions) {
        if (!r.recovering()) continue;
        r.set_recovering(false);
        regions.push_back(r.region_id());
      }
    }
    recovery_epoch_ = 0;
    spdlog::warn("CM: region(s) {} serve again ({} after the reconfiguration)",
                 absl::StrJoin(regions, ", "),
                 absl::FormatDuration(absl::FromChrono(Clock::now() - recovery_start_)));
    Broadcast();
  }

  const config::ClusterConfig config_;
  const uint32_t self_;  // the node this CM runs on (Membership.cm_node_id)
  std::unique_ptr<ControlListener> listener_;
  const absl::Time join_deadline_;
  Clock::time_point last_turn_;  // when the service thread's last round ended (Run)
  const Clock::duration lease_;
  std::map<uint32_t, Member> members_;
  // The registered backup copies nodes reported, by (region, node).
  std::map<std::pair<uint32_t, uint32_t>, control::BackupCopy> backup_copies_;
  // Departures held back since deferred_since_ until backups report their copies (id -> why).
  std::map<uint32_t, std::string> deferred_gone_;
  Clock::time_point deferred_since_;
  bool fence_next_ = false;   // the next membership fences (Rereplicate added backups)
  uint64_t fence_epoch_ = 0;  // the last membership that did
  uint64_t restart_fence_ = 0;  // Membership.restart_fence
  uint64_t first_epoch_ = 1;    // Membership.first_epoch
  bool synced_ = false;       // a syncing backup reported its copy complete since the last one
  // A member said the cluster ends (control.Leave.cluster_ending): departures promote nothing,
  // and nothing is re-replicated or balanced, until a node joins.
  bool ending_ = false;
  // Data regions restored from the members' data directories at formation (CheckRestart).
  std::set<uint32_t> restored_;
  // Regions marked handing_off, since when (MoveHandedOff calls off those that do not drain).
  std::map<uint32_t, Clock::time_point> hand_off_since_;
  // Data regions their primaries said hold data (control.RegionInUse): what balancing counts.
  std::set<uint32_t> regions_in_use_;
  std::list<Pending> pending_;
  bool formed_ = false;
  bool failed_ = false;
  uint64_t epoch_ = 0;
  // The membership that made regions recovering (0: none is), when, and the earliest the CM may
  // activate them (the failed old primaries' leases have ended).
  uint64_t recovery_epoch_ = 0;
  Clock::time_point recovery_start_;
  Clock::time_point recovery_not_before_;
  bool recovery_warned_ = false;  // that recovery waits for an acknowledgement
  uint32_t next_region_id_ = 1;   // Region 0 is never valid, so a zero GlobalAddress is null.
  // Taking over (ContinueFrom): from which CM and why, since when, until when members may
  // reconnect, and the members found gone meanwhile.
  bool taking_over_ = false;
  uint32_t takeover_failed_cm_ = 0;
  std::string takeover_why_;
  Clock::time_point takeover_start_;
  Clock::time_point takeover_deadline_;
  std::map<uint32_t, std::string> takeover_gone_;
  // Join requests of new nodes that came while taking over.
  std::vector<std::pair<std::unique_ptr<ControlChannel>, control::JoinRequest>> deferred_joins_;
  // The configuration store (null: none) and the membership being recorded in it.
  std::shared_ptr<ConfigurationStore> store_;
  std::future<CommitResult> commit_;   // valid while a record is being written
  control::ControlMessage in_flight_;  // the membership that record is
  bool dirty_ = false;                 // changed since in_flight_ was built, or a retry is due
  Clock::time_point retry_at_;
  std::optional<Clock::time_point> store_unavailable_since_;
  bool stepped_down_ = false;
  // Departed nodes' reasons not yet in a membership sent.
  std::map<uint32_t, std::string> pending_departed_;
  std::vector<Leaving> leaving_;  // members that said Leave, not released yet
  // Commit thread only (see Commit).
  int64_t store_version_ = -1;  // the record's version this CM wrote last; -1: none yet
  std::string last_attempt_;    // a write that timed out, maybe applied
  std::atomic<bool> stop_{false};
  std::thread thread_;  // started by the constructor's body, once everything is initialised
};

// Starts the CM of node `self` on its control address.
absl::StatusOr<std::unique_ptr<CmServer>> StartCm(const config::ClusterConfig& config,
                                                  uint32_t self,
                                                  std::shared_ptr<ConfigurationStore> store,
                                                  std::optional<Takeover> takeover) {
  const config::NodeConfig* cm = FindNode(config, self);
  if (cm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CM node ", self, " is not in the configuration"));
  }
  absl::StatusOr<std::unique_ptr<ControlListener>> listener =
      ControlListener::Listen(cm->host(), static_cast<uint16_t>(cm->control_port()));
  if (!listener.ok()) {
    return absl::UnavailableError(
        absl::StrCat("configuration manager: ", listener.status().message()));
  }
  return std::unique_ptr<CmServer>(
      new CmServerImpl(config, self, std::move(*listener), std::move(store), std::move(takeover)));
}

// Client side: one connection to the CM, kept open for membership updates and lease renewal.
//
// Threads: the watcher receives (memberships, heartbeat acknowledgements, an eviction); the
// heartbeat thread only renews the lease and checks it, so that a node busy elsewhere still
// renews in time. Sends from the heartbeat thread, Leave and the reports are serialised by
// send_mu_.
//
// CM takeover (with a configuration store and the cluster's configuration): when the CM's
// connection closes, or the CM stops renewing this node's lease, a node that is not the CM itself
// does not give up at once. Its watcher reads the record the CM wrote last and reconnects
// (JoinRequest.rejoin_joined_epoch) to the CM it names, unless that is the one it lost; then,
// once its own lease has ended (it serves nothing more) and a lease has passed (a CM that still
// works has removed this node and recorded so by then: the record no longer lists it, and it
// goes), the node first in line (the lowest id
// among the members that form the cluster and are not known to be unreachable; the next one a
// lease later, and so on) writes the record naming itself by compare-and-set, starts a CM that
// continues the record's configuration, and reconnects to it like the others. Exactly one such
// write wins; the others read it and reconnect. A node the record no longer lists, or that finds
// no CM in time, is evicted.
class TcpConfigurationManager : public ConfigurationManager {
 public:
  TcpConfigurationManager(std::string host, uint16_t port, absl::Duration lease,
                          std::optional<config::ClusterConfig> config = std::nullopt,
                          std::shared_ptr<ConfigurationStore> store = nullptr, uint32_t cm = 0)
      : host_(std::move(host)),
        port_(port),
        lease_(absl::ToChronoMilliseconds(lease)),
        config_(std::move(config)),
        store_(config_.has_value() ? std::move(store) : nullptr),
        current_cm_(cm) {}

  ~TcpConfigurationManager() override {
    Leave();
    server_.reset();  // a CM this node took over as (the watcher, which made it, has ended)
  }

  void OnMembershipChange(MembershipCallback callback) override { callback_ = std::move(callback); }
  void OnEviction(EvictionCallback callback) override { eviction_callback_ = std::move(callback); }

  absl::StatusOr<control::Membership> Join(const control::JoinRequest& request,
                                           absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    const std::string cm = absl::StrCat("configuration manager at ", host_, ":", port_);
    absl::StatusOr<std::unique_ptr<ControlChannel>> ch =
        ControlChannel::Connect(host_, port_, timeout);
    if (!ch.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach the ", cm, ": ", ch.status().message()));
    }
    channel_ = std::move(*ch);
    control::ControlMessage join;
    *join.mutable_join() = request;
    absl::Status s = channel_->Send(join);
    if (!s.ok()) return s;
    for (;;) {
      absl::StatusOr<control::ControlMessage> reply = channel_->Receive(deadline - absl::Now());
      if (!reply.ok()) {
        if (absl::IsDeadlineExceeded(reply.status())) {
          return absl::DeadlineExceededError(absl::StrCat("the cluster did not form within ",
                                                          absl::FormatDuration(timeout),
                                                          " (waiting for the ", cm, ")"));
        }
        return absl::UnavailableError(
            absl::StrCat("lost the ", cm, ": ", reply.status().message()));
      }
      if (reply->has_refusal()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the ", cm, " refused this node: ", reply->refusal().reason()));
      }
      if (reply->has_accepted()) {
        node_id_ = reply->accepted().node_id();
        spdlog::info("admitted as node {}; waiting for the cluster to form", node_id_);
        continue;
      }
      if (reply->has_membership()) {
        control::Membership m = reply->membership();
        absl::StatusOr<Clock::time_point> start = FirstHeartbeat(deadline, cm, &m);
        if (!start.ok()) return start.status();
        {
          std::lock_guard<std::mutex> l(lease_mu_);
          SetLeaseStart(*start);
        }
        Track(m);
        watcher_ = std::thread([this] { Watch(); });
        heartbeat_ = std::thread([this] { Heartbeat(); });
        return m;
      }
    }
  }

  // The lease's start: when this node sent a heartbeat that the CM acknowledged, sent once the
  // cluster has formed (`m`, the membership that says so). The CM starts its view of every lease
  // when it forms the cluster (or admits a node to a formed one), which may be long after this
  // node asked to join: nodes started by hand, one after another. A lease run from the join
  // request would have ended by then, and the node would leave as soon as it was admitted. A
  // newer membership that arrives meanwhile replaces `m`.
  absl::StatusOr<Clock::time_point> FirstHeartbeat(absl::Time deadline, const std::string& cm,
                                                   control::Membership* m) {
    control::ControlMessage hb;
    hb.mutable_heartbeat()->set_node_id(node_id_);
    hb.mutable_heartbeat()->set_seq(++heartbeat_seq_);
    const Clock::time_point sent = Clock::now();  // before the send: the lease starts no later
    if (absl::Status s = channel_->Send(hb); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("lost the ", cm, ": ", s.message()));
    }
    for (;;) {
      absl::StatusOr<control::ControlMessage> reply = channel_->Receive(deadline - absl::Now());
      if (!reply.ok()) {
        if (absl::IsDeadlineExceeded(reply.status())) {
          return absl::DeadlineExceededError(
              absl::StrCat("the ", cm,
                           " formed the cluster but did not acknowledge this node's first "
                           "heartbeat in time"));
        }
        return absl::UnavailableError(
            absl::StrCat("lost the ", cm, ": ", reply.status().message()));
      }
      if (reply->has_heartbeat_ack() && reply->heartbeat_ack().seq() == hb.heartbeat().seq()) {
        return sent;
      }
      if (reply->has_membership() && reply->membership().epoch() > m->epoch()) {
        *m = reply->membership();
      }
      if (reply->has_eviction()) {
        return absl::UnavailableError(absl::StrCat(
            "the ", cm, " removed this node as it joined: ", reply->eviction().reason()));
      }
      if (reply->has_refusal()) {
        return absl::FailedPreconditionError(
            absl::StrCat("the ", cm, " refused this node: ", reply->refusal().reason()));
      }
    }
  }

  void ReportSuspect(uint32_t node, const std::string& reason) override {
    control::ControlMessage m;
    m.mutable_suspect()->set_node_id(node);
    m.mutable_suspect()->set_reason(reason);
    SendToCm(m);  // if the CM is gone, this node's own lease expires instead
  }

  void ReportBackupCopy(const control::BackupCopy& copy) override {
    {
      std::lock_guard<std::mutex> l(copies_mu_);
      copies_[copy.region_id()] = copy;  // told again to a CM that takes over
    }
    control::ControlMessage m;
    *m.mutable_backup_copy() = copy;
    SendToCm(m);
  }

  void ReportBackupSynced(uint32_t region_id) override {
    control::ControlMessage m;
    m.mutable_backup_synced()->set_region_id(region_id);
    SendToCm(m);
  }

  void ReportRegionInUse(uint32_t region_id) override {
    {
      std::lock_guard<std::mutex> l(copies_mu_);
      in_use_.insert(region_id);  // told again to a CM that takes over
    }
    control::ControlMessage m;
    m.mutable_region_in_use()->set_region_id(region_id);
    SendToCm(m);
  }

  void ReportHandOffReady(uint32_t region_id) override {
    control::ControlMessage m;
    m.mutable_hand_off_ready()->set_region_id(region_id);
    SendToCm(m);
  }

  void AckMembership(uint64_t epoch) override {
    control::ControlMessage m;
    m.mutable_membership_ack()->set_epoch(epoch);
    SendToCm(m);
  }

  HeartbeatStats heartbeat_stats() const override {
    std::vector<int64_t> rtts;
    {
      std::lock_guard<std::mutex> l(lease_mu_);
      rtts = rtts_ns_;
    }
    HeartbeatStats out;
    out.count = rtts.size();
    if (rtts.empty()) return out;
    std::sort(rtts.begin(), rtts.end());
    auto at = [&](double q) {
      return absl::Nanoseconds(
          rtts[std::min(rtts.size() - 1, static_cast<size_t>(q * rtts.size()))]);
    };
    out.p50 = at(0.5);
    out.p99 = at(0.99);
    out.max = absl::Nanoseconds(rtts.back());
    return out;
  }

  Clock::time_point lease_expiry() const override {
    // Acquire: pairs with the release in SetLeaseStart.
    return Clock::time_point(Clock::duration(expiry_.load(std::memory_order_acquire)));
  }

  // A member leaves in two steps: it says Leave, then waits until the CM releases it (every
  // other member applied a membership without it: CmServerImpl::ReleaseLeavers), so that when
  // its fabric closes next nobody posts to it any more. The wait is bounded (a lease, at least
  // kLeaveWait): a CM that is gone or stopped costs that, and the node then leaves anyway.
  void MarkClusterEnding() override { ending_.store(true, std::memory_order_relaxed); }

  void Leave() override {
    if (left_.exchange(true)) return;
    const bool member = watcher_.joinable();  // joined (not a failed Join)
    bool said = false;
    {
      std::lock_guard<std::mutex> l(send_mu_);
      if (channel_ != nullptr && !reconnecting_ && !evicted_.load(std::memory_order_relaxed)) {
        control::ControlMessage leave;
        leave.mutable_leave()->set_cluster_ending(ending_.load(std::memory_order_relaxed));
        said = channel_->Send(leave).ok();
      }
    }
    {
      std::lock_guard<std::mutex> l(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
    // The threads are gone: this thread alone uses the channel now.
    if (said && member && !FARM_MUTANT("leave_without_release")) {
      bool released = released_.load(std::memory_order_relaxed) || AwaitRelease();
      // Tests learn whether the CM released this node (true) or the wait ran out.
      FARM_SYNC_POINT_CALLBACK("TcpConfigurationManager::Leave:Released", &released);
    }
    std::lock_guard<std::mutex> l(send_mu_);
    if (channel_ != nullptr) channel_->Shutdown();
  }

 private:
  bool stopping() {
    std::lock_guard<std::mutex> l(stop_mu_);
    return stop_;
  }

  // Waits `d`, or until the client stops.
  void Pause(Clock::duration d) {
    std::unique_lock<std::mutex> l(stop_mu_);
    stop_cv_.wait_for(l, d, [this] { return stop_; });
  }

  // Waits for the CM's release after Leave: its Eviction, or the connection closed (a CM that
  // stopped has nobody left to post to this node). False if the wait ran out.
  bool AwaitRelease() {
    const Clock::duration bound =
        std::max<Clock::duration>(lease_, absl::ToChronoMilliseconds(kLeaveWait));
    const Clock::time_point deadline = Clock::now() + bound;
    for (;;) {
      const Clock::time_point now = Clock::now();
      absl::StatusOr<control::ControlMessage> msg =
          now < deadline ? channel_->Receive(absl::FromChrono(deadline - now))
                         : absl::DeadlineExceededError("");
      if (msg.ok() && !msg->has_eviction()) continue;  // sent before the CM had the Leave
      if (absl::IsDeadlineExceeded(msg.status())) {
        spdlog::warn(
            "node {}: the configuration manager did not confirm within {} that the other members "
            "let this node go; it leaves anyway",
            node_id_, absl::FormatDuration(absl::FromChrono(bound)));
        return false;
      }
      return true;
    }
  }

  // Sends a report to the CM, unless there is none now (reconnecting: a report is best effort).
  void SendToCm(const control::ControlMessage& m) {
    if (left_.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> l(send_mu_);
    if (channel_ != nullptr && !reconnecting_) (void)channel_->Send(m);
  }

  // Whether this node looks for another CM when it loses its own (see the class comment): it has
  // a store, and is not the CM (the CM's own node that loses its lease is paused or cut off, and
  // stops).
  bool CanTakeOver() const {
    return store_ != nullptr && current_cm_.load(std::memory_order_relaxed) != node_id_;
  }

  // Notes what a membership says of this node and of the CM (the watcher's, or Join's).
  void Track(const control::Membership& m) {
    current_cm_.store(m.cm_node_id(), std::memory_order_relaxed);
    for (const control::NodeInfo& n : m.nodes()) {
      if (n.node_id() == node_id_) joined_epoch_ = n.joined_epoch();
    }
  }

  // Tells the node once that it is no longer a member, then stops both threads' work.
  void Evict(const std::string& reason) {
    if (evicted_.exchange(true)) return;
    if (stopping()) return;  // leaving on purpose: nothing to report
    // Tests hold the eviction back here, as a node scheduled late would (lease_test).
    FARM_SYNC_POINT("TcpConfigurationManager::Evict");
    if (eviction_callback_) {
      NormalPriority normal;  // the node's own work, not the lease's
      eviction_callback_(reason);
    }
    {
      std::lock_guard<std::mutex> l(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
  }

  void Watch() {
    RaiseToLeasePriority();
    std::string lost;
    while (WatchChannel(&lost)) {
      if (!CanTakeOver()) {
        Evict(lost);
        return;
      }
      if (!Reconnect(lost)) return;
    }
  }

  // Receives from the CM until this node stops (false) or the connection to the CM ends without
  // an eviction (true; `lost` says why).
  bool WatchChannel(std::string* lost) {
    while (!stopping()) {
      absl::StatusOr<control::ControlMessage> msg = channel_->Receive(absl::Milliseconds(200));
      if (!msg.ok()) {
        if (absl::IsDeadlineExceeded(msg.status())) continue;
        if (stopping()) return false;
        std::lock_guard<std::mutex> l(lease_mu_);
        *lost = !lease_lost_.empty()
                    ? lease_lost_
                    : absl::StrCat("the configuration manager closed its connection (",
                                   msg.status().message(), ")");
        lease_lost_.clear();
        return true;
      }
      if (msg->has_heartbeat_ack()) Renew(msg->heartbeat_ack().seq());
      if (msg->has_eviction()) {
        if (left_.load(std::memory_order_relaxed)) {  // the release of this node's Leave
          released_.store(true, std::memory_order_relaxed);
          return false;
        }
        if (msg->eviction().cm_stepped_down() && CanTakeOver()) {
          *lost = msg->eviction().reason();
          return true;
        }
        Evict(msg->eviction().reason());
        return false;
      }
      if (msg->has_membership()) {
        Track(msg->membership());
        if (callback_) {
          NormalPriority normal;  // the node applies the membership: its work, not the lease's
          callback_(msg->membership());
        }
      }
    }
    return false;
  }

  enum class Rejoined { kYes, kUnreachable, kStopped };

  // Finds the next CM through the store, or becomes it (see the class comment). True once this
  // node is connected to it (a member again); false if it was evicted or is leaving.
  bool Reconnect(const std::string& lost) {
    const uint32_t lost_cm = current_cm_.load(std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> l(send_mu_);
      reconnecting_ = true;
      channel_->Shutdown();
      // The heartbeat thread may have closed the channel too after the watcher saw it closed:
      // its reason is not the next loss's.
      std::lock_guard<std::mutex> ll(lease_mu_);
      lease_lost_.clear();
    }
    spdlog::warn(
        "node {}: lost the configuration manager, node {}: {}; looking for the next one "
        "in {}",
        node_id_, lost_cm, lost, store_->Describe());
    const absl::Duration lease = absl::FromChrono(lease_);
    const absl::Duration limit =
        (config_->node_size() + 2) * lease + 2 * ReconnectWindow(lease) + absl::Seconds(10);
    const Clock::time_point deadline = Clock::now() + absl::ToChronoNanoseconds(limit);
    // CMs this node could not reconnect to, the lost one first. It is not asked again: if it
    // works after all (this node was paused, or only its connection broke), it removes this node
    // within a lease and records that, which the record shows before this node's turn comes.
    std::set<uint32_t> unreachable{lost_cm};
    // When this node first tried to reconnect to each CM the record named since.
    std::map<uint32_t, Clock::time_point> first_tried;
    const Clock::time_point lost_at = Clock::now();
    // The CM this node's claim replaces, and why (the last claim tried: its write may have been
    // applied although its answer did not come).
    uint32_t claimed_from = lost_cm;
    std::string claimed_why = lost;
    bool store_warned = false;
    while (!stopping()) {
      if (Clock::now() > deadline) {
        Evict(absl::StrCat("it lost the configuration manager (", lost,
                           ") and found no other to reconnect to within ",
                           absl::FormatDuration(limit)));
        return false;
      }
      absl::StatusOr<VersionedRecord> record = store_->Read();
      if (!record.ok()) {
        if (!store_warned) {
          spdlog::warn("node {}: cannot read the configuration record ({}); trying again", node_id_,
                       std::string(record.status().message()));
          store_warned = true;
        }
        Pause(kLookupPause);
        continue;
      }
      control::Membership m;
      const control::NodeInfo* me = nullptr;
      if (m.ParseFromString(record->data)) {
        for (const control::NodeInfo& n : m.nodes()) {
          if (n.node_id() == node_id_ && n.joined_epoch() == joined_epoch_) me = &n;
        }
      }
      if (me == nullptr) {
        auto why = m.departed().find(node_id_);
        Evict(absl::StrCat("the configuration recorded in ", store_->Describe(),
                           " (membership epoch ", m.epoch(), ") does not list it",
                           why != m.departed().end() ? absl::StrCat(": ", why->second) : ""));
        return false;
      }
      const uint32_t cm = m.cm_node_id();
      if (cm == node_id_ && server_ == nullptr) {
        // This node's own takeover write, whose answer did not come, was applied after all.
        if (!Serve(m, record->version, claimed_from, claimed_why)) return false;
      }
      if (!unreachable.count(cm)) {
        const Rejoined r = Rejoin(cm, m, *me);
        if (r == Rejoined::kYes) return true;
        if (r == Rejoined::kStopped) return false;
        // A CM the record names, other than the one this node lost, may have only just taken
        // over: it listens once its claim is recorded, and answers once it runs, which a loaded
        // machine can hold back for seconds. It waits a reconnection window for its members, so
        // it is tried again until that window (and a lease more) has passed since this node
        // first tried it, and only then counts as unreachable. Counted at once, a CM that was
        // slow to answer lost its role to the next node, which removed it with the CM that had
        // failed: two members gone at once, and with them regions whose only copies they held
        // (chaos partition_cm, seen once in CI).
        if (cm != lost_cm && !FARM_MUTANT("reconnect_gives_up_at_once")) {
          const Clock::time_point first = first_tried.try_emplace(cm, Clock::now()).first->second;
          if (Clock::now() < first + absl::ToChronoNanoseconds(ReconnectWindow(lease)) + lease_) {
            Pause(kLookupPause);
            continue;
          }
        }
        spdlog::warn(
            "node {}: cannot reconnect to the configuration manager the record names, "
            "node {}",
            node_id_, cm);
        unreachable.insert(cm);
        continue;
      }
      if (Clock::now() < TakeoverTime(m, unreachable, lost_at)) {
        Pause(kLookupPause);
        continue;
      }
      control::Membership claim = m;
      claim.set_epoch(m.epoch() + 1);
      claim.set_cm_node_id(node_id_);
      claimed_from = cm;
      claimed_why =
          cm == lost_cm ? lost : absl::StrCat("node ", node_id_, " could not reconnect to it");
      absl::StatusOr<int64_t> v = store_->CompareAndSet(record->version, claim.SerializeAsString());
      if (!v.ok()) {
        spdlog::log(
            absl::IsFailedPrecondition(v.status()) ? spdlog::level::info : spdlog::level::warn,
            "node {}: did not take over as configuration manager: {}", node_id_,
            std::string(v.status().message()));
        // Another node did (read who), or the store did not answer (read whether), or refused
        // the write: read again after a pause, not in a tight loop until the deadline.
        Pause(kLookupPause);
        continue;
      }
      if (!Serve(claim, *v, claimed_from, claimed_why)) return false;
    }
    return false;
  }

  // When this node, which lost its CM at `lost_at`, may take over from the CM of `m`: once its
  // own lease ended (it serves nothing more) and a lease passed since it lost the CM (a CM that
  // still works has removed it by then, and recorded so), a lease later for each member that
  // forms the cluster, is not known to be unreachable and has a lower id. Never for a node that
  // is not such a member (a late one).
  Clock::time_point TakeoverTime(const control::Membership& m,
                                 const std::set<uint32_t>& unreachable,
                                 Clock::time_point lost_at) const {
    int rank = 0;
    bool candidate = false;
    for (const control::NodeInfo& n : m.nodes()) {
      const config::NodeConfig* c = FindNode(*config_, n.node_id());
      if (c == nullptr || c->late() || unreachable.count(n.node_id())) continue;
      if (n.node_id() == node_id_) candidate = true;
      if (n.node_id() < node_id_) ++rank;
    }
    if (!candidate) return Clock::time_point::max();
    return std::max(lease_expiry(), lost_at + lease_) + rank * lease_;
  }

  // Starts the CM that continues configuration `m` (recorded as version `version`, naming this
  // node), replacing node `failed_cm`. False (the node is evicted) if it cannot listen.
  bool Serve(const control::Membership& m, int64_t version, uint32_t failed_cm,
             const std::string& why) {
    Takeover t;
    t.record = m;
    t.version = version;
    t.failed_cm = failed_cm;
    t.why = why;
    absl::StatusOr<std::unique_ptr<CmServer>> server =
        StartCm(*config_, node_id_, store_, std::move(t));
    if (!server.ok()) {
      Evict(absl::StrCat("it took over as configuration manager but cannot serve as one: ",
                         server.status().message()));
      return false;
    }
    server_ = std::move(*server);
    return true;
  }

  // Reconnects to CM `cm` as member `me` of configuration `m` (CM takeover). The lease runs again
  // from the request's send time once the CM admitted it.
  Rejoined Rejoin(uint32_t cm, const control::Membership& m, const control::NodeInfo& me) {
    const config::NodeConfig* n = FindNode(*config_, cm);
    if (n == nullptr) return Rejoined::kUnreachable;
    absl::StatusOr<std::unique_ptr<ControlChannel>> ch = ControlChannel::Connect(
        n->host(), static_cast<uint16_t>(n->control_port()), absl::Seconds(1));
    if (!ch.ok()) return Rejoined::kUnreachable;
    control::ControlMessage join;
    control::JoinRequest* req = join.mutable_join();
    req->set_requested_id(static_cast<int32_t>(node_id_));
    *req->mutable_node() = me;
    req->set_rejoin_joined_epoch(joined_epoch_);
    req->set_config_fingerprint(Fingerprint(*config_));
    {
      std::lock_guard<std::mutex> l(copies_mu_);
      for (const auto& [region, copy] : copies_) *req->add_backup_copies() = copy;
      for (uint32_t region : in_use_) req->add_regions_in_use(region);
    }
    const Clock::time_point sent = Clock::now();
    if (!(*ch)->Send(join).ok()) return Rejoined::kUnreachable;
    const Clock::time_point deadline =
        sent + std::max<Clock::duration>(2 * lease_, std::chrono::seconds(1));
    while (!stopping()) {
      absl::StatusOr<control::ControlMessage> reply = (*ch)->Receive(absl::Milliseconds(200));
      if (!reply.ok()) {
        if (absl::IsDeadlineExceeded(reply.status()) && Clock::now() < deadline) continue;
        return Rejoined::kUnreachable;
      }
      if (reply->has_refusal()) {
        Evict(absl::StrCat("the configuration manager, node ", cm,
                           ", refused it back: ", reply->refusal().reason()));
        return Rejoined::kStopped;
      }
      if (!reply->has_accepted()) continue;
      {
        std::lock_guard<std::mutex> l(lease_mu_);
        sent_.clear();  // the old CM's acknowledgements will not come
        SetLeaseStart(std::max(lease_start_, sent));
      }
      {
        std::lock_guard<std::mutex> l(send_mu_);
        channel_ = std::move(*ch);
        reconnecting_ = false;
      }
      current_cm_.store(cm, std::memory_order_relaxed);
      spdlog::warn(
          "node {}: reconnected to the configuration manager, node {} (membership epoch "
          "{} recorded)",
          node_id_, cm, m.epoch());
      return Rejoined::kYes;
    }
    return Rejoined::kStopped;
  }

  // The CM acknowledged heartbeat `seq`: the lease runs from when it was sent. Acknowledgements
  // of heartbeats older than the last one acknowledged change nothing.
  void Renew(uint64_t seq) {
    std::lock_guard<std::mutex> l(lease_mu_);
    while (!sent_.empty() && sent_.front().first < seq) sent_.pop_front();
    if (sent_.empty() || sent_.front().first != seq) return;  // unknown, or older
    if (rtts_ns_.size() < kMaxRoundTrips) {
      rtts_ns_.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sent_.front().second)
              .count());
    }
    SetLeaseStart(std::max(lease_start_, sent_.front().second));
    sent_.pop_front();
  }

  void SetLeaseStart(Clock::time_point start) {  // lease_mu_ held
    lease_start_ = start;
    const Clock::time_point expiry = start + lease_ - lease_ / kLeaseSlackDivisor;
    expiry_.store(expiry.time_since_epoch().count(), std::memory_order_release);
  }

  // Sends a heartbeat every lease/4 and gives the node up once its lease ended (lease_expiry):
  // no heartbeat sent in the last lease (less the slack) was acknowledged. It wakes at the
  // expiry too, so that the node stops acting as a member no later than the CM removes it. A
  // node that may take over (CanTakeOver) is not given up but, once the CM was silent for
  // longer than a CM that finds itself paused tolerates (`give_up_after` more), looks for
  // the next CM: this thread closes the connection, and the watcher reconnects; no heartbeats
  // meanwhile. Until then it goes on sending them (its lease lapsed: the node acts on nothing),
  // so that a CM that was held up for less than a lease renews the lease on reading them
  // instead of finding the connection closed and removing the node.
  void Heartbeat() {
    RaiseToLeasePriority();
    const Clock::duration period = lease_ / 4;
    // The CM last answered within a lease/4 before the lease's start, and judges a pause from
    // the end of its last round less a poll's wait (CmServerImpl::StepDownIfPaused).
    const Clock::duration give_up_after = lease_ / 2 + 2 * absl::ToChronoNanoseconds(kTick);
    uint64_t seq = heartbeat_seq_;  // after Join's (FirstHeartbeat)
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      const Clock::time_point now = Clock::now();
      const Clock::time_point expiry = lease_expiry();
      if (now >= expiry && (now >= expiry + give_up_after || !CanTakeOver())) {
        Clock::time_point start;
        {
          std::lock_guard<std::mutex> l(lease_mu_);
          start = lease_start_;
        }
        const std::string why = absl::StrCat(
            "its lease expired (no heartbeat acknowledged by the configuration manager for ",
            absl::FormatDuration(absl::FromChrono(now - start)), ", lease ",
            absl::FormatDuration(absl::FromChrono(lease_)), ")");
        if (!CanTakeOver()) {
          Evict(why);
          return;
        }
        {
          std::lock_guard<std::mutex> l(send_mu_);
          // Checked again under the lock: the watcher may have reconnected meanwhile.
          if (!reconnecting_ && Clock::now() >= lease_expiry()) {
            {
              std::lock_guard<std::mutex> ll(lease_mu_);
              lease_lost_ = why;
            }
            channel_->Shutdown();  // the watcher sees it closed and looks for the next CM
          }
        }
        lock.lock();
        stop_cv_.wait_for(lock, period, [this] { return stop_; });
        continue;
      }
      control::ControlMessage hb;
      hb.mutable_heartbeat()->set_node_id(node_id_);
      hb.mutable_heartbeat()->set_seq(++seq);
      // Tests drop heartbeats here: the argument is (this node's id, whether to send).
      std::pair<uint32_t, bool> send(node_id_, true);
      FARM_SYNC_POINT_CALLBACK("TcpConfigurationManager::Heartbeat:Send", &send);
      if (send.second) {
        std::lock_guard<std::mutex> l(send_mu_);
        if (!reconnecting_) {
          {
            std::lock_guard<std::mutex> ll(lease_mu_);
            sent_.emplace_back(seq, now);  // `now` is before the send: the lease starts no later
            if (sent_.size() > kMaxUnacknowledged) sent_.pop_front();
          }
          (void)channel_->Send(hb);  // a dead CM shows up as no acknowledgement: the check above
        }
      }
      lock.lock();
      // Wakes at the expiry, or, past it, when the CM is given up.
      const Clock::time_point next = Clock::now() < expiry ? expiry : expiry + give_up_after;
      const Clock::duration to_next = next - Clock::now();
      stop_cv_.wait_for(lock, std::max(Clock::duration::zero(), std::min(period, to_next)),
                        [this] { return stop_; });
    }
  }

  // Heartbeats remembered until acknowledged: a lease's worth and more (one every lease/4).
  static constexpr size_t kMaxUnacknowledged = 64;
  // Round trips kept for heartbeat_stats (a 10 ms lease for 10 minutes).
  static constexpr size_t kMaxRoundTrips = 250000;
  // How often a node that lost the CM reads the record again.
  static constexpr std::chrono::milliseconds kLookupPause{100};

  const std::string host_;
  const uint16_t port_;
  const Clock::duration lease_;
  // CM takeover: the cluster's configuration and its store (both, or no store: no takeover).
  const std::optional<config::ClusterConfig> config_;
  const std::shared_ptr<ConfigurationStore> store_;
  uint32_t node_id_ = 0;        // written by Join before the threads start
  uint64_t heartbeat_seq_ = 0;  // the last heartbeat Join sent (before the threads start)
  // The CM this node is connected to (or last was), from the memberships.
  std::atomic<uint32_t> current_cm_;
  uint64_t joined_epoch_ = 0;         // this incarnation's (watcher, or Join before it starts)
  std::unique_ptr<CmServer> server_;  // the CM this node took over as (watcher)
  MembershipCallback callback_;
  EvictionCallback eviction_callback_;
  // Written by Join, then by the watcher only (under send_mu_ when it reconnects).
  std::unique_ptr<ControlChannel> channel_;
  std::mutex send_mu_;         // one Send at a time on channel_
  bool reconnecting_ = false;  // guarded by send_mu_: no CM to send to (Reconnect)
  std::thread watcher_;
  std::thread heartbeat_;
  mutable std::mutex lease_mu_;
  Clock::time_point lease_start_;  // guarded by lease_mu_: when the lease started (Renew)
  // Heartbeats sent and not yet acknowledged (seq, send time), oldest first; guarded by lease_mu_.
  std::deque<std::pair<uint64_t, Clock::time_point>> sent_;
  std::vector<int64_t> rtts_ns_;  // acknowledged heartbeats' round trips; guarded by lease_mu_
  std::string lease_lost_;        // guarded by lease_mu_: why the heartbeat thread closed channel_
  // lease_expiry(), written under lease_mu_, read without it (on every request served).
  std::atomic<int64_t> expiry_{0};
  std::mutex copies_mu_;
  std::map<uint32_t, control::BackupCopy> copies_;  // guarded by copies_mu_: reported, by region
  std::set<uint32_t> in_use_;                       // guarded by copies_mu_: RegionInUse said
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::atomic<bool> left_{false};
  std::atomic<bool> ending_{false};    // MarkClusterEnding: Leave says the cluster ends
  std::atomic<bool> released_{false};  // the CM answered Leave (the watcher saw it)
  std::atomic<bool> evicted_{false};
};

}  // namespace

std::unique_ptr<ConfigurationManager> NewTcpConfigurationManager(const std::string& host,
                                                                 uint16_t port,
                                                                 absl::Duration lease) {
  return std::make_unique<TcpConfigurationManager>(host, port, lease);
}

std::unique_ptr<ConfigurationManager> NewTcpConfigurationManager(
    const config::ClusterConfig& config, uint32_t cm_node_id, absl::Duration lease,
    std::shared_ptr<ConfigurationStore> store) {
  const config::NodeConfig* cm = FindNode(config, cm_node_id);
  std::string host = cm != nullptr ? cm->host() : std::string();
  uint16_t port = cm != nullptr ? static_cast<uint16_t>(cm->control_port()) : 0;
  return std::make_unique<TcpConfigurationManager>(std::move(host), port, lease, config,
                                                   std::move(store), cm_node_id);
}

uint32_t FindConfigurationManager(const config::ClusterConfig& config, ConfigurationStore& store,
                                  int self) {
  int formers = 0;
  for (const config::NodeConfig& n : config.node()) formers += n.late() ? 0 : 1;
  // How long the members of a record whose CM failed take to take the role over, at most.
  const absl::Duration lease = absl::Milliseconds(config.lease_ms());
  const absl::Duration patience = (formers + 2) * lease + absl::Seconds(5);
  const absl::Time deadline = absl::Now() + patience;
  // A store that does not answer is asked again for a little while (a ZooKeeper session being
  // established, a leader election), not taken for one without a record.
  const absl::Time read_deadline = absl::Now() + absl::Seconds(3);
  bool said = false;
  for (;;) {
    absl::StatusOr<VersionedRecord> record = store.Read();
    if (!record.ok() && !absl::IsNotFound(record.status()) && absl::Now() < read_deadline) {
      absl::SleepFor(absl::Milliseconds(200));
      continue;
    }
    control::Membership m;
    if (!record.ok() || !m.ParseFromString(record->data)) return config.cm_node_id();
    const uint32_t cm = m.cm_node_id();
    const config::NodeConfig* n = FindNode(config, cm);
    if (n == nullptr) return config.cm_node_id();
    if (static_cast<int>(cm) != self) {
      absl::StatusOr<std::unique_ptr<ControlChannel>> probe = ControlChannel::Connect(
          n->host(), static_cast<uint16_t>(n->control_port()), absl::Seconds(1));
      if (probe.ok()) {
        (*probe)->Shutdown();
        if (cm != config.cm_node_id()) {
          spdlog::info(
              "the configuration record names node {} as the configuration manager (it "
              "took the role over from node {}): joining through it",
              cm, config.cm_node_id());
        }
        return cm;
      }
    }
    // The recorded CM does not answer: this node's own previous process, another node that
    // failed (the record lists other members: they take its role over soon, and a CM started
    // here would form a new cluster over theirs), or one not started yet (a whole cluster
    // starting again: its record is an earlier run's, and the configured CM starts once its
    // patience ran out).
    // Late nodes never take the role over (TakeoverTime): they are not counted.
    bool others = false;
    for (const control::NodeInfo& node : m.nodes()) {
      const config::NodeConfig* c = FindNode(config, node.node_id());
      others = others || (static_cast<int>(node.node_id()) != self && node.node_id() != cm &&
                          c != nullptr && !c->late());
    }
    if (!others || absl::Now() >= deadline) {
      if (others) {
        spdlog::warn(
            "the configuration record (membership epoch {}) still names node {} as the "
            "configuration manager after {}: taken as an earlier run's",
            m.epoch(), cm, absl::FormatDuration(patience));
      }
      return config.cm_node_id();
    }
    if (!said) {
      spdlog::info(
          "the configuration record (membership epoch {}) names node {} as the "
          "configuration manager, which is gone; waiting up to {} for a member to take "
          "its role over",
          m.epoch(), cm, absl::FormatDuration(patience));
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::StatusOr<std::unique_ptr<CmServer>> CmServer::Start(
    const config::ClusterConfig& config, std::shared_ptr<ConfigurationStore> store) {
  return StartCm(config, config.cm_node_id(), std::move(store), std::nullopt);
}

}  // namespace farm
