// DataDir: a node's directory of durable state. Files mapped as regions keep what a process wrote
// when it is killed, a directory is used by one process at a time, small files are replaced
// whole, and every misuse is a clear error.
#include "platform/data_dir.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace farm {
namespace {

std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(base != nullptr ? base : "/tmp", "/data_dir_test-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST_CASE("a region mapped from a file keeps what a killed process wrote") {
  const std::string dir = FreshDir("kill");
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
    if (!d.ok()) _exit(2);
    bool created = false;
    absl::StatusOr<std::unique_ptr<Region>> r =
        (*d)->MapRegion("region-7", 1 << 16, false, &created);
    if (!r.ok() || !created) _exit(3);
    std::memcpy((*r)->data() + 12345, "committed", 9);
    raise(SIGKILL);  // no munmap, no msync, no exit handler
    _exit(4);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);

  absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);  // the dead child's lock is gone
  REQUIRE(d.ok());
  bool created = true;
  absl::StatusOr<std::unique_ptr<Region>> r = (*d)->MapRegion("region-7", 1 << 16, false, &created);
  REQUIRE(r.ok());
  CHECK_FALSE(created);
  CHECK((*r)->file_backed());
  CHECK(std::string((*r)->data() + 12345, 9) == "committed");
  CHECK((*r)->data()[0] == 0);  // a new file is zeros
  CHECK((*r)->Sync(12345, 9).ok());
  CHECK((*r)->Sync(0, 1 << 16).ok());
  CHECK(absl::IsOutOfRange((*r)->Sync(1 << 16, 1)));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a data directory is used by one process at a time") {
  const std::string dir = FreshDir("lock");
  absl::StatusOr<std::unique_ptr<DataDir>> first = DataDir::Open(dir);
  REQUIRE(first.ok());
  // flock locks belong to the open file: a second Open, even in this process, is refused.
  absl::StatusOr<std::unique_ptr<DataDir>> second = DataDir::Open(dir);
  REQUIRE(absl::IsFailedPrecondition(second.status()));
  const std::string message(second.status().message());
  CHECK(absl::StrContains(message, absl::StrCat("is in use by process ", getpid())));
  CHECK(absl::StrContains(message, "each node needs a directory of its own"));
  first->reset();
  CHECK(DataDir::Open(dir).ok());
  std::filesystem::remove_all(dir);
}

TEST_CASE("small files are replaced whole") {
  const std::string dir = FreshDir("files");
  absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
  REQUIRE(d.ok());
  CHECK_FALSE((*d)->Exists("manifest"));
  CHECK(absl::IsNotFound((*d)->ReadFile("manifest").status()));
  REQUIRE((*d)->WriteFile("manifest", "first").ok());
  REQUIRE((*d)->WriteFile("manifest", std::string(100000, 'x')).ok());
  CHECK((*d)->Exists("manifest"));
  absl::StatusOr<std::string> got = (*d)->ReadFile("manifest");
  REQUIRE(got.ok());
  CHECK(*got == std::string(100000, 'x'));
  CHECK_FALSE(std::filesystem::exists(dir + "/.manifest.new"));  // no temporary left
  REQUIRE((*d)->RemoveFile("manifest").ok());
  CHECK_FALSE((*d)->Exists("manifest"));
  CHECK((*d)->RemoveFile("manifest").ok());  // removing what is not there is fine
  std::filesystem::remove_all(dir);
}

TEST_CASE("misuse of a data directory is a clear error") {
  const std::string dir = FreshDir("misuse");
  absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
  REQUIRE(d.ok());
  bool created = false;
  SECTION("a file made for another region size") {
    REQUIRE((*d)->MapRegion("region-1", 8192, false, &created).ok());
    absl::StatusOr<std::unique_ptr<Region>> r = (*d)->MapRegion("region-1", 16384, false, &created);
    REQUIRE(absl::IsFailedPrecondition(r.status()));
    CHECK(absl::StrContains(r.status().message(), "holds 8192 bytes, not the region's 16384"));
  }
  SECTION("bad names and sizes") {
    for (const char* name : {"", ".hidden", "a/b", "../up", "sp ace"}) {
      CAPTURE(name);
      CHECK(absl::IsInvalidArgument((*d)->MapRegion(name, 4096, false, &created).status()));
      CHECK(absl::IsInvalidArgument((*d)->WriteFile(name, "x")));
    }
    CHECK(absl::IsInvalidArgument((*d)->MapRegion("region-2", 1000, false, &created).status()));
    CHECK(absl::IsInvalidArgument((*d)->MapRegion("region-2", 0, false, &created).status()));
    CHECK_FALSE((*d)->Exists("region-2"));
  }
  SECTION("a path that is a file") {
    const std::string file = dir + "/plain";
    std::ofstream(file) << "not a directory";
    absl::StatusOr<std::unique_ptr<DataDir>> e = DataDir::Open(file);
    REQUIRE(absl::IsFailedPrecondition(e.status()));
    CHECK(absl::StrContains(e.status().message(), "is not a directory"));
    CHECK(absl::IsInvalidArgument(DataDir::Open("").status()));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace farm
