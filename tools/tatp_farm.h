// TATP's four tables in farm's objects, and its seven transactions as farm transactions, for
// //tools:txn_bench (the population and the mix: tools/tatp_workload.h).
//
//   // node 0: allocate and write the population, then hand the addresses to the other nodes
//   ASSIGN_OR_RETURN(std::vector<uint64_t> packed, TatpFarm::Load(worker, n, seed, place));
//   TatpFarm tatp(n, addresses);                             // every node, the same addresses
//   absl::Status s = tatp.Attempt(worker, txn, &out, &commit_us);   // Aborted: run it again
//   ASSIGN_OR_RETURN(std::string line, tatp.Audit(worker, seed, cf_delta));  // after the run
//
// Layout: direct-mapped, one object per row slot, so that transactions conflict as rows do:
// per subscriber its SUBSCRIBER row, 4 ACCESS_INFO slots (ai_type 1..4), 4 SPECIAL_FACILITY
// slots (sf_type 1..4) and 12 CALL_FORWARDING slots ((sf_type, start_time) with start_time 0, 8,
// 16); a slot's `present` byte says whether the row exists (INSERT/DELETE_CALL_FORWARDING set and
// clear it). All 21 objects of a subscriber are on one node: its SUBSCRIBER row is placed by the
// caller's hint for the s_id, the others by AllocHint::Near(that row), so a transaction on one
// subscriber involves one owner besides the index.
// The sub_nbr index: an open-addressing hash table of IndexBucket objects (4 entries each, at
// most half full), FNV-1a of the 15-digit sub_nbr picking the first bucket, linear probing to
// the next while a bucket is full; each bucket placed by the hint for its own number, so the
// index spreads over the nodes. UPDATE_LOCATION and the CALL_FORWARDING transactions read it
// inside the transaction (its buckets are validated at commit like any read).
//
// Thread safety: a TatpFarm is immutable after construction (safe for concurrent use); each
// thread passes its own Worker.
#ifndef FARM_TOOLS_TATP_FARM_H_
#define FARM_TOOLS_TATP_FARM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "farm/farm.h"
#include "tools/tatp_workload.h"

namespace farm {
namespace txnbench {

class TatpFarm {
 public:
  // SUBSCRIBER 1 + ACCESS_INFO 4 + SPECIAL_FACILITY 4 + CALL_FORWARDING 12.
  static constexpr int kObjectsPerSubscriber = 21;
  // Index buckets for `subscribers` (a power of two, at least subscribers / 2).
  static uint64_t Buckets(uint32_t subscribers);
  // Objects of the whole layout: every subscriber's, then the buckets.
  static uint64_t Objects(uint32_t subscribers);
  // Heap bytes they take (slots of a power of two at or above the row + 24 bytes).
  static uint64_t Bytes(uint32_t subscribers);

  // Where the rows of the subscriber or the bucket with this key go (the caller's choice, e.g.
  // AllocHint::Anywhere(key)).
  using Placement = std::function<AllocHint(uint64_t key)>;
  // Allocates and writes the population of `subscribers` made from `seed`, in transactions of a
  // few subscribers each; returns the packed addresses in the layout's order (Objects() of them).
  static absl::StatusOr<std::vector<uint64_t>> Load(Worker& w, uint32_t subscribers, uint64_t seed,
                                                    const Placement& place);

  // `addresses`: Load's, in its order. InvalidArgument when there are not Objects() of them.
  static absl::StatusOr<TatpFarm> Make(uint32_t subscribers, std::vector<GlobalAddress> addresses);

  // One attempt at `t` in a farm transaction: OK once committed (*out says what it found and
  // changed; a transaction that found nothing commits its reads), Aborted (a conflict: run it
  // again), or another error: InvalidArgument for inputs outside the spec's ranges (s_id 1..P,
  // ai_type and sf_type 1..4, start_time 0, 8 or 16, bit_1 0 or 1; nothing read), DataLoss when
  // the index misses a subscriber or maps its sub_nbr to an s_id outside 1..P. `written`, when
  // given, receives the objects it wrote.
  absl::Status Attempt(Worker& w, const TatpTxn& t, TatpOutcome* out, double* commit_us,
                       std::vector<GlobalAddress>* written = nullptr) const;

  // After the run (no transaction running): every subscriber's row and index entry are right,
  // every CALL_FORWARDING row belongs to an existing SPECIAL_FACILITY row, and the rows number
  // the population's plus `cf_delta` (what the committed transactions added minus removed).
  // Returns a one-line summary, or DataLoss naming the first thing that does not hold.
  absl::StatusOr<std::string> Audit(Worker& w, uint64_t seed, int64_t cf_delta) const;

  uint32_t subscribers() const { return subscribers_; }

 private:
  TatpFarm(uint32_t subscribers, std::vector<GlobalAddress> addresses)
      : subscribers_(subscribers), addresses_(std::move(addresses)) {}

  GlobalAddress Subscriber(uint32_t s_id) const;
  GlobalAddress AccessInfo(uint32_t s_id, int ai_type) const;
  GlobalAddress SpecialFacility(uint32_t s_id, int sf_type) const;
  GlobalAddress CallForwarding(uint32_t s_id, int sf_type, int start_index) const;
  GlobalAddress Bucket(uint64_t b) const;
  // The s_id of `sub_nbr` by the index, each bucket read by `read`; NotFound when it is not there.
  struct IndexBucket;
  using BucketReader = std::function<absl::Status(GlobalAddress, IndexBucket*)>;
  absl::StatusOr<uint32_t> Lookup(const char* sub_nbr, const BucketReader& read) const;
  // The transaction's work before the commit.
  absl::Status Run(Txn& t, const TatpTxn& in, TatpOutcome* out,
                   std::vector<GlobalAddress>* written) const;

  uint32_t subscribers_;
  std::vector<GlobalAddress> addresses_;
};

}  // namespace txnbench
}  // namespace farm

#endif  // FARM_TOOLS_TATP_FARM_H_
