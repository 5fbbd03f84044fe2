// Statistics: each shard's serving node counts its entries and the memory they take
// (Store::Impl::ServeStats); Client::Stats asks every shard, Client::Size sums their counts.

#include <cstring>
#include <string>

#include "kv/bucket.h"
#include "kv/internal/client_impl.h"
#include "kv/internal/store_impl.h"
#include "kv/internal/value.h"
#include "kv/internal/wire.h"
#include "txn/object.h"

namespace farm {
namespace kv {

namespace {

// The memory an object of `payload` bytes takes: the smallest power of two from 64 bytes that
// holds it with its header.
uint64_t SlotBytes(uint64_t payload) {
  uint64_t slot = 64;
  while (slot < txn::ObjectSpan(payload)) slot <<= 1;
  return slot;
}

}  // namespace

absl::StatusOr<StatsReply> Store::Impl::ServeStats(absl::string_view request) {
  StatsReply r;
  absl::string_view rest;
  absl::StatusOr<ShardInfo> shard = ServedShard(request, &rest);
  if (!shard.ok()) return shard.status();
  const ShardInfo& s = *shard;
  r.buckets = s.total;
  r.bucket_bytes = s.bucket_bytes;
  r.memory_bytes = s.total * s.bucket_bytes;
  std::vector<std::string> c;
  auto count = [&](absl::string_view payload) -> absl::Status {
    absl::StatusOr<std::vector<Entry>> entries = ParseEntries(payload);
    if (!entries.ok()) return entries.status();
    for (const Entry& e : *entries) {
      ++r.items;
      if (e.delta > 0) ++r.displaced_items;
      uint64_t slots = 0;
      if (e.kind == kInline) {
        ++r.inline_items;
      } else if (e.kind == kOutOfLine) {
        slots = SlotBytes(ItemSize(e.key_len, e.value_len));
      } else {
        slots = SlotBytes(IndexSize(e.key_len, e.value_len, s.chunk_bytes));
        for (uint64_t i = 0; i < ChunkCount(e.value_len, s.chunk_bytes); ++i) {
          slots += SlotBytes(kChunkHeader + ChunkLen(e.value_len, s.chunk_bytes, i));
        }
      }
      r.out_of_line_bytes += slots;
      r.memory_bytes += slots;
    }
    return absl::OkStatus();
  };
  for (uint64_t i = 0; i < s.total; ++i) {
    const txn::Range range{s.Bucket(i), s.bucket_bytes};
    if (absl::Status st = LocalCopy(absl::MakeConstSpan(&range, 1), &c); !st.ok()) return st;
    txn::ObjectView v;
    if (txn::DecodeObject(c[0].data(), s.payload(), &v) != txn::ObjectState::kOk) {
      continue;  // being written: counted as it was (statistics, not a snapshot)
    }
    const std::string payload(v.payload);
    if (absl::Status st = count(payload); !st.ok()) return st;
    GlobalAddress link;
    bool has = ReadLink(payload, &link);
    for (int n = 0; has && n < (1 << 20); ++n) {
      const txn::Range br{link, txn::ObjectSpan(s.payload())};
      if (!LocalCopy(absl::MakeConstSpan(&br, 1), &c).ok()) break;  // not on this node
      if (txn::DecodeObject(c[0].data(), s.payload(), &v) != txn::ObjectState::kOk) break;
      absl::string_view entries;
      if (!BlockEntries(s, i, v.payload, &entries)) break;  // freed and reused meanwhile
      const std::string block(entries);
      ++r.overflow_blocks;
      r.memory_bytes += SlotBytes(s.payload());
      if (absl::Status st = count(block); !st.ok()) return st;
      has = ReadLink(block, &link);
    }
  }
  return r;
}

absl::StatusOr<uint64_t> Client::Size() {
  absl::StatusOr<std::vector<ShardStats>> stats = Stats();
  if (!stats.ok()) return stats.status();
  uint64_t items = 0;
  for (const ShardStats& s : *stats) items += s.items;
  return items;
}

absl::StatusOr<std::vector<ShardStats>> Client::Stats() {
  std::vector<ShardStats> out;
  for (size_t i = 0; i < impl_->store->shard_nodes.size(); ++i) {
    absl::StatusOr<const ShardInfo*> shard = impl_->ShardAt(i);
    if (!shard.ok()) return shard.status();
    const ShardInfo& s = **shard;
    std::string request(8, '\0');
    const uint64_t first = s.first.Pack();
    std::memcpy(request.data(), &first, 8);
    absl::StatusOr<uint32_t> at = impl_->store->ServingNode(s.first);
    absl::StatusOr<std::string> r =
        at.ok() ? impl_->worker->Call(*at, impl_->store->stats_method(), request) : at.status();
    if (!r.ok()) return impl_->Annotate(r.status(), s);
    StatsReply rep;
    if (r->size() != sizeof(rep))
      return absl::DataLossError("kv: a statistics answer of the wrong size");
    std::memcpy(&rep, r->data(), sizeof(rep));
    ShardStats st;
    st.node = s.node;
    st.buckets = rep.buckets;
    st.bucket_bytes = rep.bucket_bytes;
    st.items = rep.items;
    st.inline_items = rep.inline_items;
    st.displaced_items = rep.displaced_items;
    st.overflow_blocks = rep.overflow_blocks;
    st.out_of_line_bytes = rep.out_of_line_bytes;
    st.memory_bytes = rep.memory_bytes;
    out.push_back(st);
  }
  return out;
}

}  // namespace kv
}  // namespace farm
