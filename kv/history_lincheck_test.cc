// Round trip: histories recorded with HistoryRecorder, checked by the real checker binary
// (//tools/lincheck, a data dependency). A store that is linearizable by construction (a map
// under a lock) must pass, with concurrent threads, binary keys and values, and outcomes left
// unknown; a process killed in the middle of a put leaves a journal that explains what others
// read afterwards; a store with a stale read cache must fail.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/history.h"
#include "platform/mutex.h"

namespace farm {
namespace kv {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct CheckerRun {
  int exit_code = -1;
  std::string output;
};

// Runs the checker on `args` (file paths and flags, no shell quoting needed).
CheckerRun RunChecker(const std::string& args) {
  // The test runs in its runfiles tree; $LINCHECK overrides (e.g. when run by hand).
  const char* env = getenv("LINCHECK");
  const std::string binary = env ? env : "tools/lincheck/lincheck";
  REQUIRE(access(binary.c_str(), X_OK) == 0);
  const std::string out = TempPath("checker.out");
  const std::string cmd = binary + " --timeout=60s " + args + " > " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  CheckerRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.output = ReadFile(out);
  return run;
}

// A linearizable store: a map under one lock.
class LockedStore {
 public:
  std::optional<std::string> Get(const std::string& k) {
    MutexLock l(&mu_);
    auto it = map_.find(k);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void Put(const std::string& k, const std::string& v) {
    MutexLock l(&mu_);
    map_[k] = v;
  }
  bool Del(const std::string& k) {
    MutexLock l(&mu_);
    return map_.erase(k) > 0;
  }
  bool Cas(const std::string& k, const std::optional<std::string>& expected, const std::string& v) {
    MutexLock l(&mu_);
    auto it = map_.find(k);
    const bool match = expected ? (it != map_.end() && it->second == *expected) : it == map_.end();
    if (match) map_[k] = v;
    return match;
  }

 private:
  Mutex mu_;
  std::map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("a linearizable store's concurrent history passes the checker", "[kv_history]") {
  LockedStore store;
  HistoryRecorder rec;
  const std::vector<std::string> keys = {"k0", "k1", std::string("k\0\xff\"\\", 5)};
  constexpr int kThreads = 4, kOps = 250;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kOps; ++i) {
        const std::string& key = keys[rng() % keys.size()];
        // Values unique per thread and operation, with bytes that need escaping.
        const std::string value = "t" + std::to_string(t) + "-" + std::to_string(i) + "\x01\xfe\"";
        // 1 in 80 outcomes stays unknown; the operation then takes effect or not, at random.
        const bool unknown = rng() % 80 == 0;
        const bool apply = !unknown || rng() % 2 == 0;
        switch (rng() % 4) {
          case 0: {
            auto h = rec.Call(t, HistoryOp::Get(key));
            std::optional<std::string> v = store.Get(key);
            (void)(unknown ? rec.ReturnUnknown(h, "lost") : rec.Return(h, HistoryOutcome::Get(v)));
            break;
          }
          case 1: {
            auto h = rec.Call(t, HistoryOp::Put(key, value));
            if (apply) store.Put(key, value);
            (void)(unknown ? rec.ReturnUnknown(h, "lost") : rec.Return(h, HistoryOutcome::Put()));
            break;
          }
          case 2: {
            auto h = rec.Call(t, HistoryOp::Del(key));
            bool deleted = apply && store.Del(key);
            (void)(unknown ? rec.ReturnUnknown(h, "lost")
                           : rec.Return(h, HistoryOutcome::Del(deleted)));
            break;
          }
          case 3: {
            // Expect what a read just saw (often still current), so that some succeed.
            std::optional<std::string> seen = store.Get(key);
            auto h = rec.Call(t, HistoryOp::Cas(key, seen, value));
            bool ok = apply && store.Cas(key, seen, value);
            (void)(unknown ? rec.ReturnUnknown(h, "lost") : rec.Return(h, HistoryOutcome::Cas(ok)));
            break;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string path = TempPath("locked_store.json");
  REQUIRE(rec.WriteJson(path).ok());
  CheckerRun run = RunChecker(path);
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.output, Catch::Contains("OK: linearizable (3 keys)"));
  CHECK_THAT(run.output, Catch::Contains("1000 operations"));
}

// One key's value in memory shared with a forked child.
struct SharedValue {
  bool present;
  size_t size;
  char bytes[64];
};

TEST_CASE("a killed process's journal explains what others read after it died", "[kv_history]") {
  void* mem =
      mmap(nullptr, sizeof(SharedValue), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* shared = new (mem) SharedValue{false, 0, {}};
  const std::string journal = TempPath("child.jsonl");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: one put that returns, then one that takes effect but never returns.
    HistoryRecorder rec;
    if (!rec.StartJournal(journal).ok()) _exit(1);
    auto put = [&](const std::string& v) {
      std::memcpy(shared->bytes, v.data(), v.size());
      shared->size = v.size();
      shared->present = true;
    };
    auto h = rec.Call(100, HistoryOp::Put("k", "first"));
    put("first");
    (void)rec.Return(h, HistoryOutcome::Put());
    rec.Call(100, HistoryOp::Put("k", "from the child"));
    put("from the child");
    kill(getpid(), SIGKILL);
    _exit(1);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);

  HistoryRecorder rec;
  auto h = rec.Call(1, HistoryOp::Get("k"));
  std::optional<std::string> v;
  if (shared->present) v = std::string(shared->bytes, shared->size);
  REQUIRE(rec.Return(h, HistoryOutcome::Get(v)).ok());
  REQUIRE(v == std::string("from the child"));
  const std::string path = TempPath("parent.json");
  REQUIRE(rec.WriteJson(path).ok());
  munmap(mem, sizeof(SharedValue));

  CheckerRun both = RunChecker(path + " " + journal);
  INFO(both.output);
  CHECK(both.exit_code == 0);
  CHECK_THAT(both.output, Catch::Contains("3 operations (1 of unknown outcome)"));
  // Without the child's journal the value read was never written.
  CheckerRun alone = RunChecker("--visualize=never " + path);
  INFO(alone.output);
  CHECK(alone.exit_code == 1);
  CHECK_THAT(alone.output, Catch::Contains("key \"k\": NOT LINEARIZABLE"));
  CHECK_THAT(alone.output, Catch::Contains("it needs the key to be \"from the child\""));
}

TEST_CASE("a store serving reads from a stale cache fails the checker", "[kv_history]") {
  LockedStore store;
  std::map<std::pair<int, std::string>, std::string> cache;  // (client, key) -> value
  auto cached_get = [&](int client, const std::string& k) -> std::optional<std::string> {
    auto it = cache.find({client, k});
    if (it != cache.end()) return it->second;
    std::optional<std::string> v = store.Get(k);
    if (v) cache[{client, k}] = *v;
    return v;
  };
  HistoryRecorder rec;
  auto put = [&](int client, const std::string& k, const std::string& v) {
    auto h = rec.Call(client, HistoryOp::Put(k, v));
    store.Put(k, v);
    REQUIRE(rec.Return(h, HistoryOutcome::Put()).ok());
  };
  auto get = [&](int client, const std::string& k) {
    auto h = rec.Call(client, HistoryOp::Get(k));
    REQUIRE(rec.Return(h, HistoryOutcome::Get(cached_get(client, k))).ok());
  };
  put(1, "fresh", "1");
  get(2, "fresh");
  put(1, "cached", "1");
  get(2, "cached");  // caches "1"
  put(1, "cached", "2");
  get(2, "cached");  // "1" again: stale
  const std::string path = TempPath("stale_cache.json");
  const std::string html = TempPath("stale_cache.html");
  REQUIRE(rec.WriteJson(path).ok());
  CheckerRun run = RunChecker("--html=" + html + " " + path);
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK_THAT(run.output, Catch::Contains("key \"cached\": NOT LINEARIZABLE (4 operations)"));
  CHECK_THAT(run.output, Catch::Contains("NOT LINEARIZABLE: 1 of 2 keys: \"cached\""));
  CHECK_THAT(ReadFile(html), Catch::Contains("<html"));
}

}  // namespace
}  // namespace kv
}  // namespace farm
