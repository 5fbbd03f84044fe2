// The peers of //tools:txn_bench: Redis and PostgreSQL, started from Debian's packages on private
// sockets for one run, loaded with the same accounts as the farm cluster, and driven with the
// same bank transfer (tools/txn_workload.h):
//
//   ASSIGN_OR_RETURN(auto redis, PeerStore::Start(Peer::kRedisLua, Transport::kUnix, script, n,
//   v)); ASSIGN_OR_RETURN(auto conn, redis->Connect());           // one per client thread
//   absl::Status s = conn->Transfer(a, b, &commit_us);       // Aborted: retry
//   ...
//   ASSIGN_OR_RETURN(int64_t sum, redis->Sum());             // the audit: transfers keep the sum
//   redis.reset();                                           // stops the server, removes its files
//
// The servers are started and stopped by tools/bench_peers.sh (tools/bench_peers.h) (redis-server
// with no persistence; PostgreSQL through initdb and pg_ctl, as the postgres user when running as
// root, with fsync and synchronous commit off: farm keeps nothing on disk either). They inherit
// this process's CPU affinity, so they run on the cores the benchmark was pinned to.
//
// The transfer, in each store's usual ways (every variant is a target of its own; the bench
// compares farm with each store's best):
//  - redis: [WATCH a b; MGET a b] pipelined, then [MULTI; SET a; SET b; EXEC] pipelined; EXEC
//    answers nil when a watched key changed (Aborted). 2 round trips; the commit is the second.
//  - redis-lua: one EVALSHA of a script (loaded once per connection) that GETs both accounts and
//    SETs them; Redis runs a script atomically. 1 round trip, the commit.
//  - postgres: statements prepared once per connection (PQprepare) and sent in libpq's pipeline
//    mode: [BEGIN ISOLATION LEVEL SERIALIZABLE; read a and b], then [update a; update b; COMMIT].
//    SQLSTATE 40001 or 40P01 is Aborted; a ROLLBACK is sent only when a transaction is left open
//    or in error. 2 round trips; the commit is the second.
//  - postgres-fn: one prepared call of a PL/pgSQL function (created at load) that locks both rows
//    in id order (SELECT ... FOR UPDATE), reads them and updates them, in its own READ COMMITTED
//    transaction: the row locks serialize the transfers, which wait instead of aborting. 1 round
//    trip, the commit.
// All read both balances and write a - 1 and b + 1, as farm's bank transfer does.
//
// TATP (TatpStore, PostgreSQL only; tools/tatp_workload.h): the spec's 4 tables with its primary
// keys, foreign keys and a unique index on subscriber.sub_nbr, loaded by COPY with the rows farm
// loads (the same generator and seed). Each of the 7 transactions is one prepared statement in
// autocommit, the connection's default isolation SERIALIZABLE (farm's transactions are strictly
// serializable: the same guarantee; 40001/40P01 are Aborted and retried as farm's aborts are):
// the lookups by sub_nbr are subqueries on the index, UPDATE_SUBSCRIBER_DATA's two updates one
// statement (a CTE: both or neither, as farm's), INSERT_CALL_FORWARDING a CTE that reads all
// the subscriber's special facilities (the spec's SELECT sf_type, as farm's reads them) and
// inserts under the one named if it is among them, nothing on a duplicate key. 1 round trip
// each, the commit. A statement that changes or returns no row is a committed transaction that
// found nothing (TATP's unsuccessful one).
//
// Thread safety: a PeerStore is used by one thread (start, load, audit, stop); each BankConnection
// by one client thread.
#ifndef FARM_TOOLS_TXN_PEERS_H_
#define FARM_TOOLS_TXN_PEERS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/bench_peers.h"
#include "tools/tatp_workload.h"

namespace farm {
namespace txnbench {

enum class Peer { kRedis, kRedisLua, kPostgres, kPostgresFn };
// "redis", "redis-lua", "postgres", "postgres-fn".
std::string PeerName(Peer p);
// The store behind a variant: "redis" or "postgres" (tools/bench_peers.sh's server names).
std::string PeerServer(Peer p);
// Every variant, in order.
inline constexpr Peer kPeers[] = {Peer::kRedis, Peer::kRedisLua, Peer::kPostgres,
                                  Peer::kPostgresFn};

// One client connection.
class BankConnection {
 public:
  virtual ~BankConnection() = default;
  // Moves 1 from account `from` to account `to` in one transaction. OK (with the commit step's
  // duration), Aborted (a conflict: nothing changed), or an error.
  virtual absl::Status Transfer(uint64_t from, uint64_t to, double* commit_us) = 0;
};

class PeerStore {
 public:
  // Starts the server with `script` (tools/bench_peers.sh) and loads `accounts` accounts of
  // `balance` each. FailedPrecondition when the server's package is not installed.
  static absl::StatusOr<std::unique_ptr<PeerStore>> Start(Peer peer, Transport transport,
                                                          const std::string& script,
                                                          uint64_t accounts, int64_t balance);
  virtual ~PeerStore() = default;
  virtual absl::StatusOr<std::unique_ptr<BankConnection>> Connect() = 0;
  // The sum of every account's balance.
  virtual absl::StatusOr<int64_t> Sum() = 0;
  // Message rounds of one transfer attempt (see the file comment).
  virtual int msg_rounds() const = 0;
  // The server's main process (its CPU time is counted with its children's).
  virtual absl::StatusOr<int> server_pid() const = 0;
};

// One TATP client connection.
class TatpConnection {
 public:
  virtual ~TatpConnection() = default;
  // Runs `t` as one transaction: OK once committed (with what it found and changed, and the
  // commit step's duration), Aborted (a serialization failure: nothing changed), or an error.
  virtual absl::Status Run(const TatpTxn& t, TatpOutcome* out, double* commit_us) = 0;
};

// PostgreSQL loaded with TATP's population (see the file comment).
class TatpStore {
 public:
  // Starts PostgreSQL with `script` and loads `subscribers` subscribers made from `seed`.
  // FailedPrecondition when PostgreSQL is not installed.
  static absl::StatusOr<std::unique_ptr<TatpStore>> Start(Transport transport,
                                                          const std::string& script,
                                                          uint32_t subscribers, uint64_t seed);
  virtual ~TatpStore() = default;
  virtual absl::StatusOr<std::unique_ptr<TatpConnection>> Connect() = 0;
  // After the run: every call_forwarding row has its special_facility row, every subscriber's
  // sub_nbr is its s_id's, and the call_forwarding rows number the population's plus `cf_delta`.
  // A one-line summary, or DataLoss naming what does not hold.
  virtual absl::StatusOr<std::string> Audit(int64_t cf_delta) = 0;
  int msg_rounds() const { return 1; }
  virtual absl::StatusOr<int> server_pid() const = 0;
};

}  // namespace txnbench
}  // namespace farm

#endif  // FARM_TOOLS_TXN_PEERS_H_
