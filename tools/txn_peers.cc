#include "tools/txn_peers.h"

#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "hiredis/hiredis.h"
#include "postgresql/libpq-fe.h"
#include "tools/bench_util.h"

namespace farm {
namespace txnbench {
namespace {

double MicrosSince(Clock::time_point t0) { return MicrosBetween(t0, Clock::now()); }

// ---------------------------------------------------------------------------------------------
// Redis

std::string RedisKey(uint64_t i) { return absl::StrCat("acct:", i); }

class RedisConnection : public BankConnection {
 public:
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(const ScriptedServer& server,
                                                               Transport t) {
    absl::StatusOr<std::unique_ptr<RedisLink>> link = RedisLink::Open(server, t);
    if (!link.ok()) return link.status();
    return std::unique_ptr<RedisConnection>(new RedisConnection(std::move(*link)));
  }

  absl::StatusOr<std::vector<RedisReply>> Replies(int n) { return link_->Replies(n); }
  redisContext* context() { return link_->context(); }

  absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) override {
    redisContext* c = context();
    const std::string a = RedisKey(from), b = RedisKey(to);
    redisAppendCommand(c, "WATCH %s %s", a.c_str(), b.c_str());
    redisAppendCommand(c, "MGET %s %s", a.c_str(), b.c_str());
    absl::StatusOr<std::vector<RedisReply>> got = Replies(2);
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
    redisAppendCommand(c, "MULTI");
    redisAppendCommand(c, "SET %s %lld", a.c_str(), static_cast<long long>(va - 1));
    redisAppendCommand(c, "SET %s %lld", b.c_str(), static_cast<long long>(vb + 1));
    redisAppendCommand(c, "EXEC");
    got = Replies(4);
    if (!got.ok()) return got.status();
    *commit_us = MicrosSince(t0);
    if ((*got)[3]->type == REDIS_REPLY_NIL)
      return absl::AbortedError("EXEC: a watched key changed");
    if ((*got)[3]->type != REDIS_REPLY_ARRAY) return absl::InternalError("redis: EXEC failed");
    return absl::OkStatus();
  }

 private:
  explicit RedisConnection(std::unique_ptr<RedisLink> link) : link_(std::move(link)) {}
  std::unique_ptr<RedisLink> link_;
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
    return RedisConnection::Open(*server_, transport_);
  }
  // Pipelines one command per account, 1000 at a time; `check` (if any) judges each reply.
  template <typename Append, typename Check>
  absl::Status ForEachChunk(Append append, Check check) {
    absl::StatusOr<std::unique_ptr<RedisConnection>> c = Open();
    if (!c.ok()) return c.status();
    for (uint64_t begin = 0; begin < accounts_; begin += 1000) {
      const uint64_t end = std::min<uint64_t>(accounts_, begin + 1000);
      for (uint64_t i = begin; i < end; ++i) append((*c)->context(), i);
      absl::StatusOr<std::vector<RedisReply>> got = (*c)->Replies(static_cast<int>(end - begin));
      if (!got.ok()) return got.status();
      if constexpr (!std::is_same<Check, std::nullptr_t>::value) {
        for (const RedisReply& r : *got) {
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

absl::StatusOr<std::unique_ptr<PeerStore>> PeerStore::Start(Peer peer, Transport transport,
                                                            const std::string& script,
                                                            uint64_t accounts, int64_t balance) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(script, PeerName(peer), transport);
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
