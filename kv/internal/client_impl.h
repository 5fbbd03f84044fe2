// kv/internal/client_impl.h: one thread's client (Client::Impl): the shards it has learnt, the
// lock-free GET (kv/lookup.cc), MultiGet's two paths (kv/multi_get.cc), and the writes, each a
// transaction over TableTxn (kv/client.cc).
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: belongs to its Worker's thread, as the Client.
#ifndef FARM_KV_INTERNAL_CLIENT_IMPL_H_
#define FARM_KV_INTERNAL_CLIENT_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "farm/farm.h"
#include "kv/internal/shard.h"
#include "kv/internal/store_impl.h"
#include "kv/internal/table_txn.h"
#include "kv/internal/wire.h"
#include "kv/kv.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {

struct Client::Impl {
  Store::Impl* store = nullptr;
  Worker* worker = nullptr;
  txn::ThreadContext* ctx = nullptr;
  // By position in store->shard_nodes, once described; checked again whenever the membership
  // epoch changes (`shards_epoch`): a shard whose region is gone is described anew.
  std::vector<std::optional<ShardInfo>> shards;
  uint64_t shards_epoch = 0;
  std::vector<std::string> scratch;                  // GET's copies (their memory is reused)
  MultiGetPath multi_get = MultiGetPath::kOneSided;  // resolved: never kAuto
  // Of a MultiGet by RPC, a node's keys travel in one request only when it serves at least this
  // many of them (kAutoMinBatch when kAuto chose kRpc, else 1); the others are read one-sided.
  size_t min_batch = 1;

  // Checks, errors and copies (kv/client.cc).
  absl::Status CheckKey(absl::string_view key) const;
  absl::Status CheckValue(absl::string_view value) const;
  // An error of an operation on shard `s`, said in the store's terms.
  absl::Status Annotate(const absl::Status& st, const ShardInfo& s) const;

  absl::Status Copy(absl::Span<const txn::Range> r, std::vector<std::string>* o);

  // The shards (kv/shard_directory.cc).
  // Shard node shard_nodes[i]'s shard, as `shards` keeps it.
  absl::StatusOr<const ShardInfo*> ShardAt(size_t i);
  // The shard of `key`, and the key's hash there (under the shard's seed).
  absl::StatusOr<const ShardInfo*> Shard(absl::string_view key, uint64_t* h);
  // The same for a key that may be malformed (InvalidArgument).
  absl::StatusOr<const ShardInfo*> CheckedShard(absl::string_view key, uint64_t* h);

  // The lock-free GET and its retries (kv/lookup.cc).

  // Lock-free GET.
  absl::StatusOr<std::string> Get(absl::string_view key, const std::string* first_copy);

  // Lock-free lookup of `key`, retried while its buckets change under it: whether it is there,
  // with its value in `*value` unless that is null (LookupOnce: then no value is copied).
  absl::StatusOr<bool> Find(absl::string_view key, const std::string* first_copy,
                            std::string* value);

  // MultiGet (kv/multi_get.cc).

  // One key's lookup in MultiGetOneSided's second phase, run again from the start each round:
  // its copies are served in the order it asked for them from what earlier rounds read for it;
  // one it has not been given yet is recorded (`pending`) and the run stops there with an error,
  // to be read with the other keys' in the next round. LookupOnce asks for the same copies in
  // the same order when it is given the same bytes, so each round takes every key one step
  // further: what a key reads still comes after what it read before (each round's READs start
  // after the previous round's completed), as in Get.
  struct Replay {
    std::vector<std::vector<txn::Range>> asked;
    std::vector<std::vector<std::string>> got;  // by request, once read
    size_t next = 0;                            // the run's next request
    bool pending = false;                       // the run stopped at asked.back()
    absl::Status Copy(absl::Span<const txn::Range> r, std::vector<std::string>* o) {
      if (next < got.size()) {
        const std::vector<txn::Range>& a = asked[next];
        const bool same = std::equal(a.begin(), a.end(), r.begin(), r.end(),
                                     [](const txn::Range& x, const txn::Range& y) {
                                       return x.addr == y.addr && x.len == y.len;
                                     });
        if (!same) return absl::InternalError("kv: a replayed lookup asked for other bytes");
        *o = got[next++];
        return absl::OkStatus();
      }
      asked.emplace_back(r.begin(), r.end());
      pending = true;
      return absl::UnavailableError("kv: the copy is read in the next round");
    }
  };

  // MultiGet by one-sided READs (MultiGetPath::kOneSided) of keys `which` of `keys`: every
  // neighbourhood's READ posted together, then the keys' lookups (Get's, from those copies) in
  // rounds whose READs are posted together too (out-of-line values, overflow chains, a miss's
  // re-check: see Replay). A key whose buckets changed under it is looked up again alone, as
  // Get does it.
  void MultiGetOneSided(absl::Span<const std::string> keys, absl::Span<const size_t> which,
                        std::vector<absl::StatusOr<std::string>>* out);

  // A node's part of one round of a MultiGet by RPC: one request, and the keys it carries
  // (indices into the MultiGet's keys, in the request's order).
  struct NodeBatch {
    uint32_t node = 0;
    MultiGetRequest request;
    std::vector<size_t> keys;
  };

  // One MultiGet by RPC (MultiGetPath::kRpc): the keys that are not settled yet.
  struct RpcMultiGet {
    absl::Span<const std::string> keys;
    std::vector<absl::StatusOr<std::string>>* out;
    std::vector<std::optional<ShardInfo>> shard;  // by key; a copy: Shard's may be re-described
    std::vector<size_t> todo;                     // to ask in the next round
    std::vector<size_t> one_sided;                // to read one-sided at the end
    // Why a key in `todo` is there, for when the time is up: Aborted (kept changing) or the
    // refusal; OK for a deferred key (read one-sided then).
    std::vector<absl::Status> why;
    bool refused = false;   // in this round: pause before the next
    bool changing = false;  // a key's buckets were being written: pause after 16 rounds
  };

  // Rounds of batched GETs (MultiGetRequest), each with one request per node that serves keys'
  // shards (more when its keys do not fit one request), all in flight together
  // (Worker::CallAll). A key answered "retry" (its buckets were being written), deferred (no
  // room left in the answer) or refused (sent just before a configuration change, or to a node
  // that no longer serves its shard) is asked again in the next round, as GetRpc asks again,
  // until the client's timeout. The one-sided path reads what no answer can carry: the keys of
  // shards this node serves itself (a copy of its own memory), values larger than a message, and
  // keys whose lookup or request failed otherwise, which it answers as MultiGet by READs would
  // (e.g. Unavailable, or the value from a promoted backup).
  void MultiGetByRpc(absl::Span<const std::string> keys,
                     std::vector<absl::StatusOr<std::string>>* out);

  // The keys of m.todo in requests to the nodes that serve their shards now; the keys of shards
  // this node serves (or whose serving node it cannot tell) go to m.one_sided.
  std::vector<NodeBatch> Batches(RpcMultiGet& m, bool first_round);

  // Settles the keys of `b` by its answer, or puts them back in m.todo or m.one_sided.
  void TakeAnswer(const NodeBatch& b, const absl::StatusOr<std::string>& answer, RpcMultiGet* m);

  static void Again(size_t i, absl::Status why, RpcMultiGet* m);
  static void Refused(size_t i, absl::Status why, RpcMultiGet* m);

  // The writes, each a transaction over the key's TableTxn (kv/client.cc).

  // Runs `fn` on the key's part of the table in transaction `t`.
  absl::Status WithTable(txn::Transaction& t, absl::string_view key,
                         const std::function<absl::Status(TableTxn&)>& fn);

  // InvalidArgument if any key or value of `items` is malformed; else the index of each key's
  // last occurrence (its value is the one MultiPut sets), in order.
  absl::StatusOr<std::vector<size_t>> CheckItems(
      absl::Span<const std::pair<std::string, std::string>> items) const;

  // Sets the keys items[order[k]] to their values in transaction `t`: the neighbourhoods' READs
  // in flight together, then each key's lookup and change as Put(Txn&, ...) does them.
  absl::Status PutAll(txn::Transaction& t,
                      absl::Span<const std::pair<std::string, std::string>> items,
                      const std::vector<size_t>& order);

  // Runs `fn` in transactions until one commits (Worker::Run).
  absl::Status Run(absl::string_view key, const std::function<absl::Status(TableTxn&)>& fn);

  // One read-modify-write of `key` (UpdateIn) in the caller's transaction, or (`caller` null) in
  // transactions of its own until one commits (Run). An error that `update` returns is the
  // operation's refusal (e.g. "not an integer"): it changes nothing, and is returned once the
  // transaction that read the refused value committed (read-only, validated: so a refusal is
  // linearizable too), or at once in the caller's transaction (validated when that commits).
  absl::Status Modify(Txn* caller, absl::string_view key, bool read_value,
                      absl::FunctionRef<absl::StatusOr<NewValue>(std::string* value)> update);

  // Sets `key` to `value` if `condition` holds for its current value (null: absent; its bytes
  // only with `read_value`): true if it did.
  absl::StatusOr<bool> PutIf(Txn* caller, absl::string_view key, absl::string_view value,
                             bool read_value,
                             absl::FunctionRef<bool(const std::string* current)> condition);

  absl::StatusOr<int64_t> IncrBy(Txn* caller, absl::string_view key, int64_t delta);

  absl::StatusOr<std::optional<std::string>> GetAndSet(Txn* caller, absl::string_view key,
                                                       absl::string_view value);

  absl::StatusOr<uint64_t> Append(Txn* caller, absl::string_view key, absl::string_view suffix);
};

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_CLIENT_IMPL_H_
