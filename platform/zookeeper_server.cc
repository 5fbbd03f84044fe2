#include "platform/zookeeper_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "platform/control_channel.h"

namespace farm {
namespace {

constexpr char kZooKeeperJar[] = "/usr/share/java/zookeeper.jar";
constexpr char kSlf4jSimpleJar[] = "/usr/share/java/slf4j-simple.jar";
constexpr char kServerMain[] = "org.apache.zookeeper.server.ZooKeeperServerMain";
constexpr char kInstallHint[] = "install zookeeperd (third_party/install_deps.sh does)";

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string TempBase() {
  for (const char* var : {"TEST_TMPDIR", "TMPDIR"}) {
    const char* value = std::getenv(var);
    if (value != nullptr && *value != '\0') return value;
  }
  return "/tmp";
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (out) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
}

// Reaps `pid` if it exits within `timeout`; false if it is still running then.
bool Reap(pid_t pid, absl::Duration timeout, int* status) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("wait status ", status);
}

// Makes `fd` the child's descriptor `target`, open across exec.
void MoveTo(int fd, int target) {
  if (fd != target) {
    dup2(fd, target);
  } else {
    fcntl(fd, F_SETFD, 0);
  }
}

// The child between fork and exec: only async-signal-safe calls (another thread of the parent
// may have held malloc's lock at the fork).
[[noreturn]] void ExecServer(char* const argv[], int stdin_fd, int log_fd, pid_t parent) {
  // SIGKILL, not SIGTERM: a server paused with SIGSTOP would keep a SIGTERM pending forever.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent is gone already
  MoveTo(stdin_fd, STDIN_FILENO);
  MoveTo(log_fd, STDOUT_FILENO);
  MoveTo(log_fd, STDERR_FILENO);
  // exec keeps ignored signals ignored and the signal mask: give the JVM a clean slate (a parent
  // that blocks SIGTERM for a signalfd would otherwise make the server deaf to Stop).
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execv(argv[0], argv);
  static constexpr char kCannotRun[] = "cannot run the Java runtime\n";
  (void)!write(STDERR_FILENO, kCannotRun, sizeof(kCannotRun) - 1);
  _exit(127);
}

// Whether the server at host:port serves clients, by its answer to the "srvr" command (a
// standalone server serves as soon as it has loaded its data). A plain socket rather than a
// client session: libzookeeper_mt's handles share a buffer when they fail to connect (see
// zookeeper_session.h), and this probe fails until the server is up.
bool Serving(const std::string& host, uint16_t port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  const int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  std::string answer;
  if (connected && send(fd, "srvr", 4, MSG_NOSIGNAL) == 4) {
    const timeval timeout = {1, 0};  // the server answers at once, then closes the connection
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    char buffer[1024];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  }
  if (fd >= 0) close(fd);
  return absl::StartsWith(answer, "Zookeeper version:");
}

}  // namespace

std::string DefaultZooKeeperClasspath() {
  return Exists(kSlf4jSimpleJar) ? absl::StrCat(kZooKeeperJar, ":", kSlf4jSimpleJar)
                                 : kZooKeeperJar;
}

absl::StatusOr<std::unique_ptr<ZooKeeperServer>> ZooKeeperServer::Start(
    ZooKeeperServerOptions options) {
  if (access(options.java.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no Java runtime at ", options.java, " to run ZooKeeper: ", kInstallHint));
  }
  for (absl::string_view jar : absl::StrSplit(options.classpath, ':', absl::SkipEmpty())) {
    if (!Exists(std::string(jar))) {
      return absl::FailedPreconditionError(absl::StrCat("ZooKeeper's class path names ", jar,
                                                        ", which does not exist: ", kInstallHint));
    }
  }
  std::unique_ptr<ZooKeeperServer> server(new ZooKeeperServer(std::move(options)));
  if (absl::Status s = server->Prepare(); !s.ok()) return s;
  if (absl::Status s = server->Restart(); !s.ok()) return s;
  return server;
}

ZooKeeperServer::~ZooKeeperServer() {
  Stop();
  if (remove_dir_) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string ZooKeeperServer::connect_string() const {
  return absl::StrCat(options_.host, ":", port_);
}

absl::Status ZooKeeperServer::Prepare() {
  if (options_.dir.empty()) {
    std::string pattern = TempBase() + "/zookeeper.XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(
          absl::StrCat("cannot create a directory like ", pattern, ": ", std::strerror(errno)));
    }
    dir_ = pattern;
    remove_dir_ = true;
  } else {
    dir_ = options_.dir;
  }
  std::error_code error;
  std::filesystem::create_directories(dir_ + "/data", error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", dir_, "/data: ", error.message()));
  }
  port_ = options_.port;
  if (port_ == 0) {
    // Held only until the port is known; the server binds it with SO_REUSEADDR right after.
    absl::StatusOr<std::vector<std::unique_ptr<ControlListener>>> free =
        ListenOnFreePorts(options_.host, 1);
    if (!free.ok()) return free.status();
    port_ = (*free)[0]->port();
  }
  return WriteFile(
      dir_ + "/zoo.cfg",
      absl::StrCat("tickTime=", absl::ToInt64Milliseconds(options_.tick), "\n", "dataDir=", dir_,
                   "/data\n", "clientPort=", port_, "\n", "clientPortAddress=", options_.host, "\n",
                   "maxSessionTimeout=600000\n"
                   "maxClientCnxns=0\n"
                   "forceSync=no\n"
                   "admin.enableServer=false\n"
                   "4lw.commands.whitelist=ruok,srvr,stat\n"));
}

absl::Status ZooKeeperServer::Restart() {
  if (pid_ != 0) return absl::FailedPreconditionError("the ZooKeeper server is running");
  if (absl::Status s = Spawn(); !s.ok()) return s;
  return WaitUntilServing();
}

absl::Status ZooKeeperServer::Spawn() {
  const std::string log = dir_ + "/zookeeper.log";
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || stdin_fd < 0) {
    const int open_errno = errno;
    if (log_fd >= 0) close(log_fd);
    if (stdin_fd >= 0) close(stdin_fd);
    return absl::InternalError(
        absl::StrCat("cannot open ", log,
                     " or /dev/null for the ZooKeeper server: ", std::strerror(open_errno)));
  }
  std::vector<std::string> args = {
      options_.java,
      // A small, quick JVM: one GC thread, no JIT beyond the first tier, no perf-data file.
      "-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
      "-Djava.io.tmpdir=" + dir_, "-Dzookeeper.jmx.log4j.disable=true",
      "-Dorg.slf4j.simpleLogger.showDateTime=true",
      "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS", "-cp", options_.classpath,
      kServerMain, dir_ + "/zoo.cfg"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // Signals stay blocked from the fork until the child has reset its handlers: one delivered in
  // between would run the parent's handler in the child.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  const pid_t pid = fork();
  if (pid == 0) ExecServer(argv.data(), stdin_fd, log_fd, parent);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  close(log_fd);
  close(stdin_fd);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("cannot start the ZooKeeper server: fork: ", std::strerror(fork_errno)));
  }
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status ZooKeeperServer::WaitUntilServing() {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return Failed(absl::StrCat("the ZooKeeper server exited (", DescribeExit(status),
                                 ") before it served on ", connect_string()));
    }
    if (Serving(options_.host, port_)) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(50));
  }
  Stop();
  return Failed(absl::StrCat("the ZooKeeper server did not serve on ", connect_string(), " within ",
                             absl::FormatDuration(options_.start_timeout)));
}

void ZooKeeperServer::Stop() {
  if (pid_ == 0) return;
  kill(pid_, SIGTERM);
  kill(pid_, SIGCONT);  // a paused server handles its SIGTERM only once it runs
  int status = 0;
  if (!Reap(pid_, absl::Seconds(10), &status)) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = 0;
}

absl::Status ZooKeeperServer::Pause() {
  if (pid_ == 0) return absl::FailedPreconditionError("the ZooKeeper server is not running");
  kill(pid_, SIGSTOP);
  // kill() returns before the server's threads have stopped (one could still answer a request);
  // the kernel reports the stop to the parent once every thread has.
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WUNTRACED);
    if (r == pid_ && WIFSTOPPED(status)) return absl::OkStatus();
    if (r == pid_ || (r < 0 && errno != EINTR)) break;
  }
  pid_ = 0;
  return Failed(
      absl::StrCat("the ZooKeeper server exited (", DescribeExit(status), ") instead of pausing"));
}

absl::Status ZooKeeperServer::Resume() {
  if (pid_ == 0) return absl::FailedPreconditionError("the ZooKeeper server is not running");
  kill(pid_, SIGCONT);
  return absl::OkStatus();
}

std::string ZooKeeperServer::LogTail(int lines) const {
  std::ifstream in(dir_ + "/zookeeper.log");
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (static_cast<int>(tail.size()) > lines) tail.pop_front();
  }
  return absl::StrJoin(tail, "\n");
}

absl::Status ZooKeeperServer::Failed(const std::string& what) const {
  return absl::UnavailableError(
      absl::StrCat(what, "; the end of its log (", dir_, "/zookeeper.log):\n", LogTail()));
}

}  // namespace farm
