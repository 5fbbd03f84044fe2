#include "tools/txn_workload.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace farm {
namespace txnbench {
namespace {

TEST_CASE("parses kinds, naming the bad entry") {
  REQUIRE(ParseKinds("bank,read_only").value() == std::vector<Kind>{Kind::kBank, Kind::kReadOnly});
  absl::StatusOr<std::vector<Kind>> bad = ParseKinds("bank,write_3");
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("write_3") != std::string::npos);
}

TEST_CASE("RunClient retries aborts with the same objects and counts the window") {
  KeyChooser keys(Distribution::kUniform, 100, 0);
  const Window window = Window::After(0, 50);
  int attempts = 0;
  std::vector<uint64_t> last;
  Attempt attempt = [&](const std::vector<uint64_t>& objects, double* commit_us) {
    REQUIRE(objects.size() == 2);
    *commit_us = 1;
    if (++attempts % 2 == 1) {
      last = objects;
      return absl::AbortedError("conflict");
    }
    REQUIRE(objects == last);  // the retry
    return absl::OkStatus();
  };
  ClientStats stats;
  REQUIRE(RunClient(keys, Kind::kBank, window, 1, attempt, &stats).ok());
  REQUIRE(stats.commits > 0);
  REQUIRE(stats.aborts >= stats.commits - 1);
  REQUIRE(stats.increments == 0);  // transfers add nothing
  REQUIRE(stats.commit.total == stats.commits);

  Attempt broken = [](const std::vector<uint64_t>&, double*) {
    return absl::UnavailableError("gone");
  };
  REQUIRE(absl::IsUnavailable(
      RunClient(keys, Kind::kWrite1, Window::After(0, 1000), 1, broken, &stats)));
}

}  // namespace
}  // namespace txnbench
}  // namespace farm
