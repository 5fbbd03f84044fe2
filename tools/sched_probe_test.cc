// SchedProbe: /proc/stat's steal field, and a probe that runs and stops.
#include "tools/sched_probe.h"

#include <catch2/catch.hpp>

#include "absl/time/clock.h"

namespace farm {

TEST_CASE("steal time is the 8th value of /proc/stat's cpu line", "[sched_probe]") {
  const char* stat =
      "cpu  5002512 1497683 2646160 2916212 6290 0 206397 176231 0 0\n"
      "cpu0 2475203 743211 1340114 1472288 1917 0 100513 90476 0 0\n";
  REQUIRE(SchedProbe::ParseSteal(stat) == 176231u);
  // cpu0's line is not the aggregate; an old kernel without the field; no cpu line at all.
  CHECK(!SchedProbe::ParseSteal("cpu0 1 2 3 4 5 6 7 8 9\n").has_value());
  CHECK(!SchedProbe::ParseSteal("cpu 1 2 3 4 5 6 7\n").has_value());
  CHECK(!SchedProbe::ParseSteal("").has_value());
  CHECK(!SchedProbe::ParseSteal("cpu 1 2 3 4 5 6 7 x\n").has_value());
}

TEST_CASE("a probe records its wake-ups until stopped", "[sched_probe]") {
  SchedProbe probe;
  absl::SleepFor(absl::Milliseconds(100));
  SchedProbe::Result r = probe.Stop();
  CHECK(r.wakeups > 0);
  CHECK(r.max_gap_ms >= 1.0);  // a 1 ms sleep never ends early
  CHECK(r.gaps_over_10ms <= r.gaps_over_5ms);
  CHECK(r.gaps_over_5ms <= r.wakeups);
  CHECK(r.seconds > 0);
  // Stopping again returns the same result (the thread has ended).
  CHECK(probe.Stop().wakeups == r.wakeups);
}

}  // namespace farm
