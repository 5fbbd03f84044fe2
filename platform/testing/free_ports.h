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

// `n` distinct TCP ports on TestHost() that were free a moment ago (ListenOnFreePorts: below the
// ephemeral range, all held until every port is known).
inline absl::StatusOr<std::vector<uint16_t>> FreePorts(int n) {
  absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> held =
      ListenOnFreePorts(TestHost(), n);
  if (!held.ok()) return held.status();
  std::vector<uint16_t> ports;
  for (const std::unique_ptr<ControlListener>& l : *held) ports.push_back(l->port());
  return ports;
}

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_FREE_PORTS_H_
