#include "tools/txn_workload.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace farm {
namespace txnbench {
namespace {

constexpr Kind kKinds[] = {Kind::kReadOnly, Kind::kWrite1, Kind::kWrite4, Kind::kBank};
constexpr Distribution kDistributions[] = {Distribution::kUniform, Distribution::kZipf};
constexpr auto kGiveUp = std::chrono::seconds(10);

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

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
  }
  return 0;
}

int WritesOf(Kind k) { return k == Kind::kReadOnly ? 0 : ObjectsOf(k); }

int IncrementOf(Kind k) { return k == Kind::kWrite1 ? 1 : k == Kind::kWrite4 ? 4 : 0; }

std::string DistributionName(Distribution d) {
  return d == Distribution::kUniform ? "uniform" : "zipf";
}

absl::StatusOr<Distribution> ParseDistribution(absl::string_view name) {
  for (Distribution d : kDistributions) {
    if (name == DistributionName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown distribution '", name, "' (known: uniform, zipf)"));
}

absl::StatusOr<std::vector<Kind>> ParseKinds(absl::string_view text) {
  std::vector<Kind> out;
  for (const std::string& part : SplitList(text)) {
    absl::StatusOr<Kind> k = ParseKind(part);
    if (!k.ok()) return k.status();
    out.push_back(*k);
  }
  return out;
}

absl::StatusOr<std::vector<Distribution>> ParseDistributions(absl::string_view text) {
  std::vector<Distribution> out;
  for (const std::string& part : SplitList(text)) {
    absl::StatusOr<Distribution> d = ParseDistribution(part);
    if (!d.ok()) return d.status();
    out.push_back(*d);
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseThreads(absl::string_view text, int max) {
  std::vector<int> out;
  for (const std::string& part : SplitList(text)) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("thread count '", part, "' is not a number from 1 to ", max));
    }
    out.push_back(n);
  }
  return out;
}

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

KeyChooser::KeyChooser(Distribution d, uint64_t n, double theta) : dist_(d), n_(n) {
  if (d != Distribution::kZipf) return;
  theta_ = theta;
  for (uint64_t i = 1; i <= n; ++i) zetan_ += 1.0 / std::pow(static_cast<double>(i), theta);
  const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) / (1.0 - zeta2 / zetan_);
  half_pow_theta_ = std::pow(0.5, theta);
}

uint64_t KeyChooser::Next(Rng& rng) const {
  if (dist_ == Distribution::kUniform) return rng.Next() % n_;
  const double u = rng.Uniform01();
  const double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + half_pow_theta_) return std::min<uint64_t>(1, n_ - 1);
  const double r = static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  return std::min<uint64_t>(static_cast<uint64_t>(r), n_ - 1);
}

void KeyChooser::NextDistinct(Rng& rng, int count, std::vector<uint64_t>* out) const {
  out->clear();
  while (static_cast<int>(out->size()) < count) {
    const uint64_t k = Next(rng);
    if (std::find(out->begin(), out->end(), k) == out->end()) out->push_back(k);
  }
}

void LatencyHistogram::Add(double us) {
  int i = 0;
  if (us > kMinUs) i = static_cast<int>(std::log(us / kMinUs) / std::log(kFactor));
  ++counts[std::clamp(i, 0, kBuckets - 1)];
  ++total;
}

void LatencyHistogram::Merge(const LatencyHistogram& o) {
  for (int i = 0; i < kBuckets; ++i) counts[i] += o.counts[i];
  total += o.total;
}

double LatencyHistogram::Percentile(double p) const {
  if (total == 0) return 0;
  const uint64_t rank =
      std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p * static_cast<double>(total))));
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) return kMinUs * std::pow(kFactor, i + 0.5);
  }
  return kMinUs * std::pow(kFactor, kBuckets);
}

void ClientStats::Merge(const ClientStats& o) {
  commits += o.commits;
  aborts += o.aborts;
  increments += o.increments;
  seconds = std::max(seconds, o.seconds);
  commit.Merge(o.commit);
  txn.Merge(o.txn);
}

Window Window::After(int warmup_ms, int duration_ms) {
  Window w;
  w.start = Clock::now() + std::chrono::milliseconds(warmup_ms);
  w.end = w.start + std::chrono::milliseconds(duration_ms);
  return w;
}

void RetryBackoff::Pause(Rng& rng) {
  absl::SleepFor(absl::Microseconds(cap_us_ * rng.Uniform01()));
  cap_us_ = std::min(cap_us_ * 2, 1000.0);
}

absl::Status RunClient(const KeyChooser& keys, Kind kind, const Window& window, uint64_t seed,
                       const Attempt& attempt, ClientStats* stats) {
  Rng rng(seed);
  std::vector<uint64_t> objects;
  stats->seconds =
      std::max(stats->seconds, std::chrono::duration<double>(window.end - window.start).count());
  while (true) {
    const Clock::time_point t0 = Clock::now();
    if (t0 >= window.end) return absl::OkStatus();
    keys.NextDistinct(rng, ObjectsOf(kind), &objects);
    RetryBackoff backoff;
    for (;;) {
      double commit_us = 0;
      const absl::Status s = attempt(objects, &commit_us);
      const Clock::time_point t1 = Clock::now();
      const bool counted = t1 >= window.start && t1 < window.end;
      if (s.ok()) {
        stats->increments += IncrementOf(kind);
        if (counted) {
          ++stats->commits;
          stats->commit.Add(commit_us);
          stats->txn.Add(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        break;
      }
      if (!absl::IsAborted(s)) return s;
      if (counted) ++stats->aborts;
      if (t1 - t0 > kGiveUp) {
        return absl::DeadlineExceededError(absl::StrCat(
            "a ", KindName(kind), " transaction kept aborting for 10 s: ", s.message()));
      }
      backoff.Pause(rng);
    }
  }
}

}  // namespace txnbench
}  // namespace farm
