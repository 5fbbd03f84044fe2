#include "tools/bench_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace farm {

absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text, uint64_t min,
                                                 uint64_t max) {
  std::vector<uint64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    uint64_t mult = 1;
    if (absl::ConsumeSuffix(&part, "K") || absl::ConsumeSuffix(&part, "k")) {
      mult = 1024;
    } else if (absl::ConsumeSuffix(&part, "M") || absl::ConsumeSuffix(&part, "m")) {
      mult = 1024 * 1024;
    }
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v > max / mult || v * mult < min) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: '", part, "' is not a size between ",
                                                     HumanSize(min), " and ", HumanSize(max)));
    }
    sizes.push_back(v * mult);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes lists no size");
  return sizes;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

std::string HumanSize(uint64_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n >= 1024 && n % 1024 == 0) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " B");
}

}  // namespace farm
