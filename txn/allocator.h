// Allocator: carves one node's regions into objects, by size class.
//
// Each region is cut into blocks (64 KiB, or the whole region if it is smaller); a block is
// given one size class the first time a slot of that class is needed, and keeps it for good, so
// the object headers of a block always sit at the same offsets and their versions survive free
// and reuse (txn/object.h: version-based reclamation). Slot sizes are powers of two from 64 bytes
// to the block size; an object of n payload bytes takes the smallest slot that holds
// ObjectSpan(n). Free slots of a class are kept on a stack (the most recently freed is reused
// first, while it is warm in cache).
//
// The allocator runs on the owning node only: a transaction on another node reserves a slot
// through the owner's participant (an RPC), as FaRM's allocation is done by the region's
// primary. A slot is reserved while the allocating transaction runs and becomes an object only
// when that transaction commits (the participant installs it); an aborted transaction's
// reservations are released, so an abort leaks nothing.
//
// Replication. A region's allocator state is its objects' lock words (which slots hold objects)
// plus its layout (RegionLayout: each block's slot class, and the object arrays), which exists
// only in the primary's memory. A backup learns the layout from the records it receives (every
// allocation or write names an object whose size gives its block's class; an object array comes
// as a record of its own), so that when it is promoted it rebuilds the allocator with Adopt: the
// free slots are those of the carved blocks whose lock words say "not allocated". A block that
// was carved on the old primary but never held a committed object looks uncarved to the backup:
// nobody holds an address in it, so carving it again (perhaps for another class) is safe.
//
// Thread safety: all methods are safe for concurrent use.
#ifndef FARM_TXN_ALLOCATOR_H_
#define FARM_TXN_ALLOCATOR_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "platform/global_address.h"

namespace farm {
namespace txn {

// One of this node's regions, as the allocator sees it.
struct LocalRegion {
  uint32_t id = 0;
  char* base = nullptr;
  uint64_t size = 0;
};

// A region's allocator state besides its objects (see the file comment).
struct RegionLayout {
  uint64_t block_size = 0;
  std::vector<int> block_class;  // per block: slot class index, or -1 while not carved
  struct Array {
    uint64_t begin = 0, end = 0;  // offsets of the array's first slot and one past its last
    friend bool operator==(const Array& a, const Array& b) {
      return a.begin == b.begin && a.end == b.end;
    }
  };
  std::vector<Array> arrays;
};

class Allocator {
 public:
  static constexpr uint64_t kMaxBlockSize = 64 << 10;
  static constexpr uint64_t kMinSlot = 64;

  explicit Allocator(std::vector<LocalRegion> regions);
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // The block size of a region of `region_size` bytes (0: too small to hold a slot).
  static uint64_t BlockSizeOf(uint64_t region_size);
  // The slot class (index) of an object of `size` payload bytes, whatever the blocks hold.
  static int SlotClassOf(uint64_t size);
  static uint64_t SlotSize(int c) { return kMinSlot << c; }

  // Takes over a region whose objects already exist (a promoted backup copy): its blocks carved
  // as `layout` says, its free slots the carved slots outside arrays whose lock words say "not
  // allocated", its other blocks free to carve. InvalidArgument for a layout that does not fit
  // the region, AlreadyExists for a region the allocator has.
  absl::Status Adopt(LocalRegion region, const RegionLayout& layout);
  // Whether the region is in this allocator's heap.
  bool Has(uint32_t region) const;
  // The regions in this allocator's heap, ascending.
  std::vector<uint32_t> Regions() const;
  // Sets the function called with a region's id when its first block is carved (it holds data
  // from then on; primary balancing counts it), on the allocating thread, outside the
  // allocator's lock. Call before the allocator is used.
  void OnFirstUse(std::function<void(uint32_t)> f) { on_first_use_ = std::move(f); }
  // Primary hand-off (txn/engine.h): while a region is frozen nothing is reserved or carved in
  // it (its free slots wait aside, and so do slots freed meanwhile); Unfreeze hands them out
  // again. No-ops for a region that is not in the heap, or not frozen.
  void Freeze(uint32_t region);
  void Unfreeze(uint32_t region);
  // Drops a region from the heap (its primary moved to another node): its free slots, object
  // arrays and reservations are forgotten here; its memory is left as it is. False if the region
  // is not in the heap.
  bool Remove(uint32_t region);
  // The layout of a region of `region_size` bytes that has nothing carved.
  static RegionLayout EmptyLayout(uint64_t region_size);
  // The layout of one of the allocator's regions (empty for an unknown one).
  RegionLayout LayoutOf(uint32_t region) const;

  // Reserves a slot for an object of `size` payload bytes. InvalidArgument for 0 bytes or more
  // than the largest object (txn/object.h kMaxObjectSize, or what this node's blocks hold);
  // ResourceExhausted when no slot of its class is free and no block is left.
  absl::StatusOr<GlobalAddress> Reserve(uint64_t size);
  // `count` objects of `size` payload bytes in consecutive slots (one slot size apart) of freshly
  // carved blocks of one region: the first slot's address. The slots count as in use for good
  // (the caller installs objects in them; they are never freed). ResourceExhausted when no region
  // has enough uncarved blocks left in a row.
  absl::StatusOr<GlobalAddress> ReserveArray(uint64_t size, uint64_t count);
  // Whether `slot` lies in an array of ReserveArray: its object may never be freed (a free would
  // put the slot back on a free list while the array's users still count on it).
  bool InArray(GlobalAddress slot) const;
  // Whether `slot` is reserved (Reserve, not yet installed or released).
  bool IsReserved(GlobalAddress slot) const;
  // Ends a reservation without an object (its transaction aborted).
  void CancelReservation(GlobalAddress slot);
  // Ends a reservation: the slot holds an object now.
  void Installed(GlobalAddress slot);
  // Returns the slot of a freed object to its class.
  void Freed(GlobalAddress slot);

  // This node's memory of the object at `addr` with `size` payload bytes, if `addr` starts a slot
  // of a carved block and the object fits the slot: InvalidArgument otherwise (an address that
  // is not an object's).
  absl::StatusOr<char*> Object(GlobalAddress addr, uint64_t size) const;
  // The same without a size: the slot's memory and its size in bytes.
  absl::StatusOr<char*> SlotOf(GlobalAddress addr, uint64_t* slot_size) const;

  // Largest payload an object on this node can have.
  uint64_t max_object_size() const;
  // Slots reserved or holding objects (for tests and statistics).
  uint64_t slots_in_use() const;
  uint64_t reserved() const;

 private:
  struct Region {
    LocalRegion info;
    uint64_t block_size = 0;
    std::vector<int> block_class;  // per block: slot class index, or -1 while not carved
    uint64_t next_block = 0;       // blocks below this are carved (a hint after Adopt)
  };
  // The first run of `n` uncarved blocks of `r` from its hint on, or block_class.size().
  static uint64_t FindUncarved(const Region& r, uint64_t n);
  // Makes room for slot classes up to blocks of `block_size`. Caller holds mu_ (or constructs).
  void GrowClasses(uint64_t block_size);
  // The slot class of an object of `size` payload bytes; InvalidArgument for 0 or too many.
  absl::StatusOr<int> ClassOf(uint64_t size) const;
  // Carves a new block for class `c`; false when none is left. Caller holds mu_; a region
  // whose first block it carved goes to `*first_use`.
  bool CarveBlock(int c, uint32_t* first_use);
  // ReserveArray for slot class `c`, under mu_; a region whose first block it carved goes to
  // `*first_use`.
  absl::StatusOr<GlobalAddress> CarveArray(int c, uint64_t count, uint32_t* first_use);
  // Puts a slot back on its class's free list. Caller holds mu_.
  void ReturnSlot(GlobalAddress slot);
  absl::StatusOr<char*> Locate(GlobalAddress addr, uint64_t* slot_size) const;

  mutable std::mutex mu_;
  std::vector<Region> regions_;
  absl::flat_hash_map<uint32_t, size_t> region_index_;
  std::vector<std::vector<GlobalAddress>> free_;  // by class
  absl::flat_hash_set<uint64_t> reserved_;        // packed addresses
  struct Array {
    uint32_t region = 0;
    uint64_t begin = 0, end = 0;  // offsets of the array's slots
  };
  std::vector<Array> arrays_;
  // Frozen regions, each with its free slots (class, address) set aside.
  absl::flat_hash_map<uint32_t, std::vector<std::pair<int, GlobalAddress>>> frozen_;
  uint64_t in_use_ = 0;
  int classes_ = 0;
  std::function<void(uint32_t)> on_first_use_;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_ALLOCATOR_H_
