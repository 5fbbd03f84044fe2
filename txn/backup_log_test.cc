// BackupLog on its own: records are kept until truncated, then applied to the backup copy only
// where they are newer than what it holds, in whatever order the truncations come.
#include "txn/backup_log.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

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
  std::string At(uint64_t offset, uint64_t size) const {
    const char* object = copy->data() + offset;
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

}  // namespace txn
}  // namespace farm
