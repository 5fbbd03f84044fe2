#include "tools/bench_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

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

TEST_CASE("parses distributions and thread lists, naming the bad entry", "[bench]") {
  REQUIRE(ParseDistributions("zipf").value() == std::vector<Distribution>{Distribution::kZipf});
  REQUIRE(ParseThreads("1, 2,4", 16).value() == std::vector<int>{1, 2, 4});
  absl::StatusOr<std::vector<int>> bad = ParseThreads("1,x", 16);
  REQUIRE(absl::IsInvalidArgument(bad.status()));
  REQUIRE(bad.status().message().find("'x'") != std::string::npos);
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

TEST_CASE("zipf(0.99) ranks favour low ranks as the distribution says") {
  const uint64_t n = 1000;
  ZipfRanks keys(n, 0.99);
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

TEST_CASE("zeta over YCSB's 10^10 items is YCSB's constant") {
  // YCSB's ZipfianGenerator.ZETAN (zeta(10^10, 0.99), summed term by term).
  REQUIRE(std::abs(ZipfRanks::Zeta(kYcsbItems, 0.99) - 26.46902820178302) < 1e-9);
  // Below the exact part's end the sum is exact.
  double zeta = 0;
  for (int i = 1; i <= 1000; ++i) zeta += 1.0 / std::pow(i, 0.5);
  REQUIRE(std::abs(ZipfRanks::Zeta(1000, 0.5) - zeta) < 1e-12);
  // Past it, the Euler-Maclaurin tail against a direct sum of 3 * 10^6 terms.
  double direct = 0;
  for (int i = 1; i <= 3000000; ++i) direct += 1.0 / std::pow(i, 0.9);
  REQUIRE(std::abs(ZipfRanks::Zeta(3000000, 0.9) - direct) < 1e-7);
}

TEST_CASE("FNV-1a-64 is YCSB's fnvhash64") {
  // FNV-1a over the bytes 00 x 8 and 01 00 x 7: the offset basis through 8 rounds.
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) h *= 0x100000001b3ull;
  REQUIRE(Fnv1a64(0) == h);
  REQUIRE(Fnv1a64(1) != Fnv1a64(0));
  REQUIRE(Fnv1a64(0x0102030405060708ull) != Fnv1a64(0x0807060504030201ull));
}

TEST_CASE("ycsb-zipf draws YCSB's ranks and hashes them onto the keys") {
  const uint64_t n = 10000;
  KeyChooser keys(Distribution::kYcsbZipf, n, 0.99);
  Rng rng(13);
  std::vector<int> seen(n);
  const int draws = 400000;
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = keys.Next(rng);
    REQUIRE(k < n);
    ++seen[k];
  }
  // The hottest key is rank 0's, at 1/ZETAN (plus the few other ranks hashed onto it); rank 1's
  // at 1/(2^0.99 ZETAN).
  const double zetan = 26.46902820178302;
  const uint64_t hottest = Fnv1a64(0) % n;
  REQUIRE(*std::max_element(seen.begin(), seen.end()) == seen[hottest]);
  REQUIRE(std::abs(seen[hottest] / double(draws) - 1 / zetan) < 0.005);
  REQUIRE(std::abs(seen[Fnv1a64(1) % n] / double(draws) - 1 / (std::pow(2, 0.99) * zetan)) < 0.005);
  // Less skewed than zipf over the n keys: the ranks past n spread over every key, so (nearly)
  // every key is drawn.
  REQUIRE(std::count(seen.begin(), seen.end(), 0) < static_cast<long>(n / 100));
}

TEST_CASE("a spread is the median, minimum and maximum") {
  const Spread s = SpreadOf({3, 1, 2});
  REQUIRE(s.median == 2);
  REQUIRE(s.min == 1);
  REQUIRE(s.max == 3);
  REQUIRE(SpreadOf({4, 1}).median == 1);  // the lower middle
  REQUIRE(SpreadOf({}).max == 0);
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
  LatencyHistogram n;
  n.AddN(10, 99);
  n.Add(1000);
  REQUIRE(n.total == 100);
  REQUIRE(std::abs(n.Percentile(0.99) - 10) / 10 < 0.02);
  REQUIRE(std::abs(n.Percentile(1.0) - 1000) / 1000 < 0.02);
}

TEST_CASE("the open loop's schedule: due times from the first, then the misses", "[bench]") {
  const Clock::time_point t0{std::chrono::hours(1)};
  const auto ms = [t0](int n) { return t0 + std::chrono::milliseconds(n); };
  const Window window{ms(10), ms(20)};  // from ms(30) a client is a whole window behind

  // On time: every request due before the window's end, 1 ms apart from the first.
  OpenLoopSchedule on_time(window, 1000, t0);
  for (int k = 0; k < 20; ++k) REQUIRE(on_time.Next(ms(k)) == ms(k));
  REQUIRE(on_time.Next(ms(20)) == std::nullopt);
  REQUIRE(on_time.missed() == 0);

  // Late, but less than a window behind: the same due times, asked later.
  OpenLoopSchedule late(window, 1000, t0);
  for (int k = 0; k < 20; ++k) REQUIRE(late.Next(ms(29)) == ms(k));
  REQUIRE(late.Next(ms(29)) == std::nullopt);
  REQUIRE(late.missed() == 0);

  // A whole window behind after request 12: 13..19 are missed, and the schedule stays ended.
  OpenLoopSchedule behind(window, 1000, t0);
  for (int k = 0; k <= 12; ++k) REQUIRE(behind.Next(ms(k)) == ms(k));
  REQUIRE(behind.Next(ms(30)) == std::nullopt);
  REQUIRE(behind.missed() == 7);
  REQUIRE(behind.Next(ms(31)) == std::nullopt);
  REQUIRE(behind.missed() == 7);

  // Behind from the warm-up on: only the window's requests are missed.
  OpenLoopSchedule stuck(window, 1000, t0);
  REQUIRE(stuck.Next(t0) == t0);
  REQUIRE(stuck.Next(ms(40)) == std::nullopt);
  REQUIRE(stuck.missed() == 10);

  // A rate beyond the clock's resolution is a request every tick.
  OpenLoopSchedule fastest(window, 1e12, t0);
  REQUIRE(fastest.Next(t0) == t0);
  REQUIRE(fastest.Next(t0) == t0 + Clock::duration(1));
}

TEST_CASE("CPU time of this process and of a process tree", "[bench]") {
  // Spins until this process has used `us` more CPU time (false after 20 s of wall time).
  auto spin = [](double us) {
    const double until = SelfCpuMicros() + us;
    const Clock::time_point give_up = Clock::now() + std::chrono::seconds(20);
    volatile uint64_t x = 0;
    while (SelfCpuMicros() < until) {
      if (Clock::now() > give_up) return false;
      x = x + 1;
    }
    return true;
  };
  REQUIRE(spin(50000));
  // A child that used 0.2 s of CPU is counted in its parent's tree (clock ticks: a coarse bound),
  // still once it ended and was reaped (its parent's cutime), and is no root once it is gone.
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const double tree_before = TreeCpuMicros({getpid()}).value();
  const pid_t child = fork();
  if (child == 0) {
    spin(200000);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  // However this scope is left (a failed REQUIRE throws), the paused child is killed and reaped,
  // and the pipe closed.
  struct ChildGuard {
    pid_t pid;
    int fds[2];
    void KillAndReap() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        pid = 0;
      }
    }
    ~ChildGuard() {
      KillAndReap();
      close(fds[0]);
      close(fds[1]);
    }
  } guard{child, {ready[0], ready[1]}};
  REQUIRE(child > 0);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  const double tree = TreeCpuMicros({getpid()}).value() - tree_before;
  // The child's tree alone, and the parent's counted once though the child is in it too.
  REQUIRE(TreeCpuMicros({child}).value() >= 150000);
  REQUIRE(TreeCpuMicros({getpid(), child}).value() - tree_before < tree + 50000);
  guard.KillAndReap();
  REQUIRE(tree >= 150000);
  REQUIRE(TreeCpuMicros({getpid()}).value() - tree_before >= 150000);
  REQUIRE(TreeCpuMicros({child}).status().code() == absl::StatusCode::kNotFound);
  Rng rng(1);
  const KeyChooser nurand(Distribution::kNurand, 10, 0.99);
  REQUIRE(DistributionName(Distribution::kNurand) == "nurand");
  REQUIRE(ParseDistribution("nurand").value() == Distribution::kNurand);
  for (int i = 0; i < 1000; ++i) REQUIRE(nurand.Next(rng) < 10);
}

}  // namespace farm
