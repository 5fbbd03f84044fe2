// Objects in the shared address space: their layout, and the operations on it that readers (any
// node, through one-sided READs or local copies) and the owner's CPU (locking and installing new
// versions during commit) perform.
//
// Layout of an object at GlobalAddress A (8-byte aligned, inside one slot of the allocator):
//
//   A + 0   lock word   bit 0: locked (by a committing transaction, set by the owner's CPU)
//                       bit 1: allocated
//                       bits 2..63: version, bumped by every committed write, alloc and free
//   A + 8   check       ObjectCheck(version, size word, payload): see below
//   A + 16  size        payload bytes
//   A + 24  payload     padded with zeros to a multiple of 8
//
// A reader gets a consistent snapshot from one READ of ObjectSpan(size) bytes, or detects that it
// did not. FaRM repeats the version at the start of every cache line, which relies on the NIC
// reading each cache line atomically; the transports here (shm's cross-memory copies, tcp's
// socket copies, SoftiWARP) copy with memcpy, whose granularity within a cache line is not
// promised. So instead the owner stores a 64-bit check over (version, size, payload): the same
// hash as the message rings' frames (messaging/ring.h, FrameHash) over size and payload, then the
// version mixed in as a word of its own, Mix64(hash ^ Mix64(version)). Not as FrameHash's seed:
// that meets the size word in the same lane, so a copy with the lock word and size of one version
// and the check and payload of another validated whenever version ^ size agreed (v6 of 15 bytes
// over v4 of 13 bytes in a reused slot). Now the same size and payload under two versions always
// give two checks (Mix64 is a bijection), and different bytes agree only by a 2^-64 coincidence.
// The owner writes an object only while it holds the lock bit, and publishes a new
// version by writing size, payload and check first and the lock word (new version, unlocked)
// last. A READ that overlaps such a write sees the lock bit, or a version whose check does not
// match the bytes it copied (a payload word of the other version makes the check differ except
// with probability 2^-64, the argument of messaging/ring.cc); either way it is retried. A lock
// word that is neither old nor new cannot occur: every transport copies an aligned 8-byte word
// whole (the lock word is written with one 8-byte store).
//
// Versions survive free and reuse: a freed slot keeps its version (bumped), and a slot that is
// allocated again continues from there. A transaction that read an object before it was freed
// (and perhaps reallocated) therefore always fails validation: "version-based reclamation", so a
// slot can be reused as soon as the free commits.
//
// Thread safety: the functions on local memory use atomic word accesses, so a local reader may
// run concurrently with the owner's writes (ThreadSanitizer sees no race); only the owner's
// participant (txn/participant.h) writes objects, one writer at a time.
#ifndef FARM_TXN_OBJECT_H_
#define FARM_TXN_OBJECT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace farm {
namespace txn {

inline constexpr uint64_t kObjectHeaderSize = 24;
inline constexpr uint64_t kLockBit = 1;
inline constexpr uint64_t kAllocBit = 2;
// Largest payload of one object (the largest slot is 64 KiB).
inline constexpr uint64_t kMaxObjectSize = (64 << 10) - kObjectHeaderSize;

constexpr uint64_t RoundUp8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }
// Bytes an object of `size` payload bytes occupies (what a reader READs).
constexpr uint64_t ObjectSpan(uint64_t size) { return kObjectHeaderSize + RoundUp8(size); }

constexpr uint64_t VersionOf(uint64_t lock_word) { return lock_word >> 2; }
constexpr bool IsLocked(uint64_t lock_word) { return (lock_word & kLockBit) != 0; }
constexpr bool IsAllocated(uint64_t lock_word) { return (lock_word & kAllocBit) != 0; }
constexpr uint64_t MakeLockWord(uint64_t version, bool allocated, bool locked) {
  return (version << 2) | (allocated ? kAllocBit : 0) | (locked ? kLockBit : 0);
}

// The check of an object whose size word and padded payload are at `size_word` (8 + RoundUp8(size)
// bytes).
uint64_t ObjectCheck(uint64_t version, const char* size_word, uint64_t size);

// What a copy of an object says.
enum class ObjectState {
  kOk,        // consistent: `version` and `payload` belong together
  kLocked,    // a commit is writing it: retry
  kTorn,      // the copy mixes two versions: retry
  kFree,      // not allocated (freed, or never allocated)
  kWrongSize  // allocated, with another size than the reader expected
};

struct ObjectView {
  uint64_t version = 0;
  uint64_t size = 0;          // the object's size word (kWrongSize: the actual size)
  absl::string_view payload;  // inside the copy
};

// Decodes a copy of ObjectSpan(expected_size) bytes of an object.
ObjectState DecodeObject(const char* copy, uint64_t expected_size, ObjectView* view);

// Copies DecodeObject has found torn in this process so far: tests show with it that the
// copies they made overlap writes were actually seen and rejected, not merely never produced.
uint64_t TornCopiesDetected();

// Reads the lock word of a local object (acquire).
uint64_t LoadLockWord(const char* object);

// Copies `span` bytes (a multiple of 8) of a local object with atomic word loads: what a local
// reader does instead of a READ. The lock word first, then the rest in two halves; between them
// the sync point "CopyLocalObject:Midway" (argument: `dst`, the copy so far) lets a test commit a
// new version in the middle of a copy.
void CopyLocalObject(const char* object, char* dst, uint64_t span);

// Owner side (the participant, one writer at a time). Sets the lock bit if the lock word is
// exactly `expected` (which must not have it); returns false otherwise, with the word seen.
bool TryLock(char* object, uint64_t expected, uint64_t* seen);
// Clears the lock bit (the object is unchanged).
void Unlock(char* object);
// Installs a new allocated version: size, payload and check, then the lock word (version,
// allocated, unlocked unless `keep_locked`). The object must be locked by the caller.
void InstallObject(char* object, uint64_t version, const char* payload, uint64_t size,
                   bool keep_locked = false);
// Installs a freed version: the lock word (version, not allocated, unlocked unless
// `keep_locked`).
void InstallFree(char* object, uint64_t version, bool keep_locked = false);

// A human-readable name of a state, for errors.
absl::string_view ObjectStateName(ObjectState state);

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_OBJECT_H_
