#include "kv/history.h"

#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace farm {
namespace kv {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

// Writes all of `data` to `fd`. One write(2) in practice (regular files); loops on short writes.
absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// "op", "key" and the operation's own fields.
std::string OpFields(const HistoryOp& op) {
  std::string out =
      absl::StrCat("\"op\": \"", HistoryOpName(op.kind), "\", \"key\": ", JsonString(op.key));
  switch (op.kind) {
    case HistoryOpKind::kPut:
      absl::StrAppend(&out, ", \"value\": ", JsonString(op.value));
      break;
    case HistoryOpKind::kCas:
      absl::StrAppend(&out, ", \"expected\": ", op.expected ? JsonString(*op.expected) : "null",
                      ", \"value\": ", JsonString(op.value));
      break;
    case HistoryOpKind::kSetxx:
    case HistoryOpKind::kGetset:
    case HistoryOpKind::kAppend:
      absl::StrAppend(&out, ", \"value\": ", JsonString(op.value));
      break;
    case HistoryOpKind::kIncr:
      absl::StrAppend(&out, ", \"delta\": ", op.delta);
      break;
    case HistoryOpKind::kGet:
    case HistoryOpKind::kDel:
    case HistoryOpKind::kExists:
      break;
  }
  return out;
}

// The outcome's fields after "return", starting with ", " (none for put).
std::string OutcomeFields(const HistoryOutcome& o) {
  const char* flag = o.flag ? "true" : "false";
  switch (o.kind) {
    case HistoryOpKind::kGet:
      return o.flag ? absl::StrCat(", \"found\": true, \"value\": ", JsonString(o.value))
                    : ", \"found\": false";
    case HistoryOpKind::kPut:
      return "";
    case HistoryOpKind::kDel:
      return absl::StrCat(", \"deleted\": ", flag);
    case HistoryOpKind::kCas:
    case HistoryOpKind::kSetxx:
      return absl::StrCat(", \"ok\": ", flag);
    case HistoryOpKind::kGetset:  // "old": the call has a "value" of its own
      return o.flag ? absl::StrCat(", \"found\": true, \"old\": ", JsonString(o.value))
                    : ", \"found\": false";
    case HistoryOpKind::kAppend:
      return absl::StrCat(", \"length\": ", o.length);
    case HistoryOpKind::kExists:
      return absl::StrCat(", \"found\": ", flag);
    case HistoryOpKind::kIncr:
      return o.flag ? ", \"failed\": true"
                    : absl::StrCat(", \"failed\": false, \"value\": ", JsonString(o.value));
  }
  return "";
}

std::string ErrorField(absl::string_view error) {
  return error.empty() ? "" : absl::StrCat(", \"error\": ", JsonString(error));
}

// The journal's lines: one per call, one per return (documented in tools/lincheck/README.md).
std::string JournalCall(uint64_t id, uint32_t client, int64_t call, const HistoryOp& op) {
  return absl::StrCat("{\"id\": ", id, ", \"client\": ", client, ", \"call\": ", call, ", ",
                      OpFields(op), "}\n");
}

std::string JournalReturn(uint64_t id, std::optional<int64_t> ret, const HistoryOutcome& outcome,
                          absl::string_view error) {
  return ret ? absl::StrCat("{\"id\": ", id, ", \"return\": ", *ret, OutcomeFields(outcome), "}\n")
             : absl::StrCat("{\"id\": ", id, ", \"return\": null", ErrorField(error), "}\n");
}

}  // namespace

const char* HistoryOpName(HistoryOpKind kind) {
  switch (kind) {
    case HistoryOpKind::kGet:
      return "get";
    case HistoryOpKind::kPut:
      return "put";
    case HistoryOpKind::kDel:
      return "del";
    case HistoryOpKind::kCas:
      return "cas";
    case HistoryOpKind::kSetxx:
      return "setxx";
    case HistoryOpKind::kGetset:
      return "getset";
    case HistoryOpKind::kAppend:
      return "append";
    case HistoryOpKind::kExists:
      return "exists";
    case HistoryOpKind::kIncr:
      return "incr";
  }
  return "?";
}

HistoryOp HistoryOp::Get(absl::string_view key) {
  return {HistoryOpKind::kGet, std::string(key), "", std::nullopt};
}
HistoryOp HistoryOp::Put(absl::string_view key, absl::string_view value) {
  return {HistoryOpKind::kPut, std::string(key), std::string(value), std::nullopt};
}
HistoryOp HistoryOp::Del(absl::string_view key) {
  return {HistoryOpKind::kDel, std::string(key), "", std::nullopt};
}
HistoryOp HistoryOp::Cas(absl::string_view key, std::optional<std::string> expected,
                         absl::string_view value) {
  return {HistoryOpKind::kCas, std::string(key), std::string(value), std::move(expected)};
}
HistoryOp HistoryOp::PutIfAbsent(absl::string_view key, absl::string_view value) {
  return Cas(key, std::nullopt, value);
}
HistoryOp HistoryOp::Setxx(absl::string_view key, absl::string_view value) {
  return {HistoryOpKind::kSetxx, std::string(key), std::string(value), std::nullopt};
}
HistoryOp HistoryOp::Getset(absl::string_view key, absl::string_view value) {
  return {HistoryOpKind::kGetset, std::string(key), std::string(value), std::nullopt};
}
HistoryOp HistoryOp::Append(absl::string_view key, absl::string_view suffix) {
  return {HistoryOpKind::kAppend, std::string(key), std::string(suffix), std::nullopt};
}
HistoryOp HistoryOp::Exists(absl::string_view key) {
  return {HistoryOpKind::kExists, std::string(key), "", std::nullopt};
}
HistoryOp HistoryOp::Incr(absl::string_view key, int64_t delta) {
  return {HistoryOpKind::kIncr, std::string(key), "", std::nullopt, delta};
}

HistoryOutcome HistoryOutcome::Get(std::optional<std::string> value) {
  return {HistoryOpKind::kGet, value.has_value(), value ? std::move(*value) : ""};
}
HistoryOutcome HistoryOutcome::Put() { return {HistoryOpKind::kPut, false, ""}; }
HistoryOutcome HistoryOutcome::Del(bool deleted) { return {HistoryOpKind::kDel, deleted, ""}; }
HistoryOutcome HistoryOutcome::Cas(bool ok) { return {HistoryOpKind::kCas, ok, ""}; }
HistoryOutcome HistoryOutcome::Setxx(bool ok) { return {HistoryOpKind::kSetxx, ok, ""}; }
HistoryOutcome HistoryOutcome::Getset(std::optional<std::string> old) {
  return {HistoryOpKind::kGetset, old.has_value(), old ? std::move(*old) : ""};
}
HistoryOutcome HistoryOutcome::Append(uint64_t length) {
  return {HistoryOpKind::kAppend, false, "", length};
}
HistoryOutcome HistoryOutcome::Exists(bool found) { return {HistoryOpKind::kExists, found, ""}; }
HistoryOutcome HistoryOutcome::Incr(std::optional<int64_t> value) {
  return {HistoryOpKind::kIncr, !value.has_value(), value ? absl::StrCat(*value) : ""};
}

std::string JsonString(absl::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() + 2);
  out.push_back('"');
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c >= 0x20 && c < 0x7f) {
      out.push_back(ch);
    } else {
      out.append("\\u00");
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  out.push_back('"');
  return out;
}

int64_t HistoryRecorder::MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

HistoryRecorder::HistoryRecorder(Clock clock) : clock_(std::move(clock)) {}

HistoryRecorder::~HistoryRecorder() {
  MutexLock l(&mu_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
}

absl::Status HistoryRecorder::StartJournal(const std::string& path) {
  MutexLock l(&mu_);
  if (journal_fd_ >= 0) return absl::FailedPreconditionError("a journal was started already");
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot open journal", path, errno);
  journal_fd_ = fd;
  journal_path_ = path;
  journal_status_ = absl::OkStatus();
  // The calls recorded before, then the returns among them.
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& r = records_[i];
    AppendJournal(JournalCall(i, r.client, r.call, r.op));
  }
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& r = records_[i];
    if (r.returned) AppendJournal(JournalReturn(i, r.ret, r.outcome, r.error));
  }
  return journal_status_;
}

void HistoryRecorder::AppendJournal(const std::string& line) {
  if (journal_fd_ < 0 || !journal_status_.ok()) return;
  journal_status_ = WriteAll(journal_fd_, line, journal_path_);
}

HistoryRecorder::Handle HistoryRecorder::Call(uint32_t client, HistoryOp op) {
  const int64_t now = clock_();
  MutexLock l(&mu_);
  const Handle h = records_.size();
  AppendJournal(JournalCall(h, client, now, op));
  records_.push_back(Record{client, now, std::nullopt, std::move(op), HistoryOutcome{}, "", false});
  return h;
}

absl::Status HistoryRecorder::Finish(Handle h, std::optional<HistoryOutcome> outcome,
                                     absl::string_view error) {
  const int64_t now = clock_();
  MutexLock l(&mu_);
  if (h >= records_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("no call has handle ", h));
  }
  Record& r = records_[h];
  if (r.returned) {
    return absl::FailedPreconditionError(absl::StrCat("call ", h, " has returned already"));
  }
  if (outcome && outcome->kind != r.op.kind) {
    return absl::InvalidArgumentError(absl::StrCat("call ", h, " is a ", HistoryOpName(r.op.kind),
                                                   ", the outcome a ",
                                                   HistoryOpName(outcome->kind)));
  }
  r.returned = true;
  if (outcome) {
    // The interval must contain the operation: a clock that went back (a test's clock may)
    // must not make it end before it began.
    r.ret = std::max(now, r.call);
    r.outcome = std::move(*outcome);
  } else {
    r.error = std::string(error);
  }
  AppendJournal(JournalReturn(h, r.ret, r.outcome, r.error));
  return journal_status_;
}

absl::Status HistoryRecorder::Return(Handle h, const HistoryOutcome& outcome) {
  return Finish(h, outcome, "");
}

absl::Status HistoryRecorder::ReturnUnknown(Handle h, absl::string_view error) {
  return Finish(h, std::nullopt, error);
}

absl::Status HistoryRecorder::ReturnGet(Handle h, const absl::StatusOr<std::string>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Get(*result));
  if (absl::IsNotFound(result.status())) return Return(h, HistoryOutcome::Get(std::nullopt));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnPut(Handle h, const absl::Status& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Put());
  return ReturnUnknown(h, result.ToString());
}

absl::Status HistoryRecorder::ReturnDel(Handle h, const absl::StatusOr<bool>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Del(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnCas(Handle h, const absl::StatusOr<bool>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Cas(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnSetxx(Handle h, const absl::StatusOr<bool>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Setxx(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnGetset(
    Handle h, const absl::StatusOr<std::optional<std::string>>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Getset(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnAppend(Handle h, const absl::StatusOr<uint64_t>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Append(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnExists(Handle h, const absl::StatusOr<bool>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Exists(*result));
  return ReturnUnknown(h, result.status().ToString());
}

absl::Status HistoryRecorder::ReturnIncr(Handle h, const absl::StatusOr<int64_t>& result) {
  if (result.ok()) return Return(h, HistoryOutcome::Incr(*result));
  if (IsIncrRefusal(result.status())) return Return(h, HistoryOutcome::Incr(std::nullopt));
  return ReturnUnknown(h, result.status().ToString());
}

bool HistoryRecorder::IsIncrRefusal(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) &&
         (absl::EndsWith(s.message(), "value is not an integer or out of range") ||
          absl::EndsWith(s.message(), "increment or decrement would overflow"));
}

std::string HistoryRecorder::ToJson() const {
  MutexLock l(&mu_);
  std::string out = "{\"operations\": [\n";
  for (size_t i = 0; i < records_.size(); ++i) {
    const Record& r = records_[i];
    absl::StrAppend(&out, "{\"client\": ", r.client, ", \"call\": ", r.call,
                    ", \"return\": ", r.ret ? absl::StrCat(*r.ret) : "null", ", ", OpFields(r.op),
                    r.ret ? OutcomeFields(r.outcome) : ErrorField(r.error),
                    i + 1 < records_.size() ? "},\n" : "}\n");
  }
  out.append("]}\n");
  return out;
}

absl::Status HistoryRecorder::WriteJson(const std::string& path) const {
  const std::string json = ToJson();
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp, errno);
  absl::Status s = WriteAll(fd, json, tmp);
  if (::close(fd) != 0 && s.ok()) s = ErrnoError("cannot write", tmp, errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    s = ErrnoError("cannot rename to", path, errno);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

absl::Status HistoryRecorder::JournalStatus() const {
  MutexLock l(&mu_);
  return journal_status_;
}

size_t HistoryRecorder::size() const {
  MutexLock l(&mu_);
  return records_.size();
}

size_t HistoryRecorder::unknown() const {
  MutexLock l(&mu_);
  size_t n = 0;
  for (const Record& r : records_) n += r.ret ? 0 : 1;
  return n;
}

}  // namespace kv
}  // namespace farm
