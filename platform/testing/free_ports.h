// Ports for the control channels of a test cluster on one host.
#ifndef FARM_PLATFORM_TESTING_FREE_PORTS_H_
#define FARM_PLATFORM_TESTING_FREE_PORTS_H_

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/control_channel.h"
#include "platform/testing/test_env.h"

namespace farm::testing {

// The first port of the kernel's ephemeral range (net.ipv4.ip_local_port_range), from which
// connect() picks the local ports of outgoing connections; 32768 if it cannot be read.
inline uint16_t FirstEphemeralPort() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(f >> low) || low <= 0 || low > 65535) low = 32768;
  return static_cast<uint16_t>(low);
}

// `n` distinct TCP ports on TestHost() that were free a moment ago. All n listeners are held
// until every port is known: a listener closed before the next one opens may give its port back
// to the next one, and two nodes of a cluster would then share a control port.
// The ports are drawn at random below the ephemeral range. A port the kernel handed out for
// "any port" (bind to 0) is an ephemeral one, and between our release and the configuration
// manager's bind, any outgoing connection on the host (tcp;ofi_rxm opens many) may take it as
// its local port: the manager then fails with "address in use" and the cluster never forms.
// Below the range, only another process choosing ports explicitly can collide.
inline absl::StatusOr<std::vector<uint16_t>> FreePorts(int n) {
  constexpr uint16_t kLowest = 10000;
  const uint16_t end = FirstEphemeralPort();
  std::vector<std::unique_ptr<ControlListener>> held;
  std::vector<uint16_t> ports;
  if (end > kLowest + 1000) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(kLowest, end - 1);
    for (int attempt = 0; attempt < 1000 && static_cast<int>(ports.size()) < n; ++attempt) {
      const uint16_t port = static_cast<uint16_t>(pick(rng));
      if (std::find(ports.begin(), ports.end(), port) != ports.end()) continue;
      absl::StatusOr<std::unique_ptr<ControlListener>> l = ControlListener::Listen(TestHost(), port);
      if (!l.ok()) continue;  // in use
      ports.push_back(port);
      held.push_back(std::move(*l));
    }
  }
  // An unusual range (or a host full of listeners): any free ports.
  while (static_cast<int>(ports.size()) < n) {
    absl::StatusOr<std::unique_ptr<ControlListener>> l = ControlListener::Listen(TestHost(), 0);
    if (!l.ok()) return l.status();
    ports.push_back((*l)->port());
    held.push_back(std::move(*l));
  }
  return ports;
}

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_FREE_PORTS_H_
