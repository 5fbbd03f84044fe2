// Ring: the frame format and the two ends of one FaRM message ring, on plain memory.
//
// For every ordered pair of nodes (sender -> receiver) and every lane, the receiver owns a
// circular buffer in its registered memory. The sender builds the frames of one flush one after
// the other in a *staging buffer* of its own registered memory, always from its start (so the
// memory a sender touches stays hot in its caches, instead of walking a whole ring-sized mirror),
// and knows where each frame goes in the receiver's ring: a flush is one one-sided WRITE of the
// staged bytes to their offsets on the receiver (two when they wrap around the ring's end). The
// staging buffer must not change until that WRITE completed. RingReader scans
// the receiver's ring, hands out complete messages in order, zeroes what it consumed and tells
// how far it got (the head), which the receiver writes back into the sender's memory lazily.
// Neither class touches the fabric: messaging/messenger.h moves the bytes; the tests here move
// them with memcpy.
//
//   char staging[kRing], ring[kRing] = {};          // ring: the receiver's memory, zeroed
//   RingWriter w(staging, kRing);
//   RingReader r(ring, kRing);
//   RETURN_IF_ERROR(w.Append(/*type=*/1, "hello"));
//   for (const ByteRange& b : w.Unflushed()) memcpy(ring + b.offset, staging + b.source, b.size);
//   w.MarkFlushed();
//   RingMessage m;
//   if (r.Peek(&m) == RingReader::kMessage) { Use(m.payload); r.Consume(); }
//   if (r.ShouldReportHead()) { w.UpdateHead(r.head()); r.MarkReported(); }  // via a WRITE
//
// Frame layout (all offsets multiples of 16, every field little-endian):
//
//   +0   FrameHeader  {u32 length, u16 type, u16 flags, u32 seq, u32 reserved = 0}
//   +16  payload      `length` bytes, then zero padding
//   +S-16 FrameTrailer {u64 checksum, u32 seq, u32 length}        S = FrameSize(...)
//
// The checksum is FrameHash over [+0, +S-16): header, payload and padding, seeded with the
// ring's *tag* (RingTag: the incarnations of the sender and the receiver, and the lane), so a
// frame written for another incarnation pair or lane never verifies, even with the same bytes.
// Sequence numbers count frames on the ring from 1 (0 is skipped when the 32-bit counter wraps, so
// a valid header is never all zero). A frame that does not fit before the ring's end is preceded by
// a *wrap frame* (flags = kWrapFlag, length 0, 32 bytes: header + trailer) that stands for the rest
// of the ring; the next frame starts at offset 0. A frame that would leave exactly 16 bytes before
// the end (too few for a wrap frame) absorbs them as padding, so the bytes left before the end
// are always 0 or at least 32.
//
// Thread safety: a RingWriter and a RingReader are each owned by one thread (the lane's owner,
// the scanning thread). They share no memory with each other; the bytes travel by WRITE.
#ifndef FARM_MESSAGING_RING_H_
#define FARM_MESSAGING_RING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "platform/clock.h"
#include "platform/hash.h"

namespace farm {

struct FrameHeader {
  uint32_t length;  // payload bytes
  uint16_t type;    // application message type
  uint16_t flags;   // kWrapFlag or 0
  uint32_t seq;     // frame sequence number on this ring, never 0
  uint32_t reserved;
};

struct FrameTrailer {
  uint64_t checksum;  // FrameHash of header + padded payload
  uint32_t seq;       // == header.seq
  uint32_t length;    // == header.length
};

inline constexpr uint64_t kFrameAlign = 16;
inline constexpr uint64_t kFrameOverhead = sizeof(FrameHeader) + sizeof(FrameTrailer);
inline constexpr uint16_t kWrapFlag = 1;
// Ring sizes: multiples of 4096 (areas are page-granular) up to 1 GiB (32-bit lengths).
inline constexpr uint64_t kMinRingSize = 4096;
inline constexpr uint64_t kMaxRingSize = uint64_t{1} << 30;
// Bytes of a head write-back slot (see EncodeHeadSlot); slots sit 64 bytes apart.
inline constexpr uint64_t kHeadSlotBytes = 16;
static_assert(sizeof(FrameHeader) == 16 && sizeof(FrameTrailer) == 16, "frame layout");
static_assert(kFrameOverhead % kFrameAlign == 0, "frames stay aligned");

// OK if `ring_size` is usable: a multiple of 4096 between kMinRingSize and kMaxRingSize.
absl::Status ValidateRingSize(uint64_t ring_size);

// The largest payload a ring of `ring_size` bytes carries: a frame is at most a quarter of the
// ring, which keeps lazy head write-back deadlock-free (see RingReader::ShouldReportHead).
inline uint64_t MaxPayload(uint64_t ring_size) { return ring_size / 4 - 64; }

// Bytes a frame with a `length`-byte payload occupies when it starts at offset `pos`.
// Monotonic in `length`. Requires pos % 16 == 0.
uint64_t FrameSize(uint64_t ring_size, uint64_t pos, uint64_t length);

// 64-bit hash of the `n` bytes at `p`, seeded with `seed`. Requires n % 8 == 0 (frames are
// multiples of 16) and reads nothing outside [p, p + n); p need not be aligned. Any change of a
// word, including a word that is still zero because it has not arrived yet, changes it with
// probability 1 - 2^-64; a different seed with the same bytes always changes it (the seed enters
// one lane's initial state, see ring.cc). Stable across processes and machines (unlike
// absl::Hash): 64 lanes of a per-word bijection (ring.cc), computed with AVX-512 where the CPU has
// it (F and DQ) and by FrameHashPortable otherwise.
uint64_t FrameHash(const char* p, size_t n, uint64_t seed = 0);
// FrameHash's last step is Mix64 (platform/hash.h), also a hash for other layers' small keys.
// The same function in portable C++, on any CPU: FrameHash's reference, for tests and for
// machines without AVX-512. Same precondition.
uint64_t FrameHashPortable(const char* p, size_t n, uint64_t seed = 0);

// The tag of one ring: seeds its frames' checksums (RingWriter, RingReaderOptions::tag). Binds a
// frame to the incarnations of its sender and its receiver (the region ids of their messaging
// areas, see messenger.h) and to the lane, so that a late WRITE from an earlier incarnation, or
// a WRITE aimed at another lane's ring, is never delivered.
uint64_t RingTag(uint32_t sender_incarnation, uint32_t receiver_incarnation, int lane);

// Head write-back slot: {head, check}. The check lets the sender tell a torn or half-placed
// slot (bytes of the old and new value mixed) from a real one. It also covers `tag`, which is
// not stored: the messenger passes the pair of incarnations the ring belongs to (see
// HeadSlotTag in messenger.cc), so a slot written for another incarnation of the sender or the
// receiver never decodes (except with probability 2^-64).
void EncodeHeadSlot(uint64_t head, uint64_t tag, char* slot);
// Reads a slot written by EncodeHeadSlot with the same `tag` (possibly concurrently with a WRITE
// landing in it). False when the slot is empty, inconsistent or for another tag; then keep the
// previous head.
bool DecodeHeadSlot(const char* slot, uint64_t tag, uint64_t* head);

// `size` staged bytes at `source` in the staging buffer, which go to `offset` in the ring.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t source = 0;
};

// The sending end of one ring. Stages frames (see the file comment) and keeps the tail; the free
// space comes from the receiver's head, learned through UpdateHead. Positions (tail, head) are
// byte counters that only grow; the ring offset is counter % size.
class RingWriter {
 public:
  // `staging`: ring_size bytes of local (registered) memory, 16-byte aligned, owned by the
  // caller. A flush never stages more than the ring holds. `tag`: the ring's RingTag (the
  // reader's RingReaderOptions::tag must be the same).
  RingWriter(char* staging, uint64_t ring_size, uint64_t tag = 0);
  RingWriter(const RingWriter&) = delete;
  RingWriter& operator=(const RingWriter&) = delete;

  // Queues a frame and returns where its payload goes in the staging buffer (fill it before the
  // next flush). Errors: InvalidArgument for a payload above MaxPayload (messages are not
  // fragmented); ResourceExhausted when the ring lacks space until the receiver reports a later
  // head — nothing is written then, the sender must back off.
  absl::StatusOr<char*> Reserve(uint16_t type, uint64_t length);
  // Reserve + copy. `parts` are concatenated into one payload.
  absl::Status Append(uint16_t type, absl::string_view payload);
  absl::Status Append(uint16_t type, std::initializer_list<absl::string_view> parts);

  // Bytes appended but not yet flushed, as at most two ranges (split at the ring's end), in the
  // order they must be written. Their frames are sealed (checksums computed) by this call.
  using Ranges = absl::InlinedVector<ByteRange, 2>;
  Ranges Unflushed();
  bool has_unflushed() const { return flushed_ != tail_; }
  // The ranges were written: the next frames are staged from the buffer's start again, so the
  // WRITEs of the ranges must have completed before the next Reserve or Append.
  void MarkFlushed() {
    flushed_ = tail_;
    staged_ = 0;
  }

  // Takes a head reported by the receiver. A head behind the one already known is a report that
  // landed late and is ignored (OK). DataLoss if impossible (beyond what was flushed): the
  // receiver's state is corrupt, the ring must not be used.
  absl::Status UpdateHead(uint64_t head);

  uint64_t head() const { return head_; }
  uint64_t tail() const { return tail_; }
  uint64_t size() const { return size_; }
  // Bytes appendable right now as one frame's footprint (ignoring wrap waste).
  uint64_t free_bytes() const { return size_ - (tail_ - head_); }

 private:
  // Stages the header of a `frame`-byte frame and zeroes its padding (the trailer is written
  // when sealed); returns where the frame starts in the staging buffer.
  char* StageHeader(uint64_t frame, uint16_t type, uint16_t flags, uint64_t length);
  void Seal(char* frame_start, uint64_t frame);

  char* const staging_;
  const uint64_t size_;
  const uint64_t tag_;    // seeds the checksums
  uint64_t staged_ = 0;   // bytes staged since the last flush, from staging_
  uint64_t head_ = 0;     // receiver consumed everything before this
  uint64_t flushed_ = 0;  // everything before this has been handed to Unflushed()
  uint64_t tail_ = 0;     // next frame starts here
  uint64_t sealed_ = 0;   // frames before this have trailers
  uint32_t seq_ = 0;      // last sequence number used
};

struct RingMessage {
  uint16_t type = 0;
  uint32_t seq = 0;
  absl::string_view payload;  // inside the ring; valid until Consume()
};

struct RingReaderOptions {
  // How long the frame due (a header with the sequence number due) may stay inconsistent without
  // changing before the ring is declared corrupt. A WRITE's bytes land within microseconds; a
  // frame that is stuck half-placed means a corrupt ring or a sender that died mid-WRITE. Zero:
  // any inconsistent frame is corrupt at once (unit tests of corruption); InfiniteDuration: never
  // (tests of partial visibility). Bytes without the sequence number due are never corrupt: they
  // are free space (ring.cc, "Bytes that are not the frame due").
  absl::Duration incomplete_timeout = absl::Seconds(2);
  // The clock for incomplete_timeout; tests inject a fake one. The default is the coarse
  // monotonic clock (platform/clock.h): ~10 ns a read, one kernel tick of resolution.
  std::function<absl::Time()> now = [] { return CoarseNowAsTime(); };
  // The ring's RingTag, the same as its writer's: frames hashed with another tag never verify.
  uint64_t tag = 0;
};

// The receiving end of one ring: finds complete frames at the head, in order.
class RingReader {
 public:
  enum State {
    kIdle,        // nothing at the head: no header with the sequence number due
    kMessage,     // a complete message (see Peek)
    kIncomplete,  // a frame is arriving (or stuck; see incomplete_timeout)
    kClosed,      // the ring is corrupt; status() says why. Nothing is read from it any more.
  };

  // `ring`: ring_size bytes of the receiver's memory, 16-byte aligned and zero initially.
  RingReader(char* ring, uint64_t ring_size, RingReaderOptions options = {});
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  // Looks at the head. Wrap frames are consumed on the way. On kMessage, *msg describes the
  // message; the bytes stay valid and unchanged until Consume(). Never reads outside the ring.
  State Peek(RingMessage* msg);
  // Zeroes the frame last returned by Peek and moves the head past it. Requires kMessage.
  void Consume();

  // True when the sender should learn the head: at least half the ring consumed since the last
  // report. Deadlock-free: a sender blocked for space has more than half the ring outstanding
  // (frames are at most a quarter, wrap waste less than one frame), so once the reader drained
  // them it has consumed more than half a ring unreported, and reports.
  bool ShouldReportHead() const { return head_ - reported_ >= size_ / 2; }
  bool HasUnreported() const { return head_ != reported_; }
  void MarkReported() { reported_ = head_; }

  uint64_t head() const { return head_; }
  uint32_t expected_seq() const { return expected_; }
  const absl::Status& status() const { return status_; }
  bool closed() const { return !status_.ok(); }

  // Closes the ring from outside (e.g. its sender left the cluster).
  void Close(absl::Status reason);

 private:
  State Corrupt(uint64_t pos, const std::string& what);
  // An inconsistent frame at `pos` spanning `extent` bytes: kIncomplete, or kClosed once it has
  // stayed unchanged for incomplete_timeout.
  State Inconsistent(uint64_t pos, uint64_t extent, absl::string_view what);
  void Advance(uint64_t bytes);

  char* const ring_;
  const uint64_t size_;
  const uint64_t tag_;  // options_.tag
  const RingReaderOptions options_;
  uint64_t head_ = 0;
  uint64_t reported_ = 0;
  uint32_t expected_ = 1;
  uint64_t peeked_frame_ = 0;  // size of the frame returned by the last Peek, 0 if none
  absl::Status status_;
  // Incomplete-frame watch: what the frame looked like and since when.
  uint64_t stuck_head_ = ~uint64_t{0};
  uint64_t stuck_fingerprint_ = 0;
  bool stuck_fingerprinted_ = false;  // stuck_fingerprint_ was taken for stuck_head_
  absl::Time stuck_since_;
  absl::Time fingerprinted_at_;  // the last time the fingerprint was taken
};

}  // namespace farm

#endif  // FARM_MESSAGING_RING_H_
