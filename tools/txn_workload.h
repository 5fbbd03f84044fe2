// The workload of //tools:txn_bench, shared by every target it measures (farm, Redis, PostgreSQL)
// so that all of them run the same generator, the same retry policy and the same measurement
// (the generator, histogram and window are tools/bench_util.h's):
//
//   KeyChooser keys(Distribution::kZipf, 100000, 0.99);
//   ClientStats stats;
//   RunClient(keys, Kind::kBank, window, /*rate=*/0, seed, attempt, &stats);  // one thread
//   ClientStats total = ...; total.Merge(stats);                   // per run: all threads
//   double p50 = total.commit.Percentile(0.5);
//
// `attempt` runs one attempt of one transaction against the target (farm: Begin/Get/Put/Commit;
// Redis: WATCH/MGET/MULTI/EXEC; PostgreSQL: a SERIALIZABLE transaction) and says how long its
// commit step took; RunClient retries aborted attempts with the same keys after a random pause
// that grows as in farm::Worker::Run, and counts what committed inside the measurement window.
// Two loops, the same for every target and workload (RunTransactions):
//  - closed (rate 0): each transaction starts as soon as the one before it committed; its
//    latency (ClientStats::txn) runs from its first attempt's start; counted: the attempts that
//    end inside the window;
//  - open (rate > 0, txn_bench's --rate; tools/bench_util.h's OpenLoopSchedule, as kvbench's):
//    transaction k is due at the loop's start + k / rate, whenever the ones before it committed;
//    it starts then, or at once when the client is behind, and its latency runs from its due
//    time, retries included, so a slow transaction shows in the latency of the ones it delayed
//    (no coordinated omission); counted: every attempt of the transactions due inside the window,
//    however late they end; those due inside it but never started (the client a whole window
//    behind) are ClientStats::missed_tx.
// The commit step's latency (ClientStats::commit) is the committed attempt's Commit() in both.
//
// Thread safety: ClientStats belongs to one thread at a time; LoopClock::Steady() is safe for
// concurrent use.
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
#include "tools/bench_util.h"

namespace farm {
namespace txnbench {

// The transactions of issue 9.
enum class Kind {
  kReadOnly,  // read 4 objects
  kWrite1,    // read-modify-write 1 object (+1)
  kWrite4,    // read-modify-write 4 objects (+1 each)
  kBank,      // read 2 accounts, move 1 from the first to the second
  kTatp,      // TATP's mix of 7 transactions on its 4 tables (tools/tatp_workload.h)
};
// "read_only", "write_1", "write_4", "bank", "tatp".
std::string KindName(Kind k);
absl::StatusOr<Kind> ParseKind(absl::string_view name);
// A comma-separated list ("bank,write_1"); InvalidArgument names the entry at fault.
absl::StatusOr<std::vector<Kind>> ParseKinds(absl::string_view text);
// How many distinct objects a transaction of this kind touches, and how many it writes (tatp: 0,
// it varies with the transaction).
int ObjectsOf(Kind k);
int WritesOf(Kind k);
// What one committed transaction adds to the sum of all objects (bank transfers add nothing).
int IncrementOf(Kind k);

// What one client (or a whole run, merged) measured.
struct ClientStats {
  uint64_t commits = 0;     // inside the window
  uint64_t found = 0;       // of those, the ones that found what they looked for (TATP's success)
  uint64_t aborts = 0;      // aborted attempts inside the window
  uint64_t missed_tx = 0;   // open loop: due inside the window, never started
  int64_t increments = 0;   // sum of IncrementOf over every commit, warm-up included (audit;
                            // tatp: CALL_FORWARDING rows added minus rows removed)
  double seconds = 0;       // the window's length (merged: the longest)
  LatencyHistogram commit;  // the commit step of committed attempts
  LatencyHistogram txn;     // start (open loop: due time) to commit, retries included

  void Merge(const ClientStats& o);
  double abort_rate() const {
    return commits + aborts == 0 ? 0.0 : static_cast<double>(aborts) / (commits + aborts);
  }
};

// One attempt at a transaction on `objects` (distinct indexes): OK once it committed (with the
// commit step's duration in *commit_us), Aborted to be retried, any other error to stop.
using Attempt =
    std::function<absl::Status(const std::vector<uint64_t>& objects, double* commit_us)>;

// What a client loop reads the time from and waits on: the steady clock, or a test's that moves
// only when the test moves it (as LevelDB's Env, for the clock alone).
class LoopClock {
 public:
  virtual ~LoopClock() = default;
  virtual Clock::time_point Now() = 0;
  // Returns at `t` or later (at once when it has passed).
  virtual void WaitUntil(Clock::time_point t) = 0;
  // Clock::now() and tools/bench_util.h's WaitUntil.
  static LoopClock& Steady();
};

// Runs transactions of `kind` until the window's end: back to back (the closed loop) when `rate`
// is 0, else `rate` a second (this client's share of the open loop's rate); adds to *stats.
// Returns the first error that is not Aborted (the run is then invalid), or DeadlineExceeded
// when one transaction kept aborting for 10 s.
absl::Status RunClient(const KeyChooser& keys, Kind kind, const Window& window, double rate,
                       uint64_t seed, const Attempt& attempt, ClientStats* stats);

// RunClient's loop for any workload, closed (`rate` 0) or open (`rate` transactions a second,
// the first due at the call): `draw` picks the next transaction's input, `attempt` runs it once
// (OK with the commit step's duration, what it adds to ClientStats::increments and whether it
// found what it looked for; Aborted to be retried with the same input). `name` names the
// transaction in the DeadlineExceeded message. `draw` gets a generator seeded with `seed` that
// nothing else draws from (the retry pauses have their own): the same seed, the same
// transactions, whatever aborts and in either loop. The loop reads and waits on `clock` (the
// retry pauses sleep on the steady clock).
using DrawFn = std::function<void(Rng& rng)>;
using AttemptFn = std::function<absl::Status(double* commit_us, int64_t* increment, bool* found)>;
absl::Status RunTransactions(const std::string& name, const Window& window, double rate,
                             uint64_t seed, const DrawFn& draw, const AttemptFn& attempt,
                             ClientStats* stats, LoopClock& clock = LoopClock::Steady());

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
