// ControlChannel: framed protobuf messages over TCP, for bootstrap and membership.
//
// Control traffic is tiny and rare, so this is plain blocking sockets with deadlines; the data
// path never touches it. A frame is a 4-byte little-endian length followed by a serialized
// control::ControlMessage. Frames above kMaxFrameBytes are rejected as corrupt.
//
//   ASSIGN_OR_RETURN(auto ch, ControlChannel::Connect("127.0.0.1", 7300, absl::Seconds(5)));
//   RETURN_IF_ERROR(ch->Send(msg));
//   ASSIGN_OR_RETURN(control::ControlMessage reply, ch->Receive(absl::Seconds(5)));
//
// Thread safety: Send and Receive may be called from different threads concurrently; two threads
// must not Send (or Receive) at once on the same channel.
#ifndef FARM_PLATFORM_CONTROL_CHANNEL_H_
#define FARM_PLATFORM_CONTROL_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/control.pb.h"

namespace farm {

inline constexpr uint32_t kMaxFrameBytes = 16u << 20;

class ControlChannel {
 public:
  // Connects to host:port, retrying refused connections until `timeout` passes (the peer may
  // still be starting). Unavailable/DeadlineExceeded errors name the address.
  static absl::StatusOr<std::unique_ptr<ControlChannel>> Connect(const std::string& host,
                                                                 uint16_t port,
                                                                 absl::Duration timeout);
  // Takes ownership of a connected socket.
  explicit ControlChannel(int fd, std::string peer);
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;
  ~ControlChannel();

  absl::Status Send(const control::ControlMessage& msg);
  // Waits up to `timeout` for one message. Errors: DeadlineExceeded, Unavailable when the peer
  // closed the connection, DataLoss for a corrupt frame.
  absl::StatusOr<control::ControlMessage> Receive(absl::Duration timeout);
  // Unblocks a concurrent Receive (it returns Unavailable) and closes the connection.
  void Shutdown();

  const std::string& peer() const { return peer_; }
  // This end's TCP port (0 if the socket has none).
  uint16_t local_port() const;
  // The socket, to wait for input with poll() (readable: a message, or the end, can be received).
  int fd() const { return fd_; }

 private:
  absl::Status ReadFully(char* buf, size_t len, absl::Time deadline);

  int fd_;
  std::string peer_;
};

// A listening TCP socket.
class ControlListener {
 public:
  // Binds host:port (SO_REUSEADDR). The error says when the port is in use.
  static absl::StatusOr<std::unique_ptr<ControlListener>> Listen(const std::string& host,
                                                                 uint16_t port);
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;
  ~ControlListener();

  // Waits up to `timeout` for a connection; DeadlineExceeded if none came.
  absl::StatusOr<std::unique_ptr<ControlChannel>> Accept(absl::Duration timeout);
  uint16_t port() const { return port_; }
  // The socket, to wait for connections with poll().
  int fd() const { return fd_; }

 private:
  ControlListener(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_;
  uint16_t port_;
};

// Listeners on `n` distinct ports of `host` that are free now, for choosing nodes' control ports:
// hold them until every port is chosen (a listener closed before the next one opens may hand
// its port to the next, and two nodes would share it), close them right before the nodes bind.
// The ports are drawn at random below the kernel's ephemeral range (ip_local_port_range), or
// are any free ports if that leaves too little room. Not "any port" (bind to 0) in general: the
// kernel then hands out an ephemeral port, which, between its release and the node's bind, any
// outgoing connection on the host may take as its local port (tcp;ofi_rxm opens many), and the
// configuration manager could not listen.
absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> ListenOnFreePorts(
    const std::string& host, int n);

}  // namespace farm

#endif  // FARM_PLATFORM_CONTROL_CHANNEL_H_
