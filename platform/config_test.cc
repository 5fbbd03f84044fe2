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
  CHECK(c->f() == 0);  // one failure domain: nothing to replicate to
}

TEST_CASE("f defaults to 1 when the cluster's nodes span 3 failure domains", "[config]") {
  auto config = [](const std::string& nodes) {
    auto c = ParseClusterConfig(nodes);
    INFO(c.status().ToString());
    REQUIRE(c.ok());
    return c->f();
  };
  const std::string two = R"(node { id: 0 host: "a" control_port: 1 }
                             node { id: 1 host: "b" control_port: 1 })";
  CHECK(config(two) == 0);
  // A third host; a late node's host does not count.
  CHECK(config(two + R"(node { id: 2 host: "c" control_port: 1 late: true })") == 0);
  CHECK(config(two + R"(node { id: 2 host: "c" control_port: 1 })") == kDefaultF);
  // Processes on one host, each its own failure domain.
  CHECK(config(R"(node { id: 0 host: "h" control_port: 1 failure_domain: "p0" }
                  node { id: 1 host: "h" control_port: 2 failure_domain: "p1" }
                  node { id: 2 host: "h" control_port: 3 failure_domain: "p2" })") == kDefaultF);
  // Said explicitly, f stays.
  CHECK(config("f: 0 " + two + R"(node { id: 2 host: "c" control_port: 1 })") == 0);
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
      {R"(lease_ms: 5 node { id: 0 host: "h" control_port: 1 })", "lease_ms 5 is out of range"},
      {R"(lease_ms: 700000 node { id: 0 host: "h" control_port: 1 })", "out of range"},
  };
  for (const Case& tc : cases) {
    INFO(tc.text);
    auto c = ParseClusterConfig(tc.text);
    REQUIRE_FALSE(c.ok());
    CHECK(std::string(c.status().message()).find(tc.expect) != std::string::npos);
  }
}

TEST_CASE("f needs as many failure domains as copies among the nodes that form the cluster",
          "[config]") {
  // Three processes on one host: one failure domain unless they name their own.
  const std::string same_host = R"(
      node { id: 0 host: "127.0.0.1" control_port: 1 }
      node { id: 1 host: "127.0.0.1" control_port: 2 }
      node { id: 2 host: "127.0.0.1" control_port: 3 })";
  SECTION("f = 0 needs one domain") {
    auto c = ParseClusterConfig("f: 0" + same_host);
    REQUIRE(c.ok());
    CHECK(c->f() == 0);
  }
  SECTION("f = 1 on one host is refused, naming the domain and its nodes") {
    auto c = ParseClusterConfig("f: 1" + same_host, "c.textproto");
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string m(c.status().message());
    INFO(m);
    CHECK(m.find("c.textproto: f 1 keeps 2 copies") == 0);
    CHECK(m.find("'host 127.0.0.1' (nodes 0, 1, 2)") != std::string::npos);
    CHECK(m.find("f: 0 is no fault tolerance") != std::string::npos);
  }
  SECTION("one failure domain per process holds f = 2") {
    auto c = ParseClusterConfig(R"(f: 2
        node { id: 0 host: "127.0.0.1" control_port: 1 failure_domain: "p0" }
        node { id: 1 host: "127.0.0.1" control_port: 2 failure_domain: "p1" }
        node { id: 2 host: "127.0.0.1" control_port: 3 failure_domain: "p2" })");
    REQUIRE(c.ok());
    CHECK(c->f() == 2);
  }
  SECTION("hosts are domains; late nodes do not count") {
    auto ok = ParseClusterConfig(R"(f: 1
        node { id: 0 host: "10.0.0.1" control_port: 1 }
        node { id: 1 host: "10.0.0.2" control_port: 1 })");
    CHECK(ok.ok());
    auto late = ParseClusterConfig(R"(f: 1
        node { id: 0 host: "10.0.0.1" control_port: 1 }
        node { id: 1 host: "10.0.0.2" control_port: 1 late: true })");
    REQUIRE_FALSE(late.ok());
    CHECK(std::string(late.status().message()).find("are in 1: 'host 10.0.0.1' (node 0)") !=
          std::string::npos);
  }
  SECTION("f above the limit") {
    auto c = ParseClusterConfig("f: 8" + same_host);
    REQUIRE_FALSE(c.ok());
    CHECK(std::string(c.status().message()).find("f 8 is out of range (0 .. 7") !=
          std::string::npos);
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
