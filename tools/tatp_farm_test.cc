// TATP's tables and transactions on farm (tools/tatp_farm.h) on an in-process cluster of 2
// runtimes: placement (a subscriber's rows on one node), what each transaction finds against
// the population it was loaded with, inserts and deletes of call forwardings, and the audit.
#include "tools/tatp_farm.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <set>

#include "tests/runtime_cluster.h"

namespace farm {
namespace txnbench {
namespace {

constexpr uint32_t kSubscribers = 40;
constexpr uint64_t kSeed = 3;

// Runs `t` until it commits; its outcome.
TatpOutcome Commit(const TatpFarm& tatp, Worker& w, TatpTxn t) {
  if (t.sub_nbr[0] == 0) std::memcpy(t.sub_nbr, SubNbr(t.s_id).c_str(), kSubNbrDigits + 1);
  for (int i = 0; i < 100; ++i) {
    TatpOutcome out;
    double commit_us = 0;
    absl::Status s = tatp.Attempt(w, t, &out, &commit_us);
    if (absl::IsAborted(s)) continue;
    INFO(TatpTxnName(t.type) << " " << s.ToString());
    REQUIRE(s.ok());
    return out;
  }
  FAIL("kept aborting");
  return {};
}

TEST_CASE("TATP on farm: placement, what each transaction finds, inserts, deletes, audit") {
  std::vector<std::unique_ptr<Runtime>> rts = testing::StartRuntimes(2);
  for (auto& rt : rts) rt->Serve();
  absl::StatusOr<std::unique_ptr<Worker>> w = rts[0]->NewWorker();
  REQUIRE(w.ok());
  auto place = [](uint64_t key) { return AllocHint::Anywhere(key); };
  absl::StatusOr<std::vector<uint64_t>> packed = TatpFarm::Load(**w, kSubscribers, kSeed, place);
  INFO(packed.status().ToString());
  REQUIRE(packed.ok());
  REQUIRE(packed->size() == TatpFarm::Objects(kSubscribers));
  std::vector<GlobalAddress> addresses;
  for (uint64_t p : *packed) addresses.push_back(GlobalAddress::Unpack(p));
  absl::StatusOr<TatpFarm> made = TatpFarm::Make(kSubscribers, addresses);
  REQUIRE(made.ok());
  const TatpFarm& tatp = *made;
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
    REQUIRE(Commit(tatp, **w, t).found);
    t.type = TatpTxnType::kGetAccessData;
    for (t.ai_type = 1; t.ai_type <= 4; ++t.ai_type) {
      REQUIRE(Commit(tatp, **w, t).found == (d.access_info[t.ai_type - 1].present != 0));
    }
    t.type = TatpTxnType::kGetNewDestination;
    for (t.sf_type = 1; t.sf_type <= 4; ++t.sf_type) {
      for (t.start_time = 0; t.start_time <= 16; t.start_time += 8) {
        for (t.end_time = 1; t.end_time <= 24; t.end_time += 5) {
          REQUIRE(Commit(tatp, **w, t).found ==
                  NewDestinationFound(t, d.special_facility[t.sf_type - 1],
                                      d.call_forwarding[t.sf_type - 1]));
        }
      }
    }
    // By sub_nbr through the index.
    t.type = TatpTxnType::kUpdateLocation;
    t.vlr_location = 7;
    REQUIRE(Commit(tatp, **w, t).found);
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
        std::memcpy(t.numberx, "123456789012345", kSubNbrDigits);
        t.type = TatpTxnType::kInsertCallForwarding;
        const bool parent = d.special_facility[sf - 1].present != 0;
        const bool existed = d.call_forwarding[sf - 1][i].present != 0;
        TatpOutcome in = Commit(tatp, **w, t);
        REQUIRE(in.found == (parent && !existed));
        REQUIRE(in.cf_delta == (in.found ? 1 : 0));
        delta += in.cf_delta;
        REQUIRE_FALSE(Commit(tatp, **w, t).found);  // now a duplicate, or still no parent
        t.type = TatpTxnType::kUpdateSubscriberData;
        REQUIRE(Commit(tatp, **w, t).found == parent);
        if (s % 2 == 0) {  // half the subscribers lose their rows again
          t.type = TatpTxnType::kDeleteCallForwarding;
          TatpOutcome del = Commit(tatp, **w, t);
          REQUIRE(del.found == parent);
          delta += del.cf_delta;
          REQUIRE_FALSE(Commit(tatp, **w, t).found);
        }
      }
    }
  }
  absl::StatusOr<std::string> audit = tatp.Audit(**w, kSeed, delta);
  INFO(audit.status().ToString());
  REQUIRE(audit.ok());
  REQUIRE(audit->find("index=ok") != std::string::npos);
  // A count that does not add up is reported.
  REQUIRE(absl::IsDataLoss(tatp.Audit(**w, kSeed, delta + 1).status()));
}

}  // namespace
}  // namespace txnbench
}  // namespace farm
