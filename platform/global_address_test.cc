#include "platform/global_address.h"

#include <catch2/catch.hpp>

namespace farm {

TEST_CASE("global addresses pack into one word and back", "[address]") {
  const GlobalAddress cases[] = {{0, 0},
                                 {1, 4096},
                                 {GlobalAddress::kMaxRegion, GlobalAddress::kMaxOffset},
                                 {12345, (uint64_t{1} << 39) + 17}};
  for (const GlobalAddress& a : cases) {
    CHECK(GlobalAddress::Unpack(a.Pack()) == a);
  }
  CHECK(GlobalAddress{3, 0x1000}.ToString() == "r3+0x1000");
  CHECK((GlobalAddress{3, 8} + 8) == GlobalAddress{3, 16});
}

}  // namespace farm
