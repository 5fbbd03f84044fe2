// FaultInjection on two real endpoints in one process (the provider under test, default shm):
// each fault does to a WRITE what platform/fault_injection.h says, and only to the WRITEs its
// rule matches.
#include "platform/fault_injection.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "platform/fabric.h"
#include "platform/testing/fabric_pair.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace {

constexpr size_t kBytes = 1 << 16;

// Endpoint a writes into b's registered buffer; a thread drives b's progress as a poller would.
struct Pair : testing::FabricPair {
  Pair() : FabricPair(testing::AnyProvider(), kBytes) {}
  // WRITEs `len` bytes of `fill` from a to offset `at` of b; waits for the completion.
  absl::Status Write(size_t at, size_t len, char fill) {
    std::memset(abuf.data(), fill, len);
    OpBatch batch(a.get());
    absl::Status s = batch.Write(b_from_a, Remote(at), LocalBuffer{amr.get(), abuf.data(), len});
    if (!s.ok()) return s;
    return batch.Wait(absl::Seconds(10));
  }
  // True once b's bytes [at, at + len) all equal `fill` (within a bounded wait: the target's
  // progress lands them).
  bool Landed(size_t at, size_t len, char fill) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    for (;;) {
      bool all = true;
      for (size_t i = 0; i < len; ++i) all &= bbuf[at + i] == fill;
      if (all) return true;
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
};

}  // namespace

TEST_CASE("faults act on the WRITEs their rule matches, and only on those", "[fault_injection]") {
  if (!FaultInjection::kCompiledIn) {
    WARN("fault injection is compiled out (NDEBUG)");
    return;
  }
  Pair p;
  FaultInjection faults;  // after the fabrics: destroyed first
  // Rules for the first 4 KiB of b's buffer only.
  auto first_page = WritesInto(p.a.get(), p.b_from_a, p.Remote(0), 4096);

  SECTION("drop: the sender sees success, the bytes never land") {
    const int rule = faults.Add({first_page, WriteFault::kDrop});
    REQUIRE(p.Write(0, 64, 'd').ok());
    REQUIRE(p.Write(8192, 64, 'x').ok());  // not matched: lands
    CHECK(p.Landed(8192, 64, 'x'));
    CHECK(p.bbuf[0] == 0);
    CHECK(faults.fired(rule) == 1);
    REQUIRE(p.Write(0, 64, 'e').ok());  // the rule fired once: this one lands
    CHECK(p.Landed(0, 64, 'e'));
  }
  SECTION("skip lets matching WRITEs through first") {
    const int rule = faults.Add({first_page, WriteFault::kDrop, /*skip=*/1});
    REQUIRE(p.Write(0, 64, 'a').ok());
    CHECK(p.Landed(0, 64, 'a'));
    REQUIRE(p.Write(0, 64, 'b').ok());
    REQUIRE(p.Write(8192, 64, 'x').ok());
    CHECK(p.Landed(8192, 64, 'x'));
    CHECK(p.Landed(0, 64, 'a'));  // 'b' was dropped
    CHECK(faults.fired(rule) == 1);
  }
  SECTION("delay until released: the sender sees success, the bytes land on Release") {
    WriteFaultRule r{first_page, WriteFault::kDelay};
    const int rule = faults.Add(r);
    REQUIRE(p.Write(0, 64, 'l').ok());
    std::memset(p.abuf.data(), 'z', 64);  // the sender may reuse its buffer: a copy was taken
    REQUIRE(p.Write(8192, 64, 'x').ok());
    CHECK(p.Landed(8192, 64, 'x'));
    CHECK(p.bbuf[0] == 0);
    CHECK(faults.held() == 1);
    CHECK(faults.Release() == 1);
    CHECK(p.Landed(0, 64, 'l'));
    CHECK(faults.held() == 0);
    CHECK(faults.fired(rule) == 1);
  }
  SECTION("delay by a time: posted by the injector's thread") {
    WriteFaultRule r{first_page, WriteFault::kDelay};
    r.delay = absl::Milliseconds(20);
    faults.Add(r);
    REQUIRE(p.Write(0, 64, 't').ok());
    CHECK(p.Landed(0, 64, 't'));
    CHECK(faults.held() == 0);
  }
  SECTION("duplicate: posted twice; a held copy lands again after later WRITEs") {
    faults.Add({first_page, WriteFault::kDuplicate});
    REQUIRE(p.Write(0, 64, '1').ok());
    CHECK(p.Landed(0, 64, '1'));
    WriteFaultRule stale{first_page, WriteFault::kDuplicate};
    stale.delay = absl::InfiniteDuration();
    const int rule = faults.Add(stale);
    REQUIRE(p.Write(0, 64, '2').ok());
    CHECK(p.Landed(0, 64, '2'));
    REQUIRE(p.Write(0, 64, '3').ok());  // the rule is spent: lands once
    CHECK(p.Landed(0, 64, '3'));
    CHECK(faults.Release() == 1);
    CHECK(p.Landed(0, 64, '2'));  // the stale copy overwrote the newer bytes
    CHECK(faults.fired(rule) == 1);
  }
  SECTION("corrupt: one byte flipped in what lands, the sender's buffer untouched") {
    WriteFaultRule r{first_page, WriteFault::kCorrupt};
    r.corrupt_offset = 10;
    r.corrupt_mask = 0x01;
    faults.Add(r);
    REQUIRE(p.Write(0, 64, 'c').ok());
    CHECK(p.Landed(11, 53, 'c'));
    CHECK(p.Landed(0, 10, 'c'));
    CHECK(p.bbuf[10] == ('c' ^ 0x01));
    CHECK(p.abuf[10] == 'c');
  }
}

}  // namespace farm
