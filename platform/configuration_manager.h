// Configuration manager (CM): admits nodes and distributes membership and the region map.
//
// As in FaRM, one node of the cluster acts as CM. Nodes see it only through the
// ConfigurationManager interface, so a later backend (ZooKeeper, for multi-host clusters) can
// replace the built-in one without touching the node runtime.
//
// The built-in backend is CmServer (running inside the CM node, listening on its control port)
// plus TcpConfigurationManager (the client every node, the CM node included, joins through).
//
// Protocol: a node connects, sends JoinRequest (its id, fabric address, regions and config
// fingerprint) and gets JoinAccepted or Refusal. When every configured node has joined, the CM
// assigns cluster-wide region ids and sends Membership (epoch 1) to all. If some node does not
// join within the configured join timeout, the CM sends every joined node a Refusal naming the
// missing ones. After formation, a node whose connection closes is dropped and the CM sends the
// rest a new Membership (epoch + 1); a node that joins again later is added the same way.
//
// Leases (as in FaRM): from the first membership on, each node sends Heartbeat every lease/4
// (ClusterConfig.lease_ms) from a thread that does nothing else, and the CM answers each with
// HeartbeatAck as soon as it arrives. The CM evicts a node it has not heard from for a lease: it
// sends it Eviction, closes its connection and broadcasts a membership without it. A node's own
// lease runs from when it SENT the last heartbeat the CM acknowledged (nothing else renews it),
// for a lease less a small slack for clock rates (kLeaseSlackDivisor): the CM received that
// heartbeat later, so the node's lease always ends before the CM's view of it, and a node never
// acts as a member after the CM may have removed it. A node whose lease ended, whose connection
// to the CM closed, or that received Eviction, considers itself evicted (OnEviction) and must
// stop acting as a member. A node that can no longer talk to a member (e.g. a ring from it stays
// corrupt) reports it (Suspect); the CM evicts the suspect, so that every node agrees it is gone
// instead of one node silently cutting it off. A report against the CM's own node evicts the
// reporter instead (the CM cannot evict itself).
#ifndef FARM_PLATFORM_CONFIGURATION_MANAGER_H_
#define FARM_PLATFORM_CONFIGURATION_MANAGER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/config.pb.h"
#include "platform/configuration_store.h"
#include "platform/control.pb.h"

namespace farm {

// A node's view of the configuration manager. Implementations are safe for concurrent use.
class ConfigurationManager {
 public:
  using MembershipCallback = std::function<void(const control::Membership&)>;
  using EvictionCallback = std::function<void(const std::string& reason)>;

  virtual ~ConfigurationManager() = default;

  // Admits this node and waits until the cluster has formed. Returns the first membership.
  // Errors: Unavailable if the CM cannot be reached (names it), FailedPrecondition if the CM
  // refused the node or the cluster could not form (the CM's reason, e.g. which node is missing),
  // DeadlineExceeded after `timeout`.
  virtual absl::StatusOr<control::Membership> Join(const control::JoinRequest& request,
                                                   absl::Duration timeout) = 0;

  // Sets the function called (on an internal thread) with every membership after the first.
  // Call before Join.
  virtual void OnMembershipChange(MembershipCallback callback) = 0;

  // Sets the function called (once, on an internal thread) when this node learns it is no longer
  // a member: its lease expired, the CM evicted it or closed its connection. `reason` says which.
  // Not called after Leave. Call before Join.
  virtual void OnEviction(EvictionCallback callback) = 0;

  // Asks the CM to evict `node`, which this node can no longer talk to although it is a member.
  // Does not wait; best effort (if the CM is unreachable, this node's own lease expires).
  virtual void ReportSuspect(uint32_t node, const std::string& reason) = 0;

  // Tells the CM that this node holds a registered backup copy of a data region (made when a
  // membership named it a backup), so that the CM can promote it if the primary leaves. Does not
  // wait; best effort (a copy the CM does not know of is never promoted).
  virtual void ReportBackupCopy(const control::BackupCopy& copy) = 0;

  // Tells the CM that this node, a syncing backup of data region `region_id`, has copied it
  // (control.BackupSynced): its copy may be promoted from now on. Does not wait; best effort
  // (reported again after the next membership that still lists it as syncing).
  virtual void ReportBackupSynced(uint32_t region_id) = 0;

  // Tells the CM that this node, the primary of data region `region_id`, which membership marks
  // handing_off, holds nothing locked in it and takes no new lock on it (control.HandOffReady):
  // the CM may move it to its new primary. Does not wait; best effort (the engine says it again
  // while the region stays marked).
  virtual void ReportHandOffReady(uint32_t region_id) = 0;

  // Tells the CM that data region `region_id`, which this node serves, holds data now
  // (control.RegionInUse; told again to a CM that takes over). Does not wait; best effort.
  virtual void ReportRegionInUse(uint32_t region_id) = 0;

  // Tells the CM that this node applied membership `epoch` (its layers' listeners ran on it), so
  // that the CM can activate the regions that membership made recovering. Does not wait; best
  // effort (a node that cannot reach the CM loses its lease, and the CM stops waiting for it).
  virtual void AckMembership(uint64_t epoch) = 0;

  // Leaves the cluster. Idempotent.
  virtual void Leave() = 0;
  // The cluster ends (every member finished the application): Leave says so (control.Leave.
  // cluster_ending), and the CM lets the members go with their regions.
  virtual void MarkClusterEnding() = 0;

  // Round trips of this node's heartbeats so far (from sending one to receiving its
  // acknowledgement), for choosing a lease that healthy nodes never miss.
  struct HeartbeatStats {
    uint64_t count = 0;  // heartbeats acknowledged
    absl::Duration p50, p99, max;
  };
  virtual HeartbeatStats heartbeat_stats() const = 0;

  // When this node's lease ends, on the steady clock: the send time of the last heartbeat the CM
  // acknowledged (or of the join request, before the first), plus the lease less the slack. It
  // only moves forward. Before Join: the clock's epoch.
  virtual std::chrono::steady_clock::time_point lease_expiry() const = 0;
};

// The part of a lease a node gives up for the CM's clock running slower than its own: the node's
// lease is lease * (1 - 1/kLeaseSlackDivisor) long (FaRM's precise membership needs the node's
// lease to end before the CM's view of it; clocks of different hosts drift by far less).
inline constexpr int kLeaseSlackDivisor = 64;

// Client of the built-in CM at host:port, renewing a lease of `lease` (ClusterConfig.lease_ms).
std::unique_ptr<ConfigurationManager> NewTcpConfigurationManager(const std::string& host,
                                                                 uint16_t port,
                                                                 absl::Duration lease);

// Client of the built-in CM of node `cm_node_id` of `config` that survives the CM's failure
// (CM takeover) through `store` (ZooKeeper; null: no takeover, as above). When the CM closes the
// connection or stops renewing the lease, a node that is not the CM reads the configuration
// record, reconnects (keeping its id, regions and incarnation) to the CM it names, or, once its
// own lease ended and no node ahead of it in line did, takes the role over by compare-and-set
// on the record and runs the CM itself: it waits a while for the record's members to reconnect,
// then removes the failed CM and those that did not (their regions are promoted where backups
// are left) in its first membership. A node the record no longer lists, or that finds no CM it
// can reconnect to in time, is evicted. Meanwhile it serves nothing once its lease ended.
std::unique_ptr<ConfigurationManager> NewTcpConfigurationManager(
    const config::ClusterConfig& config, uint32_t cm_node_id, absl::Duration lease,
    std::shared_ptr<ConfigurationStore> store);

// The node a node should join the cluster through: the CM the store's record names, if it is
// not `self` (-1: not known) and accepts connections (a node took the role over while this one
// was away); otherwise config.cm_node_id (also when the store has no record or cannot be read).
// If the recorded CM does not answer (`self`'s own previous process, restarted at once, or
// another node that failed) while the record lists other members, it waits until one of them
// takes the role over (or the recorded CM answers), for at most (nodes that form the cluster + 2)
// leases + 5 s: a CM started meanwhile would form a new cluster over theirs. Past that the
// record counts as an earlier run's (so a whole cluster started again over an earlier run's
// record in a ZooKeeper that kept it starts that much later).
uint32_t FindConfigurationManager(const config::ClusterConfig& config, ConfigurationStore& store,
                                  int self);

// The built-in CM service. Runs one thread; destroying it stops the service.
class CmServer {
 public:
  // Listens on the CM node's control address from `config` and starts admitting nodes. With a
  // `store` (ZooKeeper: ClusterConfig.zookeeper), every membership is recorded there by
  // compare-and-set before any member gets it; while the store does not take it (unreachable)
  // the members keep the current membership and the CM tries again every second; if another
  // configuration won (another CM wrote the record), this CM evicts its members and stops.
  static absl::StatusOr<std::unique_ptr<CmServer>> Start(
      const config::ClusterConfig& config, std::shared_ptr<ConfigurationStore> store = nullptr);
  virtual ~CmServer() = default;
};

}  // namespace farm

#endif  // FARM_PLATFORM_CONFIGURATION_MANAGER_H_
