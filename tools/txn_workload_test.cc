#include "tools/txn_workload.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace farm {
namespace txnbench {
namespace {

TEST_CASE("parses kinds, distributions and thread lists, naming the bad entry") {
  REQUIRE(ParseKinds("bank,read_only").value() == std::vector<Kind>{Kind::kBank, Kind::kReadOnly});
  REQUIRE(ParseDistributions("zipf").value() == std::vector<Distribution>{Distribution::kZipf});
  REQUIRE(ParseThreads("1, 2,4", 16).value() == std::vector<int>{1, 2, 4});
  absl::StatusOr<std::vector<Kind>> bad = ParseKinds("bank,write_3");
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("write_3") != std::string::npos);
  REQUIRE(!ParseThreads("0", 16).ok());
  REQUIRE(!ParseThreads("17", 16).ok());
  REQUIRE(!ParseThreads("x", 16).ok());
  REQUIRE(!ParseDistributions("normal").ok());
}

TEST_CASE("uniform choice covers the range evenly") {
  KeyChooser keys(Distribution::kUniform, 10, 0);
  Rng rng(7);
  std::vector<int> seen(10);
  for (int i = 0; i < 100000; ++i) ++seen[keys.Next(rng)];
  for (int c : seen) REQUIRE(std::abs(c - 10000) < 600);
}

TEST_CASE("zipf(0.99) favours low indexes as the distribution says") {
  const uint64_t n = 1000;
  KeyChooser keys(Distribution::kZipf, n, 0.99);
  double zeta = 0;
  for (uint64_t i = 1; i <= n; ++i) zeta += 1.0 / std::pow(i, 0.99);
  Rng rng(11);
  std::vector<int> seen(n);
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = keys.Next(rng);
    REQUIRE(k < n);
    ++seen[k];
  }
  // P(0) = 1/zeta, P(1) = 1/(2^0.99 zeta).
  REQUIRE(std::abs(seen[0] / double(draws) - 1 / zeta) < 0.01);
  REQUIRE(std::abs(seen[1] / double(draws) - 1 / (std::pow(2, 0.99) * zeta)) < 0.01);
  REQUIRE(seen[0] > seen[10]);
  REQUIRE(seen[10] > seen[500]);
}

TEST_CASE("distinct choices are distinct") {
  KeyChooser keys(Distribution::kZipf, 8, 0.99);
  Rng rng(3);
  std::vector<uint64_t> out;
  for (int i = 0; i < 1000; ++i) {
    keys.NextDistinct(rng, 4, &out);
    REQUIRE(out.size() == 4);
    for (size_t a = 0; a < 4; ++a) {
      for (size_t b = a + 1; b < 4; ++b) REQUIRE(out[a] != out[b]);
    }
  }
}

TEST_CASE("histogram percentiles are within the bucket width, and merge") {
  LatencyHistogram h, g;
  for (int i = 1; i <= 1000; ++i) h.Add(i);  // 1 .. 1000 us
  REQUIRE(h.total == 1000);
  REQUIRE(std::abs(h.Percentile(0.5) - 500) / 500 < 0.02);
  REQUIRE(std::abs(h.Percentile(0.99) - 990) / 990 < 0.02);
  g.Add(0.01);  // below the first bucket: counted in it
  g.Add(1e9);   // above the last: counted in it
  g.Merge(h);
  REQUIRE(g.total == 1002);
  REQUIRE(LatencyHistogram().Percentile(0.5) == 0);
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
