// A repair of SoftiWARP's user library (rdma-core's libsiw, Debian 12's 44.0) that verbs over
// SoftiWARP needs, installed by Fabric::Open for the verbs providers.
//
// libsiw's siw_post_send writes the send requests into the queue pair's memory-mapped send queue
// and then rings the kernel's doorbell (a write() of a POST_SEND command with no requests). When
// the doorbell fails - the kernel's queue pair is closing, or its state lock is held for a state
// change at that moment (siw_post_send's down_read_trylock) - it returns the failure with
// *bad_wr = NULL although every request stays valid in the queue: the kernel sends it at the next
// doorbell, or flushes it when the queue pair enters its error state, with its work request id.
// libfabric 1.17's verbs provider frees that id (its context) on the failure and reuses it for a
// later request of any endpoint of the domain, so the late completion ends another operation
// (with a flush error, on another connection, or on another endpoint's queue), that operation's
// own completion is reported for yet another, and a request the doorbell left in a queue that no
// other doorbell wakes is never sent. Seen in //tools:chaos on SoftiWARP: a healthy peer's WRITE
// or fence READ ended "Work Request Flushed Error" while a node joined (its peer evicted), and
// WRITEs to a healthy peer never completed after another peer was killed (the writer evicted).
// rdma-core fixed the same pattern in libhns (linux-rdma/rdma-core#703).
//
// The repair wraps the post_send of every SoftiWARP device context that librdmacm opened (the
// ones libfabric's verbs provider makes its queue pairs on): when libsiw queued every request and
// only the doorbell failed, it rings the doorbell again until the kernel takes it (bounded), and
// reports success either way, so the provider keeps its context until the request's own
// completion. Other devices and other failures are left alone.
#ifndef FARM_PLATFORM_LIBSIW_POST_SEND_H_
#define FARM_PLATFORM_LIBSIW_POST_SEND_H_

struct ibv_qp;
struct ibv_send_wr;

namespace farm {

// Wraps the post_send of the SoftiWARP device contexts librdmacm has open (once per context;
// later calls find them wrapped). Returns how many contexts it wrapped now. Call before the
// first request is posted on them (Fabric::Open does, after opening a verbs domain).
int RepairLibsiwPostSend();

// Doorbells the repair rang again, and requests it reported as posted although no doorbell was
// taken within its bound (the kernel flushes them when their queue pair enters its error state).
struct LibsiwRepairCounts {
  unsigned long rung_again = 0;
  unsigned long left_queued = 0;
};
LibsiwRepairCounts LibsiwRepairCountsNow();

// For tests: the repaired post_send around `original` (in place of libsiw's).
using LibsiwPostSend = int (*)(struct ibv_qp*, struct ibv_send_wr*, struct ibv_send_wr**);
int RepairedPostSendForTest(LibsiwPostSend original, struct ibv_qp* qp, struct ibv_send_wr* wr,
                            struct ibv_send_wr** bad_wr);

}  // namespace farm

#endif  // FARM_PLATFORM_LIBSIW_POST_SEND_H_
