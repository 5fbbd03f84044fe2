#include "txn/object.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace farm {
namespace txn {
namespace {

// An 8-byte aligned slot.
struct Slot {
  explicit Slot(uint64_t bytes) : words(bytes / 8, 0) {}
  char* data() { return reinterpret_cast<char*>(words.data()); }
  std::vector<uint64_t> words;
};

std::string Pattern(uint64_t version, uint64_t size) {
  std::string s(size, '\0');
  for (uint64_t i = 0; i < size; ++i) s[i] = static_cast<char>(version * 31 + i * 7);
  return s;
}

// Installs version v of `size` bytes, as the participant does: lock, install.
// Returns false if the lock could not be taken (the test's threads check the result in the main
// thread: Catch's assertions are for the test's own thread).
bool TryCommit(char* object, uint64_t size) {
  const uint64_t word = LoadLockWord(object);
  uint64_t seen = 0;
  if (!TryLock(object, word, &seen)) return false;
  const std::string value = Pattern(VersionOf(word) + 1, size);
  InstallObject(object, VersionOf(word) + 1, value.data(), size);
  return true;
}

void Commit(char* object, uint64_t size) { REQUIRE(TryCommit(object, size)); }

}  // namespace

TEST_CASE("a fresh slot is free; an installed object reads back whole", "[object]") {
  Slot s(256);
  std::string copy(ObjectSpan(100), '\0');
  ObjectView v;
  CopyLocalObject(s.data(), copy.data(), copy.size());
  CHECK(DecodeObject(copy.data(), 100, &v) == ObjectState::kFree);

  Commit(s.data(), 100);
  CopyLocalObject(s.data(), copy.data(), copy.size());
  REQUIRE(DecodeObject(copy.data(), 100, &v) == ObjectState::kOk);
  CHECK(v.version == 1);
  CHECK(v.payload == Pattern(1, 100));

  // Another size than the object's: told apart from a torn copy by the check.
  std::string shorter(ObjectSpan(120), '\0');
  CopyLocalObject(s.data(), shorter.data(), shorter.size());
  CHECK(DecodeObject(shorter.data(), 120, &v) == ObjectState::kWrongSize);
  CHECK(v.size == 100);
}

TEST_CASE("a locked object reads as locked until unlocked or installed", "[object]") {
  Slot s(256);
  Commit(s.data(), 40);
  const uint64_t word = LoadLockWord(s.data());
  uint64_t seen = 0;
  REQUIRE(TryLock(s.data(), word, &seen));
  // A second lock attempt sees the lock bit.
  CHECK_FALSE(TryLock(s.data(), word, &seen));
  CHECK(IsLocked(seen));
  std::string copy(ObjectSpan(40), '\0');
  ObjectView v;
  CopyLocalObject(s.data(), copy.data(), copy.size());
  CHECK(DecodeObject(copy.data(), 40, &v) == ObjectState::kLocked);
  Unlock(s.data());
  CopyLocalObject(s.data(), copy.data(), copy.size());
  REQUIRE(DecodeObject(copy.data(), 40, &v) == ObjectState::kOk);
  CHECK(v.version == 1);  // an unlock changes nothing
  // A stale expected version does not lock.
  CHECK_FALSE(TryLock(s.data(), MakeLockWord(0, true, false), &seen));
  CHECK(VersionOf(seen) == 1);
}

TEST_CASE("a copy mixing two versions is torn", "[object]") {
  const uint64_t size = 200;  // four cache lines
  Slot s(256);
  Commit(s.data(), size);
  std::string v1(ObjectSpan(size), '\0');
  CopyLocalObject(s.data(), v1.data(), v1.size());
  Commit(s.data(), size);
  std::string v2(ObjectSpan(size), '\0');
  CopyLocalObject(s.data(), v2.data(), v2.size());
  ObjectView v;
  REQUIRE(DecodeObject(v1.data(), size, &v) == ObjectState::kOk);
  REQUIRE(DecodeObject(v2.data(), size, &v) == ObjectState::kOk);
  // Every split point and both directions: header of one version, the rest of the other.
  for (uint64_t cut = 8; cut < v1.size(); cut += 8) {
    std::string a = v1.substr(0, cut) + v2.substr(cut);
    std::string b = v2.substr(0, cut) + v1.substr(cut);
    INFO("cut " << cut);
    CHECK(DecodeObject(a.data(), size, &v) == ObjectState::kTorn);
    CHECK(DecodeObject(b.data(), size, &v) == ObjectState::kTorn);
  }
  // One byte of the payload from the other version.
  std::string c = v2;
  c[kObjectHeaderSize + 150] = v1[kObjectHeaderSize + 150];
  CHECK(DecodeObject(c.data(), size, &v) == ObjectState::kTorn);
}

TEST_CASE("a copy mixing a reused slot's lifetimes is torn, whatever their sizes", "[object]") {
  // The slot holds v4 (13 bytes), is freed as v5 and reallocated as v6 (15 bytes): both sizes
  // round to 16 payload bytes, so a READ overlapping the reallocation can copy the lock word and
  // size of v6 with the check and payload of v4. When the check was seeded with version ^ salt,
  // that seed met the size word in the hash's first lane: 6 ^ 15 == 4 ^ 13, the check of (v6,
  // 15 bytes, payload of v4) equalled v4's own, and the copy validated as a 15-byte v6.
  Slot s(128);
  for (int i = 0; i < 4; ++i) Commit(s.data(), 13);
  REQUIRE(VersionOf(LoadLockWord(s.data())) == 4);
  std::string v4(ObjectSpan(13), '\0');
  CopyLocalObject(s.data(), v4.data(), v4.size());
  uint64_t seen = 0;
  REQUIRE(TryLock(s.data(), LoadLockWord(s.data()), &seen));
  InstallFree(s.data(), 5);
  Commit(s.data(), 15);
  REQUIRE(VersionOf(LoadLockWord(s.data())) == 6);
  std::string v6(ObjectSpan(15), '\0');
  CopyLocalObject(s.data(), v6.data(), v6.size());
  REQUIRE(v4.size() == v6.size());
  ObjectView v;
  REQUIRE(DecodeObject(v4.data(), 13, &v) == ObjectState::kOk);
  REQUIRE(DecodeObject(v6.data(), 15, &v) == ObjectState::kOk);

  // Lock word and size of v6, check and payload of v4.
  std::string mixed = v4;
  mixed.replace(0, 8, v6, 0, 8);
  mixed.replace(16, 8, v6, 16, 8);
  CHECK(DecodeObject(mixed.data(), 15, &v) == ObjectState::kTorn);
  CHECK(DecodeObject(mixed.data(), 13, &v) == ObjectState::kTorn);  // not "wrong size" either
  // Every other mix of the five words of the two copies.
  for (int mask = 1; mask < 31; ++mask) {
    std::string m = v4;
    for (int w = 0; w < 5; ++w) {
      if (mask & (1 << w)) m.replace(8 * w, 8, v6, 8 * w, 8);
    }
    INFO("words from v6: mask " << mask);
    CHECK(DecodeObject(m.data(), 15, &v) != ObjectState::kOk);
    CHECK(DecodeObject(m.data(), 13, &v) != ObjectState::kOk);
  }
}

TEST_CASE("a copy interrupted by a commit is torn, seen and rejected, at every split", "[object]") {
  // Deterministic torn copies: a reader copies a random part of the object's bytes, a commit
  // installs the next version, the reader copies the rest. Every copy that mixes bytes of both
  // versions must be rejected, and the test counts them: it cannot pass without making them.
  const uint64_t size = 300;
  const uint64_t span = ObjectSpan(size);
  Slot s(512);
  Commit(s.data(), size);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> order(span);
  for (uint64_t i = 0; i < span; ++i) order[i] = i;
  uint64_t mixed = 0;
  const uint64_t detected_before = TornCopiesDetected();
  for (int i = 0; i < 2000; ++i) {
    std::shuffle(order.begin(), order.end(), rng);
    const uint64_t first_part = 1 + rng() % (span - 1);
    std::string before(span, '\0'), after(span, '\0'), copy(span, '\0');
    CopyLocalObject(s.data(), before.data(), span);
    for (uint64_t k = 0; k < first_part; ++k) copy[order[k]] = s.data()[order[k]];
    Commit(s.data(), size);
    for (uint64_t k = first_part; k < span; ++k) copy[order[k]] = s.data()[order[k]];
    CopyLocalObject(s.data(), after.data(), span);
    if (copy == before || copy == after) continue;  // every changed byte from one side
    ++mixed;
    ObjectView v;
    INFO("iteration " << i << ", " << first_part << " bytes before the commit");
    REQUIRE(DecodeObject(copy.data(), size, &v) == ObjectState::kTorn);
  }
  CHECK(mixed > 1000);
  CHECK(TornCopiesDetected() - detected_before == mixed);
}

TEST_CASE("readers never accept a torn value while a writer commits (byte-wise copies)",
          "[object]") {
  // Multi-cache-line objects, a writer committing new versions, and readers copying the object
  // in random byte order (what a memcpy-based transport may do, and worse), through atomic byte
  // loads so that the test itself is race-free. Every value a reader accepts must be exactly one
  // version's pattern. The writer commits in bursts and, between them, waits until the readers
  // made two more copies, so that both torn copies (during a burst) and whole ones (between
  // bursts) occur however the threads are scheduled: each reader runs until it has seen enough
  // of both, within a bound on its copies.
  const uint64_t size = 300;
  constexpr uint64_t kEnough = 200;
  constexpr int kMaxCopies = 400000;
  Slot s(512);
  Commit(s.data(), size);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> accepted{0}, torn{0}, locked{0}, copies{0};
  std::atomic<int> bad{0}, failed_commits{0};
  std::thread writer([&] {
    std::mt19937_64 rng(99);
    while (!stop.load()) {
      for (int burst = 1 + rng() % 64; burst > 0; --burst) {
        if (!TryCommit(s.data(), size)) failed_commits.fetch_add(1);
      }
      const uint64_t seen = copies.load();
      while (copies.load() < seen + 2 && !stop.load()) std::this_thread::yield();
    }
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937_64 rng(r + 1);
      const uint64_t span = ObjectSpan(size);
      std::vector<uint64_t> order(span);
      for (uint64_t i = 0; i < span; ++i) order[i] = i;
      std::string copy(span, '\0');
      uint64_t mine_ok = 0, mine_torn = 0;
      for (int i = 0; i < kMaxCopies && (mine_ok < kEnough || mine_torn < kEnough); ++i) {
        std::shuffle(order.begin(), order.end(), rng);
        for (uint64_t k : order) copy[k] = __atomic_load_n(s.data() + k, __ATOMIC_RELAXED);
        copies.fetch_add(1);
        ObjectView v;
        const ObjectState st = DecodeObject(copy.data(), size, &v);
        if (st == ObjectState::kOk) {
          ++mine_ok;
          if (v.payload != Pattern(v.version, size)) bad.fetch_add(1);
        } else if (st == ObjectState::kTorn) {
          ++mine_torn;
        } else if (st == ObjectState::kLocked) {
          locked.fetch_add(1);
        } else {
          bad.fetch_add(1);
        }
      }
      accepted.fetch_add(mine_ok);
      torn.fetch_add(mine_torn);
    });
  }
  for (auto& t : readers) t.join();
  stop = true;
  writer.join();
  INFO("accepted " << accepted.load() << ", torn " << torn.load() << ", locked " << locked.load());
  CHECK(failed_commits.load() == 0);
  CHECK(bad.load() == 0);
  CHECK(accepted.load() > 0);
  CHECK(torn.load() > 0);  // the readers did overlap commits, and rejected those copies
}

TEST_CASE("versions continue through free and reuse", "[object]") {
  Slot s(128);
  Commit(s.data(), 16);
  Commit(s.data(), 16);
  uint64_t seen = 0;
  REQUIRE(TryLock(s.data(), LoadLockWord(s.data()), &seen));
  InstallFree(s.data(), 3);
  const uint64_t freed = LoadLockWord(s.data());
  CHECK_FALSE(IsAllocated(freed));
  CHECK(VersionOf(freed) == 3);
  // Reallocated: the next version, never an old one.
  Commit(s.data(), 8);
  CHECK(VersionOf(LoadLockWord(s.data())) == 4);
  CHECK(IsAllocated(LoadLockWord(s.data())));
}

}  // namespace txn
}  // namespace farm
