#include "tools/txn_workload.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <functional>
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
  REQUIRE(RunClient(keys, Kind::kBank, window, 0, 1, attempt, &stats).ok());
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
  REQUIRE(RunClient(keys, Kind::kBank, Window::After(0, 20), 0, 2, sleepy, &slow).ok());
  REQUIRE(slow.commits == 1);
  REQUIRE(slow.seconds >= 0.060);

  Attempt broken = [](const std::vector<uint64_t>&, double*) {
    return absl::UnavailableError("gone");
  };
  REQUIRE(absl::IsUnavailable(
      RunClient(keys, Kind::kWrite1, Window::After(0, 1000), 0, 1, broken, &stats)));
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
    REQUIRE(RunTransactions("test", window, 0, seed, draw, attempt, &stats).ok());
    REQUIRE(inputs.size() == kTransactions);
    return inputs;
  };
  const std::vector<uint64_t> calm = drawn(7, 0);
  REQUIRE(drawn(7, 2) == calm);
  REQUIRE(drawn(7, 3) == calm);
  REQUIRE(drawn(8, 0) != calm);
}

// A clock that moves only when the test moves it (an attempt's duration) or the loop waits for a
// due time.
class FakeClock : public LoopClock {
 public:
  Clock::time_point Now() override { return now_; }
  void WaitUntil(Clock::time_point t) override { now_ = std::max(now_, t); }
  void Advance(Clock::duration d) { now_ += d; }
  // `ms` milliseconds after the clock's start.
  Clock::time_point At(double ms) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(ms));
  }
  // A window `warmup_ms` after the clock's start, `duration_ms` long.
  Window After(int warmup_ms, int duration_ms) const {
    return Window{At(warmup_ms), At(warmup_ms + duration_ms)};
  }

 private:
  const Clock::time_point start_ = Clock::time_point(std::chrono::hours(1));
  Clock::time_point now_ = start_;
};

// Open-loop transactions against a fake clock: transaction k (0-based, in the order drawn) takes
// duration_ms(k) of the clock per attempt and aborts its first `aborts(k)` attempts; records when
// each attempt started.
struct OpenLoopRun {
  std::function<double(int k)> duration_ms = [](int) { return 0.25; };
  std::function<int(int k)> aborts = [](int) { return 0; };
  FakeClock clock;
  std::vector<Clock::time_point> starts;  // every attempt's
  ClientStats stats;

  absl::Status Run(const Window& window, double rate) {
    int k = -1, attempts = 0;
    DrawFn draw = [&](Rng&) {
      ++k;
      attempts = 0;
    };
    AttemptFn attempt = [&](double* commit_us, int64_t* increment, bool* found) {
      starts.push_back(clock.Now());
      clock.Advance(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(duration_ms(k))));
      *commit_us = 5;
      *increment = 1;
      *found = true;
      return attempts++ < aborts(k) ? absl::AbortedError("conflict") : absl::OkStatus();
    };
    return RunTransactions("test", window, rate, 1, draw, attempt, &stats, clock);
  }
};

// Whether a histogram's sample at `us` is where the histogram puts it (its buckets are 2 % wide).
bool Near(double got, double us) { return std::abs(got - us) <= 0.02 * us; }

TEST_CASE("the open loop starts each transaction at its due time and times it from then") {
  // 1000 a second from the call: transaction k due at k ms; the window holds k = 10..19.
  OpenLoopRun run;
  const Window window = run.clock.After(10, 10);
  REQUIRE(run.Run(window, 1000).ok());
  REQUIRE(run.starts.size() == 20);  // the warm-up's 10, the window's 10, none after it
  for (int k = 0; k < 20; ++k) REQUIRE(run.starts[k] == run.clock.At(k));
  REQUIRE(run.stats.commits == 10);
  REQUIRE(run.stats.increments == 20);  // warm-up included, for the audit
  REQUIRE(run.stats.missed_tx == 0);
  REQUIRE(run.stats.seconds == Approx(0.010));
  REQUIRE(run.stats.txn.total == 10);
  REQUIRE(Near(run.stats.txn.Percentile(1.0), 250));   // each on time: its own 0.25 ms
  REQUIRE(Near(run.stats.commit.Percentile(0.5), 5));  // the commit step is the attempt's
}

TEST_CASE("a slow transaction delays the ones after it and shows in their latency, retries too") {
  // Transaction 10 takes 3.5 ms: 11 (due at 11 ms) starts at 13.5 ms, 12 at 13.75, 13 at 14,
  // 14 at 14.25, 15 on time again. Transaction 16 aborts once: 0.25 ms for each attempt and the
  // retry pause between them on the steady clock, which this clock does not see.
  OpenLoopRun run;
  run.duration_ms = [](int k) { return k == 10 ? 3.5 : 0.25; };
  run.aborts = [](int k) { return k == 16 ? 1 : 0; };
  REQUIRE(run.Run(run.clock.After(10, 10), 1000).ok());
  REQUIRE(run.starts.size() == 21);
  REQUIRE(run.starts[11] == run.clock.At(13.5));  // late: at once
  REQUIRE(run.starts[14] == run.clock.At(14.25));
  REQUIRE(run.starts[15] == run.clock.At(15));  // caught up: at its due time
  REQUIRE(run.starts[16] == run.clock.At(16));
  REQUIRE(run.starts[17] == run.clock.At(16.25));  // the retry
  REQUIRE(run.stats.commits == 10);
  REQUIRE(run.stats.aborts == 1);
  // From the due times: 3.5, 2.75, 2, 1.25, 0.5 ms, then 0.25 ms but 0.5 ms for the one retried
  // (a closed loop would say 3.5 ms once and 0.25 ms for all the rest).
  // Nearest ranks 10, 9, ... of the 10 (the percentiles between ranks, clear of rounding).
  REQUIRE(Near(run.stats.txn.Percentile(1.0), 3500));
  REQUIRE(Near(run.stats.txn.Percentile(0.85), 2750));
  REQUIRE(Near(run.stats.txn.Percentile(0.75), 2000));
  REQUIRE(Near(run.stats.txn.Percentile(0.65), 1250));
  REQUIRE(Near(run.stats.txn.Percentile(0.55), 500));
  REQUIRE(Near(run.stats.txn.Percentile(0.45), 500));
  REQUIRE(Near(run.stats.txn.Percentile(0.35), 250));
  REQUIRE(run.stats.missed_tx == 0);
}

TEST_CASE("the open loop misses what is due in the window once a whole window behind") {
  // The window is [10, 20) ms; from 30 ms the thread is a whole window behind. One transaction
  // is slow; every one due in the window is counted or missed.
  struct Case {
    int slow;        // the slow transaction
    double slow_ms;  // its duration (the others take 0.25 ms)
    size_t started;  // attempts started
    uint64_t commits, missed;
    double min_us, max_us;  // the counted transactions' latencies from their due times
  };
  const Case cases[] = {
      // 10 ends at 25 ms: behind, but less than a window; 19 starts at 27 ms, ends at 27.25.
      {10, 15, 20, 10, 0, 8250, 15000},
      // 10 ends at 35 ms: a whole window behind, 11..19 are missed.
      {10, 25, 11, 1, 9, 25000, 25000},
      // 0 ends at 40 ms: behind from the warm-up on, the whole window is missed.
      {0, 40, 1, 0, 10, 0, 0},
  };
  for (const Case& c : cases) {
    OpenLoopRun run;
    run.duration_ms = [&c](int k) { return k == c.slow ? c.slow_ms : 0.25; };
    REQUIRE(run.Run(run.clock.After(10, 10), 1000).ok());
    REQUIRE(run.starts.size() == c.started);
    REQUIRE(run.stats.commits == c.commits);
    REQUIRE(run.stats.missed_tx == c.missed);
    REQUIRE(Near(run.stats.txn.Percentile(0), c.min_us));
    REQUIRE(Near(run.stats.txn.Percentile(1), c.max_us));
  }
}

TEST_CASE("the open loop draws the same transactions as the closed one from the same seed") {
  // The closed loop's first 100 inputs, by count (the window ends once they are drawn), and the
  // open loop's 100 of a fake clock's 100 ms at 1000 a second, every other attempt aborting.
  std::vector<uint64_t> closed, open;
  Window window = Window::After(0, 3600 * 1000);
  AttemptFn ok = [](double* commit_us, int64_t* increment, bool* found) {
    *commit_us = 1;
    *increment = 0;
    *found = true;
    return absl::OkStatus();
  };
  ClientStats stats;
  REQUIRE(RunTransactions(
              "test", window, 0, 7,
              [&](Rng& rng) {
                closed.push_back(rng.Next());
                if (closed.size() == 100) window.end = Clock::now();
              },
              ok, &stats)
              .ok());
  FakeClock clock;
  int attempts = 0;
  AttemptFn flaky = [&](double* commit_us, int64_t* increment, bool* found) {
    return ++attempts % 2 == 0 ? absl::AbortedError("conflict") : ok(commit_us, increment, found);
  };
  REQUIRE(RunTransactions(
              "test", clock.After(0, 100), 1000, 7, [&](Rng& rng) { open.push_back(rng.Next()); },
              flaky, &stats, clock)
              .ok());
  REQUIRE(closed.size() == 100);
  REQUIRE(open == closed);
}

}  // namespace
}  // namespace txnbench
}  // namespace farm
