// The repair of libsiw's post_send (libsiw_post_send.h) around stand-ins for libsiw: what it
// passes through, and the doorbell it rings again, written to a pipe in place of the uverbs
// command file. The repair on a real SoftiWARP device runs in the SoftiWARP lane
// (tests/softiwarp, every verbs test).
#include "platform/libsiw_post_send.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace farm {
namespace {

int g_calls = 0;
// libsiw after queueing every request and failing to ring the doorbell (siw_db's write failed).
int DoorbellFailed(ibv_qp*, ibv_send_wr*, ibv_send_wr** bad_wr) {
  ++g_calls;
  *bad_wr = nullptr;
  return -1;
}
// libsiw refusing the first request before queueing it (a full send queue).
int QueueFull(ibv_qp*, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  ++g_calls;
  *bad_wr = wr;
  return -ENOMEM;
}
int Posted(ibv_qp*, ibv_send_wr*, ibv_send_wr** bad_wr) {
  ++g_calls;
  *bad_wr = nullptr;
  return 0;
}

// A queue pair whose context's command file is `fd`.
struct FakeQp {
  ibv_context context{};
  ibv_qp qp{};
  explicit FakeQp(int fd, uint32_t handle) {
    context.cmd_fd = fd;
    qp.context = &context;
    qp.handle = handle;
  }
};

TEST_CASE("libsiw repair: posts that succeed or are refused before queueing pass through") {
  int fds[2];
  REQUIRE(pipe2(fds, O_NONBLOCK) == 0);
  FakeQp q(fds[1], 7);
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  const LibsiwRepairCounts before = LibsiwRepairCountsNow();

  g_calls = 0;
  CHECK(RepairedPostSendForTest(&Posted, &q.qp, &wr, &bad) == 0);
  CHECK(RepairedPostSendForTest(&QueueFull, &q.qp, &wr, &bad) == -ENOMEM);
  CHECK(bad == &wr);
  CHECK(g_calls == 2);
  char byte;
  CHECK(read(fds[0], &byte, 1) == -1);  // no doorbell written
  CHECK(LibsiwRepairCountsNow().rung_again == before.rung_again);
  close(fds[0]);
  close(fds[1]);
}

TEST_CASE("libsiw repair: a failed doorbell after queueing is rung again and reported posted") {
  int fds[2];
  REQUIRE(pipe2(fds, O_NONBLOCK) == 0);
  FakeQp q(fds[1], 42);
  ibv_send_wr wr{};
  ibv_send_wr* bad = reinterpret_cast<ibv_send_wr*>(&q);  // overwritten by the stand-in
  const LibsiwRepairCounts before = LibsiwRepairCountsNow();

  CHECK(RepairedPostSendForTest(&DoorbellFailed, &q.qp, &wr, &bad) == 0);
  CHECK(bad == nullptr);
  CHECK(LibsiwRepairCountsNow().rung_again == before.rung_again + 1);
  // The doorbell as libsiw writes it: a POST_SEND command for this queue pair, no requests.
  unsigned char buf[128];
  const ssize_t n = read(fds[0], buf, sizeof(buf));
  REQUIRE(n == static_cast<ssize_t>(sizeof(ib_uverbs_cmd_hdr) + sizeof(ib_uverbs_post_send)));
  ib_uverbs_cmd_hdr hdr;
  std::memcpy(&hdr, buf, sizeof(hdr));
  CHECK(hdr.command == IB_USER_VERBS_CMD_POST_SEND);
  CHECK(hdr.in_words * 4 == n);
  CHECK(hdr.out_words * 4 == sizeof(ib_uverbs_post_send_resp));
  ib_uverbs_post_send cmd;
  std::memcpy(&cmd, buf + sizeof(hdr), sizeof(cmd));
  CHECK(cmd.qp_handle == 42);
  CHECK(cmd.wr_count == 0);
  CHECK(cmd.sge_count == 0);
  CHECK(cmd.wqe_size >= sizeof(ib_uverbs_send_wr));
  close(fds[0]);
  close(fds[1]);
}

TEST_CASE("libsiw repair: a doorbell the kernel never takes leaves the request queued, posted") {
  // A command file that refuses every write (the pipe's reading end is closed: EPIPE; SIGPIPE is
  // ignored for the test).
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  FakeQp q(fds[1], 3);
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  const LibsiwRepairCounts before = LibsiwRepairCountsNow();

  CHECK(RepairedPostSendForTest(&DoorbellFailed, &q.qp, &wr, &bad) == 0);
  CHECK(LibsiwRepairCountsNow().left_queued == before.left_queued + 1);
  CHECK(LibsiwRepairCountsNow().rung_again == before.rung_again);
  close(fds[1]);
}

TEST_CASE("libsiw repair: no SoftiWARP device here, nothing to repair") {
  // On the hosts this suite runs on outside the SoftiWARP lane there is no RDMA device; the
  // repair must find none and change nothing (and may be asked again).
  CHECK(RepairLibsiwPostSend() >= 0);
  CHECK(RepairLibsiwPostSend() == 0);
}

}  // namespace
}  // namespace farm
