// The parts of //tools:chaos (the fault-injection driver, issue 16 item 6) that are logic rather
// than process handling: the scenarios and their fault schedule, the measurements taken from a
// recorded history (throughput before and after a fault, the time to recover, committed
// transactions whose effects are missing from the final state), and the one JSON line per
// scenario. tools/chaos.cc runs the clusters; tools/chaos_lib_test.cc tests this file.
//
//   ASSIGN_OR_RETURN(std::vector<Scenario> s, ParseScenarios("sigstop_short,kill9", true));
//   std::vector<Fault> plan = PlanFaults(s[0], /*faults=*/4, /*nodes=*/3, /*lease_ms=*/1000, seed);
//   ...run the cluster, inject plan[i] at fault_ns[i], record the history...
//   txn::History h = MergeRecords(records);                 // an intent, then its outcome
//   LossReport lost = CountLostCommits(h, final_tags, /*final_state_known=*/true);
//   std::optional<double> ms = RecoveryMs(commit_ns, fault_ns[i], until_ns, before, window, step);
//   std::puts(ToJsonLine(result).c_str());
//
// Thread safety: the functions keep no state; concurrent calls are safe.
#ifndef FARM_TOOLS_CHAOS_LIB_H_
#define FARM_TOOLS_CHAOS_LIB_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "txn/history.h"

namespace farm {
namespace chaos {

enum class Scenario {
  kSigstopShort,                // a data node (not the CM) stopped for less than a lease, resumed
  kSigstopLong,                 // the same for longer than a lease: evicted, exits on resume
  kKill9,                       // a data node (not the CM) killed with SIGKILL, restarted after
  kKillCm,                      // the configuration manager's node killed with SIGKILL, restarted
  kClientKill,                  // a client-only (late) node killed mid-transaction, restarted after
  kCrashMidCommitBackup,        // a client coordinator dies between two COMMIT-BACKUP sends
  kCrashAfterCommitBackup,      // ... after every backup acknowledged, before COMMIT-PRIMARY
  kCrashBetweenPrimaries,       // ... after its first COMMIT-PRIMARY send, before the second
  kSigstopCm,                   // the configuration manager's node stopped for longer than a lease
  kOwnerCrashBetweenPrimaries,  // a data node (not the CM) coordinating a transaction dies
                                // after its first COMMIT-PRIMARY send, restarted after
  kCrashMidTruncate,            // a data node (not the CM) dies between two backup truncations
  kCrashDuringRecovery,         // a data node (not the CM) dies applying the recovery's
                                // decisions on a client coordinator crashed between primaries
  kPartition,                   // a data node (not the CM) cut off from the others (its
                                // network namespace's link down) for two leases, then healed
  kPartitionCm,                 // the same for the configuration manager's node (cut off from
                                // ZooKeeper too): another node takes the role over
  kKillAll,                     // every data node killed with SIGKILL at once, all started again
                                // on their data directories (durability after a crash)
};

// Whether the scenario's cluster needs a ZooKeeper: its fault hits the configuration manager,
// whose role another node takes over through the configuration recorded there.
bool HitsCm(Scenario s);

struct ScenarioInfo {
  Scenario scenario;
  const char* name;         // as --scenarios spells it
  const char* what;         // for --help and the table
  bool client = false;      // needs a client-only (late) node, which is the victim
  bool sync_point = false;  // the victim dies at a sync point (compiled out with NDEBUG)
  int min_f = 0;            // the sync point is only on the path with backups
  bool restart = false;     // the victim is started again after each fault
  bool netns = false;       // every node runs in a network namespace of its own (root, ip)
};

// Every implemented scenario, in the order they run by default.
const std::vector<ScenarioInfo>& AllScenarios();
const ScenarioInfo& Info(Scenario s);

// A comma-separated list of scenario names ("all", or empty: every scenario available, i.e.
// without the sync-point ones when `sync_points` is false and without the network-namespace ones
// when `netns` is false). InvalidArgument names an unknown entry, lists the known ones, and
// refuses a scenario that needs what is not available (`netns_why` says why namespaces are not).
absl::StatusOr<std::vector<Scenario>> ParseScenarios(absl::string_view list, bool sync_points,
                                                     bool netns = true,
                                                     absl::string_view netns_why = "");

// One injected fault.
struct Fault {
  uint32_t victim = 0;
  absl::Duration pause;  // SIGSTOP scenarios: how long the victim stays stopped
  // crash_during_recovery: the data node (not the CM) that dies applying the recovery's
  // decisions on the victim's transactions (0: none).
  uint32_t also = 0;
};

// The faults of one scenario run: `faults` of them. Data nodes are 0..nodes-1 with the
// configuration manager on 0 (kill_cm's victim: the driver kills whichever node holds the role
// when the fault is due); the client node is `nodes`.
// sigstop_short pauses for 2/5 of a lease (heartbeats go every quarter lease, so the gap stays
// below the lease); sigstop_long and sigstop_cm for two leases, partition cuts for as long, and
// partition_cm for five (the role taken over and the cut-off CM's regions serving elsewhere).
// Victims are drawn from `seed`.
std::vector<Fault> PlanFaults(Scenario s, int faults, int nodes, int lease_ms, uint64_t seed);

// Keeps the last record of each transaction, named by (client, start_ns): a workload writes a
// transaction with outcome unknown before its commit and again with the outcome after it, so a
// process killed in between leaves it unknown. Order: by start_ns.
txn::History MergeRecords(std::vector<txn::TxnRecord> records);

// Transactions acknowledged committed whose effects are not in the final state.
struct LossReport {
  uint64_t lost_commits = 0;         // committed writers with a write missing from the final state
  uint64_t lost_on_unavailable = 0;  // of which wrote an account that could not be read at the end
  uint64_t unavailable_keys = 0;     // keys whose final value could not be read
};

// `final_tags`: each key's value read at the end (nullopt: unreadable). A committed write is in
// the final state when its value is on the chain of `prev` links from the key's final value back
// to 0 (the links come from every recorded write, whatever its outcome). With
// `final_state_known` false (nothing could be read: the cluster is gone) every committed writer
// is lost. Records of client `skip_client` (the final reads themselves) are ignored.
LossReport CountLostCommits(const txn::History& history,
                            const std::map<uint64_t, std::optional<uint64_t>>& final_tags,
                            bool final_state_known, const std::string& skip_client);

// Events per second in [from_ns, to_ns) from sorted times; 0 for an empty interval.
double Rate(const std::vector<int64_t>& sorted_ns, int64_t from_ns, int64_t to_ns);

// Milliseconds from `fault_ns` until throughput is back: the end of the first window of
// `window_ns` (its start stepped by `step_ns` from fault_ns) whose rate is at least `fraction` of
// `before`, taken conservatively as the window's end. nullopt when no window ending by `until_ns`
// gets there (or `before` is 0).
std::optional<double> RecoveryMs(const std::vector<int64_t>& sorted_ns, int64_t fault_ns,
                                 int64_t until_ns, double before, int64_t window_ns,
                                 int64_t step_ns, double fraction = 0.9);

// The q-quantile (0..1, nearest rank) of `v`; nullopt when empty.
std::optional<double> Percentile(std::vector<double> v, double q);

// What one scenario run measured.
struct ScenarioResult {
  std::string scenario, provider;
  int f = 0, lease_ms = 0, nodes = 0;
  int faults = 0;          // injected
  int faults_planned = 0;  // asked for
  uint64_t committed = 0;  // acknowledged committed (the final reads not included)
  uint64_t aborted = 0, unknown = 0;
  uint64_t lost_commits = 0, lost_on_unavailable = 0;
  uint64_t anomalies = 0;  // the strict-serializability checker's
  std::string first_anomaly;
  std::optional<double> recovery_ms_p50, recovery_ms_p99;
  int recovered = 0;  // faults after which throughput came back within the phase
  double tput_before = 0, tput_after = 0;  // committed transactions per second, mean over faults
  uint64_t accounts = 0, unavailable = 0;  // accounts, and those unreadable at the end
  std::optional<int64_t> bank_total;       // sum of the readable balances; nullopt: none read
  int64_t bank_expected = 0;
  int evictions = 0;  // node processes that ended evicted (exit status 3)
  // sigstop_long: transactions of a resumed (evicted) process that returned committed after its
  // SIGCONT. Not a violation by itself (the decision may predate the stop); the checker and the
  // final state judge whether any of them acted on a stale membership.
  uint64_t resumed_commits = 0;
  // The KV workload: operations called, and Porcupine's verdict on their history (nullopt: not
  // checked, or the check did not finish).
  bool kv_checked = false;
  uint64_t kv_ops = 0;
  uint64_t kv_unknown = 0;  // of which the client learnt no outcome (errors, killed processes)
  std::optional<bool> kv_linearizable;
  std::vector<std::string> notes;
  uint64_t seed = 0;  // of the victims and the clients' choices (--seed, plus the round)
  int round = 1;      // 1..--rounds

  bool bank_ok() const { return unavailable == 0 && bank_total && *bank_total == bank_expected; }
  // The scenario's targets: every fault injected, nothing lost, no anomaly, the bank conserved,
  // the KV history linearizable (when there is one), and no eviction where none may happen
  // (`evictions_allowed`).
  bool ok(bool evictions_allowed) const;
};

// One line, no newline: the keys first (scenario, provider, f, lease_ms, faults,
// committed, lost_commits, anomalies, recovery_ms_p50, recovery_ms_p99, tput_before, tput_after;
// a recovery that never happened is null), then the others, then "ok".
std::string ToJsonLine(const ScenarioResult& r, bool ok);

}  // namespace chaos
}  // namespace farm

#endif  // FARM_TOOLS_CHAOS_LIB_H_
