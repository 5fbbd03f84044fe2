#include "txn/object.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "messaging/ring.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"

namespace farm {
namespace txn {
namespace {

// Distinguish object checks from the rings' frame checksums (a different seed space), and the
// version's word from the hash of the size word and payload.
constexpr uint64_t kObjectCheckSalt = 0x6f626a6563747631ull;  // "objectv1"
constexpr uint64_t kVersionSalt = 0x76657273696f6e32ull;      // "version2"

uint64_t LoadRelaxed(const char* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_RELAXED);
}
void StoreRelaxed(char* p, uint64_t w) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(p), w, __ATOMIC_RELAXED);
}

std::atomic<uint64_t> torn_copies{0};

ObjectState Torn() {
  torn_copies.fetch_add(1, std::memory_order_relaxed);
  return ObjectState::kTorn;
}

void CopyWords(const char* object, char* dst, uint64_t from, uint64_t to) {
  for (uint64_t at = from; at < to; at += 8) {
    const uint64_t w = LoadRelaxed(object + at);
    std::memcpy(dst + at, &w, 8);
  }
}

}  // namespace

uint64_t ObjectCheck(uint64_t version, const char* size_word, uint64_t size) {
  // The version is a word of its own, mixed in after the frame hash. It must not be the hash's
  // seed: FrameHash XORs the seed into lane 0 together with the first word, the size word, so
  // (v, s, P) and (v ^ s ^ s', s', P) would collide whenever s and s' round to the same length.
  const uint64_t body = FrameHash(size_word, 8 + RoundUp8(size), kObjectCheckSalt);
  return Mix64(body ^ Mix64(version ^ kVersionSalt));
}

ObjectState DecodeObject(const char* copy, uint64_t expected_size, ObjectView* view) {
  uint64_t word, check, size;
  std::memcpy(&word, copy, 8);
  std::memcpy(&check, copy + 8, 8);
  std::memcpy(&size, copy + 16, 8);
  view->version = VersionOf(word);
  view->size = size;
  if (IsLocked(word)) return ObjectState::kLocked;
  if (!IsAllocated(word)) return ObjectState::kFree;
  if (size != expected_size) {
    // Either the object has another size, or the copy is torn and its size word belongs to
    // another version: only a check that matches tells. A size whose bytes are not in the copy
    // cannot be checked; the caller retries and, if that persists, reports the size it saw.
    if (size <= kMaxObjectSize && ObjectSpan(size) <= ObjectSpan(expected_size) &&
        ObjectCheck(view->version, copy + 16, size) == check) {
      return ObjectState::kWrongSize;
    }
    return Torn();
  }
  if (ObjectCheck(view->version, copy + 16, size) != check && !FARM_MUTANT("accept_torn")) {
    return Torn();
  }
  view->payload = absl::string_view(copy + kObjectHeaderSize, size);
  return ObjectState::kOk;
}

uint64_t LoadLockWord(const char* object) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(object), __ATOMIC_ACQUIRE);
}

void CopyLocalObject(const char* object, char* dst, uint64_t span) {
  // The lock word first, with acquire: a reader that sees a version published by InstallObject
  // (release) sees at least that version's words after it; newer words make the check fail.
  const uint64_t word = LoadLockWord(object);
  std::memcpy(dst, &word, 8);
  // The rest in two halves, with a sync point between them where a test can commit a new
  // version, so that the copy is torn every time (tests/txn_test.cc). Its argument is the copy
  // so far: a copy whose lock word is locked is rejected as locked, whatever follows.
  const uint64_t half = std::max<uint64_t>(8, span / 2 & ~uint64_t{7});
  CopyWords(object, dst, 8, half);
  FARM_SYNC_POINT_CALLBACK("CopyLocalObject:Midway", dst);
  CopyWords(object, dst, half, span);
}

uint64_t TornCopiesDetected() { return torn_copies.load(std::memory_order_relaxed); }

bool TryLock(char* object, uint64_t expected, uint64_t* seen) {
  uint64_t want = expected;
  const bool ok =
      __atomic_compare_exchange_n(reinterpret_cast<uint64_t*>(object), &want, expected | kLockBit,
                                  false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  *seen = ok ? expected : want;
  return ok;
}

void Unlock(char* object) {
  __atomic_fetch_and(reinterpret_cast<uint64_t*>(object), ~kLockBit, __ATOMIC_RELEASE);
}

void InstallObject(char* object, uint64_t version, const char* payload, uint64_t size,
                   bool keep_locked) {
  StoreRelaxed(object + 16, size);
  const uint64_t padded = RoundUp8(size);
  for (uint64_t at = 0; at < padded; at += 8) {
    uint64_t w = 0;
    std::memcpy(&w, payload + at, std::min<uint64_t>(8, size - std::min(size, at)));
    StoreRelaxed(object + kObjectHeaderSize + at, w);
  }
  // The check over what was just stored. The hash reads the words with plain loads: only this
  // thread writes them (it holds the lock), and concurrent readers only read.
  StoreRelaxed(object + 8, ObjectCheck(version, object + 16, size));
  __atomic_store_n(reinterpret_cast<uint64_t*>(object), MakeLockWord(version, true, keep_locked),
                   __ATOMIC_RELEASE);
}

void InstallFree(char* object, uint64_t version, bool keep_locked) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(object), MakeLockWord(version, false, keep_locked),
                   __ATOMIC_RELEASE);
}

absl::string_view ObjectStateName(ObjectState state) {
  switch (state) {
    case ObjectState::kOk:
      return "ok";
    case ObjectState::kLocked:
      return "locked";
    case ObjectState::kTorn:
      return "torn";
    case ObjectState::kFree:
      return "free";
    case ObjectState::kWrongSize:
      return "wrong size";
  }
  return "unknown";
}

}  // namespace txn
}  // namespace farm
