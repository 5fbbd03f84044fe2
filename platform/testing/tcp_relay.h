// TcpRelay: a TCP relay between clients and one server on this host that a test can cut, as a
// network partition would: both sides see their connections close, and the relay accepts new
// ones only to close them again, while the server itself keeps running (unlike a server stopped
// or paused, which its clients' sessions outlive).
//
//   absl::StatusOr<std::unique_ptr<TcpRelay>> relay = TcpRelay::Start(zookeeper.port());
//   ... clients connect to (*relay)->connect_string() ...
//   (*relay)->Cut(true);    // partitioned
//   (*relay)->Cut(false);   // healed: new connections reach the server again
//
// One thread relays every connection. Safe for concurrent use.
#ifndef FARM_PLATFORM_TESTING_TCP_RELAY_H_
#define FARM_PLATFORM_TESTING_TCP_RELAY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "platform/control_channel.h"

namespace farm::testing {

class TcpRelay {
 public:
  // Relays connections to 127.0.0.1:`server_port` from a free port of 127.0.0.1.
  static absl::StatusOr<std::unique_ptr<TcpRelay>> Start(uint16_t server_port) {
    absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> listeners =
        ListenOnFreePorts("127.0.0.1", 1);
    if (!listeners.ok()) return listeners.status();
    return std::unique_ptr<TcpRelay>(new TcpRelay(server_port, std::move((*listeners)[0])));
  }
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;
  ~TcpRelay() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
    CloseAll();
  }

  std::string connect_string() const { return absl::StrCat("127.0.0.1:", listener_->port()); }

  // true: closes every relayed connection, and each new one as it comes; false: relays again.
  void Cut(bool cut) { cut_.store(cut, std::memory_order_relaxed); }

 private:
  TcpRelay(uint16_t server_port, std::unique_ptr<ControlListener> listener)
      : server_port_(server_port), listener_(std::move(listener)) {
    thread_ = std::thread([this] { Run(); });
  }

  struct Connection {
    int client;
    int server;
  };

  void Run() {
    while (!stop_.load(std::memory_order_relaxed)) {
      if (cut_.load(std::memory_order_relaxed)) CloseAll();
      std::vector<pollfd> fds = {{listener_->fd(), POLLIN, 0}};
      for (const Connection& c : connections_) {
        fds.push_back({c.client, POLLIN, 0});
        fds.push_back({c.server, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), /*timeout_ms=*/20) <= 0) continue;
      std::vector<Connection> open;
      for (size_t i = 0; i < connections_.size(); ++i) {
        Connection& c = connections_[i];
        const bool ok = (fds[1 + 2 * i].revents == 0 || Pump(c.client, c.server)) &&
                        (fds[2 + 2 * i].revents == 0 || Pump(c.server, c.client));
        if (ok) {
          open.push_back(c);
        } else {
          close(c.client);
          close(c.server);
        }
      }
      connections_ = std::move(open);
      if (fds[0].revents != 0) Accept();
    }
  }

  void Accept() {
    const int client = accept4(listener_->fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    const int server = cut_.load(std::memory_order_relaxed) ? -1 : ConnectToServer();
    if (server < 0) {
      close(client);
      return;
    }
    connections_.push_back({client, server});
  }

  int ConnectToServer() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_port = htons(server_port_);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      return fd;
    }
    if (fd >= 0) close(fd);
    return -1;
  }

  // Moves what `from` has to `to`; false once either side closed.
  static bool Pump(int from, int to) {
    char buffer[64 * 1024];
    const ssize_t n = recv(from, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    for (ssize_t sent = 0; sent < n;) {
      const ssize_t m = send(to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
      if (m <= 0) return false;
      sent += m;
    }
    return true;
  }

  void CloseAll() {
    for (const Connection& c : connections_) {
      close(c.client);
      close(c.server);
    }
    connections_.clear();
  }

  const uint16_t server_port_;
  const std::unique_ptr<ControlListener> listener_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cut_{false};
  std::vector<Connection> connections_;  // the relay thread's (the destructor's after the join)
  std::thread thread_;
};

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_TCP_RELAY_H_
