#include "tools/txn_workload.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace farm {
namespace txnbench {
namespace {

constexpr Kind kKinds[] = {Kind::kReadOnly, Kind::kWrite1, Kind::kWrite4, Kind::kBank, Kind::kTatp};
constexpr auto kGiveUp = std::chrono::seconds(10);

class SteadyLoopClock : public LoopClock {
 public:
  Clock::time_point Now() override { return Clock::now(); }
  void WaitUntil(Clock::time_point t) override { farm::WaitUntil(t); }
};

// Whether an attempt that ended at `end` is counted.
using CountsFn = std::function<bool(Clock::time_point end)>;

// Attempts the drawn transaction until it commits, with RetryBackoff's pauses between attempts,
// and adds to *stats its increment and, of the attempts that `counts`, the aborted ones and the
// committed one, with its latency from `start`. Returns the first error that is not Aborted, or
// DeadlineExceeded when it kept aborting for 10 s (from its first attempt).
absl::Status AttemptUntilCommitted(const std::string& name, const AttemptFn& attempt,
                                   Clock::time_point start, const CountsFn& counts,
                                   LoopClock& clock, Rng& pauses, ClientStats* stats) {
  RetryBackoff backoff;
  const Clock::time_point first = clock.Now();
  for (;;) {
    double commit_us = 0;
    int64_t increment = 0;
    bool found = false;
    const absl::Status s = attempt(&commit_us, &increment, &found);
    const Clock::time_point end = clock.Now();
    const bool counted = counts(end);
    if (s.ok()) {
      stats->increments += increment;
      if (counted) {
        ++stats->commits;
        stats->found += found ? 1 : 0;
        stats->commit.Add(commit_us);
        stats->txn.Add(MicrosBetween(start, end));
      }
      return absl::OkStatus();
    }
    if (!absl::IsAborted(s)) return s;
    if (counted) ++stats->aborts;
    if (end - first > kGiveUp) {
      return absl::DeadlineExceededError(
          absl::StrCat("a ", name, " transaction kept aborting for 10 s: ", s.message()));
    }
    backoff.Pause(pauses);
  }
}

// The closed loop: each transaction as soon as the one before it committed.
absl::Status RunClosedLoop(const std::string& name, const Window& window, Rng& rng, Rng& pauses,
                           const DrawFn& draw, const AttemptFn& attempt, LoopClock& clock,
                           ClientStats* stats) {
  const CountsFn counts = [&](Clock::time_point end) {
    // Nothing committed by the window's end (a transaction longer than the window, on a loaded
    // machine): the window of this client runs on to its first commit, so a point never
    // measures nothing.
    const bool extending = end >= window.end && stats->commits == 0;
    if (extending) {
      stats->seconds =
          std::max(stats->seconds, std::chrono::duration<double>(end - window.start).count());
    }
    return end >= window.start && (end < window.end || extending);
  };
  for (;;) {
    const Clock::time_point t0 = clock.Now();
    if (t0 >= window.end && stats->commits > 0) return absl::OkStatus();
    draw(rng);
    absl::Status s = AttemptUntilCommitted(name, attempt, t0, counts, clock, pauses, stats);
    if (!s.ok()) return s;
  }
}

// The open loop: each transaction at its due time (OpenLoopSchedule), timed from it.
absl::Status RunOpenLoop(const std::string& name, const Window& window, double rate, Rng& rng,
                         Rng& pauses, const DrawFn& draw, const AttemptFn& attempt,
                         LoopClock& clock, ClientStats* stats) {
  OpenLoopSchedule schedule(window, rate, clock.Now());
  while (const std::optional<Clock::time_point> due = schedule.Next(clock.Now())) {
    // Drawn before the due time: a latency is the target's, not the generator's.
    draw(rng);
    clock.WaitUntil(*due);
    // Every attempt of a transaction due inside the window counts, however late it ends.
    const bool counted = *due >= window.start;
    absl::Status s = AttemptUntilCommitted(
        name, attempt, *due, [counted](Clock::time_point) { return counted; }, clock, pauses,
        stats);
    if (!s.ok()) return s;
  }
  stats->missed_tx += schedule.missed();
  return absl::OkStatus();
}

}  // namespace

LoopClock& LoopClock::Steady() {
  static SteadyLoopClock* clock = new SteadyLoopClock();
  return *clock;
}

std::string KindName(Kind k) {
  switch (k) {
    case Kind::kReadOnly:
      return "read_only";
    case Kind::kWrite1:
      return "write_1";
    case Kind::kWrite4:
      return "write_4";
    case Kind::kBank:
      return "bank";
    case Kind::kTatp:
      return "tatp";
  }
  return "?";
}

absl::StatusOr<Kind> ParseKind(absl::string_view name) {
  std::vector<std::string> known;
  for (Kind k : kKinds) {
    if (name == KindName(k)) return k;
    known.push_back(KindName(k));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown transaction kind '", name,
                                                 "' (known: ", absl::StrJoin(known, ", "), ")"));
}

int ObjectsOf(Kind k) {
  switch (k) {
    case Kind::kReadOnly:
    case Kind::kWrite4:
      return 4;
    case Kind::kWrite1:
      return 1;
    case Kind::kBank:
      return 2;
    case Kind::kTatp:
      return 0;
  }
  return 0;
}

int WritesOf(Kind k) { return k == Kind::kReadOnly || k == Kind::kTatp ? 0 : ObjectsOf(k); }

int IncrementOf(Kind k) { return k == Kind::kWrite1 ? 1 : k == Kind::kWrite4 ? 4 : 0; }

absl::StatusOr<std::vector<Kind>> ParseKinds(absl::string_view text) {
  std::vector<Kind> out;
  for (const std::string& part : SplitList(text)) {
    absl::StatusOr<Kind> k = ParseKind(part);
    if (!k.ok()) return k.status();
    out.push_back(*k);
  }
  return out;
}

void ClientStats::Merge(const ClientStats& o) {
  commits += o.commits;
  found += o.found;
  aborts += o.aborts;
  missed_tx += o.missed_tx;
  increments += o.increments;
  seconds = std::max(seconds, o.seconds);
  commit.Merge(o.commit);
  txn.Merge(o.txn);
}

void RetryBackoff::Pause(Rng& rng) {
  absl::SleepFor(absl::Microseconds(cap_us_ * rng.Uniform01()));
  cap_us_ = std::min(cap_us_ * 2, 1000.0);
}

absl::Status RunClient(const KeyChooser& keys, Kind kind, const Window& window, double rate,
                       uint64_t seed, const Attempt& attempt, ClientStats* stats) {
  std::vector<uint64_t> objects;
  return RunTransactions(
      KindName(kind), window, rate, seed,
      [&](Rng& rng) { keys.NextDistinct(rng, ObjectsOf(kind), &objects); },
      [&](double* commit_us, int64_t* increment, bool* found) {
        *increment = IncrementOf(kind);
        *found = true;
        return attempt(objects, commit_us);
      },
      stats);
}

absl::Status RunTransactions(const std::string& name, const Window& window, double rate,
                             uint64_t seed, const DrawFn& draw, const AttemptFn& attempt,
                             ClientStats* stats, LoopClock& clock) {
  // The transactions' inputs from `seed` alone, so that the same seed gives the same stream of
  // transactions on every target however many attempts abort; the retry pauses from a generator
  // of their own (seeded from it deterministically).
  Rng rng(seed);
  Rng pauses(seed ^ 0xa0761d6478bd642full);
  stats->seconds = std::max(stats->seconds, window.seconds());
  return rate > 0 ? RunOpenLoop(name, window, rate, rng, pauses, draw, attempt, clock, stats)
                  : RunClosedLoop(name, window, rng, pauses, draw, attempt, clock, stats);
}

}  // namespace txnbench
}  // namespace farm
