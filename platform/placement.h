// Placement of backup copies: which nodes keep a region's f backups (FaRM, SOSP 2015: the
// configuration manager places each region's replicas in distinct failure domains).
//
//   absl::flat_hash_map<uint32_t, uint64_t> load;   // backups each node holds
//   BackupChoice c = ChooseBackups(region_id, {primary}, f, nodes, &load);
//   if (!c.shortfall.empty()) spdlog::warn("region {}: {}", region_id, c.shortfall);
//
// Rules: a backup is never in the failure domain of another copy of the same region (so one
// domain's failure takes at most one copy); among the nodes that qualify, the one holding the
// fewest backups is chosen, ties spread by a hash of the region and node ids (so equal nodes
// share the work instead of the lowest id taking it all). Copies live in memory that each node
// allocates when it is told to hold one, so there is no per-node capacity to fill: load only
// balances.
//
// Thread-compatible: pure functions.
#ifndef FARM_PLATFORM_PLACEMENT_H_
#define FARM_PLATFORM_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace farm {

// A node that may hold copies, and its failure domain (config.h FailureDomainOf).
struct PlacementNode {
  uint32_t id = 0;
  std::string domain;
};

struct BackupChoice {
  std::vector<uint32_t> nodes;  // the new backups, in the order chosen
  // Empty when `wanted` backups were found; otherwise why fewer were (which domains were left).
  std::string shortfall;
};

// Chooses up to `wanted` more backups for region `region_id`, whose copies are held now by
// `holders` (the primary first) in `holder_domains` (the same order), among `candidates` (the
// nodes that may hold backups: members that form the cluster). Adds one to `load` of each
// chosen node.
BackupChoice ChooseBackups(uint32_t region_id, const std::vector<uint32_t>& holders,
                           const std::vector<std::string>& holder_domains, uint32_t wanted,
                           const std::vector<PlacementNode>& candidates,
                           absl::flat_hash_map<uint32_t, uint64_t>* load);

// Primary balancing (the CM's Rebalance, RegionInfo.handing_off): a data region as it sees it.
struct ServedRegion {
  uint32_t region_id = 0;
  uint32_t primary = 0;
  bool holds_data = false;  // RegionInUse: its first block was carved
  // Its backups whose copy is complete and registered (those it may be handed to).
  std::vector<uint32_t> takers;
};

struct HandOffChoice {
  uint32_t region_id = 0;  // 0: none
  uint32_t to = 0;
};

// The region to hand over, if any: counting the regions each of `nodes` (the members that form
// the cluster) is the primary of, one of a node that serves at least two more than one of its
// takers, to that taker. Never a region that holds data to a node that serves as many regions
// holding data (the counts would even out by moving the data away from where it was spread);
// first a region that holds data to a node that serves at least two fewer such regions, then a
// region without data, then one that holds data to a node that serves one fewer; within that,
// the largest gap, then the lowest region id. Regions of other nodes (late ones) and takers
// outside `nodes` are left alone.
HandOffChoice ChooseHandOff(const std::vector<uint32_t>& nodes,
                            const std::vector<ServedRegion>& regions);

}  // namespace farm

#endif  // FARM_PLATFORM_PLACEMENT_H_
