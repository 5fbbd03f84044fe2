#include "platform/control_channel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"

namespace farm {
namespace {

std::string Errno() { return std::strerror(errno); }

int RemainingMs(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
}

absl::StatusOr<sockaddr_in> Resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  addr.sin_port = htons(port);
  freeaddrinfo(res);
  return addr;
}

}  // namespace

ControlChannel::ControlChannel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) close(fd_);
}

void ControlChannel::Shutdown() { shutdown(fd_, SHUT_RDWR); }

uint16_t ControlChannel::local_port() const {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) {
    return 0;
  }
  return ntohs(a.sin_port);
}

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlChannel::Connect(const std::string& host,
                                                                        uint16_t port,
                                                                        absl::Duration timeout) {
  absl::StatusOr<sockaddr_in> addr = Resolve(host, port);
  if (!addr.ok()) return addr.status();
  const std::string name = absl::StrCat(host, ":", port);
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_error = "timed out";
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno()));
    // Shares this connection's ephemeral port (and its TIME_WAIT remains) with the RDMA
    // connection manager. On iWARP it picks a connection's TCP port from the same range without
    // asking the TCP stack, and SoftiWARP binds a kernel socket to it with SO_REUSEADDR: a
    // socket without the option on that port made the bind fail, and libfabric 1.17 then waits
    // for that verbs connection forever (control_channel_test shows the bind).
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) == 0) {
      return std::make_unique<ControlChannel>(fd, name);
    }
    last_error = Errno();
    close(fd);
    if (absl::Now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat("cannot connect to ", name, " within ",
                                             absl::FormatDuration(timeout), ": ", last_error));
}

absl::Status ControlChannel::Send(const control::ControlMessage& msg) {
  std::string body = msg.SerializeAsString();
  uint32_t len = static_cast<uint32_t>(body.size());
  char header[4] = {static_cast<char>(len), static_cast<char>(len >> 8),
                    static_cast<char>(len >> 16), static_cast<char>(len >> 24)};
  std::string frame(header, 4);
  frame += body;
  size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::UnavailableError(absl::StrCat("send to ", peer_, ": ", Errno()));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status ControlChannel::ReadFully(char* buf, size_t len, absl::Time deadline) {
  size_t got = 0;
  while (got < len) {
    pollfd p{fd_, POLLIN, 0};
    // Once part of it arrived the rest is on its way: give it time even if the caller only
    // peeked (a frame header split over two segments must not be lost half-read).
    if (got > 0) deadline = std::max(deadline, absl::Now() + absl::Seconds(2));
    int rc = poll(&p, 1, RemainingMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      return absl::DeadlineExceededError(absl::StrCat("no message from ", peer_, " in time"));
    }
    ssize_t n = recv(fd_, buf + got, len - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return absl::UnavailableError(absl::StrCat(peer_, " closed the connection"));
    if (n < 0) return absl::UnavailableError(absl::StrCat("recv from ", peer_, ": ", Errno()));
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<control::ControlMessage> ControlChannel::Receive(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  unsigned char header[4];
  absl::Status s = ReadFully(reinterpret_cast<char*>(header), 4, deadline);
  if (!s.ok()) return s;
  uint32_t len = header[0] | (header[1] << 8) | (header[2] << 16) | (uint32_t{header[3]} << 24);
  if (len > kMaxFrameBytes) {
    return absl::DataLossError(
        absl::StrCat("corrupt control frame from ", peer_, ": length ", len));
  }
  std::string body(len, '\0');
  // Once a header arrived the body is on its way: give it time even if the caller only peeked.
  s = ReadFully(body.data(), len, std::max(deadline, absl::Now() + absl::Seconds(2)));
  if (!s.ok()) return s;
  control::ControlMessage msg;
  if (!msg.ParseFromString(body)) {
    return absl::DataLossError(absl::StrCat("corrupt control message from ", peer_));
  }
  return msg;
}

absl::StatusOr<std::unique_ptr<ControlListener>> ControlListener::Listen(const std::string& host,
                                                                         uint16_t port) {
  absl::StatusOr<sockaddr_in> addr = Resolve(host, port);
  if (!addr.ok()) return addr.status();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", Errno()));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      listen(fd, 128) != 0) {
    std::string err = Errno();
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", port, ": ", err,
                     errno == EADDRINUSE ? " (another process uses this port)" : ""));
  }
  sockaddr_in bound{};
  socklen_t blen = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  return std::unique_ptr<ControlListener>(new ControlListener(fd, ntohs(bound.sin_port)));
}

ControlListener::~ControlListener() { close(fd_); }

namespace {

// The first port of the kernel's ephemeral range; 32768 (Linux's default) if it cannot be read.
uint16_t FirstEphemeralPort() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(f >> low) || low <= 0 || low > 65535) low = 32768;
  return static_cast<uint16_t>(low);
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> ListenOnFreePorts(
    const std::string& host, int n) {
  constexpr int kLowest = 10000;  // above the well-known and most registered services' ports
  const int end = FirstEphemeralPort();
  std::vector<std::unique_ptr<ControlListener>> held;
  if (end - kLowest >= 1000) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, end - 1);
    for (int attempt = 0; attempt < 1000 && static_cast<int>(held.size()) < n; ++attempt) {
      // A port drawn twice fails to bind like any port in use: one of ours is listening there.
      absl::StatusOr<std::unique_ptr<ControlListener>> l =
          ControlListener::Listen(host, static_cast<uint16_t>(pick(rng)));
      if (l.ok()) held.push_back(std::move(*l));  // else in use: draw again
    }
  }
  while (static_cast<int>(held.size()) < n) {
    absl::StatusOr<std::unique_ptr<ControlListener>> l = ControlListener::Listen(host, 0);
    if (!l.ok()) {
      return absl::Status(l.status().code(), absl::StrCat("cannot find a free port on ", host,
                                                          ": ", l.status().message()));
    }
    held.push_back(std::move(*l));
  }
  return held;
}

absl::StatusOr<std::unique_ptr<ControlChannel>> ControlListener::Accept(absl::Duration timeout) {
  pollfd p{fd_, POLLIN, 0};
  int rc = poll(&p, 1, RemainingMs(absl::Now() + timeout));
  if (rc <= 0) return absl::DeadlineExceededError("no connection");
  sockaddr_in peer{};
  socklen_t len = sizeof(peer);
  int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("accept: ", Errno()));
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
  return std::make_unique<ControlChannel>(fd, absl::StrCat(ip, ":", ntohs(peer.sin_port)));
}

}  // namespace farm
