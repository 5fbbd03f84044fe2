// RPC over WRITEs that the network drops, delays, duplicates or corrupts
// (platform/fault_injection.h), in a three-node in-process cluster: a corrupt frame closes its
// lane with DataLoss and fails the calls to that node at once; a duplicated frame is not
// delivered twice; a dropped head write-back or a delayed request loses and duplicates no call.
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "messaging/rpc.h"
#include "messaging/test_cluster.h"
#include "platform/fault_injection.h"

namespace farm {
namespace {

// A corrupt ring fails the calls that depend on it at once, in one of two ways that race with
// each other: the receiver closes the ring and says so (DataLoss, `data_loss_text`), and it also
// asks the configuration manager to evict the ring's sender, or itself when the sender is the
// CM's node; whoever hears of the eviction first fails the calls with Unavailable ("left the
// cluster", "evicted"). Either is the behaviour wanted: no hang, nothing delivered twice.
bool FailedAtOnce(const absl::Status& s, const std::string& data_loss_text) {
  const std::string m(s.message());
  if (absl::IsDataLoss(s)) return m.find(data_loss_text) != std::string::npos;
  return absl::IsUnavailable(s) && (m.find("left the cluster") != std::string::npos ||
                                    m.find("evicted") != std::string::npos);
}

constexpr uint16_t kEcho = 1;
constexpr int kNodes = 3;

MessengerOptions Options() {
  MessengerOptions o;
  o.lanes = 2;
  o.ring_size = 16384;
  o.incomplete_timeout = absl::Milliseconds(100);
  return o;
}

// Three nodes with an Rpc each; every node answers kEcho with "<node>:<payload>" and counts the
// requests it handled, by payload.
struct Cluster {
  TestCluster c{kNodes, Options()};
  std::vector<std::unique_ptr<Rpc>> rpcs;
  std::mutex mu;
  std::map<std::string, int> handled;  // guarded by mu

  Cluster() {
    INFO(c.status().ToString());
    REQUIRE(c.status().ok());
    REQUIRE(c.StartMessengers().ok());
    for (int i = 0; i < kNodes; ++i) {
      rpcs.push_back(std::make_unique<Rpc>(c.messenger(i)));
      rpcs[i]->RegisterHandler(kEcho, [this, i](const RpcRequest& r) {
        std::lock_guard<std::mutex> l(mu);
        ++handled[std::string(r.payload)];
        return absl::StatusOr<std::string>(absl::StrCat(i, ":", r.payload));
      });
    }
  }
  ~Cluster() { rpcs.clear(); }  // before the messengers

  int Handled(const std::string& payload) {
    std::lock_guard<std::mutex> l(mu);
    return handled[payload];
  }

  // WRITEs from node `from` into [begin, end) of node `to`'s messaging area. The area holds the
  // rings first (N * L rings of R bytes), then the head slots (messenger.h, "Area layout").
  std::function<bool(const WriteInfo&)> Into(int from, int to, uint64_t begin, uint64_t end) {
    const std::vector<control::RegionInfo> area =
        c.node(from)->RegionsOf(to, kMessagingAreaPurpose);
    REQUIRE(area.size() == 1);
    absl::StatusOr<RemoteTarget> t =
        c.node(from)->Resolve(GlobalAddress{area[0].region_id(), begin}, end - begin);
    REQUIRE(t.ok());
    return WritesInto(c.node(from)->fabric(), t->peer, t->buffer, end - begin);
  }
  static uint64_t RingsEnd() {
    return uint64_t{kNodes} * (Options().lanes + 1) * Options().ring_size;
  }
  uint64_t AreaEnd() const { return Messenger::Area(c.node(0)->config(), Options()).size; }
  // Frames (requests, responses) that node `from` writes to node `to`.
  std::function<bool(const WriteInfo&)> Frames(int from, int to) {
    return Into(from, to, 0, RingsEnd());
  }
  // Head write-backs of node `from` (a receiver) into node `to` (its sender).
  std::function<bool(const WriteInfo&)> Heads(int from, int to) {
    return Into(from, to, RingsEnd(), AreaEnd());
  }

  // `n` echo calls from node 0 to node 1, payloads "<tag><k>" of varying sizes (so frames fall
  // at odd places and the 16 KiB ring wraps many times); each must come back once.
  void Exchange(const std::string& tag, int n) {
    for (int k = 0; k < n; ++k) {
      const std::string payload = absl::StrCat(tag, k, std::string(k % 200, 'p'));
      absl::StatusOr<std::string> r = rpcs[0]->Call(1, kEcho, payload, absl::Seconds(5));
      INFO(absl::StrCat("call ", k, ": ", r.status().ToString()));
      REQUIRE(r.ok());
      REQUIRE(*r == absl::StrCat("1:", payload));
      REQUIRE(Handled(payload) == 1);
    }
  }
};

}  // namespace

namespace {

// Node 1, which node 0 can no longer talk to, leaves the cluster (one of them reports the other;
// the CM evicts node 1 either way); calls from node 0 to node 2 still work. The call waits until
// node 0's messenger applied the departure (its requests carry the messenger's epoch, which moves
// after the node's map): a request stamped with the epoch before it, arriving at a node that
// applied it, is refused unexecuted (Aborted, safe to retry), which is not what this checks.
void CheckOthersStillServe(Cluster& k) {
  auto departed = [&] {
    return !k.c.node(0)->IsMember(1) &&
           k.c.messenger(0)->membership_epoch() >= k.c.node(0)->membership().epoch();
  };
  for (int i = 0; i < 2000 && !departed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(departed());
  absl::StatusOr<std::string> ok = k.rpcs[0]->Call(2, kEcho, "still fine");
  INFO(ok.status().ToString());
  REQUIRE(ok.ok());
  CHECK(*ok == "2:still fine");
}

}  // namespace

TEST_CASE("a corrupted response frame fails the calls to that node with DataLoss", "[rpc]") {
  if (!FaultInjection::kCompiledIn) return;
  Cluster k;
  FaultInjection faults;  // after the nodes: destroyed before their fabrics
  k.Exchange("before ", 20);
  WriteFaultRule corrupt{k.Frames(1, 0), WriteFault::kCorrupt};
  corrupt.corrupt_offset = 20;  // in the first frame's payload
  const int rule = faults.Add(corrupt);

  // Two calls in flight to node 1, answered in one scan (one WRITE), and one to node 2.
  absl::StatusOr<Messenger::LaneLease> lane = k.c.messenger(0)->AcquireLane();
  REQUIRE(lane.ok());
  std::vector<std::shared_ptr<Rpc::Pending>> calls;
  for (const char* payload : {"first", "second"}) {
    absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
        k.rpcs[0]->Start(**lane, 1, kEcho, payload, absl::Minutes(10));
    REQUIRE(p.ok());
    calls.push_back(*p);
  }
  for (auto& call : calls) {
    absl::StatusOr<std::string> r = k.rpcs[0]->Await(**lane, *call);  // no hang: 10 min deadline
    INFO(r.status().ToString());
    CHECK(absl::IsDataLoss(r.status()));  // node 0 closed the ring itself: always DataLoss first
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("node 1"));
  }
  CHECK(faults.fired(rule) == 1);
  CHECK(FailedAtOnce(k.c.messenger(0)->ReceiveStatus(1), "corrupt"));
  CHECK(FailedAtOnce(k.rpcs[0]->Call(1, kEcho, "again").status(), "node 1"));
  CheckOthersStillServe(k);
}

TEST_CASE("a corrupted request frame fails the calls to that node with DataLoss", "[rpc]") {
  if (!FaultInjection::kCompiledIn) return;
  Cluster k;
  FaultInjection faults;
  k.Exchange("before ", 20);
  WriteFaultRule corrupt{k.Frames(0, 1), WriteFault::kCorrupt};
  corrupt.corrupt_offset = 20;  // in the first frame's payload
  const int rule = faults.Add(corrupt);

  // Node 1 closes its ring from node 0 and says so in its head report: node 0's calls to node 1
  // fail then, not at their (10 min) deadlines, and so do new ones on that lane.
  absl::StatusOr<Messenger::LaneLease> lane = k.c.messenger(0)->AcquireLane();
  REQUIRE(lane.ok());
  std::vector<std::shared_ptr<Rpc::Pending>> calls;
  for (const char* payload : {"first", "second"}) {
    absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
        k.rpcs[0]->Start(**lane, 1, kEcho, payload, absl::Minutes(10));
    REQUIRE(p.ok());
    calls.push_back(*p);
  }
  for (auto& call : calls) {
    absl::StatusOr<std::string> r = k.rpcs[0]->Await(**lane, *call);
    INFO(r.status().ToString());
    CHECK(FailedAtOnce(r.status(), "node 1 closed its ring"));
  }
  CHECK(faults.fired(rule) == 1);
  CHECK(k.Handled("first") == 0);
  CHECK(k.Handled("second") == 0);
  CHECK(FailedAtOnce(k.c.messenger(1)->ReceiveStatus(0), "corrupt"));
  absl::StatusOr<std::string> again = k.rpcs[0]->Call(**lane, 1, kEcho, "again");
  CHECK(FailedAtOnce(again.status(), "closed its ring"));
  CheckOthersStillServe(k);
}

namespace {

// Frames on a ring are written exactly once (RDMA's reliable connections never repeat a WRITE),
// but a repeated one must never be delivered twice: a copy right after the original is an
// inconsistent frame where the next is due, which closes the ring (the caller's call then fails
// with DataLoss); a copy that lands after the original was consumed leaves stale bytes behind the
// reader, which a lap later are free space to it (no header with the sequence number due: the
// frame due is written over them, ring.cc). Either way nothing is delivered twice.
void CheckNeverTwice(Cluster& k, const std::string& tag, int n) {
  absl::Status failed;
  for (int i = 0; i < n && failed.ok(); ++i) {
    const std::string payload = absl::StrCat(tag, i, std::string(i % 200, 'p'));
    absl::StatusOr<std::string> r = k.rpcs[0]->Call(1, kEcho, payload, absl::Minutes(10));
    INFO(absl::StrCat("call ", i, ": ", r.status().ToString()));
    CHECK(k.Handled(payload) <= 1);
    if (r.ok()) {
      CHECK(*r == absl::StrCat("1:", payload));
      CHECK(k.Handled(payload) == 1);
    } else {
      CHECK(FailedAtOnce(r.status(), "node 1 closed its ring"));
      failed = r.status();
    }
  }
  if (!failed.ok()) {
    // Detected, not absorbed: the receiver closed the ring as corrupt.
    const absl::Status why = k.c.messenger(1)->ReceiveStatus(0);
    INFO(why.ToString());
    CHECK(FailedAtOnce(why, "corrupt"));
  }
  std::lock_guard<std::mutex> l(k.mu);
  for (const auto& [payload, times] : k.handled) {
    INFO(payload);
    CHECK(times <= 1);
  }
}

}  // namespace

TEST_CASE("a duplicated request frame is never delivered twice", "[rpc]") {
  if (!FaultInjection::kCompiledIn) return;
  Cluster k;
  FaultInjection faults;

  SECTION("the copy is posted right after the original") {
    const int rule = faults.Add({k.Frames(0, 1), WriteFault::kDuplicate, /*skip=*/0, /*count=*/10});
    CheckNeverTwice(k, "dup ", 300);
    CHECK(faults.fired(rule) >= 1);
  }
  SECTION("a stale copy lands after the original was consumed, then the ring wraps over it") {
    WriteFaultRule stale{k.Frames(0, 1), WriteFault::kDuplicate};
    stale.delay = absl::InfiniteDuration();  // held until Release
    const int rule = faults.Add(stale);
    k.Exchange("once ", 1);
    CHECK(faults.fired(rule) == 1);
    CHECK(faults.Release() == 1);
    CheckNeverTwice(k, "after ", 300);
    CHECK(k.Handled("once 0") == 1);
  }
}

TEST_CASE("a dropped head write-back loses and duplicates no call", "[rpc]") {
  if (!FaultInjection::kCompiledIn) return;
  Cluster k;
  FaultInjection faults;
  // Node 1's head reports for node 0's rings: drop the first, then the third as well.
  const int first = faults.Add({k.Heads(1, 0), WriteFault::kDrop});
  const int third = faults.Add({k.Heads(1, 0), WriteFault::kDrop, /*skip=*/1});
  k.Exchange("call ", 600);
  CHECK(faults.fired(first) == 1);
  CHECK(faults.fired(third) == 1);
}

TEST_CASE("a delayed request times out or completes once, never twice", "[rpc]") {
  if (!FaultInjection::kCompiledIn) return;
  Cluster k;
  FaultInjection faults;

  SECTION("held past the caller's deadline: DeadlineExceeded, then handled once when it lands") {
    const int rule = faults.Add({k.Frames(0, 1), WriteFault::kDelay});
    absl::StatusOr<std::string> r = k.rpcs[0]->Call(1, kEcho, "held", absl::Milliseconds(300));
    CHECK(absl::IsDeadlineExceeded(r.status()));
    CHECK(faults.fired(rule) == 1);
    CHECK(k.Handled("held") == 0);
    CHECK(faults.Release() == 1);
    // The late response finds no call; the next calls on the same ring work and are answered
    // once, and the held request was handled once.
    k.Exchange("next ", 50);
    CHECK(k.Handled("held") == 1);
    CHECK(k.rpcs[0]->pending_calls() == 0);
  }
  SECTION("held for a while within the caller's deadline: completes once") {
    WriteFaultRule r{k.Frames(0, 1), WriteFault::kDelay};
    r.delay = absl::Milliseconds(100);
    r.count = 5;
    const int rule = faults.Add(r);
    k.Exchange("slow ", 50);
    CHECK(faults.fired(rule) == 5);
  }
}

}  // namespace farm
