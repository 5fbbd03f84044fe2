#include "kv/bucket.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace farm {
namespace kv {
namespace {

uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void Store64(char* p, uint64_t v) { std::memcpy(p, &v, 8); }

std::string Header(EntryKind kind, uint8_t delta, uint32_t key_len, uint32_t value_len) {
  std::string h(kEntryHeaderBytes, '\0');
  h[0] = static_cast<char>(kind);
  h[1] = static_cast<char>(delta);
  const uint16_t k = static_cast<uint16_t>(key_len);
  std::memcpy(&h[2], &k, 2);
  std::memcpy(&h[4], &value_len, 4);
  return h;
}

}  // namespace

absl::StatusOr<std::vector<Entry>> ParseEntries(absl::string_view payload) {
  std::vector<Entry> out;
  absl::Status s = ScanEntries(payload, [&out](const Entry& e) {
    out.push_back(e);
    return true;
  });
  if (!s.ok()) return s;
  return out;
}

absl::Status ScanEntries(absl::string_view payload, absl::FunctionRef<bool(const Entry&)> fn) {
  uint64_t at = kBucketLinkBytes;
  while (at + kEntryHeaderBytes <= payload.size()) {
    const char* p = payload.data() + at;
    Entry e;
    e.kind = static_cast<EntryKind>(static_cast<uint8_t>(p[0]));
    if (e.kind == kEnd) break;
    e.delta = static_cast<uint8_t>(p[1]);
    uint16_t k;
    std::memcpy(&k, p + 2, 2);
    e.key_len = k;
    std::memcpy(&e.value_len, p + 4, 4);
    e.offset = at;
    if (e.kind == kInline) {
      e.bytes = InlineEntryBytes(e.key_len, e.value_len);
    } else if (e.kind == kOutOfLine || e.kind == kChunked) {
      e.bytes = kOutOfLineEntryBytes;
    } else {
      return absl::DataLossError(
          absl::StrCat("bucket entry at +", at, " has unknown kind ", static_cast<int>(e.kind)));
    }
    if (e.key_len == 0 || at + e.bytes > payload.size()) {
      return absl::DataLossError(absl::StrCat("bucket entry at +", at, " (", e.key_len, "+",
                                              e.value_len, " bytes) runs past the bucket's ",
                                              payload.size(), " bytes"));
    }
    if (e.kind == kInline) {
      e.key = payload.substr(at + kEntryHeaderBytes, e.key_len);
      e.value = payload.substr(at + kEntryHeaderBytes + e.key_len, e.value_len);
    } else {
      e.hash = Load64(p + kEntryHeaderBytes);
      e.object = GlobalAddress::Unpack(Load64(p + kEntryHeaderBytes + 8));
    }
    if (!fn(e)) return absl::OkStatus();
    at += e.bytes;
  }
  return absl::OkStatus();
}

std::string EncodeInline(uint8_t delta, absl::string_view key, absl::string_view value) {
  std::string e = Header(kInline, delta, static_cast<uint32_t>(key.size()),
                         static_cast<uint32_t>(value.size()));
  e.append(key.data(), key.size());
  e.append(value.data(), value.size());
  e.resize(InlineEntryBytes(key.size(), value.size()), '\0');
  return e;
}

std::string EncodeOutOfLine(uint8_t delta, uint32_t key_len, uint32_t value_len, uint64_t hash,
                            GlobalAddress object, EntryKind kind) {
  std::string e = Header(kind, delta, key_len, value_len);
  e.resize(kOutOfLineEntryBytes);
  Store64(&e[kEntryHeaderBytes], hash);
  Store64(&e[kEntryHeaderBytes + 8], object.Pack());
  return e;
}

void SetDelta(std::string* entry_bytes, uint8_t delta) { (*entry_bytes)[1] = static_cast<char>(delta); }

bool ReadLink(absl::string_view payload, GlobalAddress* next) {
  const uint64_t w = Load64(payload.data());
  if (w == 0) return false;
  *next = GlobalAddress::Unpack(w - 1);
  return true;
}

void WriteLink(std::string* payload, const GlobalAddress* next) {
  Store64(payload->data(), next == nullptr ? 0 : next->Pack() + 1);
}

uint64_t UsedBytes(const std::vector<Entry>& entries) {
  uint64_t used = 0;
  for (const Entry& e : entries) used += e.bytes;
  return used;
}

uint64_t FreeBytes(absl::string_view payload, const std::vector<Entry>& entries) {
  return payload.size() - kBucketLinkBytes - UsedBytes(entries);
}

bool AppendEntry(std::string* payload, absl::string_view entry_bytes) {
  absl::StatusOr<std::vector<Entry>> entries = ParseEntries(*payload);
  if (!entries.ok()) return false;
  const uint64_t end = kBucketLinkBytes + UsedBytes(*entries);
  if (end + entry_bytes.size() > payload->size()) return false;
  std::memcpy(payload->data() + end, entry_bytes.data(), entry_bytes.size());
  return true;
}

void RemoveEntry(std::string* payload, const Entry& entry) {
  char* p = payload->data();
  const uint64_t tail = entry.offset + entry.bytes;
  std::memmove(p + entry.offset, p + tail, payload->size() - tail);
  std::memset(p + payload->size() - entry.bytes, 0, entry.bytes);
}

}  // namespace kv
}  // namespace farm
