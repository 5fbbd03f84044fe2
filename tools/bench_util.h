// Small helpers shared by the benchmark tools (fabric_bench, msg_bench, txn_bench, kvbench):
// flag lists, a fast seeded generator, uniform and (scrambled) Zipf choice, a mergeable latency
// histogram, a measurement window and an open loop's schedule.
//
//   KeyChooser keys(Distribution::kZipf, 100000, 0.99);   // immutable: share it between threads
//   Rng rng(seed);                                         // one per thread
//   LatencyHistogram h;                                    // one per thread, merged afterwards
//   const Window window = Window::After(warmup_ms, duration_ms);
//   while (Clock::now() < window.end) { ... keys.Next(rng) ...; if (window.Counts(t)) h.Add(us); }
//   double p99 = h.Percentile(0.99);
//
// Thread safety: KeyChooser and Window are immutable after construction (safe for concurrent
// use); Rng, LatencyHistogram and OpenLoopSchedule belong to one thread at a time.
#ifndef FARM_TOOLS_BENCH_UTIL_H_
#define FARM_TOOLS_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <optional>
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

// Repeated runs of one point: the median (the lower middle for an even count), minimum and
// maximum of `v`; all 0 for none.
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread SpreadOf(std::vector<double> v);

// "512 B", "4 KiB", "1 MiB".
std::string HumanSize(uint64_t n);

// The comma-separated entries of `text`, each stripped of surrounding white space.
std::vector<std::string> SplitList(absl::string_view text);

// "1,2,4": each between 1 and `max`; InvalidArgument names the entry at fault.
absl::StatusOr<std::vector<int>> ParseThreads(absl::string_view text, int max);

// A small, fast generator (splitmix64), seeded per client.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform01() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// How keys are chosen:
//  - uniform: every index of [0, n) alike;
//  - zipf: a Zipf(theta) rank over the n keys (rank 0 the most popular), scrambled onto the keys
//    by FNV-1a-64(rank) mod n, so the popular keys are spread over the key space (and over shards
//    and nodes) instead of being 0, 1, 2, ... As skewed as Zipf over n items (the scrambling's
//    collisions aside), so more skewed than YCSB's "zipfian" for n < 10^10;
//  - ycsb-zipf: YCSB's ScrambledZipfianGenerator as YCSB draws it: the rank over YCSB's item space
//    of 10^10 items, FNV-1a-64(rank) mod n. The ranks past n spread almost uniformly, so the hot
//    keys take a smaller share than with zipf (at theta 0.99 the hottest takes 1/26.47 of the
//    draws, against 1/9.79 for zipf over 10^4 keys);
//  - nurand: TATP's non-uniform subscriber choice, (rand(0, A) | rand(1, n)) % n, with A = 65535
//    up to 10^6 keys, 1048575 up to 10^7 and 2097151 beyond (the spec's constants per population).
enum class Distribution { kUniform, kZipf, kYcsbZipf, kNurand };
// "uniform", "zipf", "ycsb-zipf", "nurand".
std::string DistributionName(Distribution d);
absl::StatusOr<Distribution> ParseDistribution(absl::string_view name);
// A comma-separated list ("uniform,zipf"); InvalidArgument names the entry at fault.
absl::StatusOr<std::vector<Distribution>> ParseDistributions(absl::string_view text);

// FNV-1a over the 8 bytes of x, least significant first (YCSB's Utils.fnvhash64).
uint64_t Fnv1a64(uint64_t x);

// Zipf(theta) ranks in [0, items), rank 0 the most popular: Gray et al.'s generator, as YCSB's
// ZipfianGenerator. zeta(items, theta) is summed exactly up to 10^6 terms and by the
// Euler-Maclaurin formula beyond (YCSB's ZETAN for 10^10 items at 0.99, 26.46902820178302, is
// matched to 10 digits).
class ZipfRanks {
 public:
  ZipfRanks(uint64_t items, double theta);
  uint64_t Next(Rng& rng) const;
  double zeta() const { return zetan_; }
  static double Zeta(uint64_t items, double theta);

 private:
  uint64_t items_ = 0;
  double theta_ = 0, alpha_ = 0, zetan_ = 0, eta_ = 0, half_pow_theta_ = 0;
};

// YCSB's item space behind ycsb-zipf.
constexpr uint64_t kYcsbItems = 10000000000ull;

// Indexes in [0, n) by one of the distributions above.
class KeyChooser {
 public:
  KeyChooser(Distribution d, uint64_t n, double theta);
  uint64_t Next(Rng& rng) const;
  // `count` distinct indexes (count <= n).
  void NextDistinct(Rng& rng, int count, std::vector<uint64_t>* out) const;
  uint64_t n() const { return n_; }
  Distribution distribution() const { return dist_; }
  // nurand's A for n keys.
  static uint64_t NurandA(uint64_t n);

 private:
  Distribution dist_;
  uint64_t n_;
  ZipfRanks ranks_;
};

// Latencies in log-spaced buckets (2 % apart, from 0.1 µs to about 8 s): mergeable across
// threads and processes, trivially copyable (it travels in an RPC), percentiles within 1 %.
struct LatencyHistogram {
  static constexpr int kBuckets = 920;
  static constexpr double kMinUs = 0.1;
  static constexpr double kFactor = 1.02;
  uint32_t counts[kBuckets] = {};
  uint64_t total = 0;

  void Add(double us);
  // Adds `n` samples of `us` at once (n operations that completed together).
  void AddN(double us, uint32_t n);
  void Merge(const LatencyHistogram& o);
  // The bucket's geometric middle at nearest rank p in [0, 1]; 0 when empty.
  double Percentile(double p) const;
};

using Clock = std::chrono::steady_clock;

// The measurement window of a run: what completes in [start, end) is counted.
struct Window {
  Clock::time_point start;
  Clock::time_point end;
  static Window After(int warmup_ms, int duration_ms);
  bool Counts(Clock::time_point t) const { return t >= start && t < end; }
  double seconds() const { return std::chrono::duration<double>(end - start).count(); }
};

inline double MicrosBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// Returns at `t` (at once when it has passed): sleeps most of the wait and spins its last 50 µs,
// since a sleeping thread wakes up tens of microseconds late.
void WaitUntil(Clock::time_point t);

// The open loop of kvbench's and txn_bench's --rate (no coordinated omission): request k of a
// client is due at first + k / per_second, whenever the ones before it completed. The client
// issues each at its due time, or at once when it is behind, and times it from its due time, so
// a slow request delays the ones after it and shows in their latency as it would in a population
// of clients that do not wait. The schedule runs until the first request due at or after the
// window's end (the client goes on past the end until it has issued the ones due inside), or
// until the client is a whole window behind (at window.end + its length): every request still
// due inside the window then is missed().
//
//   OpenLoopSchedule schedule(window, per_second, Clock::now());
//   while (const std::optional<Clock::time_point> due = schedule.Next(Clock::now())) {
//     WaitUntil(*due);
//     Issue();
//     if (*due >= window.start) h.Add(MicrosBetween(*due, Clock::now()));   // counted
//   }
//   missed += schedule.missed();
class OpenLoopSchedule {
 public:
  // per_second > 0 (a request at least every tick of the clock: faster rates are that one).
  OpenLoopSchedule(const Window& window, double per_second, Clock::time_point first);
  // The next request's due time, or nullopt when the schedule has ended, asked at `now`.
  std::optional<Clock::time_point> Next(Clock::time_point now);
  // The requests due inside the window that were never issued (final once Next said nullopt).
  uint64_t missed() const { return missed_; }

 private:
  const Window window_;
  const Clock::duration period_;
  Clock::time_point next_;
  uint64_t missed_ = 0;
};

// CPU time (user + system, every thread) this process has used, in microseconds.
double SelfCpuMicros();
// CPU time (user + system) of the processes `roots` and their descendants alive now, each
// counted once, in microseconds, from /proc/N/stat: a process's threads, live and exited (utime,
// stime), and its children that ended and were reaped (cutime, cstime), so that a process that
// ended between two calls still counts, in its parent's. In clock ticks (10 ms on most kernels)
// per process and field. NotFound when a root is not running. The benches measure every side of
// a comparison with it, over a window (the difference of two calls).
absl::StatusOr<double> TreeCpuMicros(const std::vector<int>& roots);

}  // namespace farm

#endif  // FARM_TOOLS_BENCH_UTIL_H_
