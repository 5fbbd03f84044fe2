#include "kv/internal/value.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "platform/hash.h"

namespace farm {
namespace kv {

uint64_t ItemSize(uint64_t key_len, uint64_t value_len) {
  return kItemHeader + key_len + value_len;
}

std::string EncodeItem(absl::string_view key, absl::string_view value) {
  std::string x(kItemHeader, '\0');
  const uint32_t k = static_cast<uint32_t>(key.size()), v = static_cast<uint32_t>(value.size());
  std::memcpy(&x[0], &k, 4);
  std::memcpy(&x[4], &v, 4);
  absl::StrAppend(&x, key, value);
  return x;
}

bool ItemValue(absl::string_view payload, const Entry& e, absl::string_view key,
               absl::string_view* value) {
  if (payload.size() != ItemSize(e.key_len, e.value_len)) return false;
  uint32_t k, v;
  std::memcpy(&k, payload.data(), 4);
  std::memcpy(&v, payload.data() + 4, 4);
  if (k != e.key_len || v != e.value_len || payload.substr(kItemHeader, k) != key) return false;
  *value = payload.substr(kItemHeader + k);
  return true;
}

uint64_t ChunkCount(uint64_t value_len, uint64_t chunk_bytes) {
  return (value_len + chunk_bytes - 1) / chunk_bytes;
}

uint64_t ChunkLen(uint64_t value_len, uint64_t chunk_bytes, uint64_t i) {
  return std::min(chunk_bytes, value_len - i * chunk_bytes);
}

uint64_t IndexSize(uint64_t key_len, uint64_t value_len, uint64_t chunk_bytes) {
  return 16 + RoundUpTo8(key_len) + 8 * ChunkCount(value_len, chunk_bytes);
}

uint64_t NewTag() {
  static std::atomic<uint64_t> counter{0};
  return Mix64(static_cast<uint64_t>(absl::ToUnixNanos(absl::Now())) ^
               Mix64(counter.fetch_add(1, std::memory_order_relaxed)));
}

std::string EncodeChunk(uint64_t tag, uint32_t i, absl::string_view data) {
  std::string c(kChunkHeader, '\0');
  const uint32_t len = static_cast<uint32_t>(data.size());
  std::memcpy(&c[0], &tag, 8);
  std::memcpy(&c[8], &i, 4);
  std::memcpy(&c[12], &len, 4);
  c.append(data.data(), data.size());
  return c;
}

bool ChunkData(absl::string_view payload, uint64_t tag, uint32_t i, absl::string_view* data) {
  if (payload.size() < kChunkHeader) return false;
  uint64_t t;
  uint32_t n, len;
  std::memcpy(&t, payload.data(), 8);
  std::memcpy(&n, payload.data() + 8, 4);
  std::memcpy(&len, payload.data() + 12, 4);
  if (t != tag || n != i || kChunkHeader + len != payload.size()) return false;
  *data = payload.substr(kChunkHeader);
  return true;
}

std::string EncodeIndex(uint64_t tag, absl::string_view key,
                        const std::vector<GlobalAddress>& chunks) {
  std::string x(16, '\0');
  const uint32_t n = static_cast<uint32_t>(chunks.size());
  const uint32_t k = static_cast<uint32_t>(key.size());
  std::memcpy(&x[0], &tag, 8);
  std::memcpy(&x[8], &n, 4);
  std::memcpy(&x[12], &k, 4);
  x.append(key.data(), key.size());
  x.resize(16 + RoundUpTo8(key.size()), '\0');
  for (const GlobalAddress& a : chunks) {
    const uint64_t w = a.Pack();
    x.append(reinterpret_cast<const char*>(&w), 8);
  }
  return x;
}

bool DecodeIndex(absl::string_view payload, const Entry& e, uint64_t chunk_bytes, IndexView* out) {
  const uint64_t n = ChunkCount(e.value_len, chunk_bytes);
  if (payload.size() != IndexSize(e.key_len, e.value_len, chunk_bytes)) return false;
  uint32_t count, key_len;
  std::memcpy(&out->tag, payload.data(), 8);
  std::memcpy(&count, payload.data() + 8, 4);
  std::memcpy(&key_len, payload.data() + 12, 4);
  if (count != n || key_len != e.key_len) return false;
  out->key = payload.substr(16, e.key_len);
  out->chunks.resize(n);
  const char* a = payload.data() + 16 + RoundUpTo8(e.key_len);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w;
    std::memcpy(&w, a + 8 * i, 8);
    out->chunks[i] = GlobalAddress::Unpack(w);
  }
  return true;
}

}  // namespace kv
}  // namespace farm
