// JSON text for the one-line JSON objects the tools and self-checks print.
//
//   absl::StrCat("{\"error\":", JsonString(why), "}")   // {"error":"a \"quoted\" word"}
//
// Thread safety: a pure function.
#ifndef FARM_PLATFORM_JSON_H_
#define FARM_PLATFORM_JSON_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace farm {

// `s` as a JSON string, quotes included: quotes, backslashes and control characters escaped.
inline std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace farm

#endif  // FARM_PLATFORM_JSON_H_
