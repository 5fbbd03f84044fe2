#include "tools/bench_peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"

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
