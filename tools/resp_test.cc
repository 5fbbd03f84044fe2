#include "tools/resp.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "catch2/catch.hpp"
#include "tools/kvsh_lib.h"

namespace farm {
namespace resp {
namespace {

using Args = std::vector<std::string>;

// Every request of `in`, as a server reads them: the commands' arguments, "<empty>" for an
// empty request, "<error: ...>" at a protocol error (and nothing after it), and what is left.
std::vector<Args> ParseAll(absl::string_view in, const Limits& limits, std::string* rest) {
  std::vector<Args> out;
  size_t used = 0;
  for (;;) {
    Request r = ParseRequest(in.substr(used), limits);
    if (r.kind == Request::kIncomplete) break;
    if (r.kind == Request::kError) {
      out.push_back({"<error: " + r.error + ">"});
      break;
    }
    REQUIRE(r.consumed > 0);
    used += r.consumed;
    out.push_back(r.kind == Request::kEmpty ? Args{"<empty>"} : r.args);
  }
  *rest = std::string(in.substr(used));
  return out;
}

std::vector<Args> ParseAll(absl::string_view in, const Limits& limits = {}) {
  std::string rest;
  return ParseAll(in, limits, &rest);
}

TEST_CASE("multibulk requests are binary-safe and pipelined") {
  const std::string value("a\r\nb\0c", 6);  // \r\n and a zero byte inside
  const std::string in = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\n" + value +
                         "\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$0\r\n\r\n";
  std::string rest;
  const std::vector<Args> got = ParseAll(in, {}, &rest);
  REQUIRE(got == std::vector<Args>{{"SET", "k", value}, {"GET", "k"}, {""}});
  CHECK(rest.empty());
}

TEST_CASE("a request cut anywhere is incomplete until its last byte arrives") {
  const std::string in = "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
  for (size_t cut = 0; cut < in.size(); ++cut) {
    INFO("cut at " << cut);
    const Request r = ParseRequest(absl::string_view(in).substr(0, cut), Limits{});
    CHECK(r.kind == Request::kIncomplete);
  }
  const Request r = ParseRequest(in + "*1\r\n$4\r\nPI", Limits{});
  REQUIRE(r.kind == Request::kCommand);
  CHECK(r.consumed == in.size());
  CHECK(r.args == Args{"ECHO", "hello"});
}

TEST_CASE("inline commands are split as redis-server splits them") {
  CHECK(ParseAll("PING\r\n") == std::vector<Args>{{"PING"}});
  CHECK(ParseAll("set  k \"a b\\r\\n\\x41\"\nget 'it\\'s'\r\n") ==
        std::vector<Args>{{"set", "k", "a b\r\nA"}, {"get", "it's"}});
  CHECK(ParseAll("\r\n  \r\nPING\r\n") == std::vector<Args>{{"<empty>"}, {"<empty>"}, {"PING"}});
  std::string rest;
  CHECK(ParseAll("PING\r\nGET a", {}, &rest) == std::vector<Args>{{"PING"}});
  CHECK(rest == "GET a");
  CHECK(ParseAll("GET \"open\r\n") ==
        std::vector<Args>{{"<error: Protocol error: unbalanced quotes in request>"}});
  CHECK(ParseAll("GET \"a\"b\r\n") ==
        std::vector<Args>{{"<error: Protocol error: unbalanced quotes in request>"}});
  // As sdssplitargs: a quote opens quoting inside a word too, and \x without two hex digits is
  // an x (kvsh refuses that one; the gateway answers as redis-server does).
  CHECK(ParseAll("GET ab\"c d\"\r\n") == std::vector<Args>{{"GET", "abc d"}});
  CHECK(ParseAll("GET \"\\xZZ\\q\"\r\n") == std::vector<Args>{{"GET", "xZZq"}});
  CHECK(ParseAll("GET 'a\\b'\r\n") == std::vector<Args>{{"GET", "a\\b"}});
}

TEST_CASE("empty multibulks are no command") {
  CHECK(ParseAll("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n") ==
        std::vector<Args>{{"<empty>"}, {"<empty>"}, {"PING"}});
}

TEST_CASE("protocol errors use redis-server's words") {
  Limits limits;
  limits.max_bulk = 100;
  limits.max_args = 10;
  limits.max_inline = 64;
  const auto error = [&](absl::string_view in) {
    const Request r = ParseRequest(in, limits);
    return r.kind == Request::kError ? r.error : std::string("<no error>");
  };
  CHECK(error("*1\r\n$101\r\n") == "Protocol error: invalid bulk length");
  CHECK(error("*1\r\n$-1\r\n") == "Protocol error: invalid bulk length");
  CHECK(error("*1\r\n$1x\r\n") == "Protocol error: invalid bulk length");
  CHECK(error("*1\r\n$99999999999999999999999\r\n") == "Protocol error: invalid bulk length");
  CHECK(error("*11\r\n") == "Protocol error: invalid multibulk length");
  CHECK(error("*abc\r\n") == "Protocol error: invalid multibulk length");
  CHECK(error("*\r\n") == "Protocol error: invalid multibulk length");
  CHECK(error("*1\r\nx\r\n") == "Protocol error: expected '$', got 'x'");
  CHECK(error("*1\r\n" + std::string(70, '$')) == "Protocol error: too big bulk count string");
  CHECK(error("*" + std::string(70, '1')) == "Protocol error: too big mbulk count string");
  CHECK(error(std::string(70, 'a')) == "Protocol error: too big inline request");
  CHECK(error(std::string(70, 'a') + "\r\n") == "Protocol error: too big inline request");
  // At the limit is fine.
  CHECK(ParseRequest("*1\r\n$100\r\n" + std::string(100, 'v') + "\r\n", limits).kind ==
        Request::kCommand);
  // Ten arguments of 100 bytes are 1084 bytes: refused once a header says the request will
  // not fit, before its bytes arrive.
  limits.max_request = 1000;
  std::string big = "*10\r\n";
  for (int i = 0; i < 9; ++i) big += "$100\r\n" + std::string(100, 'v') + "\r\n";
  CHECK(error(big) == "<no error>");  // 976 bytes so far
  CHECK(error(big + "$100\r\n") == "Protocol error: request larger than 1000 bytes");
}

TEST_CASE("a pipelined stream read in pieces of any size gives the same commands") {
  const std::string stream =
      "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n"
      "PING\r\n"
      "*0\r\n"
      "get \"x y\"\n"
      "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n";
  const std::vector<Args> whole = ParseAll(stream);
  REQUIRE(whole.size() == 5);
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    // What a server does: append what a read brought, answer every complete request.
    std::string buffer;
    std::vector<Args> got;
    for (size_t at = 0; at < stream.size();) {
      const size_t n = std::min<size_t>(1 + rng() % 9, stream.size() - at);
      buffer += stream.substr(at, n);
      at += n;
      std::string rest;
      for (Args& a : ParseAll(buffer, {}, &rest)) got.push_back(std::move(a));
      buffer = rest;
    }
    CHECK(buffer.empty());
    REQUIRE(got == whole);
  }
}

TEST_CASE("random bytes are parsed or refused, never read out of bounds") {
  std::mt19937 rng(11);
  const std::string alphabet = "*$\r\n0123456789-\"' \\xaZ";
  Limits limits;
  limits.max_bulk = 64;
  limits.max_args = 16;
  limits.max_inline = 128;
  for (int round = 0; round < 20000; ++round) {
    std::string in;
    const size_t n = rng() % 40;
    for (size_t i = 0; i < n; ++i) in.push_back(alphabet[rng() % alphabet.size()]);
    const Request r = ParseRequest(in, limits);
    if (r.kind == Request::kCommand || r.kind == Request::kEmpty) {
      REQUIRE(r.consumed > 0);
      REQUIRE(r.consumed <= in.size());
    }
    if (r.kind == Request::kError) REQUIRE(absl::StartsWith(r.error, "Protocol error: "));
  }
}

TEST_CASE("replies are encoded as RESP2") {
  using kvsh::Reply;
  std::string out;
  AppendReply(Reply::Status("OK"), &out);
  AppendReply(Reply::Error("ERR bad\r\nthing"), &out);
  AppendReply(Reply::Nil(), &out);
  AppendReply(Reply::String(std::string("a\r\n\0", 4)), &out);
  AppendReply(Reply::Integer(-42), &out);
  AppendReply(Reply::Array({}), &out);
  AppendReply(kvsh::ScanReply(7, {"k1", "k2"}), &out);
  AppendReply(Reply::Text("# Keyspace\ndb0:keys=1\n"), &out);
  using namespace std::string_literals;  // "..."s: the \0 is part of the string
  CHECK(out ==
        "+OK\r\n-ERR bad  thing\r\n$-1\r\n$4\r\na\r\n\0\r\n:-42\r\n*0\r\n"
        "*2\r\n$1\r\n7\r\n*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n"
        "$24\r\n# Keyspace\r\ndb0:keys=1\r\n\r\n"s);
  CHECK(ErrorLine("ERR x") == "-ERR x\r\n");
}

}  // namespace
}  // namespace resp
}  // namespace farm
