// Logging set-up shared by the project's binaries: spdlog to stderr with a name and a level.
//
//   ABSL_FLAG(std::string, log_level, "info", "trace|debug|info|warn|error|off");
//   if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "node1"); !s.ok()) ...
#ifndef FARM_PLATFORM_LOGGING_H_
#define FARM_PLATFORM_LOGGING_H_

#include <string>

#include "absl/status/status.h"

namespace farm {

// Sends the default logger to stderr as "HH:MM:SS.mmm name level: message". InvalidArgument for
// an unknown level (the logger is still installed, at info).
absl::Status InitLogging(const std::string& level, const std::string& name);

}  // namespace farm

#endif  // FARM_PLATFORM_LOGGING_H_
