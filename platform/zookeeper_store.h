// The cluster's configuration record in ZooKeeper: one znode, /farm/<cluster_name>/configuration,
// written by compare-and-set on the znode's version (ConfigurationStore, configuration_store.h).
//
//   ZooKeeperStoreOptions options;
//   options.connect = "10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181";  // the --zookeeper flag
//   options.cluster_name = "prod";
//   absl::StatusOr<std::unique_ptr<ConfigurationStore>> store =
//       NewZooKeeperConfigurationStore(options);
//   if (!store.ok()) return store.status();  // InvalidArgument: a bad name, server list, timeout
//   absl::StatusOr<VersionedRecord> current = (*store)->Read();
//
// The znode holds the configuration wrapped in a StoredConfiguration (configuration_store.proto)
// that names the cluster. A store refuses a znode that names another cluster
// (FailedPrecondition "znode /farm/a/configuration belongs to cluster 'b', not 'a'") and bytes
// that are not such a record (DataLoss naming the znode); Create makes the znode's parents.
//
// Every call ends within `operation_timeout`, with Unavailable if ZooKeeper could not be reached
// or did not answer by then (down, stopped, partitioned away): the message names the servers,
// the znode and the timeout. Such a write may or may not have been applied; Read to find out.
// The store keeps one ZooKeeper session, opened on the first call (not by the constructor, so a
// node starts while ZooKeeper is down), kept through the client's reconnections to any of the
// servers, and opened anew on the call after ZooKeeper expired it. Besides these calls, only the
// client's session heartbeats reach ZooKeeper: the store sets no watches. Destroying the store
// closes the session, which takes a second or two when ZooKeeper does not answer.
//
// Thread safety: safe for concurrent use (calls share the session). ZooKeeper versions are
// 32-bit: VersionedRecord.version stays below 2^31.
#ifndef FARM_PLATFORM_ZOOKEEPER_STORE_H_
#define FARM_PLATFORM_ZOOKEEPER_STORE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "platform/configuration_store.h"

namespace farm {

struct ZooKeeperStoreOptions {
  // The ZooKeeper servers, "host:port,host:port" (the --zookeeper flag's value).
  std::string connect;
  // The cluster's name: 1 to 100 of [A-Za-z0-9._-], not "." or "..". Names the znode.
  std::string cluster_name;
  // How long ZooKeeper keeps the session when it hears nothing from this client (the servers
  // clamp it to their minSessionTimeout .. maxSessionTimeout).
  absl::Duration session_timeout = absl::Seconds(10);
  // How long each call may take, all its round trips to ZooKeeper included.
  absl::Duration operation_timeout = absl::Seconds(5);
  // Tests only: the znode to use instead of ConfigurationZnode(cluster_name), e.g. another
  // cluster's. An absolute path; Create makes its parents.
  std::string znode_for_testing;
};

// OK for a valid cluster name, else InvalidArgument saying what is wrong with it.
absl::Status ValidateClusterName(absl::string_view cluster_name);

// The znode of a cluster's configuration record: "/farm/<cluster_name>/configuration".
std::string ConfigurationZnode(absl::string_view cluster_name);

// A store on the ZooKeeper servers in `options.connect`. InvalidArgument for bad options (the
// message says which); does not contact ZooKeeper.
absl::StatusOr<std::unique_ptr<ConfigurationStore>> NewZooKeeperConfigurationStore(
    const ZooKeeperStoreOptions& options);

}  // namespace farm

#endif  // FARM_PLATFORM_ZOOKEEPER_STORE_H_
