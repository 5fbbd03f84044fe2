// TATP (the Telecom Application Transaction Processing benchmark, FaRM's headline workload) as
// //tools:txn_bench runs it on every target: the population, the transaction mix and the
// subscriber choice, independent of how a target stores the four tables (farm:
// tools/tatp_farm.h; PostgreSQL: tools/txn_peers.h).
//
//   const TatpGenerator gen(Distribution::kNurand, 10000);     // immutable: share it
//   SubscriberData d = Populate(seed, s_id);                    // the rows of s_id at the start
//   Rng rng(client_seed);
//   TatpTxn t = gen.Next(rng);                                  // one transaction's input
//   RunTatpClient(gen, window, 0, client_seed, attempt, &stats);   // the mix, back to back
//
// From the TATP specification (v1.0):
//  - SUBSCRIBER (s_id 1..P, sub_nbr = s_id as 15 digits with leading zeros, bit_1..10 in 0..1,
//    hex_1..10 in 0..15, byte2_1..10 in 0..255, msc_location and vlr_location in 1..2^32-1);
//  - ACCESS_INFO (1 to 4 per subscriber, ai_type distinct in 1..4; data1, data2 in 0..255, data3
//    3 and data4 5 letters A..Z);
//  - SPECIAL_FACILITY (1 to 4 per subscriber, sf_type distinct in 1..4; is_active 1 in 85 % of
//    rows; error_cntrl and data_a in 0..255, data_b 5 letters);
//  - CALL_FORWARDING (0 to 3 per special facility, start_time distinct in {0, 8, 16}, end_time =
//    start_time + 1..8, numberx 15 random digits).
// The mix: GET_SUBSCRIBER_DATA 35 %, GET_NEW_DESTINATION 10 %, GET_ACCESS_DATA 35 %,
// UPDATE_SUBSCRIBER_DATA 2 %, UPDATE_LOCATION 14 %, INSERT_CALL_FORWARDING 2 %,
// DELETE_CALL_FORWARDING 2 %. UPDATE_LOCATION and the CALL_FORWARDING ones name the subscriber
// by sub_nbr, which the target must look up. A transaction that finds nothing (no such row, a
// duplicate key on insert) still commits (TATP counts it as a valid, unsuccessful transaction);
// the spec's success rates are 100, 23.9, 62.5, 62.5, 100, 31.25, 31.25 %.
//
// Thread safety: TatpGenerator is immutable (safe for concurrent use); the rest are values.
#ifndef FARM_TOOLS_TATP_WORKLOAD_H_
#define FARM_TOOLS_TATP_WORKLOAD_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "tools/bench_util.h"
#include "tools/txn_workload.h"

namespace farm {
namespace txnbench {

inline constexpr int kTatpTypes = 4;       // ai_type and sf_type: 1..4
inline constexpr int kTatpStartTimes = 3;  // start_time: 0, 8, 16 (index start_time / 8)
inline constexpr int kSubNbrDigits = 15;

enum class TatpTxnType {
  kGetSubscriberData,
  kGetNewDestination,
  kGetAccessData,
  kUpdateSubscriberData,
  kUpdateLocation,
  kInsertCallForwarding,
  kDeleteCallForwarding,
};
inline constexpr int kTatpTxnTypes = 7;
// "GET_SUBSCRIBER_DATA", ...
std::string TatpTxnName(TatpTxnType t);
// The standard mix, in percent (they add up to 100).
int TatpMixPercent(TatpTxnType t);

// The rows as the generator makes them (and farm stores them: trivially copyable, zero = absent).
struct SubscriberRow {
  uint32_t s_id = 0;
  uint32_t msc_location = 0;
  uint32_t vlr_location = 0;
  uint16_t bits = 0;  // bit_1 is bit 0
  uint8_t hex[10] = {};
  uint8_t byte2[10] = {};
  char sub_nbr[kSubNbrDigits + 1] = {};  // NUL-terminated
};
struct AccessInfoRow {
  uint8_t present = 0;
  uint8_t data1 = 0, data2 = 0;
  char data3[3] = {};
  char data4[5] = {};
};
struct SpecialFacilityRow {
  uint8_t present = 0;
  uint8_t is_active = 0, error_cntrl = 0, data_a = 0;
  char data_b[5] = {};
};
struct CallForwardingRow {
  uint8_t present = 0;
  uint8_t end_time = 0;
  char numberx[kSubNbrDigits] = {};
};

// Every row of one subscriber at the start.
struct SubscriberData {
  SubscriberRow subscriber;
  AccessInfoRow access_info[kTatpTypes];                           // [ai_type - 1]
  SpecialFacilityRow special_facility[kTatpTypes];                 // [sf_type - 1]
  CallForwardingRow call_forwarding[kTatpTypes][kTatpStartTimes];  // [sf_type - 1][start / 8]
  // Rows present in each table.
  int access_infos() const;
  int special_facilities() const;
  int call_forwardings() const;
};

// The 15-digit subscriber number of s_id (leading zeros).
std::string SubNbr(uint32_t s_id);
// The rows of subscriber s_id (1-based) of the population made from `seed`: the same on every
// target and in every process.
SubscriberData Populate(uint64_t seed, uint32_t s_id);
// CALL_FORWARDING rows of the whole population of `subscribers` at the start.
uint64_t InitialCallForwardings(uint64_t seed, uint32_t subscribers);

// One transaction's input (the fields its type uses; the others are zero).
struct TatpTxn {
  TatpTxnType type = TatpTxnType::kGetSubscriberData;
  uint32_t s_id = 0;                     // every type; by sub_nbr for the last three
  char sub_nbr[kSubNbrDigits + 1] = {};  // UPDATE_LOCATION, *_CALL_FORWARDING
  uint8_t ai_type = 0;                   // GET_ACCESS_DATA
  uint8_t sf_type = 0;                   // GET_NEW_DESTINATION, UPDATE_SUBSCRIBER_DATA, *_CF
  uint8_t start_time = 0;                // GET_NEW_DESTINATION, *_CALL_FORWARDING
  uint8_t end_time = 0;                  // GET_NEW_DESTINATION, INSERT_CALL_FORWARDING
  uint8_t bit_1 = 0;                     // UPDATE_SUBSCRIBER_DATA
  uint8_t data_a = 0;                    // UPDATE_SUBSCRIBER_DATA
  uint32_t vlr_location = 0;             // UPDATE_LOCATION
  char numberx[kSubNbrDigits + 1] = {};  // INSERT_CALL_FORWARDING
};

// What a committed TATP transaction did.
struct TatpOutcome {
  bool found = false;  // it found (and changed) what it looked for: TATP's "successful"
  int cf_delta = 0;    // CALL_FORWARDING rows it added (+1) or removed (-1)
};

// Whether GET_NEW_DESTINATION finds a number in these rows of its subscriber (the spec's query:
// sf.is_active = 1 and some cf with start_time <= t.start_time and t.end_time < end_time).
bool NewDestinationFound(const TatpTxn& t, const SpecialFacilityRow& sf,
                         const CallForwardingRow cf[kTatpStartTimes]);

// Draws transactions of the standard mix over `subscribers` subscribers: s_id by `dist`
// (Distribution::kNurand is TATP's standard non-uniform choice, kUniform its uniform one).
class TatpGenerator {
 public:
  TatpGenerator(Distribution dist, uint32_t subscribers, double theta = 0.99);
  TatpTxn Next(Rng& rng) const;
  uint32_t NextSubscriber(Rng& rng) const { return static_cast<uint32_t>(keys_.Next(rng)) + 1; }
  uint32_t subscribers() const { return static_cast<uint32_t>(keys_.n()); }

 private:
  KeyChooser keys_;
};

// One attempt at `t`: OK once committed (with *out and the commit step's duration), Aborted to
// run again, any other error to stop.
using TatpAttempt =
    std::function<absl::Status(const TatpTxn& t, TatpOutcome* out, double* commit_us)>;

// RunClient for TATP: transactions of the mix until the window's end, back to back (`rate` 0)
// or `rate` a second (the open loop; tools/txn_workload.h). Adds to *stats: commits, found
// (those that found what they looked for) and, as increments, the CALL_FORWARDING rows added
// minus those removed (warm-up included, for the audit).
absl::Status RunTatpClient(const TatpGenerator& gen, const Window& window, double rate,
                           uint64_t seed, const TatpAttempt& attempt, ClientStats* stats);

}  // namespace txnbench
}  // namespace farm

#endif  // FARM_TOOLS_TATP_WORKLOAD_H_
