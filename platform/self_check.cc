#include "platform/self_check.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "platform/json.h"

namespace farm {
namespace {

using Clock = std::chrono::steady_clock;

// The byte checker `from` writes at `offset` of region `index` of node `to`.
char CheckerPattern(uint32_t from, uint32_t to, uint32_t index, uint64_t offset) {
  return static_cast<char>(~SelfCheckPattern(to ^ (from << 8), index + 977, offset));
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Verifies `got` against a generator; returns an error naming the first bad byte.
template <typename Gen>
std::string Compare(const char* got, uint64_t base_offset, size_t len, Gen expected,
                    const std::string& what) {
  for (size_t i = 0; i < len; ++i) {
    char want = expected(base_offset + i);
    if (got[i] != want) {
      return absl::StrFormat("%s: byte at offset %d is 0x%02x, expected 0x%02x", what,
                             base_offset + i, static_cast<unsigned char>(got[i]),
                             static_cast<unsigned char>(want));
    }
  }
  return "";
}

class PairChecker {
 public:
  PairChecker(Node& node, uint32_t to, int samples) : node_(node), samples_(samples) {
    r_.from = node.id();
    r_.to = to;
    r_.read_ok = r_.write_ok = r_.bounds_ok = true;
  }

  PairCheck Run() {
    for (const control::RegionInfo& region : node_.RegionsOf(r_.to)) {
      CheckRegion(region);
      if (!r_.error.empty()) break;
    }
    return r_;
  }

 private:
  void Fail(bool* flag, const std::string& error) {
    *flag = false;
    if (r_.error.empty()) r_.error = error;
  }

  // READ [offset, offset + kCheckBytes) and compare with gen; returns false on failure.
  template <typename Gen>
  bool ReadAndCompare(const control::RegionInfo& region, uint64_t offset, Gen gen, bool* flag,
                      const std::string& what) {
    char buf[kCheckBytes];
    std::memset(buf, 0, sizeof(buf));
    absl::Status s = node_.Read(GlobalAddress{region.region_id(), offset}, buf, kCheckBytes);
    if (!s.ok()) {
      Fail(flag, std::string(s.message()));
      return false;
    }
    std::string err = Compare(buf, offset, kCheckBytes, gen,
                              absl::StrCat(what, " of region ", region.region_id()));
    if (!err.empty()) {
      Fail(flag, err);
      return false;
    }
    r_.bytes_verified += kCheckBytes;
    return true;
  }

  template <typename Gen>
  bool WriteFrom(const control::RegionInfo& region, uint64_t offset, Gen gen) {
    char buf[kCheckBytes];
    for (size_t i = 0; i < kCheckBytes; ++i) buf[i] = gen(offset + i);
    absl::Status s = node_.Write(GlobalAddress{region.region_id(), offset}, buf, kCheckBytes);
    if (!s.ok()) Fail(&r_.write_ok, std::string(s.message()));
    return s.ok();
  }

  void CheckRegion(const control::RegionInfo& region) {
    const uint32_t idx = region.index();
    const uint64_t size = region.size();
    const uint64_t ends[2] = {0, size - kCheckBytes};
    auto original = [&](uint64_t off) { return SelfCheckPattern(r_.to, idx, off); };
    auto mine = [&](uint64_t off) { return CheckerPattern(r_.from, r_.to, idx, off); };

    for (uint64_t off : ends) {
      if (!ReadAndCompare(region, off, original, &r_.read_ok, "READ")) return;
    }
    for (uint64_t off : ends) {
      if (!WriteFrom(region, off, mine)) return;
      if (!ReadAndCompare(region, off, mine, &r_.write_ok, "WRITE then READ")) return;
    }
    for (uint64_t off : ends) {
      if (!WriteFrom(region, off, original)) return;
      if (!ReadAndCompare(region, off, original, &r_.write_ok, "restoring WRITE")) return;
    }
    CheckBounds(region);
    if (idx == 0) MeasureLatency(region);
  }

  void CheckBounds(const control::RegionInfo& region) {
    char buf[kCheckBytes] = {};
    const GlobalAddress crossing{region.region_id(), region.size() - kCheckBytes / 2};
    const GlobalAddress nowhere{GlobalAddress::kMaxRegion, 0};
    for (const GlobalAddress& a : {crossing, nowhere}) {
      absl::Status rs = node_.Read(a, buf, kCheckBytes);
      absl::Status ws = node_.Write(a, buf, kCheckBytes);
      if (!absl::IsOutOfRange(rs) || !absl::IsOutOfRange(ws)) {
        Fail(&r_.bounds_ok, absl::StrCat("access at ", a.ToString(),
                                         " was not refused as out of range: ", rs.ToString(), " / ",
                                         ws.ToString()));
      }
    }
  }

  void MeasureLatency(const control::RegionInfo& region) {
    char buf[kCheckBytes];
    const GlobalAddress at{region.region_id(), 0};
    std::vector<double> reads, writes;
    for (int i = 0; i < samples_; ++i) {
      auto t0 = Clock::now();
      if (!node_.Read(at, buf, kCheckBytes).ok()) return;
      auto t1 = Clock::now();
      // Writes back what was just read: the region stays as it was.
      if (!node_.Write(at, buf, kCheckBytes).ok()) return;
      auto t2 = Clock::now();
      reads.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      writes.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
    r_.read_p50_us = Median(reads);
    r_.write_p50_us = Median(writes);
  }

  Node& node_;
  const int samples_;
  PairCheck r_;
};

}  // namespace

std::string PairCheck::ToJson() const {
  return absl::StrFormat(
      "{\"from\":%d,\"to\":%d,\"ok\":%s,\"read_ok\":%s,\"write_ok\":%s,\"bounds_ok\":%s,"
      "\"bytes_verified\":%d,\"read_p50_us\":%.2f,\"write_p50_us\":%.2f,\"error\":%s}",
      from, to, ok() ? "true" : "false", read_ok ? "true" : "false", write_ok ? "true" : "false",
      bounds_ok ? "true" : "false", bytes_verified, read_p50_us, write_p50_us, JsonString(error));
}

std::vector<PairCheck> RunSelfCheck(Node& node, int latency_samples) {
  std::vector<PairCheck> out;
  for (uint32_t peer : node.members()) {
    if (peer == node.id()) continue;
    out.push_back(PairChecker(node, peer, latency_samples).Run());
  }
  return out;
}

}  // namespace farm
