#include "tools/kv_workload.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace farm {
namespace kvbench {
namespace {

constexpr Workload kWorkloads[] = {Workload::kA, Workload::kB, Workload::kC, Workload::kWriteOnly};
constexpr absl::string_view kKeyPrefix = "user";
constexpr int kMaxKeySize = 250;  // memcached's limit
constexpr int kMaxValueSize = 1 << 20;
constexpr int kTagChars = 16;  // hex digits of the key index (and of the version)

int Digits(uint64_t x) {
  int d = 1;
  while (x >= 10) x /= 10, ++d;
  return d;
}

// x in hex, least significant digit first: a value cut short keeps the digits that tell nearby
// keys apart.
void Hex16(uint64_t x, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (int i = 0; i < kTagChars; ++i, x >>= 4) out[i] = kHex[x & 15];
}

}  // namespace

std::string WorkloadFlagName(Workload w) {
  switch (w) {
    case Workload::kA:
      return "a";
    case Workload::kB:
      return "b";
    case Workload::kC:
      return "c";
    case Workload::kWriteOnly:
      return "w";
  }
  return "?";
}

std::string WorkloadName(Workload w) {
  return w == Workload::kWriteOnly ? "write-only" : absl::StrCat("ycsb-", WorkloadFlagName(w));
}

absl::StatusOr<Workload> ParseWorkload(absl::string_view name) {
  for (Workload w : kWorkloads) {
    if (name == WorkloadFlagName(w) || name == WorkloadName(w)) return w;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown workload '", name,
                   "' (known: a, b, c, w = YCSB A 50/50, B 95/5, C read-only, "
                   "write-only)"));
}

absl::StatusOr<std::vector<Workload>> ParseWorkloads(absl::string_view text) {
  std::vector<Workload> out;
  for (const std::string& part : SplitList(text)) {
    absl::StatusOr<Workload> w = ParseWorkload(part);
    if (!w.ok()) return w.status();
    out.push_back(*w);
  }
  return out;
}

double ReadFraction(Workload w) {
  switch (w) {
    case Workload::kA:
      return 0.5;
    case Workload::kB:
      return 0.95;
    case Workload::kC:
      return 1.0;
    case Workload::kWriteOnly:
      return 0.0;
  }
  return 1.0;
}

absl::Status KeySpace::Check() const {
  if (keys < 1) return absl::InvalidArgumentError("there must be at least 1 key");
  if (key_size < 1 || key_size > kMaxKeySize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key size must be 1 to ", kMaxKeySize, " bytes, not ", key_size));
  }
  if (value_size < 1 || value_size > kMaxValueSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("the value size must be 1 to ", kMaxValueSize, " bytes, not ", value_size));
  }
  if (Digits(keys - 1) > key_size) {
    return absl::InvalidArgumentError(absl::StrCat(keys, " keys need keys of at least ",
                                                   Digits(keys - 1), " bytes, not ", key_size));
  }
  return absl::OkStatus();
}

void KeySpace::KeyInto(uint64_t i, std::string* out) const {
  out->assign(static_cast<size_t>(key_size), '0');
  const bool prefixed = key_size - static_cast<int>(kKeyPrefix.size()) >= Digits(keys - 1);
  if (prefixed) std::memcpy(out->data(), kKeyPrefix.data(), kKeyPrefix.size());
  char* p = out->data() + key_size;
  do {
    *--p = static_cast<char>('0' + i % 10);
    i /= 10;
  } while (i > 0);
}

std::string KeySpace::Key(uint64_t i) const {
  std::string k;
  KeyInto(i, &k);
  return k;
}

void KeySpace::ValueInto(uint64_t i, uint64_t version, std::string* out) const {
  char tag[2 * kTagChars];
  Hex16(i, tag);
  Hex16(version, tag + kTagChars);
  out->assign(static_cast<size_t>(value_size), '.');
  std::memcpy(out->data(), tag, std::min<size_t>(sizeof(tag), out->size()));
}

absl::Status KeySpace::CheckValue(uint64_t i, absl::string_view value) const {
  if (value.size() != static_cast<size_t>(value_size)) {
    return absl::DataLossError(
        absl::StrCat("key ", Key(i), ": a value of ", value.size(), " bytes, not ", value_size));
  }
  char tag[kTagChars];
  Hex16(i, tag);
  const size_t n = std::min<size_t>(kTagChars, value.size());
  if (value.substr(0, n) != absl::string_view(tag, n)) {
    return absl::DataLossError(
        absl::StrCat("key ", Key(i), ": the value '", value, "' belongs to another key"));
  }
  return absl::OkStatus();
}

std::optional<uint64_t> KeySpace::VersionIn(absl::string_view value) const {
  if (value.size() < 2 * kTagChars) return std::nullopt;
  uint64_t v = 0;
  for (int i = kTagChars - 1; i >= 0; --i) {
    const char c = value[kTagChars + static_cast<size_t>(i)];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

absl::Status ReadCheck::Value(uint64_t key, absl::string_view value) const {
  if (absl::Status s = space_.CheckValue(key, value); !s.ok()) return s;
  if (last_.empty()) return absl::OkStatus();
  const auto it = last_.find(key);
  if (it == last_.end()) return absl::OkStatus();
  const std::optional<uint64_t> v = space_.VersionIn(value);
  if (!v.has_value()) return absl::OkStatus();
  ++judged_;
  const bool mine = WriterOf(*v) == writer_;
  if (*v == 0 || (mine && *v < it->second)) {
    return absl::DataLossError(
        absl::StrCat("key ", space_.Key(key), ": read version ", absl::Hex(*v), " (writer ",
                     WriterOf(*v), ") after this thread (writer ", writer_, ") completed version ",
                     absl::Hex(it->second), ": a stale read (read-your-writes)"));
  }
  return absl::OkStatus();
}

void ReadCheck::Completed(absl::Span<const Op> ops) {
  for (const Op& op : ops) {
    if (!op.read) last_[op.key] = op.version;
  }
}

OpGenerator::OpGenerator(const KeyChooser& keys, Workload w, uint64_t seed, uint32_t writer,
                         uint64_t first_count)
    : keys_(keys),
      read_fraction_(ReadFraction(w)),
      rng_(seed),
      writer_(writer),
      count_(first_count) {}

Op OpGenerator::Next() {
  Op op;
  op.read = read_fraction_ >= 1.0 || (read_fraction_ > 0 && rng_.Uniform01() < read_fraction_);
  op.key = keys_.Next(rng_);
  if (!op.read) op.version = MakeVersion(writer_, ++count_);
  return op;
}

void OpGenerator::NextRound(int in_flight, std::vector<Op>* ops) {
  ops->clear();
  for (int i = 0; i < in_flight; ++i) ops->push_back(Next());
}

uint64_t ThreadSeed(uint64_t base, uint64_t point, uint64_t thread) {
  return base * 0x9e3779b97f4a7c15ull + point * 1000003 + thread * 7919 + 1;
}

void ClientResult::Merge(const ClientResult& o) {
  ops += o.ops;
  reads += o.reads;
  updates += o.updates;
  rounds += o.rounds;
  latency.Merge(o.latency);
  measured_seconds = std::max(measured_seconds, o.measured_seconds);
  missed_ops += o.missed_ops;
}

absl::Status RunClient(OpGenerator& gen, int in_flight, const Window& window, const RoundFn& round,
                       ClientResult* result) {
  std::vector<Op> ops;
  ops.reserve(static_cast<size_t>(in_flight));
  for (;;) {
    // The generator runs before the clock starts: a latency is the store's (and the client
    // library's), not the generator's.
    gen.NextRound(in_flight, &ops);
    const Clock::time_point t0 = Clock::now();
    if (t0 >= window.end && result->rounds > 0) {
      result->measured_seconds = std::max(result->measured_seconds, window.seconds());
      return absl::OkStatus();
    }
    if (absl::Status s = round(ops); !s.ok()) return s;
    const Clock::time_point t1 = Clock::now();
    if (t1 < window.start) continue;
    if (t1 >= window.end) {
      if (result->rounds > 0) continue;  // ends after the window: not counted
      // Nothing counted yet: this round is, and the measurement runs to its end.
      result->measured_seconds = std::chrono::duration<double>(t1 - window.start).count();
    }
    result->latency.AddN(MicrosBetween(t0, t1), static_cast<uint32_t>(ops.size()));
    result->ops += ops.size();
    ++result->rounds;
    for (const Op& op : ops) ++(op.read ? result->reads : result->updates);
  }
}

absl::Status RunClientOpenLoop(OpGenerator& gen, int in_flight, const Window& window,
                               double rounds_per_s, const RoundFn& round, ClientResult* result) {
  result->measured_seconds = std::max(result->measured_seconds, window.seconds());
  std::vector<Op> ops;
  ops.reserve(static_cast<size_t>(in_flight));
  OpenLoopSchedule schedule(window, rounds_per_s, Clock::now());
  while (const std::optional<Clock::time_point> due = schedule.Next(Clock::now())) {
    gen.NextRound(in_flight, &ops);
    WaitUntil(*due);
    if (absl::Status s = round(ops); !s.ok()) return s;
    if (*due < window.start) continue;
    result->latency.AddN(MicrosBetween(*due, Clock::now()), static_cast<uint32_t>(ops.size()));
    result->ops += ops.size();
    ++result->rounds;
    for (const Op& op : ops) ++(op.read ? result->reads : result->updates);
  }
  result->missed_ops += schedule.missed() * static_cast<uint64_t>(in_flight);
  return absl::OkStatus();
}

absl::Status Preload(uint64_t keys, int threads, uint64_t chunk, const LoadFn& load,
                     const std::function<void(uint64_t done)>& progress) {
  std::atomic<uint64_t> done{0};
  std::vector<absl::Status> status(static_cast<size_t>(threads));
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  const uint64_t chunks = (keys + chunk - 1) / chunk;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (uint64_t c = static_cast<uint64_t>(t); c < chunks; c += threads) {
        // Relaxed: the flag only stops the others early; the status is read after join().
        if (failed.load(std::memory_order_relaxed)) return;
        const uint64_t first = c * chunk;
        const uint64_t count = std::min(chunk, keys - first);
        if (absl::Status s = load(t, first, count); !s.ok()) {
          status[static_cast<size_t>(t)] = s;
          failed.store(true, std::memory_order_relaxed);
          return;
        }
        done.fetch_add(count, std::memory_order_relaxed);
      }
    });
  }
  // The calling thread reports progress until every loader has finished.
  std::atomic<int> finished{0};
  std::thread joiner([&] {
    for (std::thread& w : workers) w.join();
    finished.store(1, std::memory_order_release);  // pairs with the acquire load below
  });
  while (finished.load(std::memory_order_acquire) == 0) {
    progress(done.load(std::memory_order_relaxed));
    for (int i = 0; i < 20 && finished.load(std::memory_order_acquire) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  joiner.join();
  progress(done.load(std::memory_order_relaxed));
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kvbench
}  // namespace farm
