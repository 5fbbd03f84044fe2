// ChildProcess: output lines, standard output and error to files, a process group of its own,
// default signal handling, a program that cannot be run, several children watched at once, and
// stopping (closed input, then signals); every child is reaped.
#include "tools/child_process.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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
  // The program and its arguments in one list.
  absl::StatusOr<std::unique_ptr<ChildProcess>> e =
      ChildProcess::SpawnCommand({"/bin/sh", "-c", "exit 5"});
  REQUIRE(e.ok());
  CHECK((*e)->Stop() == "exited with status 5");
  CHECK(absl::IsInvalidArgument(ChildProcess::SpawnCommand({}).status()));
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
  CHECK(sleeper->Stop() == how);   // reaped already: how it ended
  sleeper->Kill(SIGTERM);          // a no-op once reaped
}

TEST_CASE("an unfinished last line comes at the end; reading never blocks", "[child_process]") {
  std::unique_ptr<ChildProcess> c = Shell("echo first; read wait; printf 'last'");
  CHECK(c->WaitForLine("first", absl::Now() + absl::Seconds(10)).ok());
  std::vector<std::string> lines;
  const absl::Time start = absl::Now();
  CHECK(c->ReadLines(&lines));  // nothing there: returns at once
  CHECK(absl::Now() - start < absl::Seconds(1));
  CHECK(lines.empty());
  REQUIRE(c->Send("go\n").ok());
  CHECK(AllLines(*c) == std::vector<std::string>{"last"});
  CHECK(c->stdout_fd() == -1);
  CHECK(c->Stop() == "exited with status 0");
}

TEST_CASE("a line printed just before exiting is not missed", "[child_process]") {
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<ChildProcess> c = Shell("echo READY 1");
    absl::StatusOr<std::string> line = c->WaitForLine("READY", absl::Now() + absl::Seconds(10));
    INFO(line.status().ToString());
    CHECK(line.ok());
    if (line.ok()) CHECK(*line == "READY 1");
  }
  // One that exits without the line: Aborted, saying how it ended.
  std::unique_ptr<ChildProcess> c = Shell("echo other; exit 4");
  absl::StatusOr<std::string> line = c->WaitForLine("READY", absl::Now() + absl::Seconds(10));
  CHECK(absl::IsAborted(line.status()));
  CHECK_THAT(std::string(line.status().message()), Catch::Contains("exited with status 4"));
}

TEST_CASE("standard output to a file", "[child_process]") {
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("child_process_test");
  REQUIRE(dir.ok());
  ChildProcess::Options o;
  o.stdout_path = absl::StrCat((*dir)->path(), "/out.log");
  std::unique_ptr<ChildProcess> c = Shell("echo hello", o);
  CHECK(c->stdout_fd() == -1);
  std::vector<std::string> lines;
  CHECK(!c->ReadLines(&lines));
  CHECK(c->Stop() == "exited with status 0");
  CHECK(ReadFile(o.stdout_path) == "hello\n");
}

TEST_CASE("the child starts with default signal handlers and no signal blocked",
          "[child_process]") {
  // The parent ignores SIGPIPE (as servers do) and blocks SIGUSR1 (as signalfd users do).
  struct sigaction ignore {
  }, before_pipe{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &before_pipe);
  sigset_t usr1, before_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, &before_mask);
  std::unique_ptr<ChildProcess> c = Shell("exec grep -E '^Sig(Blk|Ign)' /proc/self/status");
  std::vector<std::string> lines = AllLines(*c);
  sigaction(SIGPIPE, &before_pipe, nullptr);
  pthread_sigmask(SIG_SETMASK, &before_mask, nullptr);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "SigBlk:\t0000000000000000");
  // Signals 1 to 31 (bits 0 to 30). glibc keeps 32 and 33 for itself (signal() refuses them); a
  // sandbox that ignores them passes that on.
  REQUIRE(absl::StartsWith(lines[1], "SigIgn:\t"));
  CHECK((std::stoull(lines[1].substr(8), nullptr, 16) & 0x7fffffffu) == 0);
  CHECK(c->Stop() == "exited with status 0");
}

TEST_CASE("Stop: SIGTERM after the grace, SIGKILL if that is ignored; always reaped",
          "[child_process]") {
  struct Case {
    std::string script;
    int signal;
  };
  for (const Case& k : {Case{"exec sleep 600", SIGTERM},
                        // An ignored signal stays ignored across exec.
                        Case{"trap '' TERM; exec sleep 600", SIGKILL}}) {
    INFO(k.script);
    std::unique_ptr<ChildProcess> c = Shell(k.script);
    const pid_t pid = c->pid();
    CHECK(!c->reaped());
    CHECK(c->Stop(absl::Milliseconds(100)) == absl::StrCat("was killed by signal ", k.signal));
    CHECK(c->reaped());
    CHECK(c->pid() == -pid);
    CHECK(WTERMSIG(c->wait_status()) == k.signal);
    CHECK(waitpid(pid, nullptr, WNOHANG) == -1);  // no child of ours any more
    CHECK(errno == ECHILD);
  }
}

// txn_bench's nodes may leave on their own and be reaped (Exited, WaitForLine) before their Stop:
// Stop said "" then, and txn_bench took a node that exited with status 0 for a failure ("a node ").
TEST_CASE("Stop after the child was reaped says how it ended", "[child_process]") {
  for (int code : {0, 3}) {
    std::unique_ptr<ChildProcess> c = Shell(absl::StrCat("exit ", code));
    std::string how;
    for (int i = 0; i < 1000 && !c->Exited(&how); ++i) absl::SleepFor(absl::Milliseconds(10));
    REQUIRE(c->reaped());
    CHECK(how == absl::StrCat("exited with status ", code));
    CHECK(c->Stop() == how);
  }
}

TEST_CASE("several children and a signal watched at once", "[child_process]") {
  std::unique_ptr<ChildProcess> a = Shell("echo a1; echo a2; cat >/dev/null");
  std::unique_ptr<ChildProcess> b = Shell("read wait; echo b1");
  std::vector<ChildProcess*> children = {a.get(), nullptr, b.get()};
  std::vector<std::string> from_a, from_b;
  for (int i = 0; i < 100 && from_a.size() < 2; ++i) {
    std::vector<std::vector<std::string>> lines;
    absl::StatusOr<int> signal = WaitForChildOutput(children, -1, absl::Seconds(1), &lines);
    REQUIRE(signal.ok());
    CHECK(*signal == 0);
    REQUIRE(lines.size() == 3);
    CHECK(lines[1].empty());
    from_a.insert(from_a.end(), lines[0].begin(), lines[0].end());
    from_b.insert(from_b.end(), lines[2].begin(), lines[2].end());
  }
  CHECK(from_a == std::vector<std::string>{"a1", "a2"});
  CHECK(from_b.empty());

  // A signal waiting on the signalfd is returned before any output is read.
  sigset_t usr2, before;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, &before);
  const int signal_fd = signalfd(-1, &usr2, SFD_CLOEXEC);
  REQUIRE(signal_fd >= 0);
  REQUIRE(b->Send("go\n").ok());
  kill(getpid(), SIGUSR2);
  std::vector<std::vector<std::string>> lines;
  absl::StatusOr<int> signal = WaitForChildOutput(children, signal_fd, absl::Seconds(10), &lines);
  close(signal_fd);
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  REQUIRE(signal.ok());
  CHECK(*signal == SIGUSR2);
  CHECK(AllLines(*b) == std::vector<std::string>{"b1"});
  CHECK(a->Stop() == "exited with status 0");  // its input closed: cat ends, so does it
  CHECK(b->Stop() == "exited with status 0");
}

}  // namespace farm
