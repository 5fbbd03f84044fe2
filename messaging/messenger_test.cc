// Messenger in a three-node in-process cluster on shm: ordering and exactly-once delivery from
// many senders and lanes across many wrap-arounds, back-pressure from a receiver that does not
// consume, and a send waiting for ring space while its destination leaves or restarts.
#include "messaging/messenger.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "messaging/test_cluster.h"

namespace farm {
namespace {

constexpr uint16_t kData = 7;

// Payload: the message's number in its sender thread's stream (8 bytes), the thread's tag (a
// thread may get any lane, and a lane may serve several threads one after the other), then filler
// derived from both.
std::string Numbered(uint64_t k, size_t size, char tag = 0) {
  std::string p(std::max<size_t>(size, 9), '\0');
  std::memcpy(p.data(), &k, 8);
  p[8] = tag;
  for (size_t i = 9; i < p.size(); ++i) p[i] = static_cast<char>(k + i + tag);
  return p;
}

// Records what a receiver got, checking per-(sender, thread) order and content as it goes.
class Tally {
 public:
  void Add(const Message& m) {
    absl::MutexLock l(&mu_);
    uint64_t k = ~uint64_t{0};
    const char tag = m.payload.size() >= 9 ? m.payload[8] : -1;
    if (m.payload.size() >= 8) std::memcpy(&k, m.payload.data(), 8);
    uint64_t& next = next_[{m.from, tag}];
    if (m.type != kData || k != next || m.payload != Numbered(k, m.payload.size(), tag)) {
      errors_.push_back(absl::StrCat("from node ", m.from, " thread ", static_cast<int>(tag),
                                     " (lane ", m.lane, "): got message ", k, " (type ", m.type,
                                     "), expected ", next));
    }
    next = k + 1;
    ++total_;
  }
  bool WaitFor(uint64_t total, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto reached = [this, total]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return total_ >= total; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
  uint64_t total() {
    absl::MutexLock l(&mu_);
    return total_;
  }
  std::vector<std::string> errors() {
    absl::MutexLock l(&mu_);
    return errors_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::pair<uint32_t, char>, uint64_t> next_ ABSL_GUARDED_BY(mu_);
  uint64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

MessengerOptions SmallRings() {
  MessengerOptions o;
  o.lanes = 2;
  o.ring_size = 4096;  // many wrap-arounds with few messages
  return o;
}

}  // namespace

TEST_CASE("many senders and lanes into one receiver: in order, exactly once", "[messenger]") {
  TestCluster c(3, SmallRings());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());
  Tally tally;
  c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane&) { tally.Add(m); });
  for (int i = 0; i < 2; ++i) c.messenger(i)->SetReceiver([](const Message&, Messenger::Lane&) {});

  constexpr int kPerLane = 1500;
  std::vector<std::thread> senders;
  std::atomic<int> failures{0};
  std::string first_failure;
  absl::Mutex failure_mu;
  for (int n = 0; n < 3; ++n) {    // node 2 sends to itself too
    for (int t = 0; t < 2; ++t) {  // one thread per lane
      senders.emplace_back([&, n, t] {
        absl::StatusOr<Messenger::LaneLease> lane = c.messenger(n)->AcquireLane();
        absl::Status s = lane.status();
        for (int k = 0; k < kPerLane && s.ok(); ++k) {
          const std::string p = Numbered(k, (k * 37 + n * 11 + t) % 200, static_cast<char>(t));
          s = (*lane)->Send(2, kData, {p}, absl::Seconds(20));
          if (s.ok() && k % 5 == 4) s = (*lane)->Flush();
        }
        if (s.ok()) s = (*lane)->Flush();
        if (!s.ok()) {
          ++failures;
          absl::MutexLock l(&failure_mu);
          first_failure = s.ToString();
        }
      });
    }
  }
  for (auto& t : senders) t.join();
  INFO(first_failure);
  REQUIRE(failures == 0);
  CHECK(tally.WaitFor(6 * kPerLane, absl::Seconds(30)));
  CHECK(tally.total() == 6 * kPerLane);
  const std::vector<std::string> errors = tally.errors();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  // Every ring into node 2 wrapped around many times: ~1500 messages of ~150 bytes per 4 KiB.
  for (uint32_t from : {0u, 1u, 2u}) CHECK(c.messenger(2)->ReceiveStatus(from).ok());
}

TEST_CASE("a full ring pushes back on the sender and never loses a message", "[messenger]") {
  TestCluster c(3, SmallRings());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessenger(1).ok());  // node 2 has no messenger yet: nobody reads its rings
  c.messenger(1)->SetReceiver([](const Message&, Messenger::Lane&) {});
  absl::StatusOr<Messenger::LaneLease> lane = c.messenger(1)->AcquireLane();
  REQUIRE(lane.ok());

  uint64_t sent = 0;
  absl::Status s;
  while ((s = (*lane)->Send(2, kData, {Numbered(sent, 100)})).ok()) ++sent;
  CHECK(absl::IsResourceExhausted(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("not being consumed"));
  CHECK(sent > 10);
  CHECK(sent * (100 + kFrameOverhead) <= 4096);
  // A bounded wait ends too, with the same error.
  CHECK(absl::IsResourceExhausted(
      (*lane)->Send(2, kData, {Numbered(sent, 100)}, absl::Milliseconds(50))));
  CHECK(!(*lane)->has_unflushed());  // what was accepted went out

  // Now the receiver starts: the backlog drains and sending continues, in order.
  Tally tally;
  REQUIRE(c.StartMessenger(2).ok());
  c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane&) { tally.Add(m); });
  const uint64_t total = sent + 500;
  for (; sent < total; ++sent) {
    REQUIRE((*lane)->Send(2, kData, {Numbered(sent, 100)}, absl::Seconds(20)).ok());
  }
  REQUIRE((*lane)->Flush().ok());
  CHECK(tally.WaitFor(total, absl::Seconds(30)));
  CHECK(tally.total() == total);
  CHECK(tally.errors().empty());
}

TEST_CASE("messenger set-up errors are clear", "[messenger]") {
  TestCluster c(2, SmallRings());
  REQUIRE(c.status().ok());
  MessengerOptions other = SmallRings();
  other.lanes = 3;  // a different layout than the areas were made for
  absl::StatusOr<std::unique_ptr<Messenger>> m = Messenger::Create(c.node(0), other);
  CHECK(absl::IsFailedPrecondition(m.status()));
  other = SmallRings();
  other.ring_size = 1000;
  CHECK(absl::IsInvalidArgument(Messenger::Create(c.node(0), other).status()));
  REQUIRE(c.StartMessenger(0).ok());
  absl::StatusOr<Messenger::LaneLease> a = c.messenger(0)->AcquireLane();
  absl::StatusOr<Messenger::LaneLease> b = c.messenger(0)->AcquireLane();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(absl::IsResourceExhausted(c.messenger(0)->AcquireLane(absl::Milliseconds(10)).status()));
  CHECK(absl::IsInvalidArgument((*a)->Send(99, kData, {"x"})));
  CHECK(absl::IsInvalidArgument((*a)->Send(1, kData, {std::string(2000, 'x')})));
}

// Fills node 1's lane to node 2 (which does not read) until a send without waiting is refused.
void FillRing(Messenger::Lane& lane) {
  uint64_t sent = 0;
  absl::Status s;
  while ((s = lane.Send(2, kData, {Numbered(sent, 100)})).ok()) ++sent;
  REQUIRE(absl::IsResourceExhausted(s));
  REQUIRE(!lane.has_unflushed());
}

// Waits until node 1's messenger sees node 2 as incarnation `incarnation` (0: not a member).
bool WaitForIncarnation(const TestCluster& c, uint32_t incarnation) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (c.messenger(1)->CurrentIncarnation(c.messenger(1)->IndexOf(2)) != incarnation) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

TEST_CASE("a send waiting for ring space fails with Unavailable as soon as its node leaves",
          "[messenger]") {
  TestCluster c(3, SmallRings());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessenger(1).ok());  // node 2 has no messenger: nobody reads its rings
  absl::StatusOr<Messenger::LaneLease> lane = c.messenger(1)->AcquireLane();
  REQUIRE(lane.ok());
  FillRing(**lane);
  // Node 2 leaves while the send waits; the wait is long enough that only noticing the departure
  // (not running out of time) can end it with Unavailable.
  bool left = false;
  (*lane)->SetWaitHookForTesting([&] {
    if (left) return;
    left = true;
    c.StopNode(2);
    REQUIRE(WaitForIncarnation(c, 0));
  });
  absl::Status s = (*lane)->Send(2, kData, {Numbered(999, 100)}, absl::Seconds(20));
  (*lane)->SetWaitHookForTesting(nullptr);
  CHECK(left);
  CHECK(absl::IsUnavailable(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("node 2"));
}

TEST_CASE("a send waiting for ring space is never delivered to a restarted incarnation",
          "[messenger]") {
  TestCluster c(3, SmallRings());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessenger(1).ok());  // node 2 has no messenger: nobody reads its rings
  absl::StatusOr<Messenger::LaneLease> lane = c.messenger(1)->AcquireLane();
  REQUIRE(lane.ok());
  FillRing(**lane);

  std::mutex mu;
  std::vector<std::string> received;  // by the new incarnation of node 2
  // Node 2 leaves and a new process joins under its id while the send waits; the lane sees only
  // the new incarnation (the departure in between is applied before the send looks again).
  bool restarted = false;
  (*lane)->SetWaitHookForTesting([&] {
    if (restarted) return;
    restarted = true;
    c.StopNode(2);
    REQUIRE(c.RestartNode(2).ok());
    REQUIRE(c.StartMessenger(2).ok());
    c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane&) {
      std::lock_guard<std::mutex> l(mu);
      received.emplace_back(m.payload);
    });
    const std::vector<control::RegionInfo> area = c.node(2)->RegionsOf(2, kMessagingAreaPurpose);
    REQUIRE(area.size() == 1);
    REQUIRE(WaitForIncarnation(c, area[0].region_id()));
  });
  // As large as the messages that filled the ring: it does not fit.
  const std::string old_message(100, 'o');
  absl::Status s = (*lane)->Send(2, kData, {old_message}, absl::Seconds(20));
  (*lane)->SetWaitHookForTesting(nullptr);
  CHECK(restarted);
  CHECK(absl::IsUnavailable(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("node 2"));

  // The new incarnation gets what is sent to it from now on, and nothing else.
  REQUIRE((*lane)->Send(2, kData, {"for the new incarnation"}, absl::Seconds(20)).ok());
  REQUIRE((*lane)->Flush().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!received.empty()) break;
    }
    REQUIRE(absl::Now() < deadline);
    absl::SleepFor(absl::Milliseconds(5));
  }
  c.StopMessenger(2);  // no more receiving: `received` is final
  CHECK(received == std::vector<std::string>{"for the new incarnation"});
}

}  // namespace farm
