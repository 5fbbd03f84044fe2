// The peer servers of the benchmarks (Redis, PostgreSQL, memcached from Debian's packages),
// started for one run on private sockets by tools/bench_peers.sh and stopped afterwards, and a
// hiredis connection to Redis (RedisLink):
//
//   ASSIGN_OR_RETURN(auto server, ScriptedServer::Start(script, "memcached", Transport::kUnix,
//                                                       /*cpus=*/"1", {"1", "256"}));
//   connect to server->UnixSocket("memcached.sock") or 127.0.0.1:server->port() ...
//   server.reset();   // stops the server and removes its directory
//
// Thread safety: a ScriptedServer is used by one thread (start, stop); its accessors are const.
#ifndef FARM_TOOLS_BENCH_PEERS_H_
#define FARM_TOOLS_BENCH_PEERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "hiredis/hiredis.h"

namespace farm {

// How a peer's clients reach it: a Unix domain socket (compared with farm on shm) or TCP on
// 127.0.0.1 (compared with farm on tcp;ofi_rxm and the other network providers).
enum class Transport { kUnix, kTcp };
std::string TransportName(Transport t);  // "unix", "tcp"
// The transport of the same class as farm's `provider`: Unix sockets for shm, TCP otherwise.
Transport TransportFor(const std::string& provider);

// tools/bench_peers.sh: `flag_value` when not empty, else found in the runfiles. NotFound.
absl::StatusOr<std::string> PeersScript(const std::string& flag_value);

// A server started by the peers script; stopped (and its directory removed) on destruction.
class ScriptedServer {
 public:
  // Starts `server` ("redis", "postgres", "memcached") listening on `transport` with the script's
  // extra arguments `extra` (memcached: threads, memory in MB). Non-empty `cpus` runs it under
  // `taskset -c cpus`. FailedPrecondition when the server's package is not installed.
  static absl::StatusOr<std::unique_ptr<ScriptedServer>> Start(
      const std::string& script, const std::string& server, Transport transport,
      const std::string& cpus = "", const std::vector<std::string>& extra = {});
  ScriptedServer(const ScriptedServer&) = delete;
  ScriptedServer& operator=(const ScriptedServer&) = delete;
  ~ScriptedServer();

  // The server's private directory (its Unix socket, log and pid file live there).
  const std::string& dir() const { return dir_; }
  // Its TCP port on 127.0.0.1 (chosen free before the start; unused on Unix sockets).
  int port() const { return port_; }
  std::string UnixSocket(const std::string& name) const { return dir_ + "/" + name; }
  // The server's resident memory (VmRSS of the process in its pid file, `<server>.pid`).
  absl::StatusOr<uint64_t> ResidentBytes() const;
  // The server's main process: from `<server>.pid`, or PostgreSQL's postmaster.pid. NotFound
  // when neither names one.
  absl::StatusOr<int> Pid() const;

 private:
  ScriptedServer(std::string script, std::string server, int port)
      : script_(std::move(script)), server_(std::move(server)), port_(port) {}
  std::string script_;
  std::string server_;
  int port_;
  std::string dir_;
};

struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

// One hiredis connection to a redis-server started as a ScriptedServer ("redis.sock" in its
// directory, or 127.0.0.1:port). Owned by one thread.
class RedisLink {
 public:
  // Unavailable with hiredis's reason when it cannot connect.
  static absl::StatusOr<std::unique_ptr<RedisLink>> Open(const ScriptedServer& server, Transport t);
  RedisLink(const RedisLink&) = delete;
  RedisLink& operator=(const RedisLink&) = delete;
  ~RedisLink() { redisFree(c_); }

  // For redisAppendCommand.
  redisContext* context() { return c_; }
  // Sends the commands queued with redisAppendCommand and reads `n` replies: Unavailable when the
  // connection fails, Internal for an error reply.
  absl::StatusOr<std::vector<RedisReply>> Replies(int n);

 private:
  explicit RedisLink(redisContext* c) : c_(c) {}
  redisContext* c_;
};

// The peers' transport reference, as fabric_bench's READ is farm's: the p50 in µs of `iters`
// round trips of `bytes` bytes between the calling thread and an echo thread over `t` (a
// connected Unix stream socket, or TCP on 127.0.0.1 with TCP_NODELAY), both blocking in read(2)
// as a peer's client and server do. The echo thread runs on `cpus` (a CPU list) when not empty.
absl::StatusOr<double> SocketRoundTripP50(Transport t, int bytes, int iters,
                                          const std::string& cpus = "");

// Runs `command` through the shell; its standard output, or an error with the exit status
// (status 3, the peers script's "not installed", is FailedPrecondition).
absl::StatusOr<std::string> RunCommand(const std::string& command);

}  // namespace farm

#endif  // FARM_TOOLS_BENCH_PEERS_H_
