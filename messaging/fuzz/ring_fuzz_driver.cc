// A main for the ring fuzz target when it is built without libFuzzer (gcc, `bazel test`): runs it
// over a deterministic set of inputs — random bytes, and valid frames with a few bytes flipped —
// so that the target is exercised on every test run. Bounded: a few seconds.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "messaging/ring.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main() {
  std::mt19937_64 rng(20241122);
  int runs = 0;
  for (int i = 0; i < 20000; ++i, ++runs) {
    std::vector<uint8_t> in(1 + rng() % 600);
    for (uint8_t& b : in) b = static_cast<uint8_t>(rng());
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  // Valid frames (built by a writer) with a few bytes flipped: these get past the cheap checks.
  for (int i = 0; i < 20000; ++i, ++runs) {
    std::vector<uint64_t> words(4096 / 8, 0);
    char* staging = reinterpret_cast<char*>(words.data());
    farm::RingWriter w(staging, 4096);
    std::string payload(rng() % 200, 'p');
    if (!w.Append(static_cast<uint16_t>(rng()), payload).ok()) return 1;
    const farm::ByteRange b = w.Unflushed()[0];
    std::vector<uint8_t> in(1 + b.size);
    in[0] = static_cast<uint8_t>(0x80 | 0);  // strict, head at 0
    std::memcpy(in.data() + 1, staging + b.source, b.size);
    for (int flips = 1 + rng() % 3; flips > 0; --flips) in[1 + rng() % b.size] ^= 1 << (rng() % 8);
    LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  std::printf("ring fuzz target: %d inputs, no failure\n", runs);
  return 0;
}
