// MultiGet: by one-sided READs posted together in rounds, or by batched GET RPCs (the serving
// node's handler, Store::Impl::ServeMultiGet, is here too), and the choice between them.

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/runtime_impl.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/lookup.h"
#include "kv/internal/store_impl.h"
#include "kv/internal/wire.h"
#include "platform/sync_point.h"

namespace farm {
namespace kv {

// Batches by RPC where a one-sided READ is a system call or the target's work (ofi_rxm's
// emulation over TCP, libfabric's tcp provider, shm's cross-memory attach); see
// MultiGetPath::kAuto.
MultiGetPath ResolveMultiGet(MultiGetPath path, absl::string_view provider) {
  if (path != MultiGetPath::kAuto) return path;
  return provider == "tcp;ofi_rxm" || provider == "tcp" || provider == "shm"
             ? MultiGetPath::kRpc
             : MultiGetPath::kOneSided;
}

absl::StatusOr<std::string> Store::Impl::ServeMultiGet(absl::string_view request) {
  uint32_t n = 0;
  if (request.size() >= 4) std::memcpy(&n, request.data(), 4);
  if (request.size() < 4 + 8 * uint64_t{n}) {
    return absl::InvalidArgumentError("kv: a batched GET without its shards");
  }
  std::vector<std::optional<absl::StatusOr<ShardInfo>>> shards(n);
  absl::string_view rest = request.substr(4 + 8 * uint64_t{n});
  MultiGetAnswer answer(max_rpc_answer);
  std::string value;
  std::vector<std::string> scratch;
  size_t looked_at = 0;
  for (; !rest.empty() && !answer.full(); ++looked_at) {
    uint16_t head[2];
    if (rest.size() < sizeof(head)) return absl::InvalidArgumentError("kv: a truncated batch");
    std::memcpy(head, rest.data(), sizeof(head));
    if (head[0] >= n || rest.size() < sizeof(head) + head[1]) {
      return absl::InvalidArgumentError("kv: a batched GET's key is not one");
    }
    const absl::string_view key = rest.substr(sizeof(head), head[1]);
    rest.remove_prefix(sizeof(head) + head[1]);
    std::optional<absl::StatusOr<ShardInfo>>& shard = shards[head[0]];
    if (!shard.has_value()) {
      uint64_t packed;
      std::memcpy(&packed, request.data() + 4 + 8 * head[0], 8);
      shard = ServedShardAt(GlobalAddress::Unpack(packed));
    }
    if (!shard->ok()) {
      answer.Error(shard->status());
      continue;
    }
    absl::StatusOr<Lookup> l = LookupServed(**shard, key, &scratch, &value);
    if (!l.ok()) {
      answer.Error(l.status());
    } else if (*l == Lookup::kFound) {
      answer.Found(value);
    } else {
      answer.Outcome(*l == Lookup::kMissing ? kRpcMissing : kRpcRetry);
    }
  }
  // Tests count the requests, the keys looked at (whose outcome the answer carries), and the
  // deferrals: values that did not fit, plus one if the answer filled before the last key.
  size_t carried[2] = {looked_at, answer.deferred() + (rest.empty() ? 0 : 1)};
  std::string out = answer.Take();
  FARM_SYNC_POINT_CALLBACK("kv::Store::ServeMultiGet:Answer", carried);
  return out;
}

void Client::Impl::MultiGetOneSided(absl::Span<const std::string> keys,
                                    absl::Span<const size_t> which,
                                    std::vector<absl::StatusOr<std::string>>* out) {
  std::vector<txn::Range> ranges;
  std::vector<size_t> read;
  std::vector<ShardInfo> shards;  // by entry of `read`; copies: Shard's may be re-described
  std::vector<uint64_t> hashes;
  for (size_t i : which) {
    uint64_t h = 0;
    absl::StatusOr<const ShardInfo*> s = CheckedShard(keys[i], &h);
    if (!s.ok()) {
      (*out)[i] = s.status();
      continue;
    }
    const ShardInfo& shard = **s;
    ranges.push_back(txn::Range{shard.Bucket(shard.Home(h)),
                                uint64_t{shard.neighbourhood} * shard.bucket_bytes});
    read.push_back(i);
    shards.push_back(shard);
    hashes.push_back(h);
  }
  std::vector<std::string> copies;
  const absl::Status batch = Copy(ranges, &copies);
  if (!batch.ok()) {
    for (size_t i : read) (*out)[i] = Get(keys[i], nullptr);
    return;
  }
  std::vector<Replay> replays(read.size());
  std::vector<size_t> running(read.size());  // indices into `read` still being looked up
  for (size_t k = 0; k < read.size(); ++k) running[k] = k;
  std::vector<std::string> unused;
  while (!running.empty()) {
    std::vector<size_t> waiting;  // stopped at a copy not read yet
    for (size_t k : running) {
      const size_t i = read[k];
      Replay& r = replays[k];
      r.next = 0;
      r.pending = false;
      std::string value;
      absl::StatusOr<Lookup> l = LookupOnce(
          shards[k], keys[i], hashes[k],
          [&r](absl::Span<const txn::Range> rr, std::vector<std::string>* o) {
            return r.Copy(rr, o);
          },
          &copies[k], &unused, &value);
      if (r.pending) {
        waiting.push_back(k);
      } else if (!l.ok()) {
        (*out)[i] = Annotate(l.status(), shards[k]);
      } else if (*l == Lookup::kFound) {
        (*out)[i] = std::move(value);
      } else if (*l == Lookup::kMissing) {
        (*out)[i] = absl::NotFoundError("kv: no such key");
      } else {
        (*out)[i] = Get(keys[i], nullptr);  // changed under it: again, alone
      }
    }
    if (waiting.empty()) break;
    // The waiting keys' next copies, posted together.
    std::vector<txn::Range> next;
    for (size_t k : waiting) {
      const std::vector<txn::Range>& a = replays[k].asked.back();
      next.insert(next.end(), a.begin(), a.end());
    }
    // Tests count the rounds and the keys whose copies each one reads together.
    size_t batched = waiting.size();
    FARM_SYNC_POINT_CALLBACK("kv::Client::MultiGetOneSided:Round", &batched);
    std::vector<std::string> got;
    if (!Copy(next, &got).ok()) {
      for (size_t k : waiting) (*out)[read[k]] = Get(keys[read[k]], nullptr);
      break;
    }
    size_t at = 0;
    for (size_t k : waiting) {
      const size_t n = replays[k].asked.back().size();
      replays[k].got.emplace_back(std::make_move_iterator(got.begin() + at),
                                  std::make_move_iterator(got.begin() + at + n));
      at += n;
    }
    running = std::move(waiting);
  }
}

void Client::Impl::MultiGetByRpc(absl::Span<const std::string> keys,
                                 std::vector<absl::StatusOr<std::string>>* out) {
  RpcMultiGet m{keys, out, std::vector<std::optional<ShardInfo>>(keys.size())};
  m.why.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t h = 0;
    absl::StatusOr<const ShardInfo*> s = CheckedShard(keys[i], &h);
    if (!s.ok()) {
      (*out)[i] = s.status();
      continue;
    }
    m.shard[i] = **s;
    m.todo.push_back(i);
  }
  const absl::Time deadline = absl::Now() + ctx->timeout;
  for (int round = 0; !m.todo.empty(); ++round) {
    std::vector<NodeBatch> batches = Batches(m, round == 0);
    std::vector<std::string> requests;
    std::vector<CallRequest> calls;
    for (const NodeBatch& b : batches) requests.push_back(b.request.Encode());
    for (size_t b = 0; b < batches.size(); ++b) {
      calls.push_back(CallRequest{batches[b].node, store->multi_get_method(), requests[b]});
    }
    const std::vector<absl::StatusOr<std::string>> answers = worker->CallAll(calls, ctx->timeout);
    m.refused = m.changing = false;
    for (size_t b = 0; b < batches.size(); ++b) TakeAnswer(batches[b], answers[b], &m);
    if (m.todo.empty()) break;
    if (absl::Now() > deadline) {
      for (size_t i : m.todo) {
        if (m.why[i].ok()) {
          m.one_sided.push_back(i);
        } else {
          (*out)[i] = m.why[i];
        }
      }
      break;
    }
    if (m.refused || (m.changing && round >= 16)) absl::SleepFor(absl::Microseconds(20));
  }
  MultiGetOneSided(keys, m.one_sided, out);
}

std::vector<Client::Impl::NodeBatch> Client::Impl::Batches(RpcMultiGet& m, bool first_round) {
  std::vector<NodeBatch> batches;
  absl::flat_hash_map<uint32_t, size_t> filling;                       // node -> its last batch
  std::vector<std::pair<GlobalAddress, absl::StatusOr<uint32_t>>> at;  // shard -> node
  auto node_of = [&](size_t i) {
    const GlobalAddress first = m.shard[i]->first;
    auto node = std::find_if(at.begin(), at.end(), [&](const auto& a) { return a.first == first; });
    if (node == at.end()) node = at.emplace(at.end(), first, store->ServingNode(first));
    return node;
  };
  // In the first round, nodes with fewer than min_batch of the keys are read one-sided.
  absl::flat_hash_map<uint32_t, size_t> per_node;
  if (first_round && min_batch > 1) {
    for (size_t i : m.todo) {
      auto node = node_of(i);
      if (node->second.ok()) ++per_node[*node->second];
    }
  }
  for (size_t i : m.todo) {
    const GlobalAddress first = m.shard[i]->first;
    auto node = node_of(i);
    if (!node->second.ok() || *node->second == worker->node_id() ||
        (!per_node.empty() && per_node[*node->second] < min_batch)) {
      m.one_sided.push_back(i);
      continue;
    }
    auto b = filling.find(*node->second);
    if (b == filling.end() || !batches[b->second].request.Add(first, m.keys[i])) {
      batches.push_back(NodeBatch{*node->second, MultiGetRequest(store->max_rpc_answer), {}});
      b = filling.insert_or_assign(*node->second, batches.size() - 1).first;
      if (!batches.back().request.Add(first, m.keys[i])) {  // a key is far below a message
        m.one_sided.push_back(i);
        continue;
      }
    }
    batches[b->second].keys.push_back(i);
  }
  m.todo.clear();
  return batches;
}

void Client::Impl::TakeAnswer(const NodeBatch& b, const absl::StatusOr<std::string>& answer,
                              RpcMultiGet* m) {
  std::vector<absl::StatusOr<std::string>>& out = *m->out;
  if (!answer.ok()) {
    const absl::Status& st = answer.status();
    for (size_t i : b.keys) {
      if (absl::IsAborted(st) || absl::IsFailedPrecondition(st)) {
        Refused(i, Annotate(st, *m->shard[i]), m);  // unexecuted: ask again
      } else if (absl::IsDeadlineExceeded(st)) {
        out[i] = Annotate(st, *m->shard[i]);  // as GetRpc's; not another timeout one-sided
      } else {
        m->one_sided.push_back(i);
      }
    }
    return;
  }
  absl::string_view rest = *answer;
  absl::Status unreadable;  // the answer's, for this key and every key after it
  for (size_t i : b.keys) {
    RpcGetOutcome o = kRpcDeferred;
    absl::string_view value;
    absl::Status error;
    if (unreadable.ok()) unreadable = MultiGetAnswer::Next(&rest, &o, &value, &error).status();
    if (!unreadable.ok()) {
      out[i] = unreadable;
      continue;
    }
    switch (o) {
      case kRpcFound:
        out[i] = std::string(value);
        break;
      case kRpcMissing:
        out[i] = absl::NotFoundError("kv: no such key");
        break;
      case kRpcRetry:
        m->changing = true;
        Again(i,
              absl::AbortedError(absl::StrCat("kv: the key's buckets on node ", m->shard[i]->node,
                                              " kept changing")),
              m);
        break;
      case kRpcDeferred:  // also the keys after the answer's end
        Again(i, absl::OkStatus(), m);
        break;
      case kRpcError:
        if (absl::IsAborted(error) || absl::IsFailedPrecondition(error)) {
          Refused(i, Annotate(error, *m->shard[i]), m);  // e.g. the shard moved meanwhile
          break;
        }
        [[fallthrough]];
      case kRpcTooLarge:
        m->one_sided.push_back(i);
        break;
    }
  }
}

void Client::Impl::Again(size_t i, absl::Status why, RpcMultiGet* m) {
  m->why[i] = std::move(why);
  m->todo.push_back(i);
}

void Client::Impl::Refused(size_t i, absl::Status why, RpcMultiGet* m) {
  m->refused = true;
  Again(i, std::move(why), m);
}

std::vector<absl::StatusOr<std::string>> Client::MultiGet(absl::Span<const std::string> keys) {
  std::vector<absl::StatusOr<std::string>> out(keys.size(), absl::UnknownError("not read"));
  if (impl_->multi_get == MultiGetPath::kRpc) {
    impl_->MultiGetByRpc(keys, &out);
  } else {
    std::vector<size_t> all(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) all[i] = i;
    impl_->MultiGetOneSided(keys, all, &out);
  }
  return out;
}

MultiGetPath Client::multi_get() const { return impl_->multi_get; }

void Client::set_multi_get(MultiGetPath path) {
  impl_->multi_get = ResolveMultiGet(path, impl_->store->rt->provider());
  impl_->min_batch =
      path == MultiGetPath::kAuto && impl_->multi_get == MultiGetPath::kRpc ? kAutoMinBatch : 1;
}

}  // namespace kv
}  // namespace farm
