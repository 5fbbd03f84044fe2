// Doorbell: how a same-host peer wakes a node whose poller sleeps.
//
// shm completes one-sided operations that target a node only while that node's poller polls
// (manual progress), and its completion queue has no wait object, so an idle adaptive poller
// could only sleep and poll again: a peer's WRITE to an idle node waited for the sleep to end
// (about 1 ms). A doorbell is one small shared page per node endpoint, a file in /dev/shm beside
// the endpoint's own, that peers on the same host map. The poller that wants to sleep raises the
// page's `sleeping` flag and waits on its `seq` word (a futex shared between processes); a peer
// that posted an operation to it sees the flag and bumps `seq` and wakes it.
//
// No wake-up is lost (a Dekker pair of seq_cst fences):
//   sleeper: s = seq; sleeping = 1; fence; look for work (progress the queue); if none,
//            FUTEX_WAIT(seq, s)    -- returns at once if seq moved on since it was read
//   ringer:  post the operation (its command is in the sleeper's queue); fence;
//            if (sleeping) { ++seq; FUTEX_WAKE(seq) }
// Either the sleeper's look finds the ringer's command, or the ringer sees the flag and moves
// `seq` (so the wait returns at once, or is woken). A ringer that finds nobody asleep pays a
// fence and a load of a shared cache line; no system call.
//
// Thread safety: one thread sleeps on a doorbell (the poller); any thread of any process may
// ring it.
#ifndef FARM_PLATFORM_DOORBELL_H_
#define FARM_PLATFORM_DOORBELL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace farm {

class Doorbell {
 public:
  // Creates the doorbell file at `path` (which must not exist) and maps it; the doorbell removes
  // the file when destroyed.
  static absl::StatusOr<std::unique_ptr<Doorbell>> Create(const std::string& path);
  // Maps a peer's doorbell. NotFound if there is no file at `path` (the peer is on another host,
  // or has none); FailedPrecondition if the file is not a doorbell.
  static absl::StatusOr<std::unique_ptr<Doorbell>> Open(const std::string& path);

  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;
  ~Doorbell();

  const std::string& path() const { return path_; }

  // The sleeper's side, in this order: PrepareSleep, then look for work; if there was some,
  // CancelSleep, else Sleep with the returned ticket.
  uint32_t PrepareSleep();
  void CancelSleep();
  // Waits until a ringer rings (true) or `max_wait` passes (false); lowers the flag.
  bool Sleep(uint32_t ticket, absl::Duration max_wait);

  // The ringer's side: call after posting an operation to the doorbell's owner. Wakes it if it
  // sleeps (or is about to). Returns true if it had to.
  bool Ring();

  // Rings that woke (or would have woken) a sleeper, over the doorbell's lifetime (all processes).
  uint64_t wakeups() const;
  // True between PrepareSleep and the end of Sleep (or CancelSleep), unless a ring came.
  bool sleeping() const;

 private:
  struct Page;
  Doorbell(std::string path, Page* page, bool owner);

  const std::string path_;
  Page* const page_;
  const bool owner_;
};

}  // namespace farm

#endif  // FARM_PLATFORM_DOORBELL_H_
