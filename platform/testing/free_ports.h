// Ports for the control channels of a test cluster on one host.
#ifndef FARM_PLATFORM_TESTING_FREE_PORTS_H_
#define FARM_PLATFORM_TESTING_FREE_PORTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/control_channel.h"
#include "platform/testing/test_env.h"

namespace farm::testing {

// `n` distinct TCP ports on TestHost() that were free a moment ago. All n listeners are held
// until every port is known: a listener closed before the next one opens may give its port back
// to the next one, and two nodes of a cluster would then share a control port.
inline absl::StatusOr<std::vector<uint16_t>> FreePorts(int n) {
  std::vector<std::unique_ptr<ControlListener>> held;
  std::vector<uint16_t> ports;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<std::unique_ptr<ControlListener>> l = ControlListener::Listen(TestHost(), 0);
    if (!l.ok()) return l.status();
    ports.push_back((*l)->port());
    held.push_back(std::move(*l));
  }
  return ports;
}

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_FREE_PORTS_H_
