#include "tools/kvsh_lib.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace farm {
namespace kvsh {
namespace {

// The texts of the tokens of each command of `line` (which must split).
std::vector<std::vector<std::string>> Split(const std::string& line) {
  absl::StatusOr<std::vector<std::vector<Token>>> r = SplitLine(line);
  INFO(line << ": " << r.status().ToString());
  REQUIRE(r.ok());
  std::vector<std::vector<std::string>> out;
  for (const std::vector<Token>& c : *r) {
    out.emplace_back();
    for (const Token& t : c) out.back().push_back(t.text);
  }
  return out;
}

std::string SplitError(const std::string& line) {
  absl::StatusOr<std::vector<std::vector<Token>>> r = SplitLine(line);
  REQUIRE_FALSE(r.ok());
  CHECK(absl::IsInvalidArgument(r.status()));
  return std::string(r.status().message());
}

absl::StatusOr<Command> Parse(const std::string& line, Limits limits = {}) {
  absl::StatusOr<std::vector<std::vector<Token>>> r = SplitLine(line);
  REQUIRE(r.ok());
  REQUIRE(r->size() == 1);
  return ParseCommand((*r)[0], limits);
}

std::string ParseError(const std::string& line, Limits limits = {}) {
  absl::StatusOr<Command> c = Parse(line, limits);
  INFO(line);
  REQUIRE_FALSE(c.ok());
  CHECK(absl::IsInvalidArgument(c.status()));
  return std::string(c.status().message());
}

using Lines = std::vector<std::vector<std::string>>;

TEST_CASE("words, quotes and escapes split as redis-cli splits them", "[kvsh]") {
  CHECK(Split("get a") == Lines{{"get", "a"}});
  CHECK(Split("  put   k\tv  ") == Lines{{"put", "k", "v"}});
  CHECK(Split("put k \"hello world\"") == Lines{{"put", "k", "hello world"}});
  CHECK(Split("put k 'hello world'") == Lines{{"put", "k", "hello world"}});
  CHECK(Split(R"(put k "a\nb\tc\r\\\"")") == Lines{{"put", "k", "a\nb\tc\r\\\""}});
  CHECK(Split(R"(put k "\x00\xff\x41")") == Lines{{"put", "k", std::string("\0\xff" "A", 3)}});
  CHECK(Split(R"(put k "\q")") == Lines{{"put", "k", "q"}});  // any other \c is c
  CHECK(Split(R"(put k 'it\'s \n')") == Lines{{"put", "k", "it's \\n"}});
  CHECK(Split("put k it's") == Lines{{"put", "k", "it's"}});  // a quote inside a word
  CHECK(Split("put k \"\"") == Lines{{"put", "k", ""}});       // the empty value
  CHECK(Split("put k ''") == Lines{{"put", "k", ""}});
}

TEST_CASE("';' separates commands; blank lines and comments are no commands", "[kvsh]") {
  CHECK(Split("put a 1; get a") == Lines{{"put", "a", "1"}, {"get", "a"}});
  CHECK(Split("put a 1;get a;") == Lines{{"put", "a", "1"}, {"get", "a"}});
  CHECK(Split("put a \"1;2\"; get a") == Lines{{"put", "a", "1;2"}, {"get", "a"}});
  CHECK(Split("put a '1;2'") == Lines{{"put", "a", "1;2"}});
  CHECK(Split(";;  ;") == Lines{});
  CHECK(Split("") == Lines{});
  CHECK(Split("   \t ") == Lines{});
  CHECK(Split("  # a comment; get a") == Lines{});
  CHECK(Split("put a #1") == Lines{{"put", "a", "#1"}});
}

TEST_CASE("quoted tokens are marked, so (nil) and \"(nil)\" differ", "[kvsh]") {
  absl::StatusOr<std::vector<std::vector<Token>>> r = SplitLine("cas k (nil) \"(nil)\" '(nil)'");
  REQUIRE(r.ok());
  REQUIRE((*r)[0].size() == 5);
  CHECK_FALSE((*r)[0][2].quoted);
  CHECK((*r)[0][3].quoted);
  CHECK((*r)[0][4].quoted);
}

TEST_CASE("bad quoting is refused with the column", "[kvsh]") {
  CHECK_THAT(SplitError("put k \"abc"),
             Catch::Contains("the double quote at column 7 is not closed"));
  CHECK_THAT(SplitError("put k 'abc"), Catch::Contains("single quote at column 7"));
  CHECK_THAT(SplitError("put k \"abc\"def"),
             Catch::Contains("a closing quote must be followed by a space"));
  CHECK_THAT(SplitError(R"(put k "\x4")"), Catch::Contains("\\x takes two hex digits"));
  CHECK_THAT(SplitError(R"(put k "\xzz")"), Catch::Contains("\\x takes two hex digits"));
  CHECK_THAT(SplitError("put k \"ends in a backslash\\"), Catch::Contains("is not closed"));
}

TEST_CASE("Quote shows bytes as redis-cli does, and reads back the same", "[kvsh]") {
  CHECK(Quote("hello") == "\"hello\"");
  CHECK(Quote("") == "\"\"");
  CHECK(Quote("a\"b\\c") == R"("a\"b\\c")");
  CHECK(Quote("l1\nl2\r\t\a\b") == R"("l1\nl2\r\t\a\b")");
  CHECK(Quote(std::string("\0\x01\x7f\x80\xff", 5)) == R"("\x00\x01\x7f\x80\xff")");
  CHECK(Quote("h\xc3\xa9llo") == R"("h\xc3\xa9llo")");  // UTF-8 as bytes, like redis-cli
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  CHECK(Split("put k " + Quote(all)) == Lines{{"put", "k", all}});
}

TEST_CASE("commands are checked: names, aliases, argument counts", "[kvsh]") {
  absl::StatusOr<Command> c = Parse("GET a");
  REQUIRE(c.ok());
  CHECK(c->op == Op::kGet);
  CHECK(c->args == std::vector<std::string>{"a"});
  c = Parse("set k v");
  REQUIRE(c.ok());
  CHECK(c->op == Op::kPut);
  CHECK(c->name == "put");
  CHECK(Parse("delete a b c")->op == Op::kDel);
  CHECK(Parse("exit")->op == Op::kQuit);
  CHECK(Parse("mget a b")->args.size() == 2);
  CHECK(Parse("stats")->op == Op::kStats);
  CHECK(Parse("help")->op == Op::kHelp);
  CHECK(Parse("help cas")->op == Op::kHelp);

  CHECK(ParseError("get") == "wrong number of arguments for 'get' (usage: get KEY)");
  CHECK(ParseError("get a b") == "wrong number of arguments for 'get' (usage: get KEY)");
  CHECK_THAT(ParseError("put k hello world"),
             Catch::Contains("syntax error: \"world\" is not an option of put (NX, XX, GET); "
                             "quote a value with spaces: put KEY \"two words\""));
  CHECK_THAT(ParseError("put k"), Catch::Contains("usage: put KEY VALUE [NX|XX] [GET]"));
  CHECK(Parse("ping")->op == Op::kPing);
  CHECK(Parse("PING hello")->args == std::vector<std::string>{"hello"});
  CHECK_THAT(ParseError("ping a b"), Catch::Contains("usage: ping [MESSAGE]"));
  CHECK_THAT(ParseError("del"), Catch::Contains("usage: del KEY [KEY ...]"));
  CHECK_THAT(ParseError("mget"), Catch::Contains("usage: mget KEY [KEY ...]"));
  CHECK_THAT(ParseError("cas k v"), Catch::Contains("EXPECTED (nil) means the key must be absent"));
  CHECK_THAT(ParseError("stats now"), Catch::Contains("usage: stats"));
  CHECK_THAT(ParseError("help get put"), Catch::Contains("usage: help [COMMAND]"));
  CHECK_THAT(ParseError("help frobnicate"), Catch::Contains("no command 'frobnicate'"));
}

TEST_CASE("an unknown command names the commands and the nearest one", "[kvsh]") {
  const std::string e = ParseError("gte a");
  CHECK_THAT(e, Catch::StartsWith("unknown command 'gte' (did you mean 'get'?)"));
  CHECK_THAT(e, Catch::Contains("commands: get, put, del, cas, mget, incr, incrby, decr, decrby, "
                                "setnx, getset, append, strlen, exists, scan, keys, dbsize, mset, "
                                "msetnx, info, ping, stats, help, quit"));
  CHECK_THAT(ParseError("mgett a"), Catch::Contains("did you mean 'mget'?"));
  CHECK_THAT(ParseError("frobnicate"), !Catch::Contains("did you mean"));
  // Control bytes in the name are shown escaped, not written to the terminal.
  CHECK_THAT(ParseError("\"\x1b[2J\""), Catch::Contains("unknown command '\\x1b[2J'"));
}

TEST_CASE("incr, incrby, decr, decrby: the delta, Redis's integer syntax", "[kvsh]") {
  struct Case {
    const char* line;
    int64_t delta;
  };
  for (const Case& k :
       {Case{"incr n", 1}, Case{"INCR n", 1}, Case{"decr n", -1}, Case{"incrby n 5", 5},
        Case{"incrby n -7", -7}, Case{"incrby n 0", 0}, Case{"decrby n 5", -5},
        Case{"decrby n -5", 5}, Case{"incrby n 9223372036854775807", INT64_MAX},
        Case{"incrby n -9223372036854775808", INT64_MIN},
        Case{"decrby n 9223372036854775807", -INT64_MAX}}) {
    absl::StatusOr<Command> c = Parse(k.line);
    INFO(k.line);
    REQUIRE(c.ok());
    CHECK(c->op == Op::kIncrBy);
    CHECK(c->args == std::vector<std::string>{"n"});
    CHECK(c->delta == k.delta);
  }
  // A non-integer increment is refused as Redis refuses it: "+1", "007", "-0", " 1", "1.0",
  // out of range.
  for (const char* bad :
       {"incrby n x", "incrby n +1", "incrby n 007", "incrby n -0", "incrby n \" 1\"",
        "incrby n 1.0", "incrby n \"\"", "incrby n -", "incrby n 9223372036854775808",
        "incrby n -9223372036854775809", "decrby n 99999999999999999999", "incrby n 1e3"}) {
    CHECK(ParseError(bad) == "value is not an integer or out of range");
  }
  CHECK(ParseError("decrby n -9223372036854775808") == "decrement would overflow");
  CHECK_THAT(ParseError("incr"), Catch::Contains("usage: incr KEY)"));
  CHECK_THAT(ParseError("incr a b"), Catch::Contains("usage: incr KEY)"));
  CHECK_THAT(ParseError("incrby a"), Catch::Contains("usage: incrby KEY INCREMENT"));
  CHECK_THAT(ParseError("incrby a 1 2"), Catch::Contains("usage: incrby KEY INCREMENT"));
  CHECK_THAT(ParseError("decr"), Catch::Contains("usage: decr KEY"));
  CHECK_THAT(ParseError("decrby a"), Catch::Contains("usage: decrby KEY DECREMENT"));
  CHECK_THAT(ParseError("incr \"\""), Catch::Contains("empty key"));
}

TEST_CASE("setnx, getset, append, strlen, exists: arguments", "[kvsh]") {
  for (const char* name : {"setnx", "getset", "append"}) {
    absl::StatusOr<Command> c = Parse(std::string(name) + " k \"a b\"");
    INFO(name);
    REQUIRE(c.ok());
    CHECK(c->name == name);
    CHECK(c->args == std::vector<std::string>{"k", "a b"});
    CHECK_THAT(ParseError(std::string(name) + " k"),
               Catch::Contains(std::string("usage: ") + name + " KEY VALUE)"));
    CHECK_THAT(ParseError(std::string(name) + " k v w"),
               Catch::Contains(std::string("usage: ") + name + " KEY VALUE)"));
    CHECK_THAT(ParseError(std::string(name) + " \"\" v"), Catch::Contains("empty key"));
    Limits small;
    small.max_value_size = 3;
    CHECK_THAT(ParseError(std::string(name) + " k abcd", small),
               Catch::Contains("value too large: 4 bytes"));
  }
  CHECK(Parse("setnx k v")->op == Op::kSetNx);
  CHECK(Parse("GETSET k v")->op == Op::kGetSet);
  CHECK(Parse("append k v")->op == Op::kAppend);
  CHECK(Parse("strlen k")->op == Op::kStrlen);
  CHECK_THAT(ParseError("strlen"), Catch::Contains("usage: strlen KEY)"));
  CHECK_THAT(ParseError("strlen a b"), Catch::Contains("usage: strlen KEY)"));
  absl::StatusOr<Command> e = Parse("EXISTS a b a");
  REQUIRE(e.ok());
  CHECK(e->op == Op::kExists);
  CHECK(e->args == std::vector<std::string>{"a", "b", "a"});  // a key twice: counted twice
  CHECK_THAT(ParseError("exists"), Catch::Contains("usage: exists KEY [KEY ...]"));
  CHECK_THAT(ParseError("exists a \"\""), Catch::Contains("empty key"));
}

TEST_CASE("scan, keys, dbsize, mset, msetnx, info: arguments", "[kvsh]") {
  absl::StatusOr<Command> s = Parse("scan 0");
  REQUIRE(s.ok());
  CHECK(s->op == Op::kScan);
  CHECK(s->cursor == 0);
  CHECK(s->pattern.empty());
  CHECK(s->count == 10);  // Redis's default
  s = Parse("SCAN 18446744073709551615 match user:* COUNT 100");
  REQUIRE(s.ok());
  CHECK(s->cursor == UINT64_MAX);
  CHECK(s->pattern == "user:*");
  CHECK(s->count == 100);
  s = Parse("scan 7 COUNT 3 MATCH a?");
  REQUIRE(s.ok());
  CHECK(s->count == 3);
  CHECK(s->pattern == "a?");
  // Redis's words for a cursor that is not an unsigned 64-bit decimal.
  for (const char* bad :
       {"scan x", "scan -1", "scan 1.5", "scan 18446744073709551616", "scan \"\"", "scan 0x10"}) {
    INFO(bad);
    CHECK(ParseError(bad) == "invalid cursor");
  }
  CHECK_THAT(ParseError("scan"), Catch::Contains("usage: scan CURSOR [MATCH PATTERN] [COUNT N]"));
  CHECK_THAT(ParseError("scan 0 MATCH"), Catch::Contains("syntax error"));
  CHECK_THAT(ParseError("scan 0 LIMIT 3"), Catch::Contains("syntax error"));
  CHECK_THAT(ParseError("scan 0 COUNT 0"), Catch::Contains("syntax error"));
  CHECK_THAT(ParseError("scan 0 COUNT x"), Catch::Contains("not an integer"));
  CHECK_THAT(ParseError("scan 0 COUNT 1 MATCH a b"), Catch::Contains("wrong number"));

  absl::StatusOr<Command> k = Parse("keys 'a*'");
  REQUIRE(k.ok());
  CHECK(k->op == Op::kKeys);
  CHECK(k->pattern == "a*");
  CHECK_THAT(ParseError("keys"), Catch::Contains("usage: keys PATTERN"));
  CHECK_THAT(ParseError("keys a b"), Catch::Contains("usage: keys PATTERN"));

  CHECK(Parse("DBSIZE")->op == Op::kDbSize);
  CHECK_THAT(ParseError("dbsize x"), Catch::Contains("usage: dbsize"));

  for (const char* name : {"mset", "msetnx"}) {
    INFO(name);
    absl::StatusOr<Command> m = Parse(std::string(name) + " a 1 b \"two words\"");
    REQUIRE(m.ok());
    CHECK(m->op == (std::string(name) == "mset" ? Op::kMset : Op::kMsetNx));
    CHECK(m->args == std::vector<std::string>{"a", "1", "b", "two words"});
    // Redis's words for an odd count.
    CHECK(ParseError(std::string(name) + " a 1 b") ==
          absl::StrCat("wrong number of arguments for '", name, "' command"));
    CHECK_THAT(ParseError(std::string(name) + " a"), Catch::Contains("usage: "));
    CHECK_THAT(ParseError(std::string(name) + " a 1 \"\" 2"), Catch::Contains("empty key"));
    Limits small;
    small.max_value_size = 3;
    CHECK_THAT(ParseError(std::string(name) + " a 1 b abcd", small),
               Catch::Contains("value too large: 4 bytes"));
  }

  CHECK(Parse("info")->op == Op::kInfo);
  CHECK(Parse("info keyspace")->args == std::vector<std::string>{"keyspace"});
  CHECK_THAT(ParseError("info a b"), Catch::Contains("usage: info [SECTION]"));
}

TEST_CASE("scan's reply: the cursor and a nested array, as redis-cli prints it", "[kvsh]") {
  CHECK(Format(ScanReply(17, {"a", "b c"}), false) == "1) \"17\"\n2) 1) \"a\"\n   2) \"b c\"\n");
  CHECK(Format(ScanReply(0, {}), false) == "1) \"0\"\n2) (empty array)\n");
  CHECK(Format(ScanReply(17, {"a", "b c"}), true) == "17\na\nb c\n");
  // Ten keys: the inner numbers are two wide, and line up under the first.
  std::vector<std::string> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(absl::StrCat("k", i));
  const std::string t = Format(ScanReply(5, ten), false);
  CHECK_THAT(t, Catch::StartsWith("1) \"5\"\n2)  1) \"k0\"\n    2) \"k1\"\n"));
  CHECK_THAT(t, Catch::EndsWith("\n   10) \"k9\"\n"));
}

TEST_CASE("info: Redis's sections of name:value lines", "[kvsh]") {
  std::vector<StatsRow> rows(2);
  rows[0] = {0, 8192, 256, 10, 9, 1, 2, 300, 4000};
  rows[1] = {1, 8192, 256, 5, 5, 0, 0, 0, 3000};
  const std::string keyspace = "# Keyspace\ndb0:keys=15,shards=2,memory_bytes=7000\n";
  const std::string shards =
      "# Shards\n"
      "shard0:node=0,buckets=8192,bucket_bytes=256,items=10,inline=9,displaced=1,"
      "overflow_blocks=2,out_of_line_bytes=300,memory_bytes=4000\n"
      "shard1:node=1,buckets=8192,bucket_bytes=256,items=5,inline=5,displaced=0,"
      "overflow_blocks=0,out_of_line_bytes=0,memory_bytes=3000\n";
  CHECK(FormatInfo(rows, "") == keyspace + "\n" + shards);
  CHECK(FormatInfo(rows, "ALL") == keyspace + "\n" + shards);
  CHECK(FormatInfo(rows, "keyspace") == keyspace);
  CHECK(FormatInfo(rows, "Shards") == shards);
  CHECK(FormatInfo(rows, "memory").empty());  // an unknown section: nothing, as Redis
  CHECK(Format(Reply::Text(FormatInfo(rows, "memory")), false) == "\n");
}

TEST_CASE("keys and values are checked against the limits", "[kvsh]") {
  Limits l;
  l.max_key_size = 8;
  l.max_value_size = 16;
  CHECK(Parse("put 12345678 0123456789abcdef", l).ok());
  CHECK(ParseError("put 123456789 v", l) == "key too long: 9 bytes; keys are 1 to 8 bytes");
  CHECK(ParseError("put k 0123456789abcdefg", l) ==
        "value too large: 17 bytes; the limit is 16 bytes (16 B)");
  CHECK(ParseError("get \"\"", l) == "empty key: keys are 1 to 8 bytes");
  CHECK_THAT(ParseError("mget a b 123456789", l), Catch::Contains("key too long"));
  CHECK_THAT(ParseError("del a '' c", l), Catch::Contains("empty key"));
  CHECK_THAT(ParseError("cas k (nil) 0123456789abcdefg", l), Catch::Contains("value too large"));
  CHECK(Parse("put k \"\"", l).ok());  // an empty value is a value
  Limits big;
  big.max_value_size = 1 << 20;
  CHECK_THAT(ParseError("put k " + std::string((1 << 20) + 1, 'x'), big),
             Catch::Contains("the limit is 1048576 bytes (1.0 MiB)"));
}

TEST_CASE("put/set takes Redis's SET options NX, XX and GET", "[kvsh]") {
  absl::StatusOr<Command> c = Parse("set k v");
  REQUIRE(c.ok());
  CHECK_FALSE(c->if_absent);
  CHECK_FALSE(c->if_present);
  CHECK_FALSE(c->get_old);
  c = Parse("set k v NX");
  REQUIRE(c.ok());
  CHECK(c->if_absent);
  CHECK_FALSE(c->if_present);
  CHECK(c->args == std::vector<std::string>{"k", "v"});
  c = Parse("set k v xx get");  // case-insensitive
  REQUIRE(c.ok());
  CHECK(c->if_present);
  CHECK(c->get_old);
  c = Parse("put k v GET NX");  // in any order
  REQUIRE(c.ok());
  CHECK(c->if_absent);
  CHECK(c->get_old);
  CHECK(c->args == std::vector<std::string>{"k", "v"});
  c = Parse("set k NX");  // a value that reads like an option is a value
  REQUIRE(c.ok());
  CHECK(c->args == std::vector<std::string>{"k", "NX"});
  CHECK_FALSE(c->if_absent);
  CHECK_THAT(ParseError("set k v NX XX"), Catch::Contains("one of NX and XX, once"));
  CHECK_THAT(ParseError("set k v NX NX"), Catch::Contains("one of NX and XX, once"));
  CHECK_THAT(ParseError("set k v GET get"), Catch::Contains("GET given twice"));
  CHECK_THAT(ParseError("set k v EX 10"),
             Catch::Contains("EX is not supported: keys do not expire"));
  CHECK_THAT(ParseError("set k v keepttl"), Catch::Contains("KEEPTTL is not supported"));
  CHECK_THAT(ParseError("set k v \"\x01\""), Catch::Contains("\"\\x01\" is not an option"));
  Limits l;
  l.max_value_size = 2;
  CHECK_THAT(ParseError("set k abc NX", l), Catch::Contains("value too large"));
}

TEST_CASE("a command given as words is taken as it is", "[kvsh]") {
  const std::vector<Token> t =
      WordTokens({"put", "k", "two words; \"q\"", "(nil)", std::string("\0", 1), ""});
  REQUIRE(t.size() == 6);
  CHECK(t[2].text == "two words; \"q\"");  // no splitting, quoting or ';'
  CHECK(t[4].text == std::string("\0", 1));
  CHECK(t[5].text.empty());
  for (const Token& x : t) CHECK_FALSE(x.quoted);
  absl::StatusOr<Command> c = ParseCommand(WordTokens({"cas", "k", "(nil)", "v"}), Limits{});
  REQUIRE(c.ok());
  CHECK(c->expect_absent);  // as typed unquoted in the shell
  c = ParseCommand(WordTokens({"SET", "k", "-1", "nx"}), Limits{});
  REQUIRE(c.ok());
  CHECK(c->if_absent);
  CHECK(c->args == std::vector<std::string>{"k", "-1"});
}

TEST_CASE("cas: an unquoted (nil) means absent, a quoted one is a value", "[kvsh]") {
  absl::StatusOr<Command> c = Parse("cas k (nil) v");
  REQUIRE(c.ok());
  CHECK(c->expect_absent);
  c = Parse("cas k \"(nil)\" v");
  REQUIRE(c.ok());
  CHECK_FALSE(c->expect_absent);
  CHECK(c->args[1] == "(nil)");
  c = Parse("cas k old new");
  REQUIRE(c.ok());
  CHECK_FALSE(c->expect_absent);
  CHECK(c->args == std::vector<std::string>{"k", "old", "new"});
}

TEST_CASE("replies print as redis-cli prints them, and bare with --raw", "[kvsh]") {
  CHECK(Format(Reply::Status("OK"), false) == "OK\n");
  CHECK(Format(Reply::Nil(), false) == "(nil)\n");
  // --raw keeps (nil): redis-cli --raw prints an empty line for it, the same as an empty value.
  CHECK(Format(Reply::Nil(), true) == "(nil)\n");
  CHECK(Format(Reply::String(""), true) == "\n");
  CHECK(Format(Reply::String(""), false) == "\"\"\n");
  CHECK(Format(Reply::String("a b\n"), false) == "\"a b\\n\"\n");
  CHECK(Format(Reply::String("a b\n"), true) == "a b\n\n");
  CHECK(Format(Reply::Integer(3), false) == "(integer) 3\n");
  CHECK(Format(Reply::Integer(3), true) == "3\n");
  CHECK(Format(Reply::Error("ERR nope"), false) == "(error) ERR nope\n");
  CHECK(Format(Reply::Error("ERR nope"), true) == "ERR nope\n");
  const Reply list = Reply::Array({Reply::String("1"), Reply::Nil(), Reply::String("\x01")});
  CHECK(Format(list, false) == "1) \"1\"\n2) (nil)\n3) \"\\x01\"\n");
  CHECK(Format(list, true) == "1\n(nil)\n\x01\n");
  std::vector<Reply> ten(10, Reply::Integer(0));
  const std::string t = Format(Reply::Array(ten), false);
  CHECK_THAT(t, Catch::StartsWith(" 1) (integer) 0\n"));
  CHECK_THAT(t, Catch::EndsWith("\n10) (integer) 0\n"));
  CHECK(Format(Reply::Array({}), false) == "(empty array)\n");
  CHECK(Format(Reply::Text("a\nb\n"), false) == "a\nb\n");
  CHECK_FALSE(list.failed());
  CHECK(Reply::Array({Reply::Nil(), Reply::Error("ERR x")}).failed());
}

TEST_CASE("store errors become error replies with their code", "[kvsh]") {
  CHECK(ErrorReply(absl::InvalidArgumentError("kv: bad")).text == "ERR kv: bad");
  CHECK(ErrorReply(absl::UnavailableError("kv: gone")).text == "UNAVAILABLE kv: gone");
  CHECK(ErrorReply(absl::ResourceExhaustedError("full")).text == "RESOURCE_EXHAUSTED full");
  // A refused stored value (incr of a non-integer): Redis's words, without the store's prefix.
  CHECK(Format(ErrorReply(
                   absl::FailedPreconditionError("kv: value is not an integer or out of range")),
               false) == "(error) ERR value is not an integer or out of range\n");
  CHECK(
      ErrorReply(absl::FailedPreconditionError("kv: increment or decrement would overflow")).text ==
      "ERR increment or decrement would overflow");
}

TEST_CASE("help lists every command and explains one", "[kvsh]") {
  absl::StatusOr<std::string> all = HelpText("", Limits{});
  REQUIRE(all.ok());
  for (const std::string& name : CommandNames()) CHECK_THAT(*all, Catch::Contains(name));
  CHECK_THAT(*all, Catch::Contains("values 0 to 1048576 bytes (1.0 MiB)"));
  absl::StatusOr<std::string> cas = HelpText("CAS", Limits{});
  REQUIRE(cas.ok());
  CHECK_THAT(*cas, Catch::StartsWith("usage: cas KEY EXPECTED NEW\n"));
  CHECK_THAT(*cas, Catch::Contains("(nil)"));
  CHECK(absl::IsNotFound(HelpText("nope", Limits{}).status()));
  // del: one transaction for all the keys, in the list and in its details alike.
  CHECK_THAT(*all, Catch::Contains("delete keys, all in one transaction"));
  absl::StatusOr<std::string> del = HelpText("del", Limits{});
  REQUIRE(del.ok());
  CHECK_THAT(*del, Catch::Contains("every KEY in one transaction"));
  CHECK_THAT(*del, !Catch::Contains("per key"));
  absl::StatusOr<std::string> set = HelpText("set", Limits{});
  REQUIRE(set.ok());
  CHECK_THAT(*set, Catch::StartsWith("usage: put KEY VALUE [NX|XX] [GET]\n"));
  CHECK_THAT(*set, Catch::Contains("one transaction"));
  absl::StatusOr<std::string> incrby = HelpText("incrby", Limits{});
  REQUIRE(incrby.ok());
  CHECK_THAT(*incrby, Catch::StartsWith("usage: incrby KEY INCREMENT\n"));
  absl::StatusOr<std::string> exists = HelpText("exists", Limits{});
  REQUIRE(exists.ok());
  CHECK_THAT(*exists, Catch::Contains("a key named twice counts twice"));
}

TEST_CASE("TAB completes command names and aliases, case-insensitively", "[kvsh]") {
  using Names = std::vector<std::string>;
  CHECK(CompleteCommandName("se") == Names{"set", "setnx"});
  CHECK(CompleteCommandName("Se") == Names{"set", "setnx"});
  CHECK(CompleteCommandName("SE") == Names{"SET", "SETNX"});
  CHECK(CompleteCommandName("de") == Names{"decr", "decrby", "del", "delete"});
  CHECK(CompleteCommandName("get") == Names{"get", "getset"});
  CHECK(CompleteCommandName("x").empty());
  // Every name help lists completes from its first letter.
  for (const std::string& name : CommandNames()) {
    const Names all = CompleteCommandName(name.substr(0, 1));
    CHECK(std::find(all.begin(), all.end(), name) != all.end());
  }
  CHECK(CompleteCommandName("").size() == CommandNames().size() + 3);  // + set, delete, exit
}

TEST_CASE("argument hints: the rest of the usage, as redis-cli shows them", "[kvsh]") {
  CHECK(ArgumentHint("set") == " KEY VALUE [NX|XX] [GET]");
  CHECK(ArgumentHint("set ") == "KEY VALUE [NX|XX] [GET]");
  CHECK(ArgumentHint("SET k") == " VALUE [NX|XX] [GET]");
  CHECK(ArgumentHint("set k ") == "VALUE [NX|XX] [GET]");
  CHECK(ArgumentHint("set k v ") == "[NX|XX] [GET]");
  CHECK(ArgumentHint("set k \"two words\" NX ") == "[NX|XX] [GET]");  // optional ones stay
  CHECK(ArgumentHint("get k") == "");
  CHECK(ArgumentHint("get ") == "KEY");
  CHECK(ArgumentHint("del a b ") == "[KEY ...]");
  CHECK(ArgumentHint("scan 0 ") == "[MATCH PATTERN] [COUNT N]");
  CHECK(ArgumentHint("mset ") == "KEY VALUE [KEY VALUE ...]");
  CHECK(ArgumentHint("cas k (nil) ") == "NEW");
  CHECK(ArgumentHint("help") == " [COMMAND]");
  CHECK(ArgumentHint("dbsize ") == "");
  CHECK(ArgumentHint("quit") == "");
  // The last command of the line; none after a ';', an unknown command or open quotes.
  CHECK(ArgumentHint("put a 1; incrby ") == "KEY INCREMENT");
  CHECK(ArgumentHint("put a 1;") == "");
  CHECK(ArgumentHint("put a 1; ") == "");
  CHECK(ArgumentHint("frob ") == "");
  CHECK(ArgumentHint("put k \"open ") == "");
  CHECK(ArgumentHint("") == "");
  CHECK(ArgumentHint("   ") == "");
  CHECK(ArgumentHint("# put ") == "");
  // The hint is the help's usage: they never disagree.
  for (const std::string& name : CommandNames()) {
    absl::StatusOr<std::string> help = HelpText(name, Limits{});
    REQUIRE(help.ok());
    if (name == "help") continue;  // its help is the list
    const std::string hint = ArgumentHint(name);
    CHECK_THAT(*help, Catch::StartsWith(absl::StrCat("usage: ", name, hint, "\n")));
  }
}

TEST_CASE("stats: a table with a total, or tab-separated with --raw", "[kvsh]") {
  std::vector<StatsRow> rows(2);
  rows[0].node = 0;
  rows[0].buckets = 8192;
  rows[0].bucket_bytes = 256;
  rows[0].items = 10;
  rows[0].inline_items = 9;
  rows[0].memory_bytes = 2 << 20;
  rows[1].node = 1;
  rows[1].buckets = 8192;
  rows[1].bucket_bytes = 256;
  rows[1].memory_bytes = 2 << 20;
  const std::string table = FormatStats(rows, false);
  CHECK_THAT(table, Catch::StartsWith("node "));
  CHECK_THAT(table, Catch::Contains("8192 x 256 B"));
  CHECK_THAT(table, Catch::Contains("204.8 KiB"));  // 2 MiB / 10 items
  CHECK_THAT(table, Catch::Contains("\ntotal "));
  CHECK_THAT(table, Catch::EndsWith("2 shards, 10 items, 4.0 MiB\n"));
  CHECK(FormatStats(rows, true) ==
        "node\titems\tinline_items\tdisplaced_items\toverflow_blocks\tbuckets\tbucket_bytes\t"
        "out_of_line_bytes\tmemory_bytes\n"
        "0\t10\t9\t0\t0\t8192\t256\t0\t2097152\n"
        "1\t0\t0\t0\t0\t8192\t256\t0\t2097152\n");
  CHECK(HumanBytes(0) == "0 B");
  CHECK(HumanBytes(1023) == "1023 B");
  CHECK(HumanBytes(1536) == "1.5 KiB");
  CHECK(HumanBytes(uint64_t{3} << 30) == "3.0 GiB");
}

}  // namespace
}  // namespace kvsh
}  // namespace farm
