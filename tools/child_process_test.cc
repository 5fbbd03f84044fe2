// ChildProcess: output lines, standard error to a file, a process group of its own, a program
// that cannot be run, and stopping (closed input, then signals); every child is reaped.
#include "tools/child_process.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace farm {
namespace {

std::unique_ptr<ChildProcess> Shell(const std::string& script,
                                    const ChildProcess::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> c =
      ChildProcess::Spawn("/bin/sh", {"-c", script}, options);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(*c);
}

// All lines until the output ends (bounded: the scripts here end by themselves).
std::vector<std::string> AllLines(ChildProcess& c) {
  std::vector<std::string> lines;
  for (int i = 0; i < 1000; ++i) {
    pollfd p{c.stdout_fd(), POLLIN, 0};
    if (poll(&p, 1, 100) < 0) break;
    if (!c.ReadLines(&lines)) break;
  }
  return lines;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("lines of output, standard error to a file, exit status", "[child_process]") {
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("child_process_test");
  REQUIRE(dir.ok());
  ChildProcess::Options o;
  o.stderr_path = absl::StrCat((*dir)->path(), "/err.log");
  std::unique_ptr<ChildProcess> c =
      Shell("echo one; printf 'two\\nthree'; echo ' end'; echo oops >&2; exit 3", o);
  CHECK(AllLines(*c) == std::vector<std::string>{"one", "two", "three end"});
  CHECK(c->Stop() == "exited with status 3");
  CHECK(ReadFile(o.stderr_path) == "oops\n");
}

TEST_CASE("a program that cannot be run exits with 127 and says why", "[child_process]") {
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("child_process_test");
  REQUIRE(dir.ok());
  ChildProcess::Options o;
  o.stderr_path = absl::StrCat((*dir)->path(), "/err.log");
  absl::StatusOr<std::unique_ptr<ChildProcess>> c =
      ChildProcess::Spawn("/no/such/program", {"--flag"}, o);
  REQUIRE(c.ok());
  CHECK((*c)->Stop() == "exited with status 127");
  CHECK_THAT(ReadFile(o.stderr_path), Catch::Contains("cannot run /no/such/program"));
  // A log file that cannot be created is an error before anything starts.
  o.stderr_path = "/no/such/dir/err.log";
  absl::StatusOr<std::unique_ptr<ChildProcess>> d = ChildProcess::Spawn("/bin/true", {}, o);
  CHECK(absl::IsUnavailable(d.status()));
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("/no/such/dir/err.log"));
}

TEST_CASE("a process group of its own, on request", "[child_process]") {
  for (bool own : {false, true}) {
    ChildProcess::Options o;
    o.own_process_group = own;
    std::unique_ptr<ChildProcess> c = Shell("ps -o pgid= -p $$", o);
    std::vector<std::string> lines = AllLines(*c);
    REQUIRE(lines.size() == 1);
    const pid_t pgid = std::stoi(lines[0]);
    CHECK((pgid == std::abs(c->pid())) == own);
    CHECK((pgid == getpgrp()) == !own);
    c->Stop();
  }
}

TEST_CASE("closing its input makes it leave; a signal stops one that ignores it",
          "[child_process]") {
  std::unique_ptr<ChildProcess> reader = Shell("cat >/dev/null; echo left");
  reader->CloseStdin();
  CHECK(AllLines(*reader) == std::vector<std::string>{"left"});
  CHECK(reader->Stop() == "exited with status 0");

  std::unique_ptr<ChildProcess> sleeper = Shell("exec sleep 600");
  sleeper->Kill(SIGTERM);
  std::string how;
  for (int i = 0; i < 500 && !sleeper->Exited(&how); ++i) usleep(10000);
  CHECK(how == absl::StrCat("was killed by signal ", SIGTERM));
  CHECK(sleeper->Stop().empty());  // reaped already
  sleeper->Kill(SIGTERM);          // a no-op once reaped
}

}  // namespace farm
