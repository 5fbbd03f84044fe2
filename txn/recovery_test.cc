// The recovery vote's rule (txn/recovery.h), case by case, and its messages' encoding.
#include "txn/recovery.h"

#include <catch2/catch.hpp>

namespace farm {
namespace txn {
namespace {

const TxnId kTxn{9, 4, 17};

// Regions 1 (primary node 1, backup node 2) and 2 (primary node 3, backup node 4), as the
// coordinator saw them at COMMIT-BACKUP.
std::vector<WrittenRegion> Written() { return {{1, 1, {2}}, {2, 3, {4}}}; }

TxnVote Locked(uint32_t region) {
  TxnVote v;
  v.txn = kTxn;
  v.owner = SettleState::kUndecided;
  v.locked = {region};
  return v;
}
TxnVote Recorded(uint32_t region) {
  TxnVote v;
  v.txn = kTxn;
  v.recorded = {region};
  v.written = Written();
  return v;
}
// The member truncated it (applied its record and dropped it).
TxnVote Truncated() {
  TxnVote v;
  v.txn = kTxn;
  v.truncated = true;
  return v;
}
TxnVote Owner(SettleState s) {
  TxnVote v;
  v.txn = kTxn;
  v.owner = s;
  return v;
}

RecoveryView View(uint32_t primary1, uint32_t primary2, std::vector<uint32_t> members) {
  RecoveryView v;
  v.primary[1] = primary1;
  v.primary[2] = primary2;
  v.members.insert(members.begin(), members.end());
  return v;
}

bool Commits(const std::vector<std::pair<uint32_t, TxnVote>>& votes, const RecoveryView& view) {
  const RecoveryOutcome o = RecoveryDecision(votes, view);
  INFO(o.why);
  return o.commit;
}

TEST_CASE("a recorded decision stands, then an owner's commit") {
  TxnVote d = Owner(SettleState::kUnknown);
  d.decided = Decided::kAbort;
  CHECK_FALSE(Commits({{1, Owner(SettleState::kCommitted)}, {2, d}}, View(1, 3, {1, 2, 3, 4})));
  d.decided = Decided::kCommit;
  CHECK(Commits({{1, Locked(1)}, {2, d}}, View(1, 3, {1, 2, 3, 4})));
  CHECK(Commits({{1, Owner(SettleState::kCommitted)}, {3, Locked(2)}}, View(1, 3, {1, 2, 3, 4})));
  CHECK_FALSE(Commits({{1, Owner(SettleState::kAborted)}, {3, Locked(2)}, {2, Recorded(1)}},
                      View(1, 3, {1, 2, 3, 4})));
}

TEST_CASE("without a COMMIT-BACKUP record a transaction aborts") {
  CHECK_FALSE(Commits({{1, Locked(1)}, {3, Locked(2)}}, View(1, 3, {1, 2, 3, 4})));
}

TEST_CASE("an owner that applied it and failed with the coordinator: it commits") {
  // Node 1 applied COMMIT-PRIMARY (readers saw it) and left; node 2's copy of region 1 was
  // promoted with the record; node 3 still locks region 2 and node 4 keeps its record.
  CHECK(Commits({{2, Recorded(1)}, {3, Locked(2)}, {4, Recorded(2)}}, View(2, 3, {2, 3, 4})));
  // Every record in place, every owner locked, nobody applied yet: commit too.
  CHECK(Commits({{1, Locked(1)}, {2, Recorded(1)}, {3, Locked(2)}, {4, Recorded(2)}},
                View(1, 3, {1, 2, 3, 4})));
}

TEST_CASE("a partial COMMIT-BACKUP aborts") {
  // Node 4 never got its record (the coordinator failed between COMMIT-BACKUPs).
  CHECK_FALSE(
      Commits({{1, Locked(1)}, {2, Recorded(1)}, {3, Locked(2)}}, View(1, 3, {1, 2, 3, 4})));
  // Region 1's primary failed and its backup, promoted, has no record: its objects are not
  // locked there, so nothing can be applied there.
  CHECK_FALSE(Commits({{3, Locked(2)}, {4, Recorded(2)}}, View(2, 3, {2, 3, 4})));
  // A backup the records went to that left does not count.
  CHECK(Commits({{1, Locked(1)}, {2, Recorded(1)}, {3, Locked(2)}}, View(1, 3, {1, 2, 3})));
  // A region lost with all its copies cannot take the writes.
  RecoveryView lost = View(1, 3, {1, 3});
  lost.primary.erase(2);
  CHECK_FALSE(Commits({{1, Locked(1)}, {2, Recorded(1)}}, lost));
}

TEST_CASE("nobody locks it and a record remains: its owners applied it") {
  // Region 2's primary applied and truncated it; node 2 still keeps region 1's record.
  CHECK(Commits({{2, Recorded(1)}}, View(1, 3, {1, 2, 3, 4})));
  // Both primaries that locked it left; both promoted backups keep the record.
  CHECK(Commits({{2, Recorded(1)}, {4, Recorded(2)}}, View(2, 4, {2, 4})));
  // One of them truncated it: the coordinator, the only owner, applied it and truncated that
  // backup before it failed (chaos kill_cm lost a committed write when this aborted).
  CHECK(Commits({{2, Recorded(1)}, {4, Truncated()}}, View(2, 4, {2, 4})));
  // Region 2's primary is a backup added after COMMIT-BACKUP (not one the records went to): it
  // copied the region after its primary applied the transaction.
  CHECK(Commits({{2, Recorded(1)}}, View(2, 5, {2, 5})));
}

TEST_CASE("nobody locks it and a promoted backup never got its record: it aborts") {
  // The coordinator, the only owner, failed between its two COMMIT-BACKUPs: node 2 keeps the
  // record, node 4 (promoted for region 2) neither keeps nor truncated it. No COMMIT-PRIMARY was
  // sent, so nobody saw the writes; committing would apply region 1's half only.
  CHECK_FALSE(Commits({{2, Recorded(1)}}, View(2, 4, {2, 4})));
  // The same when region 1's primary survived and never locked anything of it since (it applied
  // nothing: the transaction was never committed at an owner).
  CHECK_FALSE(Commits({{2, Recorded(1)}}, View(1, 4, {1, 2, 4})));
  // A truncation by a backup that is not region 2's primary says nothing of region 2.
  CHECK_FALSE(Commits({{2, Recorded(1)}, {2, Truncated()}}, View(2, 4, {2, 4})));
}

TEST_CASE("RECOVER messages round-trip and refuse corruption") {
  RecoverRequest r{RecoverOp::kRecord, 7, 12, 40, {{kTxn, true}, {TxnId{7, 11, 3}, false}}};
  absl::StatusOr<RecoverRequest> back = DecodeRecover(EncodeRecover(r));
  REQUIRE(back.ok());
  CHECK(back->op == RecoverOp::kRecord);
  CHECK(back->coordinator == 7);
  CHECK(back->fence_epoch == 12);
  CHECK(back->epoch == 40);
  CHECK(back->decisions == r.decisions);
  std::string bad = EncodeRecover(r);
  bad[0] = 9;
  CHECK_FALSE(DecodeRecover(bad).ok());
  CHECK_FALSE(DecodeRecover(EncodeRecover(r).substr(0, 30)).ok());

  RecoverAnswer a;
  a.status = RecoverStatus::kOk;
  a.epoch = 41;
  TxnVote v = Recorded(1);
  v.decided = Decided::kCommit;
  v.locked = {5, 6};
  a.votes = {v, Owner(SettleState::kAborted)};
  a.truncated = {kTxn, TxnId{9, 4, 18}};
  absl::StatusOr<RecoverAnswer> got = DecodeRecoverAnswer(EncodeRecoverAnswer(a));
  REQUIRE(got.ok());
  CHECK(got->epoch == 41);
  REQUIRE(got->votes.size() == 2);
  CHECK(got->votes[0].txn == kTxn);
  CHECK(got->votes[0].decided == Decided::kCommit);
  CHECK(got->votes[0].locked == std::vector<uint32_t>{5, 6});
  CHECK(got->votes[0].recorded == std::vector<uint32_t>{1});
  CHECK(got->votes[0].written == Written());
  CHECK(got->votes[1].owner == SettleState::kAborted);
  CHECK(got->truncated == a.truncated);
  const std::string enc = EncodeRecoverAnswer(a);
  for (size_t n = 0; n < enc.size(); ++n) CHECK_FALSE(DecodeRecoverAnswer(enc.substr(0, n)).ok());

  LockRequest lock;
  lock.txn = kTxn;
  lock.written = Written();
  lock.part = 2;
  lock.parts = 3;
  lock.finished_below = 15;
  absl::StatusOr<LockRequest> l = DecodeLock(EncodeLock(lock));
  REQUIRE(l.ok());
  CHECK(l->written == Written());
  CHECK(l->part == 2);
  CHECK(l->parts == 3);
  CHECK(l->finished_below == 15);
  lock.part = 3;  // no such part
  CHECK_FALSE(DecodeLock(EncodeLock(lock)).ok());
  lock.part = 0;
  lock.parts = 0;
  CHECK_FALSE(DecodeLock(EncodeLock(lock)).ok());
}

}  // namespace
}  // namespace txn
}  // namespace farm
