// HistoryRecorder: records what clients of the key-value store asked and were told, with the
// times, so that //tools/lincheck (Porcupine) can check afterwards that the store behaved
// linearizably. Separate from txn/history.h, which records transactions for the
// strict-serializability checker.
//
//   farm::kv::HistoryRecorder rec;                               // one per process
//   RETURN_IF_ERROR(rec.StartJournal("/tmp/h/node1.jsonl"));     // optional, see below
//   ...in each client thread (client ids unique across every process of the history):
//   HistoryRecorder::Handle h = rec.Call(client, HistoryOp::Put("k1", "v7"));
//   absl::Status s = kv.Put("k1", "v7");
//   rec.ReturnPut(h, s);                  // ok, or an error: outcome unknown (may have happened)
//   h = rec.Call(client, HistoryOp::Get("k1"));
//   rec.ReturnGet(h, kv.Get("k1"));       // a value, NotFound (found=false), or unknown
//   ...
//   RETURN_IF_ERROR(rec.WriteJson("/tmp/h/node1.json"));
//   // then: lincheck /tmp/h/node1.json /tmp/h/node2.jsonl ...   (exit 0: linearizable)
//
// Operations (the model of tools/lincheck/model.go): get(key) -> found, value; put(key, value);
// del(key) -> deleted; cas(key, expected or nullopt = must be absent, value) -> ok (a
// PutIfAbsent is a cas from nullopt); and the atomic updates of kv::Client: setxx(key, value) ->
// ok (PutIfPresent); getset(key, value) -> found, old value (GetAndSet); append(key, suffix) ->
// length; exists(key) -> found; incr(key, delta) -> the new value, or failed (IncrBy refused:
// no integer, or an overflow). Keys and values are byte strings. Multi-key operations (MultiPut)
// are not in the model: the checker partitions a history by key.
//
// Outcomes. Return* records what the client was told, stamped with the time. An operation that
// never gets a Return (its thread or process died), or whose Return* got an error status, has an
// unknown outcome: written as "return": null, it may or may not have taken effect at any moment
// after its call, and the checker accepts either. The Return* helpers take a kv::Client call's
// result as it is: OK gives the outcome; NotFound from a get means found=false; every other error
// (Unavailable, DeadlineExceeded, Aborted, ...) makes the outcome unknown, which is always sound
// (an operation that certainly failed is just one that happens not to have taken effect), with
// the error kept in the history as "error" for the report.
//
// Times are CLOCK_MONOTONIC nanoseconds, which every process on one host shares (so their
// histories can be merged) and which no clock step (NTP, an administrator) moves, as one can
// move CLOCK_REALTIME in the middle of a run. The call time is read before Call returns (before
// the operation starts), the return time when Return* is called (after it ended), so each
// interval contains the operation.
//
// Files. WriteJson writes the document format ({"operations": [...]}, one operation per line);
// StartJournal additionally appends every call and return to a file as it happens (JSON lines,
// one write(2) each), so that a process that is killed leaves a history whose pending
// operations read as unknown: use it in processes a test may kill. Both formats are described
// in tools/lincheck/README.md; the checker takes any mix of files. Keys and values are written as
// JSON strings with one character per byte: printable ASCII as is, every other byte as \u00XX.
//
// Thread safety: all methods are safe for concurrent use (one lock; each event costs a lock and,
// with a journal, one write(2)).
#ifndef FARM_KV_HISTORY_H_
#define FARM_KV_HISTORY_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/mutex.h"

namespace farm {
namespace kv {

enum class HistoryOpKind { kGet, kPut, kDel, kCas, kSetxx, kGetset, kAppend, kExists, kIncr };

// "get", "put", "del", "cas", "setxx", "getset", "append", "exists", "incr".
const char* HistoryOpName(HistoryOpKind kind);

// What a client asked for.
struct HistoryOp {
  HistoryOpKind kind = HistoryOpKind::kGet;
  std::string key;
  std::string value;                    // put, cas, setxx, getset; append: the suffix
  std::optional<std::string> expected;  // cas; nullopt: the key must be absent
  int64_t delta = 0;                    // incr

  static HistoryOp Get(absl::string_view key);
  static HistoryOp Put(absl::string_view key, absl::string_view value);
  static HistoryOp Del(absl::string_view key);
  static HistoryOp Cas(absl::string_view key, std::optional<std::string> expected,
                       absl::string_view value);
  static HistoryOp PutIfAbsent(absl::string_view key, absl::string_view value);  // a cas
  static HistoryOp Setxx(absl::string_view key, absl::string_view value);
  static HistoryOp Getset(absl::string_view key, absl::string_view value);
  static HistoryOp Append(absl::string_view key, absl::string_view suffix);
  static HistoryOp Exists(absl::string_view key);
  static HistoryOp Incr(absl::string_view key, int64_t delta);
};

// What a client was told.
struct HistoryOutcome {
  HistoryOpKind kind = HistoryOpKind::kGet;
  // get, getset, exists: found; del: deleted; cas, setxx: ok; incr: failed (refused).
  bool flag = false;
  std::string value;    // get, getset: the (old) value, when found; incr: the new value
  uint64_t length = 0;  // append

  static HistoryOutcome Get(std::optional<std::string> value);  // nullopt: not found
  static HistoryOutcome Put();
  static HistoryOutcome Del(bool deleted);
  static HistoryOutcome Cas(bool ok);
  static HistoryOutcome Setxx(bool ok);
  static HistoryOutcome Getset(std::optional<std::string> old);  // nullopt: it was absent
  static HistoryOutcome Append(uint64_t length);
  static HistoryOutcome Exists(bool found);
  static HistoryOutcome Incr(std::optional<int64_t> value);  // nullopt: refused
};

class HistoryRecorder {
 public:
  // Nanoseconds; any epoch, but comparable across the processes of one history.
  using Clock = std::function<int64_t()>;
  // Identifies a call for its Return; also its "id" in the journal.
  using Handle = uint64_t;

  // CLOCK_MONOTONIC in nanoseconds: the default clock.
  static int64_t MonotonicNanos();

  explicit HistoryRecorder(Clock clock = MonotonicNanos);
  ~HistoryRecorder();  // closes the journal
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  // From now on appends every call and return to `path` (created or truncated) as it happens.
  // Calls recorded before are written first. Fails if the file cannot be opened or a journal was
  // started already.
  absl::Status StartJournal(const std::string& path);

  // Records the call of `op` by `client` now, and returns its handle.
  Handle Call(uint32_t client, HistoryOp op);

  // Records that the call `h` returned `outcome` now. InvalidArgument if `h` is not a call of
  // this recorder or the outcome's kind is not the call's; FailedPrecondition if `h` has returned
  // already; the journal's write error, if any.
  absl::Status Return(Handle h, const HistoryOutcome& outcome);
  // Records that the client learnt nothing certain about `h` (an error): the outcome stays
  // unknown ("return": null), with `error` kept for the report.
  absl::Status ReturnUnknown(Handle h, absl::string_view error);

  // The results of farm::kv::Client's calls, mapped to outcomes as described above.
  absl::Status ReturnGet(Handle h, const absl::StatusOr<std::string>& result);
  absl::Status ReturnPut(Handle h, const absl::Status& result);
  absl::Status ReturnDel(Handle h, const absl::StatusOr<bool>& result);
  absl::Status ReturnCas(Handle h, const absl::StatusOr<bool>& result);  // and PutIfAbsent's
  absl::Status ReturnSetxx(Handle h, const absl::StatusOr<bool>& result);
  absl::Status ReturnGetset(Handle h, const absl::StatusOr<std::optional<std::string>>& result);
  absl::Status ReturnAppend(Handle h, const absl::StatusOr<uint64_t>& result);
  absl::Status ReturnExists(Handle h, const absl::StatusOr<bool>& result);
  // IncrBy's refusals (FailedPrecondition "value is not an integer or out of range" or
  // "increment or decrement would overflow", kv/kv.h) are certain: failed, nothing changed. Any
  // other error, a FailedPrecondition of the platform's included (an evicted node), is unknown.
  absl::Status ReturnIncr(Handle h, const absl::StatusOr<int64_t>& result);
  // Whether `s` is one of IncrBy's refusals (above).
  static bool IsIncrRefusal(const absl::Status& s);

  // The history in the document format, and written to `path` (through a temporary file renamed
  // over it, so readers never see half a history). Calls still pending are unknown.
  std::string ToJson() const;
  absl::Status WriteJson(const std::string& path) const;

  // The first error writing the journal, or OK.
  absl::Status JournalStatus() const;
  // Operations recorded so far, and how many of them have not returned (or returned unknown).
  size_t size() const;
  size_t unknown() const;

 private:
  struct Record {
    uint32_t client;
    int64_t call;
    std::optional<int64_t> ret;  // nullopt: unknown
    HistoryOp op;
    HistoryOutcome outcome;  // valid when ret is set
    std::string error;       // of an unknown outcome, if the client was told one
    bool returned = false;   // Return or ReturnUnknown was called
  };

  absl::Status Finish(Handle h, std::optional<HistoryOutcome> outcome, absl::string_view error);
  void AppendJournal(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock clock_;
  mutable Mutex mu_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
  int journal_fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::string journal_path_ ABSL_GUARDED_BY(mu_);
  absl::Status journal_status_ ABSL_GUARDED_BY(mu_);
};

// `bytes` as a JSON string literal (quotes included), one character per byte: printable ASCII as
// is (with \" and \\), every other byte as \u00XX.
std::string JsonString(absl::string_view bytes);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_HISTORY_H_
