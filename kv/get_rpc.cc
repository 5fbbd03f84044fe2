// GET by RPC (Client::GetRpc, HERD's single round trip): the serving node runs the lock-free
// lookup in its own memory (Store::Impl::LookupServed, also the batched GET's).

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/runtime_impl.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/lookup.h"
#include "kv/internal/store_impl.h"
#include "kv/internal/wire.h"

namespace farm {
namespace kv {

absl::StatusOr<Lookup> Store::Impl::LookupServed(const ShardInfo& s, absl::string_view key,
                                                 std::vector<std::string>* scratch,
                                                 std::string* value) {
  auto local = [this](GlobalAddress at, uint64_t len) { return rt->Local(at, len); };
  const LocalFn local_fn = local;
  return LookupOnce(
      s, key, KeyHash(s.seed, key),
      [this](absl::Span<const txn::Range> r, std::vector<std::string>* o) {
        return LocalCopy(r, o);
      },
      nullptr, scratch, value, &local_fn);
}

absl::StatusOr<std::string> Store::Impl::ServeGet(absl::string_view request) {
  absl::string_view key;
  absl::StatusOr<ShardInfo> shard = ServedShard(request, &key);
  if (!shard.ok()) return shard.status();
  std::string value;
  std::vector<std::string> scratch;
  absl::StatusOr<Lookup> l = LookupServed(*shard, key, &scratch, &value);
  if (!l.ok()) return l.status();
  if (*l == Lookup::kRetry) return std::string(1, kRpcRetry);
  if (*l == Lookup::kMissing) return std::string(1, kRpcMissing);
  if (value.size() + 1 > max_rpc_answer) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv: a value of ", value.size(), " bytes does not fit one RPC answer (",
                     max_rpc_answer, " bytes); read it with a one-sided GET"));
  }
  return absl::StrCat(std::string(1, kRpcFound), value);
}

absl::StatusOr<std::string> Client::GetRpc(absl::string_view key) {
  if (absl::Status st = impl_->CheckKey(key); !st.ok()) return st;
  uint64_t h = 0;
  absl::StatusOr<const ShardInfo*> s = impl_->Shard(key, &h);
  if (!s.ok()) return s.status();
  const absl::Time deadline = absl::Now() + impl_->ctx->timeout;
  std::string request(8, '\0');
  const uint64_t first = (*s)->first.Pack();
  std::memcpy(request.data(), &first, 8);
  request.append(key.data(), key.size());
  for (int attempt = 0;; ++attempt) {
    // The node serving the shard's region now: its shard node, or the backup promoted after it
    // failed.
    absl::StatusOr<uint32_t> at = impl_->store->ServingNode((*s)->first);
    absl::StatusOr<std::string> r =
        at.ok() ? impl_->worker->Call(*at, impl_->store->get_method(), request) : at.status();
    if ((absl::IsAborted(r.status()) || absl::IsFailedPrecondition(r.status())) &&
        absl::Now() < deadline) {
      // Refused unexecuted (sent just before a configuration change the shard's node had
      // applied, rpc.h), or sent to a node that no longer serves the region: ask again.
      absl::SleepFor(absl::Microseconds(20));
      continue;
    }
    if (!r.ok()) return impl_->Annotate(r.status(), **s);
    if (r->empty()) return absl::DataLossError("kv: an empty GET answer");
    if ((*r)[0] == kRpcFound) return r->substr(1);
    if ((*r)[0] == kRpcMissing) return absl::NotFoundError("kv: no such key");
    if ((*r)[0] != kRpcRetry) return absl::DataLossError("kv: a GET answer of an unknown kind");
    if (absl::Now() > deadline) {
      return absl::AbortedError(
          absl::StrCat("kv: the key's buckets on node ", (*s)->node, " kept changing"));
    }
    if (attempt > 16) absl::SleepFor(absl::Microseconds(20));
  }
}

}  // namespace kv
}  // namespace farm
