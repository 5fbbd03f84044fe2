#include "messaging/ring.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "platform/sync_point.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FARM_FRAME_HASH_AVX512 1
#include <immintrin.h>
#endif

namespace farm {
namespace {

constexpr uint64_t kHeadSlotSalt = 0x68656164736c6f74ull;  // "headslot"
constexpr uint64_t kRingTagSalt = 0x72696e6774616731ull;   // "ringtag1"

// Any r (r = 0 included: no shift by 64).
constexpr uint64_t Rotl(uint64_t x, unsigned r) { return (x << (r & 63)) | (x >> (-r & 63)); }

// One step of a hash lane. For a fixed accumulator it is a bijection of the word, so two inputs
// that differ in a single word (e.g. a word that has not arrived yet and still reads zero) always
// leave the lane in different states.
constexpr uint64_t kRoundMultiplier = 0x9e3779b97f4a7c15ull;  // odd: invertible mod 2^64
constexpr uint64_t kRoundAddend = 0x632be59bd9b4e019ull;
constexpr int kRoundRotation = 29;
uint64_t Round(uint64_t acc, uint64_t word) {
  return Rotl((acc ^ word) * kRoundMultiplier, kRoundRotation) + kRoundAddend;
}

uint64_t LoadWord(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));
  return w;
}

// Loads a 16-byte header or trailer that a remote WRITE may be placing right now. The acquire
// loads keep the compiler and CPU from using values read before these (nothing on the writing
// side releases: the NIC or the provider places bytes in no promised order, which is what the
// checksum is for).
template <typename T>
T LoadRemote(const char* p) {
  static_assert(sizeof(T) == 16, "header and trailer are two words");
  uint64_t w[2];
  w[0] = __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
  w[1] = __atomic_load_n(reinterpret_cast<const uint64_t*>(p + 8), __ATOMIC_ACQUIRE);
  T t;
  std::memcpy(&t, w, sizeof(t));
  return t;
}

// Whether bytes still change (RingReader::Inconsistent): a hash of the `n` bytes at `p` (8-byte
// aligned, n % 8 == 0), loaded word by word with relaxed atomic loads, since a writer (a provider,
// or a test storing into the ring) may be placing them right now.
uint64_t Fingerprint(const char* p, uint64_t n) {
  uint64_t h = n;
  for (uint64_t i = 0; i < n; i += 8) {
    h = Mix64(h ^ __atomic_load_n(reinterpret_cast<const uint64_t*>(p + i), __ATOMIC_RELAXED));
  }
  return h;
}

uint32_t NextSeq(uint32_t seq) { return seq + 1 == 0 ? 1 : seq + 1; }

bool SameHeader(const FrameHeader& a, const FrameHeader& b) {
  return a.length == b.length && a.type == b.type && a.flags == b.flags && a.seq == b.seq &&
         a.reserved == b.reserved;
}

}  // namespace

absl::Status ValidateRingSize(uint64_t ring_size) {
  if (ring_size < kMinRingSize || ring_size > kMaxRingSize || ring_size % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ring size ", ring_size,
                                                   " must be a multiple of 4096 between ",
                                                   kMinRingSize, " and ", kMaxRingSize));
  }
  return absl::OkStatus();
}

uint64_t FrameSize(uint64_t ring_size, uint64_t pos, uint64_t length) {
  uint64_t s = (kFrameOverhead + length + kFrameAlign - 1) / kFrameAlign * kFrameAlign;
  // Never leave exactly 16 bytes before the ring's end: a wrap frame needs 32.
  if (pos + s + kFrameAlign == ring_size) s += kFrameAlign;
  return s;
}

// ---------------------------------------------------------------------------------------------
// FrameHash
//
// The function: kHashLanes = 64 lanes, lane k starting at kHash.init[k] (lane 0 also XORed with
// n ^ seed). Word i of the frame goes into lane i % 64 through Round. At the end lane k = 8g + e is
// rotated left by 8e + g + 1 (all 64 rotations distinct) and the lanes are XORed together; Mix64
// of that is the hash. Two implementations compute exactly this function, checked against each
// other in ring_test.cc: a portable one and an AVX-512 one (eight 8-lane zmm accumulators, one
// per group g), chosen once per process.
//
// Why 64 lanes: one step of a lane is a chain of ~18 cycles with AVX-512 (vpmullq alone takes
// 15), and the eight independent zmm chains of a 512-byte block keep the multiplier busy for
// about 12 of them. Measured side by side for a 4 KiB frame: 32 lanes (four accumulators) took
// 1.4x as long as 64; 128 lanes were no faster at 2-64 KiB and slower below 1 KiB (every
// accumulator costs a fold at the end).
//
// Below kHashVectorMinBytes the portable code runs on every machine: a short frame's words each
// reach a lane of their own, a scalar multiply takes 3 cycles instead of 15, and the lanes no
// word reached fold into a precomputed constant. The vector code's latency has a floor of ~30 ns
// here (load, vpmullq, fold, horizontal XOR, Mix64), which the scalar code beats up to 96 bytes;
// from 112 bytes up the vector code is within a few percent for one hash and about twice as fast
// for hashes in a row. Without AVX-512, 64 lanes cost more than the 8 lanes used before (each
// lane's fold costs about as much as a word): about 2x for 256-512-byte frames, 1.1-1.3x from
// 4 KiB up.
namespace {

constexpr int kHashLanes = 64;
constexpr int kHashGroups = kHashLanes / 8;
constexpr size_t kHashVectorMinBytes = 112;

// Lane k's rotation in the final fold (see above).
constexpr unsigned HashRotation(int k) { return (8 * (k % 8) + k / 8 + 1) % 64; }

struct FrameHashConstants {
  uint64_t init[kHashLanes];      // initial lane states (splitmix64's sequence)
  uint64_t rotation[kHashLanes];  // HashRotation(k), as 64-bit elements for vprolvq
  // untouched[k]: the fold of lanes k.. when no word reached them (lane 0 as for n = 0).
  uint64_t untouched[kHashLanes + 1];
};

constexpr FrameHashConstants MakeFrameHashConstants() {
  FrameHashConstants c{};
  for (int k = 0; k < kHashLanes; ++k) {
    c.init[k] = Mix64(0x243f6a8885a308d3ull + uint64_t(k) * 0x9e3779b97f4a7c15ull);
    c.rotation[k] = HashRotation(k);
  }
  c.untouched[kHashLanes] = 0;
  for (int k = kHashLanes - 1; k >= 0; --k) {
    c.untouched[k] = c.untouched[k + 1] ^ Rotl(c.init[k], HashRotation(k));
  }
  return c;
}

constexpr FrameHashConstants kHash = MakeFrameHashConstants();

// Both portable paths work on one group of lanes g (8g..8g+7) at a time, so that its states stay
// in registers, and return the XOR of Rotl(lane 8g+e, 8e) over e; the caller rotates that by
// g + 1, which makes each lane's rotation 8e + g + 1 = HashRotation(8g + e).

// A frame of at most 64 words: each lane sees at most one word, and group g's eight words are
// all there. `first` is XORed into the group's first word: n for group 0, whose lane 0 starts at
// init[0] ^ n (the same thing, since Round only sees acc ^ word).
uint64_t HashShortGroup(const char* p, int g, uint64_t first) {
  uint64_t x = 0;
#pragma GCC unroll 8
  for (int e = 0; e < 8; ++e) {
    const uint64_t word = LoadWord(p + 64 * g + 8 * e) ^ (e == 0 ? first : 0);
    x ^= Rotl(Round(kHash.init[8 * g + e], word), 8 * e);
  }
  return x;
}

// `first` = n ^ seed, XORed into lane 0's initial state.
uint64_t HashShortFrame(const char* p, size_t n, uint64_t first) {
  const size_t words = n / 8;
  uint64_t h = kHash.untouched[words];
  // No word reached lane 0: it stayed at init[0] ^ first, and untouched[0] holds init[0]'s share.
  if (words == 0) h ^= Rotl(first, kHash.rotation[0]);
  size_t k = 0;
  for (; k + 8 <= words; k += 8) {
    const int g = static_cast<int>(k / 8);
    h ^= Rotl(HashShortGroup(p, g, g == 0 ? first : 0), g + 1);
  }
  for (; k < words; ++k) {
    const uint64_t word = LoadWord(p + 8 * k) ^ (k == 0 ? first : 0);
    h ^= Rotl(Round(kHash.init[k], word), kHash.rotation[k]);
  }
  return Mix64(h);
}

// A frame of more than 64 words: every group gets at least eight.
uint64_t HashLongGroup(const char* p, size_t n, uint64_t first, int g) {
  const size_t words = n / 8;
  uint64_t lane[8];
  for (int e = 0; e < 8; ++e) lane[e] = kHash.init[8 * g + e];
  if (g == 0) lane[0] ^= first;
  size_t w = 8 * g;
  for (; w + 8 <= words; w += kHashLanes) {
#pragma GCC unroll 8
    for (int e = 0; e < 8; ++e) lane[e] = Round(lane[e], LoadWord(p + 8 * (w + e)));
  }
#pragma GCC unroll 8
  for (int e = 0; e < 8; ++e) {
    if (w + e < words) lane[e] = Round(lane[e], LoadWord(p + 8 * (w + e)));
  }
  uint64_t x = 0;
#pragma GCC unroll 8
  for (int e = 0; e < 8; ++e) x ^= Rotl(lane[e], 8 * e);
  return x;
}

#ifdef FARM_FRAME_HASH_AVX512
#define FARM_AVX512_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl")))

// Some operations below are spelled as zero-masked with a full mask (the same instructions):
// GCC 12 warns about the undefined pass-through operand of their unmasked intrinsics (its bug
// 105593).
constexpr __mmask8 kAllLanes = 0xff;

// Round on the lanes of `m` among eight (vpxorq, vpmullq, vprolq, vpaddq); the others keep
// their state. The words of lanes outside `m` are never used.
FARM_AVX512_TARGET inline __m512i RoundX8(__m512i acc, __m512i word, __mmask8 m = kAllLanes) {
  const __m512i product =
      _mm512_mullo_epi64(_mm512_xor_si512(acc, word), _mm512_set1_epi64(kRoundMultiplier));
  return _mm512_mask_add_epi64(acc, m, _mm512_maskz_rol_epi64(kAllLanes, product, kRoundRotation),
                               _mm512_set1_epi64(kRoundAddend));
}

// The same function as FrameHashPortable; acc[g] holds lanes 8g..8g+7.
FARM_AVX512_TARGET uint64_t FrameHashAvx512(const char* p, size_t n, uint64_t seed) {
  __m512i acc[kHashGroups];
#pragma GCC unroll 8
  for (int g = 0; g < kHashGroups; ++g) acc[g] = _mm512_loadu_si512(&kHash.init[8 * g]);
  acc[0] = _mm512_xor_si512(acc[0], _mm512_zextsi128_si512(_mm_cvtsi64_si128(n ^ seed)));
  size_t i = 0;
  for (; i + 8 * kHashLanes <= n; i += 8 * kHashLanes) {
#pragma GCC unroll 8
    for (int g = 0; g < kHashGroups; ++g) {
      acc[g] = RoundX8(acc[g], _mm512_loadu_si512(p + i + 64 * g));
    }
  }
  if (i < n) {
    // Fewer than 64 words left: bit k of `left` says word i/8 + k exists. Masked-off words are
    // neither loaded (no fault, no read past p + n) nor change their lane.
    const uint64_t left = (uint64_t{1} << ((n - i) / 8)) - 1;
#pragma GCC unroll 8
    for (int g = 0; g < kHashGroups; ++g) {
      const __mmask8 m = static_cast<__mmask8>(left >> (8 * g));
      if (m == 0) break;
      acc[g] = RoundX8(acc[g], _mm512_maskz_loadu_epi64(m, p + i + 64 * g), m);
    }
  }
  __m512i x = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int g = 0; g < kHashGroups; ++g) {
    x = _mm512_xor_si512(
        x, _mm512_maskz_rolv_epi64(kAllLanes, acc[g], _mm512_loadu_si512(&kHash.rotation[8 * g])));
  }
  const __m256i x4 = _mm256_xor_si256(_mm512_maskz_extracti64x4_epi64(kAllLanes, x, 0),
                                      _mm512_maskz_extracti64x4_epi64(kAllLanes, x, 1));
  __m128i x2 = _mm_xor_si128(_mm256_castsi256_si128(x4), _mm256_extracti128_si256(x4, 1));
  x2 = _mm_xor_si128(x2, _mm_unpackhi_epi64(x2, x2));
  return Mix64(static_cast<uint64_t>(_mm_cvtsi128_si64(x2)));
}
#undef FARM_AVX512_TARGET
#endif  // FARM_FRAME_HASH_AVX512

using FrameHashFn = uint64_t (*)(const char*, size_t, uint64_t);

FrameHashFn ChooseFrameHash() {
#ifdef FARM_FRAME_HASH_AVX512
  __builtin_cpu_init();  // we may run before the constructors (a static initializer's hash)
  // The checks include the OS saving zmm and mask registers (XCR0).
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) {
    return FrameHashAvx512;
  }
#endif
  return FrameHashPortable;
}

}  // namespace

uint64_t FrameHashPortable(const char* p, size_t n, uint64_t seed) {
  if (n <= 8 * kHashLanes) return HashShortFrame(p, n, n ^ seed);
  uint64_t h = 0;
  for (int g = 0; g < kHashGroups; ++g) h ^= Rotl(HashLongGroup(p, n, n ^ seed, g), g + 1);
  return Mix64(h);
}

uint64_t FrameHash(const char* p, size_t n, uint64_t seed) {
  if (n < kHashVectorMinBytes) return FrameHashPortable(p, n, seed);
  static const FrameHashFn impl = ChooseFrameHash();
  return impl(p, n, seed);
}

uint64_t RingTag(uint32_t sender_incarnation, uint32_t receiver_incarnation, int lane) {
  // Mix64 is a bijection: distinct (sender, receiver) pairs give distinct inner values, and the
  // lane then moves the result again; a collision of two triples has probability 2^-64.
  return Mix64(Mix64((uint64_t{sender_incarnation} << 32) | receiver_incarnation) ^
               (kRingTagSalt + static_cast<uint64_t>(lane)));
}

namespace {
uint64_t HeadSlotCheck(uint64_t head, uint64_t tag) {
  return Mix64(head ^ Mix64(tag ^ kHeadSlotSalt));
}
}  // namespace

void EncodeHeadSlot(uint64_t head, uint64_t tag, char* slot) {
  const uint64_t w[2] = {head, HeadSlotCheck(head, tag)};
  std::memcpy(slot, w, sizeof(w));
}

bool DecodeHeadSlot(const char* slot, uint64_t tag, uint64_t* head) {
  // Pairs with nothing on the writer's side (a remote WRITE): a torn read shows up as a check
  // mismatch, never as a wrong head accepted.
  const uint64_t h = __atomic_load_n(reinterpret_cast<const uint64_t*>(slot), __ATOMIC_ACQUIRE);
  const uint64_t c = __atomic_load_n(reinterpret_cast<const uint64_t*>(slot + 8), __ATOMIC_ACQUIRE);
  if (c != HeadSlotCheck(h, tag)) return false;
  *head = h;
  return true;
}

// ---------------------------------------------------------------------------------------------
// RingWriter

RingWriter::RingWriter(char* staging, uint64_t ring_size, uint64_t tag)
    : staging_(staging), size_(ring_size), tag_(tag) {}

char* RingWriter::StageHeader(uint64_t frame, uint16_t type, uint16_t flags, uint64_t length) {
  char* at = staging_ + staged_;
  staged_ += frame;
  seq_ = NextSeq(seq_);
  const FrameHeader h{static_cast<uint32_t>(length), type, flags, seq_, 0};
  std::memcpy(at, &h, sizeof(h));
  // The staging buffer holds older frames; the receiver's copy of free space is zero, and the
  // checksum covers the padding, so the padding must be zero here too.
  const uint64_t pad_begin = sizeof(FrameHeader) + length;
  std::memset(at + pad_begin, 0, frame - sizeof(FrameTrailer) - pad_begin);
  return at;
}

absl::StatusOr<char*> RingWriter::Reserve(uint16_t type, uint64_t length) {
  if (length > MaxPayload(size_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ", length, "-byte message exceeds the ", MaxPayload(size_), "-byte limit of a ", size_,
        "-byte ring (messages are not fragmented: raise MessengerOptions::ring_size or split "
        "the message)"));
  }
  uint64_t pos = tail_ % size_;
  uint64_t frame = FrameSize(size_, pos, length);
  const uint64_t skip = pos + frame > size_ ? size_ - pos : 0;
  if (skip > 0) frame = FrameSize(size_, 0, length);
  if (tail_ - head_ + skip + frame > size_) {
    return absl::ResourceExhaustedError(absl::StrCat("ring full: ", tail_ - head_, " of ", size_,
                                                     " bytes not yet consumed by the receiver, ",
                                                     skip + frame, " needed"));
  }
  if (skip > 0) {
    StageHeader(kFrameOverhead, 0, kWrapFlag, 0);
    tail_ += skip;
  }
  char* at = StageHeader(frame, type, 0, length);
  tail_ += frame;
  return at + sizeof(FrameHeader);
}

absl::Status RingWriter::Append(uint16_t type, std::initializer_list<absl::string_view> parts) {
  uint64_t length = 0;
  for (absl::string_view p : parts) length += p.size();
  absl::StatusOr<char*> dst = Reserve(type, length);
  if (!dst.ok()) return dst.status();
  char* out = *dst;
  for (absl::string_view p : parts) {
    if (!p.empty()) std::memcpy(out, p.data(), p.size());
    out += p.size();
  }
  return absl::OkStatus();
}

absl::Status RingWriter::Append(uint16_t type, absl::string_view payload) {
  return Append(type, {payload});
}

void RingWriter::Seal(char* frame_start, uint64_t frame) {
  FrameHeader h;
  std::memcpy(&h, frame_start, sizeof(h));
  const uint64_t trailer_at = frame - sizeof(FrameTrailer);
  const FrameTrailer t{FrameHash(frame_start, trailer_at, tag_), h.seq, h.length};
  std::memcpy(frame_start + trailer_at, &t, sizeof(t));
}

RingWriter::Ranges RingWriter::Unflushed() {
  Ranges out;
  uint64_t at = flushed_;  // ring position
  uint64_t src = 0;        // staging offset: the staged frames follow each other from 0
  while (at != tail_) {
    const uint64_t pos = at % size_;
    FrameHeader h;
    std::memcpy(&h, staging_ + src, sizeof(h));
    const bool wrap = (h.flags & kWrapFlag) != 0;
    const uint64_t bytes = wrap ? kFrameOverhead : FrameSize(size_, pos, h.length);
    if (at >= sealed_) Seal(staging_ + src, bytes);
    // Consecutive frames form one range; a wrap frame ends it (the rest of the ring is skipped,
    // not written: it is zero on the receiver) and so does the ring's end.
    if (!out.empty() && out.back().offset + out.back().size == pos) {
      out.back().size += bytes;
    } else {
      out.push_back(ByteRange{pos, bytes, src});
    }
    at += wrap ? size_ - pos : bytes;
    src += bytes;
  }
  sealed_ = tail_;
  return out;
}

absl::Status RingWriter::UpdateHead(uint64_t head) {
  // Behind the head we know: a write-back that landed late (an older slot value seen after a
  // newer one). It tells nothing new, and is no sign of corruption.
  if (head <= head_) return absl::OkStatus();
  if (head > flushed_) {
    return absl::DataLossError(absl::StrCat("the receiver reported head ", head, ", beyond the ",
                                            flushed_, " bytes written to it so far"));
  }
  head_ = head;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// RingReader
//
// Why a message is never consumed before all its bytes are in place, on every transport. The
// receiver learns of a WRITE only by looking at memory: we use no immediate data, no atomics and
// no completion on the receiver's side. So we must assume that the bytes of one WRITE become
// visible in any order, and that until a byte holds its final value it holds whatever was there
// before (zero, or an earlier lap's byte: see below):
//  - verbs (RC, also through ofi_rxm): the NIC places the data by DMA. InfiniBand guarantees
//    that a WRITE's data is in memory when its *sender* sees the completion, but not the order in
//    which the receiver's CPU sees the bytes while it is placed (PCIe writes, caches, relaxed
//    ordering). FaRM polls the last byte, which works on the NICs it used but is not promised.
//  - tcp;ofi_rxm and tcp: the provider copies the data from its socket buffers into the ring with
//    memcpy, on whichever thread drives its progress, concurrently with our scan — possibly in
//    several pieces for one WRITE, and glibc's memcpy stores some sizes back to front, with
//    overlapping stores (below).
//  - shm: the sending process copies with memcpy or process_vm_writev (CMA) concurrently with our
//    scan, in no promised order.
// A frame is accepted only when the header's sequence number is the one due, the trailer repeats
// it and the length, and the checksum over header + payload + padding matches. A partly placed
// frame fails one of these: a word that does not hold its final value yet changes the checksum
// except with probability 2^-64 (word i enters exactly one of FrameHash's 64 lanes, lane i % 64,
// through a step that is a bijection of the word for a fixed lane state, and every later step of
// that lane is a bijection of the state, so the lane ends in a different state; the lanes are
// then combined by distinct rotations and XOR, and mixed by a bijection; the AVX-512 and the
// portable code compute the same function); a partly placed length puts the trailer somewhere it
// is not. The checks run on a header loaded once, before the hash reads the ring again, so the
// header is loaded a second time after the checksum matched and must equal the first: a byte
// changes once, to its final value, so a header equal at both loads was the same in between,
// when it was hashed — the frame accepted is the frame checked. (Otherwise a wrap frame first
// seen with its flags not yet placed and completed before the hash would pass as an empty
// message.)
//
// Why a frame of another incarnation is never delivered: the checksum is seeded with the ring's
// tag (RingTag: sender incarnation, receiver incarnation, lane). The seed enters lane 0's initial
// state only, so the same bytes under two different tags end with lane 0 in different states
// (every step is a bijection of the state) and the other lanes equal: the hashes always differ.
// A late WRITE of an earlier incarnation of either end — a valid first frame at offset 0 with
// sequence number 1, exactly what a fresh ring expects — therefore stays a checksum mismatch.
//
// Bytes that are not the frame due. Consumed frames are zeroed, and the sender writes into
// consumed space only after we reported the head past it, so ring space ahead of the head is
// mostly zero. But not always: a provider's copy may put back bytes we already consumed and
// zeroed. glibc's memcpy (__memcpy_avx512_unaligned_erms here, followed with gdb) copies 65-128
// bytes as two 64-byte stores: the first 64 bytes, then the last 64, which overlap the first
// (AVX2 machines do the same with 32-byte stores, larger sizes with more). A WRITE of two 48-byte
// frames (96 bytes, a usual flush of two replies) holds the first frame complete after the first
// store; if the copying thread is interrupted there, we read and zero that frame, and the second
// store writes bytes 32-63 again: the first frame's trailer is back, behind our head. A lap later
// those bytes lie where a frame is due, before it arrives (seen on tcp;ofi_rxm in chaos runs,
// about one run in 20, as "header sequence number 1115 where 2402 is due", with frame 1115's
// trailer at that offset, frame 1115 having been consumed there one lap earlier).
// So a header whose sequence number is not the one due is never taken as corruption: it is free
// space (kIdle), whatever its bytes; the frame due is written over exactly those bytes and
// replaces them. The sequence number (never reused within 2^32 frames of one ring) is what keeps
// an earlier lap's frame from being delivered again, with the checksum for anything partial.
// What remains unprotected is a copy that stays preempted between its stores while the ring goes
// all the way round (the sender must fill and we consume a whole ring in that time): its late
// store would then land on a newer frame, which stays inconsistent and closes the ring.
//
// Which inconsistencies close the ring: a frame whose header carries the sequence number due but
// which does not add up (flags, reserved word, length, trailer, checksum) may still be arriving
// over such bytes; it is corrupt once it has stayed the same for incomplete_timeout. Bytes at the
// head that never become the frame due are not detected here: the sender's calls on the lane then
// end at their deadlines.

RingReader::RingReader(char* ring, uint64_t ring_size, RingReaderOptions options)
    : ring_(ring), size_(ring_size), tag_(options.tag), options_(std::move(options)) {}

RingReader::State RingReader::Peek(RingMessage* msg) {
  if (closed()) return kClosed;
  for (;;) {
    const uint64_t pos = head_ % size_;
    const FrameHeader h = LoadRemote<FrameHeader>(ring_ + pos);
    // Not the frame due: free space, its header still arriving, or an earlier lap's bytes put
    // back after we zeroed them (see "Bytes that are not the frame due" above). The writer's
    // next frame goes exactly here and replaces them.
    if (h.seq != expected_) return kIdle;
    // The frame due, as far as its sequence number says. Anything else that does not add up may
    // still be arriving over such bytes: it is corrupt only once it stays the same for
    // incomplete_timeout.
    if ((h.flags & ~kWrapFlag) != 0) {
      return Inconsistent(pos, sizeof(FrameHeader),
                          absl::StrCat("unknown header flags 0x", absl::Hex(h.flags)));
    }
    if (h.reserved != 0) {
      return Inconsistent(pos, sizeof(FrameHeader),
                          absl::StrCat("reserved header word is 0x", absl::Hex(h.reserved)));
    }
    const bool wrap = (h.flags & kWrapFlag) != 0;
    if (wrap && h.length != 0) {
      return Inconsistent(pos, sizeof(FrameHeader),
                          absl::StrCat("wrap frame with a length of ", h.length));
    }
    if (h.length > MaxPayload(size_)) {
      return Inconsistent(pos, sizeof(FrameHeader),
                          absl::StrCat("length ", h.length, " beyond the ", MaxPayload(size_),
                                       "-byte limit of a ", size_, "-byte ring"));
    }
    const uint64_t frame = wrap ? kFrameOverhead : FrameSize(size_, pos, h.length);
    if (pos + frame > size_) {
      return Inconsistent(pos, sizeof(FrameHeader),
                          absl::StrCat("a ", frame, "-byte frame runs past the ring's end"));
    }
    const uint64_t trailer_at = pos + frame - sizeof(FrameTrailer);
    const FrameTrailer t = LoadRemote<FrameTrailer>(ring_ + trailer_at);
    if (t.seq != expected_ || t.length != h.length) {
      return Inconsistent(pos, frame, "trailer does not match the header");
    }
    FARM_SYNC_POINT_CALLBACK("RingReader::Peek:BeforeHash", ring_ + pos);
    if (FrameHash(ring_ + pos, trailer_at - pos, tag_) != t.checksum) {
      return Inconsistent(pos, frame, "checksum mismatch");
    }
    // The checks above ran on `h`, loaded before the hash; the hash covered the header as it was
    // later. Bytes only go from zero to their final value, so if the header still equals `h`
    // now, it equaled `h` when it was hashed too: the frame we accept is the one we checked. (A
    // wrap frame whose flags were still zero at the first load would otherwise pass every check
    // as an empty message, 32 bytes long, and the head would stop short of the ring's end.)
    if (!SameHeader(LoadRemote<FrameHeader>(ring_ + pos), h)) {
      return Inconsistent(pos, frame, "header changed while it was being checked");
    }
    if (wrap) {
      std::memset(ring_ + pos, 0, kFrameOverhead);
      Advance(size_ - pos);
      continue;
    }
    msg->type = h.type;
    msg->seq = h.seq;
    msg->payload = absl::string_view(ring_ + pos + sizeof(FrameHeader), h.length);
    peeked_frame_ = frame;
    return kMessage;
  }
}

void RingReader::Consume() {
  if (peeked_frame_ == 0) return;
  const uint64_t pos = head_ % size_;
  std::memset(ring_ + pos, 0, peeked_frame_);
  Advance(peeked_frame_);
}

void RingReader::Advance(uint64_t bytes) {
  head_ += bytes;
  expected_ = NextSeq(expected_);
  peeked_frame_ = 0;
}

void RingReader::Close(absl::Status reason) {
  if (status_.ok()) status_ = std::move(reason);
}

RingReader::State RingReader::Corrupt(uint64_t pos, const std::string& what) {
  Close(absl::DataLossError(
      absl::StrCat("ring corrupt at offset ", pos, " (frame ", expected_, "): ", what)));
  return kClosed;
}

RingReader::State RingReader::Inconsistent(uint64_t pos, uint64_t extent, absl::string_view what) {
  // A frame arriving in pieces (tcp, large WRITEs) is seen here on every scan until it is
  // complete, so the frame is fingerprinted at most once per kFingerprintEvery, and not at all
  // before it has been inconsistent for that long: nearly every frame seen here is complete a few
  // microseconds later, and fingerprinting a 4 KiB frame word by word on first sight cost the
  // shm 4 KiB RPC ~3 us (msg_bench: 3.7 -> 6.8 us p50, bisected to the atomic Fingerprint). A
  // change within that time restarts the watch at most that much late, against a timeout of
  // seconds.
  constexpr absl::Duration kFingerprintEvery = absl::Milliseconds(1);
  const absl::Time now = options_.now();
  if (stuck_head_ != head_) {
    // A new inconsistent frame: start the watch; its first fingerprint comes a period later.
    stuck_head_ = head_;
    stuck_fingerprinted_ = false;
    stuck_since_ = now;
    fingerprinted_at_ = now;
  } else if (now - fingerprinted_at_ >= kFingerprintEvery) {
    const uint64_t fingerprint = Fingerprint(ring_ + pos, extent);
    fingerprinted_at_ = now;
    if (!stuck_fingerprinted_ || stuck_fingerprint_ != fingerprint) {
      // The first look at its bytes, or something moved (bytes are still arriving): the watch
      // runs from now.
      stuck_fingerprinted_ = true;
      stuck_fingerprint_ = fingerprint;
      stuck_since_ = now;
    }
  }
  if (now - stuck_since_ >= options_.incomplete_timeout) {
    return Corrupt(
        pos, absl::StrCat(what, " (unchanged for ", absl::FormatDuration(now - stuck_since_), ")"));
  }
  return kIncomplete;
}

}  // namespace farm
