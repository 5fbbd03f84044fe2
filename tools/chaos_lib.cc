#include "tools/chaos_lib.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "platform/json.h"

namespace farm {
namespace chaos {

using txn::History;
using txn::TxnOp;
using txn::TxnOutcome;
using txn::TxnRecord;

const std::vector<ScenarioInfo>& AllScenarios() {
  static const std::vector<ScenarioInfo>* all = new std::vector<ScenarioInfo>{
      {Scenario::kSigstopShort, "sigstop_short",
       "a data node (not the CM) stopped with SIGSTOP for 2/5 of a lease, then SIGCONT"},
      {Scenario::kSigstopLong, "sigstop_long",
       "a data node (not the CM) stopped for two leases: evicted; it must exit on SIGCONT", false,
       false, 0, true},
      {Scenario::kKill9, "kill9", "a data node (not the CM) killed with SIGKILL, restarted after",
       false, false, 0, true},
      {Scenario::kKillCm, "kill_cm",
       "the configuration manager's node killed with SIGKILL (another node takes the role over "
       "through ZooKeeper), restarted after",
       false, false, 0, true},
      {Scenario::kSigstopCm, "sigstop_cm",
       "the configuration manager's node stopped for two leases: another node takes the role "
       "over; on SIGCONT it must exit without acting; restarted after",
       false, false, 0, true},
      {Scenario::kClientKill, "client_kill",
       "a client-only (late) node killed with SIGKILL mid-transaction, restarted after", true,
       false, 0, true},
      {Scenario::kCrashMidCommitBackup, "crash_mid_commit_backup",
       "a client coordinator dies between two COMMIT-BACKUP sends (sync point)", true, true, 1,
       true},
      {Scenario::kCrashAfterCommitBackup, "crash_after_commit_backup",
       "a client coordinator dies after COMMIT-BACKUP, before COMMIT-PRIMARY (sync point)", true,
       true, 1, true},
      {Scenario::kCrashBetweenPrimaries, "crash_between_primaries",
       "a client coordinator dies between two COMMIT-PRIMARY sends (sync point)", true, true, 0,
       true},
      {Scenario::kOwnerCrashBetweenPrimaries, "owner_crash_between_primaries",
       "a data node (not the CM) dies between two COMMIT-PRIMARY sends of a transaction it "
       "coordinates, its own part maybe applied (sync point; the recovery vote), restarted after",
       false, true, 1, true},
      {Scenario::kCrashMidTruncate, "crash_mid_truncate",
       "a data node (not the CM) dies between two backup truncations it sends on its own, its "
       "committed transactions truncated at some backups only (sync point), restarted after",
       false, true, 1, true},
      {Scenario::kCrashDuringRecovery, "crash_during_recovery",
       "a client coordinator dies between two COMMIT-PRIMARY sends, and a data node (not the CM) "
       "dies applying the recovery's decision on it (sync points), both restarted after",
       true, true, 0, true},
      {Scenario::kPartition, "partition",
       "a data node (not the CM) cut off from the others for two leases (its network namespace's "
       "veth link down): evicted; once the link is back it must exit without acting; restarted "
       "after (root and ip netns; not on shm)",
       false, false, 0, true, true},
      {Scenario::kPartitionCm, "partition_cm",
       "the configuration manager's node cut off from every other node and from ZooKeeper for "
       "two leases: another node takes the role over; the cut-off node must stop acting and exit; "
       "restarted after (root and ip netns; not on shm)",
       false, false, 0, true, true},
      {Scenario::kKillAll, "kill_all",
       "every data node killed with SIGKILL at once, then all started again on their data "
       "directories: the regions recovered from the backups' copies and journals (needs f >= 1)",
       false, false, 1, true},
  };
  return *all;
}

bool HitsCm(Scenario s) {
  return s == Scenario::kKillCm || s == Scenario::kSigstopCm || s == Scenario::kPartitionCm;
}

const ScenarioInfo& Info(Scenario s) {
  for (const ScenarioInfo& i : AllScenarios()) {
    if (i.scenario == s) return i;
  }
  return AllScenarios().front();  // unreachable: every enumerator is listed
}

absl::StatusOr<std::vector<Scenario>> ParseScenarios(absl::string_view list, bool sync_points,
                                                     bool netns, absl::string_view netns_why) {
  std::vector<Scenario> out;
  list = absl::StripAsciiWhitespace(list);
  if (list.empty() || list == "all") {
    for (const ScenarioInfo& i : AllScenarios()) {
      if ((sync_points || !i.sync_point) && (netns || !i.netns)) out.push_back(i.scenario);
    }
    return out;
  }
  std::vector<std::string> known;
  for (const ScenarioInfo& i : AllScenarios()) known.push_back(i.name);
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    name = absl::StripAsciiWhitespace(name);
    const ScenarioInfo* found = nullptr;
    for (const ScenarioInfo& i : AllScenarios()) {
      if (name == i.name) found = &i;
    }
    if (found == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown scenario '", name, "' (known: ", absl::StrJoin(known, ", "), ", all)"));
    }
    if (found->sync_point && !sync_points) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scenario ", found->name,
          " crashes a process at a sync point, and sync points are compiled out of this build "
          "(NDEBUG, e.g. -c opt): build without -c opt to run it"));
    }
    if (found->netns && !netns) {
      return absl::InvalidArgumentError(absl::StrCat("scenario ", found->name,
                                                     " runs every node in a network namespace of "
                                                     "its own, which is not possible here: ",
                                                     netns_why));
    }
    if (std::find(out.begin(), out.end(), found->scenario) == out.end()) {
      out.push_back(found->scenario);
    }
  }
  return out;
}

std::vector<Fault> PlanFaults(Scenario s, int faults, int nodes, int lease_ms, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(s));
  const ScenarioInfo& info = Info(s);
  std::vector<Fault> plan;
  for (int i = 0; i < faults; ++i) {
    Fault f;
    if (info.client) {
      f.victim = static_cast<uint32_t>(nodes);
    } else if (HitsCm(s) || nodes < 2) {
      f.victim = 0;
    } else {
      f.victim = 1 + static_cast<uint32_t>(rng() % static_cast<uint64_t>(nodes - 1));
    }
    if (s == Scenario::kCrashDuringRecovery && nodes >= 2) {
      f.also = 1 + static_cast<uint32_t>(rng() % static_cast<uint64_t>(nodes - 1));
    }
    if (s == Scenario::kSigstopShort) f.pause = absl::Milliseconds(lease_ms * 2 / 5);
    if (s == Scenario::kSigstopLong || s == Scenario::kSigstopCm || s == Scenario::kPartition) {
      f.pause = absl::Milliseconds(2 * lease_ms);
    }
    // Long enough that another node takes the role over and its regions serve again elsewhere
    // while it is still cut off (a takeover waits for two leases, activation for one more).
    if (s == Scenario::kPartitionCm) f.pause = absl::Milliseconds(5 * lease_ms);
    plan.push_back(f);
  }
  return plan;
}

History MergeRecords(std::vector<TxnRecord> records) {
  std::map<std::pair<std::string, int64_t>, size_t> last;
  for (size_t i = 0; i < records.size(); ++i) {
    last[{records[i].client, records[i].start_ns}] = i;
  }
  History out;
  out.reserve(last.size());
  for (const auto& [key, i] : last) out.push_back(std::move(records[i]));
  std::stable_sort(out.begin(), out.end(),
                   [](const TxnRecord& a, const TxnRecord& b) { return a.start_ns < b.start_ns; });
  return out;
}

LossReport CountLostCommits(const History& history,
                            const std::map<uint64_t, std::optional<uint64_t>>& final_tags,
                            bool final_state_known, const std::string& skip_client) {
  LossReport r;
  for (const auto& [key, tag] : final_tags) r.unavailable_keys += !tag.has_value();
  // Per key: value -> the value it overwrote, from every recorded write.
  std::map<uint64_t, std::unordered_map<uint64_t, uint64_t>> prev;
  for (const TxnRecord& t : history) {
    if (t.client == skip_client) continue;
    for (const TxnOp& op : t.ops) {
      if (op.kind == TxnOp::Kind::kWrite && op.prev) prev[op.key][op.value] = *op.prev;
    }
  }
  // Per key: the values on the chain from the final one back to the initial 0.
  std::map<uint64_t, std::set<uint64_t>> chain;
  for (const auto& [key, tag] : final_tags) {
    if (!tag) continue;
    std::set<uint64_t>& c = chain[key];
    const std::unordered_map<uint64_t, uint64_t>& links = prev[key];
    for (uint64_t v = *tag; c.insert(v).second && v != 0;) {
      auto it = links.find(v);
      if (it == links.end()) break;
      v = it->second;
    }
  }
  for (const TxnRecord& t : history) {
    if (t.client == skip_client || t.outcome != TxnOutcome::kCommitted) continue;
    bool writes = false, lost = false, on_unavailable = false;
    for (const TxnOp& op : t.ops) {
      if (op.kind != TxnOp::Kind::kWrite) continue;
      writes = true;
      auto f = final_tags.find(op.key);
      if (!final_state_known || f == final_tags.end() || !f->second) {
        lost = true;
        on_unavailable = on_unavailable || final_state_known;
        continue;
      }
      if (chain[op.key].count(op.value) == 0) lost = true;
    }
    if (writes && lost) {
      ++r.lost_commits;
      r.lost_on_unavailable += on_unavailable;
    }
  }
  return r;
}

double Rate(const std::vector<int64_t>& sorted_ns, int64_t from_ns, int64_t to_ns) {
  if (to_ns <= from_ns) return 0;
  const auto lo = std::lower_bound(sorted_ns.begin(), sorted_ns.end(), from_ns);
  const auto hi = std::lower_bound(sorted_ns.begin(), sorted_ns.end(), to_ns);
  return static_cast<double>(hi - lo) * 1e9 / static_cast<double>(to_ns - from_ns);
}

std::optional<double> RecoveryMs(const std::vector<int64_t>& sorted_ns, int64_t fault_ns,
                                 int64_t until_ns, double before, int64_t window_ns,
                                 int64_t step_ns, double fraction) {
  if (before <= 0 || window_ns <= 0 || step_ns <= 0) return std::nullopt;
  for (int64_t start = fault_ns; start + window_ns <= until_ns; start += step_ns) {
    if (Rate(sorted_ns, start, start + window_ns) >= fraction * before) {
      return static_cast<double>(start + window_ns - fault_ns) / 1e6;
    }
  }
  return std::nullopt;
}

std::optional<double> Percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(q * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : std::min(v.size() - 1, static_cast<size_t>(rank) - 1);
  return v[i];
}

bool ScenarioResult::ok(bool evictions_allowed) const {
  return faults == faults_planned && lost_commits == 0 && anomalies == 0 && bank_ok() &&
         (evictions_allowed || evictions == 0) && (!kv_checked || kv_linearizable == true);
}

namespace {

std::string OrNull(const std::optional<double>& v) {
  return v ? absl::StrFormat("%.1f", *v) : std::string("null");
}

}  // namespace

std::string ToJsonLine(const ScenarioResult& r, bool ok) {
  std::vector<std::string> notes;
  for (const std::string& n : r.notes) notes.push_back(JsonString(n));
  return absl::StrCat(
      "{\"scenario\":", JsonString(r.scenario), ",\"provider\":", JsonString(r.provider),
      ",\"f\":", r.f, ",\"lease_ms\":", r.lease_ms, ",\"faults\":", r.faults,
      ",\"committed\":", r.committed, ",\"lost_commits\":", r.lost_commits,
      ",\"anomalies\":", r.anomalies, ",\"recovery_ms_p50\":", OrNull(r.recovery_ms_p50),
      ",\"recovery_ms_p99\":", OrNull(r.recovery_ms_p99),
      absl::StrFormat(",\"tput_before\":%.1f,\"tput_after\":%.1f", r.tput_before, r.tput_after),
      ",\"nodes\":", r.nodes, ",\"faults_planned\":", r.faults_planned,
      ",\"recovered\":", r.recovered, ",\"aborted\":", r.aborted, ",\"unknown\":", r.unknown,
      ",\"lost_on_unavailable\":", r.lost_on_unavailable, ",\"accounts\":", r.accounts,
      ",\"unavailable\":", r.unavailable,
      ",\"bank_total\":", r.bank_total ? absl::StrCat(*r.bank_total) : std::string("null"),
      ",\"bank_expected\":", r.bank_expected, ",\"evictions\":", r.evictions,
      ",\"resumed_commits\":", r.resumed_commits, ",\"kv_ops\":", r.kv_ops,
      ",\"kv_unknown\":", r.kv_unknown, ",\"kv_linearizable\":",
      !r.kv_checked || !r.kv_linearizable ? std::string("null")
                                          : std::string(*r.kv_linearizable ? "true" : "false"),
      ",\"first_anomaly\":", JsonString(r.first_anomaly), ",\"notes\":[", absl::StrJoin(notes, ","),
      "],\"seed\":", r.seed, ",\"round\":", r.round, ",\"ok\":", ok ? "true" : "false", "}");
}

}  // namespace chaos
}  // namespace farm
