// The transaction protocol's messages: a compact little-endian encoding with bounds-checked
// decoding (a corrupt or truncated message is an InvalidArgument error, never a read past its
// end).
#ifndef FARM_TXN_WIRE_H_
#define FARM_TXN_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace farm {
namespace txn {

class WireWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Bytes(absl::string_view b) {
    U64(b.size());
    out_.append(b.data(), b.size());
  }
  void Reserve(size_t n) { out_.reserve(n); }
  std::string& str() { return out_; }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// WireWriter's encoding into memory the caller sized for it (a message written in place).
class WireBufferWriter {
 public:
  explicit WireBufferWriter(char* out) : out_(out) {}
  void U8(uint8_t v) { *out_++ = static_cast<char>(v); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void Bytes(absl::string_view b) {
    U64(b.size());
    Raw(b.data(), b.size());
  }

 private:
  void Raw(const void* p, size_t n) {
    if (n > 0) std::memcpy(out_, p, n);
    out_ += n;
  }
  char* out_;
};

class WireReader {
 public:
  explicit WireReader(absl::string_view in) : in_(in) {}
  bool U8(uint8_t* v) { return Raw(v, 1); }
  bool U32(uint32_t* v) { return Raw(v, 4); }
  bool U64(uint64_t* v) { return Raw(v, 8); }
  bool Bytes(absl::string_view* b) {
    uint64_t n = 0;
    if (!U64(&n) || n > in_.size()) return Fail();
    *b = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }
  size_t remaining() const { return in_.size(); }
  bool failed() const { return failed_; }
  // The error for a message that did not decode.
  static absl::Status Corrupt(absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("corrupt ", what, " message"));
  }

 private:
  bool Raw(void* p, size_t n) {
    if (in_.size() < n) return Fail();
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Fail() {
    failed_ = true;
    return false;
  }
  absl::string_view in_;
  bool failed_ = false;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_WIRE_H_
