#include "kv/bucket.h"

#include <catch2/catch.hpp>

namespace farm {
namespace kv {
namespace {

TEST_CASE("entries are appended, parsed and removed") {
  std::string payload(104, '\0');
  REQUIRE(ParseEntries(payload)->empty());
  REQUIRE(FreeBytes(payload, *ParseEntries(payload)) == 96);
  REQUIRE(AppendEntry(&payload, EncodeInline(0, "alpha", "1")));
  REQUIRE(AppendEntry(&payload, EncodeOutOfLine(3, 4, 5000, 0xabcdef, GlobalAddress{7, 4096})));
  REQUIRE(AppendEntry(&payload, EncodeInline(1, "b", std::string(20, 'x'))));
  absl::StatusOr<std::vector<Entry>> e = ParseEntries(payload);
  REQUIRE(e.ok());
  REQUIRE(e->size() == 3);
  CHECK((*e)[0].kind == kInline);
  CHECK((*e)[0].key == "alpha");
  CHECK((*e)[0].value == "1");
  CHECK((*e)[0].bytes == 16);
  CHECK((*e)[1].kind == kOutOfLine);
  CHECK((*e)[1].delta == 3);
  CHECK((*e)[1].key_len == 4);
  CHECK((*e)[1].value_len == 5000);
  CHECK((*e)[1].hash == 0xabcdef);
  CHECK((*e)[1].object == GlobalAddress{7, 4096});
  CHECK((*e)[2].value == std::string(20, 'x'));
  CHECK(UsedBytes(*e) == 16 + 24 + 32);
  // Full: 96 - 72 = 24 bytes left; a 32-byte entry does not fit and changes nothing.
  const std::string before = payload;
  CHECK_FALSE(AppendEntry(&payload, EncodeInline(0, "cc", std::string(20, 'y'))));
  CHECK(payload == before);

  RemoveEntry(&payload, (*e)[1]);
  e = ParseEntries(payload);
  REQUIRE(e->size() == 2);
  CHECK((*e)[0].key == "alpha");
  CHECK((*e)[1].key == "b");
  CHECK((*e)[1].offset == 8 + 16);
  // The tail is zeros again.
  CHECK(payload.substr(8 + 48) == std::string(104 - 56, '\0'));
}

TEST_CASE("links and deltas") {
  std::string payload(104, '\0');
  GlobalAddress next;
  CHECK_FALSE(ReadLink(payload, &next));
  const GlobalAddress a{0, 0};  // the very first address is a valid link too
  WriteLink(&payload, &a);
  REQUIRE(ReadLink(payload, &next));
  CHECK(next == a);
  WriteLink(&payload, nullptr);
  CHECK_FALSE(ReadLink(payload, &next));
  std::string entry = EncodeInline(0, "k", "v");
  SetDelta(&entry, 5);
  REQUIRE(AppendEntry(&payload, entry));
  CHECK((*ParseEntries(payload))[0].delta == 5);
}

TEST_CASE("corrupt payloads are DataLoss, not a crash") {
  std::string payload(104, '\0');
  payload[8] = 9;  // unknown kind
  CHECK(absl::IsDataLoss(ParseEntries(payload).status()));
  payload.assign(104, '\0');
  REQUIRE(AppendEntry(&payload, EncodeInline(0, "key", "value")));
  payload[8 + 4] = static_cast<char>(200);  // value length past the end
  CHECK(absl::IsDataLoss(ParseEntries(payload).status()));
  payload.assign(104, '\0');
  REQUIRE(AppendEntry(&payload, EncodeInline(0, "key", "value")));
  payload[8 + 2] = 0;  // key length 0
  payload[8 + 3] = 0;
  CHECK(absl::IsDataLoss(ParseEntries(payload).status()));
}

}  // namespace
}  // namespace kv
}  // namespace farm
