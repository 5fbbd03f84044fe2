#include "tools/tatp_workload.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace farm {
namespace txnbench {
namespace {

constexpr TatpTxnType kTypes[] = {
    TatpTxnType::kGetSubscriberData,    TatpTxnType::kGetNewDestination,
    TatpTxnType::kGetAccessData,        TatpTxnType::kUpdateSubscriberData,
    TatpTxnType::kUpdateLocation,       TatpTxnType::kInsertCallForwarding,
    TatpTxnType::kDeleteCallForwarding,
};

uint32_t Between(Rng& rng, uint32_t lo, uint32_t hi) {
  return lo + static_cast<uint32_t>(rng.Next() % (uint64_t{hi} - lo + 1));
}

void Letters(Rng& rng, char* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = static_cast<char>('A' + Between(rng, 0, 25));
}

void Digits(Rng& rng, char* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = static_cast<char>('0' + Between(rng, 0, 9));
}

// `count` distinct values of 0..n-1 (n <= 4), by a partial shuffle.
int Pick(Rng& rng, int n, int count, int* out) {
  int all[4] = {0, 1, 2, 3};
  for (int i = 0; i < count; ++i) {
    std::swap(all[i], all[i + static_cast<int>(Between(rng, 0, n - 1 - i))]);
    out[i] = all[i];
  }
  return count;
}

}  // namespace

std::string TatpTxnName(TatpTxnType t) {
  switch (t) {
    case TatpTxnType::kGetSubscriberData:
      return "GET_SUBSCRIBER_DATA";
    case TatpTxnType::kGetNewDestination:
      return "GET_NEW_DESTINATION";
    case TatpTxnType::kGetAccessData:
      return "GET_ACCESS_DATA";
    case TatpTxnType::kUpdateSubscriberData:
      return "UPDATE_SUBSCRIBER_DATA";
    case TatpTxnType::kUpdateLocation:
      return "UPDATE_LOCATION";
    case TatpTxnType::kInsertCallForwarding:
      return "INSERT_CALL_FORWARDING";
    case TatpTxnType::kDeleteCallForwarding:
      return "DELETE_CALL_FORWARDING";
  }
  return "?";
}

int TatpMixPercent(TatpTxnType t) {
  switch (t) {
    case TatpTxnType::kGetSubscriberData:
    case TatpTxnType::kGetAccessData:
      return 35;
    case TatpTxnType::kGetNewDestination:
      return 10;
    case TatpTxnType::kUpdateLocation:
      return 14;
    case TatpTxnType::kUpdateSubscriberData:
    case TatpTxnType::kInsertCallForwarding:
    case TatpTxnType::kDeleteCallForwarding:
      return 2;
  }
  return 0;
}

int SubscriberData::access_infos() const {
  int n = 0;
  for (const AccessInfoRow& r : access_info) n += r.present;
  return n;
}

int SubscriberData::special_facilities() const {
  int n = 0;
  for (const SpecialFacilityRow& r : special_facility) n += r.present;
  return n;
}

int SubscriberData::call_forwardings() const {
  int n = 0;
  for (const auto& per_sf : call_forwarding) {
    for (const CallForwardingRow& r : per_sf) n += r.present;
  }
  return n;
}

std::string SubNbr(uint32_t s_id) { return absl::StrFormat("%015u", s_id); }

SubscriberData Populate(uint64_t seed, uint32_t s_id) {
  // A generator of this subscriber's own: any process makes the same rows in any order.
  Rng rng(seed * 0x9e3779b97f4a7c15ull ^ (uint64_t{s_id} * 0xbf58476d1ce4e5b9ull));
  SubscriberData d;
  SubscriberRow& s = d.subscriber;
  s.s_id = s_id;
  std::memcpy(s.sub_nbr, SubNbr(s_id).c_str(), kSubNbrDigits + 1);
  s.bits = static_cast<uint16_t>(Between(rng, 0, 1023));
  for (uint8_t& h : s.hex) h = static_cast<uint8_t>(Between(rng, 0, 15));
  for (uint8_t& b : s.byte2) b = static_cast<uint8_t>(Between(rng, 0, 255));
  s.msc_location = Between(rng, 1, UINT32_MAX);
  s.vlr_location = Between(rng, 1, UINT32_MAX);
  int types[4];
  for (int i = 0, n = Pick(rng, kTatpTypes, Between(rng, 1, 4), types); i < n; ++i) {
    AccessInfoRow& a = d.access_info[types[i]];
    a.present = 1;
    a.data1 = static_cast<uint8_t>(Between(rng, 0, 255));
    a.data2 = static_cast<uint8_t>(Between(rng, 0, 255));
    Letters(rng, a.data3, sizeof(a.data3));
    Letters(rng, a.data4, sizeof(a.data4));
  }
  for (int i = 0, n = Pick(rng, kTatpTypes, Between(rng, 1, 4), types); i < n; ++i) {
    SpecialFacilityRow& f = d.special_facility[types[i]];
    f.present = 1;
    f.is_active = Between(rng, 1, 100) <= 85 ? 1 : 0;
    f.error_cntrl = static_cast<uint8_t>(Between(rng, 0, 255));
    f.data_a = static_cast<uint8_t>(Between(rng, 0, 255));
    Letters(rng, f.data_b, sizeof(f.data_b));
    int starts[4];
    for (int j = 0, m = Pick(rng, kTatpStartTimes, Between(rng, 0, 3), starts); j < m; ++j) {
      CallForwardingRow& c = d.call_forwarding[types[i]][starts[j]];
      c.present = 1;
      c.end_time = static_cast<uint8_t>(8 * starts[j] + Between(rng, 1, 8));
      Digits(rng, c.numberx, sizeof(c.numberx));
    }
  }
  return d;
}

uint64_t InitialCallForwardings(uint64_t seed, uint32_t subscribers) {
  uint64_t n = 0;
  for (uint32_t s = 1; s <= subscribers; ++s) n += Populate(seed, s).call_forwardings();
  return n;
}

bool NewDestinationFound(const TatpTxn& t, const SpecialFacilityRow& sf,
                         const CallForwardingRow cf[kTatpStartTimes]) {
  if (!sf.present || !sf.is_active) return false;
  for (int i = 0; i < kTatpStartTimes && 8 * i <= t.start_time; ++i) {
    if (cf[i].present && t.end_time < cf[i].end_time) return true;
  }
  return false;
}

TatpGenerator::TatpGenerator(Distribution dist, uint32_t subscribers, double theta)
    : keys_(dist, subscribers, theta) {}

TatpTxn TatpGenerator::Next(Rng& rng) const {
  TatpTxn t;
  uint32_t r = Between(rng, 0, 99);
  for (TatpTxnType type : kTypes) {
    t.type = type;
    const uint32_t p = static_cast<uint32_t>(TatpMixPercent(type));
    if (r < p) break;
    r -= p;
  }
  t.s_id = NextSubscriber(rng);
  switch (t.type) {
    case TatpTxnType::kGetSubscriberData:
      break;
    case TatpTxnType::kGetNewDestination:
      t.sf_type = static_cast<uint8_t>(Between(rng, 1, 4));
      t.start_time = static_cast<uint8_t>(8 * Between(rng, 0, 2));
      t.end_time = static_cast<uint8_t>(Between(rng, 1, 24));
      break;
    case TatpTxnType::kGetAccessData:
      t.ai_type = static_cast<uint8_t>(Between(rng, 1, 4));
      break;
    case TatpTxnType::kUpdateSubscriberData:
      t.bit_1 = static_cast<uint8_t>(Between(rng, 0, 1));
      t.sf_type = static_cast<uint8_t>(Between(rng, 1, 4));
      t.data_a = static_cast<uint8_t>(Between(rng, 0, 255));
      break;
    case TatpTxnType::kUpdateLocation:
      t.vlr_location = Between(rng, 1, UINT32_MAX);
      break;
    case TatpTxnType::kInsertCallForwarding:
      t.sf_type = static_cast<uint8_t>(Between(rng, 1, 4));
      t.start_time = static_cast<uint8_t>(8 * Between(rng, 0, 2));
      t.end_time = static_cast<uint8_t>(Between(rng, 1, 24));
      Digits(rng, t.numberx, kSubNbrDigits);
      break;
    case TatpTxnType::kDeleteCallForwarding:
      t.sf_type = static_cast<uint8_t>(Between(rng, 1, 4));
      t.start_time = static_cast<uint8_t>(8 * Between(rng, 0, 2));
      break;
  }
  if (t.type == TatpTxnType::kUpdateLocation || t.type == TatpTxnType::kInsertCallForwarding ||
      t.type == TatpTxnType::kDeleteCallForwarding) {
    std::memcpy(t.sub_nbr, SubNbr(t.s_id).c_str(), kSubNbrDigits + 1);
  }
  return t;
}

absl::Status RunTatpClient(const TatpGenerator& gen, const Window& window, double rate,
                           uint64_t seed, const TatpAttempt& attempt, ClientStats* stats) {
  TatpTxn txn;
  return RunTransactions(
      "tatp", window, rate, seed, [&](Rng& rng) { txn = gen.Next(rng); },
      [&](double* commit_us, int64_t* increment, bool* found) {
        TatpOutcome out;
        absl::Status s = attempt(txn, &out, commit_us);
        *increment = out.cf_delta;
        *found = out.found;
        return s;
      },
      stats);
}

}  // namespace txnbench
}  // namespace farm
