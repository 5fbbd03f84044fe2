// GlobalAddress: a location in the cluster's shared address space.
//
// The shared address space is the union of every node's registered regions. The configuration
// manager gives each region a cluster-wide id; an address is (region id, byte offset). It packs
// into 64 bits (24-bit region id, 40-bit offset: up to 16 M regions of up to 1 TiB), so it can be
// stored in objects and hash-table slots.
//
//   GlobalAddress a{/*region=*/3, /*offset=*/4096};
//   uint64_t word = a.Pack();
//   assert(GlobalAddress::Unpack(word) == a);
#ifndef FARM_PLATFORM_GLOBAL_ADDRESS_H_
#define FARM_PLATFORM_GLOBAL_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace farm {

struct GlobalAddress {
  static constexpr int kOffsetBits = 40;
  static constexpr uint64_t kMaxOffset = (uint64_t{1} << kOffsetBits) - 1;
  static constexpr uint32_t kMaxRegion = (uint32_t{1} << (64 - kOffsetBits)) - 1;

  uint32_t region = 0;
  uint64_t offset = 0;

  // Packs into one word. Requires region <= kMaxRegion and offset <= kMaxOffset.
  uint64_t Pack() const { return (uint64_t{region} << kOffsetBits) | (offset & kMaxOffset); }
  static GlobalAddress Unpack(uint64_t word) {
    return GlobalAddress{static_cast<uint32_t>(word >> kOffsetBits), word & kMaxOffset};
  }

  GlobalAddress operator+(uint64_t delta) const { return GlobalAddress{region, offset + delta}; }
  friend bool operator==(const GlobalAddress& a, const GlobalAddress& b) {
    return a.region == b.region && a.offset == b.offset;
  }
  friend bool operator!=(const GlobalAddress& a, const GlobalAddress& b) { return !(a == b); }

  // "r3+0x1000".
  std::string ToString() const { return absl::StrCat("r", region, "+0x", absl::Hex(offset)); }
};

}  // namespace farm

#endif  // FARM_PLATFORM_GLOBAL_ADDRESS_H_
