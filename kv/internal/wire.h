// kv/internal/wire.h: the store's RPC messages (Options::first_method and the three ids after
// it): the Describe RPC's shard descriptions (kv/shard_directory.cc), the answer of a GET by
// RPC (kv/get_rpc.cc), the batched GET's request and answer (kv/multi_get.cc) and the
// statistics' answer (kv/stats.cc). Every node of a cluster runs the same build: the layouts
// are the structs' bytes.
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: none (values; a MultiGetRequest or MultiGetAnswer belongs to its builder).
#ifndef FARM_KV_INTERNAL_WIRE_H_
#define FARM_KV_INTERNAL_WIRE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/global_address.h"

namespace farm {
namespace kv {

// A shard as the Describe RPC carries the shards a node knows (in its request, the asker's; after
// the answer's header, the answerer's).
struct ShardEntry {
  uint32_t node = 0;
  uint32_t reserved = 0;
  uint64_t first = 0;
  uint64_t buckets = 0;
  uint64_t seed = 0;
};

// The Describe RPC's answer on the wire: the node's shard, then the other shards it knows
// (ShardEntry each).
struct DescribeReply {
  uint32_t has_shard = 0;
  uint32_t bucket_bytes = 0;
  uint32_t neighbourhood = 0;
  uint32_t lost = 0;  // 1: the node restarted; its shard lost the keys it held (Store::Impl::lost)
  uint64_t first = 0;
  uint64_t buckets = 0;
  uint64_t seed = 0;
};

// The statistics RPC's answer.
struct StatsReply {
  uint64_t buckets = 0, bucket_bytes = 0, items = 0, inline_items = 0, displaced_items = 0,
           overflow_blocks = 0, out_of_line_bytes = 0, memory_bytes = 0;
};

// GetRpc's answer: a status byte, then the value. A batched GET's answer (MultiGetAnswer) uses
// the others too.
enum RpcGetOutcome : char {
  kRpcFound = 'F',
  kRpcMissing = 'M',
  kRpcRetry = 'R',     // locked or torn: the handler must not wait for a commit; ask again
  kRpcDeferred = 'D',  // no room left in this answer: ask again
  kRpcTooLarge = 'L',  // the value does not fit any answer: read it one-sided
  kRpcError = 'E',     // the lookup failed (the status follows)
};

// The batched GET (Client::MultiGet by RPC, Store::Impl::ServeMultiGet). A request: the number
// of shards it names (32 bits), their bucket arrays' packed addresses (64 bits each), then per
// key the index of its shard in that list and its length (16 bits each) and its bytes. Built
// up to `limit` bytes (a message's) and kMaxKeys keys: the handler holds up the node's other
// requests (and the commits it applies) while it runs, so it looks up a bounded number of keys
// at a time; a MultiGet of more keys sends more requests, in flight together.
class MultiGetRequest {
 public:
  static constexpr size_t kMaxKeys = 64;

  explicit MultiGetRequest(uint64_t limit) : limit_(limit) {}

  // Adds `key` of the shard whose bucket array starts at `first`; false, adding nothing, when
  // the request would exceed its limits.
  bool Add(GlobalAddress first, absl::string_view key) {
    const uint64_t packed = first.Pack();
    const size_t index = std::find(shards_.begin(), shards_.end(), packed) - shards_.begin();
    const uint64_t grows = (index == shards_.size() ? 8 : 0) + 4 + key.size();
    if (size() + grows > limit_ || keys_ == kMaxKeys || key.size() > UINT16_MAX) return false;
    ++keys_;
    if (index == shards_.size()) shards_.push_back(packed);
    const uint16_t head[2] = {static_cast<uint16_t>(index), static_cast<uint16_t>(key.size())};
    entries_.append(reinterpret_cast<const char*>(head), sizeof(head));
    entries_.append(key.data(), key.size());
    return true;
  }
  std::string Encode() const {
    const uint32_t n = static_cast<uint32_t>(shards_.size());
    std::string out(reinterpret_cast<const char*>(&n), 4);
    out.append(reinterpret_cast<const char*>(shards_.data()), 8 * shards_.size());
    return out + entries_;
  }

 private:
  uint64_t size() const { return 4 + 8 * shards_.size() + entries_.size(); }
  const uint64_t limit_;
  size_t keys_ = 0;
  std::vector<uint64_t> shards_;  // packed
  std::string entries_;
};

// A batched GET's answer: per key, in order, one RpcGetOutcome byte; kRpcFound is followed by
// the value's length (32 bits) and the value, kRpcError by the status code and the message's
// length (32 bits each) and the message. At most `limit` bytes (a message's): a value that does
// not fit what is left is kRpcDeferred, and a full answer ends before the last key (the keys
// after its end are deferred too). The first key's value always fits unless it is kRpcTooLarge,
// so every answer settles at least one key.
class MultiGetAnswer {
 public:
  explicit MultiGetAnswer(uint64_t limit) : limit_(limit) {}
  bool full() const { return out_.size() >= limit_; }
  size_t deferred() const { return deferred_; }  // kRpcDeferred outcomes
  // Each adds the next key's outcome; not when full().
  void Outcome(RpcGetOutcome o) {
    if (o == kRpcDeferred) ++deferred_;
    out_.push_back(o);
  }
  void Found(absl::string_view value) {
    if (5 + value.size() > limit_) return Outcome(kRpcTooLarge);
    if (out_.size() + 5 + value.size() > limit_) return Outcome(kRpcDeferred);
    Outcome(kRpcFound);
    AppendWord(static_cast<uint32_t>(value.size()));
    out_.append(value.data(), value.size());
  }
  void Error(const absl::Status& st) {
    if (out_.size() + 9 > limit_) return Outcome(kRpcDeferred);
    const absl::string_view m = st.message().substr(0, limit_ - out_.size() - 9);
    Outcome(kRpcError);
    AppendWord(static_cast<uint32_t>(st.code()));
    AppendWord(static_cast<uint32_t>(m.size()));
    out_.append(m.data(), m.size());
  }
  std::string Take() { return std::move(out_); }

  // Reads the next key's outcome of `answer` (consumed from its front) into `outcome` and, for
  // kRpcFound, `value`, or, for kRpcError, `error`. False at its end (the remaining keys are
  // deferred); DataLoss for an answer that is not one.
  static absl::StatusOr<bool> Next(absl::string_view* answer, RpcGetOutcome* outcome,
                                   absl::string_view* value, absl::Status* error) {
    if (answer->empty()) return false;
    *outcome = static_cast<RpcGetOutcome>(answer->front());
    answer->remove_prefix(1);
    uint32_t code = 0;
    switch (*outcome) {
      case kRpcMissing:
      case kRpcRetry:
      case kRpcDeferred:
      case kRpcTooLarge:
        return true;
      case kRpcFound:
        if (!Counted(answer, value)) break;
        return true;
      case kRpcError:
        if (!Word(answer, &code) || !Counted(answer, value)) break;
        if (code == 0 || code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) break;
        *error = absl::Status(static_cast<absl::StatusCode>(code), *value);
        return true;
    }
    return absl::DataLossError("kv: a batched GET answer that is not one (truncated or unknown)");
  }

 private:
  static bool Word(absl::string_view* a, uint32_t* w) {
    if (a->size() < 4) return false;
    std::memcpy(w, a->data(), 4);
    a->remove_prefix(4);
    return true;
  }
  // A length (32 bits), then that many bytes.
  static bool Counted(absl::string_view* a, absl::string_view* bytes) {
    uint32_t len = 0;
    if (!Word(a, &len) || a->size() < len) return false;
    *bytes = a->substr(0, len);
    a->remove_prefix(len);
    return true;
  }
  void AppendWord(uint32_t w) { out_.append(reinterpret_cast<const char*>(&w), 4); }
  const uint64_t limit_;
  std::string out_;
  size_t deferred_ = 0;
};

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_WIRE_H_
