#include "tools/tatp_farm.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/bench_util.h"

namespace farm {
namespace txnbench {

// One bucket of the sub_nbr index: `used` entries, filled in order.
struct TatpFarm::IndexBucket {
  static constexpr int kEntries = 4;
  uint32_t used = 0;
  uint32_t s_id[kEntries] = {};
  char sub_nbr[kEntries][kSubNbrDigits + 1] = {};
};

namespace {

constexpr uint32_t kSubscribersPerLoad = 6;  // 126 objects per loading transaction
constexpr uint64_t kBucketsPerLoad = 128;
// Bucket keys for the placement, apart from the subscribers' (s_id < 2^32).
constexpr uint64_t kBucketKeyBase = uint64_t{1} << 40;

// The first bucket of `sub_nbr` (15 digits): FNV-1a over its bytes.
uint64_t HashSubNbr(const char* sub_nbr) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < kSubNbrDigits; ++i) {
    h ^= static_cast<uint8_t>(sub_nbr[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

// A sub_nbr's digits, for messages (at most kSubNbrDigits, NUL-terminated or not).
absl::string_view Digits(const char* sub_nbr) {
  return absl::string_view(sub_nbr, strnlen(sub_nbr, kSubNbrDigits));
}

uint64_t SlotBytes(uint64_t size) {
  uint64_t slot = 64;
  while (slot < size + 24) slot *= 2;
  return slot;
}

// Reads a T-sized object into *v inside `t`.
template <typename T>
absl::Status ReadRow(Txn& t, GlobalAddress a, T* v) {
  return t.Read(a, v, sizeof(T));
}

// Writes `v` to the object at `a` inside `t`, noting `a` in *written.
template <typename T>
absl::Status WriteRow(Txn& t, GlobalAddress a, const T& v, std::vector<GlobalAddress>* written) {
  written->push_back(a);
  return t.Put(a, v);
}

// InvalidArgument unless the inputs `in`'s type uses are in the spec's ranges (s_id 1..subscribers,
// ai_type and sf_type 1..4, start_time 0, 8 or 16, bit_1 0 or 1): the layout indexes slots by them.
absl::Status CheckInputs(const TatpTxn& in, uint32_t subscribers) {
  const TatpTxnType type = in.type;
  const bool by_s_id =
      type == TatpTxnType::kGetSubscriberData || type == TatpTxnType::kGetNewDestination ||
      type == TatpTxnType::kGetAccessData || type == TatpTxnType::kUpdateSubscriberData;
  const bool sf =
      type == TatpTxnType::kGetNewDestination || type == TatpTxnType::kUpdateSubscriberData ||
      type == TatpTxnType::kInsertCallForwarding || type == TatpTxnType::kDeleteCallForwarding;
  const bool start = type == TatpTxnType::kGetNewDestination ||
                     type == TatpTxnType::kInsertCallForwarding ||
                     type == TatpTxnType::kDeleteCallForwarding;
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(TatpTxnName(type), ": ", what));
  };
  if (static_cast<int>(type) < 0 || static_cast<int>(type) >= kTatpTxnTypes) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown TATP transaction type ", static_cast<int>(type)));
  }
  if (by_s_id && (in.s_id < 1 || in.s_id > subscribers)) {
    return bad(absl::StrCat("s_id ", in.s_id, " is not in 1..", subscribers));
  }
  if (type == TatpTxnType::kGetAccessData && (in.ai_type < 1 || in.ai_type > kTatpTypes)) {
    return bad(absl::StrCat("ai_type ", in.ai_type, " is not in 1..", kTatpTypes));
  }
  if (sf && (in.sf_type < 1 || in.sf_type > kTatpTypes)) {
    return bad(absl::StrCat("sf_type ", in.sf_type, " is not in 1..", kTatpTypes));
  }
  if (start && (in.start_time % 8 != 0 || in.start_time / 8 >= kTatpStartTimes)) {
    return bad(absl::StrCat("start_time ", in.start_time, " is not 0, 8 or 16"));
  }
  if (type == TatpTxnType::kUpdateSubscriberData && in.bit_1 > 1) {
    return bad(absl::StrCat("bit_1 ", in.bit_1, " is not 0 or 1"));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t TatpFarm::Buckets(uint32_t subscribers) {
  uint64_t b = 1;
  while (b * IndexBucket::kEntries < 2 * uint64_t{subscribers}) b *= 2;
  return b;
}

uint64_t TatpFarm::Objects(uint32_t subscribers) {
  return uint64_t{kObjectsPerSubscriber} * subscribers + Buckets(subscribers);
}

uint64_t TatpFarm::Bytes(uint32_t subscribers) {
  const uint64_t per = SlotBytes(sizeof(SubscriberRow)) +
                       kTatpTypes * SlotBytes(sizeof(AccessInfoRow)) +
                       kTatpTypes * SlotBytes(sizeof(SpecialFacilityRow)) +
                       kTatpTypes * kTatpStartTimes * SlotBytes(sizeof(CallForwardingRow));
  return per * subscribers + Buckets(subscribers) * SlotBytes(sizeof(IndexBucket));
}

absl::StatusOr<TatpFarm> TatpFarm::Make(uint32_t subscribers,
                                        std::vector<GlobalAddress> addresses) {
  if (addresses.size() != Objects(subscribers)) {
    return absl::InvalidArgumentError(absl::StrCat("TATP with ", subscribers, " subscribers has ",
                                                   Objects(subscribers), " objects, not ",
                                                   addresses.size()));
  }
  return TatpFarm(subscribers, std::move(addresses));
}

GlobalAddress TatpFarm::Subscriber(uint32_t s_id) const {
  return addresses_[uint64_t{kObjectsPerSubscriber} * (s_id - 1)];
}
GlobalAddress TatpFarm::AccessInfo(uint32_t s_id, int ai_type) const {
  return addresses_[uint64_t{kObjectsPerSubscriber} * (s_id - 1) + ai_type];
}
GlobalAddress TatpFarm::SpecialFacility(uint32_t s_id, int sf_type) const {
  return addresses_[uint64_t{kObjectsPerSubscriber} * (s_id - 1) + kTatpTypes + sf_type];
}
GlobalAddress TatpFarm::CallForwarding(uint32_t s_id, int sf_type, int start_index) const {
  return addresses_[uint64_t{kObjectsPerSubscriber} * (s_id - 1) + 2 * kTatpTypes + 1 +
                    (sf_type - 1) * kTatpStartTimes + start_index];
}
GlobalAddress TatpFarm::Bucket(uint64_t b) const {
  return addresses_[uint64_t{kObjectsPerSubscriber} * subscribers_ + b];
}

absl::StatusOr<std::vector<uint64_t>> TatpFarm::Load(Worker& w, uint32_t subscribers, uint64_t seed,
                                                     const Placement& place) {
  std::vector<uint64_t> packed;
  packed.reserve(Objects(subscribers));
  for (uint32_t first = 1; first <= subscribers; first += kSubscribersPerLoad) {
    const uint32_t last = std::min(subscribers, first + kSubscribersPerLoad - 1);
    std::vector<uint64_t> batch;
    absl::Status s = w.Run([&](Txn& t) -> absl::Status {
      batch.clear();
      // Allocates one row of the subscriber (near its SUBSCRIBER row, `home`), writing `row`
      // when it is present.
      auto add = [&](const AllocHint& hint, const void* row, uint64_t size,
                     bool present) -> absl::StatusOr<GlobalAddress> {
        absl::StatusOr<GlobalAddress> a = t.Alloc(size, hint);
        if (!a.ok()) return a.status();
        if (present) {
          if (absl::Status p = t.Write(*a, row, size); !p.ok()) return p;
        }
        batch.push_back(a->Pack());
        return a;
      };
      for (uint32_t s_id = first; s_id <= last; ++s_id) {
        const SubscriberData d = Populate(seed, s_id);
        absl::StatusOr<GlobalAddress> home =
            add(place(s_id), &d.subscriber, sizeof(d.subscriber), true);
        if (!home.ok()) return home.status();
        const AllocHint near = AllocHint::Near(*home);
        for (const AccessInfoRow& r : d.access_info) {
          if (auto a = add(near, &r, sizeof(r), r.present); !a.ok()) return a.status();
        }
        for (const SpecialFacilityRow& r : d.special_facility) {
          if (auto a = add(near, &r, sizeof(r), r.present); !a.ok()) return a.status();
        }
        for (const auto& per_sf : d.call_forwarding) {
          for (const CallForwardingRow& r : per_sf) {
            if (auto a = add(near, &r, sizeof(r), r.present); !a.ok()) return a.status();
          }
        }
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("loading TATP: ", s.message()));
    packed.insert(packed.end(), batch.begin(), batch.end());
  }
  // The index, built here and written bucket by bucket.
  const uint64_t buckets = Buckets(subscribers);
  std::vector<IndexBucket> index(buckets);
  for (uint32_t s_id = 1; s_id <= subscribers; ++s_id) {
    const std::string nbr = SubNbr(s_id);
    uint64_t b = HashSubNbr(nbr.c_str()) & (buckets - 1);
    while (index[b].used == IndexBucket::kEntries) b = (b + 1) & (buckets - 1);
    IndexBucket& k = index[b];
    k.s_id[k.used] = s_id;
    std::memcpy(k.sub_nbr[k.used], nbr.c_str(), kSubNbrDigits + 1);
    ++k.used;
  }
  for (uint64_t first = 0; first < buckets; first += kBucketsPerLoad) {
    const uint64_t end = std::min(buckets, first + kBucketsPerLoad);
    std::vector<uint64_t> batch;
    absl::Status s = w.Run([&](Txn& t) -> absl::Status {
      batch.clear();
      for (uint64_t b = first; b < end; ++b) {
        absl::StatusOr<GlobalAddress> a = t.Alloc(sizeof(IndexBucket), place(kBucketKeyBase + b));
        if (!a.ok()) return a.status();
        if (absl::Status p = t.Put(*a, index[b]); !p.ok()) return p;
        batch.push_back(a->Pack());
      }
      return absl::OkStatus();
    });
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("loading TATP's index: ", s.message()));
    packed.insert(packed.end(), batch.begin(), batch.end());
  }
  return packed;
}

absl::StatusOr<uint32_t> TatpFarm::Lookup(const char* sub_nbr, const BucketReader& read) const {
  const uint64_t buckets = Buckets(subscribers_);
  uint64_t b = HashSubNbr(sub_nbr) & (buckets - 1);
  for (uint64_t probes = 0; probes < buckets; ++probes, b = (b + 1) & (buckets - 1)) {
    IndexBucket k;
    if (absl::Status s = read(Bucket(b), &k); !s.ok()) return s;
    for (uint32_t i = 0; i < k.used && i < IndexBucket::kEntries; ++i) {
      if (std::memcmp(k.sub_nbr[i], sub_nbr, kSubNbrDigits) == 0) return k.s_id[i];
    }
    if (k.used < IndexBucket::kEntries) break;  // a bucket with room ends the probe sequence
  }
  return absl::NotFoundError(absl::StrCat("sub_nbr ", Digits(sub_nbr), " is not in the index"));
}

absl::Status TatpFarm::Run(Txn& t, const TatpTxn& in, TatpOutcome* out,
                           std::vector<GlobalAddress>* written) const {
  uint32_t s_id = in.s_id;
  if (in.type == TatpTxnType::kUpdateLocation || in.type == TatpTxnType::kInsertCallForwarding ||
      in.type == TatpTxnType::kDeleteCallForwarding) {
    absl::StatusOr<uint32_t> found =
        Lookup(in.sub_nbr, [&t](GlobalAddress a, IndexBucket* k) { return ReadRow(t, a, k); });
    // Every subscriber is in the index: missing is corruption, not TATP's "not found".
    if (absl::IsNotFound(found.status())) return absl::DataLossError(found.status().message());
    if (!found.ok()) return found.status();
    if (*found < 1 || *found > subscribers_) {
      return absl::DataLossError(absl::StrCat("the sub_nbr index maps ", Digits(in.sub_nbr),
                                              " to s_id ", *found, ", outside 1..", subscribers_));
    }
    s_id = *found;
  }
  switch (in.type) {
    case TatpTxnType::kGetSubscriberData: {
      SubscriberRow r;
      if (absl::Status s = ReadRow(t, Subscriber(s_id), &r); !s.ok()) return s;
      out->found = r.s_id == s_id;
      return absl::OkStatus();
    }
    case TatpTxnType::kGetNewDestination: {
      SpecialFacilityRow sf;
      if (absl::Status s = ReadRow(t, SpecialFacility(s_id, in.sf_type), &sf); !s.ok()) return s;
      CallForwardingRow cf[kTatpStartTimes] = {};
      // The join reads the call forwardings of an active facility that start by start_time.
      for (int i = 0; sf.present && sf.is_active && i < kTatpStartTimes && 8 * i <= in.start_time;
           ++i) {
        if (absl::Status s = ReadRow(t, CallForwarding(s_id, in.sf_type, i), &cf[i]); !s.ok())
          return s;
      }
      out->found = NewDestinationFound(in, sf, cf);
      return absl::OkStatus();
    }
    case TatpTxnType::kGetAccessData: {
      AccessInfoRow r;
      if (absl::Status s = ReadRow(t, AccessInfo(s_id, in.ai_type), &r); !s.ok()) return s;
      out->found = r.present != 0;
      return absl::OkStatus();
    }
    case TatpTxnType::kUpdateSubscriberData: {
      // Both updates or neither: without the facility row nothing changes.
      SpecialFacilityRow sf;
      if (absl::Status s = ReadRow(t, SpecialFacility(s_id, in.sf_type), &sf); !s.ok()) return s;
      if (!sf.present) return absl::OkStatus();
      SubscriberRow sub;
      if (absl::Status s = ReadRow(t, Subscriber(s_id), &sub); !s.ok()) return s;
      sub.bits = static_cast<uint16_t>((sub.bits & ~1u) | in.bit_1);
      sf.data_a = in.data_a;
      if (absl::Status s = WriteRow(t, Subscriber(s_id), sub, written); !s.ok()) return s;
      out->found = true;
      return WriteRow(t, SpecialFacility(s_id, in.sf_type), sf, written);
    }
    case TatpTxnType::kUpdateLocation: {
      SubscriberRow sub;
      if (absl::Status s = ReadRow(t, Subscriber(s_id), &sub); !s.ok()) return s;
      sub.vlr_location = in.vlr_location;
      out->found = true;
      return WriteRow(t, Subscriber(s_id), sub, written);
    }
    case TatpTxnType::kInsertCallForwarding: {
      // The spec reads the subscriber's special facilities first (SELECT sf_type FROM
      // special_facility WHERE s_id = ...): the new row needs its parent among them.
      SpecialFacilityRow sf[kTatpTypes];
      for (int type = 1; type <= kTatpTypes; ++type) {
        if (absl::Status s = ReadRow(t, SpecialFacility(s_id, type), &sf[type - 1]); !s.ok())
          return s;
      }
      if (!sf[in.sf_type - 1].present) return absl::OkStatus();
      const GlobalAddress a = CallForwarding(s_id, in.sf_type, in.start_time / 8);
      CallForwardingRow cf;
      if (absl::Status s = ReadRow(t, a, &cf); !s.ok()) return s;
      if (cf.present) return absl::OkStatus();  // a duplicate key
      cf.present = 1;
      cf.end_time = in.end_time;
      std::memcpy(cf.numberx, in.numberx, kSubNbrDigits);
      out->found = true;
      out->cf_delta = 1;
      return WriteRow(t, a, cf, written);
    }
    case TatpTxnType::kDeleteCallForwarding: {
      const GlobalAddress a = CallForwarding(s_id, in.sf_type, in.start_time / 8);
      CallForwardingRow cf;
      if (absl::Status s = ReadRow(t, a, &cf); !s.ok()) return s;
      if (!cf.present) return absl::OkStatus();
      out->found = true;
      out->cf_delta = -1;
      return WriteRow(t, a, CallForwardingRow{}, written);
    }
  }
  return absl::InvalidArgumentError("unknown TATP transaction");
}

absl::Status TatpFarm::Attempt(Worker& w, const TatpTxn& in, TatpOutcome* out, double* commit_us,
                               std::vector<GlobalAddress>* written) const {
  *out = TatpOutcome{};
  if (absl::Status s = CheckInputs(in, subscribers_); !s.ok()) return s;
  std::unique_ptr<Txn> t = w.Begin();
  std::vector<GlobalAddress> ignored;
  if (written == nullptr) written = &ignored;
  written->clear();
  if (absl::Status s = Run(*t, in, out, written); !s.ok()) return s;
  const Clock::time_point t0 = Clock::now();
  absl::Status s = t->Commit();
  *commit_us = MicrosBetween(t0, Clock::now());
  return s;
}

absl::StatusOr<std::string> TatpFarm::Audit(Worker& w, uint64_t seed, int64_t cf_delta) const {
  auto read = [&w](GlobalAddress a, void* dst, uint64_t len) -> absl::Status {
    absl::Status s = w.LockFreeRead(a, dst, len);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("TATP audit: ", s.message()));
    return s;
  };
  uint64_t rows = 0, initial = 0;
  for (uint32_t s_id = 1; s_id <= subscribers_; ++s_id) {
    initial += Populate(seed, s_id).call_forwardings();
    SubscriberRow sub;
    if (absl::Status s = read(Subscriber(s_id), &sub, sizeof(sub)); !s.ok()) return s;
    const std::string nbr = SubNbr(s_id);
    if (sub.s_id != s_id || nbr != sub.sub_nbr) {
      return absl::DataLossError(absl::StrCat("TATP audit: subscriber ", s_id, "'s row holds s_id ",
                                              sub.s_id, ", sub_nbr ", sub.sub_nbr));
    }
    absl::StatusOr<uint32_t> by_index = Lookup(
        nbr.c_str(), [&](GlobalAddress a, IndexBucket* k) { return read(a, k, sizeof(*k)); });
    if (!by_index.ok() || *by_index != s_id) {
      return absl::DataLossError(absl::StrCat(
          "TATP audit: the index maps ", nbr, " to ",
          by_index.ok() ? absl::StrCat(*by_index) : by_index.status().ToString(), ", not ", s_id));
    }
    for (int sf_type = 1; sf_type <= kTatpTypes; ++sf_type) {
      SpecialFacilityRow sf;
      if (absl::Status s = read(SpecialFacility(s_id, sf_type), &sf, sizeof(sf)); !s.ok()) return s;
      for (int i = 0; i < kTatpStartTimes; ++i) {
        CallForwardingRow cf;
        if (absl::Status s = read(CallForwarding(s_id, sf_type, i), &cf, sizeof(cf)); !s.ok())
          return s;
        if (!cf.present) continue;
        ++rows;
        if (!sf.present) {
          return absl::DataLossError(absl::StrCat("TATP audit: call forwarding (", s_id, ", ",
                                                  sf_type, ", ", 8 * i,
                                                  ") has no special facility"));
        }
      }
    }
  }
  const int64_t want = static_cast<int64_t>(initial) + cf_delta;
  const std::string line =
      absl::StrFormat("subscribers=%d index=ok orphans=0 call_forwardings=%d expected=%d (%d %+d)",
                      subscribers_, rows, want, initial, cf_delta);
  if (static_cast<int64_t>(rows) != want) {
    return absl::DataLossError(absl::StrCat("TATP audit: ", line));
  }
  return line;
}

}  // namespace txnbench
}  // namespace farm
