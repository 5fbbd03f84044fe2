#include "tools/bench_peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"
#include "tools/bench_util.h"

namespace farm {
namespace {

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) return absl::InternalError("cannot find a free port on 127.0.0.1");
  return static_cast<int>(ntohs(a.sin_port));
}

std::string Quote(const std::string& s) { return absl::StrCat("'", s, "'"); }

}  // namespace

std::string TransportName(Transport t) { return t == Transport::kUnix ? "unix" : "tcp"; }

Transport TransportFor(const std::string& provider) {
  return provider == "shm" ? Transport::kUnix : Transport::kTcp;
}

absl::StatusOr<std::string> PeersScript(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  std::string script = FindRunfile("tools/bench_peers.sh", "bench_peers.sh");
  if (script.empty()) return absl::NotFoundError("tools/bench_peers.sh not found");
  return script;
}

absl::StatusOr<std::unique_ptr<RedisLink>> RedisLink::Open(const ScriptedServer& server,
                                                           Transport t) {
  redisContext* c = t == Transport::kUnix
                        ? redisConnectUnix(server.UnixSocket("redis.sock").c_str())
                        : redisConnect("127.0.0.1", server.port());
  if (c == nullptr || c->err) {
    std::string why = c == nullptr ? "out of memory" : c->errstr;
    if (c != nullptr) redisFree(c);
    return absl::UnavailableError(absl::StrCat("cannot connect to redis: ", why));
  }
  return std::unique_ptr<RedisLink>(new RedisLink(c));
}

absl::StatusOr<std::vector<RedisReply>> RedisLink::Replies(int n) {
  std::vector<RedisReply> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    void* r = nullptr;
    if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr) {
      return absl::UnavailableError(absl::StrCat("redis: ", c_->errstr));
    }
    out.emplace_back(static_cast<redisReply*>(r));
    if (out.back()->type == REDIS_REPLY_ERROR) {
      return absl::InternalError(absl::StrCat("redis: ", out.back()->str));
    }
  }
  return out;
}

namespace {

// Reads or writes exactly `n` bytes; false on an error or end of file.
template <typename Io>
bool Exactly(Io io, int fd, char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = io(fd, buf + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}
bool ReadExactly(int fd, char* buf, size_t n) { return Exactly(::read, fd, buf, n); }
bool WriteExactly(int fd, char* buf, size_t n) {
  return Exactly([](int f, char* b, size_t k) { return ::write(f, b, k); }, fd, buf, n);
}

// A connected pair of sockets over `t`: [client, server].
absl::StatusOr<std::pair<int, int>> ConnectedPair(Transport t) {
  int fds[2];
  if (t == Transport::kUnix) {
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
      return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
    return std::make_pair(fds[0], fds[1]);
  }
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int server = -1;
  if (listener >= 0 && client >= 0 &&
      bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      listen(listener, 1) == 0 &&
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
      connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    server = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  }
  const std::string why = std::strerror(errno);
  if (listener >= 0) close(listener);
  if (server < 0) {
    if (client >= 0) close(client);
    return absl::InternalError(absl::StrCat("a TCP connection on 127.0.0.1: ", why));
  }
  const int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return std::make_pair(client, server);
}

}  // namespace

absl::StatusOr<uint64_t> ScriptedServer::ResidentBytes() const {
  absl::StatusOr<int> pid = Pid();
  if (!pid.ok()) return pid.status();
  return ResidentBytesOf(*pid);
}

absl::StatusOr<int> ScriptedServer::Pid() const {
  // PostgreSQL's postmaster.pid starts with the postmaster's pid.
  for (const std::string& path :
       {absl::StrCat(dir_, "/", server_, ".pid"), absl::StrCat(dir_, "/data/postmaster.pid")}) {
    FILE* f = std::fopen(path.c_str(), "r");
    int pid = 0;
    const bool read = f != nullptr && std::fscanf(f, "%d", &pid) == 1;
    if (f != nullptr) std::fclose(f);
    if (read) return pid;
  }
  return absl::NotFoundError(absl::StrCat("no pid file of ", server_, " in ", dir_));
}

absl::StatusOr<double> SocketRoundTripP50(Transport t, int bytes, int iters,
                                          const std::string& cpus) {
  if (bytes < 1 || iters < 1) return absl::InvalidArgumentError("bytes and iters must be >= 1");
  std::vector<int> cpu_list;
  if (!cpus.empty()) {
    absl::StatusOr<std::vector<int>> l = ParseCpuList(cpus);
    if (!l.ok()) return l.status();
    cpu_list = *l;
  }
  absl::StatusOr<std::pair<int, int>> pair = ConnectedPair(t);
  if (!pair.ok()) return pair.status();
  const int client = pair->first, server = pair->second;
  std::thread echo([server, bytes, &cpu_list] {
    if (!cpu_list.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpu_list) CPU_SET(c, &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    std::vector<char> buf(static_cast<size_t>(bytes));
    while (ReadExactly(server, buf.data(), buf.size()) &&
           WriteExactly(server, buf.data(), buf.size())) {
    }
  });
  std::vector<char> buf(static_cast<size_t>(bytes), 'x');
  std::vector<double> rtts;
  rtts.reserve(static_cast<size_t>(iters));
  bool ok = true;
  for (int i = 0; i < iters + iters / 10 && ok; ++i) {  // the first tenth warms up
    const Clock::time_point t0 = Clock::now();
    ok =
        WriteExactly(client, buf.data(), buf.size()) && ReadExactly(client, buf.data(), buf.size());
    if (i >= iters / 10) rtts.push_back(MicrosBetween(t0, Clock::now()));
  }
  shutdown(client, SHUT_RDWR);
  echo.join();
  close(client);
  close(server);
  if (!ok) return absl::InternalError("the socket round trip failed");
  std::sort(rtts.begin(), rtts.end());
  return Percentile(rtts, 0.5);
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  FILE* f = popen(command.c_str(), "r");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot run: ", command));
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), f) != nullptr) out += buf;
  const int status = pclose(f);
  if (status == -1 || !WIFEXITED(status)) {
    return absl::InternalError(absl::StrCat("'", command, "' did not exit normally"));
  }
  if (WEXITSTATUS(status) == 3) {
    return absl::FailedPreconditionError(absl::StrCat("'", command, "': ", out));
  }
  if (WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("'", command, "' exited with status ", WEXITSTATUS(status), ": ", out));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ScriptedServer>> ScriptedServer::Start(
    const std::string& script, const std::string& server, Transport t, const std::string& cpus,
    const std::vector<std::string>& extra) {
  absl::StatusOr<int> port = FreePort();
  if (!port.ok()) return port.status();
  std::string cmd = cpus.empty() ? "" : absl::StrCat("taskset -c ", Quote(cpus), " ");
  absl::StrAppend(&cmd, "bash ", Quote(script), " start ", server, " ", TransportName(t), " ",
                  *port);
  for (const std::string& e : extra) absl::StrAppend(&cmd, " ", Quote(e));
  absl::StatusOr<std::string> out = RunCommand(cmd);
  if (!out.ok()) return out.status();
  std::unique_ptr<ScriptedServer> s(new ScriptedServer(script, server, *port));
  for (absl::string_view line : absl::StrSplit(*out, '\n')) {
    if (absl::ConsumePrefix(&line, "DIR ")) s->dir_ = std::string(line);
  }
  if (s->dir_.empty()) {
    return absl::InternalError(absl::StrCat("the peers script printed no DIR line: ", *out));
  }
  return s;
}

ScriptedServer::~ScriptedServer() {
  if (dir_.empty()) return;
  absl::StatusOr<std::string> out =
      RunCommand(absl::StrCat("bash ", Quote(script_), " stop ", server_, " ", Quote(dir_)));
  if (!out.ok()) spdlog::warn("stopping {}: {}", server_, out.status().ToString());
}

}  // namespace farm
