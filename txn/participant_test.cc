#include "txn/participant.h"

#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "txn/allocator.h"
#include "txn/object.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {
namespace {

constexpr uint32_t kRegion = 7;
constexpr uint32_t kCoordinator = 2;

// One region of `bytes` on this "node", with a fill pattern (the allocator must not trust it).
struct Heap {
  explicit Heap(uint64_t bytes) : memory(bytes / 8, ~uint64_t{0}) {
    allocator = std::make_unique<Allocator>(std::vector<LocalRegion>{
        LocalRegion{kRegion, reinterpret_cast<char*>(memory.data()), bytes}});
    participant = std::make_unique<Participant>(allocator.get());
  }
  char* At(GlobalAddress a) { return reinterpret_cast<char*>(memory.data()) + a.offset; }
  uint64_t Word(GlobalAddress a) { return LoadLockWord(At(a)); }
  std::string Value(GlobalAddress a, uint64_t size) {
    std::string copy(ObjectSpan(size), '\0');
    CopyLocalObject(At(a), copy.data(), copy.size());
    ObjectView v;
    if (DecodeObject(copy.data(), size, &v) != ObjectState::kOk) return "<not ok>";
    return std::string(v.payload);
  }
  std::vector<uint64_t> memory;
  std::unique_ptr<Allocator> allocator;
  std::unique_ptr<Participant> participant;
};

TxnId Txn(uint64_t seq) { return TxnId{kCoordinator, seq}; }

absl::Status Lock(Heap& h, uint64_t seq, std::vector<WriteRecord> writes,
                  std::vector<uint64_t> truncate = {}) {
  LockRequest r{Txn(seq), {1}, std::move(writes), std::move(truncate)};
  const std::string encoded = EncodeLock(r);
  absl::StatusOr<LockRequest> decoded = DecodeLock(encoded);
  REQUIRE(decoded.ok());
  return h.participant->Lock(kCoordinator, *decoded, encoded);
}
absl::Status Commit(Heap& h, uint64_t seq) {
  return h.participant->Commit(kCoordinator, DecisionRequest{Txn(seq), {}});
}
absl::Status Abort(Heap& h, uint64_t seq, std::vector<GlobalAddress> reservations = {}) {
  return h.participant->Abort(kCoordinator, DecisionRequest{Txn(seq), std::move(reservations)});
}

// Allocates and creates an object with `value` through the protocol.
GlobalAddress Create(Heap& h, uint64_t seq, const std::string& value) {
  absl::StatusOr<GlobalAddress> a =
      h.participant->Reserve(kCoordinator, ReserveRequest{Txn(seq), value.size()});
  REQUIRE(a.ok());
  REQUIRE(Lock(h, seq, {WriteRecord{*a, WriteKind::kAlloc, 0, value}}).ok());
  REQUIRE(Commit(h, seq).ok());
  return *a;
}

}  // namespace

TEST_CASE("allocation, write and free through LOCK and COMMIT-PRIMARY", "[participant]") {
  Heap h(1 << 20);
  const GlobalAddress a = Create(h, 1, "hello");
  CHECK(h.Value(a, 5) == "hello");
  CHECK(VersionOf(h.Word(a)) == 1);
  CHECK(h.allocator->slots_in_use() == 1);
  CHECK(h.allocator->reserved() == 0);

  REQUIRE(Lock(h, 2, {WriteRecord{a, WriteKind::kWrite, 1, "world"}}).ok());
  CHECK(IsLocked(h.Word(a)));
  CHECK(h.participant->locked_objects() == 1);
  REQUIRE(Commit(h, 2).ok());
  CHECK(h.Value(a, 5) == "world");
  CHECK(VersionOf(h.Word(a)) == 2);
  CHECK(h.participant->locked_objects() == 0);

  REQUIRE(Lock(h, 3, {WriteRecord{a, WriteKind::kFree, 2, ""}}).ok());
  REQUIRE(Commit(h, 3).ok());
  CHECK_FALSE(IsAllocated(h.Word(a)));
  CHECK(VersionOf(h.Word(a)) == 3);
  CHECK(h.allocator->slots_in_use() == 0);

  // The slot is reused at once, and its version goes on from 3: a reader of an earlier version
  // can never validate against the new object.
  const GlobalAddress b = Create(h, 4, "again");
  CHECK(b == a);
  CHECK(VersionOf(h.Word(b)) == 4);
}

TEST_CASE("LOCK refuses changed, locked and freed objects and leaves nothing locked",
          "[participant]") {
  Heap h(1 << 20);
  const GlobalAddress a = Create(h, 1, "aaaa");
  const GlobalAddress b = Create(h, 2, "bbbb");

  // Stale version of b: a's lock is released again.
  absl::Status s = Lock(h, 3, {WriteRecord{a, WriteKind::kWrite, 1, "AAAA"},
                               WriteRecord{b, WriteKind::kWrite, 0, "BBBB"}});
  CHECK(absl::IsAborted(s));
  CHECK(s.message().find("changed") != std::string::npos);
  CHECK_FALSE(IsLocked(h.Word(a)));
  CHECK(h.participant->locked_objects() == 0);

  // Locked by another transaction.
  REQUIRE(Lock(h, 4, {WriteRecord{b, WriteKind::kWrite, 1, "BBBB"}}).ok());
  s = Lock(h, 5, {WriteRecord{b, WriteKind::kWrite, 1, "bbbb"}});
  CHECK(absl::IsAborted(s));
  CHECK(s.message().find("locked") != std::string::npos);
  REQUIRE(Abort(h, 4).ok());
  CHECK_FALSE(IsLocked(h.Word(b)));
  CHECK(h.Value(b, 4) == "bbbb");  // the aborted write left no trace
  // A COMMIT-PRIMARY for an aborted transaction is refused.
  CHECK(absl::IsFailedPrecondition(Commit(h, 4)));

  // Freed.
  REQUIRE(Lock(h, 6, {WriteRecord{a, WriteKind::kFree, 1, ""}}).ok());
  REQUIRE(Commit(h, 6).ok());
  s = Lock(h, 7, {WriteRecord{a, WriteKind::kWrite, 1, "xxxx"}});
  CHECK(absl::IsAborted(s));
  CHECK(s.message().find("freed") != std::string::npos);
}

TEST_CASE("addresses that are not objects are refused", "[participant]") {
  Heap h(1 << 20);
  const GlobalAddress a = Create(h, 1, std::string(40, 'x'));  // a 64-byte slot
  // Inside the slot, not at its start.
  CHECK(absl::IsInvalidArgument(Lock(h, 2, {WriteRecord{a + 8, WriteKind::kWrite, 1, "y"}})));
  // A block that was never carved.
  CHECK(absl::IsInvalidArgument(
      Lock(h, 3, {WriteRecord{GlobalAddress{kRegion, 512 << 10}, WriteKind::kWrite, 0, "y"}})));
  // Another region.
  CHECK(absl::IsInvalidArgument(
      Lock(h, 4, {WriteRecord{GlobalAddress{kRegion + 1, 0}, WriteKind::kWrite, 0, "y"}})));
  // A value larger than the slot.
  CHECK(absl::IsInvalidArgument(
      Lock(h, 5, {WriteRecord{a, WriteKind::kWrite, 1, std::string(100, 'y')}})));
  // An allocation into a slot nobody reserved.
  CHECK(absl::IsInvalidArgument(
      Lock(h, 6, {WriteRecord{a + 64, WriteKind::kAlloc, 0, "y"}})));
  CHECK(h.participant->locked_objects() == 0);
}

TEST_CASE("aborted allocations and departed coordinators leak nothing", "[participant]") {
  Heap h(1 << 20);
  absl::StatusOr<GlobalAddress> a =
      h.participant->Reserve(kCoordinator, ReserveRequest{Txn(1), 100});
  REQUIRE(a.ok());
  CHECK(h.allocator->reserved() == 1);
  REQUIRE(Abort(h, 1, {*a}).ok());
  CHECK(h.allocator->reserved() == 0);
  CHECK(h.allocator->slots_in_use() == 0);

  // A coordinator that leaves with a locked transaction and a reservation.
  const GlobalAddress b = Create(h, 2, "bbbb");
  REQUIRE(Lock(h, 3, {WriteRecord{b, WriteKind::kWrite, 1, "BBBB"}}).ok());
  REQUIRE(h.participant->Reserve(kCoordinator, ReserveRequest{Txn(3), 8}).ok());
  h.participant->CoordinatorLeft(kCoordinator);
  CHECK_FALSE(IsLocked(h.Word(b)));
  CHECK(h.Value(b, 4) == "bbbb");
  CHECK(h.participant->locked_transactions() == 0);
  CHECK(h.allocator->reserved() == 0);
  CHECK(h.allocator->slots_in_use() == 1);  // b
}

TEST_CASE("a coordinator that left can lock and reserve nothing", "[participant]") {
  std::vector<uint64_t> memory((1 << 20) / 8, 0);
  Allocator allocator({LocalRegion{kRegion, reinterpret_cast<char*>(memory.data()), 1 << 20}});
  bool member = true;
  Participant p(&allocator, [&member](uint32_t) { return member; });
  absl::StatusOr<GlobalAddress> a = p.Reserve(kCoordinator, ReserveRequest{Txn(1), 8});
  REQUIRE(a.ok());
  member = false;  // the membership without it is applied; CoordinatorLeft follows
  LockRequest late{Txn(1), {1}, {WriteRecord{*a, WriteKind::kAlloc, 0, "12345678"}}, {}};
  CHECK(absl::IsUnavailable(p.Lock(kCoordinator, late, EncodeLock(late))));
  CHECK(absl::IsUnavailable(p.Reserve(kCoordinator, ReserveRequest{Txn(2), 8}).status()));
  CHECK(p.locked_objects() == 0);
  p.CoordinatorLeft(kCoordinator);
  CHECK(allocator.reserved() == 0);
}

TEST_CASE("memory full is ResourceExhausted; oversized objects are refused", "[participant]") {
  Heap h(64 << 10);  // one block
  CHECK(absl::IsInvalidArgument(
      h.participant->Reserve(kCoordinator, ReserveRequest{Txn(1), kMaxObjectSize + 1}).status()));
  CHECK(absl::IsInvalidArgument(
      h.participant->Reserve(kCoordinator, ReserveRequest{Txn(1), 0}).status()));
  int n = 0;
  absl::StatusOr<GlobalAddress> a;
  while ((a = h.participant->Reserve(kCoordinator, ReserveRequest{Txn(1), 1000})).ok()) ++n;
  CHECK(n == 64);  // 1 KiB slots in 64 KiB
  CHECK(absl::IsResourceExhausted(a.status()));
  // Other classes have no block left either.
  CHECK(absl::IsResourceExhausted(
      h.participant->Reserve(kCoordinator, ReserveRequest{Txn(1), 10}).status()));
  h.participant->CoordinatorLeft(kCoordinator);
  CHECK(h.allocator->slots_in_use() == 0);
  CHECK(h.participant->Reserve(kCoordinator, ReserveRequest{Txn(2), 1000}).ok());
}

TEST_CASE("log records stay until truncated", "[participant]") {
  Heap h(1 << 20);
  const GlobalAddress a = Create(h, 1, "aaaa");
  REQUIRE(Lock(h, 2, {WriteRecord{a, WriteKind::kWrite, 1, "bbbb"}}).ok());
  REQUIRE(Commit(h, 2).ok());
  std::vector<LogRecord> log = h.participant->Log(kCoordinator);
  REQUIRE(log.size() == 4);  // LOCK, COMMIT-PRIMARY of transactions 1 and 2
  CHECK(log[0].type == LogRecordType::kLock);
  CHECK(log[1].type == LogRecordType::kCommitPrimary);
  CHECK(log[2].txn.seq == 2);
  // The LOCK record holds the request as received: it decodes to the writes.
  absl::StatusOr<LockRequest> r = DecodeLock(log[2].body);
  REQUIRE(r.ok());
  REQUIRE(r->writes.size() == 1);
  CHECK(r->writes[0].data == "bbbb");
  // Truncation of transaction 1 rides on the next LOCK.
  REQUIRE(Lock(h, 3, {WriteRecord{a, WriteKind::kWrite, 2, "cccc"}}, {1}).ok());
  log = h.participant->Log(kCoordinator);
  REQUIRE(log.size() == 3);
  CHECK(log[0].txn.seq == 2);
  REQUIRE(Abort(h, 3).ok());
  CHECK(h.participant->Log(kCoordinator).back().type == LogRecordType::kAbort);
}

TEST_CASE("corrupt protocol messages are errors, never crashes", "[participant]") {
  LockRequest r{Txn(9), {1, 2}, {WriteRecord{GlobalAddress{1, 64}, WriteKind::kWrite, 3, "v"}},
                {5}};
  const std::string good = EncodeLock(r);
  REQUIRE(DecodeLock(good).ok());
  // Every truncation and a huge count.
  for (size_t n = 0; n < good.size(); ++n) CHECK_FALSE(DecodeLock(good.substr(0, n)).ok());
  std::string huge = good;
  const uint64_t big = ~uint64_t{0} / 2;
  std::memcpy(&huge[12], &big, 8);  // the participants' count
  CHECK(absl::IsInvalidArgument(DecodeLock(huge).status()));
  std::string kind = good;
  kind[12 + 8 + 2 * 4 + 8 + 8] = 9;  // the write's kind: after txn, participants, count, address
  CHECK_FALSE(DecodeLock(kind).ok());
  CHECK_FALSE(DecodeDecision("xyz").ok());
  CHECK_FALSE(DecodeReserve(std::string(19, 'a')).ok());
}

}  // namespace txn
}  // namespace farm
