// bank: transactions on a cluster. Accounts are objects spread over every node; every node moves
// money between random accounts in transactions while one thread per node audits the bank in
// read-only transactions. Money is never created or lost, so every audit must find the same
// total.
//
//  1. The first member (node 0) creates --accounts accounts of --initial_balance each, placed
//     over the nodes by AllocHint::Anywhere, and publishes their addresses with an RPC
//     (kAccounts). The other nodes call it until it answers that the accounts exist.
//  2. Every node runs --threads transfer threads (Worker::Run) for --duration_s seconds, or
//     --transfers per thread; its main thread audits meanwhile. An audit whose total differs
//     fails the application.
//  3. Every node prints its summary and reports it to node 0 (kReport). Node 0 waits for every
//     member's report, audits once more with nothing moving and prints
//     "bank: total N == expected N" (or fails).
//
//   bazel run //examples:bank_cluster -- --nodes=3
//   bazel run //examples:bank_cluster -- --nodes=3 -- --accounts=20 --threads=1 --duration_s=1
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "farm/farm.h"

ABSL_FLAG(int, accounts, 100, "number of accounts (node 0 creates them, spread over the nodes)");
ABSL_FLAG(int64_t, initial_balance, 1000, "balance of every account at the start");
ABSL_FLAG(int, threads, 2, "transfer threads per node (each holds a Worker; see --workers)");
ABSL_FLAG(double, duration_s, 3, "seconds each transfer thread runs (unless --transfers is set)");
ABSL_FLAG(int64_t, transfers, 0, "transfers per thread; 0: as many as fit in --duration_s");
ABSL_FLAG(int64_t, leak_every, 0,
          "for tests: every Nth transfer of a thread debits without crediting, which the audits "
          "must catch (0: never)");

namespace {

using farm::GlobalAddress;

// One page of the account directory: node 0's answer to kAccounts.
constexpr uint32_t kAccountsPerPage = 256;
struct AccountsPage {
  uint32_t ready = 0;  // 0: the accounts do not exist yet; ask again
  uint32_t total = 0;  // number of accounts
  uint32_t count = 0;  // addresses in this page
  uint32_t unused = 0;
  uint64_t address[kAccountsPerPage] = {};  // GlobalAddress::Pack()
};
// What a node did, sent to node 0 when its transfers are over.
struct NodeReport {
  uint32_t node = 0;
  uint32_t ok = 0;
  uint64_t transfers = 0;  // committed transfers that moved money
  uint64_t declined = 0;   // committed without moving money: insufficient funds
  uint64_t retries = 0;    // transfer attempts that aborted on a conflict and ran again
  uint64_t audits = 0;     // audits that committed and found the right total
  uint64_t audit_retries = 0;
  uint64_t audits_gave_up = 0;  // audits still aborting after Worker::Run's attempts
};

// Request: the index of the first account wanted.
constexpr farm::Method<uint32_t, AccountsPage> kAccounts{1};
// Answer: how many reports node 0 has received.
constexpr farm::Method<NodeReport, uint32_t> kReport{2};

// How long node 0 waits for the other nodes (their accounts fetch, their reports).
constexpr absl::Duration kWaitForPeers = absl::Seconds(300);

// The bank of one node. Setup runs on the main thread, handlers on the handler thread, Run on the
// application thread (and its transfer threads): the directory and the reports are guarded by mu_.
class Bank {
 public:
  absl::Status Setup(farm::Runtime& rt);
  absl::Status Run(farm::Runtime& rt);

 private:
  absl::Status CreateAccounts(farm::Runtime& rt, farm::Worker& w);
  absl::Status FetchAccounts(farm::Worker& w, uint32_t home);
  absl::Status TransfersAndAudits(farm::Runtime& rt, farm::Worker& w, NodeReport* report);
  absl::Status Transfers(farm::Worker& w, uint64_t seed, NodeReport* report);
  // One audit in a read-only transaction: OK and the total, or the error that ended it.
  absl::StatusOr<int64_t> Audit(farm::Worker& w, uint64_t* retries);
  // Node 0: every member's report (each node reports once its transfers are over).
  absl::Status AwaitReports(farm::Runtime& rt, NodeReport* sum);
  void Fail(const absl::Status& s);

  int64_t expected_ = 0;
  std::vector<GlobalAddress> accounts_;  // written before the transfer threads start

  // Node 0's directory and the reports it received.
  std::mutex mu_;
  bool published_ = false;
  absl::Status create_status_;
  std::map<uint32_t, NodeReport> reports_;

  // Transfer threads stop early once anything failed on this node.
  std::atomic<bool> failed_{false};
  std::mutex error_mu_;
  absl::Status first_error_;
};

absl::Status Bank::Setup(farm::Runtime& rt) {
  if (absl::GetFlag(FLAGS_accounts) < 2)
    return absl::InvalidArgumentError("--accounts must be >= 2");
  if (absl::GetFlag(FLAGS_initial_balance) < 0)
    return absl::InvalidArgumentError("--initial_balance must not be negative");
  if (absl::GetFlag(FLAGS_threads) < 1) return absl::InvalidArgumentError("--threads must be >= 1");
  if (absl::GetFlag(FLAGS_transfers) < 0 || absl::GetFlag(FLAGS_leak_every) < 0)
    return absl::InvalidArgumentError("--transfers and --leak_every must not be negative");
  if (absl::GetFlag(FLAGS_transfers) == 0 && !(absl::GetFlag(FLAGS_duration_s) > 0))
    return absl::InvalidArgumentError("--duration_s must be positive (or set --transfers)");
  expected_ = absl::GetFlag(FLAGS_accounts) * absl::GetFlag(FLAGS_initial_balance);
  // Only the first member answers these; registering them everywhere is harmless.
  absl::Status s =
      kAccounts.Serve(rt, [this](uint32_t, const uint32_t& first) -> absl::StatusOr<AccountsPage> {
        std::lock_guard<std::mutex> l(mu_);
        if (!create_status_.ok()) return create_status_;
        AccountsPage page;
        if (!published_) return page;
        page.ready = 1;
        page.total = static_cast<uint32_t>(accounts_.size());
        for (uint32_t i = first; i < accounts_.size() && page.count < kAccountsPerPage; ++i) {
          page.address[page.count++] = accounts_[i].Pack();
        }
        return page;
      });
  if (!s.ok()) return s;
  return kReport.Serve(rt, [this](uint32_t, const NodeReport& r) -> absl::StatusOr<uint32_t> {
    std::lock_guard<std::mutex> l(mu_);
    reports_[r.node] = r;
    return static_cast<uint32_t>(reports_.size());
  });
}

// Node 0: the accounts, a few per transaction (a transaction's size is bounded by its messages).
absl::Status Bank::CreateAccounts(farm::Runtime& rt, farm::Worker& w) {
  const int n = absl::GetFlag(FLAGS_accounts);
  const int64_t initial = absl::GetFlag(FLAGS_initial_balance);
  std::vector<GlobalAddress> made;
  for (int first = 0; first < n; first += 64) {
    std::vector<GlobalAddress> batch;
    absl::Status s = w.Run([&](farm::Txn& t) -> absl::Status {
      batch.clear();
      for (int i = first; i < std::min(n, first + 64); ++i) {
        absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(int64_t), farm::AllocHint::Anywhere(i));
        if (!a.ok()) return a.status();
        if (absl::Status s = t.Put(*a, initial); !s.ok()) return s;
        batch.push_back(*a);
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    made.insert(made.end(), batch.begin(), batch.end());
  }
  // Where they went: region id -> owner.
  std::map<uint32_t, uint32_t> owner;
  std::map<uint32_t, int> per_node;
  for (uint32_t m : rt.members()) {
    per_node[m] = 0;
    for (const farm::RegionRef& r : rt.Regions(m)) owner[r.id] = m;
  }
  for (const GlobalAddress& a : made) ++per_node[owner[a.region]];
  std::printf(
      "bank: node %u created %d accounts of %lld on nodes %s (%s accounts)\n", rt.node_id(), n,
      static_cast<long long>(initial), absl::StrJoin(rt.members(), ", ").c_str(),
      absl::StrJoin(per_node, ", ",
                    absl::PairFormatter(absl::AlphaNumFormatter(), ": ", absl::AlphaNumFormatter()))
          .c_str());
  std::fflush(stdout);
  std::lock_guard<std::mutex> l(mu_);
  accounts_ = std::move(made);
  published_ = true;
  return absl::OkStatus();
}

// The other nodes: node 0's directory, page by page, once it answers that it is ready.
absl::Status Bank::FetchAccounts(farm::Worker& w, uint32_t home) {
  const absl::Time deadline = absl::Now() + kWaitForPeers;
  std::vector<GlobalAddress> got;
  for (;;) {
    absl::StatusOr<AccountsPage> page = kAccounts.Call(w, home, static_cast<uint32_t>(got.size()));
    if (!page.ok()) return page.status();
    if (!page->ready) {
      if (absl::Now() > deadline)
        return absl::DeadlineExceededError(
            absl::StrCat("node ", home, " never published its accounts"));
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    for (uint32_t i = 0; i < page->count; ++i)
      got.push_back(GlobalAddress::Unpack(page->address[i]));
    if (got.size() >= page->total || page->count == 0) break;
  }
  if (got.size() != static_cast<size_t>(absl::GetFlag(FLAGS_accounts))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", home, " has ", got.size(), " accounts, this node was told --accounts=",
        absl::GetFlag(FLAGS_accounts), ": run every node with the same flags"));
  }
  std::printf("bank: node %u fetched %zu account addresses from node %u\n", w.node_id(), got.size(),
              home);
  std::fflush(stdout);
  accounts_ = std::move(got);
  return absl::OkStatus();
}

void Bank::Fail(const absl::Status& s) {
  std::lock_guard<std::mutex> l(error_mu_);
  if (first_error_.ok()) first_error_ = s;
  failed_.store(true, std::memory_order_relaxed);
}

// One transfer thread: random amounts between random pairs of accounts until the time or the
// count is up. Worker::Run runs a transaction again when it aborts; counting the calls of the
// function counts those retries.
absl::Status Bank::Transfers(farm::Worker& w, uint64_t seed, NodeReport* report) {
  std::mt19937_64 rng(seed);
  const int64_t count = absl::GetFlag(FLAGS_transfers);
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  const int64_t leak_every = absl::GetFlag(FLAGS_leak_every);
  const size_t n = accounts_.size();
  for (int64_t i = 0; count > 0 ? i < count : absl::Now() < end; ++i) {
    if (failed_.load(std::memory_order_relaxed)) return absl::OkStatus();
    const size_t i_from = rng() % n;
    const GlobalAddress from = accounts_[i_from];
    const GlobalAddress to = accounts_[(i_from + 1 + rng() % (n - 1)) % n];  // another account
    const int64_t amount = 1 + rng() % 100;
    const bool leak = leak_every > 0 && i % leak_every == leak_every - 1;
    int attempts = 0;
    bool moved = false;
    absl::Status s = w.Run([&](farm::Txn& t) -> absl::Status {
      ++attempts;
      absl::StatusOr<int64_t> a = t.Get<int64_t>(from);
      if (!a.ok()) return a.status();
      absl::StatusOr<int64_t> b = t.Get<int64_t>(to);
      if (!b.ok()) return b.status();
      moved = *a >= amount;
      if (!moved) return absl::OkStatus();  // insufficient funds: commits the reads only
      if (absl::Status s = t.Put(from, *a - amount); !s.ok()) return s;
      return t.Put(to, *b + (leak ? 0 : amount));
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("a transfer failed: ", s.message()));
    report->retries += attempts - 1;
    ++(moved ? report->transfers : report->declined);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Bank::Audit(farm::Worker& w, uint64_t* retries) {
  int64_t total = 0;
  int attempts = 0;
  absl::Status s = w.Run([&](farm::Txn& t) -> absl::Status {
    ++attempts;
    total = 0;
    for (const GlobalAddress& a : accounts_) {
      absl::StatusOr<int64_t> balance = t.Get<int64_t>(a);
      if (!balance.ok()) return balance.status();
      if (*balance < 0)
        return absl::InternalError(absl::StrCat("account ", a.ToString(), " holds ", *balance));
      total += *balance;
    }
    return absl::OkStatus();
  });
  *retries += attempts - 1;
  if (!s.ok()) return s;
  return total;
}

absl::Status Bank::AwaitReports(farm::Runtime& rt, NodeReport* sum) {
  const absl::Time deadline = absl::Now() + kWaitForPeers;
  for (;;) {
    std::vector<uint32_t> missing;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (uint32_t m : rt.members()) {
        if (reports_.count(m) == 0) missing.push_back(m);
      }
      if (missing.empty()) {
        for (const auto& [node, r] : reports_) {
          sum->transfers += r.transfers;
          sum->declined += r.declined;
          sum->retries += r.retries;
          sum->audits += r.audits;
        }
        return absl::OkStatus();
      }
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no report from node(s) ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Transfer threads, each with a Worker of its own, while this thread audits with `w`. Returns the
// first error on this node; `report` counts what was done either way.
absl::Status Bank::TransfersAndAudits(farm::Runtime& rt, farm::Worker& w, NodeReport* report) {
  const int nthreads = absl::GetFlag(FLAGS_threads);
  std::vector<std::unique_ptr<farm::Worker>> workers;
  for (int i = 0; i < nthreads; ++i) {
    absl::StatusOr<std::unique_ptr<farm::Worker>> tw = rt.NewWorker();
    if (!tw.ok()) {
      return absl::Status(
          tw.status().code(),
          absl::StrCat("the Worker of transfer thread ", i + 1, " of ", nthreads,
                       " (a node holds --threads + 1 Workers): ", tw.status().message()));
    }
    workers.push_back(std::move(*tw));
  }
  std::vector<NodeReport> thread_reports(nthreads);
  std::atomic<int> running{nthreads};
  std::vector<std::thread> threads;
  const uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^ rt.node_id();
  for (int i = 0; i < nthreads; ++i) {
    threads.emplace_back([&, i] {
      absl::Status s = Transfers(*workers[i], seed + 7919 * i, &thread_reports[i]);
      if (!s.ok()) Fail(s);
      running.fetch_sub(1, std::memory_order_release);
    });
  }
  while (running.load(std::memory_order_acquire) > 0 && !failed_.load(std::memory_order_relaxed)) {
    absl::StatusOr<int64_t> total = Audit(w, &report->audit_retries);
    if (absl::IsAborted(total.status())) {
      ++report->audits_gave_up;  // kept conflicting with transfers for all of Run's attempts
    } else if (!total.ok()) {
      Fail(absl::Status(total.status().code(),
                        absl::StrCat("an audit failed: ", total.status().message())));
    } else if (*total != expected_) {
      Fail(absl::InternalError(
          absl::StrCat("an audit found a total of ", *total, ", expected ", expected_)));
    } else {
      ++report->audits;
    }
  }
  for (std::thread& t : threads) t.join();
  for (const NodeReport& r : thread_reports) {
    report->transfers += r.transfers;
    report->declined += r.declined;
    report->retries += r.retries;
  }
  std::lock_guard<std::mutex> l(error_mu_);
  return first_error_;
}

absl::Status Bank::Run(farm::Runtime& rt) {
  const uint32_t self = rt.node_id();
  const uint32_t home = rt.members().front();
  absl::StatusOr<std::unique_ptr<farm::Worker>> main = rt.NewWorker();
  if (!main.ok()) return main.status();
  farm::Worker& w = **main;
  absl::Status s;
  if (self == home) {
    s = CreateAccounts(rt, w);
    if (!s.ok()) {
      s = absl::Status(s.code(), absl::StrCat("creating the accounts: ", s.message()));
      std::lock_guard<std::mutex> l(mu_);
      create_status_ = s;  // the other nodes' FetchAccounts fail with it
      return s;
    }
  } else {
    s = FetchAccounts(w, home);
  }
  NodeReport report;
  report.node = self;
  if (s.ok()) {
    s = TransfersAndAudits(rt, w, &report);
    std::printf(
        "bank: node %u: %d threads, %llu transfers committed (%llu declined: insufficient funds, "
        "%llu aborted and retried), %llu audits passed (%llu aborted and retried)%s\n",
        self, absl::GetFlag(FLAGS_threads), static_cast<unsigned long long>(report.transfers),
        static_cast<unsigned long long>(report.declined),
        static_cast<unsigned long long>(report.retries),
        static_cast<unsigned long long>(report.audits),
        static_cast<unsigned long long>(report.audit_retries),
        report.audits_gave_up == 0
            ? ""
            : absl::StrCat(" (", report.audits_gave_up, " gave up under contention)").c_str());
    std::fflush(stdout);
  }
  // Node 0 waits for every node's report before its final audit, so a node reports even when it
  // failed (its transfers are over either way).
  report.ok = s.ok();
  if (absl::StatusOr<uint32_t> r = kReport.Call(w, home, report); !r.ok() && s.ok()) {
    s = absl::Status(r.status().code(),
                     absl::StrCat("reporting to node ", home, ": ", r.status().message()));
  }
  if (!s.ok() || self != home) return s;

  // Node 0: once every node's transfers are over, nothing moves; the last audit must balance.
  NodeReport sum;
  if (absl::Status s = AwaitReports(rt, &sum); !s.ok()) return s;
  std::printf(
      "bank: %zu nodes: %llu transfers committed (%llu declined: insufficient funds, %llu aborted "
      "and retried), %llu audits passed\n",
      rt.members().size(), static_cast<unsigned long long>(sum.transfers),
      static_cast<unsigned long long>(sum.declined), static_cast<unsigned long long>(sum.retries),
      static_cast<unsigned long long>(sum.audits));
  uint64_t retries = 0;
  absl::StatusOr<int64_t> total = Audit(w, &retries);
  if (!total.ok()) return total.status();
  std::printf("bank: total %lld %s expected %lld\n", static_cast<long long>(*total),
              *total == expected_ ? "==" : "!=", static_cast<long long>(expected_));
  std::fflush(stdout);
  if (*total != expected_) return absl::InternalError("the final audit does not balance");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Bank bank;
  farm::App app;
  app.name = "bank";
  app.setup = [&bank](farm::Runtime& rt) { return bank.Setup(rt); };
  app.run = [&bank](farm::Runtime& rt) { return bank.Run(rt); };
  return farm::RunNode(argc, argv, app);
}
