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
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace {

std::string FreshDir(const std::string& name) {
  return testing::FreshTestDir(absl::StrCat("data_dir_test-", name));
}

TEST_CASE("a region mapped from a file keeps what a killed process wrote") {
  const std::string dir = FreshDir("kill");
  const int status = testing::ForkAndKill([&] {
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
    if (!d.ok()) return 2;
    bool created = false;
    absl::StatusOr<std::unique_ptr<Region>> r =
        (*d)->MapRegion("region-7", 1 << 16, false, &created);
    if (!r.ok() || !created) return 3;
    std::memcpy((*r)->data() + 12345, "committed", 9);
    return 0;  // killed: no munmap, no msync, no exit handler
  });
  INFO("wait status " << status);
  REQUIRE(testing::KilledBySigkill(status));

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

TEST_CASE("a journal keeps what a killed process appended, and cuts a torn tail") {
  const std::string dir = FreshDir("journal");
  const int status = testing::ForkAndKill([&] {
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
    if (!d.ok()) return 2;
    std::vector<std::string> entries;
    uint64_t cut = 1;
    absl::StatusOr<std::unique_ptr<Journal>> j = (*d)->OpenJournal("log", &entries, &cut);
    if (!j.ok() || !entries.empty() || cut != 0) return 3;
    for (int i = 0; i < 100; ++i) {
      if (!(*j)->Append(absl::StrCat("entry ", i, std::string(i, 'x')), i % 10 == 0).ok()) {
        return 4;
      }
    }
    if (!(*j)->Append(std::string(), false).ok()) return 5;  // an empty entry is one too
    return 0;
  });
  INFO("wait status " << status);
  REQUIRE(testing::KilledBySigkill(status));

  // The journal "log" of `dir` opened again (as a restarted process does).
  struct Opened {
    std::unique_ptr<DataDir> dir;
    std::unique_ptr<Journal> journal;
    std::vector<std::string> entries;
    uint64_t cut = 0;
  };
  auto reopen = [&dir] {
    Opened o;
    absl::StatusOr<std::unique_ptr<DataDir>> d = DataDir::Open(dir);
    REQUIRE(d.ok());
    o.dir = std::move(*d);
    o.cut = 1;
    absl::StatusOr<std::unique_ptr<Journal>> j = o.dir->OpenJournal("log", &o.entries, &o.cut);
    REQUIRE(j.ok());
    o.journal = std::move(*j);
    return o;
  };
  uint64_t size = 0;
  {
    Opened o = reopen();
    CHECK(o.cut == 0);
    REQUIRE(o.entries.size() == 101);
    for (int i = 0; i < 100; ++i) {
      CHECK(o.entries[i] == absl::StrCat("entry ", i, std::string(i, 'x')));
    }
    CHECK(o.entries[100].empty());
    size = o.journal->size();
    CHECK(size == std::filesystem::file_size(dir + "/log"));
  }
  // A torn last frame (the process died inside its write) and a corrupt one are cut off.
  {
    std::filesystem::resize_file(dir + "/log", size - 1);  // the empty entry's frame torn
    Opened o = reopen();
    CHECK(o.cut == 15);  // 15 bytes of the empty entry's 16-byte frame
    CHECK(o.entries.size() == 100);
    REQUIRE(o.journal->Append("after the cut", false).ok());
  }
  {
    // Flip a byte inside entry 50: it and everything after it are cut off.
    std::fstream f(dir + "/log", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t at = 0;
    for (int i = 0; i < 50; ++i) at += 16 + absl::StrCat("entry ", i, std::string(i, 'x')).size();
    f.seekp(static_cast<std::streamoff>(at + 16 + 3));
    f.put('?');
  }
  {
    Opened o = reopen();
    CHECK(o.entries.size() == 50);
    CHECK(o.cut > 0);
    // Rewrite replaces it whole, and appends follow the new entries.
    REQUIRE(o.journal->Rewrite({"one", "two"}).ok());
    REQUIRE(o.journal->Append("three", true).ok());
    CHECK(o.journal->size() == std::filesystem::file_size(dir + "/log"));
  }
  {
    Opened o = reopen();
    CHECK(o.cut == 0);
    CHECK(o.entries == std::vector<std::string>{"one", "two", "three"});
    CHECK_FALSE(o.dir->OpenJournal("../log", &o.entries, &o.cut).ok());
  }
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
