// In-process clusters of farm::Runtime for the tests of the public API (runtime_test, txn_test):
// every node on the provider under test (FARM_TEST_PROVIDERS), started concurrently.
#ifndef FARM_TESTS_RUNTIME_CLUSTER_H_
#define FARM_TESTS_RUNTIME_CLUSTER_H_

#include <future>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "farm/farm.h"
#include "platform/testing/free_ports.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace testing {

// A configuration of n nodes on free ports, `region_count` regions of `region_size` bytes each.
inline std::string RuntimeClusterConfig(int n, uint64_t region_size, int region_count = 2) {
  std::string text =
      absl::StrCat("provider: \"", AnyProvider(), "\" region_size: ", region_size,
                   " region_count: ", region_count, " lock_memory: false");
  absl::StatusOr<std::vector<uint16_t>> ports = FreePorts(n);
  REQUIRE(ports.ok());
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&text, " node { id: ", i, " host: \"", TestHost(),
                    "\" control_port: ", (*ports)[i], " }");
  }
  return text;
}

// Starts n runtimes concurrently (a cluster forms only once all have joined) with `base`'s
// options and `config` (RuntimeClusterConfig(n, 1 MiB) if empty).
inline std::vector<std::unique_ptr<Runtime>> StartRuntimes(int n, RuntimeOptions base = {},
                                                          std::string config = "") {
  base.config_text = config.empty() ? RuntimeClusterConfig(n, 1 << 20) : config;
  std::vector<std::future<absl::StatusOr<std::unique_ptr<Runtime>>>> starting;
  for (int i = 0; i < n; ++i) {
    RuntimeOptions o = base;
    o.node_id = i;
    starting.push_back(std::async(std::launch::async, [o] { return Runtime::Start(o); }));
  }
  std::vector<std::unique_ptr<Runtime>> out;
  for (auto& f : starting) {
    absl::StatusOr<std::unique_ptr<Runtime>> rt = f.get();
    INFO(rt.status().ToString());
    REQUIRE(rt.ok());
    out.push_back(std::move(*rt));
  }
  return out;
}

}  // namespace testing
}  // namespace farm

#endif  // FARM_TESTS_RUNTIME_CLUSTER_H_
