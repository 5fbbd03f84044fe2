// Self-check: one-sided READ and WRITE from this node to every peer, verified byte for byte.
//
// Requires every node to have been started with NodeOptions::fill_pattern, and that no other
// node writes to the checked regions meanwhile (the cluster tool runs the nodes' checks one after
// another). For each peer and each of its regions:
//  - READ the region's first and last kCheckBytes and compare with SelfCheckPattern (both
//    region boundaries);
//  - WRITE a checker-specific pattern over both ends, READ it back and compare;
//  - WRITE the original pattern back and verify it, so the next checker sees a clean region;
//  - try a READ and a WRITE that cross the region's end, and one into a region id that does not
//    exist, and expect all to be refused before anything is posted.
#ifndef FARM_PLATFORM_SELF_CHECK_H_
#define FARM_PLATFORM_SELF_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "platform/node.h"

namespace farm {

inline constexpr size_t kCheckBytes = 256;

struct PairCheck {
  uint32_t from = 0;
  uint32_t to = 0;
  bool read_ok = false;
  bool write_ok = false;
  bool bounds_ok = false;  // out-of-region accesses were refused
  uint64_t bytes_verified = 0;
  double read_p50_us = 0;   // kCheckBytes READ latency
  double write_p50_us = 0;  // kCheckBytes WRITE latency
  std::string error;        // first failure, empty when all passed

  bool ok() const { return read_ok && write_ok && bounds_ok; }
  // One JSON object, for the cluster tool and tests.
  std::string ToJson() const;
};

// Checks every current peer of `node`. `latency_samples` operations per op type are timed.
std::vector<PairCheck> RunSelfCheck(Node& node, int latency_samples = 50);

}  // namespace farm

#endif  // FARM_PLATFORM_SELF_CHECK_H_
