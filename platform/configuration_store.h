// ConfigurationStore: where a cluster keeps its configuration (configuration id, members, which
// node holds each region's primary and backups, which node is the configuration manager) so
// that every node, and any node that takes over as configuration manager, finds the same one.
//
// The record is opaque bytes plus a version that the store assigns. A reconfiguration reads the
// record, builds the next configuration and writes it with CompareAndSet on the version it
// read: of several nodes that try to install a new configuration at once, exactly one wins, and
// the others learn that another configuration won and read it. The store is touched only on
// reconfiguration, never on the data path.
//
//   std::unique_ptr<ConfigurationStore> store = ...;  // NewZooKeeperConfigurationStore(...)
//   absl::StatusOr<VersionedRecord> current = store->Read();
//   if (absl::IsNotFound(current.status())) {         // the cluster's first configuration
//     absl::StatusOr<int64_t> v = store->Create(Serialize(first));
//     ...                                              // AlreadyExists: someone else was first
//   }
//   absl::StatusOr<int64_t> next = store->CompareAndSet(current->version, Serialize(proposed));
//   if (absl::IsFailedPrecondition(next.status())) ...  // another configuration won: Read it
//   if (absl::IsUnavailable(next.status())) ...  // keep serving the current configuration; this
//                                                // node cannot reconfigure now (the write may or
//                                                // may not have been applied: Read to find out)
//
// Backends: ZooKeeper (platform/zookeeper_store.h) for clusters, and an in-memory one below for
// unit tests of the layers above, with the same semantics and hooks that make calls fail.
//
// Errors, from every backend:
//   Unavailable         the store could not be reached, or did not answer, within the call's
//                       timeout (the message names the store and the timeout). A write that
//                       ended so may or may not have been applied: Read to find out.
//   FailedPrecondition  CompareAndSet lost to another writer (the message says the version that
//                       won); or the record belongs to another cluster, or is of a format this
//                       build does not read.
//   DataLoss            the record's bytes are not a configuration record (damaged, or written
//                       by something else); the message names where they are.
//   InvalidArgument     bad arguments: a configuration over kMaxConfigurationBytes, a negative
//                       version.
#ifndef FARM_PLATFORM_CONFIGURATION_STORE_H_
#define FARM_PLATFORM_CONFIGURATION_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farm {

// The cluster's configuration record: opaque bytes plus the store's version of them.
struct VersionedRecord {
  std::string data;
  // Versions start at 0 (Create) and each successful CompareAndSet adds 1.
  int64_t version = 0;
};

// The largest configuration a store takes: half a MiB, well inside ZooKeeper's default limit of
// 1 MiB per znode (jute.maxbuffer), which also bounds the request that carries it.
inline constexpr size_t kMaxConfigurationBytes = 512 * 1024;

// Safe for concurrent use: any thread may call any method at any time. Every call ends within
// the backend's operation timeout.
class ConfigurationStore {
 public:
  virtual ~ConfigurationStore() = default;

  // The record and its version. NotFound if no record exists yet.
  virtual absl::StatusOr<VersionedRecord> Read() = 0;

  // Creates the record (the cluster's first configuration) and returns its version (0).
  // AlreadyExists if one exists (then Read it).
  virtual absl::StatusOr<int64_t> Create(const std::string& data) = 0;

  // Replaces the record if its version is still `expected_version`; returns the new version.
  // FailedPrecondition if not (the message says another configuration won, and its version):
  // of concurrent writers from one version, exactly one wins. NotFound if there is no record.
  virtual absl::StatusOr<int64_t> CompareAndSet(int64_t expected_version,
                                                const std::string& data) = 0;

  // A human-readable name for messages, e.g. "zookeeper 10.0.0.1:2181 /farm/prod/configuration".
  virtual std::string Describe() const = 0;
};

// For backends. The checks every backend makes of its arguments (InvalidArgument, saying what is
// wrong), and the errors every backend returns in the same situations, worded alike (`where` is
// the store's Describe()).
absl::Status CheckConfigurationSize(const std::string& data);
absl::Status CheckExpectedVersion(int64_t expected_version);
absl::Status NoConfigurationRecord(const std::string& where);                       // NotFound
absl::Status ConfigurationRecordExists(const std::string& where, int64_t version);  // AlreadyExists
absl::Status AnotherConfigurationWon(const std::string& where, int64_t version,
                                     int64_t expected_version);  // FailedPrecondition

// The record behind in-memory stores. Stores made on one record see each other's writes, as
// several nodes' sessions see one ZooKeeper. Safe for concurrent use.
class InMemoryConfigurationRecord;
std::shared_ptr<InMemoryConfigurationRecord> NewInMemoryConfigurationRecord();

struct InMemoryStoreOptions {
  // The record to use; null: a new one of the store's own.
  std::shared_ptr<InMemoryConfigurationRecord> record;
  // Fault injection. Called at the start of every call with the call's name ("Read", "Create",
  // "CompareAndSet"); a non-OK status (e.g. Unavailable) is returned instead, and the record is
  // left alone. Called on the caller's thread, concurrently if the store is used so.
  std::function<absl::Status(absl::string_view call)> fail_before;
  // Called once a call has taken effect; a non-OK status replaces its result: a write that was
  // applied although its caller heard that it failed (as when ZooKeeper's answer comes too late).
  std::function<absl::Status(absl::string_view call)> fail_after;
  // Describe() returns "in-memory store " + name.
  std::string name = "memory";
};

// A store that keeps the record in this process, with the semantics of the ZooKeeper one.
std::unique_ptr<ConfigurationStore> NewInMemoryConfigurationStore(
    InMemoryStoreOptions options = {});

}  // namespace farm

#endif  // FARM_PLATFORM_CONFIGURATION_STORE_H_
