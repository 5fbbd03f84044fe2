// RPC in a three-node in-process cluster on shm: calls between every pair, batches, errors,
// timeouts, typed methods, function shipping, and a corrupt ring failing the pending calls.
#include "messaging/rpc.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "messaging/test_cluster.h"

namespace farm {
namespace {

constexpr uint16_t kEcho = 1;
constexpr uint16_t kFail = 2;
constexpr uint16_t kBlock = 3;
constexpr uint16_t kIncrement = 4;

struct Add {
  int64_t a, b;
};
constexpr RpcMethod<Add, int64_t> kAdd{5};

MessengerOptions Options() {
  MessengerOptions o;
  o.lanes = 3;
  o.ring_size = 16384;
  o.incomplete_timeout = absl::Milliseconds(100);
  return o;
}

// Echo prefixed with the serving node's id.
void ServeEcho(Rpc& rpc, uint32_t self) {
  rpc.RegisterHandler(kEcho, [self](const RpcRequest& r) -> absl::StatusOr<std::string> {
    return absl::StrCat(self, ":", r.payload);
  });
}

}  // namespace

TEST_CASE("RPC between every pair of nodes", "[rpc]") {
  TestCluster c(3, Options());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());
  std::vector<std::unique_ptr<Rpc>> rpcs;
  for (int i = 0; i < 3; ++i) {
    rpcs.push_back(std::make_unique<Rpc>(c.messenger(i)));
    ServeEcho(*rpcs[i], i);
    rpcs[i]->RegisterHandler(kFail, [](const RpcRequest&) -> absl::StatusOr<std::string> {
      return absl::NotFoundError("no such key");
    });
    kAdd.Serve(*rpcs[i],
               [](uint32_t, const Add& x) -> absl::StatusOr<int64_t> { return x.a + x.b; });
  }

  SECTION("echo from every node to every node, itself included") {
    for (int from = 0; from < 3; ++from) {
      for (uint32_t to = 0; to < 3; ++to) {
        absl::StatusOr<std::string> r = rpcs[from]->Call(to, kEcho, absl::StrCat("hi ", from));
        INFO(r.status().ToString());
        REQUIRE(r.ok());
        CHECK(*r == absl::StrCat(to, ":hi ", from));
      }
    }
  }
  SECTION("handler errors, unknown methods and typed calls") {
    absl::StatusOr<std::string> r = rpcs[0]->Call(1, kFail, "");
    CHECK(absl::IsNotFound(r.status()));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("no such key"));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("node 1"));
    CHECK(absl::IsUnimplemented(rpcs[0]->Call(2, 99, "").status()));
    absl::StatusOr<int64_t> sum = kAdd.Call(*rpcs[2], 0, Add{40, 2});
    REQUIRE(sum.ok());
    CHECK(*sum == 42);
    CHECK(absl::IsInvalidArgument(rpcs[0]->Call(1, kAdd.id, "short").status()));
  }
  SECTION("calls queued together go out together and all come back") {
    absl::StatusOr<Messenger::LaneLease> lane = c.messenger(0)->AcquireLane();
    REQUIRE(lane.ok());
    std::vector<std::shared_ptr<Rpc::Pending>> calls;
    for (int k = 0; k < 60; ++k) {
      absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
          rpcs[0]->Start(**lane, k % 3, kEcho, absl::StrCat(k), absl::Seconds(10));
      REQUIRE(p.ok());
      calls.push_back(*p);
    }
    CHECK((*lane)->has_unflushed());
    for (int k = 0; k < 60; ++k) {
      absl::StatusOr<std::string> r = rpcs[0]->Await(**lane, *calls[k]);
      REQUIRE(r.ok());
      CHECK(*r == absl::StrCat(k % 3, ":", k));
    }
  }
  SECTION("function shipping runs on the node that owns the data") {
    rpcs[1]->RegisterShipped(kIncrement,
                             [](GlobalAddress, char* data, uint64_t available,
                                absl::string_view) -> absl::StatusOr<std::string> {
                               if (available < 8)
                                 return absl::OutOfRangeError("no room for a counter");
                               uint64_t v;
                               std::memcpy(&v, data, 8);
                               ++v;
                               std::memcpy(data, &v, 8);
                               return std::string(reinterpret_cast<const char*>(&v), 8);
                             });
    const GlobalAddress counter{c.node(0)->RegionsOf(1)[0].region_id(), 4096};
    for (int k = 1; k <= 5; ++k) {
      absl::StatusOr<std::string> r = rpcs[2]->Ship(counter, kIncrement, "");
      REQUIRE(r.ok());
      uint64_t v;
      std::memcpy(&v, r->data(), 8);
      CHECK(v == static_cast<uint64_t>(k));
    }
    uint64_t stored = 0;
    REQUIRE(c.node(0)->Read(counter, &stored, 8).ok());
    CHECK(stored == 5);
  }
}

TEST_CASE("a node that does not answer gives DeadlineExceeded", "[rpc]") {
  TestCluster c(2, Options());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());  // node 1 has a messenger but no Rpc: nobody reads
  Rpc rpc(c.messenger(0));
  absl::StatusOr<std::string> r = rpc.Call(1, kEcho, "anyone?", absl::Milliseconds(200));
  CHECK(absl::IsDeadlineExceeded(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("node 1 did not answer"));
}

TEST_CASE("a corrupt ring fails the pending calls with DataLoss, other peers keep working",
          "[rpc]") {
  TestCluster c(3, Options());
  REQUIRE(c.status().ok());
  REQUIRE(c.StartMessengers().ok());
  std::vector<std::unique_ptr<Rpc>> rpcs;
  absl::Notification release;
  for (int i = 0; i < 3; ++i) {
    rpcs.push_back(std::make_unique<Rpc>(c.messenger(i)));
    ServeEcho(*rpcs[i], i);
  }
  rpcs[2]->RegisterHandler(kBlock, [&release](const RpcRequest&) -> absl::StatusOr<std::string> {
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
    return std::string("late");
  });
  absl::StatusOr<Messenger::LaneLease> lane = c.messenger(0)->AcquireLane();
  REQUIRE(lane.ok());
  absl::StatusOr<std::shared_ptr<Rpc::Pending>> call =
      rpcs[0]->Start(**lane, 2, kBlock, "", absl::Seconds(20));
  REQUIRE(call.ok());
  REQUIRE((*lane)->Flush().ok());
  // Garbage where node 2's responses to node 0 arrive: a header with an impossible sequence.
  char* ring = c.messenger(0)->ReceiveRingForTesting(2, Options().lanes);
  const FrameHeader bad{16, Rpc::kResponseType, 0, 0x7777, 0};
  std::memcpy(ring, &bad, sizeof(bad));

  absl::StatusOr<std::string> r = rpcs[0]->Await(**lane, **call);
  release.Notify();
  CHECK(absl::IsDataLoss(r.status()));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("node 2"));
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("sequence number"));
  CHECK(absl::IsDataLoss(c.messenger(0)->ReceiveStatus(2)));
  CHECK(absl::IsDataLoss(rpcs[0]->Call(**lane, 2, kEcho, "again").status()));
  absl::StatusOr<std::string> ok = rpcs[0]->Call(**lane, 1, kEcho, "still fine");
  REQUIRE(ok.ok());
  CHECK(*ok == "1:still fine");
}

}  // namespace farm
