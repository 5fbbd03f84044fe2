#include "platform/doorbell.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace farm {
namespace {

std::string TempBellPath(const char* tag) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/farm-doorbell-test-", tag, "-", getpid());
}

TEST_CASE("a ring wakes a sleeper that waits for much longer than the test may run", "[doorbell]") {
  const std::string path = TempBellPath("wake");
  absl::StatusOr<std::unique_ptr<Doorbell>> own = Doorbell::Create(path);
  REQUIRE(own.ok());
  absl::StatusOr<std::unique_ptr<Doorbell>> peer = Doorbell::Open(path);
  REQUIRE(peer.ok());

  std::atomic<bool> asleep{false};
  bool rung = false;
  std::thread sleeper([&] {
    const uint32_t ticket = (*own)->PrepareSleep();
    asleep.store(true);
    rung = (*own)->Sleep(ticket, absl::Hours(1));
  });
  while (!asleep.load()) std::this_thread::yield();
  // The flag is up from PrepareSleep on: the ring wakes the sleeper whether it is already in the
  // futex wait or not yet (then the wait returns at once).
  CHECK((*peer)->Ring());
  sleeper.join();
  CHECK(rung);
  CHECK((*own)->wakeups() == 1);
  // Nobody sleeps now: a ring costs no wake-up.
  CHECK_FALSE((*peer)->Ring());
  CHECK((*own)->wakeups() == 1);
}

TEST_CASE("a sleep nobody rings ends after max_wait and says so", "[doorbell]") {
  absl::StatusOr<std::unique_ptr<Doorbell>> own = Doorbell::Create(TempBellPath("quiet"));
  REQUIRE(own.ok());
  const uint32_t ticket = (*own)->PrepareSleep();
  CHECK_FALSE((*own)->Sleep(ticket, absl::Milliseconds(1)));
  // A cancelled sleep lowers the flag: later rings wake nobody.
  (*own)->PrepareSleep();
  (*own)->CancelSleep();
  CHECK_FALSE((*own)->Ring());
  CHECK((*own)->wakeups() == 0);
}

TEST_CASE("a ring between PrepareSleep and Sleep is not lost", "[doorbell]") {
  absl::StatusOr<std::unique_ptr<Doorbell>> own = Doorbell::Create(TempBellPath("race"));
  REQUIRE(own.ok());
  const uint32_t ticket = (*own)->PrepareSleep();
  CHECK((*own)->Ring());
  CHECK_FALSE((*own)->Ring());  // the first ringer of a burst took the flag down
  CHECK((*own)->Sleep(ticket, absl::Hours(1)));
}

TEST_CASE("another process rings through the shared file", "[doorbell]") {
  const std::string path = TempBellPath("fork");
  absl::StatusOr<std::unique_ptr<Doorbell>> own = Doorbell::Create(path);
  REQUIRE(own.ok());
  const uint32_t ticket = (*own)->PrepareSleep();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<Doorbell>> peer = Doorbell::Open(path);
    _exit(peer.ok() && (*peer)->Ring() ? 0 : 1);
  }
  CHECK((*own)->Sleep(ticket, absl::Hours(1)));
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("opening what is not a doorbell fails clearly; the owner removes its file",
          "[doorbell]") {
  const std::string path = TempBellPath("misc");
  absl::StatusOr<std::unique_ptr<Doorbell>> missing = Doorbell::Open(path);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  { std::ofstream(path) << std::string(8192, 'x'); }
  absl::StatusOr<std::unique_ptr<Doorbell>> junk = Doorbell::Open(path);
  CHECK(junk.status().code() == absl::StatusCode::kFailedPrecondition);
  { std::ofstream(path) << "short"; }
  CHECK(Doorbell::Open(path).status().code() == absl::StatusCode::kFailedPrecondition);
  // Create refuses to take over an existing file.
  CHECK_FALSE(Doorbell::Create(path).ok());
  std::remove(path.c_str());
  {
    absl::StatusOr<std::unique_ptr<Doorbell>> own = Doorbell::Create(path);
    REQUIRE(own.ok());
    CHECK(Doorbell::Open(path).ok());
  }
  CHECK(Doorbell::Open(path).status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace farm
