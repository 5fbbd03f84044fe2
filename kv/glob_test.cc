#include "kv/glob.h"

#include <catch2/catch.hpp>
#include <string>

namespace farm {
namespace kv {
namespace {

TEST_CASE("glob patterns match as Redis's MATCH does", "[glob]") {
  CHECK(GlobMatch("*", ""));
  CHECK(GlobMatch("*", "anything"));
  CHECK(GlobMatch("", ""));
  CHECK_FALSE(GlobMatch("", "a"));
  CHECK(GlobMatch("user:*", "user:42"));
  CHECK(GlobMatch("user:*", "user:"));
  CHECK_FALSE(GlobMatch("user:*", "use"));
  CHECK(GlobMatch("*:42", "user:42"));
  CHECK(GlobMatch("a*b*c", "aXXbYYc"));
  CHECK_FALSE(GlobMatch("a*b*c", "aXXbYY"));
  CHECK(GlobMatch("a*b", "abab"));  // the star must absorb "ba": backtracking
  CHECK(GlobMatch("h?llo", "hallo"));
  CHECK_FALSE(GlobMatch("h?llo", "hllo"));
  CHECK(GlobMatch("h[ae]llo", "hello"));
  CHECK_FALSE(GlobMatch("h[ae]llo", "hillo"));
  CHECK(GlobMatch("h[^e]llo", "hallo"));
  CHECK_FALSE(GlobMatch("h[^e]llo", "hello"));
  CHECK(GlobMatch("h[a-c]llo", "hbllo"));
  CHECK(GlobMatch("h[c-a]llo", "hbllo"));  // a range either way round
  CHECK_FALSE(GlobMatch("h[a-c]llo", "hdllo"));
  CHECK(GlobMatch("h[-]llo", "h-llo"));
  CHECK(GlobMatch("a[\\]]b", "a]b"));
  CHECK(GlobMatch("\\*", "*"));
  CHECK_FALSE(GlobMatch("\\*", "x"));
  CHECK(GlobMatch("\\?x", "?x"));
  CHECK(GlobMatch("ab\\", "ab\\"));  // a trailing backslash is itself
  CHECK(GlobMatch("a[bc", "ab"));    // an unclosed set takes the rest as the set
  CHECK_FALSE(GlobMatch("a[bc", "ad"));
}

TEST_CASE("glob patterns are bytes: binary keys and bytes above 127", "[glob]") {
  const std::string key("k\0\xff", 3);
  CHECK(GlobMatch(std::string("k\0*", 3), key));
  CHECK(GlobMatch("k?\xff", key));
  CHECK(GlobMatch("k?[\xf0-\xff]", key));
  CHECK_FALSE(GlobMatch("k?[a-z]", key));
}

TEST_CASE("a pattern of many stars does not take exponential time", "[glob]") {
  const std::string s(1024, 'a');
  std::string pattern;
  for (int i = 0; i < 30; ++i) pattern += "*a";
  pattern += "*b";
  CHECK_FALSE(GlobMatch(pattern, s));  // backtracking to the last star only: quadratic at worst
  CHECK(GlobMatch(pattern.substr(0, pattern.size() - 2), s));
}

}  // namespace
}  // namespace kv
}  // namespace farm
