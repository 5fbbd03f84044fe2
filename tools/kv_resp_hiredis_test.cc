// //tools:kv_resp through hiredis (Debian's libhiredis, the C client most Redis libraries wrap):
// a real gateway on a real one-node cluster (kv_resp --local=1), then binary-safe values (zero
// bytes and \r\n inside; the largest value the store takes), nil and nested-array replies,
// pipelined requests answered in order (also 40 MiB of replies to GETs sent at once), connections
// on several threads at once, and a value one byte over the limit: a protocol error that closes
// that connection only.
#include <hiredis/hiredis.h>
#include <signal.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"
#include "tools/child_process.h"

namespace farm {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

// The gateway, started once for every test case (a cluster takes seconds to start here).
class Gateway {
 public:
  static Gateway& Get() {
    static Gateway* g = new Gateway();  // stopped by StopGateway at the end of the last case
    return *g;
  }

  int port() const { return port_; }

  Context Connect() const {
    timeval timeout{30, 0};
    Context c(redisConnectWithTimeout("127.0.0.1", port_, timeout));
    REQUIRE(c != nullptr);
    INFO("connecting to kv_resp: " << c->errstr);
    REQUIRE(c->err == 0);
    redisSetTimeout(c.get(), timeout);  // a hang fails the test instead of blocking it
    return c;
  }

  // SIGTERM: it must exit 0.
  std::string Stop() {
    child_->Kill(SIGTERM);
    return child_->Stop(absl::Seconds(30));
  }

 private:
  Gateway() {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
        "tools/kv_resp",
        {"--local=1", "--port=0", "--provider=shm", "--host=127.0.0.1", "--lock_memory=false"});
    REQUIRE(child.ok());
    child_ = std::move(*child);
    absl::StatusOr<std::string> ready =
        child_->WaitForLine("READY port=", absl::Now() + absl::Seconds(120));
    INFO("kv_resp's READY line: " << ready.status());
    REQUIRE(ready.ok());
    absl::string_view rest = absl::StripPrefix(*ready, "READY port=");
    REQUIRE(absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &port_));
  }

  std::unique_ptr<ChildProcess> child_;
  int port_ = 0;
};

Reply Command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return Reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), lens.data())));
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST_CASE("binary-safe values up to the store's limit") {
  Context c = Gateway::Get().Connect();
  const std::string small = std::string("a\0b\r\nc\r\n", 8) + RandomBytes(1000, 1);
  const std::string largest = RandomBytes(1 << 20, 2);  // kv::kMaxValueSize
  for (const std::string* v : {&small, &largest}) {
    Reply set = Command(c.get(), {"SET", std::string("bin\r\nkey\0", 9), *v});
    REQUIRE(set != nullptr);
    INFO(set->str);
    REQUIRE(set->type == REDIS_REPLY_STATUS);
    CHECK(std::string(set->str) == "OK");
    Reply get = Command(c.get(), {"GET", std::string("bin\r\nkey\0", 9)});
    REQUIRE(get != nullptr);
    REQUIRE(get->type == REDIS_REPLY_STRING);
    CHECK(std::string(get->str, get->len) == *v);
  }
}

TEST_CASE("pipelined GETs of large values are all answered, more than the gateway buffers") {
  Context c = Gateway::Get().Connect();
  const std::string value = RandomBytes(1 << 20, 3);
  Reply set = Command(c.get(), {"SET", "large", value});
  REQUIRE(set != nullptr);
  REQUIRE(set->type == REDIS_REPLY_STATUS);
  constexpr int kGets = 40;  // 40 MiB of replies: the gateway holds 16 MiB at most
  for (int i = 0; i < kGets; ++i) REQUIRE(redisAppendCommand(c.get(), "GET large") == REDIS_OK);
  REQUIRE(redisAppendCommand(c.get(), "PING") == REDIS_OK);
  for (int i = 0; i < kGets; ++i) {
    void* raw = nullptr;
    REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
    Reply r(static_cast<redisReply*>(raw));
    REQUIRE(r->type == REDIS_REPLY_STRING);
    REQUIRE(std::string(r->str, r->len) == value);
  }
  void* raw = nullptr;
  REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
  Reply pong(static_cast<redisReply*>(raw));
  REQUIRE(pong->type == REDIS_REPLY_STATUS);
  CHECK(std::string(pong->str) == "PONG");
}

TEST_CASE("nil, integer and nested array replies") {
  Context c = Gateway::Get().Connect();
  Reply r = Command(c.get(), {"GET", "never-set"});
  REQUIRE(r != nullptr);
  CHECK(r->type == REDIS_REPLY_NIL);
  Command(c.get(), {"SET", "m1", "x"});
  r = Command(c.get(), {"MGET", "m1", "never-set"});
  REQUIRE(r != nullptr);
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  REQUIRE(r->elements == 2);
  CHECK(std::string(r->element[0]->str, r->element[0]->len) == "x");
  CHECK(r->element[1]->type == REDIS_REPLY_NIL);
  r = Command(c.get(), {"SCAN", "0", "COUNT", "1000"});
  REQUIRE(r != nullptr);
  REQUIRE(r->type == REDIS_REPLY_ARRAY);
  REQUIRE(r->elements == 2);
  CHECK(r->element[0]->type == REDIS_REPLY_STRING);
  CHECK(r->element[1]->type == REDIS_REPLY_ARRAY);
  r = Command(c.get(), {"EXISTS", "m1", "m1", "never-set"});
  REQUIRE(r != nullptr);
  REQUIRE(r->type == REDIS_REPLY_INTEGER);
  CHECK(r->integer == 2);
}

TEST_CASE("pipelined requests are answered in order") {
  Context c = Gateway::Get().Connect();
  Command(c.get(), {"DEL", "counter"});
  constexpr int kRequests = 1000;
  for (int i = 0; i < kRequests; ++i) {
    REQUIRE(redisAppendCommand(c.get(), "INCR counter") == REDIS_OK);
    if (i % 100 == 0) REQUIRE(redisAppendCommand(c.get(), "GET counter") == REDIS_OK);
  }
  int64_t expected = 0;
  for (int i = 0; i < kRequests; ++i) {
    void* raw = nullptr;
    REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
    Reply r(static_cast<redisReply*>(raw));
    REQUIRE(r->type == REDIS_REPLY_INTEGER);
    CHECK(r->integer == ++expected);
    if (i % 100 == 0) {
      REQUIRE(redisGetReply(c.get(), &raw) == REDIS_OK);
      Reply g(static_cast<redisReply*>(raw));
      REQUIRE(g->type == REDIS_REPLY_STRING);
      CHECK(std::string(g->str, g->len) == absl::StrCat(expected));
    }
  }
}

TEST_CASE("connections on several threads at once") {
  Context setup = Gateway::Get().Connect();
  Command(setup.get(), {"DEL", "shared"});
  constexpr int kThreads = 8;
  constexpr int kIncrements = 100;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      timeval timeout{30, 0};
      Context c(redisConnectWithTimeout("127.0.0.1", Gateway::Get().port(), timeout));
      if (c == nullptr || c->err != 0) {
        failures[t] = kIncrements;
        return;
      }
      redisSetTimeout(c.get(), timeout);
      for (int i = 0; i < kIncrements; ++i) {
        Reply r(static_cast<redisReply*>(redisCommand(c.get(), "INCR shared")));
        if (r == nullptr || r->type != REDIS_REPLY_INTEGER) ++failures[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
  Reply r = Command(setup.get(), {"GET", "shared"});
  REQUIRE(r != nullptr);
  REQUIRE(r->type == REDIS_REPLY_STRING);
  CHECK(std::string(r->str, r->len) == absl::StrCat(kThreads * kIncrements));
}

TEST_CASE("a value over the limit closes that connection only") {
  Context bad = Gateway::Get().Connect();
  Context good = Gateway::Get().Connect();
  // Only the header of the value: the gateway answers it without reading the value (whose bytes,
  // were they sent, might meet a connection already reset).
  const std::string header = "*3\r\n$3\r\nSET\r\n$7\r\ntoo-big\r\n$1048577\r\n";
  REQUIRE(redisAppendFormattedCommand(bad.get(), header.data(), header.size()) == REDIS_OK);
  void* raw = nullptr;
  REQUIRE(redisGetReply(bad.get(), &raw) == REDIS_OK);
  Reply r(static_cast<redisReply*>(raw));
  REQUIRE(r->type == REDIS_REPLY_ERROR);
  CHECK(std::string(r->str) == "ERR Protocol error: invalid bulk length");
  r = Command(bad.get(), {"PING"});
  CHECK(r == nullptr);  // the gateway closed it
  r = Command(good.get(), {"PING"});
  REQUIRE(r != nullptr);
  CHECK(std::string(r->str) == "PONG");
}

// Last (Catch2 runs the cases in the order they are declared).
TEST_CASE("SIGTERM stops the gateway with status 0") {
  CHECK(Gateway::Get().Stop() == "exited with status 0");
}

}  // namespace
}  // namespace farm
