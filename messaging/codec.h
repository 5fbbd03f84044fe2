// RpcCodec: how a typed value travels as RPC bytes. Shared by the RPC layer (messaging/rpc.h) and
// the public API (farm.h), which must not include anything that reaches the fabric; so this header
// depends on abseil only.
//
//   std::string bytes = RpcCodec<MyPod>::Encode(v);
//   absl::StatusOr<MyPod> back = RpcCodec<MyPod>::Decode(bytes);   // DataLoss on a size mismatch
#ifndef FARM_MESSAGING_CODEC_H_
#define FARM_MESSAGING_CODEC_H_

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace farm {

// Encoding of a typed value as RPC bytes: trivially copyable types byte for byte, protobuf
// messages (anything with SerializeAsString/ParseFromArray) in their wire format.
template <typename T, typename = void>
struct RpcCodec {
  static_assert(std::is_trivially_copyable<T>::value,
                "RpcCodec: use a trivially copyable type or a protobuf message");
  static std::string Encode(const T& v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static absl::StatusOr<T> Decode(absl::string_view b) {
    if (b.size() != sizeof(T)) {
      return absl::DataLossError(absl::StrCat("expected ", sizeof(T), " bytes, got ", b.size()));
    }
    T v;
    std::memcpy(&v, b.data(), sizeof(T));
    return v;
  }
};

template <typename T>
struct RpcCodec<T, std::void_t<decltype(std::declval<const T&>().SerializeAsString())>> {
  static std::string Encode(const T& v) { return v.SerializeAsString(); }
  static absl::StatusOr<T> Decode(absl::string_view b) {
    T v;
    if (!v.ParseFromArray(b.data(), static_cast<int>(b.size()))) {
      return absl::DataLossError("cannot parse the message");
    }
    return v;
  }
};

}  // namespace farm

#endif  // FARM_MESSAGING_CODEC_H_
