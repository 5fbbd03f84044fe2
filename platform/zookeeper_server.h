// ZooKeeperServer: a standalone ZooKeeper server (Debian's zookeeper 3.8) run as a child process,
// for tests and for local clusters (a cluster started on one host needs a ZooKeeper too).
//
//   absl::StatusOr<std::unique_ptr<ZooKeeperServer>> zk = ZooKeeperServer::Start();
//   if (!zk.ok()) return zk.status();  // what failed, with the end of the server's log
//   options.connect = (*zk)->connect_string();  // "127.0.0.1:PORT"
//   ...
//   (*zk)->Pause();    // SIGSTOP: a ZooKeeper that accepts connections but never answers
//   (*zk)->Resume();
//   (*zk)->Stop();     // down
//   (*zk)->Restart();  // up again on the same port, with the same data
//
// The server listens on a free port of `host` and keeps its zoo.cfg, data and log
// (zookeeper.log) in a directory of its own. Its clock ticks fast (`tick`, 200 ms) so that
// sessions can be short, and it accepts session timeouts up to 10 minutes. It does not fsync
// its log: its data outlives the process (Stop, Restart, a crash), not the machine.
//
// The child dies with its parent, even one killed with SIGKILL (PR_SET_PDEATHSIG): start and
// restart the server on a thread that outlives it (e.g. the main thread), since the kernel sends
// that signal when the thread that started the child ends.
//
// Thread-compatible: one thread at a time.
#ifndef FARM_PLATFORM_ZOOKEEPER_SERVER_H_
#define FARM_PLATFORM_ZOOKEEPER_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace farm {

// Debian's /usr/share/java/zookeeper.jar (its manifest's Class-Path names the jars it needs), and
// /usr/share/java/slf4j-simple.jar if installed (without a binding, the server logs nothing).
std::string DefaultZooKeeperClasspath();

struct ZooKeeperServerOptions {
  // The address it listens on.
  std::string host = "127.0.0.1";
  // Its client port; 0: a free one.
  uint16_t port = 0;
  // Its directory (created if missing); empty: a new one under $TEST_TMPDIR, $TMPDIR or /tmp,
  // removed with everything in it when the server is destroyed.
  std::string dir;
  // ZooKeeper's tickTime. Sessions last at least two ticks.
  absl::Duration tick = absl::Milliseconds(200);
  // How long Start and Restart wait for the server to serve clients.
  absl::Duration start_timeout = absl::Seconds(30);
  // The Java runtime, and the class path holding ZooKeeper's server.
  std::string java = "/usr/bin/java";
  std::string classpath = DefaultZooKeeperClasspath();
};

class ZooKeeperServer {
 public:
  // Starts a server and waits until it serves clients. FailedPrecondition if Java or ZooKeeper
  // is missing (saying what to install), Unavailable if the server exits or does not serve
  // within start_timeout (with the end of its log).
  static absl::StatusOr<std::unique_ptr<ZooKeeperServer>> Start(
      ZooKeeperServerOptions options = {});
  ZooKeeperServer(const ZooKeeperServer&) = delete;
  ZooKeeperServer& operator=(const ZooKeeperServer&) = delete;
  // Stops the server; removes its directory if Start made it.
  ~ZooKeeperServer();

  // "host:port", for ZooKeeperStoreOptions.connect and --zookeeper.
  std::string connect_string() const;
  uint16_t port() const { return port_; }
  const std::string& dir() const { return dir_; }
  // The server's process id; 0 while it is stopped.
  pid_t pid() const { return pid_; }

  // Stops it: SIGTERM, SIGKILL after 10 s, reaped. Idempotent; a paused server is stopped too.
  void Stop();
  // Starts it again after Stop, on the same port with the same data, and waits as Start does.
  absl::Status Restart();
  // SIGSTOP / SIGCONT: the kernel still accepts connections to a stopped server, which answers
  // nothing until it resumes. Pause returns once all of the server's threads have stopped.
  // FailedPrecondition if it is not running.
  absl::Status Pause();
  absl::Status Resume();
  // The last `lines` lines of its log, for messages.
  std::string LogTail(int lines = 20) const;

 private:
  explicit ZooKeeperServer(ZooKeeperServerOptions options) : options_(std::move(options)) {}
  // Makes its directory and zoo.cfg and picks its port.
  absl::Status Prepare();
  absl::Status Spawn();
  absl::Status WaitUntilServing();
  // Unavailable with `what`, the log's path and its tail.
  absl::Status Failed(const std::string& what) const;

  ZooKeeperServerOptions options_;
  std::string dir_;
  bool remove_dir_ = false;
  uint16_t port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace farm

#endif  // FARM_PLATFORM_ZOOKEEPER_SERVER_H_
