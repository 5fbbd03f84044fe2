#include "tools/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
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
namespace {

// What the child's standard input, output and error become, as the parent opened them (all
// close-on-exec). -1: not opened (stdout: the pipe is used; stderr: the parent's).
struct ChildStdio {
  int in[2] = {-1, -1};   // in[0]: the child's stdin; in[1]: the parent writes
  int out[2] = {-1, -1};  // out[1]: the child's stdout; out[0]: the parent reads (pipe only)
  int err = -1;

  void CloseAll() {
    for (int* fd : {&in[0], &in[1], &out[0], &out[1], &err}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
  }
};

absl::Status OpenOutput(const std::string& path, int* fd) {
  *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (*fd >= 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
}

absl::Status OpenPipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot make a pipe: ", std::strerror(errno)));
}

// Opens everything the child needs; on failure closes what it opened.
absl::Status OpenStdio(const ChildProcess::Options& options, ChildStdio* io) {
  absl::Status s = OpenPipe(io->in);
  if (s.ok()) {
    s = options.stdout_path.empty() ? OpenPipe(io->out)
                                    : OpenOutput(options.stdout_path, &io->out[1]);
  }
  if (s.ok() && !options.stderr_path.empty()) s = OpenOutput(options.stderr_path, &io->err);
  // The parent reads the child's output without blocking (ReadLines); the child's end blocks.
  if (s.ok() && io->out[0] >= 0 && fcntl(io->out[0], F_SETFL, O_NONBLOCK) != 0) {
    s = absl::InternalError(
        absl::StrCat("cannot make a pipe non-blocking: ", std::strerror(errno)));
  }
  if (!s.ok()) io->CloseAll();
  return s;
}

// Makes `fd` the child's descriptor `target` (kept open across exec).
void Redirect(int fd, int target) {
  if (fd == target) {
    fcntl(fd, F_SETFD, 0);
  } else {
    dup2(fd, target);
  }
}

void WriteStderr(const char* text) { (void)!write(STDERR_FILENO, text, std::strlen(text)); }

// The child between fork and exec. Only async-signal-safe calls: another thread of the parent
// may have held a lock (malloc's, stdio's) at the fork, and the child would wait for it forever.
[[noreturn]] void ExecChild(const std::string& program, char* const argv[], const ChildStdio& io,
                            pid_t parent, bool own_process_group, const std::string& cannot_run) {
  // Never outlive the parent, even one killed with SIGKILL. SIGTERM (not SIGKILL) lets the shm
  // provider remove its shared-memory files.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);  // the parent is gone already
  if (own_process_group) setpgid(0, 0);
  Redirect(io.in[0], STDIN_FILENO);
  Redirect(io.out[1], STDOUT_FILENO);
  if (io.err >= 0) Redirect(io.err, STDERR_FILENO);
  // Every handler back to its default, SIGPIPE's "ignore" too (exec keeps ignored signals
  // ignored); SIGKILL and SIGSTOP are refused, harmlessly. Then unblock everything.
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvp(program.c_str(), argv);
  const char* why = strerrordesc_np(errno);  // unlike strerror: no locale, no allocation
  WriteStderr(cannot_run.c_str());
  WriteStderr(why != nullptr ? why : "unknown error");
  WriteStderr("\n");
  _exit(127);
}

}  // namespace

int BlockTerminationSignals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return signalfd(-1, &mask, SFD_CLOEXEC);
}

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

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::SpawnCommand(
    const std::vector<std::string>& command) {
  return SpawnCommand(command, Options{});
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::SpawnCommand(
    const std::vector<std::string>& command, const Options& options) {
  if (command.empty()) return absl::InvalidArgumentError("no program to run");
  return Start(command[0], command[0], {command.begin() + 1, command.end()}, options);
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& program, const std::string& argv0, const std::vector<std::string>& args,
    const Options& options) {
  ChildStdio io;
  if (absl::Status s = OpenStdio(options, &io); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot start ", program, ": ", s.message()));
  }
  // Everything the child uses is made before the fork (ExecChild allocates nothing).
  std::vector<std::string> argv_storage = {argv0};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string cannot_run = absl::StrCat("cannot run ", program, ": ");
  const pid_t parent = getpid();
  // Signals stay blocked from fork until the child has reset its handlers: a signal sent to a
  // child that has not yet run exec would otherwise run the parent's handler in the child.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = fork();
  if (pid == 0) ExecChild(program, argv.data(), io, parent, options.own_process_group, cannot_run);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    io.CloseAll();
    return absl::InternalError(
        absl::StrCat("cannot start ", program, ": fork: ", std::strerror(fork_errno)));
  }
  std::unique_ptr<ChildProcess> c(new ChildProcess());
  c->pid_ = pid;
  c->stdin_fd_ = io.in[1];
  c->stdout_fd_ = io.out[0];
  io.in[1] = io.out[0] = -1;  // the child's now
  io.CloseAll();              // the child's ends, in the parent
  return c;
}

bool ChildProcess::ReadAvailable() {
  if (stdout_fd_ < 0) return false;
  // At most a pipe's capacity per call: a child that writes without pause cannot keep the
  // caller here.
  char buf[4096];
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = read(stdout_fd_, buf, sizeof(buf));
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return true;
    } else {  // the end of its output (or an error: the same to us)
      close(stdout_fd_);
      stdout_fd_ = -1;
      return false;
    }
  }
  return true;
}

bool ChildProcess::NextLine(bool at_end, std::string* line) {
  const size_t nl = buffer_.find('\n');
  if (nl == std::string::npos) {
    if (!at_end || buffer_.empty()) return false;
    *line = std::move(buffer_);
    buffer_.clear();
    return true;
  }
  line->assign(buffer_, 0, nl);
  buffer_.erase(0, nl + 1);
  return true;
}

bool ChildProcess::ReadLines(std::vector<std::string>* lines) {
  const bool open = ReadAvailable();
  for (std::string line; NextLine(!open, &line);) lines->push_back(std::move(line));
  return open;
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
    std::string how;
    const bool exited = Exited(&how);  // checked first: all it wrote is in the pipe by then
    const bool open = ReadAvailable();
    for (std::string line; NextLine(!open, &line);) {
      if (absl::StartsWith(line, prefix)) return line;
    }
    if (exited) {
      return absl::AbortedError(
          absl::StrCat("process ", -pid_, " ", how, " before printing ", prefix));
    }
    if (!open) {  // the end of its output: it is leaving
      WaitExit(absl::Seconds(2), &how);
      return absl::AbortedError(absl::StrCat("process ", std::abs(pid_), " closed its output",
                                             how.empty() ? "" : absl::StrCat(" (", how, ")"),
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
    poll(&p, 1, ms);
  }
}

absl::StatusOr<int> WaitForChildOutput(const std::vector<ChildProcess*>& children, int signal_fd,
                                       absl::Duration timeout,
                                       std::vector<std::vector<std::string>>* lines) {
  std::vector<pollfd> fds = {{signal_fd, POLLIN, 0}};
  for (ChildProcess* c : children) fds.push_back({c == nullptr ? -1 : c->stdout_fd(), POLLIN, 0});
  const int ms = timeout == absl::InfiniteDuration()
                     ? -1
                     : static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout)));
  if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) {
    return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
  }
  lines->resize(children.size());
  if (fds[0].revents & POLLIN) {  // the caller stops: the children's output can wait
    signalfd_siginfo info{};
    (void)!read(signal_fd, &info, sizeof(info));
    return static_cast<int>(info.ssi_signo);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    // POLLHUP: the end of its output, which ReadLines takes (its descriptor becomes -1).
    if (fds[i + 1].revents & (POLLIN | POLLHUP)) children[i]->ReadLines(&(*lines)[i]);
  }
  return 0;
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
  // Reaped before (Exited): how it ended then.
  std::string how = pid_ < 0 ? DescribeWaitStatus(wait_status_) : "";
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
  // Ports that are free now, held until all are known (ListenOnFreePorts).
  absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> held =
      ListenOnFreePorts(host, nodes);
  if (!held.ok()) return held.status();
  for (int i = 0; i < nodes; ++i) {
    config::NodeConfig* n = c.add_node();
    n->set_id(i);
    n->set_host(host);
    n->set_control_port((*held)[i]->port());
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
