#include "tools/bench_util.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace farm {

absl::StatusOr<std::vector<uint64_t>> ParseSizes(absl::string_view text, uint64_t min,
                                                 uint64_t max) {
  std::vector<uint64_t> sizes;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    uint64_t mult = 1;
    if (absl::ConsumeSuffix(&part, "K") || absl::ConsumeSuffix(&part, "k")) {
      mult = 1024;
    } else if (absl::ConsumeSuffix(&part, "M") || absl::ConsumeSuffix(&part, "m")) {
      mult = 1024 * 1024;
    }
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v > max / mult || v * mult < min) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: '", part, "' is not a size between ",
                                                     HumanSize(min), " and ", HumanSize(max)));
    }
    sizes.push_back(v * mult);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--sizes lists no size");
  return sizes;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  return sorted[std::min(sorted.size(), std::max<size_t>(rank, 1)) - 1];
}

std::string HumanSize(uint64_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return absl::StrCat(n >> 20, " MiB");
  if (n >= 1024 && n % 1024 == 0) return absl::StrCat(n >> 10, " KiB");
  return absl::StrCat(n, " B");
}

std::vector<std::string> SplitList(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

absl::StatusOr<std::vector<int>> ParseThreads(absl::string_view text, int max) {
  std::vector<int> out;
  for (const std::string& part : SplitList(text)) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part, "' is not a number from 1 to ", max));
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

Spread SpreadOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? Spread{} : Spread{v[(v.size() - 1) / 2], v.front(), v.back()};
}

std::string DistributionName(Distribution d) {
  switch (d) {
    case Distribution::kUniform:
      return "uniform";
    case Distribution::kZipf:
      return "zipf";
    case Distribution::kYcsbZipf:
      return "ycsb-zipf";
    case Distribution::kNurand:
      return "nurand";
  }
  return "?";
}

absl::StatusOr<Distribution> ParseDistribution(absl::string_view name) {
  for (Distribution d : {Distribution::kUniform, Distribution::kZipf, Distribution::kYcsbZipf,
                         Distribution::kNurand}) {
    if (name == DistributionName(d)) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown distribution '", name, "' (known: uniform, zipf, ycsb-zipf, nurand)"));
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

uint64_t Fnv1a64(uint64_t x) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= x & 0xff;
    h *= 0x100000001b3ull;
    x >>= 8;
  }
  return h;
}

double ZipfRanks::Zeta(uint64_t items, double theta) {
  constexpr uint64_t kExact = 1000000;
  double sum = 0;
  const uint64_t exact = std::min(items, kExact);
  for (uint64_t i = 1; i <= exact; ++i) sum += std::pow(static_cast<double>(i), -theta);
  if (items == exact) return sum;
  // Euler-Maclaurin for f(x) = x^-theta over (exact, items]: the integral, the end-point
  // correction and the first derivative term (the next ones are below 1e-20 here).
  const double a = static_cast<double>(exact), b = static_cast<double>(items);
  auto f = [theta](double x) { return std::pow(x, -theta); };
  auto df = [theta](double x) { return -theta * std::pow(x, -theta - 1); };
  const double integral = (std::pow(b, 1 - theta) - std::pow(a, 1 - theta)) / (1 - theta);
  return sum + integral + (f(b) - f(a)) / 2 + (df(b) - df(a)) / 12;
}

ZipfRanks::ZipfRanks(uint64_t items, double theta) : items_(items), theta_(theta) {
  if (items == 0) return;
  zetan_ = Zeta(items, theta);
  const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
  alpha_ = 1.0 / (1.0 - theta);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(items), 1.0 - theta)) / (1.0 - zeta2 / zetan_);
  half_pow_theta_ = std::pow(0.5, theta);
}

uint64_t ZipfRanks::Next(Rng& rng) const {
  const double u = rng.Uniform01();
  const double uz = u * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + half_pow_theta_) return std::min<uint64_t>(1, items_ - 1);
  const double r = static_cast<double>(items_) * std::pow(eta_ * u - eta_ + 1.0, alpha_);
  return std::min<uint64_t>(static_cast<uint64_t>(r), items_ - 1);
}

KeyChooser::KeyChooser(Distribution d, uint64_t n, double theta)
    : dist_(d),
      n_(n),
      ranks_(d == Distribution::kUniform || d == Distribution::kNurand ? 0
             : d == Distribution::kZipf                                ? n
                                                                       : kYcsbItems,
             theta) {}

uint64_t KeyChooser::NurandA(uint64_t n) {
  return n <= 1000000 ? 65535 : n <= 10000000 ? 1048575 : 2097151;
}

uint64_t KeyChooser::Next(Rng& rng) const {
  if (dist_ == Distribution::kUniform) return rng.Next() % n_;
  if (dist_ == Distribution::kNurand) {
    const uint64_t a = rng.Next() % (NurandA(n_) + 1);
    return (a | (1 + rng.Next() % n_)) % n_;
  }
  return Fnv1a64(ranks_.Next(rng)) % n_;
}

void KeyChooser::NextDistinct(Rng& rng, int count, std::vector<uint64_t>* out) const {
  out->clear();
  while (static_cast<int>(out->size()) < count) {
    const uint64_t k = Next(rng);
    if (std::find(out->begin(), out->end(), k) == out->end()) out->push_back(k);
  }
}

void LatencyHistogram::AddN(double us, uint32_t n) {
  int i = 0;
  if (us > kMinUs) i = static_cast<int>(std::log(us / kMinUs) / std::log(kFactor));
  counts[std::clamp(i, 0, kBuckets - 1)] += n;
  total += n;
}

void LatencyHistogram::Add(double us) { AddN(us, 1); }

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

Window Window::After(int warmup_ms, int duration_ms) {
  Window w;
  w.start = Clock::now() + std::chrono::milliseconds(warmup_ms);
  w.end = w.start + std::chrono::milliseconds(duration_ms);
  return w;
}

void WaitUntil(Clock::time_point t) {
  const Clock::time_point now = Clock::now();
  if (t - now > std::chrono::microseconds(100)) {
    std::this_thread::sleep_for(t - now - std::chrono::microseconds(50));
  }
  while (Clock::now() < t) {
  }
}

OpenLoopSchedule::OpenLoopSchedule(const Window& window, double per_second, Clock::time_point first)
    : window_(window),
      period_(std::max(Clock::duration(1), std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(1.0 / per_second)))),
      next_(first) {}

std::optional<Clock::time_point> OpenLoopSchedule::Next(Clock::time_point now) {
  const Clock::time_point due = next_;
  if (due >= window_.end) return std::nullopt;
  if (now >= window_.end + (window_.end - window_.start)) {
    // A whole window behind: every request still due inside the window is missed.
    const auto span = (window_.end - std::max(due, window_.start)).count();
    missed_ += static_cast<uint64_t>((span + period_.count() - 1) / period_.count());
    next_ = window_.end;
    return std::nullopt;
  }
  next_ += period_;
  return due;
}

double SelfCpuMicros() {
  struct rusage u;
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto us = [](const timeval& t) { return 1e6 * t.tv_sec + t.tv_usec; };
  return us(u.ru_utime) + us(u.ru_stime);
}

absl::StatusOr<double> TreeCpuMicros(const std::vector<int>& roots) {
  // Every process's parent and CPU ticks (/proc/N/stat: "pid (comm) state ppid ... utime stime
  // cutime cstime" as fields 4 and 14-17; comm may hold spaces, so the fields are counted after
  // its ')').
  std::map<int, std::vector<int>> children;
  std::map<int, double> ticks;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return absl::InternalError(absl::StrCat("/proc: ", strerror(errno)));
  while (dirent* e = readdir(proc)) {
    int p = 0;
    if (!absl::SimpleAtoi(e->d_name, &p)) continue;
    std::ifstream in(absl::StrCat("/proc/", p, "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 > stat.size()) continue;
    std::vector<std::string> f = absl::StrSplit(stat.substr(paren + 2), ' ');
    int ppid = 0;
    double t[4] = {};  // utime stime cutime cstime: fields 14-17, f[11..14]
    bool read = f.size() >= 15 && absl::SimpleAtoi(f[1], &ppid);
    for (int i = 0; read && i < 4; ++i) read = absl::SimpleAtod(f[11 + i], &t[i]);
    if (!read) continue;
    children[ppid].push_back(p);
    ticks[p] = t[0] + t[1] + t[2] + t[3];
  }
  closedir(proc);
  double sum = 0;
  std::set<int> seen;
  std::vector<int> todo;
  for (int root : roots) {
    if (ticks.count(root) == 0) {
      return absl::NotFoundError(absl::StrCat("process ", root, " is not running"));
    }
    todo.push_back(root);
  }
  while (!todo.empty()) {
    const int p = todo.back();
    todo.pop_back();
    if (!seen.insert(p).second) continue;
    if (auto t = ticks.find(p); t != ticks.end()) sum += t->second;
    for (int c : children[p]) todo.push_back(c);
  }
  return sum * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace farm
