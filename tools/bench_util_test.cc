#include "tools/bench_util.h"

#include <catch2/catch.hpp>

namespace farm {

TEST_CASE("sizes parse with K and M suffixes within the allowed range", "[bench]") {
  auto s = ParseSizes("8, 4K,1M", 1, uint64_t{1} << 30);
  REQUIRE(s.ok());
  CHECK(*s == std::vector<uint64_t>{8, 4096, 1 << 20});
  CHECK_FALSE(ParseSizes("", 1, 100).ok());
  CHECK_FALSE(ParseSizes("4", 8, 100).ok());
  CHECK_FALSE(ParseSizes("2M", 1, 1 << 20).ok());
  auto bad = ParseSizes("8,lots", 1, 100);
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).find("'lots'") != std::string::npos);
}

TEST_CASE("nearest-rank percentiles", "[bench]") {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  CHECK(Percentile(v, 0.5) == 50);
  CHECK(Percentile(v, 0.99) == 99);
  CHECK(Percentile(v, 1.0) == 100);
  CHECK(Percentile({}, 0.5) == 0);
  CHECK(HumanSize(4096) == "4 KiB");
  CHECK(HumanSize(3 << 20) == "3 MiB");
  CHECK(HumanSize(100) == "100 B");
}

}  // namespace farm
