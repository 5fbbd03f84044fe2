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
  absl::flat_hash_map<uint32_t, int> serves;
  for (uint32_t n : nodes) serves[n] = 0;
  for (const ServedRegion& r : regions) {
    if (auto it = serves.find(r.primary); it != serves.end()) ++it->second;
  }
  HandOffChoice out;
  std::pair<bool, int> best{false, 1};  // holds data, gap
  for (const ServedRegion& r : regions) {
    auto from = serves.find(r.primary);
    if (from == serves.end()) continue;
    for (uint32_t t : r.takers) {
      auto to = serves.find(t);
      if (to == serves.end() || t == r.primary) continue;
      const std::pair<bool, int> here{r.holds_data, from->second - to->second};
      if (here.second < 2) continue;
      if (here > best || (here == best && out.region_id != 0 && r.region_id < out.region_id)) {
        best = here;
        out = HandOffChoice{r.region_id, t};
      }
    }
  }
  return out;
}

}  // namespace farm
