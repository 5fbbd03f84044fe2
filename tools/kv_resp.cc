// kv_resp: the key-value store (kv/kv.h) behind the Redis protocol (RESP2), so that redis-cli,
// redis-benchmark and every Redis client library use it unchanged.
//
//   kv_resp --local=3 --port=6379                      start 3 KV nodes and serve them
//   kv_resp --config=cluster.textproto --port=6379     join a running cluster (a `late` node)
//   kv_resp ... --unix_socket=/tmp/kv.sock             also on a Unix socket (redis-cli -s)
//   redis-cli -p 6379 set greeting hello; redis-cli -p 6379 get greeting
//
// The commands are kvsh's (tools/kvsh_lib.h, run by tools/kv_commands.h), checked by the same
// code, so the shell and the gateway accept the same commands with the same meaning: GET, SET
// (alias PUT; NX, XX, GET), DEL, MGET, MSET, MSETNX, INCR, INCRBY, DECR, DECRBY, SETNX, GETSET,
// APPEND, STRLEN, EXISTS, SCAN, KEYS, DBSIZE, INFO, PING, and kvsh's own CAS, STATS and HELP.
// Errors have redis-server 7's words where Redis has the command ("ERR wrong number of arguments
// for 'get' command", "ERR unknown command 'foo', with args beginning with: 'a' "). Besides,
// what clients send on their own: ECHO, SELECT 0 (the one database), QUIT, COMMAND (COUNT, LIST;
// DOCS and INFO answer an empty array, which redis-cli takes as "no hints"), CONFIG GET (save ""
// and appendonly "no", what redis-benchmark asks; other parameters: an empty array, as Redis
// answers an unknown one), CLIENT SETNAME/SETINFO/GETNAME/ID, AUTH (no password is set), and
// HELLO, answered as a RESP2-only server does: HELLO and HELLO 2 reply the server's properties,
// HELLO 3 "-NOPROTO unsupported protocol version", on which clients stay with RESP2.
//
// Requests are read as redis-server reads them (tools/resp.h): multibulk or inline, pipelined:
// every complete request in what one read brought is answered in order and the replies are
// written together. A protocol error (a bulk longer than the store's largest value, more than
// --max_args arguments, a request over 64 MiB in all, a malformed frame) is answered
// "-ERR Protocol error: ..." and closes that connection only.
//
// Threading: ONE thread runs an epoll event loop over the listening sockets, every connection
// and the termination signals, and runs each command to its end before the next. Why not a
// thread per connection: a kv::Client belongs to its Worker's thread (kv/kv.h), and the Workers of
// a node are its messaging lanes, as many as the cluster's --workers (every node must have the
// same), so connections could not each have a Client; sharing a few would need a hand-off queue
// per Worker. A command costs a few microseconds to a few round trips of the fabric, so one
// thread serves many connections (each reply waits for the commands queued before it, as in
// redis-server, whose commands also run on one thread). --max_clients bounds the connections
// ("-ERR max number of clients reached", as Redis); a client that does not read its replies stops
// being read (its replies are not piled up without bound).
//
// Exit status: 0 after SIGTERM or SIGINT (a requested stop); 2 for bad flags, a cluster that
// could not be started or joined, or a port that cannot be listened on; 1 when the gateway's node
// is evicted from the cluster (it stops serving rather than answer errors for ever) or the event
// loop fails.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/runtime_impl.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "platform/logging.h"
#include "spdlog/spdlog.h"
#include "tools/child_process.h"
#include "tools/kv_commands.h"
#include "tools/kv_session.h"
#include "tools/kvsh_lib.h"
#include "tools/resp.h"

ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(int, port, 6379, "TCP port to serve RESP on (0: any free port, printed on READY)");
ABSL_FLAG(std::string, bind, "127.0.0.1", "address to listen on (0.0.0.0: every interface)");
ABSL_FLAG(std::string, unix_socket, "",
          "also serve on this Unix socket (redis-cli -s PATH); a socket left there is replaced");
ABSL_FLAG(int, max_clients, 1024, "most connections at once (more are refused, as Redis does)");
ABSL_FLAG(uint64_t, max_args, 1 << 20,
          "most arguments of one request (more: 'Protocol error: invalid multibulk length')");

namespace farm {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

const kvsh::SessionTool kGatewayTool{"kv_resp", "the gateway"};

// Bytes read from a connection at a time (redis-server reads 16 KiB).
constexpr size_t kReadChunk = 64 << 10;
// Replies waiting to be written to a connection beyond which its requests wait (Server::Answer).
constexpr size_t kMaxPendingOutput = 16 << 20;

std::string Lower(absl::string_view s) { return absl::AsciiStrToLower(s); }

kvsh::Reply WrongArity(absl::string_view name) {
  return kvsh::Reply::Error(
      absl::StrCat("ERR wrong number of arguments for '", Lower(name), "' command"));
}

// redis-server 7's unknown command error: the name as sent, the first arguments quoted.
kvsh::Reply UnknownCommand(const std::vector<std::string>& args) {
  std::string shown;
  for (size_t i = 1; i < args.size() && shown.size() < 128; ++i) {
    absl::StrAppend(&shown, "'", absl::string_view(args[i]).substr(0, 128 - shown.size()), "' ");
  }
  return kvsh::Reply::Error(absl::StrCat("ERR unknown command '",
                                         absl::string_view(args[0]).substr(0, 128),
                                         "', with args beginning with: ", shown));
}

// What a command of the Redis protocol gets: the store's commands through KvCommands, the
// protocol's own (ECHO, SELECT, HELLO, ...) here. Belongs to the event loop's thread.
class FrontDoor {
 public:
  explicit FrontDoor(kvsh::KvCommands& commands) : commands_(commands) {}

  // The reply to `args` (a request's arguments, the name first) of connection `id`. *close is
  // set for QUIT (close once the reply is written).
  kvsh::Reply Answer(const std::vector<std::string>& args, int64_t id, bool* close) {
    const std::string name = Lower(args[0]);
    const size_t n = args.size() - 1;  // arguments after the name
    if (name == "quit" || name == "exit") {
      *close = true;
      return kvsh::Reply::Status("OK");
    }
    if (name == "echo") return n == 1 ? kvsh::Reply::String(args[1]) : WrongArity(name);
    if (name == "select") return n == 1 ? Select(args[1]) : WrongArity(name);
    if (name == "hello") return Hello(args, id);
    if (name == "auth") {
      if (n < 1 || n > 2) return WrongArity(name);
      return kvsh::Reply::Error(
          "ERR AUTH <password> called without any password configured for the default user. "
          "Are you sure your configuration is correct?");
    }
    if (name == "command") return Command(args);
    if (name == "config") return Config(args);
    if (name == "client") return Client(args, id);
    absl::StatusOr<kvsh::Command> c =
        kvsh::ParseCommand(kvsh::WordTokens(args), commands_.limits());
    if (!c.ok()) {
      const absl::string_view why = c.status().message();
      if (absl::StartsWith(why, "unknown command '")) return UnknownCommand(args);
      if (absl::StartsWith(why, "wrong number of arguments for '")) return WrongArity(name);
      return kvsh::Reply::Error(absl::StrCat("ERR ", why));
    }
    return commands_.Execute(*c);
  }

 private:
  static kvsh::Reply Select(const std::string& index) {
    int64_t db = 0;
    if (!absl::SimpleAtoi(index, &db)) {
      return kvsh::Reply::Error("ERR value is not an integer or out of range");
    }
    if (db != 0) return kvsh::Reply::Error("ERR DB index is out of range");
    return kvsh::Reply::Status("OK");
  }

  // HELLO [protover [AUTH user pass] [SETNAME name]]: a RESP2-only server's answer.
  static kvsh::Reply Hello(const std::vector<std::string>& args, int64_t id) {
    using kvsh::Reply;
    if (args.size() > 1) {
      int64_t version = 0;
      if (!absl::SimpleAtoi(args[1], &version)) {
        return Reply::Error("ERR Protocol version is not an integer or out of range");
      }
      if (version != 2) return Reply::Error("NOPROTO unsupported protocol version");
      for (size_t i = 2; i < args.size(); ++i) {
        if (Lower(args[i]) == "auth") {
          return Reply::Error("WRONGPASS invalid username-password pair or user is disabled.");
        }
        if (Lower(args[i]) == "setname" && i + 1 < args.size()) {
          ++i;
        } else {
          return Reply::Error(absl::StrCat("ERR Syntax error in HELLO option '", args[i], "'"));
        }
      }
    }
    std::vector<Reply> props;
    auto add = [&props](const char* key, Reply value) {
      props.push_back(Reply::String(key));
      props.push_back(std::move(value));
    };
    add("server", Reply::String("kv_resp"));
    // The Redis version whose commands' replies the gateway follows (clients look at it).
    add("version", Reply::String("7.0.0"));
    add("proto", Reply::Integer(2));
    add("id", Reply::Integer(id));
    add("mode", Reply::String("standalone"));
    add("role", Reply::String("master"));
    add("modules", Reply::Array({}));
    return Reply::Array(std::move(props));
  }

  static kvsh::Reply Command(const std::vector<std::string>& args) {
    using kvsh::Reply;
    const std::vector<std::string> names = kvsh::CommandNames();
    const std::string sub = args.size() > 1 ? Lower(args[1]) : "";
    if (sub == "count") return Reply::Integer(static_cast<int64_t>(names.size()));
    if (sub == "list") {
      std::vector<Reply> out;
      for (const std::string& n : names) out.push_back(Reply::String(n));
      return Reply::Array(std::move(out));
    }
    // COMMAND, COMMAND DOCS, COMMAND INFO: no descriptions (redis-cli then uses its own hints).
    if (sub.empty() || sub == "docs" || sub == "info") return Reply::Array({});
    return Reply::Error(absl::StrCat("ERR unknown subcommand '", args[1], "'. Try COMMAND HELP."));
  }

  static kvsh::Reply Config(const std::vector<std::string>& args) {
    using kvsh::Reply;
    const std::string sub = args.size() > 1 ? Lower(args[1]) : "";
    if (sub == "get") {
      if (args.size() < 3) return WrongArity("config|get");
      // What redis-benchmark and some clients ask; the store has no snapshots or AOF of its own.
      static const std::map<std::string, std::string> kKnown = {
          {"save", ""}, {"appendonly", "no"}, {"databases", "1"}};
      std::vector<Reply> out;
      for (size_t i = 2; i < args.size(); ++i) {
        auto it = kKnown.find(Lower(args[i]));
        if (it == kKnown.end()) continue;
        out.push_back(Reply::String(it->first));
        out.push_back(Reply::String(it->second));
      }
      return Reply::Array(std::move(out));
    }
    if (args.size() < 2) return WrongArity("config");
    return Reply::Error(absl::StrCat("ERR CONFIG ", absl::AsciiStrToUpper(args[1]),
                                     " is not supported by kv_resp (only CONFIG GET)"));
  }

  static kvsh::Reply Client(const std::vector<std::string>& args, int64_t id) {
    using kvsh::Reply;
    const std::string sub = args.size() > 1 ? Lower(args[1]) : "";
    if (sub == "setname" || sub == "setinfo") return Reply::Status("OK");
    if (sub == "getname") return Reply::Nil();
    if (sub == "id") return Reply::Integer(id);
    if (args.size() < 2) return WrongArity("client");
    return Reply::Error(absl::StrCat("ERR unknown subcommand '", args[1], "'. Try CLIENT HELP."));
  }

  kvsh::KvCommands& commands_;
};

// ---------------------------------------------------------------------------------------------
// The sockets.

absl::Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return absl::InternalError(absl::StrCat("fcntl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// A listening TCP socket on bind:port; the port it got (port 0: any free one) in *bound.
absl::StatusOr<int> ListenTcp(const std::string& address, int port, int* bound) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--bind=", address, " is not an IPv4 address (e.g. 127.0.0.1 or 0.0.0.0)"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 511) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ":", port, ": ",
                                               std::strerror(e),
                                               e == EADDRINUSE ? " (another server has it; "
                                                                 "pick another --port)"
                                                               : ""));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = ntohs(addr.sin_port);
  return fd;
}

absl::StatusOr<int> ListenUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("--unix_socket: the path is longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--unix_socket: ", path, " exists and is not a socket"));
    }
    unlink(path.c_str());  // left by a server that stopped, as redis-server replaces it
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 511) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on the Unix socket ", path, ": ", std::strerror(e)));
  }
  return fd;
}

// ---------------------------------------------------------------------------------------------
// The event loop.

class Server {
 public:
  Server(FrontDoor& door, const resp::Limits& limits, Runtime& runtime, kvsh::LocalCluster* local)
      : door_(door), limits_(limits), runtime_(runtime), local_(local) {}
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  ~Server() {
    for (auto& [fd, conn] : conns_) close(fd);
    for (int fd : listeners_) close(fd);
    if (epoll_ >= 0) close(epoll_);
  }

  absl::Status Init(int signal_fd) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_ < 0) return absl::InternalError(absl::StrCat("epoll: ", std::strerror(errno)));
    signal_fd_ = signal_fd;
    return Watch(signal_fd, EPOLLIN);
  }

  absl::Status AddListener(int fd) {
    listeners_.push_back(fd);
    return Watch(fd, EPOLLIN);
  }

  // Serves until a termination signal (returned) or a failure of the loop itself.
  absl::StatusOr<int> Run() {
    absl::Time last_check = absl::Now();
    std::vector<epoll_event> events(64);
    for (;;) {
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 500);
      if (n < 0 && errno != EINTR) {
        return absl::InternalError(absl::StrCat("epoll_wait: ", std::strerror(errno)));
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == signal_fd_) {
          signalfd_siginfo info{};
          if (read(signal_fd_, &info, sizeof(info)) > 0) return static_cast<int>(info.ssi_signo);
        } else if (std::find(listeners_.begin(), listeners_.end(), fd) != listeners_.end()) {
          Accept(fd);
        } else {
          auto it = conns_.find(fd);
          if (it != conns_.end()) Serve(it->second, events[i].events);
        }
      }
      if (absl::Now() - last_check > absl::Milliseconds(500)) {
        last_check = absl::Now();
        if (absl::Status s = CheckCluster(); !s.ok()) return s;
      }
    }
  }

 private:
  struct Conn {
    int fd = -1;
    int64_t id = 0;
    std::string in;
    std::string out;
    bool closing = false;  // close once `out` is written (QUIT, a protocol error)
    bool writing = false;  // waiting for EPOLLOUT (not reading meanwhile)
  };

  absl::Status Watch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  void Accept(int listener) {
    for (;;) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          spdlog::warn("accept: {}", std::strerror(errno));
        }
        return;
      }
      if (static_cast<int>(conns_.size()) >= absl::GetFlag(FLAGS_max_clients)) {
        const std::string refusal = resp::ErrorLine("ERR max number of clients reached");
        (void)!send(fd, refusal.data(), refusal.size(), MSG_NOSIGNAL);
        close(fd);
        continue;
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails on a Unix socket
      if (!Watch(fd, EPOLLIN).ok()) {
        close(fd);
        continue;
      }
      Conn& c = conns_[fd];
      c.fd = fd;
      c.id = ++last_id_;
    }
  }

  void Serve(Conn& c, uint32_t events) {
    if (events & EPOLLIN) {
      char buf[kReadChunk];
      const ssize_t got = read(c.fd, buf, sizeof(buf));
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        Drop(c);  // the client went away (its unanswered requests die with it)
        return;
      }
      if (got > 0) c.in.append(buf, static_cast<size_t>(got));
    } else if (!(events & EPOLLOUT)) {
      Drop(c);  // EPOLLERR or EPOLLHUP
      return;
    }
    for (;;) {
      const bool more = Answer(c);
      if (!Flush(c)) return;
      // Requests left for lack of room for their replies: on once the replies are written.
      if (!more || !c.out.empty()) return;
    }
  }

  // Answers the complete requests of c.in, in order (pipelining), into c.out, until c.out holds
  // kMaxPendingOutput bytes (a client that pipelines many large GETs is answered as it reads,
  // not all at once into memory). True when complete requests are left for that reason.
  bool Answer(Conn& c) {
    size_t used = 0;
    bool more = false;
    while (!c.closing) {
      resp::Request r = resp::ParseRequest(absl::string_view(c.in).substr(used), limits_);
      if (r.kind == resp::Request::kIncomplete) break;
      if (r.kind == resp::Request::kError) {
        spdlog::info("connection {}: {}; closing it", c.id, r.error);
        c.out += resp::ErrorLine(absl::StrCat("ERR ", r.error));
        c.closing = true;
        break;
      }
      if (c.out.size() >= kMaxPendingOutput) {
        more = true;
        break;
      }
      used += r.consumed;
      if (r.kind == resp::Request::kEmpty) continue;
      bool close = false;
      resp::AppendReply(door_.Answer(r.args, c.id, &close), &c.out);
      c.closing = close;
    }
    c.in.erase(0, used);
    return more;
  }

  // Writes what it can of c.out; waits for EPOLLOUT (not reading) while some is left. False when
  // the connection was dropped (a write failed, or it was closing and all is written).
  bool Flush(Conn& c) {
    size_t done = 0;
    while (done < c.out.size()) {
      const ssize_t n = send(c.fd, c.out.data() + done, c.out.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        Drop(c);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    c.out.erase(0, done);
    if (c.out.empty() && c.closing) {
      Drop(c);
      return false;
    }
    const bool writing = !c.out.empty();
    if (writing != c.writing) {
      c.writing = writing;
      epoll_event ev{};
      ev.events = writing ? EPOLLOUT : EPOLLIN;
      ev.data.fd = c.fd;
      epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd, &ev);
    }
    return true;
  }

  void Drop(Conn& c) {
    const int fd = c.fd;
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns_.erase(fd);
  }

  // Says which nodes of --local died (their shards' keys answer errors from now on); Unavailable
  // once the gateway's own node is no longer a member of the cluster (evicted), when no command
  // can succeed any more: better to stop, so that whatever runs the gateway sees it and starts
  // another, than to answer every command with an error.
  absl::Status CheckCluster() {
    if (local_ != nullptr) {
      std::string logs;
      if (std::optional<std::string> dead = local_->CheckChildren(&logs); dead.has_value()) {
        spdlog::warn("{}: the keys of its shard cannot be reached now\n{}", *dead, logs);
      }
    }
    const absl::Status evicted = RuntimeAccess::Of(runtime_).node->evicted();
    if (!evicted.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the gateway is no longer a member of the cluster (", evicted.message(),
                       "); start it again to rejoin"));
    }
    return absl::OkStatus();
  }

  FrontDoor& door_;
  const resp::Limits limits_;
  Runtime& runtime_;
  kvsh::LocalCluster* const local_;
  int epoll_ = -1;
  int signal_fd_ = -1;
  std::vector<int> listeners_;
  std::map<int, Conn> conns_;
  int64_t last_id_ = 0;
};

absl::Status CheckGatewayFlags() {
  const int port = absl::GetFlag(FLAGS_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port must be 0 to 65535, not ", port));
  }
  if (absl::GetFlag(FLAGS_max_clients) < 1) {
    return absl::InvalidArgumentError("--max_clients must be at least 1");
  }
  if (absl::GetFlag(FLAGS_max_args) < 1) {
    return absl::InvalidArgumentError("--max_args must be at least 1");
  }
  return kvsh::CheckClusterFlags(kGatewayTool);
}

int Main(const std::vector<std::string>& node_args) {
  if (absl::Status s = InitLogging(absl::GetFlag(FLAGS_log_level), "kv_resp"); !s.ok()) {
    spdlog::error("--log_level: {}", std::string(s.message()));
    return kExitUsage;
  }
  spdlog::default_logger()->set_pattern("kv_resp %l: %v");
  if (absl::Status s = CheckGatewayFlags(); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return kExitUsage;
  }
  if (!node_args.empty() && absl::GetFlag(FLAGS_local) == 0) {
    spdlog::error("arguments after -- go to the nodes of --local; there are none to give them");
    return kExitUsage;
  }
  // The sockets first: a port in use is said before a cluster is started for nothing.
  int port = 0;
  absl::StatusOr<int> tcp = ListenTcp(absl::GetFlag(FLAGS_bind), absl::GetFlag(FLAGS_port), &port);
  if (!tcp.ok()) {
    spdlog::error("{}", std::string(tcp.status().message()));
    return kExitUsage;
  }
  const std::string unix_path = kvsh::UserPath(absl::GetFlag(FLAGS_unix_socket));
  std::optional<int> unix_fd;
  if (!unix_path.empty()) {
    absl::StatusOr<int> u = ListenUnix(unix_path);
    if (!u.ok()) {
      close(*tcp);
      spdlog::error("{}", std::string(u.status().message()));
      return kExitUsage;
    }
    unix_fd = *u;
  }

  // Signals are taken through a signalfd; block them before any thread starts.
  const int signal_fd = BlockTerminationSignals();
  kvsh::KvSession session = kvsh::OpenKvSession(kGatewayTool, signal_fd, node_args);
  if (session.exit_code != 0) {
    if (!unix_path.empty()) unlink(unix_path.c_str());
    return session.exit_code;
  }
  int code = kExitOk;
  {
    kv::Client client(*session.store, *session.worker);
    kvsh::KvCommands commands(client, *session.worker, kvsh::StoreLimits(*session.store));
    FrontDoor door(commands);
    resp::Limits limits;
    // A bulk is an argument: at most a value (keys are smaller), plus nothing.
    limits.max_bulk = commands.limits().max_value_size;
    limits.max_args = absl::GetFlag(FLAGS_max_args);
    Server server(door, limits, *session.runtime, session.local.get());
    absl::Status s = server.Init(signal_fd);
    if (s.ok()) s = server.AddListener(*tcp);
    if (s.ok() && unix_fd.has_value()) s = server.AddListener(*unix_fd);
    if (s.ok()) {
      // Connections made from now on are served (the kernel queued those made earlier).
      std::printf("READY port=%d%s\n", port,
                  unix_path.empty() ? "" : absl::StrCat(" unix=", unix_path).c_str());
      std::fflush(stdout);
      spdlog::info("serving RESP on {}:{}{} for a cluster with shards on node(s) {}",
                   absl::GetFlag(FLAGS_bind), port, unix_path.empty() ? "" : " and " + unix_path,
                   absl::StrJoin(session.shard_nodes, ", "));
    }
    absl::StatusOr<int> signal = s.ok() ? server.Run() : absl::StatusOr<int>(s);
    if (!signal.ok()) {
      spdlog::error("{}", std::string(signal.status().message()));
      code = kExitFailed;
    } else {
      spdlog::info("stopping on signal {}", *signal);
    }
  }
  if (!unix_path.empty()) unlink(unix_path.c_str());
  return code;
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "the key-value store behind the Redis protocol (RESP2), for redis-cli, redis-benchmark\n"
      "and Redis client libraries.\n"
      "\n"
      "  kv_resp --local=3 [--port=6379]           start 3 KV nodes on this host and serve them\n"
      "  kv_resp --config=FILE [--node_id=N]       join a running cluster (as a `late` node)\n"
      "  kv_resp ... --unix_socket=PATH            also on a Unix socket (redis-cli -s PATH)\n"
      "\n"
      "Prints 'READY port=P' on standard output once it serves (P: the port, useful with\n"
      "--port=0). Commands: kvsh's (get, set/put [NX|XX] [GET], del, mget, mset, msetnx, incr,\n"
      "incrby, decr, decrby, setnx, getset, append, strlen, exists, scan, keys, dbsize, info,\n"
      "ping, cas, stats, help) and echo, select 0, quit, hello [2], command, config get, client\n"
      "setname/setinfo/getname/id, auth. One thread serves every connection (see\n"
      "tools/kv_resp.cc). Exit status: 0 stopped by SIGTERM or SIGINT; 2 bad flags, a cluster\n"
      "that could not be started or joined, or a port in use; 1 the gateway lost the cluster\n"
      "(evicted) or failed.\n"
      "\n"
      "The gateway is a node of the cluster: --provider, --endpoint, --poll, --ring_size,\n"
      "--workers and --log_level are the node flags (--ring_size and --workers must be the\n"
      "cluster's). With --local, arguments after -- go to every node process.");
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "kv_resp.cc") || absl::StrContains(file, "kv_session.cc") ||
           absl::StrContains(file, "node_main.cc");
  };
  absl::SetFlagsUsageConfig(usage);
  // A server keeps quiet about its node's routine work unless asked (--log_level).
  absl::SetFlag(&FLAGS_log_level, "warn");
  std::vector<std::string> node_args;
  int flag_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) {
      node_args.assign(argv + i + 1, argv + argc);
      flag_argc = i;
      break;
    }
  }
  const std::vector<char*> positional = absl::ParseCommandLine(flag_argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "kv_resp: unexpected argument '%s' (kv_resp takes flags only; arguments for "
                 "the nodes of --local go after --)\n",
                 positional[1]);
    return 2;
  }
  return farm::Main(node_args);
}
