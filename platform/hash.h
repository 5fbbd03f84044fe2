// Mix64: splitmix64's finalizer, a bijection that spreads every input bit over the output. Stable
// across processes and machines (unlike absl::Hash), so it may check bytes written to disk or
// sent to another process (messaging/ring.h's FrameHash ends with it; platform/data_dir.h's
// journal frames are checked with it).
#ifndef FARM_PLATFORM_HASH_H_
#define FARM_PLATFORM_HASH_H_

#include <cstdint>

namespace farm {

constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace farm

#endif  // FARM_PLATFORM_HASH_H_
