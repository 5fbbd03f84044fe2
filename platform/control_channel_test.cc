#include "platform/control_channel.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <set>
#include <thread>

namespace farm {

TEST_CASE("messages round-trip over a connection", "[control]") {
  auto listener = ControlListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  absl::Status sent;  // checked after the join: Catch's assertions are for the test's thread
  std::thread client([&sent, port = (*listener)->port()] {
    auto ch = ControlChannel::Connect("127.0.0.1", port, absl::Seconds(5));
    if (!ch.ok()) {
      sent = ch.status();
      return;
    }
    control::ControlMessage m;
    m.mutable_join()->set_requested_id(7);
    m.mutable_join()->mutable_node()->set_fabric_address(std::string("\0\1\2", 3));
    sent = (*ch)->Send(m);
  });
  auto server = (*listener)->Accept(absl::Seconds(5));
  if (!server.ok()) client.join();
  REQUIRE(server.ok());
  auto got = (*server)->Receive(absl::Seconds(5));
  client.join();
  INFO(sent.ToString());
  REQUIRE(sent.ok());
  REQUIRE(got.ok());
  CHECK(got->join().requested_id() == 7);
  CHECK(got->join().node().fabric_address() == std::string("\0\1\2", 3));
  // The client closed: the next receive reports it instead of hanging.
  CHECK((*server)->Receive(absl::Seconds(5)).status().code() == absl::StatusCode::kUnavailable);
}

// The RDMA connection manager picks an iWARP connection's TCP port from the ephemeral range without
// asking the kernel's TCP stack, and SoftiWARP then binds a kernel socket to it (SO_REUSEADDR, the
// node's address). A client connection of ours holding that port without SO_REUSEADDR, or its
// TIME_WAIT remains, made that bind fail: libfabric 1.17's verbs provider only logs "rdma_connect
// failed: Address already in use", and ofi_rxm waits for the connection forever (a node_test
// WRITE on SoftiWARP could not be posted for 10 s). Here the bind is done as siw does it.
TEST_CASE("a client connection leaves its port free for an iWARP connection's socket",
          "[control]") {
  auto listener = ControlListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  auto client = ControlChannel::Connect("127.0.0.1", (*listener)->port(), absl::Seconds(5));
  REQUIRE(client.ok());
  auto server = (*listener)->Accept(absl::Seconds(5));
  REQUIRE(server.ok());
  const uint16_t port = (*client)->local_port();
  REQUIRE(port != 0);
  auto bind_as_siw_does = [port]() -> int {
    const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return errno;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int rc = bind(s, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0 ? 0 : errno;
    close(s);
    return rc;
  };
  INFO("local port " << port);
  CHECK(bind_as_siw_does() == 0);  // while connected
  // The client closes first, so its side of the connection stays in TIME_WAIT.
  client->reset();
  CHECK((*server)->Receive(absl::Seconds(5)).status().code() == absl::StatusCode::kUnavailable);
  server->reset();
  CHECK(bind_as_siw_does() == 0);
}

TEST_CASE("a receive with nothing to read times out", "[control]") {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  ControlChannel ch(fds[0], "pair");
  CHECK(ch.Receive(absl::Milliseconds(50)).status().code() == absl::StatusCode::kDeadlineExceeded);
  close(fds[1]);
}

TEST_CASE("corrupt frames are rejected as data loss", "[control]") {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  ControlChannel ch(fds[0], "pair");
  SECTION("impossible length") {
    const unsigned char header[4] = {0xff, 0xff, 0xff, 0x7f};
    REQUIRE(write(fds[1], header, 4) == 4);
    CHECK(ch.Receive(absl::Seconds(1)).status().code() == absl::StatusCode::kDataLoss);
  }
  SECTION("garbage body") {
    const unsigned char frame[8] = {4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    REQUIRE(write(fds[1], frame, 8) == 8);
    CHECK(ch.Receive(absl::Seconds(1)).status().code() == absl::StatusCode::kDataLoss);
  }
  close(fds[1]);
}

TEST_CASE("connecting to a closed port fails within the timeout and names the address",
          "[control]") {
  auto listener = ControlListener::Listen("127.0.0.1", 0);
  REQUIRE(listener.ok());
  uint16_t port = (*listener)->port();
  listener->reset();
  auto ch = ControlChannel::Connect("127.0.0.1", port, absl::Milliseconds(200));
  REQUIRE_FALSE(ch.ok());
  CHECK(std::string(ch.status().message()).find("127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
}

TEST_CASE("a port in use is reported as such", "[control]") {
  auto a = ControlListener::Listen("127.0.0.1", 0);
  REQUIRE(a.ok());
  auto b = ControlListener::Listen("127.0.0.1", (*a)->port());
  REQUIRE_FALSE(b.ok());
  CHECK(std::string(b.status().message()).find("in use") != std::string::npos);
}

TEST_CASE("free ports for nodes are distinct, held, and below the ephemeral range", "[control]") {
  int first_ephemeral = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    REQUIRE(std::fscanf(f, "%d", &first_ephemeral) == 1);
    std::fclose(f);
  }
  auto held = ListenOnFreePorts("127.0.0.1", 8);
  REQUIRE(held.ok());
  REQUIRE(held->size() == 8);
  std::set<uint16_t> ports;
  for (const auto& l : *held) {
    ports.insert(l->port());
    // Below the range from which connect() picks local ports (unless it leaves no room).
    if (first_ephemeral >= 11000) CHECK(l->port() < first_ephemeral);
    // Held: nobody else can listen there until the caller lets go.
    CHECK_FALSE(ControlListener::Listen("127.0.0.1", l->port()).ok());
  }
  CHECK(ports.size() == 8);
  const uint16_t first = *ports.begin();
  held->clear();
  CHECK(ControlListener::Listen("127.0.0.1", first).ok());
}

}  // namespace farm
