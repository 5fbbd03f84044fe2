// HistoryRecorder on its own: the JSON it writes (document and journal), its outcome mapping, its
// misuse errors, and concurrent recording. kv/history_lincheck_test.cc feeds recorded histories
// to the checker.
#include "kv/history.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"

namespace farm {
namespace kv {
namespace {

// A clock that ticks by 10 on every reading, from 1000.
HistoryRecorder::Clock FakeClock() {
  auto now = std::make_shared<std::atomic<int64_t>>(1000);
  return [now] { return now->fetch_add(10); };
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST_CASE("JsonString escapes quotes, backslashes and every non-printable byte", "[kv_history]") {
  CHECK(JsonString("") == "\"\"");
  CHECK(JsonString("plain key 7") == "\"plain key 7\"");
  CHECK(JsonString("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(JsonString(std::string("\0\n\x1f\x7f", 4)) == "\"\\u0000\\u000a\\u001f\\u007f\"");
  CHECK(JsonString("\x80\xff\xc3\xa9") == "\"\\u0080\\u00ff\\u00c3\\u00a9\"");
}

TEST_CASE("the document holds every operation with its outcome, or null", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  auto get = rec.Call(3, HistoryOp::Get("k1"));
  auto put = rec.Call(1, HistoryOp::Put("k1", "x"));
  auto del = rec.Call(2, HistoryOp::Del("k1"));
  auto cas = rec.Call(2, HistoryOp::Cas("k1", std::nullopt, "y"));
  auto cas2 = rec.Call(4, HistoryOp::Cas("k\xff", std::string("y"), "z"));
  auto get2 = rec.Call(5, HistoryOp::Get("k2"));
  REQUIRE(rec.Return(get, HistoryOutcome::Get(std::string("v"))).ok());
  // put: never returns (its process died)
  REQUIRE(rec.Return(del, HistoryOutcome::Del(false)).ok());
  REQUIRE(rec.Return(cas, HistoryOutcome::Cas(true)).ok());
  REQUIRE(rec.ReturnUnknown(cas2, "UNAVAILABLE: node 2 left").ok());
  REQUIRE(rec.Return(get2, HistoryOutcome::Get(std::nullopt)).ok());
  (void)put;
  CHECK(rec.size() == 6);
  CHECK(rec.unknown() == 2);
  CHECK(rec.ToJson() ==
        "{\"operations\": [\n"
        "{\"client\": 3, \"call\": 1000, \"return\": 1060, \"op\": \"get\", \"key\": \"k1\", "
        "\"found\": true, \"value\": \"v\"},\n"
        "{\"client\": 1, \"call\": 1010, \"return\": null, \"op\": \"put\", \"key\": \"k1\", "
        "\"value\": \"x\"},\n"
        "{\"client\": 2, \"call\": 1020, \"return\": 1070, \"op\": \"del\", \"key\": \"k1\", "
        "\"deleted\": false},\n"
        "{\"client\": 2, \"call\": 1030, \"return\": 1080, \"op\": \"cas\", \"key\": \"k1\", "
        "\"expected\": null, \"value\": \"y\", \"ok\": true},\n"
        "{\"client\": 4, \"call\": 1040, \"return\": null, \"op\": \"cas\", \"key\": \"k\\u00ff\", "
        "\"expected\": \"y\", \"value\": \"z\", \"error\": \"UNAVAILABLE: node 2 left\"},\n"
        "{\"client\": 5, \"call\": 1050, \"return\": 1100, \"op\": \"get\", \"key\": \"k2\", "
        "\"found\": false}\n"
        "]}\n");
  const std::string path = TempPath("doc.json");
  REQUIRE(rec.WriteJson(path).ok());
  CHECK(ReadFile(path) == rec.ToJson());
  CHECK(access((path + ".tmp").c_str(), F_OK) != 0);
}

TEST_CASE("the default clock is CLOCK_MONOTONIC, which no clock step can move", "[kv_history]") {
  // CLOCK_REALTIME can be stepped (NTP, an administrator) while a history is recorded, which
  // would stretch or shrink intervals; CLOCK_MONOTONIC is shared by every process of one host.
  auto monotonic = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  HistoryRecorder rec;
  const int64_t before = monotonic();
  rec.Call(1, HistoryOp::Get("k"));
  const int64_t after = monotonic();
  const std::string json = rec.ToJson();
  const size_t at = json.find("\"call\": ");
  REQUIRE(at != std::string::npos);
  const int64_t call = std::stoll(json.substr(at + 8));
  CHECK(call >= before);
  CHECK(call <= after);
}

TEST_CASE("an empty history is an empty array", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  CHECK(rec.ToJson() == "{\"operations\": [\n]}\n");
}

TEST_CASE("the Return helpers map kv::Client results to outcomes", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  auto g1 = rec.Call(0, HistoryOp::Get("a"));
  auto g2 = rec.Call(0, HistoryOp::Get("a"));
  auto g3 = rec.Call(0, HistoryOp::Get("a"));
  auto p1 = rec.Call(0, HistoryOp::Put("a", "1"));
  auto p2 = rec.Call(0, HistoryOp::Put("a", "2"));
  auto d1 = rec.Call(0, HistoryOp::Del("a"));
  auto d2 = rec.Call(0, HistoryOp::Del("a"));
  auto c1 = rec.Call(0, HistoryOp::Cas("a", std::nullopt, "3"));
  auto c2 = rec.Call(0, HistoryOp::Cas("a", std::nullopt, "3"));
  REQUIRE(rec.ReturnGet(g1, std::string("1")).ok());
  REQUIRE(rec.ReturnGet(g2, absl::NotFoundError("no such key")).ok());
  REQUIRE(rec.ReturnGet(g3, absl::DeadlineExceededError("slow")).ok());
  REQUIRE(rec.ReturnPut(p1, absl::OkStatus()).ok());
  REQUIRE(rec.ReturnPut(p2, absl::AbortedError("conflicts")).ok());
  REQUIRE(rec.ReturnDel(d1, true).ok());
  REQUIRE(rec.ReturnDel(d2, absl::UnavailableError("gone")).ok());
  REQUIRE(rec.ReturnCas(c1, false).ok());
  REQUIRE(rec.ReturnCas(c2, absl::UnavailableError("gone")).ok());
  std::vector<std::string> lines = absl::StrSplit(rec.ToJson(), '\n');
  REQUIRE(lines.size() == 12);  // header, 9 operations, "]}", ""
  CHECK_THAT(lines[1], Catch::EndsWith("\"found\": true, \"value\": \"1\"},"));
  CHECK_THAT(lines[2], Catch::EndsWith("\"key\": \"a\", \"found\": false},"));
  CHECK_THAT(lines[3], Catch::Contains("\"return\": null"));
  CHECK_THAT(lines[3], Catch::EndsWith("\"error\": \"DEADLINE_EXCEEDED: slow\"},"));
  CHECK_THAT(lines[4], Catch::EndsWith("\"value\": \"1\"},"));
  CHECK_THAT(lines[5], Catch::EndsWith("\"error\": \"ABORTED: conflicts\"},"));
  CHECK_THAT(lines[6], Catch::EndsWith("\"deleted\": true},"));
  CHECK_THAT(lines[7], Catch::Contains("\"return\": null"));
  CHECK_THAT(lines[8], Catch::EndsWith("\"ok\": false},"));
  CHECK_THAT(lines[9], Catch::Contains("\"return\": null"));
  CHECK(rec.unknown() == 4);
}

TEST_CASE("the atomic updates are recorded with their outcomes", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  auto nx = rec.Call(0, HistoryOp::PutIfAbsent("a", "1"));
  auto xx = rec.Call(1, HistoryOp::Setxx("a", "2"));
  auto gs = rec.Call(2, HistoryOp::Getset("a", "3"));
  auto gs2 = rec.Call(3, HistoryOp::Getset("b", "4"));
  auto ap = rec.Call(4, HistoryOp::Append("a", "\x01"));
  auto ex = rec.Call(5, HistoryOp::Exists("a"));
  auto in = rec.Call(6, HistoryOp::Incr("n", -9223372036854775807LL - 1));
  auto in2 = rec.Call(7, HistoryOp::Incr("n", 2));
  auto in3 = rec.Call(8, HistoryOp::Incr("n", 1));
  auto in4 = rec.Call(9, HistoryOp::Incr("n", 1));
  REQUIRE(rec.ReturnCas(nx, true).ok());
  REQUIRE(rec.ReturnSetxx(xx, false).ok());
  REQUIRE(rec.ReturnGetset(gs, std::optional<std::string>("1")).ok());
  REQUIRE(rec.ReturnGetset(gs2, std::optional<std::string>()).ok());
  REQUIRE(rec.ReturnAppend(ap, uint64_t{2}).ok());
  REQUIRE(rec.ReturnExists(ex, true).ok());
  REQUIRE(rec.ReturnIncr(in, int64_t{-9223372036854775807LL - 1}).ok());
  // IncrBy's refusals are certain (nothing changed); another FailedPrecondition is not.
  REQUIRE(rec.ReturnIncr(in2,
                         absl::FailedPreconditionError("kv: increment or decrement would overflow"))
              .ok());
  REQUIRE(rec.ReturnIncr(
                 in3, absl::FailedPreconditionError("kv: value is not an integer or out of range"))
              .ok());
  REQUIRE(rec.ReturnIncr(in4, absl::FailedPreconditionError("node 1 was evicted")).ok());
  std::vector<std::string> lines = absl::StrSplit(rec.ToJson(), '\n');
  REQUIRE(lines.size() == 13);  // header, 10 operations, "]}", ""
  CHECK_THAT(lines[1], Catch::EndsWith("\"op\": \"cas\", \"key\": \"a\", \"expected\": null, "
                                       "\"value\": \"1\", \"ok\": true},"));
  CHECK_THAT(lines[2], Catch::EndsWith(
                           "\"op\": \"setxx\", \"key\": \"a\", \"value\": \"2\", \"ok\": false},"));
  CHECK_THAT(lines[3], Catch::EndsWith("\"op\": \"getset\", \"key\": \"a\", \"value\": \"3\", "
                                       "\"found\": true, \"old\": \"1\"},"));
  CHECK_THAT(lines[4], Catch::EndsWith("\"value\": \"4\", \"found\": false},"));
  CHECK_THAT(lines[5], Catch::EndsWith("\"op\": \"append\", \"key\": \"a\", \"value\": "
                                       "\"\\u0001\", \"length\": 2},"));
  CHECK_THAT(lines[6], Catch::EndsWith("\"op\": \"exists\", \"key\": \"a\", \"found\": true},"));
  CHECK_THAT(lines[7], Catch::EndsWith("\"op\": \"incr\", \"key\": \"n\", \"delta\": "
                                       "-9223372036854775808, \"failed\": false, \"value\": "
                                       "\"-9223372036854775808\"},"));
  CHECK_THAT(lines[8], Catch::EndsWith("\"delta\": 2, \"failed\": true},"));
  CHECK_THAT(lines[9], Catch::EndsWith("\"delta\": 1, \"failed\": true},"));
  CHECK_THAT(lines[10], Catch::Contains("\"return\": null"));
  CHECK_THAT(lines[10], Catch::EndsWith("\"error\": \"FAILED_PRECONDITION: node 1 was evicted\"}"));
  CHECK(rec.unknown() == 1);
}

TEST_CASE("misuse of a handle is an error and changes nothing", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  auto get = rec.Call(0, HistoryOp::Get("a"));
  absl::Status s = rec.Return(get, HistoryOutcome::Cas(true));
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("is a get, the outcome a cas"));
  CHECK(absl::IsInvalidArgument(rec.Return(7, HistoryOutcome::Put())));
  REQUIRE(rec.Return(get, HistoryOutcome::Get(std::nullopt)).ok());
  CHECK(absl::IsFailedPrecondition(rec.Return(get, HistoryOutcome::Get(std::nullopt))));
  CHECK(absl::IsFailedPrecondition(rec.ReturnUnknown(get, "late")));
  CHECK_THAT(rec.ToJson(), Catch::Contains("\"found\": false}"));
}

TEST_CASE("the journal has a line per call and per return, as they happen", "[kv_history]") {
  const std::string path = TempPath("journal.jsonl");
  HistoryRecorder rec(FakeClock());
  auto put = rec.Call(1, HistoryOp::Put("k", "a\nb"));  // before the journal: written at start
  REQUIRE(rec.Return(put, HistoryOutcome::Put()).ok());
  auto pending = rec.Call(2, HistoryOp::Cas("k", std::string("a\nb"), "c"));  // also before
  REQUIRE(rec.StartJournal(path).ok());
  CHECK(absl::IsFailedPrecondition(rec.StartJournal(path)));
  auto del = rec.Call(3, HistoryOp::Del("k"));
  REQUIRE(rec.ReturnDel(del, absl::UnavailableError("x")).ok());
  auto get = rec.Call(3, HistoryOp::Get("k"));
  (void)pending;
  (void)get;  // both never return: a killed process leaves exactly such a journal
  REQUIRE(rec.JournalStatus().ok());
  CHECK(ReadFile(path) ==
        "{\"id\": 0, \"client\": 1, \"call\": 1000, \"op\": \"put\", \"key\": \"k\", "
        "\"value\": \"a\\u000ab\"}\n"
        "{\"id\": 1, \"client\": 2, \"call\": 1020, \"op\": \"cas\", \"key\": \"k\", "
        "\"expected\": \"a\\u000ab\", \"value\": \"c\"}\n"
        "{\"id\": 0, \"return\": 1010}\n"
        "{\"id\": 2, \"client\": 3, \"call\": 1030, \"op\": \"del\", \"key\": \"k\"}\n"
        "{\"id\": 2, \"return\": null, \"error\": \"UNAVAILABLE: x\"}\n"
        "{\"id\": 3, \"client\": 3, \"call\": 1050, \"op\": \"get\", \"key\": \"k\"}\n");
}

TEST_CASE("files that cannot be written are errors naming the path", "[kv_history]") {
  HistoryRecorder rec(FakeClock());
  absl::Status s = rec.WriteJson("/nonexistent-dir/h.json");
  CHECK_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("/nonexistent-dir/h.json.tmp"));
  s = rec.StartJournal("/nonexistent-dir/h.jsonl");
  CHECK_FALSE(s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("/nonexistent-dir/h.jsonl"));
}

TEST_CASE("concurrent recording keeps every operation, each interval in order", "[kv_history]") {
  const std::string path = TempPath("concurrent.jsonl");
  HistoryRecorder rec;  // the real clock
  REQUIRE(rec.StartJournal(path).ok());
  constexpr int kThreads = 4, kOps = 500;
  std::atomic<int> errors{0};  // Catch2's assertions are not thread-safe
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&rec, &errors, t] {
      for (int i = 0; i < kOps; ++i) {
        auto h = rec.Call(t, HistoryOp::Put("k" + std::to_string(i % 3), std::to_string(i)));
        if (i % 10 != 0 && !rec.ReturnPut(h, absl::OkStatus()).ok()) errors++;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(errors == 0);
  CHECK(rec.size() == kThreads * kOps);
  CHECK(rec.unknown() == kThreads * kOps / 10);
  std::vector<std::string> lines = absl::StrSplit(rec.ToJson(), '\n', absl::SkipEmpty());
  REQUIRE(lines.size() == kThreads * kOps + 2);
  std::vector<std::string> journal = absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty());
  CHECK(journal.size() == kThreads * kOps * 2 - kThreads * kOps / 10);
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    // {"client": C, "call": T1, "return": T2 or null, ...
    int64_t call = 0, ret = 0;
    int client = 0;
    REQUIRE(sscanf(lines[i].c_str(), "{\"client\": %d, \"call\": %ld, \"return\": %ld", &client,
                   &call, &ret) >= 2);
    if (lines[i].find("\"return\": null") == std::string::npos) CHECK(call <= ret);
  }
}

}  // namespace
}  // namespace kv
}  // namespace farm
