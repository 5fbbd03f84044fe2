#include "tools/txn_workload.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace farm {
namespace txnbench {
namespace {

constexpr Kind kKinds[] = {Kind::kReadOnly, Kind::kWrite1, Kind::kWrite4, Kind::kBank, Kind::kTatp};
constexpr auto kGiveUp = std::chrono::seconds(10);

}  // namespace

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
  increments += o.increments;
  seconds = std::max(seconds, o.seconds);
  commit.Merge(o.commit);
  txn.Merge(o.txn);
}

void RetryBackoff::Pause(Rng& rng) {
  absl::SleepFor(absl::Microseconds(cap_us_ * rng.Uniform01()));
  cap_us_ = std::min(cap_us_ * 2, 1000.0);
}

absl::Status RunClient(const KeyChooser& keys, Kind kind, const Window& window, uint64_t seed,
                       const Attempt& attempt, ClientStats* stats) {
  std::vector<uint64_t> objects;
  return RunTransactions(
      KindName(kind), window, seed,
      [&](Rng& rng) { keys.NextDistinct(rng, ObjectsOf(kind), &objects); },
      [&](double* commit_us, int64_t* increment, bool* found) {
        *increment = IncrementOf(kind);
        *found = true;
        return attempt(objects, commit_us);
      },
      stats);
}

absl::Status RunTransactions(const std::string& name, const Window& window, uint64_t seed,
                             const DrawFn& draw, const AttemptFn& attempt, ClientStats* stats) {
  // The transactions' inputs from `seed` alone, so that the same seed gives the same stream of
  // transactions on every target however many attempts abort; the retry pauses from a generator
  // of their own (seeded from it deterministically).
  Rng rng(seed);
  Rng pauses(seed ^ 0xa0761d6478bd642full);
  stats->seconds =
      std::max(stats->seconds, std::chrono::duration<double>(window.end - window.start).count());
  while (true) {
    const Clock::time_point t0 = Clock::now();
    if (t0 >= window.end && stats->commits > 0) return absl::OkStatus();
    draw(rng);
    RetryBackoff backoff;
    for (;;) {
      double commit_us = 0;
      int64_t increment = 0;
      bool found = false;
      const absl::Status s = attempt(&commit_us, &increment, &found);
      const Clock::time_point t1 = Clock::now();
      // Nothing committed by the window's end (a transaction longer than the window, on a loaded
      // machine): the window of this client runs on to its first commit, so a point never
      // measures nothing.
      const bool extending = t1 >= window.end && stats->commits == 0;
      const bool counted = t1 >= window.start && (t1 < window.end || extending);
      if (counted && extending) {
        stats->seconds =
            std::max(stats->seconds, std::chrono::duration<double>(t1 - window.start).count());
      }
      if (s.ok()) {
        stats->increments += increment;
        if (counted) {
          ++stats->commits;
          stats->found += found ? 1 : 0;
          stats->commit.Add(commit_us);
          stats->txn.Add(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        break;
      }
      if (!absl::IsAborted(s)) return s;
      if (counted) ++stats->aborts;
      if (t1 - t0 > kGiveUp) {
        return absl::DeadlineExceededError(
            absl::StrCat("a ", name, " transaction kept aborting for 10 s: ", s.message()));
      }
      backoff.Pause(pauses);
    }
  }
}

}  // namespace txnbench
}  // namespace farm
