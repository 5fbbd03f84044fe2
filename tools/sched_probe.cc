#include "tools/sched_probe.h"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "platform/priority.h"

namespace farm {
namespace {

std::optional<uint64_t> ReadSteal() {
  std::ifstream f("/proc/stat");
  if (!f) return std::nullopt;
  std::stringstream s;
  s << f.rdbuf();
  return SchedProbe::ParseSteal(s.str());
}

}  // namespace

std::optional<uint64_t> SchedProbe::ParseSteal(absl::string_view stat) {
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.empty() || f[0] != "cpu") continue;
    uint64_t v = 0;
    // cpu user nice system idle iowait irq softirq steal ...
    if (f.size() < 9 || !absl::SimpleAtoi(f[8], &v)) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

SchedProbe::SchedProbe() : thread_([this] { Run(); }) {}

SchedProbe::~SchedProbe() {
  if (thread_.joinable()) Stop();
}

SchedProbe::Result SchedProbe::Stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  return result_;
}

void SchedProbe::Run() {
  using Clock = std::chrono::steady_clock;
  result_.realtime = RaiseToLeasePriority();
  const std::optional<uint64_t> steal_before = ReadSteal();
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  while (!stop_.load(std::memory_order_relaxed)) {
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
    const Clock::time_point now = Clock::now();
    const double gap = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    ++result_.wakeups;
    if (gap > result_.max_gap_ms) result_.max_gap_ms = gap;
    result_.gaps_over_5ms += gap > 5;
    result_.gaps_over_10ms += gap > 10;
  }
  result_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const std::optional<uint64_t> steal_after = ReadSteal();
  const long hz = sysconf(_SC_CLK_TCK);
  if (steal_before && steal_after && hz > 0 && *steal_after >= *steal_before) {
    result_.steal_ms = 1000.0 * static_cast<double>(*steal_after - *steal_before) / hz;
  }
}

}  // namespace farm
