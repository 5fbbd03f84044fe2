// The Client: its checks of keys and values, and every write, each a transaction (of its own, or
// the caller's) over the key's TableTxn: Put, MultiPut, Delete and the conditional and atomic
// updates.

#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "api/runtime_impl.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/table_txn.h"

namespace farm {
namespace kv {

namespace {

// A decimal int64 as Redis reads one (string2ll, checked against redis-server 7.0): an optional
// '-', then digits, the first not '0' unless it is "0" alone (so neither "007" nor "-0"), and
// nothing else (no '+', no spaces, no decimal point); nullopt if it is not one or is outside
// int64.
std::optional<int64_t> ParseRedisInteger(absl::string_view s) {
  if (s == "0") return 0;
  const bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  if (s.empty() || s[0] < '1' || s[0] > '9') return std::nullopt;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  if (!negative) return v <= kMax ? std::optional<int64_t>(static_cast<int64_t>(v)) : std::nullopt;
  if (v > kMax + 1) return std::nullopt;
  return -static_cast<int64_t>(v - 1) - 1;  // -v without overflow for v = 2^63
}

// The conditions of PutIfAbsent and PutIfPresent (Client::Impl::PutIf).
bool Absent(const std::string* current) { return current == nullptr; }
bool Present(const std::string* current) { return current != nullptr; }

}  // namespace

absl::Status Client::Impl::CheckKey(absl::string_view key) const {
  if (key.empty()) return absl::InvalidArgumentError("kv: a key has at least 1 byte");
  if (key.size() > kMaxKeySize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv: a key of ", key.size(), " bytes is longer than the limit of ", kMaxKeySize, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::CheckValue(absl::string_view value) const {
  if (value.size() > store->max_value) {
    return absl::InvalidArgumentError(absl::StrCat("kv: a value of ", value.size(),
                                                   " bytes is larger than the limit of ",
                                                   store->max_value, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::Annotate(const absl::Status& st, const ShardInfo& s) const {
  if (st.ok() || absl::IsNotFound(st) || absl::IsInvalidArgument(st)) return st;
  if (absl::IsOutOfRange(st) || absl::IsUnavailable(st)) {
    return absl::UnavailableError(
        absl::StrCat("kv: the key's shard on node ", s.node, " cannot be reached: ", st.message()));
  }
  return st;
}

absl::Status Client::Impl::Copy(absl::Span<const txn::Range> r, std::vector<std::string>* o) {
  return txn::CopyRanges(*ctx, r, o);
}

absl::Status Client::Impl::WithTable(txn::Transaction& t, absl::string_view key,
                                     const std::function<absl::Status(TableTxn&)>& fn) {
  if (absl::Status st = CheckKey(key); !st.ok()) return st;
  uint64_t h = 0;
  absl::StatusOr<const ShardInfo*> s = Shard(key, &h);
  if (!s.ok()) return s.status();
  TableTxn table(t, **s, key, h, store->inline_max);
  absl::Status st = table.Load();
  if (st.ok()) st = fn(table);
  // Objects the table pointed to that were freed or reused under this transaction are
  // Aborted already (TableTxn::Changed); any other NotFound or InvalidArgument is a fault.
  return Annotate(st, **s);
}

absl::StatusOr<std::vector<size_t>> Client::Impl::CheckItems(
    absl::Span<const std::pair<std::string, std::string>> items) const {
  absl::flat_hash_map<absl::string_view, size_t> last;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status st = CheckKey(items[i].first);
    if (st.ok()) st = CheckValue(items[i].second);
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("item ", i, " of ", items.size(), ": ",
                                                  st.message(), " (nothing was set)"));
    }
    last[items[i].first] = i;
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    if (last[items[i].first] == i) order.push_back(i);
  }
  return order;
}

absl::Status Client::Impl::PutAll(txn::Transaction& t,
                                  absl::Span<const std::pair<std::string, std::string>> items,
                                  const std::vector<size_t>& order) {
  if (order.empty()) return absl::OkStatus();
  // Copies: a shard's entry in `shards` may be described anew while later keys are placed.
  std::vector<ShardInfo> shard(order.size());
  std::deque<TableTxn> tables;
  std::vector<TableTxn*> pointers;
  for (size_t k = 0; k < order.size(); ++k) {
    uint64_t h = 0;
    absl::StatusOr<const ShardInfo*> s = Shard(items[order[k]].first, &h);
    if (!s.ok()) return s.status();
    shard[k] = **s;
    tables.emplace_back(t, shard[k], items[order[k]].first, h, store->inline_max);
    pointers.push_back(&tables.back());
  }
  size_t failed = 0;
  if (absl::Status st = TableTxn::ReadNeighbourhoods(t, pointers, &failed); !st.ok()) {
    if (failed < order.size()) return Annotate(st, shard[failed]);
    if (!absl::IsOutOfRange(st) && !absl::IsUnavailable(st)) return st;
    return absl::UnavailableError(
        absl::StrCat("kv: a shard of the keys cannot be reached: ", st.message()));
  }
  for (size_t k = 0; k < order.size(); ++k) {
    absl::Status st = tables[k].Load();
    if (st.ok()) st = PutIn(tables[k], items[order[k]].second);
    if (!st.ok()) return Annotate(st, shard[k]);
  }
  return absl::OkStatus();
}

absl::Status Client::Impl::Run(absl::string_view key,
                               const std::function<absl::Status(TableTxn&)>& fn) {
  return worker->Run(
      [&](Txn& t) -> absl::Status { return WithTable(RuntimeAccess::Of(t).t, key, fn); });
}

absl::Status Client::Impl::Modify(
    Txn* caller, absl::string_view key, bool read_value,
    absl::FunctionRef<absl::StatusOr<NewValue>(std::string* value)> update) {
  absl::Status refused;
  auto fn = [&](TableTxn& table) -> absl::Status {
    refused = absl::OkStatus();  // of an earlier attempt, which did not commit
    return UpdateIn(table, read_value, [&](std::string* value) {
      absl::StatusOr<NewValue> next = update(value);
      refused = next.status();
      return next.ok() ? *next : NewValue();
    });
  };
  absl::Status st =
      caller != nullptr ? WithTable(RuntimeAccess::Of(*caller).t, key, fn) : Run(key, fn);
  if (!st.ok()) return st;
  return refused;
}

absl::StatusOr<bool> Client::Impl::PutIf(
    Txn* caller, absl::string_view key, absl::string_view value, bool read_value,
    absl::FunctionRef<bool(const std::string* current)> condition) {
  if (absl::Status st = CheckValue(value); !st.ok()) return st;
  bool set = false;
  absl::Status st = Modify(caller, key, read_value, [&](std::string* current) {
    set = condition(current);
    return absl::StatusOr<NewValue>(set ? NewValue(value) : NewValue());
  });
  if (!st.ok()) return st;
  return set;
}

absl::StatusOr<int64_t> Client::Impl::IncrBy(Txn* caller, absl::string_view key, int64_t delta) {
  int64_t sum = 0;
  std::string text;
  absl::Status st =
      Modify(caller, key, true, [&](std::string* current) -> absl::StatusOr<NewValue> {
        const std::optional<int64_t> now =
            current == nullptr ? std::optional<int64_t>(0) : ParseRedisInteger(*current);
        if (!now.has_value()) {
          return absl::FailedPreconditionError("kv: value is not an integer or out of range");
        }
        constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
        constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
        if ((delta > 0 && *now > kMax - delta) || (delta < 0 && *now < kMin - delta)) {
          return absl::FailedPreconditionError("kv: increment or decrement would overflow");
        }
        sum = *now + delta;
        text = absl::StrCat(sum);
        return NewValue(text);
      });
  if (!st.ok()) return st;
  return sum;
}

absl::StatusOr<std::optional<std::string>> Client::Impl::GetAndSet(Txn* caller,
                                                                   absl::string_view key,
                                                                   absl::string_view value) {
  if (absl::Status st = CheckValue(value); !st.ok()) return st;
  std::optional<std::string> old;
  absl::Status st = Modify(caller, key, true, [&](std::string* current) {
    old.reset();
    if (current != nullptr) old = std::move(*current);
    return absl::StatusOr<NewValue>(NewValue(value));
  });
  if (!st.ok()) return st;
  return old;
}

absl::StatusOr<uint64_t> Client::Impl::Append(Txn* caller, absl::string_view key,
                                              absl::string_view suffix) {
  if (absl::Status st = CheckValue(suffix); !st.ok()) return st;
  uint64_t length = 0;
  absl::Status st =
      Modify(caller, key, true, [&](std::string* current) -> absl::StatusOr<NewValue> {
        const uint64_t now = current == nullptr ? 0 : current->size();
        if (now + suffix.size() > store->max_value) {
          return absl::InvalidArgumentError(absl::StrCat(
              "kv: appending ", suffix.size(), " bytes to a value of ", now,
              " bytes would pass the limit of ", store->max_value, " bytes (nothing was changed)"));
        }
        length = now + suffix.size();
        if (current == nullptr) return NewValue(suffix);  // created, as Redis's APPEND does
        if (suffix.empty()) return NewValue();            // nothing to write
        current->append(suffix.data(), suffix.size());
        return NewValue(*current);
      });
  if (!st.ok()) return st;
  return length;
}

Client::Client(Store& store, Worker& worker) : impl_(std::make_unique<Impl>()) {
  impl_->store = store.impl_.get();
  impl_->worker = &worker;
  impl_->ctx = &RuntimeAccess::Of(worker).txn_context;
  set_multi_get(store.options().multi_get);
}

Client::~Client() = default;

absl::StatusOr<std::string> Client::Get(absl::string_view key) { return impl_->Get(key, nullptr); }

absl::Status Client::Put(absl::string_view key, absl::string_view value) {
  if (absl::Status st = impl_->CheckValue(value); !st.ok()) return st;
  return impl_->Run(key, [&](TableTxn& table) { return PutIn(table, value); });
}

absl::Status Client::MultiPut(absl::Span<const std::pair<std::string, std::string>> items) {
  absl::StatusOr<std::vector<size_t>> order = impl_->CheckItems(items);
  if (!order.ok()) return order.status();
  if (order->empty()) return absl::OkStatus();
  return impl_->worker->Run(
      [&](Txn& t) -> absl::Status { return impl_->PutAll(RuntimeAccess::Of(t).t, items, *order); });
}

absl::StatusOr<bool> Client::Delete(absl::string_view key) {
  bool deleted = false;
  absl::Status st = impl_->Run(key, [&](TableTxn& table) { return DeleteIn(table, &deleted); });
  if (!st.ok()) return st;
  return deleted;
}

absl::StatusOr<bool> Client::CompareAndSet(absl::string_view key,
                                           const std::optional<std::string>& expected,
                                           absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, expected.has_value(), [&](const std::string* current) {
    return expected.has_value() ? current != nullptr && *current == *expected : current == nullptr;
  });
}

absl::StatusOr<int64_t> Client::IncrBy(absl::string_view key, int64_t delta) {
  return impl_->IncrBy(nullptr, key, delta);
}

absl::StatusOr<bool> Client::PutIfAbsent(absl::string_view key, absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, false, Absent);
}

absl::StatusOr<bool> Client::PutIfPresent(absl::string_view key, absl::string_view value) {
  return impl_->PutIf(nullptr, key, value, false, Present);
}

absl::StatusOr<std::optional<std::string>> Client::GetAndSet(absl::string_view key,
                                                             absl::string_view value) {
  return impl_->GetAndSet(nullptr, key, value);
}

absl::StatusOr<uint64_t> Client::Append(absl::string_view key, absl::string_view suffix) {
  return impl_->Append(nullptr, key, suffix);
}

absl::StatusOr<bool> Client::Exists(absl::string_view key) {
  return impl_->Find(key, nullptr, nullptr);
}

absl::StatusOr<std::string> Client::Get(Txn& t, absl::string_view key) {
  std::string value;
  bool found = false;
  absl::Status st = impl_->WithTable(RuntimeAccess::Of(t).t, key,
                                     [&](TableTxn& table) { return GetIn(table, &found, &value); });
  if (!st.ok()) return st;
  if (!found) return absl::NotFoundError("kv: no such key");
  return value;
}

absl::Status Client::Put(Txn& t, absl::string_view key, absl::string_view value) {
  if (absl::Status st = impl_->CheckValue(value); !st.ok()) return st;
  return impl_->WithTable(RuntimeAccess::Of(t).t, key,
                          [&](TableTxn& table) { return PutIn(table, value); });
}

absl::Status Client::MultiPut(Txn& t, absl::Span<const std::pair<std::string, std::string>> items) {
  absl::StatusOr<std::vector<size_t>> order = impl_->CheckItems(items);
  if (!order.ok()) return order.status();
  return impl_->PutAll(RuntimeAccess::Of(t).t, items, *order);
}

absl::StatusOr<bool> Client::Delete(Txn& t, absl::string_view key) {
  bool deleted = false;
  absl::Status st = impl_->WithTable(RuntimeAccess::Of(t).t, key,
                                     [&](TableTxn& table) { return DeleteIn(table, &deleted); });
  if (!st.ok()) return st;
  return deleted;
}

absl::StatusOr<int64_t> Client::IncrBy(Txn& t, absl::string_view key, int64_t delta) {
  return impl_->IncrBy(&t, key, delta);
}

absl::StatusOr<bool> Client::PutIfAbsent(Txn& t, absl::string_view key, absl::string_view value) {
  return impl_->PutIf(&t, key, value, false, Absent);
}

absl::StatusOr<bool> Client::PutIfPresent(Txn& t, absl::string_view key, absl::string_view value) {
  return impl_->PutIf(&t, key, value, false, Present);
}

absl::StatusOr<std::optional<std::string>> Client::GetAndSet(Txn& t, absl::string_view key,
                                                             absl::string_view value) {
  return impl_->GetAndSet(&t, key, value);
}

absl::StatusOr<uint64_t> Client::Append(Txn& t, absl::string_view key, absl::string_view suffix) {
  return impl_->Append(&t, key, suffix);
}

absl::StatusOr<bool> Client::Exists(Txn& t, absl::string_view key) {
  bool found = false;
  absl::Status st = impl_->Modify(&t, key, false, [&](std::string* current) {
    found = current != nullptr;
    return absl::StatusOr<NewValue>(NewValue());
  });
  if (!st.ok()) return st;
  return found;
}

}  // namespace kv
}  // namespace farm
