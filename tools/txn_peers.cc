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

// The transfer as one script: both accounts read and written atomically.
constexpr char kTransferScript[] =
    "local a = tonumber(redis.call('GET', KEYS[1])) "
    "local b = tonumber(redis.call('GET', KEYS[2])) "
    "if a == nil or b == nil then return redis.error_reply('accounts missing') end "
    "redis.call('SET', KEYS[1], a - 1) "
    "redis.call('SET', KEYS[2], b + 1) "
    "return 1";

class RedisConnection : public BankConnection {
 public:
  // `lua`: transfers by the script (loaded now), else by WATCH/MULTI/EXEC.
  static absl::StatusOr<std::unique_ptr<RedisConnection>> Open(const ScriptedServer& server,
                                                               Transport t, bool lua) {
    absl::StatusOr<std::unique_ptr<RedisLink>> link = RedisLink::Open(server, t);
    if (!link.ok()) return link.status();
    std::unique_ptr<RedisConnection> c(new RedisConnection(std::move(*link)));
    if (lua) {
      redisAppendCommand(c->context(), "SCRIPT LOAD %s", kTransferScript);
      absl::StatusOr<std::vector<RedisReply>> got = c->Replies(1);
      if (!got.ok()) return got.status();
      if ((*got)[0]->type != REDIS_REPLY_STRING)
        return absl::InternalError("redis: SCRIPT LOAD answered no digest");
      c->script_sha_ = (*got)[0]->str;
    }
    return c;
  }

  absl::StatusOr<std::vector<RedisReply>> Replies(int n) { return link_->Replies(n); }
  redisContext* context() { return link_->context(); }

  absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) override {
    return script_sha_.empty() ? TransferWatched(from, to, commit_us)
                               : TransferByScript(from, to, commit_us);
  }

 private:
  explicit RedisConnection(std::unique_ptr<RedisLink> link) : link_(std::move(link)) {}

  absl::Status TransferByScript(uint64_t from, uint64_t to, double* commit_us) {
    const std::string a = RedisKey(from), b = RedisKey(to);
    const Clock::time_point t0 = Clock::now();
    redisAppendCommand(context(), "EVALSHA %s 2 %s %s", script_sha_.c_str(), a.c_str(), b.c_str());
    absl::StatusOr<std::vector<RedisReply>> got = Replies(1);
    *commit_us = MicrosSince(t0);
    if (!got.ok()) return got.status();
    if ((*got)[0]->type != REDIS_REPLY_INTEGER || (*got)[0]->integer != 1)
      return absl::InternalError("redis: the transfer script did not answer 1");
    return absl::OkStatus();
  }

  absl::Status TransferWatched(uint64_t from, uint64_t to, double* commit_us) {
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

  std::unique_ptr<RedisLink> link_;
  std::string script_sha_;  // the transfer script's, when transfers use it
};

class RedisStore : public PeerStore {
 public:
  RedisStore(std::unique_ptr<ScriptedServer> server, Transport t, uint64_t accounts, bool lua)
      : server_(std::move(server)), transport_(t), accounts_(accounts), lua_(lua) {}

  absl::StatusOr<std::unique_ptr<BankConnection>> Connect() override {
    return RedisConnection::Open(*server_, transport_, lua_);
  }
  int msg_rounds() const override { return lua_ ? 1 : 2; }

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
    return RedisConnection::Open(*server_, transport_, false);
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
  bool lua_;
};

// ---------------------------------------------------------------------------------------------
// PostgreSQL

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultDeleter>;

void IgnoreNotice(void*, const char*) {}

// A statement of a pipeline: a prepared one (by name) or a text one, with its parameters.
struct Statement {
  const char* prepared = nullptr;
  std::string sql;
  std::vector<std::string> params;
};

// The function behind postgres-fn: locks both rows in id order (so two transfers never wait on
// each other in a cycle), reads them, and moves 1.
constexpr char kTransferFunction[] = R"sql(
CREATE OR REPLACE FUNCTION transfer(a bigint, b bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  va bigint;
  vb bigint;
BEGIN
  PERFORM 1 FROM acct WHERE id IN (a, b) ORDER BY id FOR UPDATE;
  SELECT balance INTO va FROM acct WHERE id = a;
  SELECT balance INTO vb FROM acct WHERE id = b;
  IF va IS NULL OR vb IS NULL THEN
    RAISE EXCEPTION 'accounts % and % are not both there', a, b;
  END IF;
  UPDATE acct SET balance = va - 1 WHERE id = a;
  UPDATE acct SET balance = vb + 1 WHERE id = b;
END $$)sql";

class PostgresConnection : public BankConnection {
 public:
  // `function`: transfers by one call of transfer() (postgres-fn), else interactively.
  static absl::StatusOr<std::unique_ptr<PostgresConnection>> Open(Transport t,
                                                                  const std::string& dir, int port,
                                                                  bool function) {
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
    return std::unique_ptr<PostgresConnection>(new PostgresConnection(c, function));
  }
  ~PostgresConnection() override { PQfinish(c_); }

  // Runs `sql` (one or more statements, simple-query protocol; outside the pipeline mode only).
  absl::StatusOr<Result> Exec(const std::string& sql) {
    Result r(PQexec(c_, sql.c_str()));
    const ExecStatusType st = PQresultStatus(r.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    return Failure(r.get());
  }

  // Prepares the transfer's statements and enters the pipeline mode: every later call is a
  // pipeline of prepared statements.
  absl::Status Prepare() {
    const std::vector<std::pair<const char*, const char*>> statements =
        function_
            ? std::vector<std::pair<const char*, const char*>>{{"xfer", "SELECT transfer($1, $2)"}}
            : std::vector<std::pair<const char*, const char*>>{
                  {"read", "SELECT id, balance FROM acct WHERE id IN ($1, $2)"},
                  {"write", "UPDATE acct SET balance = $2 WHERE id = $1"}};
    for (const auto& [name, sql] : statements) {
      Result r(PQprepare(c_, name, sql, 0, nullptr));
      if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return Failure(r.get());
    }
    if (PQenterPipelineMode(c_) != 1) {
      return absl::InternalError(
          absl::StrCat("postgres: cannot enter the pipeline mode: ", PQerrorMessage(c_)));
    }
    return absl::OkStatus();
  }

  absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) override {
    if (function_) {
      const Clock::time_point t0 = Clock::now();
      absl::StatusOr<std::vector<Result>> call =
          Pipeline({Statement{"xfer", "", {absl::StrCat(from), absl::StrCat(to)}}});
      *commit_us = MicrosSince(t0);
      return EndIfOpen(call.status());
    }
    absl::StatusOr<std::vector<Result>> read =
        Pipeline({Statement{nullptr, "BEGIN ISOLATION LEVEL SERIALIZABLE", {}},
                  Statement{"read", "", {absl::StrCat(from), absl::StrCat(to)}}});
    if (!read.ok()) return EndIfOpen(read.status());
    const PGresult* rows = (*read)[1].get();
    int64_t va = 0, vb = 0;
    bool have_a = false, have_b = false;
    for (int i = 0; i < PQntuples(rows); ++i) {
      uint64_t id = 0;
      int64_t v = 0;
      if (!absl::SimpleAtoi(PQgetvalue(rows, i, 0), &id) ||
          !absl::SimpleAtoi(PQgetvalue(rows, i, 1), &v)) {
        continue;
      }
      if (id == from) va = v, have_a = true;
      if (id == to) vb = v, have_b = true;
    }
    if (!have_a || !have_b) {
      return EndIfOpen(absl::DataLossError(
          absl::StrCat("postgres: accounts ", from, " and ", to, " are not both there")));
    }
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::vector<Result>> write =
        Pipeline({Statement{"write", "", {absl::StrCat(from), absl::StrCat(va - 1)}},
                  Statement{"write", "", {absl::StrCat(to), absl::StrCat(vb + 1)}},
                  Statement{nullptr, "COMMIT", {}}});
    *commit_us = MicrosSince(t0);
    if (!write.ok()) return EndIfOpen(write.status());
    // A transaction that failed before COMMIT ends with COMMIT answering ROLLBACK.
    if (std::string(PQcmdStatus((*write)[2].get())) != "COMMIT") {
      return absl::InternalError(
          absl::StrCat("postgres: COMMIT answered ", PQcmdStatus((*write)[2].get())));
    }
    return absl::OkStatus();
  }

 private:
  PostgresConnection(PGconn* c, bool function) : c_(c), function_(function) {}

  // Aborted for a serialization failure or deadlock, Internal for any other error.
  static absl::Status Failure(const PGresult* r) {
    const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const std::string code = state == nullptr ? "" : state;
    const std::string why = absl::StrCat("postgres: ", PQresultErrorMessage(r));
    if (code == "40001" || code == "40P01") return absl::AbortedError(why);
    return absl::InternalError(why);
  }

  // Sends `statements` and a sync in one write, then reads their results: one per statement (in
  // order), or the first statement's error (the server skips the rest up to the sync).
  absl::StatusOr<std::vector<Result>> Pipeline(const std::vector<Statement>& statements) {
    for (const Statement& st : statements) {
      std::vector<const char*> values;
      for (const std::string& p : st.params) values.push_back(p.c_str());
      const int n = static_cast<int>(values.size());
      const int sent =
          st.prepared != nullptr
              ? PQsendQueryPrepared(c_, st.prepared, n, values.data(), nullptr, nullptr, 0)
              : PQsendQueryParams(c_, st.sql.c_str(), n, nullptr, values.data(), nullptr, nullptr,
                                  0);
      if (sent != 1) return absl::UnavailableError(absl::StrCat("postgres: ", PQerrorMessage(c_)));
    }
    if (PQpipelineSync(c_) != 1)
      return absl::UnavailableError(absl::StrCat("postgres: ", PQerrorMessage(c_)));
    std::vector<Result> out;
    absl::Status status;
    for (size_t i = 0; i < statements.size(); ++i) {
      Result r(PQgetResult(c_));
      if (r == nullptr) {
        return absl::UnavailableError(absl::StrCat("postgres: ", PQerrorMessage(c_)));
      }
      const ExecStatusType st = PQresultStatus(r.get());
      if (status.ok() && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        status = st == PGRES_PIPELINE_ABORTED ? absl::InternalError("postgres: pipeline aborted")
                                              : Failure(r.get());
      }
      // The end of this statement's results (after an aborted one's too).
      if (Result end(PQgetResult(c_)); end != nullptr)
        return absl::InternalError("postgres: more results than statements");
      out.push_back(std::move(r));
    }
    Result sync(PQgetResult(c_));
    if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
      return absl::InternalError(absl::StrCat("postgres: no pipeline sync: ", PQerrorMessage(c_)));
    }
    if (!status.ok()) return status;
    return out;
  }

  // Returns `why` after ending the transaction if one is still open (an error inside it leaves
  // it open and failed; a failed COMMIT or a function call has already ended it).
  absl::Status EndIfOpen(absl::Status why) {
    const PGTransactionStatusType t = PQtransactionStatus(c_);
    if (t == PQTRANS_INTRANS || t == PQTRANS_INERROR) {
      Pipeline({Statement{nullptr, "ROLLBACK", {}}}).status().IgnoreError();
    }
    return why;
  }

  PGconn* c_;
  bool function_;
};

class PostgresStore : public PeerStore {
 public:
  PostgresStore(std::unique_ptr<ScriptedServer> server, Transport t, uint64_t accounts,
                bool function)
      : server_(std::move(server)), transport_(t), accounts_(accounts), function_(function) {}

  absl::StatusOr<std::unique_ptr<BankConnection>> Connect() override {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c =
        PostgresConnection::Open(transport_, server_->dir(), server_->port(), function_);
    if (!c.ok()) return c.status();
    if (absl::Status s = (*c)->Prepare(); !s.ok()) return s;
    return std::unique_ptr<BankConnection>(std::move(*c));
  }
  int msg_rounds() const override { return function_ ? 1 : 2; }

  absl::Status Load(int64_t balance) {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c = Open();
    if (!c.ok()) return c.status();
    for (const std::string& sql :
         {std::string("DROP TABLE IF EXISTS acct"),
          std::string("CREATE TABLE acct (id bigint PRIMARY KEY, balance bigint NOT NULL)"),
          absl::StrCat("INSERT INTO acct SELECT g, ", balance, " FROM generate_series(0, ",
                       accounts_ - 1, ") g"),
          std::string("VACUUM ANALYZE acct"), std::string(kTransferFunction)}) {
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
    return PostgresConnection::Open(transport_, server_->dir(), server_->port(), false);
  }
  std::unique_ptr<ScriptedServer> server_;
  Transport transport_;
  uint64_t accounts_;
  bool function_;
};

}  // namespace

std::string PeerName(Peer p) {
  switch (p) {
    case Peer::kRedis:
      return "redis";
    case Peer::kRedisLua:
      return "redis-lua";
    case Peer::kPostgres:
      return "postgres";
    case Peer::kPostgresFn:
      return "postgres-fn";
  }
  return "?";
}

std::string PeerServer(Peer p) {
  return p == Peer::kRedis || p == Peer::kRedisLua ? "redis" : "postgres";
}

absl::StatusOr<std::unique_ptr<PeerStore>> PeerStore::Start(Peer peer, Transport transport,
                                                            const std::string& script,
                                                            uint64_t accounts, int64_t balance) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(script, PeerServer(peer), transport);
  if (!server.ok()) return server.status();
  if (PeerServer(peer) == "redis") {
    auto store = std::make_unique<RedisStore>(std::move(*server), transport, accounts,
                                              peer == Peer::kRedisLua);
    if (absl::Status s = store->Load(balance); !s.ok()) return s;
    return std::unique_ptr<PeerStore>(std::move(store));
  }
  auto store = std::make_unique<PostgresStore>(std::move(*server), transport, accounts,
                                               peer == Peer::kPostgresFn);
  if (absl::Status s = store->Load(balance); !s.ok()) return s;
  return std::unique_ptr<PeerStore>(std::move(store));
}

}  // namespace txnbench
}  // namespace farm
