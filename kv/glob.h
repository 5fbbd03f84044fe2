// farm/kv/glob.h: Redis's glob-style patterns (SCAN's MATCH, KEYS), for kv::Client::Scan.
//
//   GlobMatch("user:*", "user:42")      true
//   GlobMatch("h?llo", "hallo")         true
//   GlobMatch("h[^e]llo", "hello")      false
//   GlobMatch("h[a-b]llo", "hbllo")     true
//   GlobMatch("\\*", "*")               true  (a backslash takes the next byte literally)
//
// `*` matches any run of bytes (the empty one too), `?` any one byte, `[...]` one byte of a
// set (`^` first negates it, `a-z` is a range, either way round, `\x` is x), anything else
// itself. Bytes, not characters: keys are binary. Where Redis's stringmatchlen is lenient the
// same is done here: a `[` without its `]` takes the rest of the pattern as the set, and a
// trailing backslash matches a backslash. The matcher backtracks only to the last `*`, so a
// pattern of many stars costs O(pattern * key) at worst, not exponential time.
//
// Thread safety: a pure function.
#ifndef FARM_KV_GLOB_H_
#define FARM_KV_GLOB_H_

#include "absl/strings/string_view.h"

namespace farm {
namespace kv {

bool GlobMatch(absl::string_view pattern, absl::string_view s);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_GLOB_H_
