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

#include "platform/mutex.h"
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
    farm::MutexLock l(&mu_);
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
    farm::MutexLock l(&mu_);
    auto reached = [this, total]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return total_ >= total; };
    return mu_.AwaitWithTimeout(reached, timeout);
  }
  uint64_t total() {
    farm::MutexLock l(&mu_);
    return total_;
  }
  std::vector<std::string> errors() {
    farm::MutexLock l(&mu_);
    return errors_;
  }

 private:
  farm::Mutex mu_;
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
  c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane*) { tally.Add(m); });
  for (int i = 0; i < 2; ++i) c.messenger(i)->SetReceiver([](const Message&, Messenger::Lane*) {});

  constexpr int kPerLane = 1500;
  std::vector<std::thread> senders;
  std::atomic<int> failures{0};
  std::string first_failure;
  farm::Mutex failure_mu;
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
          farm::MutexLock l(&failure_mu);
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
  c.messenger(1)->SetReceiver([](const Message&, Messenger::Lane*) {});
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
  c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane*) { tally.Add(m); });
  const uint64_t total = sent + 500;
  for (; sent < total; ++sent) {
    REQUIRE((*lane)->Send(2, kData, {Numbered(sent, 100)}, absl::Seconds(20)).ok());
  }
  REQUIRE((*lane)->Flush().ok());
  CHECK(tally.WaitFor(total, absl::Seconds(30)));
  CHECK(tally.total() == total);
  CHECK(tally.errors().empty());
}

TEST_CASE("messages to the node itself: in order, exactly once, across wrap-arounds",
          "[messenger]") {
  // A node's lanes copy frames into its own rings on the sending threads while its poller scans
  // them. Run under ThreadSanitizer (README), this is where the copy raced with the scan.
  TestCluster c(2, SmallRings());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());
  Tally tally;
  c.messenger(0)->SetReceiver([&](const Message& m, Messenger::Lane*) { tally.Add(m); });
  c.messenger(1)->SetReceiver([](const Message&, Messenger::Lane*) {});
  constexpr int kPerThread = 2000;
  std::atomic<int> failures{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < 2; ++t) {
    senders.emplace_back([&, t] {
      absl::StatusOr<Messenger::LaneLease> lane = c.messenger(0)->AcquireLane();
      absl::Status s = lane.status();
      for (int k = 0; k < kPerThread && s.ok(); ++k) {
        s = (*lane)->Send(0, kData, {Numbered(k, (k * 53 + t) % 300, static_cast<char>(t))},
                          absl::Seconds(20));
        if (s.ok() && k % 3 == 2) s = (*lane)->Flush();
      }
      if (s.ok()) s = (*lane)->Flush();
      if (!s.ok()) ++failures;
    });
  }
  for (auto& t : senders) t.join();
  REQUIRE(failures == 0);
  CHECK(tally.WaitFor(2 * kPerThread, absl::Seconds(30)));
  CHECK(tally.total() == 2 * kPerThread);
  const std::vector<std::string> errors = tally.errors();
  INFO((errors.empty() ? std::string() : errors.front()));
  CHECK(errors.empty());
  CHECK(c.messenger(0)->ReceiveStatus(0).ok());
}

TEST_CASE("a late WRITE of a restarted sender's old incarnation is never delivered",
          "[messenger]") {
  // Node 2 writes a frame into node 1's ring (node 1 does not read yet), then restarts. After
  // node 1 has reset its rings from node 2 for the new incarnation, the old frame's bytes land
  // again (a WRITE that was late): the first frame of a fresh ring, sequence number 1 at offset
  // 0, exactly what the new reader waits for, but checksummed for the old incarnation pair.
  MessengerOptions o = SmallRings();
  o.incomplete_timeout = absl::Milliseconds(100);
  TestCluster c(3, o);
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());
  c.messenger(0)->SetReceiver([](const Message&, Messenger::Lane*) {});
  c.messenger(2)->SetReceiver([](const Message&, Messenger::Lane*) {});
  const std::string old_payload = "sent by the old incarnation of node 2";
  constexpr int old_lane = 0, new_lane = 1;  // node 1 resets ring (2, 0) before it acks (2, 1)
  // Both leases, so that each lane is used by index whatever order AcquireLane hands them out.
  auto lanes_by_index = [&](std::vector<Messenger::LaneLease>& leases) {
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<Messenger::LaneLease> l = c.messenger(2)->AcquireLane();
      REQUIRE(l.ok());
      leases.push_back(std::move(*l));
    }
    if (leases[0]->index() != 0) std::swap(leases[0], leases[1]);
  };
  {
    std::vector<Messenger::LaneLease> leases;
    lanes_by_index(leases);
    REQUIRE(leases[old_lane]->Send(1, kData, {old_payload}, absl::Seconds(10)).ok());
    REQUIRE(leases[old_lane]->Flush().ok());
  }
  const char* ring = c.messenger(1)->ReceiveRingForTesting(2, old_lane);
  const uint64_t frame = FrameSize(o.ring_size, 0, old_payload.size());
  std::string old_frame(frame, '\0');
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {  // the WRITE has completed at the sender: its bytes are there
    std::memcpy(old_frame.data(), ring, frame);
    if (old_frame.find(old_payload) != std::string::npos || absl::Now() > deadline) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  REQUIRE(old_frame.find(old_payload) != std::string::npos);

  c.StopNode(2);
  REQUIRE(c.RestartNode(2).ok());
  REQUIRE(c.StartMessenger(2).ok());
  c.messenger(2)->SetReceiver([](const Message&, Messenger::Lane*) {});
  // The new node 2 sends on lane 1 once node 1 acknowledged that ring, which node 1 does in a
  // pass over the rings from node 2 in lane order, each zeroed and reset before its own
  // acknowledgement is posted: when lane 1's arrives, lane 0's ring has been reset (the
  // acknowledgement's tag names the new incarnation, so it cannot be an older one).
  {
    std::vector<Messenger::LaneLease> leases;
    lanes_by_index(leases);
    REQUIRE(leases[new_lane]->Send(1, kData, {"new"}, absl::Seconds(10)).ok());
    REQUIRE(leases[new_lane]->Flush().ok());
  }
  std::memcpy(c.messenger(1)->ReceiveRingForTesting(2, old_lane), old_frame.data(),
              frame);  // late

  std::mutex mu;
  std::vector<std::string> got;
  c.messenger(1)->SetReceiver([&](const Message& m, Messenger::Lane*) {
    std::lock_guard<std::mutex> l(mu);
    got.emplace_back(m.payload);
  });
  // The old frame never verifies: its ring is closed as corrupt once it stayed unchanged.
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (c.messenger(1)->ReceiveStatus(2).ok() && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  // Node 1 closes the ring (DataLoss) and reports node 2, which the configuration manager then
  // evicts: by the time we look, the status may already be that departure (Unavailable), whose
  // reason repeats the corruption (the TSan lane's timing showed both).
  const absl::Status status = c.messenger(1)->ReceiveStatus(2);
  INFO(status.ToString());
  CHECK((absl::IsDataLoss(status) || absl::IsUnavailable(status)));
  CHECK_THAT(std::string(status.message()), Catch::Contains("checksum mismatch"));
  std::lock_guard<std::mutex> l(mu);
  CHECK(got == std::vector<std::string>{"new"});
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
    c.messenger(2)->SetReceiver([&](const Message& m, Messenger::Lane*) {
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
