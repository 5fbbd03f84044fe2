// BackupLog on its own: records are kept until truncated, then applied to the backup copy only
// where they are newer than what it holds, in whatever order the truncations come.
#include "txn/backup_log.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "platform/data_dir.h"
#include "platform/testing/test_env.h"
#include "txn/object.h"

namespace farm {
namespace txn {
namespace {

constexpr uint32_t kRegion = 7;
constexpr uint32_t kCoordinator = 3;

struct Fixture {
  std::shared_ptr<Region> copy;
  BackupLog log;
  Fixture()
      : copy(std::shared_ptr<Region>(std::move(*Region::Allocate(1 << 16, false)))),
        log([this](uint32_t region) { return region == kRegion ? copy : nullptr; }) {}

  // The object at `offset` of the copy, as a string, or "free vN" / "empty".
  std::string At(uint64_t offset, uint64_t size) const { return ObjectAt(*copy, offset, size); }
  static std::string ObjectAt(const Region& region, uint64_t offset, uint64_t size) {
    const char* object = region.data() + offset;
    const uint64_t word = LoadLockWord(object);
    if (word == 0) return "empty";
    if (!IsAllocated(word)) return "free v" + std::to_string(VersionOf(word));
    std::string span(ObjectSpan(size), '\0');
    CopyLocalObject(object, span.data(), span.size());
    ObjectView v;
    REQUIRE(DecodeObject(span.data(), size, &v) == ObjectState::kOk);
    return std::string(v.payload) + " v" + std::to_string(v.version);
  }
};

LockRequest Record(uint64_t seq, std::vector<WriteRecord> writes,
                   std::vector<uint64_t> truncate = {}) {
  LockRequest r;
  r.txn = TxnId{kCoordinator, 1, seq};
  r.writes = std::move(writes);
  r.truncate = std::move(truncate);
  return r;
}

}  // namespace

TEST_CASE("a COMMIT-BACKUP record is kept, and applied only when truncated", "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 128};
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "hello"}})).ok());
  CHECK(f.log.records() == 1);
  CHECK(f.At(128, 5) == "empty");  // kept, not applied: recovery may still abort it
  // A retry of the same record changes nothing.
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "hello"}})).ok());
  CHECK(f.log.records() == 1);
  CHECK(f.At(128, 5) == "empty");
  // The truncation rides on the next record (or comes alone, with no writes).
  REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {1})).ok());
  CHECK(f.log.records() == 0);
  CHECK(f.At(128, 5) == "hello v1");
  CHECK(f.log.applied() == 1);
}

TEST_CASE("a transaction's writes in several COMMIT-BACKUPs add up", "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 512}, b{kRegion, 1024};
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "part one"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{b, WriteKind::kAlloc, 0, "part two"}})).ok());
  // The first part again (its answer was lost): nothing changes.
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "part one"}})).ok());
  CHECK(f.log.records() == 1);
  REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {1})).ok());
  CHECK(f.At(512, 8) == "part one v1");
  CHECK(f.At(1024, 8) == "part two v1");
  CHECK(f.log.applied() == 2);
}

TEST_CASE("a record missing parts counts as no record in the vote", "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 512}, b{kRegion, 1024};
  LockRequest one = Record(1, {{a, WriteKind::kAlloc, 0, "part one"}});
  one.parts = 2;
  REQUIRE(f.log.Append(kCoordinator, one).ok());
  std::vector<TxnVote> votes = f.log.Votes(kCoordinator, 2);
  REQUIRE(votes.size() == 1);
  CHECK(votes[0].recorded.empty());  // the coordinator failed before part two: no record
  // The second part completes it.
  Fixture g;
  REQUIRE(g.log.Append(kCoordinator, one).ok());
  LockRequest two = Record(1, {{b, WriteKind::kAlloc, 0, "part two"}});
  two.part = 1;
  two.parts = 2;
  REQUIRE(g.log.Append(kCoordinator, two).ok());
  REQUIRE(g.log.Append(kCoordinator, one).ok());  // a retry of part one changes nothing
  votes = g.log.Votes(kCoordinator, 2);
  REQUIRE(votes.size() == 1);
  CHECK(votes[0].recorded == std::vector<uint32_t>{kRegion});
}

TEST_CASE("truncated transactions are remembered until the coordinator's bound passes them",
          "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 128}, b{kRegion, 256};
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "one"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(2, {{b, WriteKind::kAlloc, 0, "two"}})).ok());
  LockRequest t = Record(0, {}, {1, 2, 9});  // 9 wrote nothing here: not remembered
  t.finished_below = 1;
  REQUIRE(f.log.Append(kCoordinator, t).ok());
  CHECK(f.log.truncated_remembered() == 2);
  // The bound passes 1: every backup truncated it, so no vote on it will come.
  t = Record(0, {}, {});
  t.finished_below = 2;
  REQUIRE(f.log.Append(kCoordinator, t).ok());
  CHECK(f.log.truncated_remembered() == 1);
  // Another incarnation's bound says nothing of this one's.
  LockRequest other = Record(0, {}, {});
  other.txn.incarnation = 5;
  other.finished_below = 100;
  REQUIRE(f.log.Append(kCoordinator, other).ok());
  // The coordinator leaves: its vote names what was truncated, until the recovery forgets it.
  (void)f.log.Votes(kCoordinator, 2);
  CHECK(f.log.Truncated(kCoordinator, 2) == std::vector<TxnId>{TxnId{kCoordinator, 1, 2}});
  CHECK(f.log.Truncated(kCoordinator, 1).empty());  // incarnation 1 is not below fence 1
  f.log.Forget(kCoordinator, 2);
  CHECK(f.log.Truncated(kCoordinator, 2).empty());
  CHECK(f.log.truncated_remembered() == 0);
}

TEST_CASE("truncations in any order leave the newest version of each object", "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 256};
  // Three transactions write the object in turn (versions 1, 2, 3), then one frees it (4).
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "one"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(2, {{a, WriteKind::kWrite, 1, "two"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(3, {{a, WriteKind::kWrite, 2, "tri"}})).ok());
  SECTION("newest first: the older ones are skipped") {
    REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {3, 1, 2})).ok());
    CHECK(f.At(256, 3) == "tri v3");
    CHECK(f.log.applied() == 1);
    CHECK(f.log.skipped() == 2);
  }
  SECTION("a free after the writes, truncated before them") {
    REQUIRE(f.log.Append(kCoordinator, Record(4, {{a, WriteKind::kFree, 3, ""}})).ok());
    REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {4})).ok());
    CHECK(f.At(256, 3) == "free v4");
    REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {1, 2, 3})).ok());
    CHECK(f.At(256, 3) == "free v4");
    // A reuse of the freed slot continues from its version.
    REQUIRE(f.log.Append(kCoordinator, Record(5, {{a, WriteKind::kAlloc, 4, "new"}}, {})).ok());
    REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {5})).ok());
    CHECK(f.At(256, 3) == "new v5");
  }
  CHECK(f.log.records() == 0);
}

TEST_CASE("a COMMIT-BACKUP that does not fit this node's copies is refused", "[backup]") {
  Fixture f;
  auto refused = [&](LockRequest r, uint32_t from, const std::string& why) {
    absl::Status s = f.log.Append(from, r);
    INFO(s.ToString());
    CHECK(absl::IsInvalidArgument(s));
    CHECK(std::string(s.message()).find(why) != std::string::npos);
  };
  refused(Record(1, {{GlobalAddress{kRegion + 1, 0}, WriteKind::kWrite, 1, "x"}}), kCoordinator,
          "keeps no backup copy of region 8");
  refused(Record(1, {{GlobalAddress{kRegion, (1 << 16) - 16}, WriteKind::kWrite, 1, "x"}}),
          kCoordinator, "outside the region's 65536");
  refused(Record(1, {{GlobalAddress{kRegion, 64}, WriteKind::kWrite, 1, "x"}}), kCoordinator + 1,
          "from node 4");
  CHECK(f.log.records() == 0);
}

TEST_CASE("an object array is installed at once and its blocks learnt", "[backup]") {
  Fixture f;
  // 40 objects of 100 bytes (128-byte slots) from block 0 on.
  const ArrayRecord array{GlobalAddress{kRegion, 0}, 100, 40};
  REQUIRE(f.log.InstallArray(array).ok());
  CHECK(f.At(0, 100) == std::string(100, '\0') + " v1");
  CHECK(f.At(39 * 128, 100) == std::string(100, '\0') + " v1");
  CHECK(f.At(40 * 128, 100) == "empty");
  // A write to it is kept and applied like any; the array record again changes nothing.
  REQUIRE(f.log
              .Append(kCoordinator, Record(1,
                                           {{GlobalAddress{kRegion, 128}, WriteKind::kWrite, 1,
                                             std::string(100, 'x')}},
                                           {}))
              .ok());
  REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {1})).ok());
  REQUIRE(f.log.InstallArray(array).ok());
  CHECK(f.At(128, 100) == std::string(100, 'x') + " v2");
  const RegionLayout layout = f.log.Layout(kRegion);
  REQUIRE(layout.block_size == Allocator::BlockSizeOf(1 << 16));
  CHECK(layout.block_class[0] == Allocator::SlotClassOf(100));
  CHECK(layout.arrays == std::vector<RegionLayout::Array>{{0, 40 * 128}});
  // Arrays that do not fit are refused, and nothing is installed.
  CHECK(absl::IsInvalidArgument(f.log.InstallArray({GlobalAddress{kRegion, 0}, 100, 600})));
  CHECK(absl::IsInvalidArgument(f.log.InstallArray({GlobalAddress{kRegion, 64}, 10, 1})));
  CHECK(absl::IsUnavailable(f.log.InstallArray({GlobalAddress{kRegion + 1, 0}, 10, 1})));
  CHECK(absl::IsInvalidArgument(f.log.InstallArray({GlobalAddress{kRegion, 0}, 0, 1})));
}

TEST_CASE("the allocator layout is learnt from the writes received", "[backup]") {
  std::vector<char> primary(1 << 20);
  Allocator alloc({LocalRegion{kRegion, primary.data(), 1 << 20}});
  std::shared_ptr<Region> copy(std::move(*Region::Allocate(1 << 20, false)));
  BackupLog log([&](uint32_t region) { return region == kRegion ? copy : nullptr; });
  // Objects of three classes, as the primary's allocator places them; the records name them.
  uint64_t seq = 0;
  for (uint64_t size : {10, 10, 3000, 100, 40000, 10}) {
    const GlobalAddress a = *alloc.Reserve(size);
    REQUIRE(
        log.Append(kCoordinator, Record(++seq, {{a, WriteKind::kAlloc, 0, std::string(size, 'a')}}))
            .ok());
  }
  // A block carved for an allocation that aborted holds nothing: unknown to the backup.
  const GlobalAddress aborted = *alloc.Reserve(500);
  alloc.CancelReservation(aborted);
  const RegionLayout primary_layout = alloc.LayoutOf(kRegion);
  const RegionLayout learnt = log.Layout(kRegion);
  REQUIRE(learnt.block_class.size() == primary_layout.block_class.size());
  const uint64_t aborted_block = aborted.offset / primary_layout.block_size;
  for (size_t b = 0; b < learnt.block_class.size(); ++b) {
    INFO("block " << b);
    CHECK(learnt.block_class[b] == (b == aborted_block ? -1 : primary_layout.block_class[b]));
  }
}

TEST_CASE("a promoted copy locks what kept records write until they are decided", "[backup]") {
  Fixture f;
  const GlobalAddress a{kRegion, 256}, b{kRegion, 512}, c{kRegion, 768};
  // Applied before the promotion: a at v1. Kept: a v1 -> v2 and v2 -> v3 (two transactions of
  // a live coordinator), b (a coordinator that left), c (one that will abort).
  REQUIRE(f.log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "one"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {1})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(2, {{a, WriteKind::kWrite, 1, "two"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(3, {{a, WriteKind::kWrite, 2, "tri"}})).ok());
  REQUIRE(f.log.Append(kCoordinator, Record(4, {{c, WriteKind::kAlloc, 0, "ccc"}})).ok());
  LockRequest departed = Record(1, {{b, WriteKind::kAlloc, 0, "bbb"}});
  departed.txn.node = kCoordinator + 1;
  REQUIRE(f.log.Append(kCoordinator + 1, departed).ok());
  f.log.Promote(kRegion);
  CHECK(f.log.recovery_locks() == 3);
  CHECK(IsLocked(LoadLockWord(f.copy->data() + 256)));
  CHECK(IsLocked(LoadLockWord(f.copy->data() + 512)));
  // A new record for the promoted region is refused (its coordinator aborts), but the
  // truncation it carries is applied: the newer of a's records first, and a stays locked until
  // the older one is decided too.
  absl::Status s = f.log.Append(kCoordinator, Record(5, {{a, WriteKind::kWrite, 3, "new"}}, {3}));
  CHECK(absl::IsFailedPrecondition(s));
  CHECK(IsLocked(LoadLockWord(f.copy->data() + 256)));
  REQUIRE(f.log.Append(kCoordinator, Record(0, {}, {2})).ok());
  CHECK(f.At(256, 3) == "tri v3");
  // The departed coordinator's record: fenced (later ones refused), then settled.
  CHECK(f.log.Fence(kCoordinator + 1, 5) == std::vector<TxnId>{departed.txn});
  CHECK(absl::IsFailedPrecondition(f.log.Append(kCoordinator + 1, departed)));
  f.log.Settle(departed.txn, true);
  CHECK(f.At(512, 3) == "bbb v1");
  // The aborted one: DROP-BACKUP from its coordinator unlocks without applying.
  CHECK(absl::IsInvalidArgument(f.log.Drop(kCoordinator + 1, TxnId{kCoordinator, 1, 4})));
  REQUIRE(f.log.Drop(kCoordinator, TxnId{kCoordinator, 1, 4}).ok());
  CHECK(f.At(768, 3) == "empty");
  CHECK(f.log.recovery_locks() == 0);
  CHECK(f.log.records() == 0);
}

namespace {

std::string FreshDir(const std::string& name) {
  return testing::FreshTestDir(absl::StrCat("backup_log_test-", name));
}

// A backup log over a copy mapped from `dir`'s file, replaying and then appending to its journal
// (a node restarted with its data directory).
struct Durable {
  std::unique_ptr<DataDir> dir;
  std::shared_ptr<Region> copy;
  std::unique_ptr<BackupLog> log;
  std::vector<std::string> entries;
  uint64_t cut = 0;

  explicit Durable(const std::string& path) {
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(path);
    REQUIRE(d.ok());
    dir = std::move(*d);
    bool created = false;
    absl::StatusOr<std::unique_ptr<Region>> r = dir->MapRegion("copy-7", 1 << 20, false, &created);
    REQUIRE(r.ok());
    copy = std::move(*r);
    log = std::make_unique<BackupLog>(
        [this](uint32_t region) { return region == kRegion ? copy : nullptr; });
    absl::StatusOr<std::unique_ptr<Journal>> j = dir->OpenJournal("backup-log", &entries, &cut);
    REQUIRE(j.ok());
    absl::Status s = log->Persist(std::move(*j), entries);
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  std::string At(uint64_t offset, uint64_t size) const {
    return Fixture::ObjectAt(*copy, offset, size);
  }
};

}  // namespace

TEST_CASE("a journaled backup log is where it was after its process is killed", "[backup]") {
  const std::string dir = FreshDir("kill");
  const GlobalAddress a{kRegion, 128}, b{kRegion, 256}, c{kRegion, 384};
  const int status = testing::ForkAndKill([&] {
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
    if (!d.ok()) return 2;
    bool created = false;
    absl::StatusOr<std::unique_ptr<Region>> r = (*d)->MapRegion("copy-7", 1 << 20, false, &created);
    if (!r.ok()) return 3;
    std::shared_ptr<Region> copy = std::move(*r);
    BackupLog log([&](uint32_t region) { return region == kRegion ? copy : nullptr; });
    std::vector<std::string> entries;
    uint64_t cut = 0;
    absl::StatusOr<std::unique_ptr<Journal>> j = (*d)->OpenJournal("backup-log", &entries, &cut);
    if (!j.ok() || !log.Persist(std::move(*j), entries).ok()) return 4;
    if (!log.Append(kCoordinator, Record(1, {{a, WriteKind::kAlloc, 0, "one"}})).ok()) return 10;
    if (!log.Append(kCoordinator, Record(2, {{b, WriteKind::kAlloc, 0, "two"}})).ok()) return 11;
    LockRequest three = Record(3, {{a, WriteKind::kWrite, 1, "three"}}, {1});
    three.parts = 2;  // part 1 never comes
    if (!log.Append(kCoordinator, three).ok()) return 12;
    if (!log.InstallArray({GlobalAddress{kRegion, 65536}, 100, 40}).ok()) return 13;
    // Another coordinator leaves; its record is decided (commit) by its recovery.
    LockRequest four = Record(1, {{c, WriteKind::kAlloc, 0, "four"}});
    four.txn.node = 4;
    if (!log.Append(4, four).ok()) return 14;
    if (log.Votes(4, 2).size() != 1) return 15;
    log.Settle(four.txn, true);
    return 0;  // killed: nothing flushed, closed or compacted
  });
  INFO("wait status " << status);
  REQUIRE(testing::KilledBySigkill(status));

  {
    Durable d(dir);
    CHECK(d.cut == 0);
    CHECK(d.log->records() == 2);      // two and three kept
    CHECK(d.At(128, 3) == "one v1");   // truncated before the kill
    CHECK(d.At(256, 3) == "empty");    // kept, not applied
    CHECK(d.At(384, 4) == "four v1");  // settled
    CHECK(d.At(65536, 100) == std::string(100, '\0') + " v1");
    // A settled commit counts as applied, as a truncation does (the recovery of a cluster that
    // crashed whole asks it).
    CHECK(d.log->Truncated(4, 2) == std::vector<TxnId>{TxnId{4, 1, 1}});
    // The fence of node 4's first incarnation holds.
    LockRequest late = Record(2, {{c, WriteKind::kWrite, 1, "late"}});
    late.txn.node = 4;
    CHECK(absl::IsFailedPrecondition(d.log->Append(4, late)));
    const RegionLayout layout = d.log->Layout(kRegion);
    REQUIRE(layout.block_size == Allocator::BlockSizeOf(1 << 20));
    CHECK(layout.arrays == std::vector<RegionLayout::Array>{{65536, 65536 + 40 * 128}});
    CHECK(layout.block_class[0] == Allocator::SlotClassOf(3));
    // Truncating two after the restart applies it; three stays kept.
    d.log->set_compact_at(1);  // and every change rewrites the journal from the state
    const absl::Status s = d.log->Append(kCoordinator, Record(0, {}, {2}));
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(d.At(256, 3) == "two v1");
    CHECK(d.log->records() == 1);
    const std::vector<TxnVote> votes = d.log->Votes(kCoordinator, 2);
    REQUIRE(votes.size() == 1);
    CHECK(votes[0].txn.seq == 3);
    CHECK(votes[0].recorded.empty());  // three lacks a part: no record
    CHECK(d.log->compactions() >= 1);
  }
  {
    // The compacted journal gives the same state.
    Durable d(dir);
    CHECK(d.entries.size() >= 4);
    CHECK(d.log->records() == 1);
    CHECK(d.At(256, 3) == "two v1");
    CHECK(d.At(128, 3) == "one v1");
    const std::vector<TxnVote> votes = d.log->Votes(kCoordinator, 2);
    REQUIRE(votes.size() == 1);
    CHECK(votes[0].txn.seq == 3);
    CHECK(votes[0].recorded.empty());
    std::vector<TxnId> truncated = d.log->Truncated(kCoordinator, 2);
    std::sort(truncated.begin(), truncated.end(),
              [](const TxnId& x, const TxnId& y) { return x.seq < y.seq; });
    CHECK(truncated == std::vector<TxnId>{TxnId{kCoordinator, 1, 1}, TxnId{kCoordinator, 1, 2}});
    CHECK(d.log->Layout(kRegion).arrays ==
          std::vector<RegionLayout::Array>{{65536, 65536 + 40 * 128}});
    LockRequest late = Record(2, {{c, WriteKind::kWrite, 1, "late"}});
    late.txn.node = 4;
    CHECK(absl::IsFailedPrecondition(d.log->Append(4, late)));
  }
  {
    // A journal that is not one (another program's file) is refused with the entry named.
    absl::StatusOr<std::unique_ptr<DataDir>> dd = DataDir::Open(dir);
    REQUIRE(dd.ok());
    bool created = false;
    absl::StatusOr<std::unique_ptr<Region>> r =
        (*dd)->MapRegion("copy-7", 1 << 20, false, &created);
    REQUIRE(r.ok());
    std::shared_ptr<Region> copy = std::move(*r);
    BackupLog log([&](uint32_t region) { return region == kRegion ? copy : nullptr; });
    std::vector<std::string> entries;
    uint64_t cut = 0;
    absl::StatusOr<std::unique_ptr<Journal>> j = (*dd)->OpenJournal("backup-log", &entries, &cut);
    REQUIRE(j.ok());
    entries.push_back("\x09garbage");
    const absl::Status s = log.Persist(std::move(*j), entries);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(absl::StrContains(s.message(), "backup-log"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace txn
}  // namespace farm
