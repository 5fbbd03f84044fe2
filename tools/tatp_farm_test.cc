// TATP's tables and transactions on farm (tools/tatp_farm.h) on an in-process cluster of 2
// runtimes: placement (a subscriber's rows on one node), what each transaction finds against
// the population it was loaded with, what its writes leave in the rows (read back), inserts and
// deletes of call forwardings (also two threads on one slot at once), inputs outside the spec's
// ranges, and the audit.
#include "tools/tatp_farm.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "tests/runtime_cluster.h"

namespace farm {
namespace txnbench {
namespace {

constexpr uint32_t kSubscribers = 40;
constexpr uint64_t kSeed = 3;

// Runs `t` until it commits (aborts: up to `attempts` times); its outcome, or the error.
absl::StatusOr<TatpOutcome> TryCommit(const TatpFarm& tatp, Worker& w, TatpTxn t,
                                      int attempts = 100) {
  if (t.sub_nbr[0] == 0) std::memcpy(t.sub_nbr, SubNbr(t.s_id).c_str(), kSubNbrDigits + 1);
  absl::Status s;
  for (int i = 0; i < attempts; ++i) {
    TatpOutcome out;
    double commit_us = 0;
    s = tatp.Attempt(w, t, &out, &commit_us);
    if (s.ok()) return out;
    if (!absl::IsAborted(s)) break;
  }
  return absl::Status(s.code(), absl::StrCat(TatpTxnName(t.type), ": ", s.message()));
}

// Runs `t` until it commits; its outcome (the test fails on an error or too many aborts).
TatpOutcome Commit(const TatpFarm& tatp, Worker& w, TatpTxn t) {
  absl::StatusOr<TatpOutcome> out = TryCommit(tatp, w, t);
  INFO(out.status().ToString());
  REQUIRE(out.ok());
  return *out;
}

// A 2-node in-process cluster with kSubscribers loaded from kSeed (by a worker of node 0).
struct LoadedCluster {
  std::vector<std::unique_ptr<Runtime>> rts;
  std::unique_ptr<Worker> w;
  std::vector<GlobalAddress> addresses;  // in the layout's order (tools/tatp_farm.h)
  std::optional<TatpFarm> tatp;

  // The row in object `object` (0 SUBSCRIBER, 1-4 ACCESS_INFO, 5-8 SPECIAL_FACILITY, then
  // CALL_FORWARDING by (sf_type, start_time)) of subscriber `s_id`, as stored now.
  template <typename T>
  T Row(uint32_t s_id, int object) {
    T v;
    const GlobalAddress a = addresses[TatpFarm::kObjectsPerSubscriber * (s_id - 1) + object];
    absl::Status s = w->LockFreeRead(a, &v, sizeof(v));
    INFO(s.ToString());
    REQUIRE(s.ok());
    return v;
  }
  SubscriberRow Subscriber(uint32_t s_id) { return Row<SubscriberRow>(s_id, 0); }
  SpecialFacilityRow Facility(uint32_t s_id, int sf_type) {
    return Row<SpecialFacilityRow>(s_id, kTatpTypes + sf_type);
  }
  CallForwardingRow Forwarding(uint32_t s_id, int sf_type, int start_index) {
    return Row<CallForwardingRow>(
        s_id, 2 * kTatpTypes + 1 + (sf_type - 1) * kTatpStartTimes + start_index);
  }
};

std::unique_ptr<LoadedCluster> LoadCluster() {
  auto c = std::make_unique<LoadedCluster>();
  c->rts = testing::StartRuntimes(2);
  for (auto& rt : c->rts) rt->Serve();
  absl::StatusOr<std::unique_ptr<Worker>> w = c->rts[0]->NewWorker();
  REQUIRE(w.ok());
  c->w = std::move(*w);
  auto place = [](uint64_t key) { return AllocHint::Anywhere(key); };
  absl::StatusOr<std::vector<uint64_t>> packed = TatpFarm::Load(*c->w, kSubscribers, kSeed, place);
  INFO(packed.status().ToString());
  REQUIRE(packed.ok());
  REQUIRE(packed->size() == TatpFarm::Objects(kSubscribers));
  for (uint64_t p : *packed) c->addresses.push_back(GlobalAddress::Unpack(p));
  absl::StatusOr<TatpFarm> made = TatpFarm::Make(kSubscribers, c->addresses);
  REQUIRE(made.ok());
  c->tatp.emplace(std::move(*made));
  return c;
}

TEST_CASE("TATP on farm: placement, what each transaction finds, inserts, deletes, audit") {
  std::unique_ptr<LoadedCluster> c = LoadCluster();
  auto& rts = c->rts;
  auto& w = c->w;
  const std::vector<GlobalAddress>& addresses = c->addresses;
  const TatpFarm& tatp = *c->tatp;
  REQUIRE(absl::IsInvalidArgument(TatpFarm::Make(kSubscribers + 1, addresses).status()));

  // Every subscriber's 21 rows on one node, and subscribers on both nodes.
  std::map<uint32_t, uint32_t> owner;
  for (uint32_t n : rts[0]->members()) {
    for (const RegionRef& r : rts[0]->Regions(n)) owner[r.id] = r.node;
  }
  std::set<uint32_t> homes;
  for (uint32_t s = 0; s < kSubscribers; ++s) {
    const uint32_t home = owner.at(addresses[TatpFarm::kObjectsPerSubscriber * s].region);
    homes.insert(home);
    for (int i = 1; i < TatpFarm::kObjectsPerSubscriber; ++i) {
      REQUIRE(owner.at(addresses[TatpFarm::kObjectsPerSubscriber * s + i].region) == home);
    }
  }
  REQUIRE(homes.size() == 2);

  // Reads find exactly what the population holds (GET_NEW_DESTINATION for every input).
  for (uint32_t s = 1; s <= kSubscribers; ++s) {
    const SubscriberData d = Populate(kSeed, s);
    TatpTxn t;
    t.s_id = s;
    t.type = TatpTxnType::kGetSubscriberData;
    REQUIRE(Commit(tatp, *w, t).found);
    t.type = TatpTxnType::kGetAccessData;
    for (t.ai_type = 1; t.ai_type <= 4; ++t.ai_type) {
      REQUIRE(Commit(tatp, *w, t).found == (d.access_info[t.ai_type - 1].present != 0));
    }
    t.type = TatpTxnType::kGetNewDestination;
    for (t.sf_type = 1; t.sf_type <= 4; ++t.sf_type) {
      for (t.start_time = 0; t.start_time <= 16; t.start_time += 8) {
        for (t.end_time = 1; t.end_time <= 24; t.end_time += 5) {
          REQUIRE(Commit(tatp, *w, t).found ==
                  NewDestinationFound(t, d.special_facility[t.sf_type - 1],
                                      d.call_forwarding[t.sf_type - 1]));
        }
      }
    }
    // By sub_nbr through the index; the row holds the new location, the rest unchanged.
    t.type = TatpTxnType::kUpdateLocation;
    t.vlr_location = 1000 + s;
    REQUIRE(Commit(tatp, *w, t).found);
    const SubscriberRow after = c->Subscriber(s);
    REQUIRE(after.vlr_location == 1000 + s);
    REQUIRE(after.s_id == s);
    REQUIRE(after.msc_location == d.subscriber.msc_location);
    REQUIRE(after.bits == d.subscriber.bits);
    REQUIRE(std::string(after.sub_nbr) == SubNbr(s));
  }

  // Insert and delete on one subscriber: duplicates and missing parents find nothing.
  int64_t delta = 0;
  for (uint32_t s = 1; s <= kSubscribers; ++s) {
    const SubscriberData d = Populate(kSeed, s);
    for (uint8_t sf = 1; sf <= 4; ++sf) {
      for (int i = 0; i < kTatpStartTimes; ++i) {
        TatpTxn t;
        t.s_id = s;
        t.sf_type = sf;
        t.start_time = static_cast<uint8_t>(8 * i);
        t.end_time = static_cast<uint8_t>(8 * i + 3);
        const std::string numberx = SubNbr(100000 + 16 * s + 4 * sf + i);
        std::memcpy(t.numberx, numberx.c_str(), kSubNbrDigits);
        t.type = TatpTxnType::kInsertCallForwarding;
        const bool parent = d.special_facility[sf - 1].present != 0;
        const bool existed = d.call_forwarding[sf - 1][i].present != 0;
        TatpOutcome in = Commit(tatp, *w, t);
        REQUIRE(in.found == (parent && !existed));
        REQUIRE(in.cf_delta == (in.found ? 1 : 0));
        delta += in.cf_delta;
        // The row holds what was inserted (or, where nothing was, what the population held).
        const CallForwardingRow cf = c->Forwarding(s, sf, i);
        const CallForwardingRow& was = d.call_forwarding[sf - 1][i];
        REQUIRE(cf.present == (parent || existed ? 1 : 0));
        if (in.found) {
          REQUIRE(cf.end_time == t.end_time);
          REQUIRE(std::string(cf.numberx, kSubNbrDigits) == numberx);
        } else if (existed) {
          REQUIRE(cf.end_time == was.end_time);
          REQUIRE(std::memcmp(cf.numberx, was.numberx, kSubNbrDigits) == 0);
        }
        REQUIRE_FALSE(Commit(tatp, *w, t).found);  // now a duplicate, or still no parent
        t.type = TatpTxnType::kUpdateSubscriberData;
        t.bit_1 = static_cast<uint8_t>((s + sf + i) % 2);
        t.data_a = static_cast<uint8_t>(16 * sf + i);
        const uint16_t bits_before = c->Subscriber(s).bits;
        REQUIRE(Commit(tatp, *w, t).found == parent);
        // Both updates or neither: bit_1 and data_a as written, the other bits unchanged.
        const uint16_t bits = c->Subscriber(s).bits;
        REQUIRE((bits & ~1u) == (bits_before & ~1u));
        REQUIRE((bits & 1u) == (parent ? t.bit_1 : (bits_before & 1u)));
        if (parent) REQUIRE(c->Facility(s, sf).data_a == t.data_a);
        if (s % 2 == 0) {  // half the subscribers lose their rows again
          t.type = TatpTxnType::kDeleteCallForwarding;
          TatpOutcome del = Commit(tatp, *w, t);
          REQUIRE(del.found == parent);
          delta += del.cf_delta;
          REQUIRE(c->Forwarding(s, sf, i).present == 0);
          REQUIRE_FALSE(Commit(tatp, *w, t).found);
        }
      }
    }
  }
  absl::StatusOr<std::string> audit = tatp.Audit(*w, kSeed, delta);
  INFO(audit.status().ToString());
  REQUIRE(audit.ok());
  REQUIRE(audit->find("index=ok") != std::string::npos);
  // A count that does not add up is reported.
  REQUIRE(absl::IsDataLoss(tatp.Audit(*w, kSeed, delta + 1).status()));
}

TEST_CASE("TATP on farm: inputs outside the spec's ranges are refused before anything is read") {
  std::unique_ptr<LoadedCluster> c = LoadCluster();
  auto refused = [&](TatpTxn t) {
    if (t.sub_nbr[0] == 0) std::memcpy(t.sub_nbr, SubNbr(1).c_str(), kSubNbrDigits + 1);
    TatpOutcome out;
    double commit_us = 0;
    absl::Status s = c->tatp->Attempt(*c->w, t, &out, &commit_us);
    INFO(s.ToString());
    return absl::IsInvalidArgument(s) && !out.found;
  };
  TatpTxn t;
  t.type = TatpTxnType::kGetSubscriberData;
  for (uint32_t s_id : {0u, kSubscribers + 1, 0xffffffffu}) {
    t.s_id = s_id;
    REQUIRE(refused(t));
  }
  t.s_id = 1;
  t.type = TatpTxnType::kGetAccessData;
  for (uint8_t ai : {0, 5, 255}) {
    t.ai_type = ai;
    REQUIRE(refused(t));
  }
  t.start_time = 0;
  for (TatpTxnType type :
       {TatpTxnType::kGetNewDestination, TatpTxnType::kUpdateSubscriberData,
        TatpTxnType::kInsertCallForwarding, TatpTxnType::kDeleteCallForwarding}) {
    t.type = type;
    for (uint8_t sf : {0, 5, 255}) {
      t.sf_type = sf;
      REQUIRE(refused(t));
    }
  }
  t.sf_type = 1;
  for (TatpTxnType type : {TatpTxnType::kGetNewDestination, TatpTxnType::kInsertCallForwarding,
                           TatpTxnType::kDeleteCallForwarding}) {
    t.type = type;
    for (uint8_t start : {1, 7, 24, 255}) {
      t.start_time = start;
      REQUIRE(refused(t));
    }
  }
  t.start_time = 0;
  t.type = TatpTxnType::kUpdateSubscriberData;
  t.bit_1 = 2;
  REQUIRE(refused(t));
  t.type = static_cast<TatpTxnType>(kTatpTxnTypes);
  REQUIRE(refused(t));
  // The same inputs in range run.
  t.type = TatpTxnType::kUpdateSubscriberData;
  t.bit_1 = 1;
  REQUIRE(TryCommit(*c->tatp, *c->w, t).ok());
}

TEST_CASE("TATP on farm: two threads insert and delete the same call forwarding at once") {
  std::unique_ptr<LoadedCluster> c = LoadCluster();
  // A slot whose special facility exists: its subscriber and sf_type.
  uint32_t s_id = 0;
  uint8_t sf_type = 0;
  for (uint32_t s = 1; s <= kSubscribers && s_id == 0; ++s) {
    const SubscriberData d = Populate(kSeed, s);
    for (uint8_t sf = 1; sf <= kTatpTypes && s_id == 0; ++sf) {
      if (d.special_facility[sf - 1].present) {
        s_id = s;
        sf_type = sf;
      }
    }
  }
  REQUIRE(s_id != 0);
  const bool present_before = Populate(kSeed, s_id).call_forwarding[sf_type - 1][1].present != 0;
  // One thread on each node, each alternating INSERT and DELETE of (s_id, sf_type, 8) for a fixed
  // number of committed transactions; each counts the rows it added and removed.
  constexpr int kIterations = 300;
  struct Tally {
    int64_t delta = 0;
    int inserted = 0, deleted = 0;
    absl::Status status;
  };
  Tally tally[2];
  std::vector<std::unique_ptr<Worker>> workers;
  for (int n = 0; n < 2; ++n) {
    absl::StatusOr<std::unique_ptr<Worker>> w = c->rts[n]->NewWorker();
    REQUIRE(w.ok());
    workers.push_back(std::move(*w));
  }
  std::vector<std::thread> threads;
  for (int n = 0; n < 2; ++n) {
    threads.emplace_back([&, n] {
      TatpTxn t;
      t.s_id = s_id;
      t.sf_type = sf_type;
      t.start_time = 8;
      t.end_time = static_cast<uint8_t>(9 + n);
      std::memcpy(t.numberx, SubNbr(900 + n).c_str(), kSubNbrDigits);
      for (int i = 0; i < kIterations && tally[n].status.ok(); ++i) {
        t.type =
            i % 2 == 0 ? TatpTxnType::kInsertCallForwarding : TatpTxnType::kDeleteCallForwarding;
        absl::StatusOr<TatpOutcome> out = TryCommit(*c->tatp, *workers[n], t, 100000);
        if (!out.ok()) {
          tally[n].status = out.status();
          break;
        }
        tally[n].delta += out->cf_delta;
        tally[n].inserted += out->cf_delta > 0;
        tally[n].deleted += out->cf_delta < 0;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Tally& t : tally) {
    INFO(t.status.ToString());
    REQUIRE(t.status.ok());
  }
  // The slot holds a row exactly when the rows added minus removed say so, and a row there is
  // one of the two threads' whole rows.
  const int64_t delta = tally[0].delta + tally[1].delta;
  INFO("inserted " << tally[0].inserted << "+" << tally[1].inserted << ", deleted "
                   << tally[0].deleted << "+" << tally[1].deleted);
  // Some of them changed the slot (a delete fails only on an absent row, an insert on a present
  // one).
  REQUIRE(tally[0].inserted + tally[1].inserted + tally[0].deleted + tally[1].deleted > 0);
  REQUIRE(delta == (c->Forwarding(s_id, sf_type, 1).present ? 1 : 0) - (present_before ? 1 : 0));
  const CallForwardingRow cf = c->Forwarding(s_id, sf_type, 1);
  if (cf.present) {
    const int n = cf.end_time - 9;
    REQUIRE((n == 0 || n == 1));
    REQUIRE(std::string(cf.numberx, kSubNbrDigits) == SubNbr(900 + n));
  }
  absl::StatusOr<std::string> audit = c->tatp->Audit(*c->w, kSeed, delta);
  INFO(audit.status().ToString());
  REQUIRE(audit.ok());
}

}  // namespace
}  // namespace txnbench
}  // namespace farm
