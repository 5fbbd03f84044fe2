#include "tools/txn_peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "hiredis/hiredis.h"
#include "postgresql/libpq-fe.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace txnbench {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

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

// Runs `command` through the shell; its standard output, or an error with the exit status.
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

std::string Quote(const std::string& s) { return absl::StrCat("'", s, "'"); }

// A server started by the peers script; stopped (and its directory removed) on destruction.
class ScriptedServer {
 public:
  static absl::StatusOr<std::unique_ptr<ScriptedServer>> Start(const std::string& script, Peer peer,
                                                               Transport t) {
    absl::StatusOr<int> port = FreePort();
    if (!port.ok()) return port.status();
    absl::StatusOr<std::string> out = RunCommand(absl::StrCat(
        "bash ", Quote(script), " start ", PeerName(peer), " ", TransportName(t), " ", *port));
    if (!out.ok()) return out.status();
    std::unique_ptr<ScriptedServer> s(new ScriptedServer(script, peer, *port));
    for (absl::string_view line : absl::StrSplit(*out, '\n')) {
      if (absl::ConsumePrefix(&line, "DIR ")) s->dir_ = std::string(line);
    }
    if (s->dir_.empty()) {
      return absl::InternalError(absl::StrCat("the peers script printed no DIR line: ", *out));
    }
    return s;
  }
  ~ScriptedServer() {
    absl::StatusOr<std::string> out = RunCommand(
        absl::StrCat("bash ", Quote(script_), " stop ", PeerName(peer_), " ", Quote(dir_)));
    if (!out.ok()) spdlog::warn("stopping {}: {}", PeerName(peer_), out.status().ToString());
  }
  const std::string& dir() const { return dir_; }
  int port() const { return port_; }

 private:
  ScriptedServer(std::string script, Peer peer, int port)
      : script_(std::move(script)), peer_(peer), port_(port) {}
  std::string script_;
  Peer peer_;
  int port_;
  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Redis

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string RedisKey(uint64_t i) { return absl::StrCat("acct:", i); }

class RedisConnection : public BankConnection {
 public:
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(Transport t, const std::string& dir,
                                                               int port) {
    redisContext* c = t == Transport::kUnix
                          ? redisConnectUnix(absl::StrCat(dir, "/redis.sock").c_str())
                          : redisConnect("127.0.0.1", port);
    if (c == nullptr || c->err) {
      std::string why = c == nullptr ? "out of memory" : c->errstr;
      if (c != nullptr) redisFree(c);
      return absl::UnavailableError(absl::StrCat("cannot connect to redis: ", why));
    }
    return std::unique_ptr<RedisConnection>(new RedisConnection(c));
  }
  ~RedisConnection() override { redisFree(c_); }

  // Sends the commands queued with redisAppendCommand and reads `n` replies.
  absl::StatusOr<std::vector<Reply>> Replies(int n) {
    std::vector<Reply> out;
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
  redisContext* context() { return c_; }

  absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) override {
    const std::string a = RedisKey(from), b = RedisKey(to);
    redisAppendCommand(c_, "WATCH %s %s", a.c_str(), b.c_str());
    redisAppendCommand(c_, "MGET %s %s", a.c_str(), b.c_str());
    absl::StatusOr<std::vector<Reply>> got = Replies(2);
    if (!got.ok()) return got.status();
    const redisReply* values = (*got)[1].get();
    int64_t va = 0, vb = 0;
    if (values->type != REDIS_REPLY_ARRAY || values->elements != 2 ||
        values->element[0]->type != REDIS_REPLY_STRING ||
        values->element[1]->type != REDIS_REPLY_STRING ||
        !absl::SimpleAtoi(values->element[0]->str, &va) ||
        !absl::SimpleAtoi(values->element[1]->str, &vb)) {
      return absl::DataLossError(absl::StrCat("redis: accounts ", a, " and ", b, " are not set"));
    }
    const Clock::time_point t0 = Clock::now();
    redisAppendCommand(c_, "MULTI");
    redisAppendCommand(c_, "SET %s %lld", a.c_str(), static_cast<long long>(va - 1));
    redisAppendCommand(c_, "SET %s %lld", b.c_str(), static_cast<long long>(vb + 1));
    redisAppendCommand(c_, "EXEC");
    got = Replies(4);
    if (!got.ok()) return got.status();
    *commit_us = MicrosSince(t0);
    if ((*got)[3]->type == REDIS_REPLY_NIL)
      return absl::AbortedError("EXEC: a watched key changed");
    if ((*got)[3]->type != REDIS_REPLY_ARRAY) return absl::InternalError("redis: EXEC failed");
    return absl::OkStatus();
  }

 private:
  explicit RedisConnection(redisContext* c) : c_(c) {}
  redisContext* c_;
};

class RedisStore : public PeerStore {
 public:
  RedisStore(std::unique_ptr<ScriptedServer> server, Transport t, uint64_t accounts)
      : server_(std::move(server)), transport_(t), accounts_(accounts) {}

  absl::StatusOr<std::unique_ptr<BankConnection>> Connect() override { return Open(); }
  int msg_rounds() const override { return 2; }

  absl::Status Load(int64_t balance) {
    return ForEachChunk(
        [balance](redisContext* c, uint64_t i) {
          redisAppendCommand(c, "SET %s %lld", RedisKey(i).c_str(),
                             static_cast<long long>(balance));
        },
        nullptr);
  }

  absl::StatusOr<int64_t> Sum() override {
    int64_t sum = 0;
    absl::Status s = ForEachChunk(
        [](redisContext* c, uint64_t i) { redisAppendCommand(c, "GET %s", RedisKey(i).c_str()); },
        [&sum](const redisReply& r) {
          int64_t v = 0;
          if (r.type != REDIS_REPLY_STRING || !absl::SimpleAtoi(r.str, &v)) return false;
          sum += v;
          return true;
        });
    if (!s.ok()) return s;
    return sum;
  }

 private:
  absl::StatusOr<std::unique_ptr<RedisConnection>> Open() {
    return RedisConnection::Open(transport_, server_->dir(), server_->port());
  }
  // Pipelines one command per account, 1000 at a time; `check` (if any) judges each reply.
  template <typename Append, typename Check>
  absl::Status ForEachChunk(Append append, Check check) {
    absl::StatusOr<std::unique_ptr<RedisConnection>> c = Open();
    if (!c.ok()) return c.status();
    for (uint64_t begin = 0; begin < accounts_; begin += 1000) {
      const uint64_t end = std::min<uint64_t>(accounts_, begin + 1000);
      for (uint64_t i = begin; i < end; ++i) append((*c)->context(), i);
      absl::StatusOr<std::vector<Reply>> got = (*c)->Replies(static_cast<int>(end - begin));
      if (!got.ok()) return got.status();
      if constexpr (!std::is_same<Check, std::nullptr_t>::value) {
        for (const Reply& r : *got) {
          if (!check(*r)) return absl::DataLossError("redis: an account is missing");
        }
      }
    }
    return absl::OkStatus();
  }

  std::unique_ptr<ScriptedServer> server_;
  Transport transport_;
  uint64_t accounts_;
};

// ---------------------------------------------------------------------------------------------
// PostgreSQL

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

void IgnoreNotice(void*, const char*) {}

class PostgresConnection : public BankConnection {
 public:
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Open(Transport t,
                                                                  const std::string& dir,
                                                                  int port) {
    const std::string info =
        absl::StrCat("host=", t == Transport::kUnix ? dir : "127.0.0.1", " port=", port,
                     " user=bench dbname=postgres connect_timeout=10");
    PGconn* c = PQconnectdb(info.c_str());
    if (PQstatus(c) != CONNECTION_OK) {
      std::string why = PQerrorMessage(c);
      PQfinish(c);
      return absl::UnavailableError(absl::StrCat("cannot connect to postgres: ", why));
    }
    PQsetNoticeProcessor(c, IgnoreNotice, nullptr);
    return std::unique_ptr<PostgresConnection>(new PostgresConnection(c));
  }
  ~PostgresConnection() override { PQfinish(c_); }

  // Runs `sql` (one or more statements); Aborted for a serialization failure or deadlock.
  absl::StatusOr<Result> Exec(const std::string& sql) {
    Result r(PQexec(c_, sql.c_str()));
    const ExecStatusType st = PQresultStatus(r.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    const std::string code = state == nullptr ? "" : state;
    const std::string why = absl::StrCat("postgres: ", PQresultErrorMessage(r.get()));
    if (code == "40001" || code == "40P01") return absl::AbortedError(why);
    return absl::InternalError(why);
  }

  absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) override {
    absl::StatusOr<Result> read = Exec(absl::StrCat(
        "BEGIN ISOLATION LEVEL SERIALIZABLE; SELECT id, balance FROM acct WHERE id IN (", from,
        ", ", to, ")"));
    if (!read.ok()) return Rollback(read.status());
    int64_t va = 0, vb = 0;
    bool have_a = false, have_b = false;
    for (int i = 0; i < PQntuples(read->get()); ++i) {
      uint64_t id = 0;
      int64_t v = 0;
      if (!absl::SimpleAtoi(PQgetvalue(read->get(), i, 0), &id) ||
          !absl::SimpleAtoi(PQgetvalue(read->get(), i, 1), &v)) {
        continue;
      }
      if (id == from) va = v, have_a = true;
      if (id == to) vb = v, have_b = true;
    }
    if (!have_a || !have_b) {
      return Rollback(absl::DataLossError(
          absl::StrCat("postgres: accounts ", from, " and ", to, " are not both there")));
    }
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<Result> write =
        Exec(absl::StrCat("UPDATE acct SET balance = ", va - 1, " WHERE id = ", from,
                          "; UPDATE acct SET balance = ", vb + 1, " WHERE id = ", to, "; COMMIT"));
    *commit_us = MicrosSince(t0);
    if (!write.ok()) return Rollback(write.status());
    if (std::string(PQcmdStatus(write->get())) != "COMMIT") {
      return absl::InternalError(
          absl::StrCat("postgres: COMMIT answered ", PQcmdStatus(write->get())));
    }
    return absl::OkStatus();
  }

 private:
  explicit PostgresConnection(PGconn* c) : c_(c) {}
  // Ends the failed transaction (if it is still open) and returns `why`.
  absl::Status Rollback(absl::Status why) {
    Exec("ROLLBACK").IgnoreError();
    return why;
  }
  PGconn* c_;
};

class PostgresStore : public PeerStore {
 public:
  PostgresStore(std::unique_ptr<ScriptedServer> server, Transport t, uint64_t accounts)
      : server_(std::move(server)), transport_(t), accounts_(accounts) {}

  absl::StatusOr<std::unique_ptr<BankConnection>> Connect() override { return Open(); }
  int msg_rounds() const override { return 2; }

  absl::Status Load(int64_t balance) {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c = Open();
    if (!c.ok()) return c.status();
    for (const std::string& sql :
         {std::string("DROP TABLE IF EXISTS acct"),
          std::string("CREATE TABLE acct (id bigint PRIMARY KEY, balance bigint NOT NULL)"),
          absl::StrCat("INSERT INTO acct SELECT g, ", balance, " FROM generate_series(0, ",
                       accounts_ - 1, ") g"),
          std::string("VACUUM ANALYZE acct")}) {
      if (absl::StatusOr<Result> r = (*c)->Exec(sql); !r.ok()) return r.status();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Sum() override {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c = Open();
    if (!c.ok()) return c.status();
    absl::StatusOr<Result> r = (*c)->Exec("SELECT sum(balance)::bigint FROM acct");
    if (!r.ok()) return r.status();
    int64_t sum = 0;
    if (PQntuples(r->get()) != 1 || !absl::SimpleAtoi(PQgetvalue(r->get(), 0, 0), &sum)) {
      return absl::DataLossError("postgres: no sum");
    }
    return sum;
  }

 private:
  absl::StatusOr<std::unique_ptr<PostgresConnection>> Open() {
    return PostgresConnection::Open(transport_, server_->dir(), server_->port());
  }
  std::unique_ptr<ScriptedServer> server_;
  Transport transport_;
  uint64_t accounts_;
};

}  // namespace

std::string PeerName(Peer p) { return p == Peer::kRedis ? "redis" : "postgres"; }
std::string TransportName(Transport t) { return t == Transport::kUnix ? "unix" : "tcp"; }

absl::StatusOr<std::unique_ptr<PeerStore>> PeerStore::Start(Peer peer, Transport transport,
                                                            const std::string& script,
                                                            uint64_t accounts, int64_t balance) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(script, peer, transport);
  if (!server.ok()) return server.status();
  if (peer == Peer::kRedis) {
    auto store = std::make_unique<RedisStore>(std::move(*server), transport, accounts);
    if (absl::Status s = store->Load(balance); !s.ok()) return s;
    return std::unique_ptr<PeerStore>(std::move(store));
  }
  auto store = std::make_unique<PostgresStore>(std::move(*server), transport, accounts);
  if (absl::Status s = store->Load(balance); !s.ok()) return s;
  return std::unique_ptr<PeerStore>(std::move(store));
}

}  // namespace txnbench
}  // namespace farm
