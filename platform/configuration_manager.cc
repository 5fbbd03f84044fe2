#include "platform/configuration_manager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "platform/config.h"
#include "platform/control_channel.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

constexpr absl::Duration kTick = absl::Milliseconds(50);
constexpr absl::Duration kFirstMessageTimeout = absl::Seconds(5);
constexpr absl::Duration kPendingTick = absl::Milliseconds(1);

constexpr char kLeft[] = "it left";

// Leases are measured on a monotonic clock: a wall-clock step must not evict anyone.
using Clock = std::chrono::steady_clock;

control::ControlMessage RefusalMessage(const std::string& reason) {
  control::ControlMessage m;
  m.mutable_refusal()->set_reason(reason);
  return m;
}

// The CM service: admission, region-id assignment and membership broadcast.
//
// Thread-compatible: all state is owned by the service thread.
class CmServerImpl : public CmServer {
 public:
  CmServerImpl(config::ClusterConfig config, std::unique_ptr<ControlListener> listener)
      : config_(std::move(config)),
        listener_(std::move(listener)),
        join_deadline_(absl::Now() + absl::Seconds(config_.join_timeout_s())),
        lease_(std::chrono::milliseconds(config_.lease_ms())),
        thread_([this] { Run(); }) {}

  ~CmServerImpl() override {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }

 private:
  struct Member {
    control::NodeInfo info;
    std::vector<control::RegionInfo> regions;  // region_id assigned
    std::unique_ptr<ControlChannel> channel;
    Clock::time_point last_heard;  // anything received renews the lease
  };

  // A connection accepted, waiting for its join request.
  struct Pending {
    std::unique_ptr<ControlChannel> channel;
    absl::Time deadline;
  };

  void Run() {
    spdlog::info("configuration manager listening on port {}, expecting {} node(s)",
                 listener_->port(), RequiredNodes());
    while (!stop_.load(std::memory_order_relaxed)) {
      // While a connection waits for its join request, look again soon: a joining node sends
      // it right after connecting.
      absl::StatusOr<std::unique_ptr<ControlChannel>> ch =
          listener_->Accept(pending_.empty() ? kTick : kPendingTick);
      if (ch.ok()) pending_.push_back({std::move(*ch), absl::Now() + kFirstMessageTimeout});
      AdmitPending();
      if (!formed_ && !failed_ && absl::Now() > join_deadline_) FailFormation();
      if (formed_) WatchMembers();
    }
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

  void FailFormation() {
    failed_ = true;
    std::string reason = absl::StrCat("the cluster did not form: ", MissingNodes(),
                                      " did not join within ", config_.join_timeout_s(), " s");
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
        if (!members_.count(n.id()) && n.id() != config_.cm_node_id()) return n.id();
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
    int data_regions = 0;
    for (const control::RegionInfo& r : req.regions()) data_regions += r.purpose().empty();
    if (data_regions != static_cast<int>(config_.region_count())) {
      return absl::FailedPreconditionError(absl::StrCat("node offers ", data_regions,
                                                        " data regions, the configuration says ",
                                                        config_.region_count()));
    }
    return id;
  }

  void Admit(std::unique_ptr<ControlChannel> ch, const control::JoinRequest& req) {
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
    control::ControlMessage accepted;
    accepted.mutable_accepted()->set_node_id(*id);
    if (!ch->Send(accepted).ok()) return;
    m.channel = std::move(ch);
    m.last_heard = Clock::now();
    spdlog::info("CM: admitted node {} from {} ({}/{})", *id, m.channel->peer(),
                 members_.size() + 1, RequiredNodes());
    members_[*id] = std::move(m);
    if (formed_) {
      AssignRegionIds(members_[*id]);
      Broadcast();
    } else if (AllRequiredJoined()) {
      formed_ = true;
      // Leases start now: nodes renew them once they have the first membership.
      for (auto& [mid, member] : members_) {
        AssignRegionIds(member);
        member.last_heard = Clock::now();
      }
      Broadcast();
    }
  }

  void AssignRegionIds(Member& m) {
    for (control::RegionInfo& r : m.regions) r.set_region_id(next_region_id_++);
  }

  // Sends the current membership to every member; `departed` says why nodes dropped since the
  // last one are gone.
  void Broadcast(const std::map<uint32_t, std::string>& departed = {}) {
    control::ControlMessage msg;
    control::Membership* mem = msg.mutable_membership();
    for (const auto& [id, why] : departed) (*mem->mutable_departed())[id] = why;
    mem->set_epoch(++epoch_);
    mem->set_cm_node_id(config_.cm_node_id());
    for (const auto& [id, m] : members_) {
      *mem->add_nodes() = m.info;
      for (const control::RegionInfo& r : m.regions) *mem->add_regions() = r;
    }
    spdlog::info("CM: membership epoch {}: {} node(s), {} region(s)", epoch_, mem->nodes_size(),
                 mem->regions_size());
    for (auto& [id, m] : members_) {
      absl::Status s = m.channel->Send(msg);
      if (!s.ok())
        spdlog::warn("CM: could not send membership to node {}: {}", id, std::string(s.message()));
    }
  }

  // Reads everything each member sent (heartbeats renew its lease; suspicions are collected),
  // then drops members whose connection closed, who said Leave, whose lease expired or whom a
  // peer reported, and tells the rest. Everything queued is read before leases are judged, so a
  // CM thread that was itself held up (a loaded machine) never evicts a node whose heartbeats were
  // waiting in its socket.
  void WatchMembers() {
    std::map<uint32_t, std::string> gone;  // id -> why
    std::vector<control::Suspect> suspects;
    const Clock::time_point now = Clock::now();
    for (auto& [id, m] : members_) {
      for (;;) {
        absl::StatusOr<control::ControlMessage> msg = m.channel->Receive(absl::ZeroDuration());
        if (!msg.ok()) {
          if (!absl::IsDeadlineExceeded(msg.status())) {
            gone[id] = absl::StrCat("its connection closed (", msg.status().message(), ")");
          }
          break;
        }
        m.last_heard = now;
        if (msg->has_leave()) {
          gone[id] = kLeft;
          break;
        }
        if (msg->has_heartbeat()) {
          control::ControlMessage ack;
          ack.mutable_heartbeat_ack()->set_epoch(epoch_);
          (void)m.channel->Send(ack);  // a failed send shows up as a closed connection next
        } else if (msg->has_suspect()) {
          control::Suspect suspect = msg->suspect();
          if (suspect.node_id() == config_.cm_node_id()) {
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
      if (!gone.count(id) && now - m.last_heard > lease_) {
        gone[id] = absl::StrCat("its lease expired (no heartbeat for ",
                                absl::FormatDuration(absl::FromChrono(now - m.last_heard)),
                                ", lease ", absl::FormatDuration(absl::FromChrono(lease_)), ")");
      }
    }
    for (const control::Suspect& s : suspects) {
      if (members_.count(s.node_id()) && !gone.count(s.node_id())) gone[s.node_id()] = s.reason();
    }
    if (gone.empty()) return;
    for (const auto& [id, why] : gone) {
      if (why == kLeft) {
        spdlog::info("CM: node {} left", id);
      } else {
        spdlog::warn("CM: node {} is no longer a member: {}", id, why);
      }
      Member& m = members_[id];
      control::ControlMessage eviction;
      eviction.mutable_eviction()->set_reason(why);
      (void)m.channel->Send(eviction);  // it may be gone already; then nobody needs to know
      m.channel->Shutdown();
      members_.erase(id);
    }
    if (!members_.empty()) Broadcast(gone);
  }

  const config::ClusterConfig config_;
  std::unique_ptr<ControlListener> listener_;
  const absl::Time join_deadline_;
  const Clock::duration lease_;
  std::map<uint32_t, Member> members_;
  std::list<Pending> pending_;
  bool formed_ = false;
  bool failed_ = false;
  uint64_t epoch_ = 0;
  uint32_t next_region_id_ = 1;  // Region 0 is never valid, so a zero GlobalAddress is null.
  std::atomic<bool> stop_{false};
  std::thread thread_;  // Last: starts after everything above is initialised.
};

// Client side: one connection to the CM, kept open for membership updates and lease renewal.
//
// Threads: the watcher receives (memberships, heartbeat acknowledgements, an eviction); the
// heartbeat thread only renews the lease and checks it, so that a node busy elsewhere still
// renews in time. Sends from the heartbeat thread, Leave and ReportSuspect are serialised by
// send_mu_.
class TcpConfigurationManager : public ConfigurationManager {
 public:
  TcpConfigurationManager(std::string host, uint16_t port, absl::Duration lease)
      : host_(std::move(host)), port_(port), lease_(absl::ToChronoMilliseconds(lease)) {}

  ~TcpConfigurationManager() override { Leave(); }

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
        last_heard_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
        watcher_ = std::thread([this] { Watch(); });
        heartbeat_ = std::thread([this] { Heartbeat(); });
        return reply->membership();
      }
    }
  }

  void ReportSuspect(uint32_t node, const std::string& reason) override {
    if (channel_ == nullptr || left_.load(std::memory_order_relaxed)) return;
    control::ControlMessage m;
    m.mutable_suspect()->set_node_id(node);
    m.mutable_suspect()->set_reason(reason);
    std::lock_guard<std::mutex> l(send_mu_);
    (void)channel_->Send(m);  // if the CM is gone, this node's own lease expires instead
  }

  void Leave() override {
    if (left_.exchange(true)) return;
    {
      std::lock_guard<std::mutex> l(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    if (channel_ != nullptr) {
      control::ControlMessage leave;
      leave.mutable_leave();
      {
        std::lock_guard<std::mutex> l(send_mu_);
        (void)channel_->Send(leave);
      }
      channel_->Shutdown();
    }
    if (watcher_.joinable()) watcher_.join();
    if (heartbeat_.joinable()) heartbeat_.join();
  }

 private:
  using Clock = std::chrono::steady_clock;

  bool stopping() {
    std::lock_guard<std::mutex> l(stop_mu_);
    return stop_;
  }

  // Tells the node once that it is no longer a member, then stops both threads' work.
  void Evict(const std::string& reason) {
    if (evicted_.exchange(true)) return;
    if (stopping()) return;  // leaving on purpose: nothing to report
    if (eviction_callback_) eviction_callback_(reason);
    {
      std::lock_guard<std::mutex> l(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
  }

  void Watch() {
    while (!stopping()) {
      absl::StatusOr<control::ControlMessage> msg = channel_->Receive(absl::Milliseconds(200));
      if (!msg.ok()) {
        if (absl::IsDeadlineExceeded(msg.status())) continue;
        if (!stopping()) {
          Evict(absl::StrCat("the configuration manager closed its connection (",
                             msg.status().message(), ")"));
        }
        return;
      }
      // Relaxed: only the heartbeat thread reads it, to judge the lease; no data hangs on it.
      last_heard_ns_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      if (msg->has_eviction()) {
        Evict(msg->eviction().reason());
        return;
      }
      if (msg->has_membership() && callback_) callback_(msg->membership());
    }
  }

  // Renews the lease every lease/4 and gives the node up when no word came from the CM for a
  // whole lease (the CM evicts it at about the same time: it hears no heartbeat either).
  void Heartbeat() {
    const Clock::duration period = lease_ / 4;
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      const Clock::duration silent =
          Clock::now() -
          Clock::time_point(Clock::duration(last_heard_ns_.load(std::memory_order_relaxed)));
      if (silent > lease_) {
        Evict(absl::StrCat("its lease expired (no word from the configuration manager for ",
                           absl::FormatDuration(absl::FromChrono(silent)), ", lease ",
                           absl::FormatDuration(absl::FromChrono(lease_)), ")"));
        return;
      }
      control::ControlMessage hb;
      hb.mutable_heartbeat()->set_node_id(node_id_);
      {
        std::lock_guard<std::mutex> l(send_mu_);
        (void)channel_->Send(hb);  // a dead CM shows up as silence: the check above
      }
      lock.lock();
      stop_cv_.wait_for(lock, period, [this] { return stop_; });
    }
  }

  const std::string host_;
  const uint16_t port_;
  const Clock::duration lease_;
  uint32_t node_id_ = 0;  // written by Join before the threads start
  MembershipCallback callback_;
  EvictionCallback eviction_callback_;
  std::unique_ptr<ControlChannel> channel_;
  std::mutex send_mu_;  // one Send at a time on channel_
  std::thread watcher_;
  std::thread heartbeat_;
  std::atomic<int64_t> last_heard_ns_{0};  // Clock ticks of the last message from the CM
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::atomic<bool> left_{false};
  std::atomic<bool> evicted_{false};
};

}  // namespace

std::unique_ptr<ConfigurationManager> NewTcpConfigurationManager(const std::string& host,
                                                                 uint16_t port,
                                                                 absl::Duration lease) {
  return std::make_unique<TcpConfigurationManager>(host, port, lease);
}

absl::StatusOr<std::unique_ptr<CmServer>> CmServer::Start(const config::ClusterConfig& config) {
  const config::NodeConfig* cm = FindNode(config, config.cm_node_id());
  if (cm == nullptr) return absl::InvalidArgumentError("the CM node is not in the configuration");
  absl::StatusOr<std::unique_ptr<ControlListener>> listener =
      ControlListener::Listen(cm->host(), static_cast<uint16_t>(cm->control_port()));
  if (!listener.ok()) {
    return absl::UnavailableError(
        absl::StrCat("configuration manager: ", listener.status().message()));
  }
  return std::unique_ptr<CmServer>(new CmServerImpl(config, std::move(*listener)));
}

}  // namespace farm
