#include "platform/logging.h"

#include "absl/strings/str_cat.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace farm {

absl::Status InitLogging(const std::string& level, const std::string& name) {
  auto logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern("%H:%M:%S.%e %n %l: %v");
  spdlog::set_default_logger(logger);
  spdlog::level::level_enum lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off") {
    spdlog::set_level(spdlog::level::info);
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "'; use trace, debug, info, warn, error or off"));
  }
  spdlog::set_level(lvl);
  return absl::OkStatus();
}

}  // namespace farm
