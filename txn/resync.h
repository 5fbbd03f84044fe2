// Resync: re-replication's copier (docs/replication.md, step 4). When the CM gives a region that
// lost a copy a new backup on this node (control.RegionInfo.syncing_backup), this node's backup
// log starts receiving the region's COMMIT-BACKUP records at once, and Resync copies what the
// region held before, from its primary, while commits go on:
//   1. RESYNC to the primary: the region's layout (each block's slot class, the object arrays),
//      answered once the primary applied the membership that added this backup. That membership
//      fenced every request sent before it (control.Membership.fence_epoch), so from then on the
//      primary grants no LOCK to a coordinator that still knows the old backups: every commit
//      that will change the region and is not in this node's log holds its objects' locks
//      already.
//   2. One-sided READs of each carved block (paced), each slot installed into this node's copy
//      where it is newer than what the copy holds (BackupLog::InstallCopied, the rule of
//      truncation, so copied slots and records may arrive in any order). A slot that is locked
//      (its commit has not finished) or torn (the READ overlapped a write) is read again until
//      it is neither: its commit applied, or aborted.
//   3. Reports the copy complete (Node::ReportBackupSynced), and again every second while the
//      membership still lists the copy as syncing (a report is best effort); the CM then lists
//      this node as a backup like the others, one that may be promoted.
// A copy under way starts again if the region's primary changes (a promotion); it is dropped if
// the membership no longer lists this node as the region's syncing backup.
//
// Thread safety: OnMembership is called by the membership listener; the copying runs on the
// copier's own thread, with a messaging lane of its own (the runtime reserves one).
#ifndef FARM_TXN_RESYNC_H_
#define FARM_TXN_RESYNC_H_

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "messaging/rpc.h"
#include "platform/node.h"
#include "txn/backup_log.h"

namespace farm {
namespace txn {

class Resync {
 public:
  // The argument of the sync point "Resync::Copy" (tests hold a node's copying there).
  struct CopyPoint {
    uint32_t node = 0;
    uint32_t region = 0;
  };
  struct Options {
    // Blocks of layout per RESYNC answer (one byte each: well within a ring message).
    uint64_t layout_blocks = 4096;
    // Pause after each block READ, so that copying leaves the primary's poller and the network
    // to foreground work (pacing).
    absl::Duration pause = absl::Milliseconds(1);
  };
  Resync(Node* node, Rpc* rpc, BackupLog* log, Options options);
  Resync(Node* node, Rpc* rpc, BackupLog* log) : Resync(node, rpc, log, Options()) {}
  Resync(const Resync&) = delete;
  Resync& operator=(const Resync&) = delete;
  ~Resync();  // Stop()s

  // Takes the regions `m` lists this node as a syncing backup of. Never blocks on the copying.
  void OnMembership(const control::Membership& m);
  // Ends the copier's thread (a copy under way is abandoned). Idempotent.
  void Stop();

  // Regions this node copied completely so far (for tests and logs).
  uint64_t regions_copied() const;

 private:
  struct Job {
    uint32_t region = 0;
    uint64_t epoch = 0;    // the membership in which this node saw itself syncing it first
    uint32_t primary = 0;  // the primary it copies from
  };
  void Loop();
  // Copies one region: OK once complete; Aborted when the job no longer holds (see the file
  // comment); other errors are retried after a pause.
  absl::Status Copy(const Job& job);
  // Whether `job` is still the one wanted for its region.
  bool StillWanted(const Job& job) const;
  absl::Status FetchLayout(const Job& job, RegionLayout* layout);
  // READs `size` bytes at `offset` of the job's region into the copier's buffer.
  absl::Status ReadInto(const Job& job, uint64_t offset, uint64_t size);

  Node* const node_;
  Rpc* const rpc_;
  BackupLog* const log_;
  const Options options_;
  Messenger::LaneLease lane_;  // acquired when the first copy starts

  // The READ buffer (registered), and those abandoned with a READ still in flight after an error.
  std::unique_ptr<Region> buffer_;
  std::unique_ptr<MemoryRegistration> buffer_mr_;
  struct Abandoned {
    std::unique_ptr<Region> buffer;
    std::unique_ptr<MemoryRegistration> mr;
    OpBatch::InFlight in_flight;
  };
  std::vector<Abandoned> abandoned_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<uint32_t, Job> wanted_;  // by region: the current membership's syncing regions
  std::set<uint32_t> copied_;       // of those, the ones copied (reported)
  absl::Time report_again_at_;      // when copied_ is reported (again) to the CM
  uint64_t regions_copied_ = 0;
  // The copier thread's own: the last copy that failed, and when it may be said again.
  uint32_t failed_region_ = UINT32_MAX;
  uint32_t failed_primary_ = UINT32_MAX;
  absl::Time failed_warn_at_;
  std::thread thread_;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_RESYNC_H_
