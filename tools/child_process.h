// ChildProcess: a copy of the running program started as a helper process (e.g. as another
// node), for benchmarks and multi-process tests that re-execute themselves in another role, or
// another program (Spawn) under the same supervision. It is the one way the tools start
// processes (kvsh's and cluster's nodes, fabric_bench's target and reference, the benches').
//
//   ASSIGN_OR_RETURN(auto child, ChildProcess::SpawnSelf({"--role=node", "--node_id=1"}));
//   ASSIGN_OR_RETURN(std::string ready,
//                    child->WaitForLine("READY", absl::Now() + absl::Seconds(30)));
//   child->Send("go\n");
//   ...
//   std::string how = child->Stop();   // closes its stdin, then SIGTERM, then SIGKILL
//
// The child's standard input is a pipe from the parent; its standard output a pipe to the parent
// or a file, its standard error the parent's or a file (Options). It starts with every signal at
// its default action (SIGPIPE too) and none blocked, dies with the parent even if the parent is
// killed with SIGKILL (PR_SET_PDEATHSIG, SIGTERM), and leaves when its standard input closes (the
// roles and nodes here all do). Stop() always reaps it, so no process outlives its ChildProcess.
//
// A supervisor of several children polls their stdout_fd()s (or calls WaitForChildOutput) and
// takes what arrived with ReadLines; Exited reaps one that ended without blocking.
//
// Thread-compatible: one thread uses a ChildProcess at a time.
#ifndef FARM_TOOLS_CHILD_PROCESS_H_
#define FARM_TOOLS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "platform/config.pb.h"

namespace farm {

class ChildProcess {
 public:
  // Runs /proc/self/exe with `args` (not including argv[0]).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnSelf(
      const std::vector<std::string>& args);
  // Runs `program` (a path, or a name looked up in PATH) with `args` (not including argv[0]).
  // A program that cannot be executed says so on its standard error ("cannot run PROGRAM: why")
  // and exits with status 127. Errors (a file, pipe or process that cannot be made) close what
  // was opened and say what failed.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& program,
                                                             const std::vector<std::string>& args);
  struct Options {
    // Where its standard output goes (created or truncated, e.g. "/dev/null"); empty: a pipe to
    // the parent (stdout_fd, ReadLines, WaitForLine; without one, they see the output ended).
    std::string stdout_path;
    // Where its standard error goes (created or truncated); empty: the parent's.
    std::string stderr_path;
    // A process group of its own: a Ctrl-C at the parent's terminal is not the child's.
    bool own_process_group = false;
  };
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& program,
                                                             const std::vector<std::string>& args,
                                                             const Options& options);
  // The same with the program and its arguments in one list: command[0] is the program.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnCommand(
      const std::vector<std::string>& command);
  static absl::StatusOr<std::unique_ptr<ChildProcess>> SpawnCommand(
      const std::vector<std::string>& command, const Options& options);

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Stop(); }

  // Its process id; negated once it was reaped (the number stays for messages).
  pid_t pid() const { return pid_; }

  // Waits until the child printed a line starting with `prefix` (earlier lines are skipped) and
  // returns it without the newline. DeadlineExceeded at `deadline`; Aborted if the child exited
  // (the message says how).
  absl::StatusOr<std::string> WaitForLine(absl::string_view prefix, absl::Time deadline);
  // Writes to the child's standard input.
  absl::Status Send(absl::string_view text);
  // For callers that watch several children with poll(): the child's standard output (-1 once
  // it ended, or when it is not a pipe).
  int stdout_fd() const { return stdout_fd_; }
  // Non-blocking: appends the complete lines that have arrived to `lines` (without their
  // newlines). False once the output ended; an unfinished last line is then returned too.
  bool ReadLines(std::vector<std::string>* lines);
  // Closes its standard input (the roles and nodes here leave on that).
  void CloseStdin();
  // Sends `signal` unless it was reaped.
  void Kill(int signal);
  // True once Exited or Stop reaped it.
  bool reaped() const { return pid_ < 0; }
  // Its wait status (waitpid) once reaped; 0 before.
  int wait_status() const { return wait_status_; }
  // Non-blocking: true (and how) once the child has exited; reaps it.
  bool Exited(std::string* how);
  // Closes its standard input, waits up to `grace` for it to leave, then SIGTERM, then SIGKILL.
  // Returns how it ended ("exited with status 0", ...), also when it was reaped before; empty if
  // it never ran.
  std::string Stop(absl::Duration grace = absl::Seconds(10));

 private:
  ChildProcess() = default;
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::string& program,
                                                             const std::string& argv0,
                                                             const std::vector<std::string>& args,
                                                             const Options& options);
  bool WaitExit(absl::Duration timeout, std::string* how);
  // Appends what has arrived on its standard output to buffer_ without blocking; false (and
  // the descriptor closed) once the output ended.
  bool ReadAvailable();
  // Takes the first complete line from buffer_ (`at_end`: an unfinished one too).
  bool NextLine(bool at_end, std::string* line);

  pid_t pid_ = 0;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  int wait_status_ = 0;
  std::string buffer_;  // output not yet returned as lines
};

// For supervisors of several children: waits up to `timeout` until one of `children` has output
// or a signal is waiting on `signal_fd` (a signalfd; -1: none), then reads what arrived: the
// complete lines of children[i] are appended to (*lines)[i] (resized to children.size()). Null
// children and those whose output ended are not watched. Returns the signal read from
// `signal_fd`, 0 if none; Internal if poll() fails.
absl::StatusOr<int> WaitForChildOutput(const std::vector<ChildProcess*>& children, int signal_fd,
                                       absl::Duration timeout,
                                       std::vector<std::vector<std::string>>* lines);

// "exited with status N" / "was killed by signal N".
std::string DescribeWaitStatus(int status);

// For supervisors: blocks SIGINT, SIGTERM and SIGHUP in the calling thread (call it before any
// thread starts, so that every thread inherits the mask) and returns a signalfd that reads them
// (for WaitForChildOutput), -1 if it cannot be made; ignores SIGPIPE (a child that went away is
// seen at its reaping, not as a signal).
int BlockTerminationSignals();

// A configuration of `nodes` nodes on `host` with free control ports (node i has id i), the
// given provider, 1 MiB regions, memory not locked (local tests and benchmarks).
absl::StatusOr<config::ClusterConfig> LocalClusterConfig(int nodes, const std::string& provider,
                                                         const std::string& host);

// A private temporary directory (under $TEST_TMPDIR, $TMPDIR or /tmp), removed with everything
// in it on destruction.
class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create(const std::string& prefix);
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }
  // Writes `text` to path()/name and returns the file's path.
  absl::StatusOr<std::string> Write(const std::string& name, const std::string& text);

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace farm

#endif  // FARM_TOOLS_CHILD_PROCESS_H_
