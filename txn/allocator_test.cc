// Allocator: carving, and taking a region over from its layout and objects (a promoted backup).
#include "txn/allocator.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "txn/object.h"

namespace farm {
namespace txn {
namespace {

constexpr uint32_t kRegion = 9;
constexpr uint64_t kRegionSize = 1 << 20;  // 16 blocks of 64 KiB

// Installs an object of `size` zero bytes at `a` (what a committing transaction does).
void Install(const Allocator& alloc, GlobalAddress a, uint64_t size, uint64_t version) {
  char* object = *alloc.Object(a, size);
  uint64_t seen = 0;
  REQUIRE(TryLock(object, LoadLockWord(object), &seen));
  const std::string zeros(size, '\0');
  InstallObject(object, version, zeros.data(), size);
}

}  // namespace

TEST_CASE("a region taken over from its layout and objects continues where it was", "[alloc]") {
  std::vector<char> primary(kRegionSize), backup(kRegionSize);
  Allocator a({LocalRegion{kRegion, primary.data(), kRegionSize}});
  std::vector<GlobalAddress> small;
  for (int i = 0; i < 3; ++i) {
    small.push_back(*a.Reserve(10));
    Install(a, small.back(), 10, 1);
    a.Installed(small.back());
  }
  // The middle one is freed (its version is bumped, its slot goes back).
  InstallFree(*a.Object(small[1], 10), 2);
  a.Freed(small[1]);
  const GlobalAddress big = *a.Reserve(5000);
  Install(a, big, 5000, 1);
  a.Installed(big);
  const GlobalAddress array = *a.ReserveArray(100, 5);
  for (int i = 0; i < 5; ++i) Install(a, GlobalAddress{kRegion, array.offset + i * 128}, 100, 1);

  // The backup's copy holds the same objects (what COMMIT-BACKUPs and the array record gave it).
  std::memcpy(backup.data(), primary.data(), kRegionSize);
  Allocator b({});
  REQUIRE(b.Adopt(LocalRegion{kRegion, backup.data(), kRegionSize}, a.LayoutOf(kRegion)).ok());
  CHECK(b.slots_in_use() == a.slots_in_use());
  CHECK(b.InArray(GlobalAddress{kRegion, array.offset + 4 * 128}));
  CHECK_FALSE(b.InArray(small[0]));
  // The freed slot is handed out again (the lowest free slot of its class), versions continue.
  CHECK(b.Reserve(10)->offset == small[1].offset);
  CHECK(VersionOf(LoadLockWord(*b.Object(small[1], 10))) == 2);
  // Slots in use are never handed out: every new slot is one the primary did not use.
  std::set<uint64_t> used = {small[0].offset, small[1].offset, small[2].offset, big.offset};
  for (int i = 0; i < 5; ++i) used.insert(array.offset + i * 128);
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<GlobalAddress> s = b.Reserve(i % 2 == 0 ? 10 : 100);
    REQUIRE(s.ok());
    CHECK(used.insert(s->offset).second);
  }
  // A new block is carved after the adopted ones, and objects of every class still fit.
  absl::StatusOr<GlobalAddress> huge = b.Reserve(60000);
  REQUIRE(huge.ok());
  CHECK(used.insert(huge->offset).second);
}

TEST_CASE("carving skips blocks a taken-over layout carved, and fills the holes", "[alloc]") {
  std::vector<char> mem(kRegionSize);
  RegionLayout layout;
  layout.block_size = Allocator::kMaxBlockSize;
  layout.block_class.assign(16, -1);
  // Blocks 1 and 4 hold objects (of two classes); 0, 2, 3 and 5.. were never used.
  layout.block_class[1] = Allocator::SlotClassOf(10);
  layout.block_class[4] = Allocator::SlotClassOf(1000);
  Allocator b({});
  REQUIRE(b.Adopt(LocalRegion{kRegion, mem.data(), kRegionSize}, layout).ok());
  CHECK(b.slots_in_use() == 0);
  // A new class carves the first uncarved block; an array of two blocks the first run of two.
  CHECK(b.Reserve(200)->offset == 0);
  CHECK(b.ReserveArray(30000, 4)->offset == 2 * Allocator::kMaxBlockSize);
  CHECK(b.Reserve(3000)->offset == 5 * Allocator::kMaxBlockSize);
  CHECK(b.Reserve(10)->offset == 1 * Allocator::kMaxBlockSize);  // the adopted block's slots
  CHECK(b.LayoutOf(kRegion).block_class[0] == Allocator::SlotClassOf(200));
}

TEST_CASE("a layout that does not fit the region is refused", "[alloc]") {
  std::vector<char> mem(kRegionSize);
  Allocator b({LocalRegion{kRegion, mem.data(), kRegionSize}});
  RegionLayout layout = b.LayoutOf(kRegion);
  CHECK(absl::IsAlreadyExists(b.Adopt(LocalRegion{kRegion, mem.data(), kRegionSize}, layout)));
  RegionLayout wrong = layout;
  wrong.block_class.resize(15);
  CHECK(absl::IsInvalidArgument(b.Adopt(LocalRegion{kRegion + 1, mem.data(), kRegionSize}, wrong)));
  wrong = layout;
  wrong.block_class[3] = 20;
  CHECK(absl::IsInvalidArgument(b.Adopt(LocalRegion{kRegion + 1, mem.data(), kRegionSize}, wrong)));
  wrong = layout;
  wrong.arrays.push_back(RegionLayout::Array{0, 4096});  // in a block never carved
  CHECK(absl::IsInvalidArgument(b.Adopt(LocalRegion{kRegion + 1, mem.data(), kRegionSize}, wrong)));
}

TEST_CASE("a frozen region hands out nothing until thawed, and a removed one is forgotten",
          "[alloc]") {
  constexpr uint32_t kOther = 10;
  std::vector<char> one(kRegionSize), two(kRegionSize);
  Allocator a({LocalRegion{kRegion, one.data(), kRegionSize},
               LocalRegion{kOther, two.data(), kRegionSize}});
  std::vector<GlobalAddress> in_first;
  for (int i = 0; i < 3; ++i) {
    in_first.push_back(*a.Reserve(10));
    REQUIRE(in_first.back().region == kRegion);  // regions fill in order
    Install(a, in_first.back(), 10, 1);
    a.Installed(in_first.back());
  }
  const GlobalAddress reserved = *a.Reserve(10);  // a transaction still runs with it
  REQUIRE(reserved.region == kRegion);
  a.Freeze(kRegion);
  // Neither its free slots nor its uncarved blocks are handed out; the other region's are.
  for (int i = 0; i < 40; ++i) CHECK(a.Reserve(10)->region == kOther);
  CHECK(a.ReserveArray(100, 5)->region == kOther);
  // A slot freed there, and a reservation released there, wait with its other free slots.
  InstallFree(*a.Object(in_first[1], 10), 2);
  a.Freed(in_first[1]);
  a.CancelReservation(reserved);
  CHECK(a.Reserve(10)->region == kOther);
  a.Unfreeze(kRegion);
  std::set<uint64_t> got;
  for (int i = 0; i < 5; ++i) {
    const GlobalAddress g = *a.Reserve(10);
    if (g.region == kRegion) got.insert(g.offset);
  }
  CHECK(got.count(in_first[1].offset) == 1);
  CHECK(got.count(reserved.offset) == 1);

  // Removed (its primary moved): nothing of it is known here any more.
  const uint64_t before = a.slots_in_use();
  uint64_t in_removed = 0;
  for (const GlobalAddress& g : in_first) in_removed += g != in_first[1];
  in_removed += got.size();
  REQUIRE(a.Remove(kRegion));
  CHECK_FALSE(a.Has(kRegion));
  CHECK_FALSE(a.Remove(kRegion));
  CHECK(a.slots_in_use() == before - in_removed);
  CHECK_FALSE(a.Object(in_first[0], 10).ok());
  CHECK(a.LayoutOf(kRegion).block_size == 0);
  for (int i = 0; i < 40; ++i) CHECK(a.Reserve(10)->region == kOther);
}

TEST_CASE("with every region frozen an allocation is retried, not out of memory", "[alloc]") {
  std::vector<char> one(kRegionSize);
  Allocator a({LocalRegion{kRegion, one.data(), kRegionSize}});
  a.Freeze(kRegion);
  absl::StatusOr<GlobalAddress> r = a.Reserve(10);
  CHECK(absl::IsAborted(r.status()));
  a.Unfreeze(kRegion);
  CHECK(a.Reserve(10).ok());
}

}  // namespace txn
}  // namespace farm
