// Small helpers shared by the benchmark tools (fabric_bench, msg_bench).
#ifndef FARM_TOOLS_BENCH_UTIL_H_
#define FARM_TOOLS_BENCH_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farm {

// Parses a --sizes flag: comma-separated byte counts, each optionally with a K or M suffix
// (KiB, MiB), e.g. "8,4K,1M". InvalidArgument names the offending entry and the allowed range.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text, uint64_t min,
                                                 uint64_t max);

// Nearest-rank percentile (p in [0, 1]) of `sorted` samples; 0 for no samples.
double Percentile(const std::vector<double>& sorted, double p);

// "512 B", "4 KiB", "1 MiB".
std::string HumanSize(uint64_t n);

}  // namespace farm

#endif  // FARM_TOOLS_BENCH_UTIL_H_
