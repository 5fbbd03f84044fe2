#include "tools/child_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/config.h"
#include "platform/control_channel.h"

namespace farm {

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with wait status ", status);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::SpawnSelf(
    const std::vector<std::string>& args) {
  return Start("/proc/self/exe", "self", args, Options{});
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::string& program, const std::vector<std::string>& args) {
  return Start(program, program, args, Options{});
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::string& program, const std::vector<std::string>& args, const Options& options) {
  return Start(program, program, args, options);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& program, const std::string& argv0, const std::vector<std::string>& args,
    const Options& options) {
  int err_fd = -1;
  if (!options.stderr_path.empty()) {
    err_fd = open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (err_fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot create ", options.stderr_path, ": ", std::strerror(errno)));
    }
  }
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    if (err_fd >= 0) close(err_fd);
    return absl::InternalError(absl::StrCat("pipe: ", why));
  }
  if (pipe2(out, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {in[0], in[1], err_fd}) {
      if (fd >= 0) close(fd);
    }
    return absl::InternalError(absl::StrCat("pipe: ", why));
  }
  std::vector<std::string> argv_storage = {argv0};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // Signals stay blocked from fork until the child has reset its handlers: a signal sent to a
  // child that has not yet run exec would otherwise run the parent's handler in the child.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = fork();
  if (pid != 0) pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    const std::string why = std::strerror(errno);
    for (int fd : {in[0], in[1], out[0], out[1], err_fd}) {
      if (fd >= 0) close(fd);
    }
    return absl::InternalError(absl::StrCat("fork: ", why));
  }
  if (pid == 0) {
    // Never outlive the parent, even one killed with SIGKILL. SIGTERM (not SIGKILL) lets the shm
    // provider remove its shared-memory files.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    if (options.own_process_group) setpgid(0, 0);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);  // SIGKILL, SIGSTOP: refused
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(program.c_str(), argv.data());
    std::fprintf(stderr, "cannot run %s: %s\n", program.c_str(), std::strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (err_fd >= 0) close(err_fd);
  std::unique_ptr<ChildProcess> c(new ChildProcess());
  c->pid_ = pid;
  c->stdin_fd_ = in[1];
  c->stdout_fd_ = out[0];
  return c;
}

bool ChildProcess::ReadLines(std::vector<std::string>* lines) {
  if (stdout_fd_ < 0) return false;
  char buf[4096];
  const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
  if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
    close(stdout_fd_);
    stdout_fd_ = -1;
    return false;
  }
  if (n > 0) buffer_.append(buf, static_cast<size_t>(n));
  for (size_t nl; (nl = buffer_.find('\n')) != std::string::npos;) {
    lines->push_back(buffer_.substr(0, nl));
    buffer_.erase(0, nl + 1);
  }
  return true;
}

void ChildProcess::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void ChildProcess::Kill(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(absl::string_view prefix,
                                                      absl::Time deadline) {
  for (;;) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (absl::StartsWith(line, prefix)) return line;
    }
    std::string how;
    if (stdout_fd_ < 0 || Exited(&how)) {
      return absl::AbortedError(absl::StrCat("process ", pid_, " ", how.empty() ? "ended" : how,
                                             " before printing ", prefix));
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " did not print ", prefix, " in time"));
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int ms =
        static_cast<int>(std::min<int64_t>(100, absl::ToInt64Milliseconds(deadline - now) + 1));
    if (poll(&p, 1, ms) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      close(stdout_fd_);  // end of output: the child is leaving
      stdout_fd_ = -1;
      WaitExit(absl::Seconds(2), &how);
      return absl::AbortedError(absl::StrCat("process ", pid_, " closed its output (", how,
                                             ") before printing ", prefix));
    }
  }
}

absl::Status ChildProcess::Send(absl::string_view text) {
  if (stdin_fd_ < 0) return absl::FailedPreconditionError("the child's input is closed");
  const ssize_t n = write(stdin_fd_, text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size())) {
    return absl::UnavailableError(
        absl::StrCat("process ", pid_, " does not take input: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool ChildProcess::Exited(std::string* how) {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  wait_status_ = status;
  *how = DescribeWaitStatus(status);
  pid_ = -pid_;  // keep the number for messages; negative: reaped
  return true;
}

bool ChildProcess::WaitExit(absl::Duration timeout, std::string* how) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (pid_ <= 0 || Exited(how)) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string ChildProcess::Stop(absl::Duration grace) {
  if (stdin_fd_ >= 0) {
    close(stdin_fd_);
    stdin_fd_ = -1;
  }
  std::string how;
  if (pid_ > 0 && !WaitExit(grace, &how)) {
    kill(pid_, SIGTERM);
    if (!WaitExit(absl::Seconds(3), &how)) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      wait_status_ = status;
      how = DescribeWaitStatus(status);
      pid_ = -pid_;
    }
  }
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
  return how;
}

absl::StatusOr<config::ClusterConfig> LocalClusterConfig(int nodes, const std::string& provider,
                                                         const std::string& host) {
  config::ClusterConfig c;
  c.set_provider(provider);
  c.set_region_size(1 << 20);
  c.set_region_count(1);
  c.set_lock_memory(false);
  // Ports that were free a moment ago. Every listener is held until all ports are known: one
  // closed before the next opens may hand its port to the next, and two nodes would share it.
  std::vector<std::unique_ptr<ControlListener>> held;
  for (int i = 0; i < nodes; ++i) {
    absl::StatusOr<std::unique_ptr<ControlListener>> l = ControlListener::Listen(host, 0);
    if (!l.ok()) {
      return absl::Status(l.status().code(), absl::StrCat("cannot find a free port on ", host, ": ",
                                                          l.status().message()));
    }
    config::NodeConfig* n = c.add_node();
    n->set_id(i);
    n->set_host(host);
    n->set_control_port((*l)->port());
    held.push_back(std::move(*l));
  }
  if (absl::Status s = ValidateAndComplete(&c); !s.ok()) return s;
  return c;
}

absl::StatusOr<std::unique_ptr<TempDir>> TempDir::Create(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr || *base == '\0') base = std::getenv("TMPDIR");
  if (base == nullptr || *base == '\0') base = "/tmp";
  std::string pattern = absl::StrCat(base, "/", prefix, ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot create a temporary directory ", pattern, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TempDir>(new TempDir(pattern));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<std::string> TempDir::Write(const std::string& name, const std::string& text) {
  const std::string file = absl::StrCat(path_, "/", name);
  std::ofstream out(file);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", file));
  return file;
}

}  // namespace farm
