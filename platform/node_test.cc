// Node runtime in one process: three nodes on shm, each started on its own thread (Start blocks
// until the cluster has formed).
#include "platform/node.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <future>
#include <thread>

#include "platform/config.h"
#include "platform/self_check.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace {

config::ClusterConfig ThreeNodes() {
  std::string text = "provider: \"" + testing::AnyProvider() +
                     "\" region_size: 1048576 region_count: 2 lock_memory: false";
  absl::StatusOr<std::vector<uint16_t>> ports = testing::FreePorts(3);
  REQUIRE(ports.ok());
  for (int i = 0; i < 3; ++i) {
    text += " node { id: " + std::to_string(i) + " host: \"" + testing::TestHost() +
            "\" control_port: " + std::to_string((*ports)[i]) + " }";
  }
  auto c = ParseClusterConfig(text);
  REQUIRE(c.ok());
  return *c;
}

std::vector<std::unique_ptr<Node>> StartCluster(const config::ClusterConfig& c,
                                                std::vector<AreaRequest> areas = {}) {
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Node>>>> starting;
  for (int i = 0; i < 3; ++i) {
    starting.push_back(std::async(std::launch::async, [&c, i, areas] {
      NodeOptions o;
      o.areas = areas;
      o.config = c;
      o.node_id = i;
      o.fill_pattern = true;
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

// A region id that the membership does not list: one past the largest id the configuration
// manager handed out (tests must not assume which ids it picks).
uint32_t UnusedRegionId(const control::Membership& m) {
  uint32_t max_id = 0;
  for (const control::RegionInfo& r : m.regions()) max_id = std::max(max_id, r.region_id());
  return max_id + 1;
}

}  // namespace

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
