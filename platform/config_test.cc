#include "platform/config.h"

#include <catch2/catch.hpp>

namespace farm {

TEST_CASE("a minimal configuration gets every default", "[config]") {
  auto c = ParseClusterConfig(R"(node { id: 4 host: "127.0.0.1" control_port: 7000 })");
  REQUIRE(c.ok());
  CHECK(c->provider() == "auto");
  CHECK(c->region_size() == kDefaultRegionSize);
  CHECK(c->region_count() == kDefaultRegionCount);
  CHECK(c->join_timeout_s() == kDefaultJoinTimeoutS);
  CHECK(c->cm_node_id() == 4);
  CHECK(c->lock_memory());
  CHECK(c->lease_ms() == kDefaultLeaseMs);
}

TEST_CASE("syntax errors name the origin, line and column", "[config]") {
  auto c = ParseClusterConfig("provider: \"shm\"\nnode { id: 1 hots: \"x\" }\n", "my.textproto");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(c.status().message()).find("my.textproto") == 0);
  CHECK(std::string(c.status().message()).find("line 2") != std::string::npos);
}

TEST_CASE("semantic errors say which field is wrong", "[config]") {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"", "lists no node"},
      {R"(provider: "ib" node { id: 0 host: "h" control_port: 1 })", "unknown provider 'ib'"},
      {R"(region_size: 4097 node { id: 0 host: "h" control_port: 1 })", "not a multiple of 4096"},
      {R"(region_size: 4096 node { id: 0 host: "h" control_port: 1 })", "out of range"},
      {R"(node { id: 0 host: "h" control_port: 1 } node { id: 0 host: "h" control_port: 2 })",
       "listed twice"},
      {R"(node { id: 0 host: "h" control_port: 1 } node { id: 1 host: "h" control_port: 1 })",
       "reuses control address"},
      {R"(node { id: 0 control_port: 1 })", "has no host"},
      {R"(node { id: 0 host: "h" })", "invalid control_port"},
      {R"(node { id: 70000 host: "h" control_port: 1 })", "above 65535"},
      {R"(cm_node_id: 3 node { id: 0 host: "h" control_port: 1 })", "cm_node_id 3"},
      {R"(node { id: 0 host: "h" control_port: 1 late: true })", "cannot be late"},
      {R"(lease_ms: 50 node { id: 0 host: "h" control_port: 1 })", "lease_ms 50 is out of range"},
      {R"(lease_ms: 700000 node { id: 0 host: "h" control_port: 1 })", "out of range"},
  };
  for (const Case& tc : cases) {
    INFO(tc.text);
    auto c = ParseClusterConfig(tc.text);
    REQUIRE_FALSE(c.ok());
    CHECK(std::string(c.status().message()).find(tc.expect) != std::string::npos);
  }
}

TEST_CASE("missing files are NotFound", "[config]") {
  auto c = LoadClusterConfig("/nonexistent/cluster.textproto");
  CHECK(c.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("fingerprints are stable and tell configurations apart", "[config]") {
  auto a = ParseClusterConfig(R"(node { id: 0 host: "h" control_port: 1 })");
  auto b = ParseClusterConfig(R"(node { id: 0 host: "h" control_port: 1 })");
  auto c = ParseClusterConfig(R"(node { id: 0 host: "h" control_port: 2 })");
  REQUIRE((a.ok() && b.ok() && c.ok()));
  CHECK(Fingerprint(*a) == Fingerprint(*b));
  CHECK(Fingerprint(*a) != Fingerprint(*c));
  auto round = ParseClusterConfig(ToText(*a));
  REQUIRE(round.ok());
  CHECK(Fingerprint(*round) == Fingerprint(*a));
}

}  // namespace farm
