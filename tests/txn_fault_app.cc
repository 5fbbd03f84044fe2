// A cluster application for tests/txn_fault_test.sh: a node dies in the middle of a commit and the
// survivors must abort the transaction, release its locks and say so, without hanging. Which
// node dies where is chosen by the environment (the cluster tool passes it to every node):
//
//   TXN_FAULT=participant        node 0 commits a transaction writing x (node 1) and y (node 2);
//                                node 2 exits (status 17) right after locking y, before it
//                                answers. Node 0's commit must fail with a clear error, and x
//                                must be unlocked and unchanged afterwards.
//   TXN_FAULT=coordinator-lock   node 1 commits a transaction writing x (node 0) and y (node 2)
//   TXN_FAULT=coordinator-validate  and exits after LOCK (or after validation) with the locks
//                                held. Node 0 must be able to write x and y once membership says
//                                node 1 is gone, and find them unchanged.
//   TXN_FAULT=coordinator-commit node 1 commits the same transaction; its COMMIT-PRIMARY to node 2
//                                is dropped (as a back-pressured send would fail) and it exits
//                                right after node 0 acknowledged its own. The commit is decided and
//                                half-applied: node 2 must settle it with node 0 and commit its
//                                part too, so node 0 finds x = 1 and y = 2 (never x = 1, y = 200).
//   TXN_FAULT=coordinator-evicted  the same, but node 1 does not die: it stops itself (SIGSTOP)
//                                after node 0's acknowledgement, the CM evicts it when its lease
//                                expires, the owners settle the transaction (x = 1, y = 2), then
//                                node 0 resumes node 1 (SIGCONT), whose late decisions must change
//                                nothing; node 1 exits as an evicted node does (status 3).
//   TXN_FAULT=coordinator-lease  node 1 commits the same transaction and stops itself (SIGSTOP)
//                                after validation, before its decision, with x and y locked.
//                                The CM (on node 0) sees its lease expire but holds the eviction
//                                back (as a CM scheduled late would), and node 1 holds back its
//                                own; node 0 then resumes node 1, which is still listed as a member
//                                everywhere but whose lease has ended: it must not decide (its
//                                commit fails with Unavailable naming the lease, and x and y keep
//                                100 and 200). It then exits as an evicted node does (status 3).
//
// The dying node arms its sync point (platform/sync_point.h) only when told to, so that the set-up
// transactions pass. Node 0 prints "RESULT ..." lines that the test checks.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "farm/farm.h"
#include "platform/sync_point.h"
#include "txn/protocol.h"
#include "txn/transaction.h"

namespace {

constexpr int kDeathStatus = 17;
struct Objects {
  farm::GlobalAddress x, y;
};
// Node 0 -> dying node: arm your sync point now.
constexpr farm::Method<int32_t, int32_t> kArm{1};
// Node 1 (coordinator scenarios) -> node 0: the objects, once they exist.
constexpr farm::Method<int32_t, Objects> kObjects{2};

// Node 0's objects, published to node 1 through kObjects once they exist; node 1 sends its pid
// with the request (coordinator-evicted: node 0 resumes it).
std::atomic<int32_t> g_coordinator_pid{0};
std::atomic<bool> g_published{false};
Objects g_objects;
// coordinator-lease: node 0's CM holds node 1's expiry (held: it did; released: evict it now);
// node 1 holds its own eviction until its commit returned.
std::atomic<bool> g_expiry_held{false};
std::atomic<bool> g_expiry_released{false};
std::atomic<bool> g_commit_returned{false};

std::string Scenario() {
  const char* s = std::getenv("TXN_FAULT");
  return s == nullptr ? "" : s;
}

void ArmDeath(const std::string& point) {
  farm::SyncPoint* sp = farm::SyncPoint::GetInstance();
  sp->SetCallBack(point, [point](void*) {
    std::printf("dying at %s\n", point.c_str());
    std::fflush(stdout);
    _exit(kDeathStatus);
  });
  sp->EnableProcessing();
}

absl::Status Check(bool ok, const std::string& what) {
  std::printf("RESULT %s: %s\n", what.c_str(), ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

absl::StatusOr<Objects> Create(farm::Worker& w, uint32_t x_node, uint32_t y_node) {
  Objects o;
  absl::Status s = w.Run([&](farm::Txn& t) -> absl::Status {
    absl::StatusOr<farm::GlobalAddress> x = t.Alloc(8, farm::AllocHint::OnNode(x_node));
    absl::StatusOr<farm::GlobalAddress> y = t.Alloc(8, farm::AllocHint::OnNode(y_node));
    if (!x.ok()) return x.status();
    if (!y.ok()) return y.status();
    o = Objects{*x, *y};
    if (absl::Status p = t.Put(*x, int64_t{100}); !p.ok()) return p;
    return t.Put(*y, int64_t{200});
  });
  if (!s.ok()) return s;
  return o;
}

// Waits (bounded) until `node` is no longer a member.
absl::Status WaitGone(farm::Runtime& rt, uint32_t node) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (;;) {
    bool member = false;
    for (uint32_t m : rt.members()) member = member || m == node;
    if (!member) return absl::OkStatus();
    if (absl::Now() > deadline) return absl::DeadlineExceededError("node did not leave");
    absl::SleepFor(absl::Milliseconds(10));
  }
}

// Node 1's commit in the coordinator-commit scenario: COMMIT-PRIMARY to node 2 never leaves, and
// node 1 exits once node 0 acknowledged its own.
void ArmHalfCommit(bool stop) {
  farm::SyncPoint* sp = farm::SyncPoint::GetInstance();
  sp->SetCallBack("Transaction::Decide:Send", [](void* arg) {
    auto* probe = static_cast<farm::txn::DecisionProbe*>(arg);
    if (probe->method == farm::txn::kCommitMethod && probe->owner == 2) probe->drop = true;
  });
  sp->SetCallBack("Transaction::Decide:Acked", [stop](void* arg) {
    if (*static_cast<uint32_t*>(arg) != 0) return;
    if (stop) {
      std::printf("stopping at Transaction::Decide:Acked (node 0 committed, node 2 not told)\n");
      std::fflush(stdout);
      raise(SIGSTOP);  // until node 0 sends SIGCONT, after the eviction and the recovery
      std::printf("resumed after the eviction\n");
      std::fflush(stdout);
      return;
    }
    std::printf("dying at Transaction::Decide:Acked (node 0 committed, node 2 not told)\n");
    std::fflush(stdout);
    _exit(kDeathStatus);
  });
  sp->EnableProcessing();
}

// Waits up to `limit` for `flag`.
bool WaitFor(const std::atomic<bool>& flag, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (!flag.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return flag.load();
}

// coordinator-lease, node 0: the CM keeps node 1 a member after its lease expired, until released.
void ArmExpiryHold() {
  farm::SyncPoint* sp = farm::SyncPoint::GetInstance();
  sp->SetCallBack("CmServer::Expire", [](void* arg) {
    auto* expire = static_cast<std::pair<uint32_t, bool>*>(arg);
    if (expire->first != 1 || g_expiry_released.load()) return;
    expire->second = false;
    g_expiry_held.store(true);
  });
  sp->EnableProcessing();
}

// coordinator-lease, node 1: stops before the decision; once resumed, its own eviction (its
// heartbeat thread finds the lease expired) waits until the commit returned.
void ArmStaleCoordinator() {
  farm::SyncPoint* sp = farm::SyncPoint::GetInstance();
  sp->SetCallBack("Transaction::Commit:AfterValidate", [](void*) {
    std::printf("stopping at Transaction::Commit:AfterValidate (x and y locked)\n");
    std::fflush(stdout);
    raise(SIGSTOP);  // until node 0 sends SIGCONT, once the CM saw the lease expire
    std::printf("resumed with an expired lease\n");
    std::fflush(stdout);
  });
  sp->SetCallBack("TcpConfigurationManager::Evict",
                  [](void*) { WaitFor(g_commit_returned, absl::Seconds(20)); });
  sp->EnableProcessing();
}

// x and y hold `x_want` and `y_want` (y only if its owner is alive), and a transaction can write
// both (no lock was left behind).
absl::Status CheckValuesAndWritable(farm::Worker& w, const Objects& o, bool y_alive,
                                    int64_t x_want, int64_t y_want) {
  absl::StatusOr<int64_t> x = w.LockFreeGet<int64_t>(o.x);
  absl::Status s = Check(x.ok() && *x == x_want,
                         absl::StrCat("x is ", x_want, " (", x.ok() ? absl::StrCat(*x) : x.status().ToString(), ")"));
  if (!s.ok()) return s;
  if (y_alive) {
    absl::StatusOr<int64_t> y = w.LockFreeGet<int64_t>(o.y);
    s = Check(y.ok() && *y == y_want,
              absl::StrCat("y is ", y_want, " (", y.ok() ? absl::StrCat(*y) : y.status().ToString(), ")"));
    if (!s.ok()) return s;
  }
  const absl::Time start = absl::Now();
  absl::Status write = w.Run([&](farm::Txn& t) -> absl::Status {
    if (absl::Status p = t.Put(o.x, int64_t{101}); !p.ok()) return p;
    return y_alive ? t.Put(o.y, int64_t{201}) : absl::OkStatus();
  });
  return Check(write.ok(), absl::StrCat("locks released: a new transaction committed after ",
                                        absl::FormatDuration(absl::Now() - start),
                                        write.ok() ? "" : absl::StrCat(" — ", write.ToString())));
}

// Both objects still hold their initial values, and are writable.
absl::Status CheckUnchangedAndWritable(farm::Worker& w, const Objects& o, bool y_alive) {
  return CheckValuesAndWritable(w, o, y_alive, 100, 200);
}

absl::Status ParticipantDies(farm::Runtime& rt, farm::Worker& w) {
  if (rt.node_id() != 0) return absl::OkStatus();  // node 2 dies when armed; node 1 serves
  absl::StatusOr<Objects> o = Create(w, 1, 2);
  if (!o.ok()) return o.status();
  absl::StatusOr<int32_t> armed = kArm.Call(w, 2, 0);
  if (!armed.ok()) return armed.status();
  std::unique_ptr<farm::Txn> t = w.Begin();
  if (absl::Status s = t->Put(o->x, int64_t{1}); !s.ok()) return s;
  if (absl::Status s = t->Put(o->y, int64_t{2}); !s.ok()) return s;
  const absl::Time start = absl::Now();
  absl::Status commit = t->Commit();
  std::printf("commit returned after %s: %s\n",
              absl::FormatDuration(absl::Now() - start).c_str(), commit.ToString().c_str());
  absl::Status s = Check(!commit.ok() && (absl::IsUnavailable(commit) || absl::IsAborted(commit)),
                         "commit failed with a clear error");
  if (!s.ok()) return s;
  if (absl::Status g = WaitGone(rt, 2); !g.ok()) return g;
  return CheckUnchangedAndWritable(w, *o, /*y_alive=*/false);
}

absl::Status CoordinatorDies(farm::Runtime& rt, farm::Worker& w, const std::string& point) {
  if (rt.node_id() == 2) return absl::OkStatus();
  if (rt.node_id() == 0) {
    absl::StatusOr<Objects> o = Create(w, 0, 2);
    if (!o.ok()) return o.status();
    g_objects = *o;
    g_published.store(true, std::memory_order_release);  // kObjects answers from now on
    if (point == "lease") {
      if (!WaitFor(g_expiry_held, absl::Seconds(60))) {
        return absl::DeadlineExceededError("the CM never saw node 1's lease expire");
      }
      const int32_t pid = g_coordinator_pid.load();
      if (pid <= 0 || kill(pid, SIGCONT) != 0) return absl::InternalError("cannot resume node 1");
      std::printf("node 1 resumed while the CM holds its eviction back\n");
      std::fflush(stdout);
      absl::Status gone = WaitGone(rt, 1);  // it exits, evicted by itself
      g_expiry_released.store(true);
      if (!gone.ok()) return gone;
      std::printf("node 1 is gone\n");
      return CheckUnchangedAndWritable(w, *o, /*y_alive=*/true);
    }
    if (absl::Status g = WaitGone(rt, 1); !g.ok()) return g;
    std::printf("node 1 is gone\n");
    if (point == "commit") return CheckValuesAndWritable(w, *o, /*y_alive=*/true, 1, 2);
    if (point == "evicted") {
      if (absl::Status s = CheckValuesAndWritable(w, *o, /*y_alive=*/true, 1, 2); !s.ok()) return s;
      // Resume the evicted coordinator: its late COMMIT-PRIMARY (or anything else it still
      // sends) must change nothing now.
      const int32_t pid = g_coordinator_pid.load();
      if (pid <= 0 || kill(pid, SIGCONT) != 0) return absl::InternalError("cannot resume node 1");
      absl::SleepFor(absl::Seconds(1));  // room for its late messages; nothing waits on them
      absl::StatusOr<int64_t> x = w.LockFreeGet<int64_t>(o->x);
      absl::StatusOr<int64_t> y = w.LockFreeGet<int64_t>(o->y);
      return Check(x.ok() && y.ok() && *x == 101 && *y == 201,
                   "the resumed coordinator changed nothing");
    }
    return CheckUnchangedAndWritable(w, *o, /*y_alive=*/true);
  }
  // Node 1: fetch the objects (node 0 answers once they exist), arm, commit, die.
  absl::StatusOr<Objects> o;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!(o = kObjects.Call(w, 0, static_cast<int32_t>(getpid()))).ok()) {
    if (absl::Now() > deadline) return o.status();
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (point == "commit" || point == "evicted") {
    ArmHalfCommit(point == "evicted");
  } else if (point == "lease") {
    ArmStaleCoordinator();
  } else {
    ArmDeath(point);
  }
  std::unique_ptr<farm::Txn> t = w.Begin();
  if (absl::Status s = t->Put(o->x, int64_t{1}); !s.ok()) return s;
  if (absl::Status s = t->Put(o->y, int64_t{2}); !s.ok()) return s;
  absl::Status s = t->Commit();
  if (point == "lease") {
    std::printf("commit after resuming: %s\n", s.ToString().c_str());
    std::fflush(stdout);
    g_commit_returned.store(true);
    absl::SleepFor(absl::Seconds(30));  // the eviction ends this process (status 3) meanwhile
    return absl::InternalError("node 1 was not evicted after its lease expired");
  }
  return absl::InternalError(absl::StrCat("node 1 should have died at ", point, "; commit: ",
                                          s.ToString()));
}

}  // namespace

int main(int argc, char** argv) {
  farm::App app;
  app.name = "txn_fault";
  app.setup = [](farm::Runtime& rt) -> absl::Status {
    if (absl::Status s = kArm.Serve(rt, [](uint32_t, const int32_t&) -> absl::StatusOr<int32_t> {
          ArmDeath("Participant::Lock:Locked");
          return 0;
        });
        !s.ok()) {
      return s;
    }
    return kObjects.Serve(rt, [](uint32_t, const int32_t& pid) -> absl::StatusOr<Objects> {
      g_coordinator_pid.store(pid);
      if (!g_published.load(std::memory_order_acquire)) {
        return absl::UnavailableError("the objects do not exist yet");
      }
      return g_objects;
    });
  };
  app.run = [](farm::Runtime& rt) -> absl::Status {
    absl::StatusOr<std::unique_ptr<farm::Worker>> w = rt.NewWorker();
    if (!w.ok()) return w.status();
    const std::string scenario = Scenario();
    if (scenario == "participant") return ParticipantDies(rt, **w);
    if (scenario == "coordinator-lock") {
      return CoordinatorDies(rt, **w, "Transaction::Commit:AfterLock");
    }
    if (scenario == "coordinator-validate") {
      return CoordinatorDies(rt, **w, "Transaction::Commit:AfterValidate");
    }
    if (scenario == "coordinator-commit") return CoordinatorDies(rt, **w, "commit");
    if (scenario == "coordinator-evicted") return CoordinatorDies(rt, **w, "evicted");
    if (scenario == "coordinator-lease") {
      if (rt.node_id() == 0) ArmExpiryHold();
      return CoordinatorDies(rt, **w, "lease");
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown TXN_FAULT '", scenario, "'"));
  };
  return farm::RunNode(argc, argv, app);
}
