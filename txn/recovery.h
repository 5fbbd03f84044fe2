// FaRM's recovery vote (SOSP 2015, section 5.3, steps "vote" and "decide"): how the transactions
// of a coordinator that left the cluster are decided, from what every member holds of them.
//
// Every member of one membership epoch (the one the decision is taken in; every member has
// applied it, so it fenced the departed coordinator, and the new primaries of promoted regions
// took their recovery locks) votes on each transaction it holds something of (TxnVote: a
// decision it recorded, what its participant knows as an owner, the regions whose copies here
// keep its COMMIT-BACKUP record, and from that record every region the transaction writes with
// the primary it locked at and the backups the records went to; and the transactions whose
// records it truncated, i.e. applied). RecoveryDecision is a function of those votes and of the
// epoch's region map only, so every member that drives the recovery in one epoch decides alike;
// a decision is recorded by every member before any applies it, so a later epoch's recovery
// finds it (Engine).
//
// The rule, for a transaction:
//   1. a decision some member recorded stands;
//   2. committed at an owner (COMMIT-PRIMARY applied): commit;
//   3. no COMMIT-BACKUP record anywhere (its coordinator never decided commit, or f = 0): abort;
//   4. some owner still holds it locked (so no owner applied or truncated it yet and the records
//      are complete or partial): commit if every written region's current primary holds it
//      (locked, or a promoted backup keeping its record) and every backup the records went to
//      that is still a member, other than that primary, keeps its record; else abort (its
//      COMMIT-BACKUP was partial: no COMMIT-PRIMARY was sent, nobody saw it);
//   5. nobody holds it locked: its coordinator decided commit (there is a record) and no owner
//      aborted it (an ABORT after COMMIT-BACKUP comes only once every record was dropped), so
//      every primary that locked it applied it (and may have truncated its record since), or
//      failed with its locks. Commit, unless a written region's primary failed and its promoted
//      backup, one the records went to, neither keeps its record nor truncated it (a backup
//      remembers what it truncated until the coordinator's truncation bound passes it: below
//      the bound no record is kept anywhere, so no vote is taken): then it never got it, the
//      coordinator failed during COMMIT-BACKUP, before any COMMIT-PRIMARY, and nobody saw the
//      transaction: abort.
// Rule 4 is the case FaRM's vote is for: an owner applied COMMIT-PRIMARY (readers saw the
// writes) and failed with the coordinator; its region's promoted backup keeps the record, every
// other region is locked at its primary: the transaction commits. Rule 5's two sides: a
// coordinator that is its transaction's only owner commits it locally, truncates one backup and
// fails before the other (commit: the first applied it, the second applies its record); or it
// fails between two COMMIT-BACKUP sends (abort: the backup that kept the record drops it).
//
// A record counts only once every part of it arrived (a transaction's writes to one backup may
// take several COMMIT-BACKUPs); a backup added by re-replication after COMMIT-BACKUP holds no
// record, and copied the region once its primary had applied the transaction.
#ifndef FARM_TXN_RECOVERY_H_
#define FARM_TXN_RECOVERY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {

// The membership epoch a decision is taken in: each data region's primary, and the members.
struct RecoveryView {
  absl::flat_hash_map<uint32_t, uint32_t> primary;  // region id -> node id
  absl::flat_hash_set<uint32_t> members;
};

struct RecoveryOutcome {
  bool commit = false;
  std::string why;  // which rule decided (for the logs)
};

// The decision on one transaction from every member's vote on it (member id, vote); members
// that hold nothing of it need not appear.
RecoveryOutcome RecoveryDecision(const std::vector<std::pair<uint32_t, TxnVote>>& votes,
                                 const RecoveryView& view);

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_RECOVERY_H_
