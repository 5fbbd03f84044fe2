// The ring protocol on plain memory: a RingWriter's staging copied into a RingReader's ring with
// memcpy stands in for the one-sided WRITE, in whole ranges or byte by byte in shuffled order.
#include "messaging/ring.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "platform/sync_point.h"

namespace farm {
namespace {

// 16-byte aligned zeroed memory.
class Memory {
 public:
  explicit Memory(size_t size) : words_(size / 8 + 2, 0) {}
  char* data() { return reinterpret_cast<char*>(words_.data()); }

 private:
  std::vector<uint64_t> words_;
};

// The payload of message number k: its number, then bytes derived from it.
std::string PayloadFor(uint64_t k, size_t size) {
  std::string p(size, '\0');
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<char>((k * 131 + i * 7) ^ (i >> 3));
  std::memcpy(p.data(), &k, std::min(size, sizeof(k)));
  return p;
}

// A writer and a reader joined by memcpy.
struct Link {
  explicit Link(uint64_t size, RingReaderOptions opts = {})
      : size(size),
        staging(size),
        ring(size),
        w(staging.data(), size),
        r(ring.data(), size, opts) {}

  void Flush() {
    for (const ByteRange& b : w.Unflushed()) {
      std::memcpy(ring.data() + b.offset, staging.data() + b.source, b.size);
    }
    w.MarkFlushed();
  }
  void Report() {
    REQUIRE(w.UpdateHead(r.head()).ok());
    r.MarkReported();
  }
  // Appends one message and returns its bytes as (offset, size) pieces, without copying them.
  RingWriter::Ranges Stage(uint16_t type, const std::string& payload) {
    REQUIRE(w.Append(type, payload).ok());
    RingWriter::Ranges ranges = w.Unflushed();
    w.MarkFlushed();
    return ranges;
  }
  // Writes a valid frame, then lets `patch` damage the ring's copy before the reader looks.
  template <typename Patch>
  RingReader::State Corrupted(const std::string& payload, Patch patch) {
    for (const ByteRange& b : Stage(3, payload)) {
      std::memcpy(ring.data() + b.offset, staging.data() + b.source, b.size);
    }
    patch(ring.data() + r.head() % size);
    RingMessage m;
    return r.Peek(&m);
  }

  uint64_t size;
  Memory staging, ring;
  RingWriter w;
  RingReader r;
};

RingReaderOptions Strict() {
  RingReaderOptions o;
  o.incomplete_timeout = absl::ZeroDuration();
  return o;
}

RingReaderOptions Patient() {
  RingReaderOptions o;
  o.incomplete_timeout = absl::InfiniteDuration();
  return o;
}

}  // namespace

TEST_CASE("FrameHash equals the portable reference at every size and on every kind of data",
          "[ring][hash]") {
  constexpr size_t kMax = 65536;
  Memory mem(kMax);
  std::mt19937_64 rng(11);
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 4096; n += 8) sizes.push_back(n);
  // Larger frames: every tail length (n / 8 % 64) at some size, and whole 512-byte blocks.
  for (size_t n = 4096 + 8; n <= kMax; n += 8 * 61) sizes.push_back(n);
  for (size_t n = 8192; n <= kMax; n *= 2) sizes.insert(sizes.end(), {n - 8, n, n + 8});
  const int fill = GENERATE(0, 1, 2);  // random, all zero, all 0xff
  INFO("fill " << fill);
  for (size_t i = 0; i < kMax + 8; ++i) {
    mem.data()[i] = fill == 0 ? static_cast<char>(rng()) : fill == 1 ? 0 : '\xff';
  }
  for (size_t n : sizes) {
    if (n > kMax) continue;
    INFO("n = " << n);
    REQUIRE(FrameHash(mem.data(), n) == FrameHashPortable(mem.data(), n));
    // Seeded (a ring's tag): the same function on both paths, and a different one per seed.
    for (uint64_t seed : {uint64_t{1}, RingTag(7, 9, 2), ~uint64_t{0}}) {
      REQUIRE(FrameHash(mem.data(), n, seed) == FrameHashPortable(mem.data(), n, seed));
      REQUIRE(FrameHash(mem.data(), n, seed) != FrameHash(mem.data(), n));
    }
    // The length is part of the hash, not only the words (all-zero frames of different sizes).
    if (n >= 8) REQUIRE(FrameHash(mem.data(), n) != FrameHash(mem.data(), n - 8));
  }
  // Where the frame starts in memory does not matter (unaligned loads, masked tails).
  for (size_t n = 0; n <= 1024; n += 8) {
    REQUIRE(FrameHash(mem.data() + 8, n) == FrameHashPortable(mem.data() + 8, n));
    REQUIRE(FrameHash(mem.data() + 3, n) == FrameHashPortable(mem.data() + 3, n));
  }
}

TEST_CASE("FrameHash is the same function everywhere (known answers)", "[ring][hash]") {
  // Frames of any machine must verify on any other: a change of these values is a change of the
  // wire format.
  Memory mem(4096);
  for (size_t k = 0; k < 4096; ++k) mem.data()[k] = static_cast<char>(k * 131 + 7);
  const std::pair<size_t, uint64_t> known[] = {
      {0, 0xaa13960fd2bf6995ull},   {16, 0xa71d19b477b1e66aull},  {48, 0xefb8d577e1c083f2ull},
      {128, 0x63c88d1dff8c74b9ull}, {520, 0xd2102ae2212bbd32ull}, {4096, 0x6fd68ed779244f19ull},
  };
  for (const auto& [n, hash] : known) {
    INFO("n = " << n);
    CHECK(FrameHash(mem.data(), n) == hash);
    CHECK(FrameHashPortable(mem.data(), n) == hash);
  }
  // Seeded with a ring's tag (the same bytes, the tag of sender 7, receiver 9, lane 2).
  const uint64_t seed = RingTag(7, 9, 2);
  CHECK(seed == 0x91ccd270df5d6427ull);
  const std::pair<size_t, uint64_t> known_seeded[] = {
      {0, 0xd0920820123023deull},   {16, 0x2e60524e973921ceull},  {48, 0x02d8c707716979b1ull},
      {128, 0x833493f38ce9edc0ull}, {520, 0xef842407f2bc7c05ull}, {4096, 0x2989dca07b86a7f8ull},
  };
  for (const auto& [n, hash] : known_seeded) {
    INFO("n = " << n << ", seeded");
    CHECK(FrameHash(mem.data(), n, seed) == hash);
    CHECK(FrameHashPortable(mem.data(), n, seed) == hash);
  }
}

TEST_CASE("FrameHash changes when any one or two words of a frame are still zero", "[ring][hash]") {
  // What a partly placed frame looks like: some words not arrived yet (free ring space is zero).
  std::mt19937_64 rng(12);
  auto random_frame = [&](size_t n) {
    std::vector<uint64_t> words(n / 8);
    for (uint64_t& w : words) w = rng() | 1;  // no word is zero already
    return words;
  };
  auto hash = [](const std::vector<uint64_t>& words) {
    return FrameHash(reinterpret_cast<const char*>(words.data()), words.size() * 8);
  };
  SECTION("every single word and every pair of words, small frames") {
    for (size_t n : {16, 48, 64, 112, 128, 512, 528, 1040}) {
      INFO("n = " << n);
      std::vector<uint64_t> words = random_frame(n);
      const uint64_t full = hash(words);
      for (size_t i = 0; i < words.size(); ++i) {
        const uint64_t wi = words[i];
        words[i] = 0;
        REQUIRE(hash(words) != full);
        for (size_t j = i + 1; j < words.size(); ++j) {
          const uint64_t wj = words[j];
          words[j] = 0;
          REQUIRE(hash(words) != full);
          words[j] = wj;
        }
        words[i] = wi;
      }
    }
  }
  SECTION("every single word and sampled pairs, 4 KiB") {
    std::vector<uint64_t> words = random_frame(4096);
    const uint64_t full = hash(words);
    for (size_t i = 0; i < words.size(); ++i) {
      const uint64_t wi = words[i];
      words[i] = 0;
      REQUIRE(hash(words) != full);
      words[i] = wi;
    }
    for (int s = 0; s < 20000; ++s) {
      const size_t i = rng() % words.size();
      // Half of the pairs in the same lane (64 words apart): the lane absorbs both.
      const size_t j =
          s % 2 == 0 ? (i + 64 * (1 + rng() % 7)) % words.size() : rng() % words.size();
      if (i == j) continue;
      const uint64_t wi = words[i], wj = words[j];
      words[i] = words[j] = 0;
      REQUIRE(hash(words) != full);
      words[i] = wi;
      words[j] = wj;
    }
  }
}

TEST_CASE("FrameHash reads nothing past the end of the frame", "[ring][hash]") {
  // The frame ends where an inaccessible page begins: a read past p + n would fault.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = 16384 + page;
  void* m = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  char* end = static_cast<char*>(m) + span;
  REQUIRE(mprotect(end, page, PROT_NONE) == 0);
  std::mt19937_64 rng(13);
  for (char* c = static_cast<char*>(m); c < end; ++c) *c = static_cast<char>(rng());
  for (size_t n = 0; n <= 16384; n += 8) {
    REQUIRE(FrameHash(end - n, n) == FrameHashPortable(end - n, n));
  }
  munmap(m, span + page);
}

TEST_CASE("frame sizes are aligned and never leave 16 bytes before the ring's end", "[ring]") {
  for (uint64_t pos = 0; pos < 4096; pos += 16) {
    for (uint64_t len = 0; len <= MaxPayload(4096); ++len) {
      const uint64_t s = FrameSize(4096, pos, len);
      REQUIRE(s % 16 == 0);
      REQUIRE(s >= len + kFrameOverhead);
      REQUIRE(s < 4096 / 4);
      if (pos + s <= 4096) REQUIRE(4096 - (pos + s) != 16);
    }
  }
  CHECK(ValidateRingSize(4096).ok());
  CHECK(absl::IsInvalidArgument(ValidateRingSize(4000)));
  CHECK(absl::IsInvalidArgument(ValidateRingSize(0)));
}

TEST_CASE("messages arrive in order, exactly once, across hundreds of wrap-arounds", "[ring]") {
  const uint64_t size = GENERATE(4096, 16384);
  Link link(size, Strict());
  std::mt19937_64 rng(size);
  uint64_t sent = 0, received = 0;
  const uint64_t total = 20000;
  int stalls = 0;
  while (received < total) {
    bool progress = false;
    // Append a few messages of random sizes, small ones more often.
    for (int n = std::uniform_int_distribution<int>(0, 6)(rng); n > 0 && sent < total; --n) {
      const uint64_t max = rng() % 4 == 0 ? MaxPayload(size) : 64;
      const size_t len = static_cast<size_t>(rng() % (max + 1));
      absl::Status s = link.w.Append(static_cast<uint16_t>(sent % 7), PayloadFor(sent, len));
      if (absl::IsResourceExhausted(s)) break;
      REQUIRE(s.ok());
      ++sent;
      progress = true;
    }
    if (rng() % 3 != 0) link.Flush();
    // Consume a random number of messages.
    for (int n = std::uniform_int_distribution<int>(0, 8)(rng); n > 0; --n) {
      RingMessage m;
      const RingReader::State st = link.r.Peek(&m);
      if (st == RingReader::kIdle) break;
      REQUIRE(st == RingReader::kMessage);
      REQUIRE(m.type == received % 7);
      REQUIRE(m.payload == PayloadFor(received, m.payload.size()));
      link.r.Consume();
      ++received;
      progress = true;
    }
    if (link.r.ShouldReportHead()) link.Report();
    // Lazy head reports alone must never deadlock: without progress, flush everything; if that
    // does not help either, the protocol is stuck.
    if (!progress) {
      link.Flush();
      REQUIRE(++stalls < 1000);
    } else {
      stalls = 0;
    }
  }
  CHECK(received == total);
  INFO("wraps: " << link.w.tail() / size);
  CHECK(link.w.tail() / size >= 100);
  RingMessage m;
  CHECK(link.r.Peek(&m) == RingReader::kIdle);
}

TEST_CASE("a full ring refuses appends without touching unconsumed bytes", "[ring]") {
  Link link(4096, Strict());
  int appended = 0;
  absl::Status s;
  while ((s = link.w.Append(1, PayloadFor(appended, 100))).ok()) ++appended;
  CHECK(absl::IsResourceExhausted(s));
  CHECK(appended > 20);
  const int large = appended;
  while ((s = link.w.Append(1, "")).ok()) ++appended;  // top up with the smallest frames
  CHECK(absl::IsResourceExhausted(s));
  link.Flush();
  const std::string before(link.ring.data(), 4096);
  CHECK(absl::IsResourceExhausted(link.w.Append(1, "")));
  CHECK(!link.w.has_unflushed());
  CHECK(std::string(link.ring.data(), 4096) == before);
  // Consuming alone frees nothing until the head is reported, and then it is due.
  for (int i = 0; i < appended; ++i) {
    RingMessage m;
    REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
    REQUIRE(m.payload == (i < large ? PayloadFor(i, 100) : ""));
    link.r.Consume();
  }
  CHECK(absl::IsResourceExhausted(link.w.Append(1, "x")));
  CHECK(link.r.ShouldReportHead());
  link.Report();
  CHECK(link.w.Append(1, "x").ok());
  // The consumed space is zero again.
  CHECK(std::count(link.ring.data(), link.ring.data() + 4096, 0) == 4096);
}

TEST_CASE("a message larger than the ring's limit is refused with a clear error", "[ring]") {
  Link link(4096);
  CHECK(link.w.Append(1, std::string(MaxPayload(4096), 'a')).ok());
  absl::Status s = link.w.Append(1, std::string(MaxPayload(4096) + 1, 'a'));
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("not fragmented"));
}

TEST_CASE("a frame whose bytes arrive in any order is accepted only when complete", "[ring]") {
  const bool bytewise = GENERATE(true, false);
  std::mt19937_64 rng(bytewise ? 1 : 2);
  Link link(4096, Patient());
  for (int k = 0; k < 300; ++k) {
    const size_t len = static_cast<size_t>(rng() % (MaxPayload(4096) + 1));
    const std::string payload = PayloadFor(k, len);
    // Positions sweep the ring, so some frames wrap and some absorb the last 16 bytes.
    RingWriter::Ranges ranges = link.Stage(9, payload);
    // Bytes (or 8-byte words) in shuffled order: (offset in the ring, offset in the staging).
    std::vector<std::pair<uint64_t, uint64_t>> units;
    const uint64_t step = bytewise ? 1 : 8;
    for (const ByteRange& b : ranges) {
      for (uint64_t o = 0; o < b.size; o += step) units.emplace_back(b.offset + o, b.source + o);
    }
    std::shuffle(units.begin(), units.end(), rng);
    bool delivered = false;
    for (size_t i = 0; i < units.size(); ++i) {
      std::memcpy(link.ring.data() + units[i].first, link.staging.data() + units[i].second, step);
      // The message's own frame is the last range (a wrap frame before it is zeroed once read).
      const ByteRange& f = ranges.back();
      const bool complete =
          std::memcmp(link.ring.data() + f.offset, link.staging.data() + f.source, f.size) == 0;
      RingMessage m;
      const RingReader::State st = link.r.Peek(&m);
      REQUIRE(st != RingReader::kClosed);
      if (st == RingReader::kMessage) {
        REQUIRE(complete);  // every byte of the frame in place (the rest were zero anyway)
        REQUIRE(m.payload == payload);
        link.r.Consume();
        delivered = true;
        break;
      }
    }
    REQUIRE(delivered);
    link.Report();
  }
}

TEST_CASE("corrupt frames close the ring with a clear reason", "[ring]") {
  Link link(4096, Strict());
  std::string why;
  RingReader::State st = RingReader::kIdle;
  SECTION("length beyond the ring") {
    st = link.Corrupted("hello",
                        [](char* f) { reinterpret_cast<FrameHeader*>(f)->length = 1 << 30; });
    why = "beyond";
  }
  SECTION("trailer sequence number") {
    st = link.Corrupted("hello", [](char* f) {
      reinterpret_cast<FrameTrailer*>(f + FrameSize(4096, 0, 5) - 16)->seq = 2;
    });
    why = "trailer";
  }
  SECTION("checksum") {
    st = link.Corrupted("hello", [](char* f) { f[sizeof(FrameHeader) + 1] ^= 1; });
    why = "checksum";
  }
  SECTION("unknown flags") {
    st = link.Corrupted("hello", [](char* f) { reinterpret_cast<FrameHeader*>(f)->flags = 0x40; });
    why = "flags";
  }
  SECTION("a frame running past the ring's end") {
    // Move the head close to the end with valid traffic, then claim a length that cannot fit.
    while (link.r.head() % 4096 < 4096 - 128) {
      REQUIRE(link.w.Append(1, std::string(48, 'x')).ok());
      link.Flush();
      RingMessage m;
      REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
      link.r.Consume();
      link.Report();
    }
    st = link.Corrupted("", [](char* f) { reinterpret_cast<FrameHeader*>(f)->length = 512; });
    why = "past the ring's end";
  }
  CHECK(st == RingReader::kClosed);
  CHECK(absl::IsDataLoss(link.r.status()));
  CHECK_THAT(std::string(link.r.status().message()), Catch::Contains(why));
  RingMessage m;
  CHECK(link.r.Peek(&m) == RingReader::kClosed);
}

TEST_CASE("a header without the sequence number due is free space, not corruption", "[ring]") {
  Link link(4096, Strict());
  REQUIRE(link.w.Append(1, "first").ok());
  link.Flush();
  RingMessage m;
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  link.r.Consume();
  // Frame 1's bytes again where frame 2 is due (an earlier frame, a later one, or garbage): the
  // frame due has not arrived, whatever the bytes say; nothing closes even with no patience.
  const RingWriter::Ranges ranges = link.Stage(2, "second");
  REQUIRE(ranges.size() == 1);
  const uint64_t at = ranges[0].offset;
  for (uint32_t seq : {1u, 3u, 0x7777u}) {
    FrameHeader h{5, 1, 0x40, seq, 9};
    std::memcpy(link.ring.data() + at, &h, sizeof(h));
    CHECK(link.r.Peek(&m) == RingReader::kIdle);
    CHECK(link.r.status().ok());
  }
  // The frame due is written over them and delivered.
  std::memcpy(link.ring.data() + at, link.staging.data() + ranges[0].source, ranges[0].size);
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  CHECK(m.type == 2);
  CHECK(m.payload == "second");
}

TEST_CASE("bytes a copy puts back after they were consumed do not close the ring a lap later",
          "[ring]") {
  // What glibc's memcpy does to a 96-byte WRITE of two 48-byte frames (ring.cc, "Bytes that are
  // not the frame due"): it stores bytes 0-63, then bytes 32-95. The reader takes and zeroes the
  // first frame between the two stores, and the second store puts its trailer back at 32-47.
  Link link(4096, Patient());
  REQUIRE(link.w.Append(1, std::string(16, 'a')).ok());  // 48 bytes at 0
  REQUIRE(link.w.Append(1, std::string(16, 'b')).ok());  // 48 bytes at 48
  const RingWriter::Ranges two = link.w.Unflushed();
  link.w.MarkFlushed();
  REQUIRE(two.size() == 1);
  REQUIRE(two[0].size == 96);
  std::memcpy(link.ring.data(), link.staging.data() + two[0].source, 64);
  RingMessage m;
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  CHECK(m.payload == std::string(16, 'a'));
  link.r.Consume();
  CHECK(link.r.Peek(&m) == RingReader::kIncomplete);  // the second frame lacks its last bytes
  std::memcpy(link.ring.data() + 32, link.staging.data() + two[0].source + 32, 64);
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  CHECK(m.payload == std::string(16, 'b'));
  link.r.Consume();
  FrameTrailer back;
  std::memcpy(&back, link.ring.data() + 32, sizeof(back));
  REQUIRE(back.seq == 1);  // frame 1's trailer, behind the head
  // Round the ring with 1 KiB messages to offset 0 again, then a 32-byte frame (empty payload),
  // so that the next frame is due exactly at offset 32, over frame 1's old trailer.
  uint64_t k = 0;
  while (link.r.head() < 4096) {
    const std::string payload = PayloadFor(++k, std::min<uint64_t>(960, 4096 - link.r.head() - 32));
    REQUIRE(link.w.Append(1, payload).ok());
    link.Flush();
    REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
    CHECK(m.payload == payload);
    link.r.Consume();
    link.Report();
  }
  REQUIRE(link.r.head() % 4096 == 0);
  REQUIRE(link.w.Append(1, "").ok());
  link.Flush();
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  link.r.Consume();
  REQUIRE(link.r.head() % 4096 == 32);
  // Frame 1's trailer sits where the next frame is due, and it has not been written yet.
  CHECK(link.r.Peek(&m) == RingReader::kIdle);
  CHECK(link.r.status().ok());
  REQUIRE(link.w.Append(4, "after the lap").ok());
  link.Flush();
  REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
  CHECK(m.type == 4);
  CHECK(m.payload == "after the lap");
}

TEST_CASE("garbage anywhere in the ring never crashes or reads outside it", "[ring]") {
  for (int seed = 0; seed < 2000; ++seed) {
    std::mt19937_64 rng(seed);
    Link link(4096, seed % 2 ? Strict() : Patient());
    // Some valid traffic first, so the head sits anywhere.
    for (int i = rng() % 40; i > 0; --i) {
      REQUIRE(link.w.Append(1, PayloadFor(i, rng() % 200)).ok());
      link.Flush();
      RingMessage m;
      REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
      link.r.Consume();
      if (link.r.ShouldReportHead()) link.Report();
    }
    // Then random words at and after the head; sometimes keep a plausible sequence number.
    const uint64_t pos = link.r.head() % 4096;
    for (int i = rng() % 8 + 1; i > 0; --i) {
      const uint64_t at = (pos + (rng() % 64) * 8) % 4096;
      uint64_t word = rng();
      if (rng() % 2) word &= 0xffffffffull;
      std::memcpy(link.ring.data() + at, &word, 8);
    }
    if (rng() % 2) {
      FrameHeader* h = reinterpret_cast<FrameHeader*>(link.ring.data() + pos);
      h->seq = link.r.expected_seq();
      h->flags &= kWrapFlag;
      h->reserved = 0;
    }
    for (int polls = 0; polls < 4; ++polls) {
      RingMessage m;
      const RingReader::State st = link.r.Peek(&m);
      if (st == RingReader::kMessage) {
        REQUIRE(m.payload.data() >= link.ring.data());
        REQUIRE(m.payload.data() + m.payload.size() <= link.ring.data() + 4096);
        link.r.Consume();
      }
      if (st == RingReader::kClosed) REQUIRE(absl::IsDataLoss(link.r.status()));
    }
  }
}

TEST_CASE("a frame stuck half-placed closes the ring after the timeout, not before", "[ring]") {
  absl::Time now = absl::UnixEpoch();
  RingReaderOptions o;
  o.incomplete_timeout = absl::Seconds(2);
  o.now = [&now] { return now; };
  Link link(4096, o);
  RingWriter::Ranges ranges = link.Stage(1, std::string(100, 'z'));
  REQUIRE(ranges.size() == 1);
  // Everything but the trailer.
  std::memcpy(link.ring.data(), link.staging.data(), ranges[0].size - 16);
  RingMessage m;
  CHECK(link.r.Peek(&m) == RingReader::kIncomplete);
  now += absl::Seconds(1);
  CHECK(link.r.Peek(&m) == RingReader::kIncomplete);
  // Another byte lands: the watch restarts.
  std::memcpy(link.ring.data() + ranges[0].size - 8, link.staging.data() + ranges[0].size - 8, 4);
  now += absl::Seconds(1.5);
  CHECK(link.r.Peek(&m) == RingReader::kIncomplete);
  now += absl::Seconds(1.5);
  CHECK(link.r.Peek(&m) == RingReader::kIncomplete);
  now += absl::Seconds(1);
  CHECK(link.r.Peek(&m) == RingReader::kClosed);
  CHECK_THAT(std::string(link.r.status().message()), Catch::Contains("unchanged for"));
}

TEST_CASE("head slots reject torn values, other tags and impossible heads", "[ring]") {
  constexpr uint64_t kTag = (uint64_t{7} << 32) | 9;
  char slot[16] = {};
  uint64_t head = 42;
  CHECK(!DecodeHeadSlot(slot, kTag, &head));  // never written: the zero slot is not a head
  CHECK(!DecodeHeadSlot(slot, 0, &head));
  CHECK(head == 42);
  EncodeHeadSlot(8192, kTag, slot);
  REQUIRE(DecodeHeadSlot(slot, kTag, &head));
  CHECK(head == 8192);
  // Written for another incarnation of either end: rejected.
  uint64_t other = 42;
  CHECK(!DecodeHeadSlot(slot, kTag + 1, &other));
  CHECK(!DecodeHeadSlot(slot, kTag ^ (uint64_t{1} << 32), &other));
  CHECK(other == 42);
  // Bytes of an old and a new value mixed: rejected.
  char newer[16];
  EncodeHeadSlot(8192 + 4096 * 255, kTag, newer);
  std::memcpy(slot + 1, newer + 1, 3);
  CHECK(!DecodeHeadSlot(slot, kTag, &head));
  CHECK(head == 8192);

  Link link(4096);
  link.Stage(1, "abc");
  CHECK(absl::IsDataLoss(link.w.UpdateHead(link.w.tail() + 16)));
  CHECK(link.w.UpdateHead(link.w.tail()).ok());
}

TEST_CASE("a head report that lands late is ignored, not taken as corruption", "[ring]") {
  Link link(4096);
  link.Stage(1, std::string(100, 'a'));
  const uint64_t first = link.w.tail();
  link.Stage(1, std::string(100, 'b'));
  const uint64_t second = link.w.tail();
  REQUIRE(link.w.UpdateHead(second).ok());
  // The write-back of `first` arrives after the one of `second`: stale, harmless.
  CHECK(link.w.UpdateHead(first).ok());
  CHECK(link.w.head() == second);
  CHECK(link.w.UpdateHead(0).ok());
  CHECK(link.w.head() == second);
  // The ring goes on working from the newer head.
  CHECK(link.w.free_bytes() == link.size);
  REQUIRE(link.w.Append(2, "more").ok());
  // Only a head beyond what was written is impossible.
  CHECK(absl::IsDataLoss(link.w.UpdateHead(link.w.tail() + 16)));
}

TEST_CASE("frames written for another incarnation pair or lane are never delivered", "[ring]") {
  // Sender incarnation 5 wrote into receiver incarnation 8's ring on lane 1; then receiver
  // incarnation 9 (same memory: a fresh ring, seq 1 at offset 0) reads it, or the same pair on
  // another lane, or a new sender incarnation.
  Memory staging(4096), ring(4096);
  RingWriter old_writer(staging.data(), 4096, RingTag(5, 8, 1));
  REQUIRE(old_writer.Append(3, "late WRITE of an old incarnation").ok());
  for (const ByteRange& b : old_writer.Unflushed()) {
    std::memcpy(ring.data() + b.offset, staging.data() + b.source, b.size);
  }
  for (uint64_t tag : {RingTag(5, 9, 1), RingTag(6, 8, 1), RingTag(5, 8, 2), RingTag(8, 5, 1)}) {
    RingReaderOptions o = Strict();
    o.tag = tag;
    RingReader r(ring.data(), 4096, o);
    RingMessage m;
    CHECK(r.Peek(&m) == RingReader::kClosed);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("checksum mismatch"));
  }
  // The reader of the pair the frame was written for takes it.
  RingReaderOptions o = Strict();
  o.tag = RingTag(5, 8, 1);
  RingReader r(ring.data(), 4096, o);
  RingMessage m;
  REQUIRE(r.Peek(&m) == RingReader::kMessage);
  CHECK(m.payload == "late WRITE of an old incarnation");
}

#ifndef NDEBUG
TEST_CASE("a header completed between the reader's checks and its hash is not taken as checked",
          "[ring][sync_point]") {
  // The interleaving: the reader loads a wrap frame's header while its flags are still zero (it
  // looks like an empty message, 32 bytes long, and its trailer is in place), then the flags land
  // before the reader hashes the frame, so the checksum matches. The sync point sits between the
  // header load and the hash; its callback places the flags there.
  Link link(4096, Patient());
  for (int i = 0; i < 4; ++i) REQUIRE(link.w.Append(1, std::string(960, 'x')).ok());
  link.Flush();  // 4 frames of 992 bytes: 128 bytes left before the ring's end
  RingMessage m;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(link.r.Peek(&m) == RingReader::kMessage);
    link.r.Consume();
  }
  link.Report();
  const std::string payload = PayloadFor(77, 200);
  const RingWriter::Ranges ranges = link.Stage(9, payload);
  REQUIRE(ranges.size() == 2);
  const ByteRange wrap = ranges[0];  // the wrap frame at 3968, then the frame at 0
  REQUIRE(wrap.offset == 3968);
  REQUIRE(wrap.size == kFrameOverhead);
  REQUIRE(ranges[1].offset == 0);
  std::memcpy(link.ring.data() + ranges[1].offset, link.staging.data() + ranges[1].source,
              ranges[1].size);
  constexpr size_t kFlags = offsetof(FrameHeader, flags);
  char* wrap_at = link.ring.data() + wrap.offset;
  const char* wrap_src = link.staging.data() + wrap.source;
  std::memcpy(wrap_at, wrap_src, wrap.size);
  std::memset(wrap_at + kFlags, 0, sizeof(uint16_t));  // not placed yet

  SyncPoint* sp = SyncPoint::GetInstance();
  bool placed = false;
  sp->SetCallBack("RingReader::Peek:BeforeHash", [&](void* arg) {
    if (arg != wrap_at || placed) return;
    placed = true;
    std::memcpy(wrap_at + kFlags, wrap_src + kFlags, sizeof(uint16_t));
  });
  sp->EnableProcessing();
  RingReader::State st = RingReader::kIncomplete;
  for (int i = 0; i < 10 && st == RingReader::kIncomplete; ++i) st = link.r.Peek(&m);
  sp->Reset();
  CHECK(placed);
  // Only the real message is delivered: not an empty type-0 one, and the head went past the
  // wrap to offset 0.
  REQUIRE(st == RingReader::kMessage);
  CHECK(m.type == 9);
  CHECK(m.payload == payload);
  CHECK(link.r.head() % link.size == 0);
}
#endif

}  // namespace farm
