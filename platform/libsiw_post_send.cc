#include "platform/libsiw_post_send.h"

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

using PostSend = int (*)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);

// libsiw's own siw_post_send (the same function for every SoftiWARP context).
std::atomic<PostSend> g_libsiw_post_send{nullptr};
std::atomic<unsigned long> g_rung_again{0};
std::atomic<unsigned long> g_left_queued{0};

// How long one post keeps ringing: the kernel's state lock is held for microseconds by a state
// change, and a closing queue pair reaches its error state (where the doorbell is taken and the
// queue flushed) within milliseconds; one that never does is being destroyed anyway.
constexpr absl::Duration kRingFor = absl::Milliseconds(200);

// The doorbell exactly as libsiw rings it (its qp->db_req): a legacy uverbs POST_SEND command with
// no work requests, written to the context's command file; the kernel's siw_post_send then starts
// sending what the memory-mapped queue holds (or flushes it in the error state).
struct DoorbellCommand {
  ib_uverbs_cmd_hdr hdr;
  uint64_t response;
  uint32_t qp_handle;
  uint32_t wr_count;
  uint32_t sge_count;
  uint32_t wqe_size;
};
static_assert(sizeof(DoorbellCommand) == sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_post_send),
              "the POST_SEND command's layout");

bool RingDoorbell(ibv_qp* qp) {
  ib_uverbs_post_send_resp resp{};
  DoorbellCommand cmd{};
  cmd.hdr.command = IB_USER_VERBS_CMD_POST_SEND;
  cmd.hdr.in_words = sizeof(cmd) / 4;
  cmd.hdr.out_words = sizeof(resp) / 4;
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.qp_handle = qp->handle;
  cmd.wqe_size = sizeof(ibv_send_wr);
  return write(qp->context->cmd_fd, &cmd, sizeof(cmd)) == static_cast<ssize_t>(sizeof(cmd));
}

void Note(std::atomic<unsigned long>& counter, const char* what) {
  const unsigned long n = counter.fetch_add(1, std::memory_order_relaxed) + 1;
  if ((n & (n - 1)) == 0) {  // 1, 2, 4, ...: a few lines however many
    spdlog::warn(
        "SoftiWARP: libsiw queued a send request but could not ring the kernel's "
        "doorbell (the queue pair was closing or changing state); {} ({} so far)",
        what, n);
  }
}

int Repaired(PostSend original, ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  const int rv = original(qp, wr, bad_wr);
  // A request libsiw refused before queueing it names itself in *bad_wr (a full queue, a bad
  // request): a real refusal. Otherwise the failure was the doorbell's, after queueing them all.
  if (rv == 0 || wr == nullptr || *bad_wr != nullptr) return rv;
  const absl::Time deadline = absl::Now() + kRingFor;
  for (int tries = 1;; ++tries) {
    if (RingDoorbell(qp)) {
      Note(g_rung_again, "rang it again");
      return 0;
    }
    if (absl::Now() > deadline) break;
    if (tries % 64 == 0) {
      absl::SleepFor(absl::Microseconds(100));
    } else {
      sched_yield();
    }
  }
  // Still queued: reported as posted, so that its completion (a flush once the queue pair enters
  // its error state) finds the provider's context still its own.
  Note(g_left_queued, "left it queued for the kernel to flush");
  return 0;
}

int RepairedPostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return Repaired(g_libsiw_post_send.load(std::memory_order_acquire), qp, wr, bad_wr);
}

}  // namespace

int RepairedPostSendForTest(LibsiwPostSend original, ibv_qp* qp, ibv_send_wr* wr,
                            ibv_send_wr** bad_wr) {
  return Repaired(original, qp, wr, bad_wr);
}

int RepairLibsiwPostSend() {
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  int n = 0;
  ibv_context** devices = rdma_get_devices(&n);
  if (devices == nullptr) return 0;
  int wrapped = 0;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = devices[i];
    if (ctx == nullptr || ctx->device == nullptr) continue;
    if (std::strncmp(ibv_get_device_name(ctx->device), "siw", 3) != 0) continue;
    PostSend current = ctx->ops.post_send;
    if (current == &RepairedPostSend) continue;
    PostSend expected = nullptr;
    if (!g_libsiw_post_send.compare_exchange_strong(expected, current) && expected != current) {
      spdlog::warn("SoftiWARP: device {} has a post_send of its own; not repaired",
                   ibv_get_device_name(ctx->device));
      continue;
    }
    ctx->ops.post_send = &RepairedPostSend;
    ++wrapped;
  }
  rdma_free_devices(devices);
  if (wrapped > 0) {
    spdlog::debug("SoftiWARP: libsiw's post_send repaired on {} device context(s)", wrapped);
  }
  return wrapped;
}

LibsiwRepairCounts LibsiwRepairCountsNow() {
  LibsiwRepairCounts c;
  c.rung_again = g_rung_again.load(std::memory_order_relaxed);
  c.left_queued = g_left_queued.load(std::memory_order_relaxed);
  return c;
}

}  // namespace farm
