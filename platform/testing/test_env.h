// What the environment asks tests to run on. The SoftiWARP lane (tests/softiwarp) sets
// FARM_TEST_PROVIDERS=verbs and FARM_TEST_HOST to the guest's RDMA address; by default tests use
// the software providers and loopback.
#ifndef FARM_PLATFORM_TESTING_TEST_ENV_H_
#define FARM_PLATFORM_TESTING_TEST_ENV_H_

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace farm::testing {

// FARM_TEST_PROVIDERS (space separated), else `fallback`.
inline std::vector<std::string> TestProviders(
    std::vector<std::string> fallback = {"shm", "tcp;ofi_rxm"}) {
  const char* env = std::getenv("FARM_TEST_PROVIDERS");
  if (env == nullptr || *env == '\0') return fallback;
  return absl::StrSplit(env, ' ', absl::SkipEmpty());
}

// The first provider under test, for tests that need just one.
inline std::string AnyProvider() { return TestProviders()[0]; }

// FARM_TEST_HOST, else 127.0.0.1.
inline std::string TestHost() {
  const char* env = std::getenv("FARM_TEST_HOST");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1";
}

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_TEST_ENV_H_
