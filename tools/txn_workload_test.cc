#include "tools/txn_workload.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "absl/time/clock.h"

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

  // A transaction longer than the whole window (a loaded machine) is counted, and the measured
  // time runs to its end, instead of a point that measured nothing.
  ClientStats slow;
  Attempt sleepy = [](const std::vector<uint64_t>&, double* commit_us) {
    absl::SleepFor(absl::Milliseconds(60));
    *commit_us = 60000;
    return absl::OkStatus();
  };
  REQUIRE(RunClient(keys, Kind::kBank, Window::After(0, 20), 2, sleepy, &slow).ok());
  REQUIRE(slow.commits == 1);
  REQUIRE(slow.seconds >= 0.060);

  Attempt broken = [](const std::vector<uint64_t>&, double*) {
    return absl::UnavailableError("gone");
  };
  REQUIRE(absl::IsUnavailable(
      RunClient(keys, Kind::kWrite1, Window::After(0, 1000), 1, broken, &stats)));
}

TEST_CASE("The same seed draws the same transactions whatever aborts (retry pauses apart)") {
  // The first kTransactions inputs drawn with `seed` when every `abort_every`-th attempt aborts
  // (0: none), by count: the window (an hour) ends once they are drawn.
  static constexpr size_t kTransactions = 200;
  auto drawn = [](uint64_t seed, int abort_every) {
    std::vector<uint64_t> inputs;
    Window window = Window::After(0, 3600 * 1000);
    int attempts = 0;
    DrawFn draw = [&](Rng& rng) {
      inputs.push_back(rng.Next());
      if (inputs.size() == kTransactions) window.end = Clock::now();
    };
    AttemptFn attempt = [&](double* commit_us, int64_t* increment, bool* found) {
      *commit_us = 1;
      *increment = 0;
      *found = true;
      ++attempts;
      return abort_every > 0 && attempts % abort_every == 0 ? absl::AbortedError("conflict")
                                                            : absl::OkStatus();
    };
    ClientStats stats;
    REQUIRE(RunTransactions("test", window, seed, draw, attempt, &stats).ok());
    REQUIRE(inputs.size() == kTransactions);
    return inputs;
  };
  const std::vector<uint64_t> calm = drawn(7, 0);
  REQUIRE(drawn(7, 2) == calm);
  REQUIRE(drawn(7, 3) == calm);
  REQUIRE(drawn(8, 0) != calm);
}

}  // namespace
}  // namespace txnbench
}  // namespace farm
