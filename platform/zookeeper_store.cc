#include "platform/zookeeper_store.h"

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "platform/configuration_store.pb.h"
#include "platform/zookeeper_session.h"

namespace farm {
namespace {

// StoredConfiguration.magic: "FaRM" in little-endian byte order.
constexpr uint32_t kStoredConfigurationMagic = 0x4d526146;
constexpr uint32_t kStoredConfigurationFormat = 1;
constexpr size_t kMaxClusterNameLength = 100;

using Clock = ZooKeeperSession::Clock;

absl::Status ValidateConnect(const std::string& connect) {
  if (connect.empty()) {
    return absl::InvalidArgumentError(
        "no ZooKeeper servers given (expected host:port[,host:port...])");
  }
  for (absl::string_view server : absl::StrSplit(connect, ',')) {
    const size_t colon = server.rfind(':');
    uint32_t port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(server.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("ZooKeeper server \"", server, "\" in \"", connect, "\" is not host:port"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTimeout(absl::string_view name, absl::Duration timeout) {
  if (timeout >= absl::Milliseconds(1) && timeout <= absl::Hours(1)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " ", absl::FormatDuration(timeout), " is not between 1ms and 1h"));
}

// The znodes above `path` ("/farm", "/farm/a" for "/farm/a/configuration"), outermost first.
std::vector<std::string> Ancestors(const std::string& path) {
  std::vector<std::string> ancestors;
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    ancestors.push_back(path.substr(0, slash));
  }
  return ancestors;
}

class ZooKeeperConfigurationStore : public ConfigurationStore {
 public:
  explicit ZooKeeperConfigurationStore(const ZooKeeperStoreOptions& options)
      : options_(options),
        znode_(options.znode_for_testing.empty() ? ConfigurationZnode(options.cluster_name)
                                                 : options.znode_for_testing) {}

  absl::StatusOr<VersionedRecord> Read() override {
    const Clock::time_point deadline = Deadline();
    absl::StatusOr<std::shared_ptr<ZooKeeperSession>> session = Session();
    if (!session.ok()) return Unreachable("read", session.status());
    return ReadRecord(**session, deadline, "read");
  }

  absl::StatusOr<int64_t> Create(const std::string& data) override {
    if (absl::Status s = CheckConfigurationSize(data); !s.ok()) return s;
    const Clock::time_point deadline = Deadline();
    absl::StatusOr<std::shared_ptr<ZooKeeperSession>> session = Session();
    if (!session.ok()) return Unreachable("create", session.status());
    const std::string wrapped = Wrap(data);
    absl::StatusOr<ZooKeeperSession::Reply> created = (*session)->Create(znode_, wrapped, deadline);
    if (created.ok() && created->rc == ZNONODE) {  // the cluster's first record: make the parents
      if (absl::Status s = CreateAncestors(**session, deadline); !s.ok()) return s;
      created = (*session)->Create(znode_, wrapped, deadline);
    }
    if (!created.ok()) return Unreachable("create", created.status());
    if (created->rc == ZOK) return 0;  // a new znode's version
    if (created->rc != ZNODEEXISTS) return Refused("create", created->rc);
    // Say whose record it is: ours (AlreadyExists), another cluster's, or not a record at all.
    absl::StatusOr<VersionedRecord> existing = ReadRecord(**session, deadline, "create");
    if (!existing.ok()) return existing.status();
    return ConfigurationRecordExists(Describe(), existing->version);
  }

  absl::StatusOr<int64_t> CompareAndSet(int64_t expected_version,
                                        const std::string& data) override {
    if (absl::Status s = CheckConfigurationSize(data); !s.ok()) return s;
    if (absl::Status s = CheckExpectedVersion(expected_version); !s.ok()) return s;
    const Clock::time_point deadline = Deadline();
    absl::StatusOr<std::shared_ptr<ZooKeeperSession>> session = Session();
    if (!session.ok()) return Unreachable("replace", session.status());
    // Read first: only a record of this cluster is replaced. The write below is conditional on
    // the version read here, so no other cluster's bytes can slip in between.
    absl::StatusOr<VersionedRecord> current = ReadRecord(**session, deadline, "replace");
    if (!current.ok()) return current.status();
    if (current->version != expected_version) {
      return AnotherConfigurationWon(Describe(), current->version, expected_version);
    }
    absl::StatusOr<ZooKeeperSession::Reply> set =
        (*session)->Set(znode_, Wrap(data), static_cast<int32_t>(expected_version), deadline);
    if (!set.ok()) return Unreachable("replace", set.status());
    if (set->rc == ZOK) return set->version;
    if (set->rc == ZNONODE) return NoConfigurationRecord(Describe());
    if (set->rc != ZBADVERSION) return Refused("replace", set->rc);
    // Another writer got in between the read and the write: say which version won if ZooKeeper
    // still answers in time.
    absl::StatusOr<VersionedRecord> now = ReadRecord(**session, deadline, "replace");
    if (now.ok()) {
      return AnotherConfigurationWon(Describe(), now->version, expected_version);
    }
    return absl::FailedPreconditionError(absl::StrCat("another configuration won: ", Describe(),
                                                      " moved past version ", expected_version,
                                                      " (Read it)"));
  }

  std::string Describe() const override {
    return absl::StrCat("zookeeper ", options_.connect, " ", znode_);
  }

 private:
  Clock::time_point Deadline() const {
    return Clock::now() + absl::ToChronoNanoseconds(options_.operation_timeout);
  }

  // The session to use: the current one, or a new one if there is none yet or ZooKeeper
  // expired it.
  absl::StatusOr<std::shared_ptr<ZooKeeperSession>> Session() {
    std::shared_ptr<ZooKeeperSession> expired;  // closed after the lock is released
    std::lock_guard<std::mutex> l(mu_);
    if (session_ != nullptr && !session_->expired()) return session_;
    expired = std::move(session_);
    absl::StatusOr<std::shared_ptr<ZooKeeperSession>> fresh =
        ZooKeeperSession::Open(options_.connect, options_.session_timeout);
    if (!fresh.ok()) return absl::UnavailableError(fresh.status().message());
    session_ = *std::move(fresh);
    return session_;
  }

  // Reads the record as the first step of `what` ("read", "replace", ...).
  absl::StatusOr<VersionedRecord> ReadRecord(ZooKeeperSession& session, Clock::time_point deadline,
                                             absl::string_view what) const {
    absl::StatusOr<ZooKeeperSession::Reply> got = session.Get(znode_, deadline);
    if (!got.ok()) return Unreachable(what, got.status());
    if (got->rc == ZNONODE) return NoConfigurationRecord(Describe());
    if (got->rc != ZOK) return Refused(what, got->rc);
    absl::StatusOr<std::string> payload = Unwrap(got->data);
    if (!payload.ok()) return payload.status();
    return VersionedRecord{*std::move(payload), got->version};
  }

  absl::Status CreateAncestors(ZooKeeperSession& session, Clock::time_point deadline) {
    for (const std::string& ancestor : Ancestors(znode_)) {
      absl::StatusOr<ZooKeeperSession::Reply> made = session.Create(ancestor, "", deadline);
      if (!made.ok()) return Unreachable("create", made.status());
      if (made->rc != ZOK && made->rc != ZNODEEXISTS) return Refused("create", made->rc);
    }
    return absl::OkStatus();
  }

  std::string Wrap(const std::string& payload) const {
    store::StoredConfiguration stored;
    stored.set_magic(kStoredConfigurationMagic);
    stored.set_format(kStoredConfigurationFormat);
    stored.set_cluster_name(options_.cluster_name);
    stored.set_payload(payload);
    return stored.SerializeAsString();
  }

  // The payload of the znode's bytes, if they are this cluster's record.
  absl::StatusOr<std::string> Unwrap(const std::string& bytes) const {
    store::StoredConfiguration stored;
    if (!stored.ParseFromString(bytes) || stored.magic() != kStoredConfigurationMagic) {
      return absl::DataLossError(absl::StrCat(
          "znode ", znode_, " on zookeeper ", options_.connect, " holds ", bytes.size(),
          " bytes that are not a farm configuration record (damaged, or written by something "
          "else); this cluster cannot use it"));
    }
    if (stored.format() != kStoredConfigurationFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          "znode ", znode_, " on zookeeper ", options_.connect,
          " holds a configuration record of format ", stored.format(), "; this build reads format ",
          kStoredConfigurationFormat, " (a newer farm wrote it?)"));
    }
    if (stored.cluster_name() != options_.cluster_name) {
      return absl::FailedPreconditionError(
          absl::StrCat("znode ", znode_, " belongs to cluster '", stored.cluster_name(), "', not '",
                       options_.cluster_name, "' (zookeeper ", options_.connect,
                       "): is another cluster using this name, or the wrong ZooKeeper?"));
    }
    return std::move(*stored.mutable_payload());
  }

  // `why` (the session's Unavailable) with what failed, where, and the timeout.
  absl::Status Unreachable(absl::string_view what, const absl::Status& why) const {
    return absl::UnavailableError(
        absl::StrCat("cannot ", what, " the configuration record at ", Describe(), " within ",
                     absl::FormatDuration(options_.operation_timeout), ": ", why.message()));
  }

  // ZooKeeper refused for a reason that is not about the record (permissions, a bad request).
  absl::Status Refused(absl::string_view what, int rc) const {
    const std::string message =
        absl::StrCat("cannot ", what, " the configuration record at ", Describe(),
                     ": ZooKeeper answered \"", zerror(rc), "\" (", rc, ")");
    if (rc == ZNOAUTH) return absl::PermissionDeniedError(message);
    return absl::InternalError(message);
  }

  const ZooKeeperStoreOptions options_;
  const std::string znode_;
  std::mutex mu_;
  std::shared_ptr<ZooKeeperSession> session_;  // guarded by mu_
};

}  // namespace

absl::Status ValidateClusterName(absl::string_view cluster_name) {
  if (cluster_name.empty()) return absl::InvalidArgumentError("the cluster name is empty");
  if (cluster_name.size() > kMaxClusterNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("the cluster name \"", cluster_name, "\" has ",
                                                   cluster_name.size(), " characters, over ",
                                                   kMaxClusterNameLength));
  }
  for (char c : cluster_name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("the cluster name \"", cluster_name,
                       "\" has a character other than A-Z, a-z, 0-9, '.', '_', '-'"));
    }
  }
  if (cluster_name == "." || cluster_name == "..") {  // ZooKeeper refuses them as path parts
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster name \"", cluster_name, "\" is not a valid znode name"));
  }
  return absl::OkStatus();
}

std::string ConfigurationZnode(absl::string_view cluster_name) {
  return absl::StrCat("/farm/", cluster_name, "/configuration");
}

absl::StatusOr<std::unique_ptr<ConfigurationStore>> NewZooKeeperConfigurationStore(
    const ZooKeeperStoreOptions& options) {
  if (absl::Status s = ValidateClusterName(options.cluster_name); !s.ok()) return s;
  if (absl::Status s = ValidateConnect(options.connect); !s.ok()) return s;
  if (absl::Status s = ValidateTimeout("session_timeout", options.session_timeout); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateTimeout("operation_timeout", options.operation_timeout); !s.ok()) {
    return s;
  }
  const std::string& path = options.znode_for_testing;
  if (!path.empty() && (path[0] != '/' || path.back() == '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("znode_for_testing \"", path, "\" is not an absolute znode path"));
  }
  return std::make_unique<ZooKeeperConfigurationStore>(options);
}

}  // namespace farm
