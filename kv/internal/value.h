// kv/internal/value.h: the objects that hold a value outside its bucket. A small item is stored
// inline in its bucket (kv/bucket.h); a larger one lives in an out-of-line item object of its
// own; a value too large for one object is split into chunk objects behind an index object.
// Their encodings, and the checks by which a reader that followed a stale pointer notices that
// the object is not (any more) the one it was looking for.
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: none needed (values and pure functions; NewTag is safe for concurrent use).
#ifndef FARM_KV_INTERNAL_VALUE_H_
#define FARM_KV_INTERNAL_VALUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "kv/bucket.h"
#include "platform/global_address.h"

namespace farm {
namespace kv {

// An out-of-line item (kOutOfLine entries): an object whose payload is the key's and the
// value's lengths (32 bits each), the key, then the value. A reader follows its entry to it with
// a second READ, by which time the item may have been freed and its slot reused by another
// key's item of the same size; the lengths make "k3" + "0..." and "k30" + "..." differ.
inline constexpr uint64_t kItemHeader = 8;

uint64_t ItemSize(uint64_t key_len, uint64_t value_len);

std::string EncodeItem(absl::string_view key, absl::string_view value);

// The value in item `payload` if the item is `key`'s with the entry's lengths.
bool ItemValue(absl::string_view payload, const Entry& e, absl::string_view key,
               absl::string_view* value);

// A value too large for one object (kChunked entries): chunk objects of ShardInfo::chunk_bytes
// each (the last one shorter), payload [tag, chunk number (32 bits), length (32 bits), data],
// and an index object, payload [tag, chunk count (32 bits), key length (32 bits: "k3" and "k30"
// pad alike), key padded to 8 bytes, chunk addresses]. The
// tag is drawn anew for every PUT, and chunks are never written after their PUT, so a reader
// that finds a chunk with the index's tag and number has that PUT's bytes: a chunk freed and
// reused since the index was read has another tag (or is free), and the reader retries.
inline constexpr uint64_t kChunkHeader = 16;

uint64_t ChunkCount(uint64_t value_len, uint64_t chunk_bytes);
uint64_t ChunkLen(uint64_t value_len, uint64_t chunk_bytes, uint64_t i);
uint64_t IndexSize(uint64_t key_len, uint64_t value_len, uint64_t chunk_bytes);

// The tag of a chunked value's PUT: drawn anew for every PUT.
uint64_t NewTag();

std::string EncodeChunk(uint64_t tag, uint32_t i, absl::string_view data);

// The data of chunk `i` of the PUT tagged `tag`, or false if the payload is another one's.
bool ChunkData(absl::string_view payload, uint64_t tag, uint32_t i, absl::string_view* data);

struct IndexView {
  uint64_t tag = 0;
  absl::string_view key;
  std::vector<GlobalAddress> chunks;
};

std::string EncodeIndex(uint64_t tag, absl::string_view key,
                        const std::vector<GlobalAddress>& chunks);

bool DecodeIndex(absl::string_view payload, const Entry& e, uint64_t chunk_bytes, IndexView* out);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_VALUE_H_
