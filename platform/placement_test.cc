#include "platform/placement.h"

#include <catch2/catch.hpp>
#include <map>
#include <set>

namespace farm {
namespace {

std::vector<PlacementNode> Nodes(const std::vector<std::string>& domains) {
  std::vector<PlacementNode> out;
  for (size_t i = 0; i < domains.size(); ++i) {
    out.push_back(PlacementNode{static_cast<uint32_t>(i), domains[i]});
  }
  return out;
}

}  // namespace

TEST_CASE("backups go to other failure domains than every copy's, spread evenly", "[placement]") {
  const std::vector<PlacementNode> nodes = Nodes({"a", "b", "c", "d", "e", "f"});
  absl::flat_hash_map<uint32_t, uint64_t> load;
  const uint32_t f = 2;
  // 4 regions per node, placed in turns (the CM's order: each node's first region, then each
  // node's second, ...).
  uint32_t region = 1;
  for (int i = 0; i < 4; ++i) {
    for (const PlacementNode& primary : nodes) {
      ++region;
      BackupChoice c = ChooseBackups(region, {primary.id}, {primary.domain}, f, nodes, &load);
      INFO("region " << region);
      CHECK(c.shortfall.empty());
      REQUIRE(c.nodes.size() == f);
      std::set<std::string> domains{primary.domain};
      for (uint32_t b : c.nodes) domains.insert(nodes[b].domain);
      CHECK(domains.size() == f + 1);
    }
  }
  // 24 regions x 2 backups over 6 nodes: 8 each, give or take one.
  for (const PlacementNode& n : nodes) {
    CHECK(load[n.id] >= 7);
    CHECK(load[n.id] <= 9);
  }
}

TEST_CASE("nodes sharing a domain never hold two copies of a region", "[placement]") {
  // Nodes 0 and 1 share host h1; node 2 is alone on h2.
  const std::vector<PlacementNode> nodes = Nodes({"h1", "h1", "h2"});
  absl::flat_hash_map<uint32_t, uint64_t> load;
  for (uint32_t region = 1; region <= 6; ++region) {
    const uint32_t primary = region % 3;
    BackupChoice c = ChooseBackups(region, {primary}, {nodes[primary].domain}, 1, nodes, &load);
    REQUIRE(c.nodes.size() == 1);
    CHECK(nodes[c.nodes[0]].domain != nodes[primary].domain);
  }
  // h1's four regions are backed up on node 2; node 2's two on h1's nodes, one each.
  CHECK(load[2] == 4);
  CHECK(load[0] == 1);
  CHECK(load[1] == 1);
}

TEST_CASE("a region keeps its copies and gets only the backups it lacks", "[placement]") {
  const std::vector<PlacementNode> nodes = Nodes({"a", "b", "c", "d"});
  absl::flat_hash_map<uint32_t, uint64_t> load;
  // Primary on 0, one backup left on 2: one more, on 1 or 3.
  BackupChoice c = ChooseBackups(7, {0, 2}, {"a", "c"}, 1, nodes, &load);
  REQUIRE(c.nodes.size() == 1);
  CHECK((c.nodes[0] == 1 || c.nodes[0] == 3));
}

TEST_CASE("too few failure domains: as many backups as fit, and why no more", "[placement]") {
  const std::vector<PlacementNode> nodes = Nodes({"a", "b", "b"});
  absl::flat_hash_map<uint32_t, uint64_t> load;
  BackupChoice c = ChooseBackups(3, {0}, {"a"}, 2, nodes, &load);
  REQUIRE(c.nodes.size() == 1);
  CHECK(nodes[c.nodes[0]].domain == "b");
  INFO(c.shortfall);
  CHECK(c.shortfall.find("found 1 of 2 backup(s)") == 0);
  CHECK(c.shortfall.find("(a, b) all hold a copy of it already (a, b)") != std::string::npos);
  // A primary on a node that may not hold backups (a late node) in its own domain.
  BackupChoice late = ChooseBackups(4, {9}, {"z"}, 1, nodes, &load);
  CHECK(late.nodes.size() == 1);
  CHECK(late.shortfall.empty());
}
TEST_CASE("balancing hands a region to a backup two regions behind, data first", "[placement]") {
  // Equal counts (every node brings the same regions): nothing moves, wherever the data is.
  CHECK(ChooseHandOff({0, 1, 2}, {{1, 0, true, {1}}, {2, 1, false, {2}}, {3, 2, false, {0}}})
            .region_id == 0);
  // One apart: still balanced.
  CHECK(
      ChooseHandOff({0, 1}, {{1, 0, true, {1}}, {2, 0, true, {1}}, {3, 1, false, {0}}}).region_id ==
      0);
  // Node 0 serves 3, node 2 none: a region that holds data goes to node 2, its taker.
  const std::vector<ServedRegion> drifted = {
      {1, 0, false, {2}}, {2, 0, true, {2}}, {3, 0, true, {1}}, {4, 1, true, {0}}};
  HandOffChoice c = ChooseHandOff({0, 1, 2}, drifted);
  CHECK(c.region_id == 2);
  CHECK(c.to == 2);
  // No complete copy on a node behind: nothing (node 1 is one behind only).
  CHECK(ChooseHandOff({0, 1, 2}, {{1, 0, true, {1}},
                                  {2, 0, true, {1}},
                                  {3, 0, true, {1}},
                                  {4, 1, true, {0}},
                                  {5, 1, true, {0}}})
            .region_id == 0);
  // Late nodes (not in `nodes`) neither give nor take.
  CHECK(ChooseHandOff({0, 1}, {{1, 0, true, {1}},
                               {2, 0, true, {1}},
                               {3, 7, true, {1}},
                               {4, 7, true, {1}},
                               {5, 1, true, {7}}})
            .region_id == 0);
  // The larger gap wins among regions that hold data; an empty region only when nothing else.
  c = ChooseHandOff({0, 1, 2}, {{1, 0, true, {1}},
                                {2, 0, true, {2}},
                                {3, 0, false, {2}},
                                {4, 0, false, {1}},
                                {5, 1, true, {0}}});
  CHECK(c.region_id == 2);
  CHECK(c.to == 2);
  c = ChooseHandOff({0, 1}, {{1, 0, false, {1}}, {2, 0, false, {1}}, {3, 0, false, {1}}});
  CHECK(c.region_id == 1);
  CHECK(c.to == 1);
}

TEST_CASE("balancing never moves data to a node that serves as much of it", "[placement]") {
  // Node 0 serves 3 regions (one with data), node 1 one (with data): the data region stays, an
  // empty one goes.
  HandOffChoice c = ChooseHandOff(
      {0, 1}, {{1, 0, true, {1}}, {2, 0, false, {1}}, {3, 0, false, {1}}, {4, 1, true, {0}}});
  CHECK(c.region_id == 2);
  CHECK(c.to == 1);
  // Only the data region could go: nothing moves.
  CHECK(ChooseHandOff({0, 1},
                      {{1, 0, true, {1}}, {2, 0, false, {}}, {3, 0, false, {}}, {4, 1, true, {0}}})
            .region_id == 0);
  // A node that restarted brings empty regions and takes its old ones' data nowhere: node 1
  // serves 4 regions (2 with data), node 0 one (with data). An empty one moves to node 0, not the
  // data (which would leave node 0 with 2 data regions and node 1 with 1).
  c = ChooseHandOff({0, 1}, {{1, 0, true, {1}},
                             {2, 1, true, {0}},
                             {3, 1, true, {0}},
                             {4, 1, false, {0}},
                             {5, 1, false, {0}}});
  CHECK(c.region_id == 4);
  CHECK(c.to == 0);
  // With no empty region that can move, data goes to a node one data region behind.
  c = ChooseHandOff({0, 1}, {{1, 0, true, {1}},
                             {2, 1, true, {0}},
                             {3, 1, true, {0}},
                             {4, 1, false, {}},
                             {5, 1, false, {}}});
  CHECK(c.region_id == 2);
  CHECK(c.to == 0);
  // Data two regions behind comes before an empty region, whatever the gap in regions.
  c = ChooseHandOff({0, 1, 2}, {{1, 0, true, {2}},
                                {2, 0, true, {2}},
                                {3, 0, false, {1}},
                                {4, 0, false, {1}},
                                {5, 0, false, {1}},
                                {6, 2, false, {0}},
                                {7, 2, false, {0}}});
  CHECK(c.region_id == 1);
  CHECK(c.to == 2);
}

}  // namespace farm
