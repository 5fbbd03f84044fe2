// ZooKeeperSession: one session with a ZooKeeper ensemble through its multi-threaded C client
// (libzookeeper_mt), with every operation bounded by the caller's deadline.
//
// The C client's synchronous calls wait for as long as the client takes to give up on a
// connection (two thirds of the session timeout, per server it tries), and its asynchronous ones
// complete whenever an answer comes. Here each operation waits for the session to be connected,
// issues the asynchronous call and waits for its completion, both until the deadline; a
// completion that comes later is dropped. So every call returns by its deadline, whatever
// ZooKeeper does: down, stopped (SIGSTOP), accepting connections but never answering.
//
//   absl::StatusOr<std::shared_ptr<ZooKeeperSession>> s =
//       ZooKeeperSession::Open("10.0.0.1:2181,10.0.0.2:2181", absl::Seconds(10));
//   if (!s.ok()) return s.status();  // InvalidArgument: the client refused the server list
//   const auto deadline = ZooKeeperSession::Clock::now() + std::chrono::seconds(5);
//   absl::StatusOr<ZooKeeperSession::Reply> r = (*s)->Get("/farm/a/configuration", deadline);
//   if (!r.ok()) return r.status();  // Unavailable: no session, no answer in time, ...
//   if (r->rc == ZNONODE) ...        // ZooKeeper's answer: ZOK, ZNONODE, ZBADVERSION, ...
//
// A session that expired stays expired (expired() turns true): open a new one. The C client's
// own log goes to spdlog at debug level (its warnings and errors repeat on every connection
// attempt while a server is down; the Unavailable statuses say what matters).
//
// A flaw of libzookeeper_mt 3.8 (Debian 12): when a handle fails to connect, the client formats
// the server's address into one static buffer (format_endpoint_info) for its error message, so
// two handles that fail at the same moment race on it. It garbles a log line at worst, but
// ThreadSanitizer reports it; no suppression can name it without also hiding races in our
// completions (every frame in that library, thread creation included, would match), so the
// tests keep at most one failing handle at a time. One store per process never meets it.
//
// Thread safety: safe for concurrent use. Destroying a session closes it (zookeeper_close,
// which joins the client's threads): do it on a thread of the caller's, which is where the last
// reference is dropped as long as only callers hold them.
#ifndef FARM_PLATFORM_ZOOKEEPER_SESSION_H_
#define FARM_PLATFORM_ZOOKEEPER_SESSION_H_

#include <zookeeper/zookeeper.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace farm {

class ZooKeeperSession {
 public:
  using Clock = std::chrono::steady_clock;

  // ZooKeeper's answer to an operation.
  struct Reply {
    int rc = ZOK;      // ZOK, or the reason ZooKeeper refused: ZNONODE, ZNODEEXISTS, ZBADVERSION...
    std::string data;  // Get: the znode's bytes
    int32_t version = 0;  // Get, Set: the znode's version (after the Set)
  };

  // Starts a session with the servers in `connect` ("host:port,host:port"); does not wait for it
  // (operations do). InvalidArgument if the client refuses the list (e.g. a host name that does
  // not resolve).
  static absl::StatusOr<std::shared_ptr<ZooKeeperSession>> Open(const std::string& connect,
                                                                absl::Duration session_timeout);
  ZooKeeperSession(const ZooKeeperSession&) = delete;
  ZooKeeperSession& operator=(const ZooKeeperSession&) = delete;
  ~ZooKeeperSession();

  // OK once the session is connected; Unavailable at `deadline` (saying what the client is
  // doing) or at once if the session expired.
  absl::Status WaitConnected(Clock::time_point deadline);
  // True once ZooKeeper ended the session (expired, or authentication failed): it never
  // connects again.
  bool expired() const;

  // The operations: ZooKeeper's answer, or Unavailable if none came by `deadline`, the
  // connection was lost or the session expired. A write that ended so may or may not have been
  // applied (the message says so). Paths are absolute znode paths.
  absl::StatusOr<Reply> Get(const std::string& path, Clock::time_point deadline);
  // Sets the znode's bytes if its version is `version` (ZBADVERSION if not; InvalidArgument if
  // `version` is negative, which ZooKeeper would take as "any version").
  absl::StatusOr<Reply> Set(const std::string& path, const std::string& data, int32_t version,
                            Clock::time_point deadline);
  // Creates a persistent znode, readable and writable by anyone (ZNODEEXISTS if it exists,
  // ZNONODE if its parent does not).
  absl::StatusOr<Reply> Create(const std::string& path, const std::string& data,
                               Clock::time_point deadline);

 private:
  explicit ZooKeeperSession(std::string connect) : connect_(std::move(connect)) {}
  static void OnSessionEvent(zhandle_t* zh, int type, int state, const char* path, void* context);
  // Issues an asynchronous call (`issue` gets the completion's data pointer and returns the
  // client's result) and waits for its completion until `deadline`.
  template <typename Issue>
  absl::StatusOr<Reply> Call(Clock::time_point deadline, bool is_write, Issue issue);
  // Unavailable for a result code that says the session, not ZooKeeper's data, failed.
  absl::Status ConnectionTrouble(int rc, bool is_write);

  const std::string connect_;
  zhandle_t* zh_ = nullptr;  // set once by Open
  mutable std::mutex mu_;
  std::condition_variable state_changed_;
  int state_ = 0;  // the last session state the client reported (ZOO_*_STATE); guarded by mu_
};

}  // namespace farm

#endif  // FARM_PLATFORM_ZOOKEEPER_SESSION_H_
