#include "kv/glob.h"

#include <cstddef>

namespace farm {
namespace kv {
namespace {

// Whether the single-byte element of `pattern` at `*p` (not a `*`) matches `c`; `*p` moves past
// the element either way.
bool MatchOne(absl::string_view pattern, size_t* p, unsigned char c) {
  const unsigned char first = static_cast<unsigned char>(pattern[*p]);
  if (first == '?') {
    ++*p;
    return true;
  }
  if (first == '\\') {
    // The next byte literally; a trailing backslash is itself.
    const unsigned char lit =
        *p + 1 < pattern.size() ? static_cast<unsigned char>(pattern[*p + 1]) : '\\';
    *p += *p + 1 < pattern.size() ? 2 : 1;
    return lit == c;
  }
  if (first != '[') {
    ++*p;
    return first == c;
  }
  size_t i = *p + 1;
  const bool negate = i < pattern.size() && pattern[i] == '^';
  if (negate) ++i;
  bool in = false;
  while (i < pattern.size() && pattern[i] != ']') {
    unsigned char lo = static_cast<unsigned char>(pattern[i]);
    if (lo == '\\' && i + 1 < pattern.size()) lo = static_cast<unsigned char>(pattern[++i]);
    if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
      unsigned char hi = static_cast<unsigned char>(pattern[i + 2]);
      i += 2;
      if (hi == '\\' && i + 1 < pattern.size()) hi = static_cast<unsigned char>(pattern[++i]);
      if (lo > hi) {
        const unsigned char t = lo;
        lo = hi;
        hi = t;
      }
      if (c >= lo && c <= hi) in = true;
    } else if (lo == c) {
      in = true;
    }
    ++i;
  }
  *p = i < pattern.size() ? i + 1 : i;  // past the `]` (or the end: an unclosed set)
  return in != negate;
}

}  // namespace

bool GlobMatch(absl::string_view pattern, absl::string_view s) {
  size_t p = 0, i = 0;
  // Where to resume after the last `*`: the pattern just past it, and the byte of `s` it has
  // absorbed up to.
  size_t star = absl::string_view::npos, absorbed = 0;
  while (i < s.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      while (p < pattern.size() && pattern[p] == '*') ++p;
      star = p;
      absorbed = i;
      continue;
    }
    size_t next = p;
    if (p < pattern.size() && MatchOne(pattern, &next, static_cast<unsigned char>(s[i]))) {
      p = next;
      ++i;
      continue;
    }
    if (star == absl::string_view::npos) return false;
    p = star;
    i = ++absorbed;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace kv
}  // namespace farm
