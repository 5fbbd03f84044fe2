#include "messaging/call_table.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"

namespace farm {
namespace {

struct Call {
  uint64_t id = 0;
  int node = 0;
};

std::shared_ptr<Call> MakeCall(uint64_t id, int node = 0) {
  auto c = std::make_shared<Call>();
  c->id = id;
  c->node = node;
  return c;
}

TEST_CASE("a call is taken once, by its id") {
  CallTable<Call> t;
  t.Insert(7, MakeCall(7));
  CHECK(t.Take(8) == nullptr);
  std::shared_ptr<Call> c = t.Take(7);
  REQUIRE(c != nullptr);
  CHECK(c->id == 7);
  CHECK(t.Take(7) == nullptr);
}

TEST_CASE("calls beyond the slots, and ids sharing a slot, go to the overflow map") {
  CallTable<Call> t;
  const uint64_t n = 3 * CallTable<Call>::kSlots + 5;
  for (uint64_t id = 1; id <= n; ++id) t.Insert(id, MakeCall(id));
  // A slot freed in the middle is reused, and its older tenant in the map is still found.
  REQUIRE(t.Take(2) != nullptr);
  t.Insert(2 + CallTable<Call>::kSlots * 10, MakeCall(2 + CallTable<Call>::kSlots * 10));
  for (uint64_t id = n; id >= 1; --id) {
    if (id == 2) continue;
    std::shared_ptr<Call> c = t.Take(id);
    REQUIRE(c != nullptr);
    CHECK(c->id == id);
  }
  CHECK(t.Take(2 + CallTable<Call>::kSlots * 10) != nullptr);
  CHECK(t.TakeIf([](const Call&) { return true; }).empty());
}

TEST_CASE("TakeIf removes exactly the matching calls, from slots and overflow") {
  CallTable<Call> t;
  const uint64_t n = CallTable<Call>::kSlots + 100;
  for (uint64_t id = 1; id <= n; ++id) t.Insert(id, MakeCall(id, static_cast<int>(id % 3)));
  std::vector<std::shared_ptr<Call>> taken = t.TakeIf([](const Call& c) { return c.node == 1; });
  uint64_t expected = 0;
  for (uint64_t id = 1; id <= n; ++id) expected += id % 3 == 1;
  CHECK(taken.size() == expected);
  for (const auto& c : taken) CHECK(c->node == 1);
  for (uint64_t id = 1; id <= n; ++id) CHECK((t.Take(id) != nullptr) == (id % 3 != 1));
}

TEST_CASE("concurrent callers, completers and sweeps lose and duplicate nothing") {
  CallTable<Call> t;
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 20000;
  std::atomic<uint64_t> next{1};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> swept{0};
  // A sweeper that claims every slot again and again but takes only node 99, which nobody uses.
  std::thread sweeper([&] {
    while (!stop.load()) swept += t.TakeIf([](const Call& c) { return c.node == 99; }).size();
  });
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> taken_twice{0};  // Catch2's assertions are not thread-safe: count here
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&] {
      std::vector<uint64_t> mine;
      for (uint64_t i = 0; i < kPerThread; ++i) {
        const uint64_t id = next.fetch_add(1);
        t.Insert(id, MakeCall(id));
        mine.push_back(id);
        if (mine.size() == 8) {  // a window of calls in flight, completed out of order
          for (size_t j = mine.size(); j-- > 0;) {
            std::shared_ptr<Call> c = t.Take(mine[j]);
            if (c != nullptr && c->id == mine[j]) ++completed;
            if (t.Take(mine[j]) != nullptr) ++taken_twice;
          }
          mine.clear();
        }
      }
      for (uint64_t id : mine) completed += t.Take(id) != nullptr;
    });
  }
  for (auto& th : threads) th.join();
  stop = true;
  sweeper.join();
  CHECK(swept.load() == 0);
  CHECK(taken_twice.load() == 0);
  CHECK(completed.load() == kThreads * kPerThread);
  CHECK(t.TakeIf([](const Call&) { return true; }).empty());
}

TEST_CASE("two threads racing to take one call: exactly one wins") {
  CallTable<Call> t;
  for (int round = 0; round < 2000; ++round) {
    const uint64_t id = static_cast<uint64_t>(round) + 1;
    t.Insert(id, MakeCall(id));
    std::atomic<int> wins{0};
    std::thread a([&] { wins += t.Take(id) != nullptr; });
    std::thread b([&] { wins += t.Take(id) != nullptr; });
    a.join();
    b.join();
    REQUIRE(wins.load() == 1);
  }
}

}  // namespace
}  // namespace farm

namespace farm {
namespace {

TEST_CASE("a conditional take leaves a call that does not match where it is") {
  CallTable<Call> t;
  const uint64_t overflowed = 5 + CallTable<Call>::kSlots;  // shares slot 5: goes to the map
  t.Insert(5, MakeCall(5, /*node=*/1));
  t.Insert(overflowed, MakeCall(overflowed, /*node=*/1));
  for (uint64_t id : {uint64_t{5}, overflowed}) {
    CHECK(t.Take(id, [](const Call& c) { return c.node == 2; }) == nullptr);
    std::shared_ptr<Call> c = t.Take(id, [](const Call& c) { return c.node == 1; });
    REQUIRE(c != nullptr);
    CHECK(c->id == id);
    CHECK(t.Take(id) == nullptr);
  }
}

}  // namespace
}  // namespace farm

namespace farm {
namespace {

TEST_CASE("a sweep visits the slots it is given, and the overflow map when asked") {
  CallTable<Call> t;
  constexpr size_t kSlots = CallTable<Call>::kSlots;
  // Ids 1..10 in slots 1..10; id kSlots + 3 shares slot 3 and goes to the map.
  for (uint64_t id = 1; id <= 10; ++id) t.Insert(id, MakeCall(id));
  t.Insert(kSlots + 3, MakeCall(kSlots + 3));
  CHECK(t.Count() == 11);
  auto all = [](const Call&) { return true; };
  // Slots kSlots-2 .. 4, wrapping around: ids 1..4, not the map.
  std::vector<std::shared_ptr<Call>> swept = t.TakeIfIn(kSlots - 2, 7, /*overflow=*/false, all);
  CHECK(swept.size() == 4);
  CHECK(t.Count() == 7);
  CHECK(t.Take(kSlots + 3) != nullptr);        // still in the map
  t.Insert(kSlots + 3, MakeCall(kSlots + 3));  // slot 3 is free now: back in a slot
  swept = t.TakeIfIn(5, 3, /*overflow=*/true, [](const Call& c) { return c.id % 2 == 0; });
  CHECK(swept.size() == 1);  // id 6 (5 and 7 stay)
  CHECK(t.Count() == 6);     // 3 (as kSlots + 3), 5, 7, 8, 9, 10
}

}  // namespace
}  // namespace farm
