// The workload of //tools:txn_bench, shared by every target it measures (farm, Redis, PostgreSQL)
// so that all of them run the same generator, the same retry policy and the same measurement:
//
//   KeyChooser keys(Distribution::kZipf, 100000, 0.99);
//   ClientStats stats;
//   RunClient(keys, Kind::kBank, window, seed, attempt, &stats);  // one thread, one connection
//   ClientStats total = ...; total.Merge(stats);                   // per run: all threads
//   double p50 = total.commit.Percentile(0.5);
//
// `attempt` runs one attempt of one transaction against the target (farm: Begin/Get/Put/Commit;
// Redis: WATCH/MGET/MULTI/EXEC; PostgreSQL: a SERIALIZABLE transaction) and says how long its
// commit step took; RunClient retries aborted attempts with the same keys after a random pause
// that grows as in farm::Worker::Run, and counts what committed inside the measurement window.
//
// Thread safety: KeyChooser is immutable after construction (safe for concurrent use);
// LatencyHistogram and ClientStats belong to one thread at a time.
#ifndef FARM_TOOLS_TXN_WORKLOAD_H_
#define FARM_TOOLS_TXN_WORKLOAD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace farm {
namespace txnbench {

// The transactions of issue 9.
enum class Kind {
  kReadOnly,  // read 4 objects
  kWrite1,    // read-modify-write 1 object (+1)
  kWrite4,    // read-modify-write 4 objects (+1 each)
  kBank,      // read 2 accounts, move 1 from the first to the second
};
// "read_only", "write_1", "write_4", "bank".
std::string KindName(Kind k);
absl::StatusOr<Kind> ParseKind(absl::string_view name);
// How many distinct objects a transaction of this kind touches, and how many it writes.
int ObjectsOf(Kind k);
int WritesOf(Kind k);
// What one committed transaction adds to the sum of all objects (bank transfers add nothing).
int IncrementOf(Kind k);

enum class Distribution { kUniform, kZipf };
// "uniform", "zipf".
std::string DistributionName(Distribution d);
absl::StatusOr<Distribution> ParseDistribution(absl::string_view name);

// Comma-separated lists of the above ("bank,write_1", "uniform,zipf"); InvalidArgument names the
// entry at fault.
absl::StatusOr<std::vector<Kind>> ParseKinds(absl::string_view text);
absl::StatusOr<std::vector<Distribution>> ParseDistributions(absl::string_view text);
// "1,2,4": each between 1 and `max`.
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

// Object indexes in [0, n): uniform, or Zipf(theta) with index 0 the most popular (Gray et
// al.'s generator, as YCSB's ZipfianGenerator).
class KeyChooser {
 public:
  KeyChooser(Distribution d, uint64_t n, double theta);
  uint64_t Next(Rng& rng) const;
  // `count` distinct indexes (count <= n).
  void NextDistinct(Rng& rng, int count, std::vector<uint64_t>* out) const;
  uint64_t n() const { return n_; }

 private:
  Distribution dist_;
  uint64_t n_;
  double theta_ = 0, alpha_ = 0, zetan_ = 0, eta_ = 0, half_pow_theta_ = 0;
};

// Latencies in log-spaced buckets (2 % apart, from 0.1 µs to about 8 s): mergeable across
// threads and nodes, trivially copyable (it travels in an RPC), percentiles within 1 %.
struct LatencyHistogram {
  static constexpr int kBuckets = 920;
  static constexpr double kMinUs = 0.1;
  static constexpr double kFactor = 1.02;
  uint32_t counts[kBuckets] = {};
  uint64_t total = 0;

  void Add(double us);
  void Merge(const LatencyHistogram& o);
  // The bucket's geometric middle at nearest rank p in [0, 1]; 0 when empty.
  double Percentile(double p) const;
};

// What one client (or a whole run, merged) measured.
struct ClientStats {
  uint64_t commits = 0;     // inside the window
  uint64_t aborts = 0;      // aborted attempts inside the window
  uint64_t increments = 0;  // sum of IncrementOf over every commit, warm-up included (audit)
  double seconds = 0;       // the window's length (merged: the longest)
  LatencyHistogram commit;  // the commit step of committed attempts
  LatencyHistogram txn;     // first attempt's start to commit, retries included

  void Merge(const ClientStats& o);
  double abort_rate() const {
    return commits + aborts == 0 ? 0.0 : static_cast<double>(aborts) / (commits + aborts);
  }
};

using Clock = std::chrono::steady_clock;

// The measurement window of a run: transactions that commit in [start, end) are counted.
struct Window {
  Clock::time_point start;
  Clock::time_point end;
  static Window After(int warmup_ms, int duration_ms);
};

// One attempt at a transaction on `objects` (distinct indexes): OK once it committed (with the
// commit step's duration in *commit_us), Aborted to be retried, any other error to stop.
using Attempt =
    std::function<absl::Status(const std::vector<uint64_t>& objects, double* commit_us)>;

// Runs transactions of `kind` back to back until the window's end; adds to *stats. Returns the
// first error that is not Aborted (the run is then invalid), or DeadlineExceeded when one
// transaction kept aborting for 10 s.
absl::Status RunClient(const KeyChooser& keys, Kind kind, const Window& window, uint64_t seed,
                       const Attempt& attempt, ClientStats* stats);

// The pause before retrying an aborted transaction: uniformly random up to a cap that starts at
// 2 µs and doubles up to 1 ms (farm::Worker::Run's policy, used here for every target).
class RetryBackoff {
 public:
  void Pause(Rng& rng);

 private:
  double cap_us_ = 2;
};

}  // namespace txnbench
}  // namespace farm

#endif  // FARM_TOOLS_TXN_WORKLOAD_H_
