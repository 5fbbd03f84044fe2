// Fuzz target for the ring parser (RingReader) and the head-slot decoder.
//
// The input is split into: one control byte (how many valid messages to send first, and whether
// half-placed frames count as corrupt at once), then bytes written over the ring at and after the
// reader's head, wrapping around. The reader must never read outside the ring, never crash, hand
// out only messages that lie inside the ring, and after a DataLoss stay closed.
//
// Built two ways:
//  - with clang's libFuzzer: messaging/fuzz/build_fuzzer.sh (see there), then
//      ./ring_fuzzer -max_total_time=60 corpus/
//  - with gcc as //messaging/fuzz:ring_fuzz_test, whose driver (ring_fuzz_driver.cc) runs the
//    target over a deterministic set of random and mutated inputs under `bazel test`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "messaging/ring.h"

namespace {

constexpr uint64_t kRing = 4096;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // Exactly the ring's bytes, so that AddressSanitizer catches any read beyond them.
  std::vector<uint64_t> ring_words(kRing / 8, 0), staging_words(kRing / 8, 0);
  char* ring = reinterpret_cast<char*>(ring_words.data());
  char* staging = reinterpret_cast<char*>(staging_words.data());
  farm::RingWriter w(staging, kRing);
  farm::RingReaderOptions o;
  o.incomplete_timeout = (data[0] & 0x80) ? absl::ZeroDuration() : absl::InfiniteDuration();
  farm::RingReader r(ring, kRing, o);
  // Valid traffic first, so the head and the expected sequence number are anywhere.
  for (int i = 0; i < (data[0] & 0x7f); ++i) {
    if (!w.Append(1, std::string(static_cast<size_t>(i * 13 % 300), 'v')).ok()) break;
    for (const farm::ByteRange& b : w.Unflushed()) {
      std::memcpy(ring + b.offset, staging + b.source, b.size);
    }
    w.MarkFlushed();
    farm::RingMessage m;
    Check(r.Peek(&m) == farm::RingReader::kMessage);
    r.Consume();
    Check(w.UpdateHead(r.head()).ok());
    r.MarkReported();
  }
  // The fuzzer's bytes over the ring from the head on.
  const uint64_t head = r.head() % kRing;
  for (size_t i = 1; i < size && i <= kRing; ++i)
    ring[(head + i - 1) % kRing] = static_cast<char>(data[i]);
  bool closed = false;
  for (int polls = 0; polls < 64; ++polls) {
    farm::RingMessage m;
    const farm::RingReader::State st = r.Peek(&m);
    if (st == farm::RingReader::kMessage) {
      Check(!closed);
      Check(m.payload.data() >= ring && m.payload.data() + m.payload.size() <= ring + kRing);
      r.Consume();
    } else if (st == farm::RingReader::kClosed) {
      Check(absl::IsDataLoss(r.status()));
      closed = true;
    } else {
      break;
    }
  }
  // The head slot decoder on the same bytes.
  if (size >= 17) {
    uint64_t h = 0;
    farm::DecodeHeadSlot(reinterpret_cast<const char*>(data + 1), data[0], &h);
  }
  return 0;
}
