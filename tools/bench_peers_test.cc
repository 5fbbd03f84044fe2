#include "tools/bench_peers.h"

#include <catch2/catch.hpp>

namespace farm {
namespace {

TEST_CASE("the socket round trip measures both transports") {
  for (Transport t : {Transport::kUnix, Transport::kTcp}) {
    absl::StatusOr<double> p50 = SocketRoundTripP50(t, 64, 200);
    INFO(TransportName(t) << ": " << p50.status().ToString());
    REQUIRE(p50.ok());
    REQUIRE(*p50 > 0);
  }
  // On one CPU, and a large message (several reads per round trip on the echo side).
  absl::StatusOr<double> pinned = SocketRoundTripP50(Transport::kUnix, 1 << 20, 5, "0");
  REQUIRE(pinned.ok());
  REQUIRE(*pinned > 0);
}

TEST_CASE("the socket round trip refuses what it cannot measure") {
  REQUIRE(absl::IsInvalidArgument(SocketRoundTripP50(Transport::kUnix, 0, 10).status()));
  REQUIRE(absl::IsInvalidArgument(SocketRoundTripP50(Transport::kTcp, 64, 0).status()));
  REQUIRE(!SocketRoundTripP50(Transport::kUnix, 64, 10, "x").ok());
}

}  // namespace
}  // namespace farm
