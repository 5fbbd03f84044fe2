#include "platform/zookeeper_store.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "platform/configuration_store.h"
#include "platform/configuration_store.pb.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/tcp_relay.h"
#include "platform/zookeeper_server.h"
#include "platform/zookeeper_session.h"

namespace farm {
namespace {

using Catch::Matchers::Contains;

// Healthy servers answer well within this even on a loaded machine under a sanitizer.
constexpr absl::Duration kPatientTimeout = absl::Seconds(20);
// For stores whose calls are expected to time out.
constexpr absl::Duration kShortTimeout = absl::Milliseconds(1500);
// How long a test waits for a server that came back to serve again.
constexpr absl::Duration kRecoveryBound = absl::Seconds(60);

// Makes stores that all see one record (several nodes' sessions with one ZooKeeper).
using StoreFactory = std::function<std::unique_ptr<ConfigurationStore>()>;

std::string NewClusterName() {
  static std::atomic<int> next{0};
  return absl::StrCat("test-", getpid(), "-", next.fetch_add(1));
}

// The server shared by the tests that neither stop nor pause it.
ZooKeeperServer& SharedServer() {
  static absl::StatusOr<std::unique_ptr<ZooKeeperServer>> server = ZooKeeperServer::Start();
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  return **server;
}

ZooKeeperStoreOptions StoreOptions(const std::string& connect, const std::string& cluster,
                                   absl::Duration operation_timeout = kPatientTimeout) {
  ZooKeeperStoreOptions options;
  options.connect = connect;
  options.cluster_name = cluster;
  options.operation_timeout = operation_timeout;
  return options;
}

std::unique_ptr<ConfigurationStore> OpenStore(const ZooKeeperStoreOptions& options) {
  absl::StatusOr<std::unique_ptr<ConfigurationStore>> store =
      NewZooKeeperConfigurationStore(options);
  INFO(store.status().ToString());
  REQUIRE(store.ok());
  return *std::move(store);
}

std::string RandomBytes(size_t n) {
  std::mt19937 random(42);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

// Writes `bytes` to `path` as they are (making its parents), as something other than farm would.
void WriteRaw(const std::string& path, const std::string& bytes) {
  absl::StatusOr<std::shared_ptr<ZooKeeperSession>> session =
      ZooKeeperSession::Open(SharedServer().connect_string(), absl::Seconds(10));
  REQUIRE(session.ok());
  const auto deadline = ZooKeeperSession::Clock::now() + std::chrono::seconds(20);
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    REQUIRE((*session)->Create(path.substr(0, slash), "", deadline).ok());
  }
  absl::StatusOr<ZooKeeperSession::Reply> created = (*session)->Create(path, bytes, deadline);
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  REQUIRE(created->rc == ZOK);
}

// Calls `call` until it succeeds; fails the test if it has not within kRecoveryBound.
template <typename Call>
auto Eventually(Call call) {
  const absl::Time deadline = absl::Now() + kRecoveryBound;
  auto result = call();
  while (!result.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
    result = call();
  }
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return result;
}

// The semantics both backends share. `new_store` makes stores on one fresh record.
void CheckSemantics(const StoreFactory& new_store) {
  std::unique_ptr<ConfigurationStore> store = new_store();
  REQUIRE(!store->Describe().empty());

  SECTION("there is no record before the first Create") {
    REQUIRE(absl::IsNotFound(store->Read().status()));
    REQUIRE(absl::IsNotFound(store->CompareAndSet(0, "x").status()));
  }

  SECTION("Create, then Read returns the same bytes at version 0, to every store") {
    const std::string binary("\0\x01\xff\x80 farm\n\0", 11);
    REQUIRE(store->Create(binary).value() == 0);
    absl::StatusOr<VersionedRecord> read = store->Read();
    REQUIRE(read.ok());
    REQUIRE(read->data == binary);
    REQUIRE(read->version == 0);
    REQUIRE(new_store()->Read().value().data == binary);
  }

  SECTION("a 100 KiB configuration round-trips") {
    const std::string big = RandomBytes(100 * 1024);
    REQUIRE(store->Create(big).ok());
    REQUIRE(store->Read().value().data == big);
  }

  SECTION("a second Create is AlreadyExists and changes nothing") {
    REQUIRE(store->Create("first").ok());
    absl::StatusOr<int64_t> again = new_store()->Create("second");
    REQUIRE(absl::IsAlreadyExists(again.status()));
    REQUIRE_THAT(std::string(again.status().message()), Contains("version 0"));
    REQUIRE(store->Read().value().data == "first");
  }

  SECTION("CompareAndSet on the current version replaces the record and bumps the version") {
    REQUIRE(store->Create("one").ok());
    REQUIRE(store->CompareAndSet(0, "two").value() == 1);
    REQUIRE(store->CompareAndSet(1, "three").value() == 2);
    absl::StatusOr<VersionedRecord> read = new_store()->Read();
    REQUIRE(read.ok());
    REQUIRE(read->data == "three");
    REQUIRE(read->version == 2);
  }

  SECTION("CompareAndSet on a stale version fails, saying which version won") {
    REQUIRE(store->Create("one").ok());
    REQUIRE(store->CompareAndSet(0, "two").ok());
    absl::StatusOr<int64_t> stale = new_store()->CompareAndSet(0, "late");
    REQUIRE(absl::IsFailedPrecondition(stale.status()));
    REQUIRE_THAT(std::string(stale.status().message()), Contains("another configuration won"));
    REQUIRE_THAT(std::string(stale.status().message()), Contains("at version 1, not 0"));
    REQUIRE(store->Read().value().data == "two");
  }

  SECTION("bad arguments are refused") {
    const std::string too_big(kMaxConfigurationBytes + 1, 'x');
    REQUIRE(absl::IsInvalidArgument(store->Create(too_big).status()));
    REQUIRE(store->Create("one").ok());
    REQUIRE(absl::IsInvalidArgument(store->CompareAndSet(0, too_big).status()));
    // -1 would mean "any version" to ZooKeeper: it must never reach it.
    REQUIRE(absl::IsInvalidArgument(store->CompareAndSet(-1, "two").status()));
    REQUIRE(store->Read().value().version == 0);
  }

  SECTION("of writers racing from one version, exactly one wins") {
    constexpr int kWriters = 6;
    REQUIRE(store->Create("start").ok());
    std::vector<std::unique_ptr<ConfigurationStore>> writers;
    for (int i = 0; i < kWriters; ++i) {
      writers.push_back(new_store());
      REQUIRE(writers.back()->Read().ok());  // each has its session before the race
    }
    std::vector<absl::StatusOr<int64_t>> results(kWriters);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < kWriters; ++i) {
      threads.emplace_back([&, i] {
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        results[i] = writers[i]->CompareAndSet(0, absl::StrCat("writer ", i));
      });
    }
    go.store(true, std::memory_order_release);
    for (std::thread& t : threads) t.join();
    int winner = -1;
    for (int i = 0; i < kWriters; ++i) {
      INFO("writer " << i << ": " << results[i].status().ToString());
      if (results[i].ok()) {
        REQUIRE(winner == -1);
        winner = i;
        REQUIRE(*results[i] == 1);
      } else {
        REQUIRE(absl::IsFailedPrecondition(results[i].status()));
      }
    }
    REQUIRE(winner >= 0);
    absl::StatusOr<VersionedRecord> read = store->Read();
    REQUIRE(read.ok());
    REQUIRE(read->data == absl::StrCat("writer ", winner));
    REQUIRE(read->version == 1);
  }
}

TEST_CASE("in-memory store: the ConfigurationStore semantics") {
  std::shared_ptr<InMemoryConfigurationRecord> record = NewInMemoryConfigurationRecord();
  CheckSemantics([record] {
    InMemoryStoreOptions options;
    options.record = record;
    return NewInMemoryConfigurationStore(options);
  });
}

TEST_CASE("zookeeper store: the ConfigurationStore semantics") {
  const std::string connect = SharedServer().connect_string();
  const std::string cluster = NewClusterName();
  CheckSemantics([connect, cluster] { return OpenStore(StoreOptions(connect, cluster)); });
}

TEST_CASE("in-memory store: injected faults") {
  std::shared_ptr<InMemoryConfigurationRecord> record = NewInMemoryConfigurationRecord();
  InMemoryStoreOptions healthy_options;
  healthy_options.record = record;
  std::unique_ptr<ConfigurationStore> healthy = NewInMemoryConfigurationStore(healthy_options);
  REQUIRE(healthy->Create("one").ok());
  InMemoryStoreOptions options;
  options.record = record;
  options.name = "faulty";

  SECTION("a call failed before it runs changes nothing") {
    std::vector<std::string> calls;
    options.fail_before = [&](absl::string_view call) {
      calls.emplace_back(call);
      return absl::UnavailableError("injected");
    };
    std::unique_ptr<ConfigurationStore> faulty = NewInMemoryConfigurationStore(options);
    REQUIRE(absl::IsUnavailable(faulty->Read().status()));
    REQUIRE(absl::IsUnavailable(faulty->Create("x").status()));
    REQUIRE(absl::IsUnavailable(faulty->CompareAndSet(0, "two").status()));
    REQUIRE(calls == std::vector<std::string>{"Read", "Create", "CompareAndSet"});
    REQUIRE(healthy->Read().value().version == 0);
    REQUIRE(faulty->Describe() == "in-memory store faulty");
  }

  SECTION("a call failed after it ran was applied all the same") {
    options.fail_after = [](absl::string_view) { return absl::UnavailableError("injected"); };
    std::unique_ptr<ConfigurationStore> faulty = NewInMemoryConfigurationStore(options);
    REQUIRE(absl::IsUnavailable(faulty->CompareAndSet(0, "two").status()));
    REQUIRE(healthy->Read().value().data == "two");
  }
}

TEST_CASE("zookeeper store: options are checked") {
  const ZooKeeperStoreOptions good = StoreOptions("127.0.0.1:2181", "prod-1.eu_west");
  REQUIRE(NewZooKeeperConfigurationStore(good).ok());
  REQUIRE(ConfigurationZnode("prod") == "/farm/prod/configuration");
  REQUIRE(OpenStore(good)->Describe() ==
          "zookeeper 127.0.0.1:2181 /farm/prod-1.eu_west/configuration");
  REQUIRE(ValidateClusterName(std::string(100, 'a')).ok());
  for (const std::string& name :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"),
        std::string("with space"), std::string("\xc3\xa9t\xc3\xa9"), std::string(101, 'a')}) {
    INFO("cluster name \"" << name << "\"");
    ZooKeeperStoreOptions options = good;
    options.cluster_name = name;
    REQUIRE(absl::IsInvalidArgument(NewZooKeeperConfigurationStore(options).status()));
  }
  for (const char* connect : {"", "localhost", "h:0", "h:65536", "h:1,", ":2181", "h:x"}) {
    INFO("connect \"" << connect << "\"");
    ZooKeeperStoreOptions options = good;
    options.connect = connect;
    REQUIRE(absl::IsInvalidArgument(NewZooKeeperConfigurationStore(options).status()));
  }
  ZooKeeperStoreOptions options = good;
  options.operation_timeout = absl::ZeroDuration();
  REQUIRE(absl::IsInvalidArgument(NewZooKeeperConfigurationStore(options).status()));
  options = good;
  options.znode_for_testing = "relative/path";
  REQUIRE(absl::IsInvalidArgument(NewZooKeeperConfigurationStore(options).status()));
}

TEST_CASE("zookeeper store: a znode of another cluster is refused, and left alone") {
  const std::string connect = SharedServer().connect_string();
  const std::string a = NewClusterName();
  const std::string b = NewClusterName();
  std::unique_ptr<ConfigurationStore> store_a = OpenStore(StoreOptions(connect, a));
  REQUIRE(store_a->Create("a's configuration").ok());
  ZooKeeperStoreOptions options = StoreOptions(connect, b);
  options.znode_for_testing = ConfigurationZnode(a);
  std::unique_ptr<ConfigurationStore> store_b = OpenStore(options);
  const std::string expected =
      absl::StrCat("znode /farm/", a, "/configuration belongs to cluster '", a, "', not '", b, "'");

  absl::Status read = store_b->Read().status();
  REQUIRE(absl::IsFailedPrecondition(read));
  REQUIRE_THAT(std::string(read.message()), Contains(expected));
  absl::Status cas = store_b->CompareAndSet(0, "b's configuration").status();
  REQUIRE(absl::IsFailedPrecondition(cas));
  REQUIRE_THAT(std::string(cas.message()), Contains(expected));
  REQUIRE(absl::IsFailedPrecondition(store_b->Create("b's configuration").status()));
  absl::StatusOr<VersionedRecord> kept = store_a->Read();
  REQUIRE(kept.ok());
  REQUIRE(kept->data == "a's configuration");
  REQUIRE(kept->version == 0);
}

TEST_CASE("zookeeper store: a znode that is not a configuration record") {
  const std::string cluster = NewClusterName();
  const std::string znode = ConfigurationZnode(cluster);
  std::unique_ptr<ConfigurationStore> store =
      OpenStore(StoreOptions(SharedServer().connect_string(), cluster));

  SECTION("garbage bytes are DataLoss, naming the znode") {
    WriteRaw(znode, std::string("\xde\xad\xbe\xef not a record\x01\x02", 20));
    for (const absl::Status& s : {store->Read().status(), store->CompareAndSet(0, "x").status(),
                                  store->Create("x").status()}) {
      INFO(s.ToString());
      REQUIRE(absl::IsDataLoss(s));
      REQUIRE_THAT(std::string(s.message()), Contains(znode));
    }
  }

  SECTION("an empty znode is DataLoss") {
    WriteRaw(znode, "");
    REQUIRE(absl::IsDataLoss(store->Read().status()));
  }

  SECTION("a record of a format this build does not know is refused") {
    store::StoredConfiguration newer;
    newer.set_magic(0x4d526146);
    newer.set_format(2);
    newer.set_cluster_name(cluster);
    WriteRaw(znode, newer.SerializeAsString());
    absl::Status s = store->Read().status();
    REQUIRE(absl::IsFailedPrecondition(s));
    REQUIRE_THAT(std::string(s.message()), Contains("format 2"));
  }
}

TEST_CASE("zookeeper store: nothing listening is Unavailable, naming the servers") {
  absl::StatusOr<std::vector<uint16_t>> port = testing::FreePorts(1);
  REQUIRE(port.ok());
  const std::string connect = absl::StrCat("127.0.0.1:", (*port)[0]);
  std::unique_ptr<ConfigurationStore> store =
      OpenStore(StoreOptions(connect, NewClusterName(), kShortTimeout));
  absl::Status s = store->Read().status();
  REQUIRE(absl::IsUnavailable(s));
  REQUIRE_THAT(std::string(s.message()), Contains(connect));
  REQUIRE_THAT(std::string(s.message()), Contains(absl::FormatDuration(kShortTimeout)));
  REQUIRE(absl::IsUnavailable(store->Create("x").status()));
}

// The tests below keep at most one ZooKeeper handle failing to connect at a time: the C
// client's handles share a buffer when they do (zookeeper_session.h), which TSan reports.

// Every call on `store` ends with Unavailable (by the operation timeout: asserted only by the
// test ending, never by measuring).
void RequireUnavailable(ConfigurationStore& store, int64_t version) {
  for (const absl::Status& s :
       {store.Read().status(), store.Create("x").status(),
        store.CompareAndSet(version, "written while unavailable").status()}) {
    INFO(s.ToString());
    REQUIRE(absl::IsUnavailable(s));
    REQUIRE_THAT(std::string(s.message()), Contains(store.Describe()));
  }
}

TEST_CASE("zookeeper store: ZooKeeper stopped, restarted, paused and resumed") {
  absl::StatusOr<std::unique_ptr<ZooKeeperServer>> server = ZooKeeperServer::Start();
  INFO(server.status().ToString());
  REQUIRE(server.ok());
  const std::string cluster = NewClusterName();
  REQUIRE(OpenStore(StoreOptions((*server)->connect_string(), cluster))->Create("before").ok());
  ZooKeeperStoreOptions options = StoreOptions((*server)->connect_string(), cluster, kShortTimeout);
  options.session_timeout = absl::Seconds(2);  // so that a pause outlives the session
  std::unique_ptr<ConfigurationStore> store = OpenStore(options);
  REQUIRE(Eventually([&] { return store->Read(); }).value().version == 0);  // it has a session

  SECTION("stopped: every call is Unavailable; restarted: the record is back") {
    (*server)->Stop();
    RequireUnavailable(*store, 0);
    REQUIRE((*server)->Restart().ok());
    absl::StatusOr<VersionedRecord> read = Eventually([&] { return store->Read(); });
    REQUIRE(read->data == "before");
    REQUIRE(read->version == 0);
  }

  SECTION("paused: every call is Unavailable; resumed: the same store works again") {
    REQUIRE((*server)->Pause().ok());
    RequireUnavailable(*store, 0);
    REQUIRE((*server)->Resume().ok());
    absl::StatusOr<VersionedRecord> read = Eventually([&] { return store->Read(); });
    // The CompareAndSet sent while ZooKeeper was paused may have been applied on resume: its
    // Unavailable said so.
    REQUIRE((read->data == "before" || read->data == "written while unavailable"));
    REQUIRE(Eventually([&] { return store->CompareAndSet(read->version, "after"); }).ok());
    REQUIRE(store->Read().value().data == "after");
  }

  SECTION("the server's directory goes with it") {
    const std::string dir = (*server)->dir();
    REQUIRE(std::filesystem::exists(dir + "/zoo.cfg"));
    server->reset();
    REQUIRE(!std::filesystem::exists(dir));
  }
}

TEST_CASE("zookeeper store: cut off for longer than its session, the store opens a new one") {
  ZooKeeperServer& server = SharedServer();
  absl::StatusOr<std::unique_ptr<testing::TcpRelay>> relay =
      testing::TcpRelay::Start(server.port());
  REQUIRE(relay.ok());
  const std::string cluster = NewClusterName();
  REQUIRE(OpenStore(StoreOptions(server.connect_string(), cluster))->Create("before").ok());
  ZooKeeperStoreOptions options = StoreOptions((*relay)->connect_string(), cluster, kShortTimeout);
  options.session_timeout = absl::Seconds(1);
  std::unique_ptr<ConfigurationStore> store = OpenStore(options);
  REQUIRE(Eventually([&] { return store->Read(); }).ok());

  (*relay)->Cut(true);
  RequireUnavailable(*store, 0);
  // ZooKeeper, which kept running, ends the session it no longer hears from.
  const absl::Time deadline = absl::Now() + kRecoveryBound;
  while (server.LogTail(100000).find("Expiring session") == std::string::npos &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  REQUIRE_THAT(server.LogTail(100000), Contains("Expiring session"));
  (*relay)->Cut(false);
  // The old session can never come back: working again means the store opened a new one.
  absl::StatusOr<VersionedRecord> read = Eventually([&] { return store->Read(); });
  REQUIRE(read->data == "before");
  REQUIRE(store->CompareAndSet(read->version, "after").ok());
}

TEST_CASE("zookeeper server: a server that cannot start says why") {
  ZooKeeperServerOptions options;
  options.start_timeout = absl::Seconds(60);

  SECTION("no Java") {
    options.java = "/nonexistent/java";
    absl::Status s = ZooKeeperServer::Start(options).status();
    REQUIRE(absl::IsFailedPrecondition(s));
    REQUIRE_THAT(std::string(s.message()), Contains("/nonexistent/java"));
  }

  SECTION("a class path without ZooKeeper's server: it exits, and its log says why") {
    options.classpath = "/usr/share/java/zookeeper-jute.jar";
    absl::Status s = ZooKeeperServer::Start(options).status();
    REQUIRE(absl::IsUnavailable(s));
    REQUIRE_THAT(std::string(s.message()), Contains("exited"));
    REQUIRE_THAT(std::string(s.message()), Contains("ZooKeeperServerMain"));
  }
}

}  // namespace
}  // namespace farm
