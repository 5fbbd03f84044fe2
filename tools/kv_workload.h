// The workload of //tools:kvbench, one generator for every target it measures (farm's one-sided
// GETs, farm's GETs by RPC, memcached, Redis): YCSB's core workloads over N preloaded keys.
//
//   const KeySpace space{1000000, 16, 32};                // N keys of 16 bytes, 32-byte values
//   const KeyChooser keys(Distribution::kZipf, space.keys, 0.99);   // shared by all threads
//   OpGenerator gen(keys, Workload::kB, ThreadSeed(seed, point, thread));   // one per thread
//   ClientResult r;
//   RETURN_IF_ERROR(RunClient(gen, /*in_flight=*/8, window, round, &r));
//   // round(ops): issue the ops together, wait for all of them; r.latency, r.ops
//   RETURN_IF_ERROR(RunClientOpenLoop(gen, 8, window, /*rounds_per_s=*/1000, round, &r));
//
// Workloads (YCSB's core workloads; an update overwrites an existing key with a new value):
//   a: 50 % reads, 50 % updates      b: 95 % reads, 5 % updates
//   c: 100 % reads                   w: 100 % updates (write-only)
// Keys: key i (0 <= i < N) is "user" followed by i in decimal, zero-padded to the key size (or
// only the digits when the key size leaves no room for "user"). Values: the key's index in hex
// (16 digits, least significant first), then the update's version in hex (its writer and count,
// MakeVersion), then filler, cut to the value size:
// a read checks that the value it got belongs to its key and has the right size, and that it is
// not older than the reading thread's own last completed update of the key (ReadCheck).
// Distributions (tools/bench_util.h's KeyChooser): uniform over the N keys; zipf, a Zipf(theta)
// rank over the N keys scrambled onto them (FNV-1a-64(rank) mod N), so the popular keys are
// spread over the key space (and over the shards) instead of being keys 0, 1, 2, ...; ycsb-zipf,
// YCSB's ScrambledZipfianGenerator exactly (the rank over 10^10 items, then hashed mod N).
// Operations in flight: a round is `in_flight` operations issued together, and it ends when all
// of them have completed; each operation's latency is its round's (issue to last completion,
// the operations' keys formatted and the values read checked on the way; drawing them from the
// generator comes before).
// In flight 1 is one operation at a time (no pipelining).
//
// Thread safety: KeySpace and KeyChooser are immutable (safe for concurrent use); an OpGenerator
// and a ClientResult belong to one thread.
#ifndef FARM_TOOLS_KV_WORKLOAD_H_
#define FARM_TOOLS_KV_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tools/bench_util.h"

namespace farm {
namespace kvbench {

enum class Workload { kA, kB, kC, kWriteOnly };
// The flag's name: "a", "b", "c", "w".
std::string WorkloadFlagName(Workload w);
// The name in results: "ycsb-a", "ycsb-b", "ycsb-c", "write-only".
std::string WorkloadName(Workload w);
// Either name.
absl::StatusOr<Workload> ParseWorkload(absl::string_view name);
// A comma-separated list ("b,c"); InvalidArgument names the entry at fault.
absl::StatusOr<std::vector<Workload>> ParseWorkloads(absl::string_view text);
// The share of reads: 0.5, 0.95, 1, 0.
double ReadFraction(Workload w);

// The keys and values of a run.
struct KeySpace {
  uint64_t keys = 0;
  int key_size = 16;
  int value_size = 32;

  // InvalidArgument when the sizes cannot hold N distinct keys, or are out of range (keys: 1 ..
  // 250 bytes, memcached's limit; values: 1 .. 1 MiB).
  absl::Status Check() const;
  // Key i, exactly key_size bytes.
  std::string Key(uint64_t i) const;
  void KeyInto(uint64_t i, std::string* out) const;
  // Key i's value at `version`, exactly value_size bytes.
  void ValueInto(uint64_t i, uint64_t version, std::string* out) const;
  // OK when `value` is a value of key i (any version); DataLoss saying what is wrong otherwise.
  absl::Status CheckValue(uint64_t i, absl::string_view value) const;
  // The version in a value of key i (CheckValue first); nullopt when values are too short to
  // hold it (under 32 bytes).
  std::optional<uint64_t> VersionIn(absl::string_view value) const;
};

// Versions: the writer (a client thread's number + 1; 0 for preloading) in the top 24 bits, its
// count of updates below.
constexpr int kWriterShift = 40;
inline uint64_t MakeVersion(uint32_t writer, uint64_t count) {
  return (uint64_t{writer} << kWriterShift) | count;
}
inline uint32_t WriterOf(uint64_t version) {
  return static_cast<uint32_t>(version >> kWriterShift);
}

// One operation: a read (GET) or an update (SET/PUT) of key `key`.
struct Op {
  bool read = true;
  uint64_t key = 0;
  uint64_t version = 0;  // updates: the new value's version (MakeVersion(writer, count))
};

// A client thread's check of what it reads: the value belongs to its key (KeySpace::CheckValue)
// and is not older than the thread's own last completed update of the key (read-your-writes):
// after that update, the key holds it or a later one, so neither the preloaded value (writer 0)
// nor an earlier version of the thread's own may come back. Values by other threads pass (their
// order against this thread's update is not known here). Kept across points, with the thread's
// versions growing over all of them (OpGenerator's first_count).
class ReadCheck {
 public:
  ReadCheck(const KeySpace& space, uint32_t writer) : space_(space), writer_(writer) {}
  // DataLoss saying what is wrong.
  absl::Status Value(uint64_t key, absl::string_view value) const;
  // A round's updates completed (every op of a round that returned OK).
  void Completed(absl::Span<const Op> ops);
  uint32_t writer() const { return writer_; }
  // Reads judged against an update of this thread.
  uint64_t judged() const { return judged_; }

 private:
  const KeySpace& space_;
  const uint32_t writer_;
  std::unordered_map<uint64_t, uint64_t> last_;  // key -> this thread's last completed version
  mutable uint64_t judged_ = 0;
};

// A client thread's operations: deterministic for a seed.
class OpGenerator {
 public:
  // Updates carry versions of `writer` (a client thread's number + 1), counted on from
  // `first_count` (a thread's versions must grow over all its points: pass the last count()).
  OpGenerator(const KeyChooser& keys, Workload w, uint64_t seed, uint32_t writer = 1,
              uint64_t first_count = 0);
  // Updates generated so far, first_count included.
  uint64_t count() const { return count_; }
  Op Next();
  // The next round: `in_flight` operations.
  void NextRound(int in_flight, std::vector<Op>* ops);

 private:
  const KeyChooser& keys_;
  double read_fraction_;
  Rng rng_;
  uint32_t writer_;
  uint64_t count_;
};

// The seed of client `thread` in point `point` of a run seeded with `base`: distinct per thread
// and point, the same in every run with the same base.
uint64_t ThreadSeed(uint64_t base, uint64_t point, uint64_t thread);

// What one client thread (or a whole point, merged) measured inside the window.
struct ClientResult {
  uint64_t ops = 0;
  uint64_t reads = 0;
  uint64_t updates = 0;
  uint64_t rounds = 0;
  LatencyHistogram latency;  // per operation: its round's latency
  // From the window's start to its end, or to the end of the one round counted after it (see
  // RunClient); the longest of the merged results. Throughput is ops / measured_seconds.
  double measured_seconds = 0;
  // Open loop: operations due inside the window that the client never issued (it fell a whole
  // window behind its schedule: the rate is beyond what the target serves).
  uint64_t missed_ops = 0;
  void Merge(const ClientResult& o);
};

// Issues the operations of one round together and returns when all have completed: OK, or the
// first error (a missing key or a wrong value is DataLoss).
using RoundFn = std::function<absl::Status(absl::Span<const Op> ops)>;

// Runs rounds of `in_flight` operations back to back until the window ends; counts the rounds
// that complete inside it. If none did (a round longer than the window, on a loaded machine), it
// goes on until one round completes and counts that one, so a point never measures nothing;
// measured_seconds then runs to that round's end. Returns the first error (the point is then
// invalid).
absl::Status RunClient(OpGenerator& gen, int in_flight, const Window& window, const RoundFn& round,
                       ClientResult* result);

// The open loop (no coordinated omission; tools/bench_util.h's OpenLoopSchedule): round k is due
// at start + k / rounds_per_s (start: the call), issued at its due time or at once when the client
// is behind, and its latency runs from its due time, so a slow round delays the ones after it and
// shows in their latency as it would in a client population that does not wait. Counted: the rounds
// due inside the window (the client goes on past the window's end until it has issued them, or
// until it is a whole window behind: the rest are missed_ops). measured_seconds is the window's.
absl::Status RunClientOpenLoop(OpGenerator& gen, int in_flight, const Window& window,
                               double rounds_per_s, const RoundFn& round, ClientResult* result);

// Preloading: keys [0, N) in chunks of `chunk`, by `threads` threads (thread t takes chunks t,
// t + threads, ...); `load(thread, first, count)` stores keys [first, first + count) at version 0.
// While it runs, `progress(done)` is called about five times a second from the calling thread,
// and once at the end. Returns the first error.
using LoadFn = std::function<absl::Status(int thread, uint64_t first, uint64_t count)>;
absl::Status Preload(uint64_t keys, int threads, uint64_t chunk, const LoadFn& load,
                     const std::function<void(uint64_t done)>& progress);

}  // namespace kvbench
}  // namespace farm

#endif  // FARM_TOOLS_KV_WORKLOAD_H_
