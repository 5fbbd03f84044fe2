// Loading and validating the cluster configuration (platform/config.proto, text format).
//
//   absl::StatusOr<config::ClusterConfig> c = LoadClusterConfig("cluster.textproto");
//   if (!c.ok()) { spdlog::error("{}", c.status().message()); return 2; }
//
// Loaded configurations have every default filled in, so callers never see a zero field.
#ifndef FARM_PLATFORM_CONFIG_H_
#define FARM_PLATFORM_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/config.pb.h"

namespace farm {

inline constexpr uint64_t kDefaultRegionSize = uint64_t{4} << 20;
inline constexpr uint32_t kDefaultRegionCount = 2;
inline constexpr uint32_t kDefaultJoinTimeoutS = 30;
inline constexpr uint32_t kDefaultLeaseMs = 3000;
// FaRM's leases are 10 ms, on machines that give the lease threads a core of their own.
inline constexpr uint32_t kMinLeaseMs = 10;
// Backups per region (ClusterConfig.f) when the configuration does not say: kDefaultF when the
// nodes that form the cluster are in kDefaultFMinDomains failure domains or more (one can fail
// while the region's two copies stay in distinct domains, with a third to re-replicate to),
// else 0 (no fault tolerance).
inline constexpr uint32_t kDefaultF = 1;
inline constexpr uint32_t kDefaultFMinDomains = 3;
inline constexpr uint32_t kMaxF = 7;

// Reads and validates a configuration file. Errors (NotFound, InvalidArgument) name the file and,
// for syntax errors, the line and column.
absl::StatusOr<config::ClusterConfig> LoadClusterConfig(const std::string& path);

// Parses and validates configuration text. `origin` names it in error messages.
absl::StatusOr<config::ClusterConfig> ParseClusterConfig(absl::string_view text,
                                                         absl::string_view origin = "config");

// Checks a configuration and fills in defaults. Errors say which field is wrong and why.
absl::Status ValidateAndComplete(config::ClusterConfig* c);

// Fills in f and checks that the failure domains of the nodes that form the cluster can hold
// f + 1 copies of each region (part of ValidateAndComplete).
absl::Status CheckReplication(config::ClusterConfig* c);

// A node's failure domain: its failure_domain, or "host H" when it names none.
std::string FailureDomainOf(const config::NodeConfig& n);

// The node entry with this id, or null.
const config::NodeConfig* FindNode(const config::ClusterConfig& c, uint32_t id);

// A stable hash of the configuration, so nodes can tell they were started with the same one.
uint64_t Fingerprint(const config::ClusterConfig& c);

// Text format of the configuration, for writing generated configurations to files.
std::string ToText(const config::ClusterConfig& c);

}  // namespace farm

#endif  // FARM_PLATFORM_CONFIG_H_
