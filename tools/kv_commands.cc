#include "tools/kv_commands.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace farm {
namespace kvsh {
namespace {

// mset's and msetnx's KEY VALUE arguments.
std::vector<std::pair<std::string, std::string>> Pairs(const Command& c) {
  std::vector<std::pair<std::string, std::string>> items;
  for (size_t i = 0; i + 1 < c.args.size(); i += 2) items.emplace_back(c.args[i], c.args[i + 1]);
  return items;
}

// (integer) N for a store call's count, length or sum; a bool as 1 or 0.
template <typename T>
Reply IntegerReply(const absl::StatusOr<T>& r) {
  if (!r.ok()) return ErrorReply(r.status());
  return Reply::Integer(static_cast<int64_t>(*r));
}

// The value a write replaced, or (nil).
Reply OldValueReply(absl::StatusOr<std::optional<std::string>> old) {
  if (!old.ok()) return ErrorReply(old.status());
  if (!old->has_value()) return Reply::Nil();
  return Reply::String(std::move(**old));
}

Reply OkReply(const absl::Status& s) { return s.ok() ? Reply::Status("OK") : ErrorReply(s); }

}  // namespace

Limits StoreLimits(const kv::Store& store) {
  Limits limits;
  limits.max_key_size = store.max_key_size();
  limits.max_value_size = store.max_value_size();
  return limits;
}

Reply KvCommands::Execute(const Command& c) {
  switch (c.op) {
    case Op::kGet: {
      absl::StatusOr<std::string> v = client_.Get(c.args[0]);
      if (absl::IsNotFound(v.status())) return Reply::Nil();
      if (!v.ok()) return ErrorReply(v.status());
      return Reply::String(std::move(*v));
    }
    case Op::kPut:
      return Put(c);
    case Op::kPing:
      return c.args.empty() ? Reply::Status("PONG") : Reply::String(c.args[0]);
    case Op::kDel:
      return Del(c);
    case Op::kCas: {
      std::optional<std::string> expected;
      if (!c.expect_absent) expected = c.args[1];
      return IntegerReply(client_.CompareAndSet(c.args[0], expected, c.args[2]));
    }
    case Op::kMget:
      return Mget(c);
    case Op::kIncrBy:
      return IntegerReply(client_.IncrBy(c.args[0], c.delta));
    case Op::kSetNx:
      return IntegerReply(client_.PutIfAbsent(c.args[0], c.args[1]));
    case Op::kGetSet:
      return OldValueReply(client_.GetAndSet(c.args[0], c.args[1]));
    case Op::kAppend:
      return IntegerReply(client_.Append(c.args[0], c.args[1]));
    case Op::kStrlen: {
      absl::StatusOr<std::string> v = client_.Get(c.args[0]);
      if (absl::IsNotFound(v.status())) return Reply::Integer(0);
      if (!v.ok()) return ErrorReply(v.status());
      return Reply::Integer(static_cast<int64_t>(v->size()));
    }
    case Op::kExists:
      return Exists(c);
    case Op::kStats:
    case Op::kInfo: {
      absl::StatusOr<std::vector<StatsRow>> rows = StatsRows();
      if (!rows.ok()) return ErrorReply(rows.status());
      if (c.op == Op::kStats) return Reply::Text(FormatStats(*rows, raw_));
      return Reply::Text(FormatInfo(*rows, c.args.empty() ? "" : c.args[0]));
    }
    case Op::kScan: {
      absl::StatusOr<kv::ScanPage> page = client_.Scan(c.cursor, c.count, c.pattern);
      // The store refuses a cursor no step returned as InvalidArgument: Redis's words.
      if (absl::IsInvalidArgument(page.status())) return Reply::Error("ERR invalid cursor");
      if (!page.ok()) return ErrorReply(page.status());
      return ScanReply(page->cursor, std::move(page->keys));
    }
    case Op::kKeys:
      return Keys(c);
    case Op::kDbSize:
      return IntegerReply(client_.Size());
    case Op::kMset:
      return OkReply(client_.MultiPut(Pairs(c)));
    case Op::kMsetNx:
      return MultiPutIfNoneExists(c);
    case Op::kHelp: {
      absl::StatusOr<std::string> text = HelpText(c.args.empty() ? "" : c.args[0], limits_);
      if (!text.ok()) return Reply::Error(absl::StrCat("ERR ", text.status().message()));
      return Reply::Text(*text);
    }
    case Op::kQuit:
      break;
  }
  return Reply::Error("ERR internal: unhandled command");
}

// One transaction for all the keys: they go together or not at all (as Redis's DEL).
Reply KvCommands::Del(const Command& c) {
  int64_t deleted = 0;
  absl::Status s;
  if (c.args.size() == 1) {
    absl::StatusOr<bool> d = client_.Delete(c.args[0]);
    s = d.status();
    deleted = d.ok() && *d ? 1 : 0;
  } else {
    s = worker_.Run([&](Txn& t) -> absl::Status {
      deleted = 0;  // a retried attempt counts again
      for (const std::string& key : c.args) {
        absl::StatusOr<bool> d = client_.Delete(t, key);
        if (!d.ok()) return d.status();
        deleted += *d ? 1 : 0;
      }
      return absl::OkStatus();
    });
  }
  if (!s.ok()) return ErrorReply(s);  // an aborted transaction deleted nothing
  return Reply::Integer(deleted);
}

Reply KvCommands::Mget(const Command& c) {
  std::vector<absl::StatusOr<std::string>> values = client_.MultiGet(c.args);
  std::vector<Reply> out;
  for (absl::StatusOr<std::string>& v : values) {
    if (absl::IsNotFound(v.status())) {
      out.push_back(Reply::Nil());
    } else if (!v.ok()) {
      out.push_back(ErrorReply(v.status()));
    } else {
      out.push_back(Reply::String(std::move(*v)));
    }
  }
  return Reply::Array(std::move(out));
}

Reply KvCommands::Exists(const Command& c) {
  int64_t found = 0;
  for (const std::string& key : c.args) {  // a key named twice counts twice, as in Redis
    absl::StatusOr<bool> e = client_.Exists(key);
    if (!e.ok()) return ErrorReply(e.status());
    found += *e ? 1 : 0;
  }
  return Reply::Integer(found);
}

Reply KvCommands::Keys(const Command& c) {
  std::vector<Reply> keys;
  uint64_t cursor = 0;
  do {  // a whole iteration, as Redis's KEYS walks the whole keyspace
    absl::StatusOr<kv::ScanPage> page = client_.Scan(cursor, kKeysStep, c.pattern);
    if (!page.ok()) return ErrorReply(page.status());
    for (std::string& k : page->keys) keys.push_back(Reply::String(std::move(k)));
    cursor = page->cursor;
  } while (cursor != 0);
  return Reply::Array(std::move(keys));
}

// msetnx: in one transaction, every key is looked up and, only if none exists, all are set.
Reply KvCommands::MultiPutIfNoneExists(const Command& c) {
  const std::vector<std::pair<std::string, std::string>> items = Pairs(c);
  bool set = false;
  const absl::Status s = worker_.Run([&](Txn& t) -> absl::Status {
    set = false;  // a retried attempt looks again
    for (const auto& [key, value] : items) {
      absl::StatusOr<bool> e = client_.Exists(t, key);
      if (!e.ok()) return e.status();
      if (*e) return absl::OkStatus();
    }
    set = true;
    return client_.MultiPut(t, items);
  });
  if (!s.ok()) return ErrorReply(s);  // an aborted transaction set nothing
  return Reply::Integer(set ? 1 : 0);
}

absl::StatusOr<std::vector<StatsRow>> KvCommands::StatsRows() { return client_.Stats(); }

// put (Redis's SET) and its options: each alone is one call of the store, which reads and
// writes in one transaction; NX or XX with GET, which the store has no call for, are
// ConditionalPut's transaction.
Reply KvCommands::Put(const Command& c) {
  const std::string& key = c.args[0];
  const std::string& value = c.args[1];
  if (c.get_old && !c.if_absent && !c.if_present) {
    return OldValueReply(client_.GetAndSet(key, value));
  }
  if (c.get_old) return ConditionalPut(c);
  if (!c.if_absent && !c.if_present) return OkReply(client_.Put(key, value));
  const absl::StatusOr<bool> set =
      c.if_absent ? client_.PutIfAbsent(key, value) : client_.PutIfPresent(key, value);
  if (!set.ok()) return ErrorReply(set.status());
  return *set ? Reply::Status("OK") : Reply::Nil();
}

// put KEY VALUE NX GET and XX GET: the old value is read and the new one written in one
// transaction, so the condition and GET see the value that the write replaces.
Reply KvCommands::ConditionalPut(const Command& c) {
  std::optional<std::string> old;
  absl::Status s = worker_.Run([&](Txn& t) -> absl::Status {
    old.reset();  // a retried attempt reads again
    absl::StatusOr<std::string> v = client_.Get(t, c.args[0]);
    if (v.ok()) {
      old = std::move(*v);
    } else if (!absl::IsNotFound(v.status())) {
      return v.status();
    }
    if ((c.if_absent && old.has_value()) || (c.if_present && !old.has_value())) {
      return absl::OkStatus();
    }
    return client_.Put(t, c.args[0], c.args[1]);
  });
  if (!s.ok()) return ErrorReply(s);  // an aborted transaction set nothing
  return old.has_value() ? Reply::String(std::move(*old)) : Reply::Nil();
}

}  // namespace kvsh
}  // namespace farm
