// Node runtime in one process: three nodes on shm, each started on its own thread (Start blocks
// until the cluster has formed).
#include "platform/node.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "platform/config.h"
#include "platform/configuration_store.h"
#include "platform/control_channel.h"
#include "platform/self_check.h"
#include "platform/sync_point.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"
#include "platform/zookeeper_server.h"
#include "platform/zookeeper_store.h"

namespace farm {
namespace {

// Three nodes on this host; with f > 0 each is its own failure domain.
config::ClusterConfig ThreeNodes(const std::string& provider = testing::AnyProvider(), int f = 0) {
  std::string text =
      "provider: \"" + provider +
      "\" region_size: 1048576 region_count: 2 lock_memory: false f: " + std::to_string(f);
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  for (int i = 0; i < 3; ++i) {
    text += " node { id: " + std::to_string(i) + " host: \"" + testing::TestHost() +
            "\" control_port: " + std::to_string((*ports)[i]) +
            (f > 0 ? " failure_domain: \"process " + std::to_string(i) + "\"" : "") + " }";
  }
  auto c = ParseClusterConfig(text);
  REQUIRE(c.ok());
  return *c;
}

// With `data_root`, node i keeps its regions in the data directory <data_root>/node-<i>.
std::vector<std::unique_ptr<Node>> StartCluster(const config::ClusterConfig& c,
                                                std::vector<AreaRequest> areas = {},
                                                const std::string& data_root = "") {
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Node>>>> starting;
  for (int i = 0; i < 3; ++i) {
    starting.push_back(std::async(std::launch::async, [&c, i, areas, data_root] {
      NodeOptions o;
      o.areas = areas;
      o.config = c;
      o.node_id = i;
      o.fill_pattern = true;
      if (!data_root.empty()) o.data_dir = absl::StrCat(data_root, "/node-", i);
      return Node::Start(o);
    }));
  }
  std::vector<std::unique_ptr<Node>> nodes;
  for (auto& f : starting) {
    auto n = f.get();
    INFO(n.status().ToString());
    REQUIRE(n.ok());
    nodes.push_back(std::move(*n));
  }
  return nodes;
}

// A ZooKeeper server for the test (Debian's, started as a child process).
std::unique_ptr<ZooKeeperServer> StartZooKeeper() {
  absl::StatusOr<std::unique_ptr<ZooKeeperServer>> zk = ZooKeeperServer::Start();
  INFO(zk.status().ToString());
  REQUIRE(zk.ok());
  return std::move(*zk);
}

// ThreeNodes() recording its configurations in `zk` under `cluster_name`.
config::ClusterConfig ThreeNodesRecordedIn(const ZooKeeperServer& zk,
                                           const std::string& cluster_name) {
  config::ClusterConfig c = ThreeNodes();
  c.set_zookeeper(zk.connect_string());
  c.set_cluster_name(cluster_name);
  return c;
}

// A region id that the membership does not list: one past the largest id the configuration
// manager handed out (tests must not assume which ids it picks).
uint32_t UnusedRegionId(const control::Membership& m) {
  uint32_t max_id = 0;
  for (const control::RegionInfo& r : m.regions()) max_id = std::max(max_id, r.region_id());
  return max_id + 1;
}

}  // namespace

TEST_CASE("a locked-memory limit too low for the backup copies is said at start", "[node]") {
  config::ClusterConfig c;
  c.set_region_size(4 << 20);
  c.set_region_count(2);
  c.set_lock_memory(true);
  c.set_f(1);
  config::NodeConfig* member = c.add_node();
  member->set_id(1);
  config::NodeConfig* late = c.add_node();
  late->set_id(2);
  late->set_late(true);
  // 8 MiB of its own regions and about 8 MiB of copies.
  const std::string warning = MemlockWarningForBackups(c, member, 12 << 20);
  CHECK_THAT(warning, Catch::Contains("node 1: with f = 1"));
  CHECK_THAT(warning, Catch::Contains("8192 KiB of other nodes' regions as backup copies"));
  CHECK_THAT(warning, Catch::Contains("ulimit -l"));
  CHECK(MemlockWarningForBackups(c, member, 16 << 20).empty());  // enough for both
  CHECK(MemlockWarningForBackups(c, late, 1 << 20).empty());     // a late node holds no copies
  c.set_f(0);
  CHECK(MemlockWarningForBackups(c, member, 1 << 20).empty());  // no copies
  c.set_f(1);
  c.set_lock_memory(false);
  CHECK(MemlockWarningForBackups(c, member, 1 << 20).empty());  // nothing locked
}

TEST_CASE("three nodes form a cluster and access each other's regions", "[node]") {
  auto nodes = StartCluster(ThreeNodes());
  for (auto& n : nodes) {
    CHECK(n->members() == std::vector<uint32_t>{0, 1, 2});
    CHECK(n->membership().regions_size() == 6);
  }
  Node& a = *nodes[0];
  const control::RegionInfo r = a.RegionsOf(2)[1];
  const GlobalAddress end{r.region_id(), r.size() - 8};
  const uint32_t no_such_region = UnusedRegionId(a.membership());

  SECTION("WRITE then READ at the last byte of a remote region") {
    const char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    REQUIRE(a.Write(end, data, 8).ok());
    char back[8] = {};
    REQUIRE(nodes[1]->Read(end, back, 8).ok());
    CHECK(std::memcmp(back, data, 8) == 0);
    CHECK(std::memcmp(nodes[2]->local_region_data(1) + r.size() - 8, data, 8) == 0);
  }
  SECTION("accesses outside every region are refused before posting") {
    char buf[16];
    CHECK(absl::IsOutOfRange(a.Read(end, buf, 16)));  // crosses the end
    CHECK(absl::IsOutOfRange(a.Write(GlobalAddress{no_such_region, 0}, buf, 8)));
    CHECK(absl::IsOutOfRange(a.Read(GlobalAddress{r.region_id(), r.size()}, buf, 1)));
    CHECK(absl::IsInvalidArgument(a.Read(end, buf, 0)));
    CHECK(absl::IsOutOfRange(a.Read(GlobalAddress{r.region_id(), 0}, buf, r.size() + 1)));
  }
  SECTION("a batch of reads across every peer") {
    std::vector<char> buf(4096);
    auto mr = a.RegisterBuffer(buf.data(), buf.size());
    REQUIRE(mr.ok());
    Node::Batch batch(&a);
    int k = 0;
    for (uint32_t peer : {1u, 2u}) {
      for (const control::RegionInfo& ri : a.RegionsOf(peer)) {
        REQUIRE(batch
                    .Read(GlobalAddress{ri.region_id(), 64},
                          LocalBuffer{mr->get(), buf.data() + k * 64, 64})
                    .ok());
        ++k;
      }
    }
    REQUIRE(batch.Wait().ok());
    k = 0;
    for (uint32_t peer : {1u, 2u}) {
      for (const control::RegionInfo& ri : a.RegionsOf(peer)) {
        for (int i = 0; i < 64; ++i) {
          REQUIRE(buf[k * 64 + i] == SelfCheckPattern(peer, ri.index(), 64 + i));
        }
        ++k;
      }
    }
  }
  SECTION("a batch reports an address outside every region") {
    char local[8];
    auto mr = a.RegisterBuffer(local, sizeof(local));
    REQUIRE(mr.ok());
    Node::Batch batch(&a);
    CHECK(absl::IsOutOfRange(
        batch.Read(GlobalAddress{no_such_region, 0}, LocalBuffer{mr->get(), local, 8})));
    CHECK(absl::IsOutOfRange(batch.Wait()));
  }
  SECTION("two threads access remote regions through their own channels") {
    // Each thread WRITEs its own pattern into a slice of node 2's region through its channel,
    // READs it back, and checks both its copy and node 2's memory; the channel's batches are
    // bounds-checked like Node::Batch.
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        auto channel = a.OpenChannel();
        if (!channel.ok()) {
          errors[t] = channel.status().ToString();
          return;
        }
        Node::Channel& ch = **channel;
        std::vector<char> buf(2 * 4096);
        auto mr = ch.RegisterBuffer(buf.data(), buf.size());
        if (!mr.ok()) {
          errors[t] = mr.status().ToString();
          return;
        }
        const GlobalAddress at{r.region_id(), static_cast<uint64_t>(t) * 4096};
        for (int round = 0; round < 20 && errors[t].empty(); ++round) {
          for (int i = 0; i < 4096; ++i) buf[i] = static_cast<char>(t * 31 + round * 5 + i);
          std::memset(buf.data() + 4096, 0, 4096);
          absl::Status s = ch.Write(at, LocalBuffer{mr->get(), buf.data(), 4096});
          if (s.ok()) s = ch.Wait();
          if (s.ok()) s = ch.Read(at, LocalBuffer{mr->get(), buf.data() + 4096, 4096});
          if (s.ok()) s = ch.Wait();
          if (!s.ok()) {
            errors[t] = s.ToString();
          } else if (std::memcmp(buf.data(), buf.data() + 4096, 4096) != 0 ||
                     std::memcmp(nodes[2]->local_region_data(1) + t * 4096, buf.data(), 4096) !=
                         0) {
            errors[t] = absl::StrCat("round ", round, ": bytes differ");
          }
        }
        // Refused before posting, like Node::Batch, and reported again by Wait.
        if (errors[t].empty() &&
            (!absl::IsOutOfRange(ch.Read(end, LocalBuffer{mr->get(), buf.data(), 16})) ||
             !absl::IsOutOfRange(ch.Wait()) || !ch.Wait().ok())) {
          errors[t] = "an access across the region's end was not refused with OutOfRange once";
        }
        if (errors[t].empty() &&
            !absl::IsOutOfRange(
                ch.Write(GlobalAddress{999, 0}, LocalBuffer{mr->get(), buf.data(), 8}))) {
          errors[t] = "an access to an unknown region was not refused with OutOfRange";
        }
        ch.Wait().IgnoreError();
        // A second batch on the same channel.
        Node::Batch extra(&ch);
        if (errors[t].empty() &&
            (!extra.Read(at, LocalBuffer{mr->get(), buf.data() + 4096, 8}).ok() ||
             !extra.Wait().ok() || std::memcmp(buf.data() + 4096, buf.data(), 8) != 0)) {
          errors[t] = "a second batch on the channel failed";
        }
      });
    }
    for (std::thread& th : threads) th.join();
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
  }
  SECTION("the self-check passes between every pair, one checker at a time") {
    for (auto& n : nodes) {
      for (const PairCheck& c : RunSelfCheck(*n, 5)) {
        INFO(c.ToJson());
        CHECK(c.ok());
        CHECK(c.bytes_verified == 3072);
      }
    }
  }
}

TEST_CASE("a node that leaves is dropped from the others' membership", "[node]") {
  auto nodes = StartCluster(ThreeNodes());
  const uint64_t epoch = nodes[0]->membership().epoch();
  const std::vector<control::RegionInfo> leaving = nodes[0]->RegionsOf(2);
  REQUIRE(leaving.size() == 2);
  char buf[8];
  REQUIRE(nodes[0]->Read(GlobalAddress{leaving[0].region_id(), 0}, buf, 8).ok());
  nodes[2].reset();
  for (int i = 0; i < 200 && nodes[0]->members().size() != 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(nodes[0]->members() == std::vector<uint32_t>{0, 1});
  CHECK(nodes[0]->membership().epoch() > epoch);
  CHECK(nodes[0]->RegionsOf(2).empty());
  for (const control::RegionInfo& r : leaving) {
    CHECK(absl::IsOutOfRange(nodes[0]->Read(GlobalAddress{r.region_id(), 0}, buf, 8)));
  }
  CHECK(nodes[0]->evicted().ok());
  CHECK(nodes[1]->evicted().ok());
}

TEST_CASE("with f = 1 every data region has a backup copy on another node", "[node]") {
  auto nodes = StartCluster(ThreeNodes(testing::AnyProvider(), 1), {{"messaging", 65536}});
  const control::Membership m = nodes[0]->membership();
  CHECK(m.f() == 1);
  int data_regions = 0;
  std::map<uint32_t, int> held;  // backups per node
  for (const control::RegionInfo& r : m.regions()) {
    INFO("region " << r.region_id() << " of node " << r.node_id());
    if (!r.purpose().empty()) {
      CHECK(r.backup_node_size() == 0);  // areas are a layer's own, not replicated
      continue;
    }
    ++data_regions;
    REQUIRE(r.backup_node_size() == 1);
    const uint32_t b = r.backup_node(0);
    CHECK(b != r.node_id());
    ++held[b];
    for (auto& n : nodes) {
      CHECK(n->BackupsOf(r.region_id()) == std::vector<uint32_t>{b});
      std::shared_ptr<Region> copy = n->BackupCopy(r.region_id());
      if (n->id() != b) {
        CHECK(copy == nullptr);
        continue;
      }
      REQUIRE(copy != nullptr);
      CHECK(copy->size() == r.size());
      // A new region's copy is zeroed, as the region was before anything was written to it.
      CHECK(std::all_of(copy->data(), copy->data() + copy->size(), [](char c) { return c == 0; }));
    }
  }
  CHECK(data_regions == 6);
  // Six backups over three nodes: two each.
  CHECK(held == std::map<uint32_t, int>{{0, 2}, {1, 2}, {2, 2}});
  for (auto& n : nodes) CHECK(n->BackupRegions().size() == 2);

  SECTION("a node that leaves: its backups serve its regions, which keep their ids") {
    // The CM activates promoted regions only once the test lets it (CmServer::Activate).
    std::atomic<bool> hold{true};
    SyncPoint* sp = SyncPoint::GetInstance();
    sp->SetCallBack("CmServer::Activate", [&](void* arg) {
      if (hold.load()) *static_cast<bool*>(arg) = false;
    });
    sp->EnableProcessing();
    const std::vector<control::RegionInfo> leaving = nodes[0]->RegionsOf(2);
    nodes[2].reset();
    for (int i = 0; i < 200 && (nodes[0]->members().size() != 2 || nodes[1]->members().size() != 2);
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(nodes[0]->members() == std::vector<uint32_t>{0, 1});
    REQUIRE(nodes[1]->members() == std::vector<uint32_t>{0, 1});
    // Promoted but recovering: nobody reads, writes or locks them, not even their new primary,
    // until every member applied the change.
    for (const control::RegionInfo& r : leaving) {
      for (auto& n : {nodes[0].get(), nodes[1].get()}) {
        INFO("region " << r.region_id() << " resolved on node " << n->id());
        CHECK(n->recovering_regions() == 2);
        absl::StatusOr<RemoteTarget> t = n->Resolve(GlobalAddress{r.region_id(), 64}, 8);
        REQUIRE(absl::IsUnavailable(t.status()));
        CHECK_THAT(std::string(t.status().message()), Catch::Contains("is recovering"));
        char byte = 0;
        CHECK(absl::IsUnavailable(n->Read(GlobalAddress{r.region_id(), 64}, &byte, 1)));
      }
    }
    hold = false;
    for (int i = 0;
         i < 500 && (nodes[0]->recovering_regions() != 0 || nodes[1]->recovering_regions() != 0);
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    sp->DisableProcessing();
    sp->ClearAllCallBacks();
    REQUIRE(nodes[0]->recovering_regions() == 0);
    REQUIRE(nodes[1]->recovering_regions() == 0);
    for (const control::RegionInfo& r : leaving) {
      INFO("region " << r.region_id() << " of node 2, backed up by node " << r.backup_node(0));
      REQUIRE(r.backup_node_size() == 1);
      Node& promoted = *nodes[r.backup_node(0)];
      std::shared_ptr<Region> copy = promoted.BackupCopy(r.region_id());
      REQUIRE(copy != nullptr);
      for (auto& n : {nodes[0].get(), nodes[1].get()}) {
        absl::StatusOr<RemoteTarget> t = n->Resolve(GlobalAddress{r.region_id(), 64}, 8);
        REQUIRE(t.ok());
        CHECK(t->node_id == promoted.id());
        if (n == &promoted) CHECK(t->local == copy->data() + 64);
      }
      // Readable by the other node: the copy was registered when it was made.
      Node& other = *nodes[1 - r.backup_node(0)];
      char byte = 1;
      REQUIRE(other.Read(GlobalAddress{r.region_id(), 64}, &byte, 1).ok());
      CHECK(byte == 0);
    }
    std::map<uint32_t, uint32_t> backup_before;  // region -> its backup before node 2 left
    for (const control::RegionInfo& r : m.regions()) {
      if (r.purpose().empty()) backup_before[r.region_id()] = r.backup_node(0);
    }
    int degraded = 0;
    const control::Membership after = nodes[0]->membership();
    for (const control::RegionInfo& r : after.regions()) {
      if (!r.purpose().empty()) continue;
      INFO("region " << r.region_id() << " of node " << r.node_id());
      if (r.promoted()) {
        // Its other copy left with node 2. Once it serves, re-replication gives it a new backup
        // (perhaps in a membership after this one), which copies it: syncing (nodes alone, with
        // no transaction engine, never copy, so it stays syncing here).
        CHECK(r.backup_node_size() <= 1);
        CHECK(r.syncing_backup_size() == r.backup_node_size());
      } else if (backup_before[r.region_id()] == 2) {
        // Degraded: re-replication gave it a new backup on the other node at once (before the
        // promoted regions served again), listed as syncing until it copied the region.
        REQUIRE(r.backup_node_size() == 1);
        CHECK(r.backup_node(0) != r.node_id());
        CHECK(r.backup_node(0) != 2);
        REQUIRE(r.syncing_backup_size() == 1);
        CHECK(r.syncing_backup(0) == r.backup_node(0));
        CHECK(after.fence_epoch() > 0);  // the membership that added it fenced older requests
        ++degraded;
      } else {
        CHECK(r.backup_node_size() == 1);
        CHECK(r.syncing_backup_size() == 0);
      }
    }
    CHECK(degraded == 2);  // node 2 held two backups; neither of them of its own regions
  }
}

// A READ that stays in flight while its target polls nothing needs a provider whose target side
// progresses only when the target polls: tcp;ofi_rxm. (shm copies a READ out of the target's
// memory without it; on verbs the target's kernel or NIC answers.) Empty if it is not under test.
std::string ManualProgressProvider() {
  for (const std::string& p : testing::TestProviders()) {
    if (p == "tcp;ofi_rxm") return p;
  }
  WARN("tcp;ofi_rxm is not among the providers under test: no READ can be held in flight");
  return "";
}

// A 3-node cluster on `provider` whose node 2 serves nothing (its poller stopped) but holds its
// lease, and node 0's batch with a READ of `len` bytes at `offset` of node 2's first region into
// `staging`, in flight.
struct ReadInFlight {
  std::vector<std::unique_ptr<Node>> nodes;
  std::unique_ptr<Node::StagingBuffer> staging;
  std::unique_ptr<Node::Batch> batch;

  ReadInFlight() = default;
  ReadInFlight(ReadInFlight&&) = default;  // the moved-from one waits for nothing
  // The staging memory is unmapped before the nodes close (its registration must go first):
  // let the READ complete before, so that no late completion writes into unmapped memory.
  ~ReadInFlight() {
    if (batch == nullptr) return;
    const OpBatch::InFlight in_flight = batch->in_flight();
    for (int i = 0; i < 1000000 && !in_flight.done(); ++i) {
      nodes[2]->fabric()->Progress();
      nodes[0]->fabric()->Progress();
    }
  }
};

ReadInFlight StartReadInFlight(const std::string& provider, uint64_t offset, size_t len,
                               int f = 0) {
  ReadInFlight r;
  r.nodes = StartCluster(ThreeNodes(provider, f));
  const uint32_t region = r.nodes[0]->RegionsOf(2).at(0).region_id();
  // Connected first: setting up node 0's connection to node 2 needs node 2's progress too.
  char first[8];
  REQUIRE(r.nodes[0]->Read(GlobalAddress{region, 0}, first, sizeof(first)).ok());
  r.nodes[2]->poller()->Stop();
  auto staging = Node::StagingBuffer::Create(r.nodes[0].get(), 4096, false);
  REQUIRE(staging.ok());
  r.staging = std::move(*staging);
  r.batch = std::make_unique<Node::Batch>(r.nodes[0].get());
  const absl::Status posted = r.batch->Read(GlobalAddress{region, offset}, r.staging->At(0, len));
  INFO(posted.ToString());
  REQUIRE(posted.ok());
  const absl::Status s = r.batch->Wait(absl::Milliseconds(300));
  INFO(s.ToString());
  REQUIRE(absl::IsDeadlineExceeded(s));
  REQUIRE(r.batch->outstanding() == 1);
  return r;
}

// The whole contents of file `path`.
std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_CASE("a node with a data directory keeps its regions and copies in files", "[node]") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/node_test-data-", getpid());
  std::filesystem::remove_all(root);
  const config::ClusterConfig c = ThreeNodes(testing::AnyProvider(), 1);
  auto start_on_dir = [&c, &root](int id) {  // node `id` alone, on its directory
    NodeOptions o;
    o.config = c;
    o.node_id = id;
    o.data_dir = absl::StrCat(root, "/node-", id);
    return Node::Start(o);
  };
  {
    auto nodes = StartCluster(c, {}, root);
    for (auto& n : nodes) {
      const std::string dir = absl::StrCat(root, "/node-", n->id());
      INFO("node " << n->id());
      // Its data regions are the files: what the node holds (the self-check pattern) is there.
      for (uint32_t i = 0; i < 2; ++i) {
        const std::string bytes = FileBytes(absl::StrCat(dir, "/slot-", i));
        REQUIRE(bytes.size() == c.region_size());
        for (uint64_t off : {uint64_t{0}, uint64_t{4097}, c.region_size() - 1}) {
          CHECK(bytes[off] == SelfCheckPattern(n->id(), i, off));
        }
      }
      // The manifest says which region each file holds, as of the membership applied last.
      control::DataManifest manifest;
      REQUIRE(manifest.ParseFromString(FileBytes(dir + "/manifest")));
      CHECK(manifest.node_id() == n->id());
      CHECK(manifest.region_size() == c.region_size());
      CHECK(manifest.region_count() == c.region_count());
      CHECK_FALSE(manifest.clean());
      const control::Membership m = n->membership();
      CHECK(manifest.membership().epoch() == m.epoch());
      CHECK(manifest.membership().regions_size() == m.regions_size());
      // A copy of each region it backs up, written where the node's copy is.
      for (uint32_t region : n->BackupRegions()) {
        const std::string file = absl::StrCat(dir, "/copy-", region);
        REQUIRE(std::filesystem::exists(file));
        std::shared_ptr<Region> copy = n->BackupCopy(region);
        REQUIRE(copy != nullptr);
        CHECK(copy->file_backed());
        std::memcpy(copy->data() + 100, "copy", 4);
        CHECK(FileBytes(file).substr(100, 4) == "copy");
      }
      CHECK(n->BackupRegions().size() == 2);
    }
    // A second process (or node) on a directory in use is refused.
    absl::StatusOr<std::unique_ptr<Node>> twin = start_on_dir(1);
    REQUIRE(absl::IsFailedPrecondition(twin.status()));
    CHECK_THAT(std::string(twin.status().message()), Catch::Contains("is in use by process"));

    // Sealed at the cluster's end: the manifest says clean, with the layouts, and stays so while
    // the others leave.
    control::RegionLayout layout;
    layout.set_block_size(65536);
    layout.add_block_class(3);
    REQUIRE(nodes[2]->SealDataDir({{7, layout}}).ok());
    const uint64_t sealed_epoch = nodes[2]->membership().epoch();
    nodes[0].reset();
    nodes[1].reset();
    REQUIRE(nodes[2]->WaitForEviction(absl::Seconds(60)));  // the CM left
    control::DataManifest sealed;
    REQUIRE(sealed.ParseFromString(FileBytes(root + "/node-2/manifest")));
    CHECK(sealed.clean());
    CHECK(sealed.membership().epoch() == sealed_epoch);
    REQUIRE(sealed.layouts().count(7) == 1);
    CHECK(sealed.layouts().at(7).block_class(0) == 3);
  }
  // Node 0 did not leave cleanly: started again on its directory with f = 0 (no backup copy
  // could hold what its regions may miss), it says so rather than starting empty over them.
  // (With f >= 1 it restarts from its backup copies: durability_restart_test.)
  NodeOptions unreplicated;
  unreplicated.config = c;
  unreplicated.config.set_f(0);
  unreplicated.node_id = 0;
  unreplicated.data_dir = root + "/node-0";
  absl::StatusOr<std::unique_ptr<Node>> again = Node::Start(unreplicated);
  REQUIRE(absl::IsFailedPrecondition(again.status()));
  CHECK_THAT(std::string(again.status().message()),
             Catch::Contains("a crash of the cluster is survived with f >= 1"));
  NodeOptions anonymous;
  anonymous.config = c;
  anonymous.data_dir = root + "/node-0";
  CHECK(absl::IsInvalidArgument(Node::Start(anonymous).status()));  // a directory is one node's
  std::filesystem::remove_all(root);
}

TEST_CASE("a READ in flight to a node that is evicted ends when the membership without it arrives",
          "[node]") {
  const std::string provider = ManualProgressProvider();
  if (provider.empty()) return;
  ReadInFlight r = StartReadInFlight(provider, 0, 8);
  auto& nodes = r.nodes;
  // Node 2 is evicted while its process lives on (its connections stay open): only the
  // membership can end the READ.
  nodes[1]->ReportSuspect(2, "a test reports it");
  // Far longer than the eviction takes: before the fix the READ ended here, at the timeout.
  const absl::Status s = r.batch->Wait(absl::Seconds(20));
  INFO(s.ToString());
  CHECK(absl::IsUnavailable(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("node 2 left the cluster"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("a test reports it"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("abandoned"));
  CHECK(nodes[0]->members() == std::vector<uint32_t>{0, 1});
}

TEST_CASE("a READ from a region whose primary moved does not count, even if it completes",
          "[node]") {
  const std::string provider = ManualProgressProvider();
  if (provider.empty()) return;
  ReadInFlight r = StartReadInFlight(provider, 0, 8, /*f=*/1);
  auto& nodes = r.nodes;
  const uint32_t region = r.nodes[0]->RegionsOf(2).at(0).region_id();
  // Node 2 is evicted while its process lives on: its regions move to their backups (same ids)
  // in the membership without it.
  nodes[1]->ReportSuspect(2, "a test reports it");
  for (int i = 0; i < 1000 && nodes[0]->members() != std::vector<uint32_t>{0, 1}; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(nodes[0]->members() == std::vector<uint32_t>{0, 1});
  std::optional<control::RegionInfo> moved;
  const control::Membership after = nodes[0]->membership();
  for (const control::RegionInfo& info : after.regions()) {
    if (info.region_id() == region) moved = info;
  }
  REQUIRE(moved.has_value());
  REQUIRE(moved->node_id() != 2);
  // The old primary, alive, completes the READ only now, after node 0 applied the move: what it
  // read may be older than what the new primary commits once the move is active.
  const OpBatch::InFlight in_flight = r.batch->in_flight();
  for (int i = 0; i < 1000000 && !in_flight.done(); ++i) nodes[2]->fabric()->Progress();
  REQUIRE(in_flight.done());
  const absl::Status s = r.batch->Wait(absl::Seconds(20));
  INFO(s.ToString());
  CHECK(absl::IsUnavailable(s));
  CHECK_THAT(std::string(s.message()),
             Catch::Contains(
                 absl::StrCat("region ", region, " moved from node 2 to node ", moved->node_id())));
}

TEST_CASE(
    "a staging buffer whose READ was abandoned is replaced; the late READ lands in the old "
    "memory, which is freed once it completed",
    "[node]") {
  const std::string provider = ManualProgressProvider();
  if (provider.empty()) return;
  ReadInFlight r = StartReadInFlight(provider, 64, 64);
  auto& nodes = r.nodes;
  Node::StagingBuffer& b = *r.staging;
  char* const old = b.data();
  Node::Batch& batch = *r.batch;
  const OpBatch::InFlight in_flight = batch.in_flight();
  REQUIRE(b.Retire(batch.in_flight()).ok());
  CHECK(b.data() != old);
  CHECK(b.retired() == 1);
  // Node 2's memory served again (by this thread): the late READ completes into the old memory.
  for (int i = 0; i < 1000000 && !in_flight.done(); ++i) {
    nodes[2]->fabric()->Progress();
    nodes[0]->fabric()->Progress();
  }
  REQUIRE(in_flight.done());
  for (uint64_t off = 0; off < 64; ++off) {
    INFO(off);
    REQUIRE(old[off] == SelfCheckPattern(2, 0, 64 + off));
    REQUIRE(b.data()[off] == 0);  // the fresh memory saw nothing
  }
  // Nothing in flight: no replacement; and the old memory, whose READ completed, is freed.
  char* const current = b.data();
  REQUIRE(b.Retire(OpBatch::InFlight()).ok());
  CHECK(b.data() == current);
  CHECK(b.retired() == 0);
}

TEST_CASE("a node that loses the configuration manager is evicted and stops acting as a member",
          "[node]") {
  auto nodes = StartCluster(ThreeNodes());
  std::mutex mu;
  std::vector<control::Membership> seen;
  nodes[1]->AddMembershipListener([&](const control::Membership& m) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(m);
  });
  const uint64_t epoch = nodes[1]->membership().epoch();
  char buf[8];
  const uint32_t own = nodes[1]->RegionsOf(1).at(0).region_id();
  REQUIRE(nodes[1]->Read(GlobalAddress{nodes[1]->RegionsOf(0).at(0).region_id(), 0}, buf, 8).ok());
  nodes[0].reset();  // the configuration manager's node
  REQUIRE(nodes[1]->WaitForEviction(absl::Seconds(30)));
  const std::string why(nodes[1]->evicted().message());
  CHECK_THAT(why, Catch::Contains("node 1 was evicted from the cluster"));
  CHECK_THAT(why, Catch::Contains("configuration manager"));
  // Fail-stop: no peer, no region (its own included), and the listeners were told so.
  CHECK(nodes[1]->members().empty());
  CHECK(absl::IsOutOfRange(nodes[1]->Read(GlobalAddress{own, 0}, buf, 8)));
  std::lock_guard<std::mutex> l(mu);
  REQUIRE(!seen.empty());
  CHECK(seen.back().nodes_size() == 0);
  CHECK(seen.back().epoch() > epoch);
}

}  // namespace farm

namespace farm {

TEST_CASE("areas requested by upper layers are published and addressable", "[node]") {
  auto nodes = StartCluster(ThreeNodes(), {{"rings", 65536}});
  for (auto& n : nodes) {
    CHECK(n->membership().regions_size() == 9);  // 2 data regions + 1 area per node
    CHECK(n->local_area("rings") != nullptr);
    CHECK(n->local_area("other") == nullptr);
  }
  const std::vector<control::RegionInfo> rings = nodes[0]->RegionsOf(1, "rings");
  REQUIRE(rings.size() == 1);
  CHECK(rings[0].size() == 65536);
  CHECK(nodes[0]->RegionsOf(1).size() == 2);  // data regions only
  const char msg[] = "hello, ring";
  REQUIRE(nodes[0]
              ->Write(GlobalAddress{rings[0].region_id(), 65536 - sizeof(msg)}, msg, sizeof(msg))
              .ok());
  CHECK(std::string(nodes[1]->local_area("rings") + 65536 - sizeof(msg)) == msg);
}

}  // namespace farm

namespace farm {

TEST_CASE("a remote Read or Write larger than the staging buffer is refused before copying",
          "[node]") {
  // An area twice a region's size: the range resolves, but the 1 MiB staging buffer through which
  // Read/Write of unregistered memory go cannot hold it.
  const config::ClusterConfig c = ThreeNodes();
  const uint64_t region = c.region_size();
  auto nodes = StartCluster(c, {{"big", 2 * region}});
  const std::vector<control::RegionInfo> big = nodes[0]->RegionsOf(1, "big");
  REQUIRE(big.size() == 1);
  const GlobalAddress at{big[0].region_id(), 0};
  const size_t len = region + 4096;
  REQUIRE(nodes[0]->Resolve(at, len).ok());  // the area itself has room

  // Every node's regions hold their pattern and its area zeroes: the staging buffer's neighbours
  // in the address space are among them, so an overrun of it shows here.
  auto intact = [&] {
    for (int n = 0; n < 3; ++n) {
      for (int r = 0; r < nodes[n]->local_region_count(); ++r) {
        const char* p = nodes[n]->local_region_data(r);
        for (uint64_t off = 0; off < region; ++off) {
          if (p[off] != SelfCheckPattern(n, r, off)) return false;
        }
      }
      const char* a = nodes[n]->local_area("big");
      for (uint64_t off = 0; off < 2 * region; ++off) {
        if (a[off] != 0) return false;
      }
    }
    return true;
  };
  REQUIRE(intact());

  std::vector<char> data(len, 'w');
  absl::Status s = nodes[0]->Write(at, data.data(), len);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("staging"));
  CHECK(intact());
  std::vector<char> back(len, 'r');
  s = nodes[0]->Read(at, back.data(), len);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(back == std::vector<char>(len, 'r'));  // untouched
  // Nothing landed, and a region-sized Write still goes through the staging buffer.
  CHECK(nodes[1]->local_area("big")[region] == 0);
  REQUIRE(nodes[0]->Write(at, data.data(), region).ok());
  CHECK(nodes[1]->local_area("big")[region - 1] == 'w');
  CHECK(nodes[1]->local_area("big")[region] == 0);
}

TEST_CASE("connections to the CM that send nothing do not hold up lease renewals", "[node]") {
  config::ClusterConfig c = ThreeNodes();
  c.set_lease_ms(2000);
  auto nodes = StartCluster(c);
  const config::NodeConfig& cm = c.node(0);
  // Eight silent connections at once, kept open for twice the lease: the CM waits up to 5 s for
  // each one's join request, and none of that may hold up the members' heartbeats. (When the CM
  // waited for each in turn, a quarter lease apiece, they held it for 4 s: every node was
  // evicted, "its lease expired".)
  std::vector<std::unique_ptr<ControlChannel>> silent;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::unique_ptr<ControlChannel>> ch = ControlChannel::Connect(
        cm.host(), static_cast<uint16_t>(cm.control_port()), absl::Seconds(5));
    REQUIRE(ch.ok());
    silent.push_back(std::move(*ch));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * c.lease_ms()));
  for (const auto& n : nodes) {
    INFO(n->evicted().ToString());
    CHECK(n->evicted().ok());
    CHECK(n->members() == std::vector<uint32_t>{0, 1, 2});
  }
}

}  // namespace farm

namespace farm {

// The CM waits for no connection: a join request is answered while connections that came before
// it are still silent. (When the CM waited for each connection's first message in turn, a
// quarter lease apiece, it answered only after dropping every silent one before it.)
TEST_CASE("the CM answers a join request while earlier connections stay silent", "[node]") {
  config::ClusterConfig c = ThreeNodes();
  auto nodes = StartCluster(c);
  const config::NodeConfig& cm = c.node(0);
  auto connect = [&] {
    return ControlChannel::Connect(cm.host(), static_cast<uint16_t>(cm.control_port()),
                                   absl::Seconds(5));
  };
  std::vector<std::unique_ptr<ControlChannel>> silent;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::unique_ptr<ControlChannel>> ch = connect();
    REQUIRE(ch.ok());
    silent.push_back(std::move(*ch));
  }
  absl::StatusOr<std::unique_ptr<ControlChannel>> joiner = connect();
  REQUIRE(joiner.ok());
  control::ControlMessage join;
  join.mutable_join()->set_requested_id(1);  // no configuration fingerprint: refused at once
  REQUIRE((*joiner)->Send(join).ok());
  absl::StatusOr<control::ControlMessage> reply = (*joiner)->Receive(absl::Seconds(30));
  REQUIRE(reply.ok());
  CHECK(reply->has_refusal());
  // Every silent connection is still open (waiting), none was dropped before the answer.
  for (auto& ch : silent) {
    CHECK(absl::IsDeadlineExceeded(ch->Receive(absl::ZeroDuration()).status()));
  }
}

TEST_CASE("with ZooKeeper, the CM records every configuration in it before publishing it",
          "[node][zookeeper]") {
  std::unique_ptr<ZooKeeperServer> zk = StartZooKeeper();
  const config::ClusterConfig c = ThreeNodesRecordedIn(*zk, "node-test");
  auto nodes = StartCluster(c);
  ZooKeeperStoreOptions o;
  o.connect = zk->connect_string();
  o.cluster_name = "node-test";
  absl::StatusOr<std::unique_ptr<ConfigurationStore>> store = NewZooKeeperConfigurationStore(o);
  REQUIRE(store.ok());
  auto stored = [&]() -> control::Membership {
    absl::StatusOr<VersionedRecord> r = (*store)->Read();
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    control::Membership m;
    REQUIRE(m.ParseFromString(r->data));
    return m;
  };
  const control::Membership first = nodes[0]->membership();
  CHECK(stored().epoch() == first.epoch());
  CHECK(stored().nodes_size() == 3);
  CHECK(stored().regions_size() == first.regions_size());

  nodes[2].reset();  // node 2 leaves
  for (int i = 0; i < 1000 && nodes[1]->membership().nodes_size() != 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const control::Membership after = nodes[1]->membership();
  REQUIRE(after.nodes_size() == 2);
  CHECK(stored().epoch() >= after.epoch());
  CHECK(stored().nodes_size() == 2);
}

TEST_CASE(
    "with ZooKeeper, a node takes the CM over when the CM's node goes, and the cluster goes on",
    "[node][zookeeper]") {
  std::unique_ptr<ZooKeeperServer> zk = StartZooKeeper();
  config::ClusterConfig c = ThreeNodesRecordedIn(*zk, "takeover-test");
  c.set_lease_ms(1000);
  auto nodes = StartCluster(c);
  REQUIRE(nodes[1]->membership().cm_node_id() == 0);

  nodes[0].reset();  // the CM's node goes: node 1, first in line, takes the role over
  auto taken_over = [&](int i) {
    for (int k = 0; k < 6000; ++k) {
      const control::Membership m = nodes[i]->membership();
      if (m.cm_node_id() == 1 && m.nodes_size() == 2) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  REQUIRE(taken_over(1));
  REQUIRE(taken_over(2));
  CHECK(nodes[1]->evicted().ok());
  CHECK(nodes[2]->evicted().ok());
  // The two go on: node 1 writes into node 2's region and reads it back through node 2.
  const std::vector<control::RegionInfo> r2 = nodes[1]->RegionsOf(2);
  REQUIRE(!r2.empty());
  const GlobalAddress addr{r2[0].region_id(), 64};
  const char written[] = "after the takeover";
  REQUIRE(nodes[1]->Write(addr, written, sizeof(written)).ok());
  char read[sizeof(written)] = {};
  REQUIRE(nodes[2]->Read(addr, read, sizeof(read)).ok());
  CHECK(std::memcmp(read, written, sizeof(written)) == 0);

  // Node 0 starts again: the record names node 1 as CM, and it joins through node 1.
  NodeOptions o;
  o.config = c;
  o.node_id = 0;
  absl::StatusOr<std::unique_ptr<Node>> again = Node::Start(o);
  INFO(again.status().ToString());
  REQUIRE(again.ok());
  CHECK((*again)->membership().cm_node_id() == 1);
  CHECK((*again)->membership().nodes_size() == 3);
  // Leases held through the new CM, a few leases on.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  CHECK(nodes[1]->lease_held());
  CHECK(nodes[2]->lease_held());
  CHECK((*again)->lease_held());
}

}  // namespace farm
