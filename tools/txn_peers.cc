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
  absl::StatusOr<int> server_pid() const override { return server_->Pid(); }

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

// A connection to the server of `dir` / `port` as the bench's user.
absl::StatusOr<PGconn*> ConnectPostgres(Transport t, const std::string& dir, int port) {
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
  return c;
}

// Aborted for a serialization failure or deadlock, Internal for any other error.
absl::Status PostgresFailure(const PGresult* r) {
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const std::string code = state == nullptr ? "" : state;
  const std::string why = absl::StrCat("postgres: ", PQresultErrorMessage(r));
  if (code == "40001" || code == "40P01") return absl::AbortedError(why);
  return absl::InternalError(why);
}

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
    absl::StatusOr<PGconn*> c = ConnectPostgres(t, dir, port);
    if (!c.ok()) return c.status();
    return std::unique_ptr<PostgresConnection>(new PostgresConnection(*c, function));
  }
  ~PostgresConnection() override { PQfinish(c_); }

  // Runs `sql` (one or more statements, simple-query protocol; outside the pipeline mode only).
  absl::StatusOr<Result> Exec(const std::string& sql) {
    Result r(PQexec(c_, sql.c_str()));
    const ExecStatusType st = PQresultStatus(r.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    return Failure(r.get());
  }

  // Copies `rows` (COPY's text format) into `table`.
  absl::Status CopyIn(const std::string& table, const std::string& rows) {
    Result r(PQexec(c_, absl::StrCat("COPY ", table, " FROM STDIN").c_str()));
    if (PQresultStatus(r.get()) != PGRES_COPY_IN) return Failure(r.get());
    if (PQputCopyData(c_, rows.data(), static_cast<int>(rows.size())) != 1 ||
        PQputCopyEnd(c_, nullptr) != 1) {
      return absl::InternalError(absl::StrCat("postgres: COPY ", table, ": ", PQerrorMessage(c_)));
    }
    absl::Status status;
    while (Result end{PQgetResult(c_)}) {
      if (status.ok() && PQresultStatus(end.get()) != PGRES_COMMAND_OK) status = Failure(end.get());
    }
    return status;
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

  static absl::Status Failure(const PGresult* r) { return PostgresFailure(r); }

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
  absl::StatusOr<int> server_pid() const override { return server_->Pid(); }

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

// ---------------------------------------------------------------------------------------------
// TATP on PostgreSQL

// The spec's tables: its primary keys, foreign keys, and the unique index on sub_nbr.
std::string TatpSchema() {
  std::string columns;
  for (const char* name : {"bit", "hex", "byte2"}) {
    for (int i = 1; i <= 10; ++i) absl::StrAppend(&columns, name, "_", i, " smallint NOT NULL, ");
  }
  return absl::StrCat(
      "DROP TABLE IF EXISTS call_forwarding, special_facility, access_info, subscriber;"
      "CREATE TABLE subscriber (s_id integer PRIMARY KEY, sub_nbr varchar(15) NOT NULL UNIQUE, ",
      columns,
      "msc_location bigint NOT NULL, vlr_location bigint NOT NULL);"
      "CREATE TABLE access_info (s_id integer NOT NULL REFERENCES subscriber, ai_type smallint "
      "NOT NULL, data1 smallint, data2 smallint, data3 char(3), data4 char(5), "
      "PRIMARY KEY (s_id, ai_type));"
      "CREATE TABLE special_facility (s_id integer NOT NULL REFERENCES subscriber, sf_type "
      "smallint NOT NULL, is_active smallint NOT NULL, error_cntrl smallint, data_a smallint, "
      "data_b char(5), PRIMARY KEY (s_id, sf_type));"
      "CREATE TABLE call_forwarding (s_id integer NOT NULL, sf_type smallint NOT NULL, "
      "start_time smallint NOT NULL, end_time smallint, numberx char(15), "
      "PRIMARY KEY (s_id, sf_type, start_time), "
      "FOREIGN KEY (s_id, sf_type) REFERENCES special_facility);");
}

// The 7 transactions, in TatpTxnType's order (see the file comment).
struct TatpStatement {
  TatpTxnType type;
  const char* sql;
};
constexpr TatpStatement kTatpStatements[] = {
    {TatpTxnType::kGetSubscriberData, "SELECT * FROM subscriber WHERE s_id = $1"},
    {TatpTxnType::kGetNewDestination,
     "SELECT cf.numberx FROM special_facility sf JOIN call_forwarding cf ON cf.s_id = sf.s_id AND "
     "cf.sf_type = sf.sf_type WHERE sf.s_id = $1 AND sf.sf_type = $2 AND sf.is_active = 1 AND "
     "cf.start_time <= $3 AND $4 < cf.end_time"},
    {TatpTxnType::kGetAccessData,
     "SELECT data1, data2, data3, data4 FROM access_info WHERE s_id = $1 AND ai_type = $2"},
    {TatpTxnType::kUpdateSubscriberData,
     "WITH sf AS (UPDATE special_facility SET data_a = $3 WHERE s_id = $1 AND sf_type = $4 "
     "RETURNING s_id) UPDATE subscriber SET bit_1 = $2 WHERE s_id = (SELECT s_id FROM sf)"},
    {TatpTxnType::kUpdateLocation, "UPDATE subscriber SET vlr_location = $2 WHERE sub_nbr = $1"},
    // The spec's SELECT sf_type FROM special_facility WHERE s_id = ? (all the subscriber's
    // facilities, as farm reads them; MATERIALIZED keeps PostgreSQL from pushing the named type
    // into it), then the insert under the facility named, if it is among them.
    {TatpTxnType::kInsertCallForwarding,
     "WITH s AS (SELECT s_id FROM subscriber WHERE sub_nbr = $1), "
     "sf AS MATERIALIZED (SELECT sf_type FROM special_facility WHERE s_id = (SELECT s_id FROM s)) "
     "INSERT INTO call_forwarding (s_id, sf_type, start_time, end_time, numberx) SELECT s.s_id, "
     "sf.sf_type, $3, $4, $5 FROM s, sf WHERE sf.sf_type = $2 ON CONFLICT DO NOTHING"},
    {TatpTxnType::kDeleteCallForwarding,
     "DELETE FROM call_forwarding WHERE s_id = (SELECT s_id FROM subscriber WHERE sub_nbr = $1) "
     "AND sf_type = $2 AND start_time = $3"},
};

// kTatpStatements[i] is the statement of TatpTxnType i (Run prepares and picks them by index).
constexpr bool TatpStatementsInOrder() {
  for (int i = 0; i < kTatpTxnTypes; ++i) {
    if (static_cast<int>(kTatpStatements[i].type) != i) return false;
  }
  return true;
}
static_assert(sizeof(kTatpStatements) / sizeof(kTatpStatements[0]) == kTatpTxnTypes &&
                  TatpStatementsInOrder(),
              "kTatpStatements must hold one statement per TatpTxnType, in the enum's order");

// A statement's parameters for `t`.
std::vector<std::string> TatpParams(const TatpTxn& t) {
  using absl::StrCat;
  switch (t.type) {
    case TatpTxnType::kGetSubscriberData:
      return {StrCat(t.s_id)};
    case TatpTxnType::kGetNewDestination:
      return {StrCat(t.s_id), StrCat(t.sf_type), StrCat(t.start_time), StrCat(t.end_time)};
    case TatpTxnType::kGetAccessData:
      return {StrCat(t.s_id), StrCat(t.ai_type)};
    case TatpTxnType::kUpdateSubscriberData:
      return {StrCat(t.s_id), StrCat(t.bit_1), StrCat(t.data_a), StrCat(t.sf_type)};
    case TatpTxnType::kUpdateLocation:
      return {t.sub_nbr, StrCat(t.vlr_location)};
    case TatpTxnType::kInsertCallForwarding:
      return {t.sub_nbr, StrCat(t.sf_type), StrCat(t.start_time), StrCat(t.end_time), t.numberx};
    case TatpTxnType::kDeleteCallForwarding:
      return {t.sub_nbr, StrCat(t.sf_type), StrCat(t.start_time)};
  }
  return {};
}

class PostgresTatpConnection : public TatpConnection {
 public:
  static absl::StatusOr<std::unique_ptr<TatpConnection>> Open(Transport t, const std::string& dir,
                                                              int port) {
    absl::StatusOr<PGconn*> c = ConnectPostgres(t, dir, port);
    if (!c.ok()) return c.status();
    std::unique_ptr<PostgresTatpConnection> conn(new PostgresTatpConnection(*c));
    Result set(PQexec(*c, "SET default_transaction_isolation TO 'serializable'"));
    if (PQresultStatus(set.get()) != PGRES_COMMAND_OK) return PostgresFailure(set.get());
    for (int i = 0; i < kTatpTxnTypes; ++i) {
      Result r(PQprepare(*c, absl::StrCat("tatp", i).c_str(), kTatpStatements[i].sql, 0, nullptr));
      if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return PostgresFailure(r.get());
    }
    return std::unique_ptr<TatpConnection>(std::move(conn));
  }
  ~PostgresTatpConnection() override { PQfinish(c_); }

  absl::Status Run(const TatpTxn& t, TatpOutcome* out, double* commit_us) override {
    const std::vector<std::string> params = TatpParams(t);
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    const std::string name = absl::StrCat("tatp", static_cast<int>(t.type));
    const Clock::time_point t0 = Clock::now();
    Result r(PQexecPrepared(c_, name.c_str(), static_cast<int>(values.size()), values.data(),
                            nullptr, nullptr, 0));
    *commit_us = MicrosSince(t0);
    const ExecStatusType st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return PostgresFailure(r.get());
    int rows = 0;
    if (st == PGRES_TUPLES_OK) {
      rows = PQntuples(r.get());
    } else if (!absl::SimpleAtoi(PQcmdTuples(r.get()), &rows)) {
      return absl::InternalError(absl::StrCat("postgres: ", TatpTxnName(t.type),
                                              " answered no row count: ", PQcmdStatus(r.get())));
    }
    *out = TatpOutcome{};
    out->found = rows > 0;
    if (out->found && t.type == TatpTxnType::kInsertCallForwarding) out->cf_delta = 1;
    if (out->found && t.type == TatpTxnType::kDeleteCallForwarding) out->cf_delta = -1;
    return absl::OkStatus();
  }

 private:
  explicit PostgresTatpConnection(PGconn* c) : c_(c) {}
  PGconn* c_;
};

class PostgresTatpStore : public TatpStore {
 public:
  PostgresTatpStore(std::unique_ptr<ScriptedServer> server, Transport t, uint32_t subscribers,
                    uint64_t seed)
      : server_(std::move(server)), transport_(t), subscribers_(subscribers), seed_(seed) {}

  absl::StatusOr<std::unique_ptr<TatpConnection>> Connect() override {
    return PostgresTatpConnection::Open(transport_, server_->dir(), server_->port());
  }
  absl::StatusOr<int> server_pid() const override { return server_->Pid(); }

  // Creates the tables and copies the population in, a slice of subscribers at a time.
  absl::Status Load() {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c = Open();
    if (!c.ok()) return c.status();
    if (auto r = (*c)->Exec(TatpSchema()); !r.ok()) return r.status();
    constexpr uint32_t kSlice = 20000;
    constexpr const char* kTables[] = {"subscriber", "access_info", "special_facility",
                                       "call_forwarding"};
    for (uint32_t first = 1; first <= subscribers_; first += kSlice) {
      std::string rows[4];  // in kTables' order
      for (uint32_t s = first; s <= subscribers_ && s - first < kSlice; ++s) AddRows(s, rows);
      for (int i = 0; i < 4; ++i) {
        if (absl::Status st = (*c)->CopyIn(kTables[i], rows[i]); !st.ok()) return st;
      }
    }
    if (auto r = (*c)->Exec("VACUUM ANALYZE"); !r.ok()) return r.status();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Audit(int64_t cf_delta) override {
    absl::StatusOr<std::unique_ptr<PostgresConnection>> c = Open();
    if (!c.ok()) return c.status();
    absl::StatusOr<Result> r = (*c)->Exec(
        "SELECT (SELECT count(*) FROM subscriber), "
        "(SELECT count(*) FROM subscriber WHERE sub_nbr <> lpad(s_id::text, 15, '0')), "
        "(SELECT count(*) FROM call_forwarding cf WHERE NOT EXISTS (SELECT 1 FROM "
        "special_facility sf WHERE sf.s_id = cf.s_id AND sf.sf_type = cf.sf_type)), "
        "(SELECT count(*) FROM call_forwarding)");
    if (!r.ok()) return r.status();
    int64_t v[4] = {};
    for (int i = 0; i < 4; ++i) {
      if (PQntuples(r->get()) != 1 || !absl::SimpleAtoi(PQgetvalue(r->get(), 0, i), &v[i]))
        return absl::DataLossError("postgres: the TATP audit query answered no counts");
    }
    const int64_t initial = static_cast<int64_t>(InitialCallForwardings(seed_, subscribers_));
    const std::string line = absl::StrCat(
        "subscribers=", v[0], " misnumbered=", v[1], " orphans=", v[2], " call_forwardings=", v[3],
        " expected=", initial + cf_delta, " (", initial, cf_delta < 0 ? " " : " +", cf_delta, ")");
    if (v[0] != subscribers_ || v[1] != 0 || v[2] != 0 || v[3] != initial + cf_delta) {
      return absl::DataLossError(absl::StrCat("postgres TATP audit: ", line));
    }
    return line;
  }

 private:
  absl::StatusOr<std::unique_ptr<PostgresConnection>> Open() {
    return PostgresConnection::Open(transport_, server_->dir(), server_->port(), false);
  }

  // Subscriber s's rows as COPY text lines (tab-separated), one string per table.
  void AddRows(uint32_t s, std::string rows[4]) const {
    const SubscriberData d = Populate(seed_, s);
    const SubscriberRow& r = d.subscriber;
    absl::StrAppend(&rows[0], s, "\t", r.sub_nbr);
    for (int i = 0; i < 10; ++i) absl::StrAppend(&rows[0], "\t", (r.bits >> i) & 1);
    for (uint8_t h : r.hex) absl::StrAppend(&rows[0], "\t", h);
    for (uint8_t b : r.byte2) absl::StrAppend(&rows[0], "\t", b);
    absl::StrAppend(&rows[0], "\t", r.msc_location, "\t", r.vlr_location, "\n");
    auto text = [](const char* p, size_t n) { return absl::string_view(p, n); };
    for (int t = 0; t < kTatpTypes; ++t) {
      const AccessInfoRow& a = d.access_info[t];
      if (a.present) {
        absl::StrAppend(&rows[1], s, "\t", t + 1, "\t", a.data1, "\t", a.data2, "\t",
                        text(a.data3, sizeof(a.data3)), "\t", text(a.data4, sizeof(a.data4)), "\n");
      }
      const SpecialFacilityRow& f = d.special_facility[t];
      if (!f.present) continue;
      absl::StrAppend(&rows[2], s, "\t", t + 1, "\t", f.is_active, "\t", f.error_cntrl, "\t",
                      f.data_a, "\t", text(f.data_b, sizeof(f.data_b)), "\n");
      for (int i = 0; i < kTatpStartTimes; ++i) {
        const CallForwardingRow& cf = d.call_forwarding[t][i];
        if (!cf.present) continue;
        absl::StrAppend(&rows[3], s, "\t", t + 1, "\t", 8 * i, "\t", cf.end_time, "\t",
                        text(cf.numberx, sizeof(cf.numberx)), "\n");
      }
    }
  }

  std::unique_ptr<ScriptedServer> server_;
  Transport transport_;
  uint32_t subscribers_;
  uint64_t seed_;
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

absl::StatusOr<std::unique_ptr<TatpStore>> TatpStore::Start(Transport transport,
                                                            const std::string& script,
                                                            uint32_t subscribers, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(script, "postgres", transport);
  if (!server.ok()) return server.status();
  auto store =
      std::make_unique<PostgresTatpStore>(std::move(*server), transport, subscribers, seed);
  if (absl::Status s = store->Load(); !s.ok()) return s;
  return std::unique_ptr<TatpStore>(std::move(store));
}

}  // namespace txnbench
}  // namespace farm
