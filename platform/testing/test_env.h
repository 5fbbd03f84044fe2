// What the environment asks tests to run on. The SoftiWARP lane (tests/softiwarp) sets
// FARM_TEST_PROVIDERS=verbs and FARM_TEST_HOST to the guest's RDMA address; by default tests use
// the software providers and loopback.
#ifndef FARM_PLATFORM_TESTING_TEST_ENV_H_
#define FARM_PLATFORM_TESTING_TEST_ENV_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// A path for a test's own directory, `<TEST_TMPDIR or /tmp>/<name>-<pid>`, with nothing there
// (a leftover of an earlier run is removed).
inline std::string FreshTestDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "-", getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// Runs `child` in a forked process, which then dies of SIGKILL (no destructor, unmap, flush or
// exit handler runs: a crash). A non-zero return of `child` is its exit status instead (the
// step that failed). The process's wait status (-1 if it could not be made or waited for):
// KilledBySigkill(status) when `child` did all it had to.
inline int ForkAndKill(const std::function<int()>& child) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int code = child();
    if (code != 0) _exit(code);
    raise(SIGKILL);
    _exit(125);
  }
  int status = 0;
  return waitpid(pid, &status, 0) == pid ? status : -1;
}
inline bool KilledBySigkill(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

}  // namespace farm::testing

#endif  // FARM_PLATFORM_TESTING_TEST_ENV_H_
