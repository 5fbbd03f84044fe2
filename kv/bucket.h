// The payload of a bucket of the KV table (an overflow block's payload is an 8-byte identity
// word, kv/internal/shard.h's BlockIdentity, followed by the same layout):
// how entries are laid out in it, and the edits the table makes. Pure functions on bytes: the
// table (kv/table_txn.cc, kv/lookup.cc) reads buckets as objects (txn/object.h) and writes them in
// transactions.
//
// Layout of a payload of P bytes (P = bucket_bytes - 24, the object header):
//
//   +0   link      the overflow chain: GlobalAddress::Pack() + 1 of the first overflow block
//                  (in a home bucket) or of the next one (in a block); 0 = none
//   +8   entries   packed one after another; a kind byte of 0 (or the end) ends them; the
//                  rest of the payload is zeros
//
// An entry starts with 8 bytes: kind (1 inline, 2 out of line, 3 chunked), delta (how many buckets
// after its key's home bucket it sits: 0 .. H-1; 0 in overflow blocks), key length (16 bits), value
// length (32 bits), all little-endian. An inline entry continues with the key and the value,
// padded with zeros to a multiple of 8; an out-of-line entry with the key's 64-bit hash and the
// packed address of an object whose payload is the key's and the value's lengths (32 bits each),
// the key and the value (kv/internal/value.h, EncodeItem). A chunked entry
// (a value too large for one object) has the same layout; its object is the value's index (see
// kv/internal/value.h: a tag, the key and the addresses of the chunk objects holding the value).
//
// Thread safety: none needed (values only).
#ifndef FARM_KV_BUCKET_H_
#define FARM_KV_BUCKET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/global_address.h"

namespace farm {
namespace kv {

inline constexpr uint64_t kBucketLinkBytes = 8;
inline constexpr uint64_t kEntryHeaderBytes = 8;
inline constexpr uint64_t kOutOfLineEntryBytes = kEntryHeaderBytes + 16;
enum EntryKind : uint8_t { kEnd = 0, kInline = 1, kOutOfLine = 2, kChunked = 3 };

constexpr uint64_t RoundUpTo8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
// Bytes an inline entry of this key and value takes.
constexpr uint64_t InlineEntryBytes(uint64_t key_len, uint64_t value_len) {
  return kEntryHeaderBytes + RoundUpTo8(key_len + value_len);
}

// One entry, as parsed from a payload (views into it).
struct Entry {
  uint64_t offset = 0;  // in the payload
  uint64_t bytes = 0;   // its size in the payload
  EntryKind kind = kEnd;
  uint8_t delta = 0;
  uint32_t key_len = 0;
  uint32_t value_len = 0;
  absl::string_view key;    // inline only
  absl::string_view value;  // inline only
  uint64_t hash = 0;        // out of line and chunked only
  GlobalAddress object;     // out of line and chunked only
};

// The entries of `payload`. DataLoss when they run past its end or have an unknown kind (a
// payload the table did not write).
absl::StatusOr<std::vector<Entry>> ParseEntries(absl::string_view payload);

// Calls `fn` on each entry of `payload` in order until it returns false; the same checks as
// ParseEntries (DataLoss), without building a vector. Safe on bytes that may be torn.
absl::Status ScanEntries(absl::string_view payload,
                         absl::FunctionRef<bool(const Entry&)> fn);

// The bytes of entries: inline, or out of line.
std::string EncodeInline(uint8_t delta, absl::string_view key, absl::string_view value);
std::string EncodeOutOfLine(uint8_t delta, uint32_t key_len, uint32_t value_len, uint64_t hash,
                            GlobalAddress object, EntryKind kind = kOutOfLine);
// The same entry with another delta.
void SetDelta(std::string* entry_bytes, uint8_t delta);

// The link word (none: nullopt-like `false`).
bool ReadLink(absl::string_view payload, GlobalAddress* next);
void WriteLink(std::string* payload, const GlobalAddress* next);  // null: none

// Bytes the entries use (from +8), and what is free after them.
uint64_t UsedBytes(const std::vector<Entry>& entries);
uint64_t FreeBytes(absl::string_view payload, const std::vector<Entry>& entries);

// Appends an encoded entry after the last one. False (and nothing changed) if it does not fit.
bool AppendEntry(std::string* payload, absl::string_view entry_bytes);
// Removes the entry at `offset` (as parsed), moving the later ones down and zeroing the tail.
void RemoveEntry(std::string* payload, const Entry& entry);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_BUCKET_H_
