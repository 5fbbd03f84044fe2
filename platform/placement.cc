#include "platform/placement.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace farm {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

}  // namespace

BackupChoice ChooseBackups(uint32_t region_id, const std::vector<uint32_t>& holders,
                           const std::vector<std::string>& holder_domains, uint32_t wanted,
                           const std::vector<PlacementNode>& candidates,
                           absl::flat_hash_map<uint32_t, uint64_t>* load) {
  BackupChoice out;
  std::set<std::string> used(holder_domains.begin(), holder_domains.end());
  for (uint32_t k = 0; k < wanted; ++k) {
    const PlacementNode* best = nullptr;
    uint64_t best_load = 0, best_tie = 0;
    for (const PlacementNode& n : candidates) {
      if (used.count(n.domain) > 0) continue;
      if (std::find(holders.begin(), holders.end(), n.id) != holders.end()) continue;
      const uint64_t l = (*load)[n.id];
      const uint64_t tie = Mix((uint64_t{region_id} << 32) ^ n.id);
      if (best == nullptr || l < best_load || (l == best_load && tie < best_tie)) {
        best = &n;
        best_load = l;
        best_tie = tie;
      }
    }
    if (best == nullptr) {
      std::set<std::string> all;
      for (const PlacementNode& n : candidates) all.insert(n.domain);
      out.shortfall = absl::StrCat("found ", k, " of ", wanted,
                                   " backup(s): the failure domains of the nodes that may "
                                   "hold copies (",
                                   absl::StrJoin(all, ", "), ") all hold a copy of it already (",
                                   absl::StrJoin(used, ", "), ")");
      break;
    }
    out.nodes.push_back(best->id);
    used.insert(best->domain);
    ++(*load)[best->id];
  }
  return out;
}

HandOffChoice ChooseHandOff(const std::vector<uint32_t>& nodes,
                            const std::vector<ServedRegion>& regions) {
  struct Served {
    int regions = 0;
    int data = 0;  // those that hold data
  };
  absl::flat_hash_map<uint32_t, Served> serves;
  for (uint32_t n : nodes) serves[n] = Served{};
  for (const ServedRegion& r : regions) {
    if (auto it = serves.find(r.primary); it != serves.end()) {
      ++it->second.regions;
      it->second.data += r.holds_data;
    }
  }
  // Tiers, best first: a region that holds data, to a node that serves at least two fewer such
  // regions; then an empty region; then a region that holds data, to a node that serves one
  // fewer (the data stays as uneven, the counts get even).
  auto tier = [](const ServedRegion& r, const Served& from, const Served& to) {
    if (!r.holds_data) return 2;
    const int data_gap = from.data - to.data;
    if (data_gap >= 2) return 3;
    return data_gap == 1 ? 1 : 0;  // 0: never (the taker holds as much data)
  };
  HandOffChoice out;
  std::pair<int, int> best{0, 0};  // tier, gap
  for (const ServedRegion& r : regions) {
    auto from = serves.find(r.primary);
    if (from == serves.end()) continue;
    for (uint32_t t : r.takers) {
      auto to = serves.find(t);
      if (to == serves.end() || t == r.primary) continue;
      const int gap = from->second.regions - to->second.regions;
      if (gap < 2) continue;
      const std::pair<int, int> here{tier(r, from->second, to->second), gap};
      if (here.first == 0) continue;
      if (here > best || (here == best && r.region_id < out.region_id)) {
        best = here;
        out = HandOffChoice{r.region_id, t};
      }
    }
  }
  return out;
}

}  // namespace farm
