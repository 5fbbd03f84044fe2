#include "txn/recovery.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "platform/mutant.h"

namespace farm {
namespace txn {

RecoveryOutcome RecoveryDecision(const std::vector<std::pair<uint32_t, TxnVote>>& votes,
                                 const RecoveryView& view) {
  // 1. A recorded decision stands (every member recorded it before any applied it).
  for (const auto& [member, v] : votes) {
    if (v.decided != Decided::kNone) {
      return {v.decided == Decided::kCommit, absl::StrCat("decision recorded at node ", member)};
    }
  }
  // 2. Applied at an owner.
  for (const auto& [member, v] : votes) {
    if (v.owner == SettleState::kCommitted) {
      return {true, absl::StrCat("committed at owner ", member)};
    }
    if (v.owner == SettleState::kAborted) {
      return {false, absl::StrCat("aborted at owner ", member)};
    }
  }
  // 3. Never decided commit (no record).
  std::vector<WrittenRegion> written;
  bool locked_anywhere = false;
  absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint32_t>> locked_at, recorded_at;
  for (const auto& [member, v] : votes) {
    if (written.empty() && !v.written.empty()) written = v.written;
    for (uint32_t r : v.locked) locked_at[r].insert(member);
    for (uint32_t r : v.recorded) recorded_at[r].insert(member);
    locked_anywhere = locked_anywhere || !v.locked.empty();
  }
  if (written.empty()) return {false, "no COMMIT-BACKUP record"};
  // Mutant: no vote; a transaction commits only if a surviving owner committed it (the rule
  // before FaRM's vote: what a failed owner showed its readers is lost).
  if (FARM_MUTANT("no_recovery_vote")) return {false, "no owner committed it"};
  auto holds = [&](const absl::flat_hash_map<uint32_t, absl::flat_hash_set<uint32_t>>& at,
                   uint32_t region, uint32_t node) {
    auto it = at.find(region);
    return it != at.end() && it->second.contains(node);
  };
  if (locked_anywhere) {
    // 4. Some owner holds it locked: every region must be held by its current primary, and
    // every backup the records went to that is still a member must keep its record.
    for (const WrittenRegion& w : written) {
      auto p = view.primary.find(w.region);
      if (p == view.primary.end()) {
        return {false, absl::StrCat("region ", w.region, " is lost")};
      }
      const uint32_t primary = p->second;
      if (!holds(locked_at, w.region, primary) && !holds(recorded_at, w.region, primary)) {
        return {false, absl::StrCat("region ", w.region, "'s primary (node ", primary,
                                    ") neither locks it nor keeps its record")};
      }
      for (uint32_t b : w.backups) {
        if (b == primary || !view.members.contains(b)) continue;
        if (!holds(recorded_at, w.region, b)) {
          return {false, absl::StrCat("backup node ", b, " of region ", w.region,
                                      " has no record (COMMIT-BACKUP was partial)")};
        }
      }
    }
    return {true, "every region locked at its primary or recorded at its promoted backup"};
  }
  // 5. Nobody holds it locked, and a record exists: its coordinator decided commit, and no owner
  // aborted it (an ABORT after COMMIT-BACKUP comes only once every record was dropped), so every
  // primary that locked it applied it, or failed. A failed primary's promoted backup keeps the
  // record, or truncated it (applied it), or never got it: then the coordinator failed during
  // COMMIT-BACKUP, before any COMMIT-PRIMARY, and the transaction aborts.
  absl::flat_hash_set<uint32_t> truncated_by;
  for (const auto& [member, v] : votes) {
    if (v.truncated) truncated_by.insert(member);
  }
  for (const WrittenRegion& w : written) {
    auto p = view.primary.find(w.region);
    if (p == view.primary.end()) continue;  // lost: nothing to apply either way
    const uint32_t primary = p->second;
    if (primary == w.primary) continue;  // the owner that locked it applied it
    // A backup added after COMMIT-BACKUP copied the region from its primary, which copies an
    // object only unlocked (txn/resync.h): after that primary applied it.
    if (std::find(w.backups.begin(), w.backups.end(), primary) == w.backups.end()) continue;
    if (holds(recorded_at, w.region, primary) || truncated_by.contains(primary)) continue;
    return {false, absl::StrCat("region ", w.region, "'s promoted backup (node ", primary,
                                ") neither keeps its record nor truncated it (COMMIT-BACKUP "
                                "was partial)")};
  }
  return {true, "nobody locks it and its records remain: its owners applied it"};
}

}  // namespace txn
}  // namespace farm
