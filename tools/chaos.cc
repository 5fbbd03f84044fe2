// chaos: the fault-injection driver (issue 16 item 6, first version). For each scenario it starts
// a fresh cluster of node processes running a bank workload and a KV workload, injects faults into
// it, and checks what the cluster guarantees: no committed transaction lost, no anomaly in the
// history of every transaction (the strict-serializability checker, txn/history.h), the bank's
// total conserved, the KV operations linearizable (//tools/lincheck, Porcupine); and measures how
// long throughput takes to come back after each fault.
//
//   bazel run //tools:chaos -- --provider='tcp;ofi_rxm' --faults=4 --json
//   bazel run //tools:chaos -- --provider=shm --scenarios=sigstop_short,client_kill --faults=2
//
// Scenarios (tools/chaos_lib.h): sigstop_short, sigstop_long, kill9, kill_cm, sigstop_cm,
// client_kill, partition, and crashes of a client coordinator at the commit path's sync points
// (crash_mid_commit_backup, crash_after_commit_backup, crash_between_primaries; compiled out with
// NDEBUG, i.e. -c opt). kill_cm and sigstop_cm hit whichever node holds the configuration
// manager's role when the fault is due, with a ZooKeeper through which another node takes it
// over (--zookeeper). Data nodes crash at the sync points of the recovery vote and truncation
// (owner_crash_between_primaries, crash_mid_truncate, crash_during_recovery; a victim that
// cannot reach its sync point in the current configuration, e.g. the accounts' primaries not on
// two other nodes, is replaced by another data node that can), and partition cuts
// a data node off: every node then runs in a network namespace of its own (class Netns, as
// tests/netns_test.sh makes them; root), and the victim's veth link goes down for two leases.
//
// How a scenario runs. The driver writes a configuration (--nodes data nodes, node 0 the
// configuration manager, each process its own failure domain, --f backups, --lease_ms; one late
// client-only node for the client scenarios) and re-executes itself as each node (`--role=node`,
// farm::RunNode with the App below). Node 0 allocates --accounts accounts of {balance, tag}
// spread over the data nodes (AllocHint::Anywhere) and serves their addresses; every node then
// runs --threads client threads: transfers of 1..5 between two random accounts, and one time in
// eight a read-only transaction of three. Every write installs a fresh tag, unique in the run,
// so the history names exactly which write each read saw. Each transaction is appended to the
// node's history file (one JSON line, txn/history.h's format; a write, so a killed process loses
// nothing it wrote) with outcome unknown before its commit and again with the outcome after it.
// The driver then keeps time: --warmup_ms, and per fault a phase of --duration_ms before it,
// the fault, and a phase of --duration_ms after it (a killed or evicted victim is started again
// before the next fault's phase). At the end it tells every node to stop its clients, has node 0
// read every account (each read a recorded transaction), and checks the merged history.
// Beside the bank, --kv_threads threads per node run get, put and delete on --kv_keys keys of the
// farm KV store (every data node a shard; values unique in the run), journalled by
// kv::HistoryRecorder (kv/history.h) and checked at the end by //tools/lincheck.
//
// What the line says (the issue's keys first): committed = transactions acknowledged committed;
// lost_commits = those with a write missing from the final state (its value not on the chain of
// versions that leads to the account's final value, or the account unreadable at the end; when
// nothing is readable at the end, all of them); anomalies = the checker's; recovery_ms = from the
// fault to the end of the first --window_ms window whose throughput is >= 90 % of the phase
// before (p50 and p99 over the faults, null when it did not come back within the phase after);
// tput_before / tput_after = committed transactions per second in the phase before the fault and
// in the second half of the phase after it (means over the faults).
//
// Exit status: 0 every scenario met its targets, 1 one did not (lost commits, anomalies, the
// bank's total, a KV history that is not linearizable or could not be checked, a fault not
// injected, an eviction where none may happen), 2 bad flags, 3 a
// scenario could not run (the cluster did not start), 130 stopped by a signal. Every node process
// is stopped on every exit path (and dies with the driver even if it is killed: ChildProcess).
#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "kv/history.h"
#include "platform/config.h"
#include "platform/fabric.h"
#include "platform/logging.h"
#include "platform/sync_point.h"
#include "platform/zookeeper_server.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/chaos_lib.h"
#include "tools/child_process.h"
#include "txn/history.h"
#include "txn/protocol.h"
#include "txn/transaction.h"

// --provider, --poll and --log_level are the node flags of farm::RunNode (api/node_main.cc),
// which this binary links: the driver reads them too.
ABSL_DECLARE_FLAG(std::string, provider);
ABSL_DECLARE_FLAG(std::string, poll);
ABSL_DECLARE_FLAG(std::string, log_level);
// The nodes' --zookeeper (api/node_main.cc). The driver: empty starts a local ZooKeeper (Debian's
// zookeeper) for the scenarios that need one (kill_cm, sigstop_cm); host:port,... uses those
// servers for every scenario; "none": no ZooKeeper (the CM's failure then ends the cluster).
ABSL_DECLARE_FLAG(std::string, zookeeper);
ABSL_FLAG(std::string, scenarios, "all",
          "comma-separated scenarios: sigstop_short, sigstop_long, kill9, kill_cm, sigstop_cm, "
          "client_kill, crash_mid_commit_backup, crash_after_commit_backup, "
          "crash_between_primaries, owner_crash_between_primaries, crash_mid_truncate, "
          "crash_during_recovery, partition, partition_cm, kill_all; all: every one this build, "
          "machine and --f can run (the crash_* ones need sync points: not with -c opt; "
          "partition needs root and `ip netns`; kill_all needs --f >= 1)");
ABSL_FLAG(int, nodes, 3, "data node processes (2..8); node 0 is the configuration manager");
ABSL_FLAG(int, f, 1, "backups per region (0 .. nodes-1); each node process is a failure domain");
ABSL_FLAG(int, lease_ms, 1000,
          "the nodes' lease with the configuration manager (100..60000); long enough that a "
          "loaded machine evicts no healthy node");
ABSL_FLAG(int, faults, 2, "faults injected per scenario (1..1000)");

ABSL_FLAG(uint64_t, seed, 1, "seed of the victims and of the clients' choices");
ABSL_FLAG(int, rounds, 1,
          "times every scenario runs (1..10000), each time on a fresh cluster with the next seed "
          "(--seed, --seed+1, ...): the long run is --rounds=N");
ABSL_FLAG(bool, json, false, "one JSON line per scenario instead of a table");
ABSL_FLAG(int, duration_ms, 3000, "milliseconds of each phase: before each fault, after each");
ABSL_FLAG(int, warmup_ms, 1000, "milliseconds run before the first phase");
ABSL_FLAG(int, window_ms, 500, "throughput window of the recovery time (50 .. --duration_ms)");
ABSL_FLAG(int, accounts, 30, "bank accounts, spread over the data nodes (4..1024)");
ABSL_FLAG(int, threads, 2, "client threads per node (1..8)");
ABSL_FLAG(std::string, host, "127.0.0.1", "address the nodes bind to");
ABSL_FLAG(int, timeout_s, 60, "seconds a step (start, stop, final reads) may take");
ABSL_FLAG(std::string, keep_histories, "",
          "directory to write each scenario's merged history to (SCENARIO.jsonl), for "
          "//tools:check_history, and its node processes' logs (SCENARIO-node-ID-N.log); "
          "empty: none kept");
ABSL_FLAG(std::string, role, "", "internal: 'node' when re-executed as a node process");
ABSL_FLAG(std::string, history_dir, "", "internal (node role): where to append the history");
ABSL_FLAG(int, incarnation, 0, "internal (node role): this process's number in the scenario");
ABSL_FLAG(bool, client, false, "internal (node role): a client-only (late) node, no KV shard");
ABSL_FLAG(bool, allocate, false,
          "internal (node role): allocate the accounts (node 0's first process); otherwise fetch "
          "them from a member");
ABSL_FLAG(int, kv_threads, 1,
          "threads per node running the KV workload (get, put, delete on --kv_keys keys of the "
          "farm KV store), checked by //tools/lincheck (Porcupine); 0: no KV workload");
ABSL_FLAG(int, kv_keys, 48, "keys of the KV workload (1..1000)");
ABSL_FLAG(int, kv_buckets, 4,
          "home buckets of 128 bytes per KV shard (1..4096): a tiny table makes the workload's "
          "keys displace each other and chain overflow blocks");

namespace farm {
namespace chaos {
namespace {

constexpr int kExitMissed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitCannotRun = 3;
constexpr int kExitSignal = 130;
constexpr int kCrashStatus = 17;   // a node that died at its sync point
constexpr int kEvictedStatus = 3;  // farm::RunNode's exit after an eviction
constexpr int64_t kInitialBalance = 1000;
constexpr int kMaxAccounts = 1024;
constexpr int kMaxThreads = 8;
constexpr char kAuditClient[] = "audit";

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process on this machine
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------
// Node side: the bank workload.

struct Account {
  int64_t balance = 0;
  uint64_t tag = 0;  // the write that installed this value (0: the initial one)
};
struct AddressChunk {
  uint32_t total = 0;
  uint64_t packed[kMaxAccounts] = {};
};
constexpr Method<uint32_t, AddressChunk> kAddresses{1};

// The accounts (node 0's first process allocates them, every other process fetches them from a
// member), served to the others (handlers run on the poller; the run thread publishes).
std::mutex g_published_mu;
std::vector<uint64_t> g_published;  // guarded by g_published_mu; empty until allocated

void Emit(const std::string& line) {
  std::printf("CHAOS %s\n", line.c_str());
  std::fflush(stdout);
}

// The node's history: one JSON line per write(2) on an O_APPEND file, so lines of concurrent
// threads never interleave and a killed process leaves every line it wrote.
class HistoryFile {
 public:
  static absl::StatusOr<std::unique_ptr<HistoryFile>> Open(const std::string& path) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
    }
    return std::unique_ptr<HistoryFile>(new HistoryFile(fd));
  }
  ~HistoryFile() { close(fd_); }
  void Append(const txn::TxnRecord& r) {
    const std::string line = txn::TxnRecordToJson(r) + "\n";
    if (write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  explicit HistoryFile(int fd) : fd_(fd) {}
  int fd_;
  std::atomic<bool> failed_{false};
};

struct Workload {
  Runtime* rt = nullptr;
  std::vector<GlobalAddress> accounts;
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<HistoryFile> history;
  // This process's number among the scenario's processes (--incarnation): tags and client
  // names carry it, so that they stay unique when a node id is started again.
  uint64_t incarnation = 0;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> committed{0}, aborted{0}, unknown{0}, failed{0};
  // The KV workload (--kv_threads): its threads' Workers and its journal.
  std::vector<std::unique_ptr<Worker>> kv_workers;
  kv::HistoryRecorder kv_history;
  std::atomic<uint64_t> kv_ops{0}, kv_errors{0};
};

// This node's KV store (App::setup creates it before the node serves).
std::unique_ptr<kv::Store> g_store;

absl::StatusOr<std::vector<uint64_t>> AllocateAccounts(Worker& w, int n) {
  std::vector<uint64_t> packed;
  for (int begin = 0; begin < n; begin += 64) {
    const int end = std::min(n, begin + 64);
    std::vector<uint64_t> batch;
    absl::Status s = w.Run([&](Txn& t) -> absl::Status {
      batch.clear();
      for (int i = begin; i < end; ++i) {
        absl::StatusOr<GlobalAddress> a =
            t.Alloc(sizeof(Account), AllocHint::Anywhere(static_cast<uint64_t>(i)));
        if (!a.ok()) return a.status();
        if (absl::Status p = t.Put(*a, Account{kInitialBalance, 0}); !p.ok()) return p;
        batch.push_back(a->Pack());
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("allocating accounts: ", s.message()));
    packed.insert(packed.end(), batch.begin(), batch.end());
  }
  return packed;
}

// The accounts, from the first member that has them (node 0 first, which allocates them).
absl::StatusOr<std::vector<uint64_t>> FetchAccounts(Runtime& rt, Worker& w, int n,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<AddressChunk> c = absl::UnavailableError("no other member");
    for (uint32_t m : rt.members()) {
      if (m == rt.node_id()) continue;
      c = kAddresses.Call(w, m, 0);
      if (c.ok()) break;
    }
    if (!c.ok() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      continue;
    }
    if (!c.ok()) {
      return absl::Status(c.status().code(), absl::StrCat("fetching the accounts from a member: ",
                                                          c.status().message()));
    }
    if (c->total != static_cast<uint32_t>(n)) {
      return absl::FailedPreconditionError(
          absl::StrCat("node 0 has ", c->total, " accounts, not ", n));
    }
    return std::vector<uint64_t>(c->packed, c->packed + n);
  }
}

// One client thread: transfers and read-only transactions until told to stop.
void RunClient(Workload& w, int thread) {
  Worker& worker = *w.workers[thread];
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 0x9e3779b97f4a7c15ull + w.incarnation * 64 +
                      static_cast<uint64_t>(thread));
  const uint32_t node = w.rt->node_id();
  const std::string client = absl::StrCat(node, ".", thread, "#", w.incarnation);
  uint32_t counter = 0;
  auto next_tag = [&] {
    return (uint64_t{node + 1} << 56) | ((w.incarnation & 0xfffff) << 36) |
           (static_cast<uint64_t>(thread) << 32) | ++counter;
  };
  const uint64_t n = w.accounts.size();
  while (!w.stop.load(std::memory_order_acquire)) {
    const bool read_only = rng() % 8 == 0;
    std::vector<uint64_t> keys;
    while (keys.size() < (read_only ? 3u : 2u)) {
      const uint64_t k = rng() % n;
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    txn::TxnRecord r;
    r.client = client;
    r.start_ns = MonoNs();
    std::unique_ptr<Txn> t = worker.Begin();
    std::vector<Account> seen;
    absl::Status s;
    for (uint64_t k : keys) {
      absl::StatusOr<Account> a = t->Get<Account>(w.accounts[k]);
      if (!a.ok()) {
        s = a.status();
        break;
      }
      seen.push_back(*a);
      r.ops.push_back(txn::TxnOp::Read(k, a->tag));
    }
    const int64_t amount = 1 + static_cast<int64_t>(rng() % 5);
    if (s.ok() && !read_only && seen[0].balance >= amount) {
      const Account from{seen[0].balance - amount, next_tag()};
      const Account to{seen[1].balance + amount, next_tag()};
      s = t->Put(w.accounts[keys[0]], from);
      if (s.ok()) s = t->Put(w.accounts[keys[1]], to);
      r.ops.push_back(txn::TxnOp::Write(keys[0], from.tag, seen[0].tag));
      r.ops.push_back(txn::TxnOp::Write(keys[1], to.tag, seen[1].tag));
    }
    if (!s.ok()) {
      // Nothing was sent for commit: nothing to record (reads of aborted transactions are not
      // checked). An account on a node that left stays Unavailable: do not spin on it.
      t->Abort();
      w.failed.fetch_add(1, std::memory_order_relaxed);
      if (!absl::IsAborted(s)) absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    const bool writes = r.ops.size() > keys.size();
    if (writes) {
      r.outcome = txn::TxnOutcome::kUnknown;  // until the commit returns
      r.end_ns = MonoNs();
      w.history->Append(r);
    }
    s = t->Commit();
    r.end_ns = MonoNs();
    // OK: committed. Aborted: nothing applied (farm.h). Anything else may or may not have
    // committed (e.g. every owner left after the decision): unknown, for the checker to judge.
    r.outcome = s.ok()               ? txn::TxnOutcome::kCommitted
                : absl::IsAborted(s) ? txn::TxnOutcome::kAborted
                                     : txn::TxnOutcome::kUnknown;
    if (writes || s.ok()) w.history->Append(r);
    (s.ok()               ? w.committed
     : absl::IsAborted(s) ? w.aborted
                          : w.unknown)
        .fetch_add(1, std::memory_order_relaxed);
    if (!s.ok() && !absl::IsAborted(s)) absl::SleepFor(absl::Milliseconds(1));
  }
}

// One KV client thread: get (40 %), put (40 %) and delete (20 %) of random keys with values
// unique in the run, each call and return journalled for Porcupine. A key whose operation failed
// (outcome unknown: it may or may not have happened) is left alone for 2 s, so that a node that
// is gone does not fill the history with unknown operations, which the checker must try at every
// later point.
void RunKvClient(Workload& w, int t) {
  kv::Client kv(*g_store, *w.kv_workers[t]);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) * 0x9e3779b97f4a7c15ull + w.incarnation * 64 + 32 +
                      static_cast<uint64_t>(t));
  const uint32_t client = static_cast<uint32_t>(w.incarnation * kMaxThreads + t);
  const int keys = absl::GetFlag(FLAGS_kv_keys);
  std::map<int, absl::Time> resting;  // key -> when it may be used again
  for (uint64_t seq = 0; !w.stop.load(std::memory_order_acquire); ++seq) {
    const int k = static_cast<int>(rng() % static_cast<uint64_t>(keys));
    if (auto it = resting.find(k); it != resting.end()) {
      if (absl::Now() < it->second) {
        absl::SleepFor(absl::Microseconds(200));
        continue;
      }
      resting.erase(it);
    }
    const std::string key = absl::StrCat("k", k);
    const int pick = static_cast<int>(rng() % 10);
    absl::Status st;
    if (pick < 4) {
      kv::HistoryRecorder::Handle h = w.kv_history.Call(client, kv::HistoryOp::Get(key));
      absl::StatusOr<std::string> v = kv.Get(key);
      (void)w.kv_history.ReturnGet(h, v);
      st = v.status();
    } else if (pick < 8) {
      const std::string value = absl::StrCat("v", w.incarnation, "-", t, "-", seq);
      kv::HistoryRecorder::Handle h = w.kv_history.Call(client, kv::HistoryOp::Put(key, value));
      st = kv.Put(key, value);
      (void)w.kv_history.ReturnPut(h, st);
    } else {
      kv::HistoryRecorder::Handle h = w.kv_history.Call(client, kv::HistoryOp::Del(key));
      absl::StatusOr<bool> d = kv.Delete(key);
      (void)w.kv_history.ReturnDel(h, d);
      st = d.status();
    }
    w.kv_ops.fetch_add(1, std::memory_order_relaxed);
    if (!st.ok() && !absl::IsNotFound(st)) {
      w.kv_errors.fetch_add(1, std::memory_order_relaxed);
      resting[k] = absl::Now() + absl::Seconds(2);
    }
  }
}

// Node 0 at the end: reads every account in a transaction of its own (recorded, so the checker
// also sees the final state) and prints "FINAL i balance tag" or "FINAL i unavailable why".
void FinalReads(Workload& w) {
  Worker& worker = *w.workers[0];
  for (size_t i = 0; i < w.accounts.size(); ++i) {
    txn::TxnRecord r;
    r.client = kAuditClient;
    r.start_ns = MonoNs();
    Account a;
    absl::Status s = worker.Run(
        [&](Txn& t) -> absl::Status {
          absl::StatusOr<Account> v = t.Get<Account>(w.accounts[i]);
          if (!v.ok()) return v.status();
          a = *v;
          return absl::OkStatus();
        },
        absl::Seconds(20));
    r.end_ns = MonoNs();
    if (!s.ok()) {
      Emit(absl::StrCat("FINAL ", i, " unavailable ", absl::StatusCodeToString(s.code())));
      continue;
    }
    r.outcome = txn::TxnOutcome::kCommitted;
    r.ops.push_back(txn::TxnOp::Read(i, a.tag));
    w.history->Append(r);
    Emit(absl::StrCat("FINAL ", i, " ", a.balance, " ", a.tag));
  }
}

// Crashes this process at the commit path's sync point `where` (the driver's "arm" command):
// after_commit_backup, or the second COMMIT-BACKUP / COMMIT-PRIMARY send of a transaction
// (mid_commit_backup, between_primaries), the second backup truncation of a flush
// (mid_truncate), or applying a recovery's decisions (recovery_apply). Returns false where sync
// points are compiled out.
#ifndef NDEBUG
thread_local int t_decision_sends = 0;  // of the transaction this thread is committing

[[noreturn]] void DieAt(const std::string& where) {
  Emit(absl::StrCat("CRASH ", where));
  _exit(kCrashStatus);
}
#endif

bool ArmCrash(const std::string& where) {
#ifdef NDEBUG
  (void)where;
  return false;
#else
  SyncPoint* sp = SyncPoint::GetInstance();
  if (where == "after_commit_backup") {
    sp->SetCallBack("Transaction::Commit:AfterCommitBackup", [where](void*) { DieAt(where); });
  } else if (where == "mid_commit_backup" || where == "between_primaries") {
    const uint16_t method =
        where == "mid_commit_backup" ? txn::kCommitBackupMethod : txn::kCommitMethod;
    sp->SetCallBack("Transaction::Commit:AfterValidate", [](void*) { t_decision_sends = 0; });
    sp->SetCallBack("Transaction::Decide:Send", [where, method](void* arg) {
      const auto* probe = static_cast<const txn::DecisionProbe*>(arg);
      if (probe->method == method && ++t_decision_sends == 2) DieAt(where);
    });
  } else if (where == "mid_truncate") {
    sp->SetCallBack("Engine::FlushBackupTruncations:Send", [where](void* arg) {
      if (*static_cast<const int*>(arg) == 1) DieAt(where);
    });
  } else if (where == "recovery_apply") {
    sp->SetCallBack("Engine::Recover:Apply", [where](void*) { DieAt(where); });
  } else {
    return false;
  }
  sp->EnableProcessing();
  return true;
#endif
}

// The replication of the data regions in this node's current membership, for the driver:
// "REPLICATION regions=R min_backups=B syncing=S recovering=V" (B: the fewest complete backup
// copies any region has; S and V: regions with a copy still being made, regions not serving yet).
std::string ReplicationLine(const Runtime& rt) {
  size_t regions = 0, min_backups = SIZE_MAX, syncing = 0, recovering = 0;
  for (uint32_t m : rt.members()) {
    for (const RegionRef& r : rt.Regions(m)) {
      ++regions;
      min_backups = std::min(min_backups, r.backups.size());
      syncing += r.syncing.empty() ? 0 : 1;
      recovering += r.recovering ? 1 : 0;
    }
  }
  return absl::StrCat("REPLICATION regions=", regions,
                      " min_backups=", regions == 0 ? 0 : min_backups, " syncing=", syncing,
                      " recovering=", recovering, " cm=", rt.configuration_manager());
}

// Why this node cannot reach sync point `where` in the current configuration (empty: it can).
// A transaction sends COMMIT-BACKUPs and COMMIT-PRIMARYs to other nodes only, so the second
// COMMIT-PRIMARY send (between_primaries) needs accounts whose primaries are two other nodes,
// and a flush's second truncation (mid_truncate) accounts backed up on two other nodes. After
// a few crashes every account may live on one node (a promoted backup stays the primary): the
// fault cannot happen there, and the driver says so at once instead of waiting for it.
std::string CannotReach(const Runtime& rt, const std::vector<GlobalAddress>& accounts,
                        const std::string& where) {
  if (where != "between_primaries" && where != "mid_truncate") return "";
  std::map<uint32_t, RegionRef> regions;
  for (uint32_t m : rt.members()) {
    for (const RegionRef& r : rt.Regions(m)) regions[r.id] = r;
  }
  std::set<uint32_t> others;
  for (const GlobalAddress& a : accounts) {
    auto it = regions.find(a.region);
    if (it == regions.end()) continue;
    if (where == "between_primaries") {
      others.insert(it->second.node);
    } else {
      others.insert(it->second.backups.begin(), it->second.backups.end());
    }
  }
  others.erase(rt.node_id());
  if (others.size() >= 2) return "";
  return absl::StrCat("the accounts' ",
                      where == "between_primaries" ? "primaries" : "backup copies", " are on ",
                      others.size(), " node(s) other than this one (", absl::StrJoin(others, ","),
                      "), and ", where, " needs two: a transaction sends to other nodes only");
}

void StopClients(Workload& w, std::vector<std::thread>* threads) {
  w.stop.store(true, std::memory_order_release);
  for (std::thread& t : *threads) t.join();
  threads->clear();
}

absl::Status RunWorkload(Runtime& rt) {
  const int accounts = absl::GetFlag(FLAGS_accounts);
  const int threads = absl::GetFlag(FLAGS_threads);
  Workload w;
  w.rt = &rt;
  w.incarnation = static_cast<uint64_t>(absl::GetFlag(FLAGS_incarnation));
  absl::StatusOr<std::unique_ptr<HistoryFile>> h = HistoryFile::Open(absl::StrCat(
      absl::GetFlag(FLAGS_history_dir), "/history-", rt.node_id(), "-", getpid(), ".jsonl"));
  if (!h.ok()) return h.status();
  w.history = std::move(*h);
  const int kv_threads = g_store == nullptr ? 0 : absl::GetFlag(FLAGS_kv_threads);
  for (int i = 0; i < threads + kv_threads; ++i) {
    absl::StatusOr<std::unique_ptr<Worker>> worker = rt.NewWorker();
    if (!worker.ok()) return worker.status();
    (i < threads ? w.workers : w.kv_workers).push_back(std::move(*worker));
  }
  if (kv_threads > 0) {
    if (absl::Status s = w.kv_history.StartJournal(absl::StrCat(
            absl::GetFlag(FLAGS_history_dir), "/kv-", rt.node_id(), "-", getpid(), ".jsonl"));
        !s.ok()) {
      return s;
    }
  }
  // With a data directory (kill_all), node 0 keeps the accounts' addresses in a root: its
  // process after a crash of the whole cluster finds them there (nobody else has them then).
  absl::StatusOr<std::vector<uint64_t>> packed = absl::NotFoundError("no root");
  if (absl::StatusOr<std::string> root = rt.LoadRoot("chaos-accounts"); root.ok()) {
    if (root->size() != accounts * sizeof(uint64_t)) {
      return absl::DataLossError(absl::StrCat("the root chaos-accounts holds ", root->size(),
                                              " bytes, not ", accounts, " addresses"));
    }
    std::vector<uint64_t> v(static_cast<size_t>(accounts));
    std::memcpy(v.data(), root->data(), root->size());
    packed = std::move(v);
  } else if (absl::GetFlag(FLAGS_allocate)) {
    packed = AllocateAccounts(*w.workers[0], accounts);
    if (packed.ok()) {
      absl::Status saved = rt.SaveRoot(
          "chaos-accounts", absl::string_view(reinterpret_cast<const char*>(packed->data()),
                                              packed->size() * sizeof(uint64_t)));
      if (!saved.ok() && !absl::IsFailedPrecondition(saved)) return saved;  // no data directory
    }
  } else {
    packed =
        FetchAccounts(rt, *w.workers[0], accounts, absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  }
  if (!packed.ok()) return packed.status();
  {
    std::lock_guard<std::mutex> l(g_published_mu);
    g_published = *packed;
  }
  std::map<uint32_t, uint32_t> region_owner;
  for (uint32_t m : rt.members()) {
    for (const RegionRef& r : rt.Regions(m)) region_owner[r.id] = r.node;
  }
  std::map<uint32_t, int> per_node;
  for (uint64_t p : *packed) {
    w.accounts.push_back(GlobalAddress::Unpack(p));
    ++per_node[region_owner[w.accounts.back().region]];
  }
  std::vector<std::string> layout;
  for (const auto& [node, count] : per_node) layout.push_back(absl::StrCat(node, ":", count));
  std::vector<std::thread> clients;
  for (int i = 0; i < threads; ++i) clients.emplace_back([&w, i] { RunClient(w, i); });
  for (int i = 0; i < kv_threads; ++i) clients.emplace_back([&w, i] { RunKvClient(w, i); });
  Emit(absl::StrCat("RUNNING node=", rt.node_id(), " accounts=", absl::StrJoin(layout, ",")));

  // Commands from the driver, one per line; the end of input (the driver went away) stops too.
  for (std::string line; std::getline(std::cin, line) && line != "done";) {
    if (line == "stop") {
      StopClients(w, &clients);
      Emit(absl::StrCat(
          "STOPPED node=", rt.node_id(), " committed=", w.committed.load(),
          " aborted=", w.aborted.load(), " unknown=", w.unknown.load(), " failed=", w.failed.load(),
          " kv_ops=", w.kv_ops.load(), " kv_errors=", w.kv_errors.load(),
          w.history->failed() || !w.kv_history.JournalStatus().ok() ? " HISTORY_FAILED" : ""));
    } else if (line == "final") {
      FinalReads(w);
      Emit("FINAL_DONE");
    } else if (line == "replication") {
      Emit(ReplicationLine(rt));
    } else if (absl::StartsWith(line, "can ")) {
      const std::string where = line.substr(4);
      const std::string why = CannotReach(rt, w.accounts, where);
      Emit(why.empty() ? absl::StrCat("CAN ", where) : absl::StrCat("CANNOT ", where, ": ", why));
    } else if (absl::StartsWith(line, "arm ")) {
      const std::string where = line.substr(4);
      Emit(absl::StrCat(ArmCrash(where) ? "ARMED " : "NOT_ARMED ", where));
    }
  }
  StopClients(w, &clients);
  return absl::OkStatus();
}

// The application: the workload, and a FAILED line for the driver when it cannot run (e.g. node 0
// cannot be reached), so that the driver does not wait for a RUNNING line that never comes.
absl::Status NodeRun(Runtime& rt) {
  absl::Status s = RunWorkload(rt);
  if (!s.ok()) Emit(absl::StrCat("FAILED ", s.ToString()));
  return s;
}

absl::Status NodeSetup(Runtime& rt) {
  if (absl::GetFlag(FLAGS_kv_threads) > 0) {
    // A tiny table (as tests/kv_history_app.cc's): keys are displaced (hopscotch) and overflow
    // blocks are chained, freed and reused, so the workload reaches every path of a lookup.
    kv::Options o;
    o.buckets = static_cast<uint64_t>(absl::GetFlag(FLAGS_kv_buckets));
    o.bucket_bytes = 128;
    o.neighbourhood = 2;
    o.hold_shard = !absl::GetFlag(FLAGS_client);
    absl::StatusOr<std::unique_ptr<kv::Store>> store = kv::Store::Create(rt, o);
    if (!store.ok()) return store.status();
    g_store = std::move(*store);
  }
  return kAddresses.Serve(rt, [](uint32_t, const uint32_t&) -> absl::StatusOr<AddressChunk> {
    std::lock_guard<std::mutex> l(g_published_mu);
    if (g_published.empty()) return absl::FailedPreconditionError("accounts not allocated yet");
    AddressChunk c;
    c.total = static_cast<uint32_t>(g_published.size());
    std::copy(g_published.begin(), g_published.end(), c.packed);
    return c;
  });
}

// ---------------------------------------------------------------------------------------------
// Driver side.

// Runs `command` through the shell; its output (stdout and stderr) in the error.
absl::Status Shell(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return absl::UnavailableError(absl::StrCat("cannot run ", command));
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  if (st != 0) {
    return absl::UnavailableError(
        absl::StrCat("`", command, "` failed: ", absl::StripTrailingAsciiWhitespace(out)));
  }
  return absl::OkStatus();
}

// Why network namespaces cannot be made here (empty: they can).
std::string NetnsUnavailable() {
  if (geteuid() != 0) return "it needs root (ip netns add)";
  // Made and removed, since a sandbox (e.g. Bazel's) may refuse to make one.
  const std::string probe = absl::StrCat("fch", getpid(), "-probe");
  if (absl::Status s = Shell(absl::StrCat("ip netns add ", probe, " && ip netns del ", probe));
      !s.ok()) {
    return absl::StrCat("`ip netns` (iproute2) cannot make a namespace here: ", s.message());
  }
  return "";
}

struct DriverOptions {
  std::vector<Scenario> scenarios;
  std::string provider;
  int nodes = 3, f = 1, lease_ms = 1000, faults = 2, duration_ms = 3000, warmup_ms = 1000;
  int window_ms = 500, accounts = 30, threads = 2, timeout_s = 60, kv_threads = 1, kv_keys = 48;
  int rounds = 1;
  int kv_buckets = 4;
  uint64_t seed = 1;
  std::string host, keep_histories, zookeeper;
};

absl::StatusOr<DriverOptions> DriverOptionsFromFlags() {
  DriverOptions o;
#ifdef NDEBUG
  constexpr bool kSyncPoints = false;
#else
  constexpr bool kSyncPoints = true;
#endif
  const std::string netns_why = NetnsUnavailable();
  absl::StatusOr<std::vector<Scenario>> s =
      ParseScenarios(absl::GetFlag(FLAGS_scenarios), kSyncPoints, netns_why.empty(), netns_why);
  if (!s.ok())
    return absl::InvalidArgumentError(absl::StrCat("--scenarios: ", s.status().message()));
  o.scenarios = *s;
  o.provider = absl::GetFlag(FLAGS_provider);
  if (o.provider.empty()) o.provider = "tcp;ofi_rxm";
  if (absl::Status c = CheckProvider(o.provider); !c.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--provider: ", c.message()));
  }
  if (o.provider.find(',') != std::string::npos) {
    return absl::InvalidArgumentError(
        "--provider takes one provider (run the tool once per provider)");
  }
  o.nodes = absl::GetFlag(FLAGS_nodes);
  o.f = absl::GetFlag(FLAGS_f);
  o.lease_ms = absl::GetFlag(FLAGS_lease_ms);
  o.faults = absl::GetFlag(FLAGS_faults);
  o.duration_ms = absl::GetFlag(FLAGS_duration_ms);
  o.warmup_ms = absl::GetFlag(FLAGS_warmup_ms);
  o.window_ms = absl::GetFlag(FLAGS_window_ms);
  o.accounts = absl::GetFlag(FLAGS_accounts);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.kv_threads = absl::GetFlag(FLAGS_kv_threads);
  o.kv_keys = absl::GetFlag(FLAGS_kv_keys);
  o.kv_buckets = absl::GetFlag(FLAGS_kv_buckets);
  o.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.rounds = absl::GetFlag(FLAGS_rounds);
  if (o.rounds < 1 || o.rounds > 10000)
    return absl::InvalidArgumentError("--rounds must be 1..10000");
  o.host = absl::GetFlag(FLAGS_host);
  o.keep_histories = absl::GetFlag(FLAGS_keep_histories);
  o.zookeeper = absl::GetFlag(FLAGS_zookeeper);
  if (o.nodes < 2 || o.nodes > 8) return absl::InvalidArgumentError("--nodes must be 2..8");
  if (o.f < 0 || o.f >= o.nodes) {
    return absl::InvalidArgumentError(absl::StrCat("--f must be 0..", o.nodes - 1, " (each of the ",
                                                   o.nodes,
                                                   " node processes is one failure domain)"));
  }
  if (o.lease_ms < 100 || o.lease_ms > 60000) {
    return absl::InvalidArgumentError("--lease_ms must be 100..60000");
  }
  if (o.faults < 1 || o.faults > 1000)
    return absl::InvalidArgumentError("--faults must be 1..1000");
  if (o.duration_ms < 200 || o.duration_ms > 600000) {
    return absl::InvalidArgumentError("--duration_ms must be 200..600000");
  }
  if (o.warmup_ms < 0 || o.warmup_ms > 600000) {
    return absl::InvalidArgumentError("--warmup_ms must be 0..600000");
  }
  if (o.window_ms < 50 || o.window_ms > o.duration_ms) {
    return absl::InvalidArgumentError("--window_ms must be 50..--duration_ms");
  }
  if (o.accounts < 4 || o.accounts > kMaxAccounts) {
    return absl::InvalidArgumentError(absl::StrCat("--accounts must be 4..", kMaxAccounts));
  }
  if (o.threads < 1 || o.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--threads must be 1..", kMaxThreads));
  }
  if (o.kv_threads < 0 || o.kv_threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("--kv_threads must be 0..", kMaxThreads));
  }
  if (o.kv_keys < 1 || o.kv_keys > 1000) {
    return absl::InvalidArgumentError("--kv_keys must be 1..1000");
  }
  if (o.kv_buckets < 1 || o.kv_buckets > 4096) {
    return absl::InvalidArgumentError("--kv_buckets must be 1..4096");
  }
  if (o.timeout_s < 5) return absl::InvalidArgumentError("--timeout_s must be at least 5");
  const std::string listed(absl::StripAsciiWhitespace(absl::GetFlag(FLAGS_scenarios)));
  if (listed.empty() || listed == "all") {
    // Every one this build, machine and f can run.
    o.scenarios.erase(std::remove_if(o.scenarios.begin(), o.scenarios.end(),
                                     [&](Scenario sc) { return Info(sc).min_f > o.f; }),
                      o.scenarios.end());
  }
  for (Scenario sc : o.scenarios) {
    if (Info(sc).min_f > o.f) {
      return absl::InvalidArgumentError(
          absl::StrCat("scenario ", Info(sc).name, " needs --f >= ", Info(sc).min_f,
                       Info(sc).sync_point ? " (its sync point is on the path with backups)"
                                           : " (it recovers the regions from their backups)"));
    }
  }
  if (!o.keep_histories.empty() && !std::filesystem::is_directory(o.keep_histories)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keep_histories: ", o.keep_histories, " is not a directory"));
  }
  return o;
}

// The last line of a node's log, for messages.
std::string LastLogLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// The project's own test hosts (as tests/netns_test.sh makes them): one network namespace per
// node process, each with a veth link to a bridge in a namespace of its own, addresses
// 10.214.S.(i+1)/24 and no route out; with `host_link`, one more link joins this (the driver's)
// namespace to the bridge as 10.214.S.254, for a ZooKeeper the nodes reach. A node is cut off
// (partitioned from every other and from that ZooKeeper, the driver's pipes aside) by setting its
// link's bridge end down, and healed by setting it up. The destructor removes every namespace
// (their links go with them).
class Netns {
 public:
  static absl::StatusOr<std::unique_ptr<Netns>> Create(int count, bool host_link) {
    std::unique_ptr<Netns> n(new Netns);
    n->tag_ = absl::StrCat("fch", getpid(), "-", next_++);
    n->subnet_ = absl::StrCat("10.214.", getpid() % 200 + 20);
    n->bridge_ = absl::StrCat(n->tag_, "-br");
    n->count_ = 0;
    if (absl::Status s = Shell(absl::StrCat("ip netns add ", n->bridge_)); !s.ok()) return s;
    n->bridge_made_ = true;
    if (absl::Status s =
            Shell(absl::StrCat("ip -n ", n->bridge_, " link add br0 type bridge && ip -n ",
                               n->bridge_, " link set br0 up"));
        !s.ok()) {
      return s;
    }
    for (int i = 0; i < count; ++i) {
      const std::string ns = n->ns(i), veth = absl::StrCat("fc", getpid() % 100000, "v", i),
                        port = n->Port(i);
      if (absl::Status s = Shell(absl::StrCat("ip netns add ", ns)); !s.ok()) return s;
      ++n->count_;
      const std::string cmd = absl::StrCat(
          "ip link add ", veth, " type veth peer name ", port, " && ip link set ", veth, " netns ",
          ns, " && ip link set ", port, " netns ", n->bridge_, " && ip -n ", n->bridge_,
          " link set ", port, " master br0 up && ip -n ", ns, " link set lo up && ip -n ", ns,
          " link set ", veth, " name eth0 && ip -n ", ns, " addr add ", n->host(i),
          "/24 dev eth0 && ip -n ", ns, " link set eth0 up");
      if (absl::Status s = Shell(cmd); !s.ok()) return s;
    }
    if (host_link) {
      const std::string veth = absl::StrCat("fc", getpid() % 100000, "h"), port = n->Port(99);
      const std::string cmd =
          absl::StrCat("ip link add ", veth, " type veth peer name ", port, " && ip link set ",
                       port, " netns ", n->bridge_, " && ip -n ", n->bridge_, " link set ", port,
                       " master br0 up && ip addr add ", n->host_address(), "/24 dev ", veth,
                       " && ip link set ", veth, " up");
      if (absl::Status s = Shell(cmd); !s.ok()) return s;
    }
    return n;
  }
  ~Netns() {
    for (int i = 0; i < count_; ++i) Shell(absl::StrCat("ip netns del ", ns(i))).IgnoreError();
    if (bridge_made_) Shell(absl::StrCat("ip netns del ", bridge_)).IgnoreError();
  }
  std::string ns(int i) const { return absl::StrCat(tag_, "-", i); }
  std::string host(int i) const { return absl::StrCat(subnet_, ".", i + 1); }
  // This namespace's address on the bridge (with `host_link`).
  std::string host_address() const { return absl::StrCat(subnet_, ".254"); }
  absl::Status Cut(int i) {
    return Shell(absl::StrCat("ip -n ", bridge_, " link set ", Port(i), " down"));
  }
  absl::Status Heal(int i) {
    return Shell(absl::StrCat("ip -n ", bridge_, " link set ", Port(i), " up"));
  }

 private:
  Netns() = default;
  std::string Port(int i) const { return absl::StrCat("fc", getpid() % 100000, "b", i); }

  static inline int next_ = 0;  // the scenarios of one driver get namespaces of their own
  std::string tag_, subnet_, bridge_;
  int count_ = 0;  // namespaces made (and to remove)
  bool bridge_made_ = false;
};

// The node processes of one scenario: started, watched (their CHAOS lines queued per node), sent
// commands, signalled, and stopped. A signal to the driver (SIGINT, SIGTERM, SIGHUP: its
// signalfd) ends any wait with Cancelled; the destructor kills whatever still runs.
class ChaosCluster {
 public:
  // `zookeeper`: the servers the nodes record their configuration in (empty: none), under
  // cluster name `cluster_name`.
  // `netns`: the namespaces the nodes run in, node i in namespace i (nullptr: none).
  ChaosCluster(const DriverOptions& o, int signal_fd, TempDir& dir, bool client,
               std::string zookeeper = "", std::string cluster_name = "", Netns* netns = nullptr)
      : o_(o),
        signal_fd_(signal_fd),
        dir_(dir),
        client_(client),
        zookeeper_(std::move(zookeeper)),
        cluster_name_(std::move(cluster_name)),
        netns_(netns) {}
  ~ChaosCluster() {
    for (auto& [id, s] : slots_) {
      if (s.proc == nullptr || s.proc->reaped()) continue;
      s.proc->Kill(SIGCONT);
      s.proc->Kill(SIGKILL);
      s.proc->Stop(absl::ZeroDuration());
    }
  }

  // Every data node runs on a data directory of its own (--data_dir), kept across its restarts.
  void UseDataDirs() { data_dirs_ = true; }

  absl::Status Configure() {
    absl::StatusOr<config::ClusterConfig> c =
        LocalClusterConfig(o_.nodes + (client_ ? 1 : 0), o_.provider, o_.host);
    if (!c.ok()) return c.status();
    c->set_f(static_cast<uint32_t>(o_.f));
    c->set_lease_ms(static_cast<uint32_t>(o_.lease_ms));
    c->set_join_timeout_s(static_cast<uint32_t>(o_.timeout_s));
    c->set_region_size(1 << 20);
    c->set_region_count(2);
    if (!zookeeper_.empty()) {
      c->set_zookeeper(zookeeper_);
      c->set_cluster_name(cluster_name_);
    }
    for (config::NodeConfig& n : *c->mutable_node()) {
      n.set_failure_domain(absl::StrCat("process ", n.id()));
      if (netns_ != nullptr) n.set_host(netns_->host(static_cast<int>(n.id())));
      if (static_cast<int>(n.id()) == o_.nodes) n.set_late(true);  // the client
    }
    if (absl::Status s = ValidateAndComplete(&*c); !s.ok()) return s;
    absl::StatusOr<std::string> path = dir_.Write("cluster.textproto", ToText(*c));
    if (!path.ok()) return path.status();
    config_path_ = *path;
    return absl::OkStatus();
  }

  // Starts node `id` (again); WaitRunning waits until its clients run.
  absl::Status Start(uint32_t id) {
    Slot& s = slots_[id];
    if (s.proc != nullptr && !s.proc->reaped()) return absl::InternalError("node still running");
    s.lines.clear();
    ++s.incarnation;
    ++spawned_;
    s.log = absl::StrCat(dir_.path(), "/node-", id, "-", s.incarnation, ".log");
    const std::string log_level = absl::GetFlag(FLAGS_log_level);
    std::vector<std::string> args = {
        "--role=node",
        absl::StrCat("--config=", config_path_),
        absl::StrCat("--node_id=", id),
        absl::StrCat("--provider=", o_.provider),
        absl::StrCat("--poll=", absl::GetFlag(FLAGS_poll)),
        absl::StrCat("--log_level=", log_level == "info" ? "warn" : log_level),
        absl::StrCat("--workers=", o_.threads + o_.kv_threads + 2),
        absl::StrCat("--kv_threads=", o_.kv_threads),
        absl::StrCat("--kv_keys=", o_.kv_keys),
        absl::StrCat("--kv_buckets=", o_.kv_buckets),
        absl::StrCat("--client=", static_cast<int>(id) == o_.nodes ? "true" : "false"),
        absl::StrCat("--allocate=", id == 0 && s.incarnation == 1 ? "true" : "false"),
        absl::StrCat("--accounts=", o_.accounts),
        absl::StrCat("--threads=", o_.threads),
        absl::StrCat("--timeout_s=", o_.timeout_s),
        absl::StrCat("--history_dir=", dir_.path()),
        absl::StrCat("--incarnation=", spawned_),
        absl::StrCat("--seed=", o_.seed)};
    if (data_dirs_ && static_cast<int>(id) < o_.nodes) {
      args.push_back(absl::StrCat("--data_dir=", dir_.path(), "/data-", id));
    }
    ChildProcess::Options options;
    options.stderr_path = s.log;
    options.own_process_group = true;  // a Ctrl-C reaches the driver only, which stops them all
    absl::StatusOr<std::unique_ptr<ChildProcess>> p;
    if (netns_ == nullptr) {
      p = ChildProcess::Spawn("/proc/self/exe", args, options);
    } else {
      // `ip netns exec` runs the program in the namespace (the same process: it execs).
      std::error_code ec;
      const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
      if (ec) return absl::UnavailableError(absl::StrCat("/proc/self/exe: ", ec.message()));
      args.insert(args.begin(), {"netns", "exec", netns_->ns(static_cast<int>(id)), self});
      p = ChildProcess::Spawn("ip", args, options);
    }
    if (!p.ok()) return p.status();
    s.proc = std::move(*p);
    s.victim = false;
    s.failed = false;
    return absl::OkStatus();
  }
  absl::Status WaitRunning(uint32_t id) {
    const absl::Time deadline = Deadline();
    for (;;) {
      absl::StatusOr<std::string> line = WaitLine(id, "", deadline);
      if (!line.ok()) return line.status();
      if (absl::StartsWith(*line, "FAILED ")) {
        slots_[id].failed = true;  // it takes no more commands
        return absl::UnavailableError(absl::StrCat("node ", id, ": ", line->substr(7)));
      }
      if (absl::StartsWith(*line, "RUNNING")) {
        spdlog::info("node {}: {}", id, *line);
        return absl::OkStatus();
      }
    }
  }
  // Its workload failed to start: it waits for the others to leave and takes no commands.
  bool Failed(uint32_t id) { return slots_[id].failed; }
  absl::Status StartAndWait(uint32_t id) {
    absl::Status s = Start(id);
    return s.ok() ? WaitRunning(id) : s;
  }

  // The next line of node `id` starting with `prefix` (earlier ones are dropped).
  absl::StatusOr<std::string> WaitLine(uint32_t id, absl::string_view prefix, absl::Time deadline) {
    Slot& s = slots_[id];
    for (;;) {
      while (!s.lines.empty()) {
        std::string line = std::move(s.lines.front());
        s.lines.pop_front();
        if (absl::StartsWith(line, prefix)) return line;
      }
      if (s.proc == nullptr || s.proc->reaped()) {
        const std::string log = LastLogLine(s.log);
        return absl::AbortedError(absl::StrCat(
            "node ", id, " ", s.proc == nullptr ? "was not started" : s.how, " before it printed ",
            prefix, log.empty() ? "" : absl::StrCat(" (its log: ", log, ")")));
      }
      if (absl::Now() >= deadline) {
        const std::string log = LastLogLine(s.log);
        return absl::DeadlineExceededError(
            absl::StrCat("node ", id, " did not print ", prefix, " in time",
                         log.empty() ? "" : absl::StrCat(" (its log: ", log, ")")));
      }
      if (absl::Status p = Pump(deadline); !p.ok()) return p;
    }
  }

  // Watches the nodes until `d` has passed.
  absl::Status Sleep(absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    while (absl::Now() < until) {
      if (absl::Status s = Pump(until); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Waits (watching the others) until node `id` exits; false at `deadline`.
  absl::StatusOr<bool> WaitExit(uint32_t id, absl::Time deadline) {
    Slot& s = slots_[id];
    while (s.proc != nullptr && !s.proc->reaped()) {
      if (absl::Now() >= deadline) return false;
      if (absl::Status p = Pump(std::min(deadline, absl::Now() + absl::Milliseconds(20))); !p.ok())
        return p;
    }
    return true;
  }

  void Signal(uint32_t id, int signal) {
    Slot& s = slots_[id];
    if (signal == SIGKILL) s.victim = true;
    if (s.proc != nullptr) s.proc->Kill(signal);
  }
  void MarkVictim(uint32_t id) { slots_[id].victim = true; }
  absl::Status Send(uint32_t id, const std::string& command) {
    Slot& s = slots_[id];
    if (!Alive(id)) return absl::UnavailableError(absl::StrCat("node ", id, " is not running"));
    return s.proc->Send(command + "\n");
  }
  pid_t Pid(uint32_t id) {
    const Slot& s = slots_[id];
    return s.proc == nullptr ? 0 : std::abs(s.proc->pid());
  }
  bool Alive(uint32_t id) {
    auto it = slots_.find(id);
    return it != slots_.end() && it->second.proc != nullptr && !it->second.proc->reaped();
  }
  std::vector<uint32_t> AliveNodes() {
    std::vector<uint32_t> out;
    for (const auto& [id, s] : slots_) {
      if (Alive(id)) out.push_back(id);
    }
    return out;
  }
  // How processes ended: exits with status 3 (evicted) and, for processes that were not a
  // fault's victim, a note each.
  int evictions() const { return evictions_; }
  const std::vector<std::string>& unexpected() const { return unexpected_; }

  // Lets every node leave ("done"; each waits for the others' applications), then kills what did
  // not leave within the timeout.
  void Finish() {
    for (uint32_t id : AliveNodes()) Send(id, "done").IgnoreError();
    const absl::Time deadline = Deadline();
    for (uint32_t id : AliveNodes()) {
      absl::StatusOr<bool> gone = WaitExit(id, deadline);
      if (gone.ok() && *gone) continue;
      unexpected_.push_back(absl::StrCat("node ", id, " did not leave when told; killed"));
      slots_[id].victim = true;
      slots_[id].proc->Kill(SIGCONT);
      slots_[id].proc->Kill(SIGKILL);
      WaitExit(id, absl::Now() + absl::Seconds(5)).IgnoreError();
    }
  }

  absl::Time Deadline() const { return absl::Now() + absl::Seconds(o_.timeout_s); }
  Netns* netns() const { return netns_; }

 private:
  struct Slot {
    std::unique_ptr<ChildProcess> proc;
    std::deque<std::string> lines;  // CHAOS lines not yet taken, without the prefix
    int incarnation = 0;
    std::string log;
    std::string how;      // how the last process ended
    bool victim = false;  // a fault hit this process: its end is expected
    bool failed = false;  // its workload did not start (FAILED)
  };

  absl::Status Pump(absl::Time deadline) {
    std::vector<ChildProcess*> procs;
    std::vector<uint32_t> ids;
    for (auto& [id, s] : slots_) {
      if (s.proc == nullptr || s.proc->reaped()) continue;
      procs.push_back(s.proc.get());
      ids.push_back(id);
    }
    std::vector<std::vector<std::string>> got;
    absl::StatusOr<int> signal = WaitForChildOutput(
        procs, signal_fd_,
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), absl::Milliseconds(50)), &got);
    if (!signal.ok()) return signal.status();
    if (*signal != 0) return absl::CancelledError(absl::StrCat("stopped by signal ", *signal));
    for (size_t i = 0; i < ids.size(); ++i) {
      Slot& s = slots_[ids[i]];
      Take(s, got[i]);
      std::string how;
      if (!s.proc->Exited(&how)) continue;
      std::vector<std::string> rest;
      s.proc->ReadLines(&rest);
      Take(s, rest);
      s.how = how;
      const int ws = s.proc->wait_status();
      if (WIFEXITED(ws) && WEXITSTATUS(ws) == kEvictedStatus) ++evictions_;
      const bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
      if (!clean && !s.victim) {
        const std::string log = LastLogLine(s.log);
        unexpected_.push_back(
            absl::StrCat("node ", ids[i], " ", how, log.empty() ? "" : absl::StrCat(": ", log)));
      }
      spdlog::info("node {} {}", ids[i], how);
    }
    return absl::OkStatus();
  }

  static void Take(Slot& s, std::vector<std::string>& lines) {
    for (std::string& l : lines) {
      if (absl::StartsWith(l, "CHAOS ")) s.lines.push_back(l.substr(6));
    }
  }

  const DriverOptions& o_;
  int signal_fd_;
  TempDir& dir_;
  bool client_;
  const std::string zookeeper_, cluster_name_;
  Netns* const netns_;
  bool data_dirs_ = false;
  std::string config_path_;
  std::map<uint32_t, Slot> slots_;
  int spawned_ = 0;  // processes started so far: each one's --incarnation
  int evictions_ = 0;
  std::vector<std::string> unexpected_;
};

// One fault's times on the monotonic clock.
struct FaultTimes {
  int64_t fault_ns = 0;  // injected
  int64_t end_ns = 0;    // end of the phase after it
};

// A process stopped past its lease and resumed (sigstop_long): its history file and the time of
// its SIGCONT.
struct Resumed {
  uint32_t node = 0;
  pid_t pid = 0;
  int64_t cont_ns = 0;
};

// Waits for `node`, killed or crashed on purpose (`how`: "SIGKILL", "its crash at X"), to be
// reaped: false with a note if it is not by the run's timeout (--timeout_s). Not a few seconds:
// a process's exit includes the kernel's teardown of its RDMA resources (queue pairs, pinned
// regions), which under SoftiWARP in a TCG guest on a loaded host took more than 5 s (a
// crash_mid_commit_backup run failed so, with no note, although the node had crashed as armed).
absl::StatusOr<bool> WaitDeath(ChaosCluster& c, uint32_t node, const std::string& how,
                               std::vector<std::string>* notes) {
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> gone = c.WaitExit(node, c.Deadline());
  if (!gone.ok()) return gone.status();
  if (*gone) return true;
  notes->push_back(absl::StrCat("node ", node, " did not exit within ",
                                absl::FormatDuration(absl::Now() - start), " of ", how));
  return false;
}

// Waits for victim `v`, evicted during `what`, to exit; kills it (a note, false) if it does not.
absl::StatusOr<bool> WaitEvicted(ChaosCluster& c, uint32_t v, const DriverOptions& o,
                                 const std::string& what, std::vector<std::string>* notes) {
  absl::StatusOr<bool> gone =
      c.WaitExit(v, absl::Now() + absl::Milliseconds(3 * o.lease_ms) + absl::Seconds(10));
  if (!gone.ok()) return gone.status();
  if (*gone) return true;
  notes->push_back(
      absl::StrCat("node ", v, " kept running after ", what, " (not evicted?); killed"));
  c.Signal(v, SIGKILL);
  c.WaitExit(v, absl::Now() + absl::Seconds(5)).IgnoreError();
  return false;
}

// Injects `*fault`; true when it happened as planned (notes say otherwise). A crash at a sync
// point that the planned victim cannot reach in the current configuration hits another data node
// that can (not the configuration manager's, node 0), and `fault->victim` says which.
absl::StatusOr<bool> Inject(Scenario s, Fault* fault, ChaosCluster& c, const DriverOptions& o,
                            std::vector<std::string>* notes, std::vector<Resumed>* resumed) {
  const Fault& f = *fault;
  const uint32_t v = f.victim;
  if (!c.Alive(v)) {
    notes->push_back(absl::StrCat("node ", v, " was not running when its fault was due"));
    return false;
  }
  switch (s) {
    case Scenario::kSigstopShort:
    case Scenario::kSigstopLong:
    case Scenario::kSigstopCm: {
      if (s != Scenario::kSigstopShort) c.MarkVictim(v);  // its eviction's exit is expected
      c.Signal(v, SIGSTOP);
      if (absl::Status st = c.Sleep(f.pause); !st.ok()) return st;
      c.Signal(v, SIGCONT);
      if (s == Scenario::kSigstopShort) return true;
      resumed->push_back(Resumed{v, c.Pid(v), MonoNs()});
      // Evicted while stopped: on SIGCONT it must learn so and exit (status 3) without acting.
      return WaitEvicted(c, v, o, absl::StrCat("a stop of ", absl::FormatDuration(f.pause)), notes);
    }
    case Scenario::kPartition:
    case Scenario::kPartitionCm: {
      c.MarkVictim(v);  // its eviction's exit is expected
      if (c.netns() == nullptr) return absl::InternalError("partition without namespaces");
      if (absl::Status st = c.netns()->Cut(static_cast<int>(v)); !st.ok()) {
        notes->push_back(absl::StrCat("cannot cut node ", v, " off: ", st.message()));
        return false;
      }
      absl::Status slept = c.Sleep(f.pause);
      // Healed whatever happened meanwhile (a signal to the driver included).
      if (absl::Status st = c.netns()->Heal(static_cast<int>(v)); !st.ok()) {
        notes->push_back(absl::StrCat("cannot heal node ", v, "'s link: ", st.message()));
        return false;
      }
      if (!slept.ok()) return slept;
      resumed->push_back(Resumed{v, c.Pid(v), MonoNs()});
      // Evicted while cut off: it must learn so and exit (status 3) without acting, by the time
      // its link is back or soon after (its lease is not renewed, its messages are refused).
      return WaitEvicted(c, v, o, absl::StrCat(absl::FormatDuration(f.pause), " cut off"), notes);
    }
    case Scenario::kKillAll: {
      // Every data node at once (a power cut of the cluster), then every one started again on
      // its data directory: the cluster forms once all joined, so they start together.
      std::vector<uint32_t> all;
      for (uint32_t id : c.AliveNodes()) {
        if (static_cast<int>(id) < o.nodes) all.push_back(id);
      }
      if (static_cast<int>(all.size()) != o.nodes) {
        notes->push_back("a data node was not running when the fault was due");
        return false;
      }
      for (uint32_t id : all) c.Signal(id, SIGKILL);
      for (uint32_t id : all) {
        absl::StatusOr<bool> gone = WaitDeath(c, id, "SIGKILL", notes);
        if (!gone.ok() || !*gone) return gone;
      }
      for (uint32_t id : all) {
        if (absl::Status st = c.Start(id); !st.ok()) return st;
      }
      for (uint32_t id : all) {
        if (absl::Status st = c.WaitRunning(id); !st.ok()) {
          if (absl::IsCancelled(st)) return st;
          notes->push_back(
              absl::StrCat("node ", id, " did not run again after the crash: ", st.message()));
          return false;
        }
      }
      return true;
    }
    case Scenario::kKill9:
    case Scenario::kKillCm:
    case Scenario::kClientKill: {
      c.Signal(v, SIGKILL);
      return WaitDeath(c, v, "SIGKILL", notes);
    }
    case Scenario::kCrashMidCommitBackup:
    case Scenario::kCrashAfterCommitBackup:
    case Scenario::kCrashBetweenPrimaries:
    case Scenario::kOwnerCrashBetweenPrimaries:
    case Scenario::kCrashMidTruncate:
    case Scenario::kCrashDuringRecovery: {
      const std::string where = s == Scenario::kCrashMidCommitBackup     ? "mid_commit_backup"
                                : s == Scenario::kCrashAfterCommitBackup ? "after_commit_backup"
                                : s == Scenario::kCrashMidTruncate       ? "mid_truncate"
                                                                         : "between_primaries";
      // The victims, in the order they die, and where.
      std::vector<std::pair<uint32_t, std::string>> crashes = {{v, where}};
      if (s == Scenario::kCrashDuringRecovery) {
        if (!c.Alive(f.also)) {
          notes->push_back(
              absl::StrCat("node ", f.also, " was not running when its fault was due"));
          return false;
        }
        crashes.emplace_back(f.also, "recovery_apply");
      }
      // Asked first, so that nothing is armed for a fault that cannot happen. Why `node` cannot
      // crash at `at` now (empty: it can).
      auto cannot = [&](uint32_t node, const std::string& at) -> absl::StatusOr<std::string> {
        if (absl::Status st = c.Send(node, absl::StrCat("can ", at)); !st.ok()) return st;
        absl::StatusOr<std::string> can = c.WaitLine(node, "CAN", c.Deadline());
        if (!can.ok()) return can.status();
        if (absl::StartsWith(*can, "CAN ")) return std::string();
        return std::string(absl::StripPrefix(*can, absl::StrCat("CANNOT ", at, ": ")));
      };
      for (size_t i = 0; i < crashes.size(); ++i) {
        const auto& [node, at] = crashes[i];
        absl::StatusOr<std::string> why = cannot(node, at);
        if (!why.ok()) return why.status();
        if (why->empty()) continue;
        // Where the accounts' primaries or backups are changes with every failure (and with
        // primary balancing): another data node may reach the sync point where this one cannot.
        uint32_t instead = 0;
        for (uint32_t alt = 1; i == 0 && instead == 0 && alt < static_cast<uint32_t>(o.nodes);
             ++alt) {
          if (alt == node || alt == f.also || !c.Alive(alt)) continue;
          absl::StatusOr<std::string> alt_why = cannot(alt, at);
          if (!alt_why.ok()) return alt_why.status();
          if (alt_why->empty()) instead = alt;
        }
        if (instead == 0) {
          notes->push_back(absl::StrCat("node ", node, " cannot crash at ", at, " now: ", *why));
          return false;
        }
        spdlog::info("node {} cannot crash at {} now ({}): node {} does instead", node, at, *why,
                     instead);
        crashes[i].first = instead;
        fault->victim = instead;
      }
      for (auto it = crashes.rbegin(); it != crashes.rend(); ++it) {
        const auto& [node, at] = *it;
        c.MarkVictim(node);
        if (absl::Status st = c.Send(node, absl::StrCat("arm ", at)); !st.ok()) return st;
        absl::StatusOr<std::string> armed = c.WaitLine(node, "", c.Deadline());
        if (!armed.ok()) return armed.status();
        if (!absl::StartsWith(*armed, "ARMED")) {
          notes->push_back(absl::StrCat("node ", node, " could not arm ", at, ": ", *armed));
          return false;
        }
      }
      for (const auto& [node, at] : crashes) {
        absl::StatusOr<std::string> crash = c.WaitLine(node, "CRASH", c.Deadline());
        if (!crash.ok()) {
          notes->push_back(absl::StrCat("node ", node, " did not crash at ", at, ": ",
                                        crash.status().message()));
          for (const auto& [n, unused] : crashes) {
            if (c.Alive(n)) c.Signal(n, SIGKILL);
          }
          return false;
        }
        absl::StatusOr<bool> gone = WaitDeath(c, node, absl::StrCat("its crash at ", at), notes);
        if (!gone.ok() || !*gone) return gone;
      }
      return true;
    }
  }
  return false;
}

// The records of one history file; lines that do not parse are counted in `bad` (if given).
std::vector<txn::TxnRecord> ReadHistoryFile(const std::string& path, int* bad) {
  std::vector<txn::TxnRecord> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    absl::StatusOr<txn::TxnRecord> r = txn::ParseTxnRecordJson(line);
    if (r.ok()) {
      records.push_back(std::move(*r));
    } else if (bad != nullptr) {
      ++*bad;
    }
  }
  return records;
}

// Every history file of the scenario, merged.
txn::History ReadHistories(const std::string& dir, std::vector<std::string>* notes) {
  std::vector<txn::TxnRecord> records;
  int bad = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!absl::StartsWith(e.path().filename().string(), "history-")) continue;
    std::vector<txn::TxnRecord> file = ReadHistoryFile(e.path().string(), &bad);
    records.insert(records.end(), file.begin(), file.end());
  }
  if (bad > 0) notes->push_back(absl::StrCat(bad, " history lines could not be parsed"));
  return MergeRecords(std::move(records));
}

// Fills the result's measurements from the history, the final reads and the faults' times.
void Analyse(const txn::History& h, const std::map<uint64_t, std::optional<uint64_t>>& final_tags,
             const std::map<uint64_t, int64_t>& balances, bool final_known,
             const std::vector<FaultTimes>& times, const DriverOptions& o, ScenarioResult* r) {
  std::vector<int64_t> commits;
  for (const txn::TxnRecord& t : h) {
    if (t.client == kAuditClient) continue;
    if (t.outcome == txn::TxnOutcome::kCommitted) {
      ++r->committed;
      commits.push_back(t.end_ns);
    }
    r->aborted += t.outcome == txn::TxnOutcome::kAborted;
    r->unknown += t.outcome == txn::TxnOutcome::kUnknown;
  }
  std::sort(commits.begin(), commits.end());
  absl::StatusOr<txn::HistoryCheck> check = txn::CheckStrictSerializability(h);
  if (!check.ok()) {
    r->notes.push_back(
        absl::StrCat("the history could not be checked: ", check.status().message()));
    r->anomalies = 1;
    r->first_anomaly = std::string(check.status().message());
  } else {
    r->anomalies = check->anomaly_count;
    if (!check->anomalies.empty())
      r->first_anomaly = check->anomalies[0].description.substr(0, 600);
  }
  const LossReport loss = CountLostCommits(h, final_tags, final_known, kAuditClient);
  r->lost_commits = loss.lost_commits;
  r->lost_on_unavailable = loss.lost_on_unavailable;
  r->accounts = static_cast<uint64_t>(o.accounts);
  r->unavailable = final_known ? loss.unavailable_keys : r->accounts;
  if (!balances.empty()) {
    int64_t total = 0;
    for (const auto& [k, b] : balances) total += b;
    r->bank_total = total;
  }
  r->bank_expected = kInitialBalance * o.accounts;
  // Throughput around each fault.
  const int64_t phase = int64_t{o.duration_ms} * 1000000;
  std::vector<double> recovery, before, after;
  for (const FaultTimes& t : times) {
    const double b = Rate(commits, t.fault_ns - phase, t.fault_ns);
    before.push_back(b);
    after.push_back(Rate(commits, t.fault_ns + (t.end_ns - t.fault_ns) / 2, t.end_ns));
    std::optional<double> ms =
        RecoveryMs(commits, t.fault_ns, t.end_ns, b, int64_t{o.window_ms} * 1000000, 50 * 1000000);
    r->recovered += ms.has_value();
    recovery.push_back(ms.value_or(std::numeric_limits<double>::infinity()));
  }
  auto finite = [](std::optional<double> v) -> std::optional<double> {
    if (!v || std::isinf(*v)) return std::nullopt;
    return v;
  };
  r->recovery_ms_p50 = finite(Percentile(recovery, 0.5));
  r->recovery_ms_p99 = finite(Percentile(recovery, 0.99));
  auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  r->tput_before = mean(before);
  r->tput_after = mean(after);
}

// Node `reader`'s final reads: "FINAL i balance tag" / "FINAL i unavailable why" lines until
// FINAL_DONE.
absl::Status CollectFinalReads(ChaosCluster& c, uint32_t reader,
                               std::map<uint64_t, std::optional<uint64_t>>* tags,
                               std::map<uint64_t, int64_t>* balances) {
  if (absl::Status s = c.Send(reader, "final"); !s.ok()) return s;
  const absl::Time deadline = c.Deadline() + absl::Seconds(30);
  for (;;) {
    absl::StatusOr<std::string> line = c.WaitLine(reader, "FINAL", deadline);
    if (!line.ok()) return line.status();
    if (*line == "FINAL_DONE") return absl::OkStatus();
    std::vector<std::string> f = absl::StrSplit(*line, ' ');
    uint64_t key = 0, tag = 0;
    int64_t balance = 0;
    if (f.size() < 3 || !absl::SimpleAtoi(f[1], &key)) {
      return absl::InternalError(absl::StrCat("node ", reader, " printed: ", *line));
    }
    if (f[2] == "unavailable") {
      (*tags)[key] = std::nullopt;
    } else if (f.size() == 4 && absl::SimpleAtoi(f[2], &balance) && absl::SimpleAtoi(f[3], &tag)) {
      (*tags)[key] = tag;
      (*balances)[key] = balance;
    } else {
      return absl::InternalError(absl::StrCat("node ", reader, " printed: ", *line));
    }
  }
}

// The KV histories (kv-*.jsonl) checked by //tools/lincheck (Porcupine): r->kv_ops, and
// r->kv_linearizable (nullopt when the check did not finish: a timeout, or no lincheck).
void CheckKvHistories(const std::string& dir, int timeout_s, ScenarioResult* r) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    // A journal without a call (a process that never got to its first operation) is no history.
    if (!absl::StartsWith(e.path().filename().string(), "kv-") || e.file_size() == 0) continue;
    files.push_back(e.path().string());
    std::ifstream in(e.path());
    // One line per call and one per return ("return": null for an unknown outcome); a call
    // without a return line is unknown too (its process died).
    for (std::string line; std::getline(in, line);) {
      if (absl::StrContains(line, "\"call\":")) {
        ++r->kv_ops;
        ++r->kv_unknown;
      } else if (absl::StrContains(line, "\"return\":") &&
                 !absl::StrContains(line, "\"return\": null")) {
        --r->kv_unknown;
      }
    }
  }
  if (files.empty()) {
    r->notes.push_back("no KV history was written");
    return;
  }
  const std::string lincheck = FindRunfile("tools/lincheck/lincheck", "lincheck");
  if (lincheck.empty()) {
    r->notes.push_back("//tools/lincheck is not built: the KV history was not checked");
    return;
  }
  std::string cmd = absl::StrCat("'", lincheck, "' --timeout=", timeout_s, "s --visualize=never");
  for (const std::string& f : files) absl::StrAppend(&cmd, " '", f, "'");
  absl::StrAppend(&cmd, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    r->notes.push_back("cannot run //tools/lincheck");
    return;
  }
  std::string out;
  char buf[1024];
  while (fgets(buf, sizeof(buf), p) != nullptr) {
    if (out.size() < 4000) out += buf;
  }
  const int ws = pclose(p);
  const int rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
  if (rc == 0 || rc == 1) {
    r->kv_linearizable = rc == 0;
    if (rc == 1)
      r->notes.push_back(absl::StrCat("KV history not linearizable: ", out.substr(0, 600)));
  } else {
    r->notes.push_back(
        absl::StrCat("lincheck did not decide (exit ", rc, "): ", out.substr(0, 300)));
  }
}

// Starts the data nodes, which form the cluster together, then the client node (if any), which
// attaches to it.
absl::Status StartCluster(ChaosCluster& c, const DriverOptions& o, bool client) {
  absl::Status up;
  for (int i = 0; i < o.nodes && up.ok(); ++i) up = c.Start(static_cast<uint32_t>(i));
  for (int i = 0; i < o.nodes && up.ok(); ++i) up = c.WaitRunning(static_cast<uint32_t>(i));
  if (!up.ok()) {
    return absl::IsCancelled(up) ? up
                                 : absl::UnavailableError(
                                       absl::StrCat("the cluster did not come up: ", up.message()));
  }
  if (!client) return absl::OkStatus();
  up = c.StartAndWait(static_cast<uint32_t>(o.nodes));
  if (up.ok() || absl::IsCancelled(up)) return up;
  return absl::UnavailableError(absl::StrCat("the client node did not attach: ", up.message()));
}

// Waits until every data region has its f complete backup copies again (the last fault's
// regions promoted, recovered and copied anew), asking a running node every 100 ms, so that the
// next fault meets a whole cluster and what it loses does not depend on how fast the previous
// copies were. Not within the timeout: a note, and the next fault comes anyway.
absl::Status WaitReplicated(ChaosCluster& c, const DriverOptions& o, ScenarioResult* r) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = c.Deadline();
  std::string last = "no node answered";
  while (absl::Now() < deadline) {
    for (uint32_t id : c.AliveNodes()) {
      if (c.Failed(id) || !c.Send(id, "replication").ok()) continue;
      absl::StatusOr<std::string> line =
          c.WaitLine(id, "REPLICATION", std::min(deadline, absl::Now() + absl::Seconds(10)));
      if (absl::IsCancelled(line.status())) return line.status();
      if (!line.ok()) continue;
      last = *line;
      int regions = 0, min_backups = 0, syncing = 0, recovering = 0;
      if (std::sscanf(line->c_str(),
                      "REPLICATION regions=%d min_backups=%d syncing=%d recovering=%d", &regions,
                      &min_backups, &syncing, &recovering) == 4 &&
          regions > 0 && min_backups >= o.f && syncing == 0 && recovering == 0) {
        spdlog::info("fully replicated again after {}", absl::FormatDuration(absl::Now() - start));
        return absl::OkStatus();
      }
      break;  // one node's view per round
    }
    if (absl::Status st = c.Sleep(absl::Milliseconds(100)); !st.ok()) return st;
  }
  r->notes.push_back(absl::StrCat("the cluster was not fully replicated again within ", o.timeout_s,
                                  " s before the next fault (last: ", last, ")"));
  return absl::OkStatus();
}

// The node the cluster's current membership names as configuration manager, asked of a running
// node (REPLICATION's cm=).
absl::StatusOr<uint32_t> CurrentCm(ChaosCluster& c) {
  std::string last = "no node answered";
  for (uint32_t id : c.AliveNodes()) {
    if (c.Failed(id) || !c.Send(id, "replication").ok()) continue;
    absl::StatusOr<std::string> line =
        c.WaitLine(id, "REPLICATION", std::min(c.Deadline(), absl::Now() + absl::Seconds(10)));
    if (absl::IsCancelled(line.status())) return line.status();
    if (!line.ok()) continue;
    last = *line;
    const size_t at = line->find(" cm=");
    uint32_t cm = 0;
    if (at != std::string::npos && absl::SimpleAtoi(line->substr(at + 4), &cm)) return cm;
  }
  return absl::UnavailableError(absl::StrCat("which node is the CM: ", last));
}

// Injects the plan's faults, each between two phases (the victims that are gone are started
// again first); counts those injected in r->faults. kill_cm's victim is whichever node is the
// configuration manager when the fault is due.
absl::Status RunFaults(Scenario s, const std::vector<Fault>& plan, ChaosCluster& c,
                       const DriverOptions& o, ScenarioResult* r, std::vector<FaultTimes>* times,
                       std::vector<Resumed>* resumed) {
  std::set<uint32_t> victims;
  for (size_t k = 0; k < plan.size(); ++k) {
    Fault f = plan[k];
    for (uint32_t v : victims) {
      if (!Info(s).restart || c.Alive(v)) continue;
      if (absl::Status st = c.StartAndWait(v); !st.ok()) {
        if (absl::IsCancelled(st)) return st;
        r->notes.push_back(absl::StrCat("node ", v, " could not be started again: ", st.message()));
        return absl::OkStatus();
      }
    }
    if (k > 0 && o.f > 0) {
      if (absl::Status st = WaitReplicated(c, o, r); !st.ok()) return st;
    }
    if (absl::Status st = c.Sleep(absl::Milliseconds(o.duration_ms)); !st.ok()) return st;
    if (HitsCm(s)) {
      absl::StatusOr<uint32_t> cm = CurrentCm(c);
      if (absl::IsCancelled(cm.status())) return cm.status();
      if (!cm.ok()) {
        r->notes.push_back(std::string(cm.status().message()));
        return absl::OkStatus();
      }
      f.victim = *cm;
    }
    FaultTimes t;
    t.fault_ns = MonoNs();
    spdlog::info("{}: fault {} of {}: node {}", Info(s).name, k + 1, plan.size(), f.victim);
    absl::StatusOr<bool> injected = Inject(s, &f, c, o, &r->notes, resumed);
    // The victim may have changed (Inject): the one hit is started again before the next fault.
    victims.insert(f.victim);
    if (f.also != 0) victims.insert(f.also);
    if (!injected.ok()) return injected.status();
    r->faults += *injected;
    if (absl::Status st = c.Sleep(absl::Milliseconds(o.duration_ms)); !st.ok()) return st;
    t.end_ns = MonoNs();
    times->push_back(t);
  }
  return absl::OkStatus();
}

// What a data node read at the end.
struct FinalState {
  std::map<uint64_t, std::optional<uint64_t>> tags;  // nullopt: unreadable
  std::map<uint64_t, int64_t> balances;              // the readable accounts
  bool known = false;                                // the reads finished
};

// Stops every node's clients, then reads every account through the first data node running.
absl::Status StopAndReadFinal(ChaosCluster& c, const DriverOptions& o, ScenarioResult* r,
                              FinalState* final_state) {
  std::vector<uint32_t> alive;
  for (uint32_t id : c.AliveNodes()) {
    if (!c.Failed(id)) alive.push_back(id);
  }
  for (uint32_t id : alive) c.Send(id, "stop").IgnoreError();
  for (uint32_t id : alive) {
    absl::StatusOr<std::string> stopped = c.WaitLine(id, "STOPPED", c.Deadline());
    if (absl::IsCancelled(stopped.status())) return stopped.status();
    if (!stopped.ok()) {
      r->notes.push_back(absl::StrCat("stopping: ", stopped.status().message()));
    } else if (absl::StrContains(*stopped, "HISTORY_FAILED")) {
      r->notes.push_back(absl::StrCat("node ", id, " could not write its whole history"));
    }
  }
  if (alive.empty() || static_cast<int>(alive.front()) >= o.nodes) {
    r->notes.push_back(
        "no data node is left: the final state cannot be read (every commit counts lost)");
    return absl::OkStatus();
  }
  absl::Status st = CollectFinalReads(c, alive.front(), &final_state->tags, &final_state->balances);
  if (absl::IsCancelled(st)) return st;
  final_state->known = st.ok();
  if (!st.ok()) r->notes.push_back(absl::StrCat("final reads: ", st.message()));
  return absl::OkStatus();
}

// Runs one scenario on a fresh cluster. Errors: the cluster could not be set up or did not start,
// or a signal (Cancelled).
absl::StatusOr<ScenarioResult> RunScenario(Scenario s, const DriverOptions& o, int signal_fd) {
  const ScenarioInfo& info = Info(s);
  ScenarioResult r;
  r.scenario = info.name;
  r.provider = o.provider;
  r.f = o.f;
  r.lease_ms = o.lease_ms;
  r.nodes = o.nodes;
  const std::vector<Fault> plan = PlanFaults(s, o.faults, o.nodes, o.lease_ms, o.seed);
  r.faults_planned = static_cast<int>(plan.size());
  if (o.provider == "shm" && s != Scenario::kSigstopShort && s != Scenario::kSigstopLong &&
      s != Scenario::kSigstopCm) {
    r.notes.push_back(
        "shm is not crash-tolerant: a killed process can leave a peer's queue locked (README, "
        "Providers)");
  }
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("chaos");
  if (!dir.ok()) return dir.status();
  // --keep_histories: the nodes' logs, also (above all) of a scenario that failed; copied once
  // the cluster below has stopped (it is destroyed before this), before the directory goes.
  absl::Cleanup keep_logs = [&o, &info, &dir] {
    if (o.keep_histories.empty()) return;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator((*dir)->path(), ec)) {
      const std::string name = e.path().filename().string();
      if (!absl::StartsWith(name, "node-") || !absl::EndsWith(name, ".log")) continue;
      std::error_code copy_ec;
      std::filesystem::copy_file(e.path(),
                                 absl::StrCat(o.keep_histories, "/", info.name, "-", name),
                                 std::filesystem::copy_options::overwrite_existing, copy_ec);
      if (copy_ec) spdlog::warn("chaos: cannot keep {}: {}", name, copy_ec.message());
    }
  };
  // Scenarios that cut nodes off run every node in a network namespace of its own.
  std::unique_ptr<Netns> netns;
  if (info.netns) {
    if (o.provider == "shm") {
      return absl::FailedPreconditionError(
          "shm ignores network namespaces (its processes share memory): use a network provider");
    }
    absl::StatusOr<std::unique_ptr<Netns>> made =
        Netns::Create(o.nodes + (info.client ? 1 : 0), /*host_link=*/HitsCm(s));
    if (!made.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot make the network namespaces: ", made.status().message()));
    }
    netns = std::move(*made);
  }
  // kill_cm, sigstop_cm and partition_cm need a ZooKeeper: the node that takes the configuration
  // manager's role over finds the configuration there. Without --zookeeper one is started for the
  // scenario, on this thread (the server dies with the thread that started it); nodes in network
  // namespaces reach only the one started on the driver's link to their bridge.
  std::unique_ptr<ZooKeeperServer> zk;
  std::string zookeeper = o.zookeeper == "none" ? "" : o.zookeeper;
  if (netns != nullptr && !zookeeper.empty()) {
    r.notes.push_back(
        absl::StrCat("the nodes in network namespaces cannot reach --zookeeper=", zookeeper,
                     HitsCm(s) ? ": a ZooKeeper of the scenario's own is used" : ": none is used"));
    zookeeper.clear();
  }
  if (HitsCm(s) && zookeeper.empty() && o.zookeeper != "none") {
    ZooKeeperServerOptions zo;
    if (netns != nullptr) zo.host = netns->host_address();
    absl::StatusOr<std::unique_ptr<ZooKeeperServer>> started = ZooKeeperServer::Start(zo);
    if (!started.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot start a local ZooKeeper: ", started.status().message()));
    }
    zk = std::move(*started);
    zookeeper = zk->connect_string();
  }
  if (zookeeper.empty() && HitsCm(s)) {
    r.notes.push_back("no ZooKeeper (--zookeeper=none): no node can take the CM's role over");
  }
  ChaosCluster c(o, signal_fd, **dir, info.client, zookeeper,
                 absl::StrCat("chaos-", getpid(), "-", info.name), netns.get());
  if (s == Scenario::kKillAll) c.UseDataDirs();
  if (absl::Status st = c.Configure(); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("cannot configure the cluster: ", st.message()));
  }
  if (absl::Status st = StartCluster(c, o, info.client); !st.ok()) return st;
  if (absl::Status st = c.Sleep(absl::Milliseconds(o.warmup_ms)); !st.ok()) return st;
  std::vector<FaultTimes> times;
  std::vector<Resumed> resumed;
  if (absl::Status st = RunFaults(s, plan, c, o, &r, &times, &resumed); !st.ok()) return st;
  FinalState final_state;
  if (absl::Status st = StopAndReadFinal(c, o, &r, &final_state); !st.ok()) return st;
  c.Finish();
  r.evictions = c.evictions();
  for (const std::string& u : c.unexpected()) r.notes.push_back(u);
  const txn::History h = ReadHistories((*dir)->path(), &r.notes);
  r.kv_checked = o.kv_threads > 0;
  if (r.kv_checked) CheckKvHistories((*dir)->path(), o.timeout_s, &r);
  for (const Resumed& p : resumed) {
    const std::string path =
        absl::StrCat((*dir)->path(), "/history-", p.node, "-", p.pid, ".jsonl");
    for (const txn::TxnRecord& t : MergeRecords(ReadHistoryFile(path, nullptr))) {
      r.resumed_commits += t.outcome == txn::TxnOutcome::kCommitted && t.end_ns > p.cont_ns;
    }
  }
  Analyse(h, final_state.tags, final_state.balances, final_state.known, times, o, &r);
  if (!o.keep_histories.empty()) {
    std::ofstream out(absl::StrCat(o.keep_histories, "/", info.name, ".jsonl"));
    for (const txn::TxnRecord& t : h) out << txn::TxnRecordToJson(t) << "\n";
  }
  return r;
}

// The stopped node's own eviction (it exits on SIGCONT).
bool EvictionsAllowed(Scenario s) {
  return s == Scenario::kSigstopLong || s == Scenario::kSigstopCm || s == Scenario::kPartition ||
         s == Scenario::kPartitionCm;
}

void PrintTableHeader(const DriverOptions& o) {
  std::printf(
      "chaos: provider %s, %d nodes, f=%d, lease %d ms, %d fault(s) per scenario, phases of %d "
      "ms\n",
      o.provider.c_str(), o.nodes, o.f, o.lease_ms, o.faults, o.duration_ms);
  std::printf("%-26s %6s %9s %5s %9s %5s %9s %9s %8s %8s %4s\n", "scenario", "faults", "committed",
              "lost", "anomalies", "unav", "rec p50", "rec p99", "tx/s pre", "tx/s post", "ok");
  std::fflush(stdout);
}

void PrintTableRow(const ScenarioResult& r, bool ok) {
  auto ms = [](const std::optional<double>& v) {
    return v ? absl::StrFormat("%.0f ms", *v) : std::string("never");
  };
  std::printf(
      "%-26s %3d/%-2d %9llu %5llu %9llu %5llu %9s %9s %8.0f %8.0f %4s\n", r.scenario.c_str(),
      r.faults, r.faults_planned, static_cast<unsigned long long>(r.committed),
      static_cast<unsigned long long>(r.lost_commits), static_cast<unsigned long long>(r.anomalies),
      static_cast<unsigned long long>(r.unavailable), ms(r.recovery_ms_p50).c_str(),
      ms(r.recovery_ms_p99).c_str(), r.tput_before, r.tput_after, ok ? "yes" : "NO");
  std::printf("    bank total %s of %lld\n",
              r.bank_total ? absl::StrCat(*r.bank_total).c_str() : "not read",
              static_cast<long long>(r.bank_expected));
  for (const std::string& n : r.notes) std::printf("    note: %s\n", n.c_str());
  if (!r.first_anomaly.empty()) std::printf("    anomaly: %s\n", r.first_anomaly.c_str());
  std::fflush(stdout);
}

int DriverMain() {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "chaos"); !s.ok()) {
    std::fprintf(stderr, "chaos: %s\n", std::string(s.message()).c_str());
    return kExitUsage;
  }
  absl::StatusOr<DriverOptions> o = DriverOptionsFromFlags();
  if (!o.ok()) {
    std::fprintf(stderr, "chaos: %s\n", std::string(o.status().message()).c_str());
    return kExitUsage;
  }
  // Signals are read from a signalfd, so that any wait ends and every node is stopped.
  const int signal_fd = BlockTerminationSignals();
  const bool json = absl::GetFlag(FLAGS_json);
  if (!json) PrintTableHeader(*o);
  int exit_code = 0;
  for (int round = 1; round <= o->rounds; ++round) {
    DriverOptions ro = *o;
    ro.seed = o->seed + static_cast<uint64_t>(round - 1);
    if (!json && o->rounds > 1) {
      std::printf("round %d of %d (seed %llu)\n", round, o->rounds,
                  static_cast<unsigned long long>(ro.seed));
    }
    for (Scenario s : o->scenarios) {
      absl::StatusOr<ScenarioResult> r = RunScenario(s, ro, signal_fd);
      if (!r.ok()) {
        if (absl::IsCancelled(r.status())) {
          spdlog::error("{}: {}; every node was stopped", Info(s).name,
                        std::string(r.status().message()));
          return kExitSignal;
        }
        spdlog::error("{}: {}", Info(s).name, std::string(r.status().message()));
        exit_code = kExitCannotRun;
        continue;
      }
      r->seed = ro.seed;
      r->round = round;
      const bool ok = r->ok(EvictionsAllowed(s));
      if (!ok && exit_code == 0) exit_code = kExitMissed;
      if (json) {
        std::printf("%s\n", ToJsonLine(*r, ok).c_str());
        std::fflush(stdout);
      } else {
        PrintTableRow(*r, ok);
      }
    }
  }
  return exit_code;
}

}  // namespace
}  // namespace chaos
}  // namespace farm

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--role=node") {
      farm::App app;
      app.name = "chaos";
      app.setup = farm::chaos::NodeSetup;
      app.run = farm::chaos::NodeRun;
      return farm::RunNode(argc, argv, app);
    }
  }
  absl::SetProgramUsageMessage(
      "Injects faults into clusters of node processes running a bank and a KV workload, and "
      "checks that no committed transaction is lost, the history is strictly serializable, the "
      "bank's total holds and the KV history is linearizable; measures the recovery of "
      "throughput.\n"
      "  chaos [--provider=tcp;ofi_rxm] [--scenarios=sigstop_short,kill9,...] [--faults=N] "
      "[--nodes=3] [--f=1] [--lease_ms=1000] [--duration_ms=3000] [--seed=1] [--json]\n"
      "Exit status: 0 every scenario met its targets, 1 one did not, 2 bad flags, 3 a scenario "
      "could not run, 130 stopped by a signal.");
  if (!farm::FlagsAreValid("chaos", argc, argv)) return farm::chaos::kExitUsage;
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "chaos: unexpected argument '%s'\n", positional[1]);
    return farm::chaos::kExitUsage;
  }
  if (!absl::GetFlag(FLAGS_role).empty()) {
    std::fprintf(stderr, "chaos: --role: only 'node' (internal) is accepted\n");
    return farm::chaos::kExitUsage;
  }
  return farm::chaos::DriverMain();
}
