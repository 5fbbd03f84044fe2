#include "platform/fabric.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "platform/sync_point.h"
#include "platform/testing/fabric_pair.h"
#include "platform/testing/test_env.h"

// LeakSanitizer (the ASan lane of .ci/run) reads this hook from the test binary. With the tcp
// provider's connected (MSG) endpoints, an object of 336 bytes that libfabric allocates inside
// fi_eq_read while it reports a connection request stays allocated after its endpoint was
// accepted and closed ("two threads READ and WRITE through their own channels", tcp only). Our
// code frees every fi_info the event queue hands it (FreeEventInfo and the FI_CONNREQ branch in
// fabric.cc; checked by logging each event and its info), so what remains is owned by the
// provider (its connection-request handle, by size and place). Scoped to this binary.
extern "C" const char* __lsan_default_suppressions() { return "leak:libfabric.so.1\n"; }

namespace farm {
namespace {

using testing::AnyProvider;
using testing::TestHost;
using testing::TestProviders;

using Pair = testing::FabricPair;

// The lane fabric_test_no_attach: shm without cross-memory attach (Fabric::direct_writes).
bool ShmAttachOff() {
  const char* v = std::getenv("FI_SHM_DISABLE_CMA");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace

TEST_CASE("unknown provider is refused with the list of names", "[fabric]") {
  FabricOptions o;
  o.provider = "infiniband-please";
  auto f = Fabric::Open(o);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.status().message().find("tcp;ofi_rxm") != std::string::npos);
}

TEST_CASE("auto resolves to a concrete provider", "[fabric]") {
  std::string p = ResolveProvider("auto");
  CHECK((p == "verbs" || p == "tcp;ofi_rxm"));
  CHECK(ResolveProvider("shm") == "shm");
}

TEST_CASE("shm files of processes that are gone are removed, no others", "[fabric]") {
  char tmpl[] = "/tmp/fabric_test_shm.XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);  // gone: its id names no process now
  const std::vector<std::string> names = {
      absl::StrCat(kShmNamePrefix, child, "-0-1a2b"),     // stale
      absl::StrCat(kShmNamePrefix, getpid(), "-0-1a2b"),  // this process's
      absl::StrCat(kShmNamePrefix, "x-0"),                // not ours
      absl::StrCat(child, ":0:0"),                        // not ours
  };
  for (const std::string& n : names) {
    FILE* f = std::fopen(absl::StrCat(dir, "/", n).c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
  }
  CHECK(RemoveStaleShmFiles(dir) == 1);
  CHECK(access(absl::StrCat(dir, "/", names[0]).c_str(), F_OK) != 0);
  for (size_t i = 1; i < names.size(); ++i) {
    CHECK(access(absl::StrCat(dir, "/", names[i]).c_str(), F_OK) == 0);
    unlink(absl::StrCat(dir, "/", names[i]).c_str());
  }
  rmdir(dir.c_str());
  CHECK(ShmEndpointName() != ShmEndpointName());
}

TEST_CASE("an shm endpoint opens even where a dead process with this id left its files",
          "[fabric]") {
  if (TestProviders({"shm"}).empty()) return;
  // libfabric's shm would name this process's endpoints /dev/shm/PID:0:N; a process that died
  // with this id and left them made fi_enable fail ("Device or resource busy").
  std::vector<std::string> planted;
  for (int n = 0; n < 8; ++n) {
    const std::string path = absl::StrCat("/dev/shm/", getpid(), ":0:", n);
    if (access(path.c_str(), F_OK) == 0) continue;
    FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fclose(f);
    planted.push_back(path);
  }
  {
    Pair p("shm");
    std::memset(p.abuf.data(), 'x', 64);
    OpBatch batch(p.a.get());
    REQUIRE(batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64}).ok());
    absl::Status ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    CHECK(ws.ok());
    CHECK(p.bbuf[63] == 'x');
    // A channel's endpoint is named the same way.
    absl::StatusOr<std::unique_ptr<FabricChannel>> channel = p.a->OpenChannel();
    INFO(channel.status().ToString());
    REQUIRE(channel.ok());
    OpBatch on_channel(channel->get());
    REQUIRE(on_channel.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data() + 64, 64}).ok());
    absl::Status rs = on_channel.Wait(absl::Seconds(10));
    INFO(rs.ToString());
    CHECK(rs.ok());
    CHECK(p.abuf[64 + 63] == 'x');
  }
  for (const std::string& path : planted) unlink(path.c_str());
}

TEST_CASE("one-sided WRITE then READ round-trips bytes", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  for (size_t i = 0; i < 4096; ++i) p.abuf[i] = static_cast<char>(i * 7 + 3);
  // WRITE ending exactly at the end of the target registration.
  const size_t off = p.bbuf.size() - 4096;
  OpBatch batch(p.a.get());
  REQUIRE(batch.Write(p.b_from_a, p.Remote(off), {p.amr.get(), p.abuf.data(), 4096}).ok());
  {
    auto ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    REQUIRE(ws.ok());
  }
  CHECK(std::memcmp(p.bbuf.data() + off, p.abuf.data(), 4096) == 0);

  std::memset(p.abuf.data() + 8192, 0, 4096);
  REQUIRE(batch.Read(p.b_from_a, p.Remote(off), {p.amr.get(), p.abuf.data() + 8192, 4096}).ok());
  {
    auto ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    REQUIRE(ws.ok());
  }
  CHECK(std::memcmp(p.abuf.data() + 8192, p.abuf.data(), 4096) == 0);
}

TEST_CASE("open fabrics leave the code of libc's memory functions unchanged", "[fabric]") {
  // libfabric's registration cache (used by verbs) starts a memory monitor when a domain opens;
  // its default one rewrites the first bytes of these functions while the process runs, which
  // crashed other threads (fabric.cc, kMrCacheMaxCount). Their code must be the same while two
  // fabrics are open, with memory registered and a peer added, as before.
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(libc != nullptr);
  constexpr size_t kBytes = 16;  // longer than the patch (a 13-byte jump on x86-64)
  std::vector<std::pair<std::string, std::string>> before;
  for (const char* name : {"mmap", "munmap", "mremap", "madvise", "brk", "shmdt"}) {
    const void* code = dlsym(libc, name);
    INFO(name);
    REQUIRE(code != nullptr);
    before.emplace_back(name, std::string(static_cast<const char*>(code), kBytes));
  }
  {
    Pair p(provider);
    OpBatch batch(p.a.get());
    REQUIRE(batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64}).ok());
    REQUIRE(batch.Wait(absl::Seconds(10)).ok());
    for (const auto& [name, bytes] : before) {
      INFO(name);
      CHECK(std::string(static_cast<const char*>(dlsym(libc, name.c_str())), kBytes) == bytes);
    }
  }
  dlclose(libc);
}

// A completed WRITE is in the target's memory: the ring buffers and the public API's Write rely on
// it. On iWARP (SoftiWARP) a WRITE completes at its sender once handed to the connection, before
// it is placed (README, Providers; Fabric::write_fence). Over SoftiWARP's idle loopback the bytes
// are almost always placed by then; with 1 ms of netem delay (the lane's fabric_test_delayed)
// all 300 were late before the fence.
TEST_CASE("a WRITE's bytes are in the target's memory once its batch completed", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  const size_t size = std::min(p.abuf.size(), p.bbuf.size());
  int late = 0;
  for (int round = 0; round < 300; ++round) {
    for (size_t i = 0; i < size; i += 4096) p.abuf[i] = static_cast<char>(round + i / 4096);
    p.abuf[size - 1] = static_cast<char>(~round);
    OpBatch batch(p.a.get());
    REQUIRE(batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), size}).ok());
    auto ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    REQUIRE(ws.ok());
    // Read at once, as a thread of the target would; a volatile read so that it is not hoisted.
    const volatile char* target = p.bbuf.data();
    bool whole = target[size - 1] == p.abuf[size - 1];
    for (size_t i = 0; whole && i < size; i += 4096) whole = target[i] == p.abuf[i];
    if (!whole) ++late;
  }
  CHECK(late == 0);
}

// WRITEs posted behind a READ on one connection while another thread posts to a second peer
// through the same endpoint (as the messenger's lanes share the node's endpoint). SoftiWARP
// completes a WRITE once it is sent and a READ only when its answer arrives, so an unfenced
// WRITE's completion overtakes the READ's. libfabric 1.17's verbs provider assumes that a
// connection's completions come in posting order: it unlinks the READ's bookkeeping, frees the
// WRITE's while still linked, hands it to the post to the other peer, and a later completion
// walks off the end of the list (SIGSEGV in fi_cq_read, as in an rpc_storm_test node). Over
// SoftiWARP's loopback the answer usually arrives before the next post; the lane also runs this
// with 1 ms of netem delay on the loopback device, where it did not survive 1000 rounds unfenced.
TEST_CASE("WRITEs behind a READ and WRITEs to a second peer on one endpoint all complete",
          "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  FabricOptions o;
  o.provider = provider;
  o.bind_host = TestHost();
  absl::StatusOr<std::unique_ptr<Fabric>> c = Fabric::Open(o);
  REQUIRE(c.ok());
  std::vector<char> cbuf(4096);
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> cmr =
      (*c)->Register(cbuf.data(), cbuf.size());
  REQUIRE(cmr.ok());
  absl::StatusOr<PeerId> c_from_a = p.a->AddPeer((*c)->address());
  REQUIRE(c_from_a.ok());
  std::atomic<bool> polling{true}, running{true};
  std::thread c_poller([&] {
    while (polling.load()) (*c)->Progress();
  });

  const size_t half = p.abuf.size() / 2;  // READs land in the first half, WRITEs leave the second
  for (size_t i = 0; i < 64; ++i) p.bbuf[i] = static_cast<char>(i * 13);
  std::atomic<int> c_rounds{0};
  std::string c_error;
  std::thread to_c([&] {
    for (int round = 0; running.load(); ++round) {
      OpBatch batch(p.a.get());
      absl::Status s;
      for (int w = 0; w < 2 && s.ok(); ++w) {
        char* src = p.abuf.data() + half + 1024 + w * 64;
        std::memset(src, round + w, 64);
        s = batch.Write(*c_from_a, RemoteBuffer{(*cmr)->remote_base() + w * 64, (*cmr)->key()},
                        {p.amr.get(), src, 64});
      }
      if (s.ok()) s = batch.Wait(absl::Seconds(10));
      if (!s.ok()) {
        c_error = s.ToString();
        return;
      }
      c_rounds.fetch_add(1);
    }
  });
  std::string b_error;
  // 1000 rounds, and on until the thread writing to c completed one (on a loaded machine it may
  // not have been scheduled yet; a CI run saw 0), within a minute.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int last = -1;  // the last round to b
  for (int round = 0; (round < 1000 || (c_rounds.load() == 0 && absl::Now() < deadline)) &&
                      b_error.empty();
       ++round) {
    last = round;
    OpBatch batch(p.a.get());
    std::memset(p.abuf.data(), 0, 64);
    absl::Status s = batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64});
    for (int w = 0; w < 3 && s.ok(); ++w) {
      char* src = p.abuf.data() + half + w * 64;
      std::memset(src, round + w, 64);
      s = batch.Write(p.b_from_a, p.Remote(half + w * 64), {p.amr.get(), src, 64});
    }
    if (s.ok()) s = batch.Wait(absl::Seconds(10));
    if (!s.ok()) {
      b_error = absl::StrCat("round ", round, ": ", s.ToString());
    } else if (std::memcmp(p.abuf.data(), p.bbuf.data(), 64) != 0) {
      b_error = absl::StrCat("round ", round, ": the READ brought other bytes");
    }
  }
  running = false;
  to_c.join();
  polling = false;  // after the last WRITE to c completed (shm and tcp need c's progress)
  c_poller.join();
  INFO("to b: " << b_error << "; to c: " << c_error);
  CHECK(b_error.empty());
  CHECK(c_error.empty());
  CHECK(c_rounds.load() > 0);
  // The last round's WRITEs are in b's memory.
  if (b_error.empty()) {
    for (int w = 0; w < 3; ++w) CHECK(p.bbuf[half + w * 64] == static_cast<char>(last + w));
  }
}

TEST_CASE("WRITEs around the provider's split size land whole", "[fabric]") {
  // shm posts WRITEs between its inject size and twice that as pieces (Fabric::write_piece);
  // every size around those edges must land byte for byte, at an unaligned offset too.
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm"})));
  INFO("provider " << provider);
  Pair p(provider);
  const size_t piece = p.a->write_piece() > 0 ? p.a->write_piece() : 4096;
  // Not split where shm places WRITEs itself (one system call whatever the size).
  if (provider == "shm") CHECK((p.a->write_piece() > 0) != p.a->direct_writes());
  for (size_t size : {piece - 1, piece, piece + 1, piece + 32, 2 * piece - 1, 2 * piece,
                      2 * piece + 1, 3 * piece + 5}) {
    INFO("size " << size);
    REQUIRE(size + 3 <= p.abuf.size());
    for (size_t i = 0; i < size; ++i) p.abuf[i] = static_cast<char>(i * 13 + size);
    std::memset(p.bbuf.data(), 0, p.bbuf.size());
    OpBatch batch(p.a.get());
    REQUIRE(batch.Write(p.b_from_a, p.Remote(3), {p.amr.get(), p.abuf.data(), size}).ok());
    auto ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    REQUIRE(ws.ok());
    CHECK(batch.outstanding() == 0);
    CHECK(std::memcmp(p.bbuf.data() + 3, p.abuf.data(), size) == 0);
    CHECK(p.bbuf[2] == 0);
    CHECK(p.bbuf[3 + size] == 0);
  }
}

TEST_CASE("a post that finds the provider busy ends with the batch's abandon error", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm"})));
  INFO("provider " << provider);
  Pair p(provider);
  SyncPoint* sp = SyncPoint::GetInstance();
  std::atomic<int> attempts{0};
  sp->SetCallBack("Fabric::Post:Busy", [&](void* arg) {
    *static_cast<bool*>(arg) = true;  // every attempt finds the provider busy
    ++attempts;
  });
  sp->EnableProcessing();
  OpBatch batch(p.a.get());
  int asked = 0;
  // The destination leaves the membership while the post retries.
  batch.set_post_abandon([&]() -> absl::Status {
    return ++asked < 5 ? absl::OkStatus() : absl::UnavailableError("node 1 left");
  });
  const absl::Status s = batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64});
  sp->Reset();
  INFO(s.ToString());
  CHECK(absl::IsUnavailable(s));
  CHECK(s.message() == "node 1 left");
  CHECK(asked == 5);
  CHECK(attempts.load() == 5);
  CHECK(batch.outstanding() == 0);  // nothing was posted, nothing is left in flight
  CHECK(batch.Wait(absl::Seconds(10)).message() == "node 1 left");
  // Once the provider takes posts again, so does a batch.
  OpBatch next(p.a.get());
  REQUIRE(next.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64}).ok());
  CHECK(next.Wait(absl::Seconds(10)).ok());
}

TEST_CASE("an shm target asleep on its doorbell is woken by a peer's WRITE and READ", "[fabric]") {
  const std::vector<std::string> providers = TestProviders({"shm", "tcp;ofi_rxm", "tcp"});
  if (std::find(providers.begin(), providers.end(), "shm") == providers.end()) return;
  Pair p("shm");
  REQUIRE(p.b->can_wait());
  REQUIRE(p.b->doorbell() != nullptr);
  p.paused = true;  // from now on only the waiter below progresses b
  std::atomic<bool> stop{false}, exited{false};
  std::thread waiter([&] {
    // An idle adaptive poller's wait, with a sleep far longer than the test's deadlines: an
    // operation completes only if the doorbell wakes b.
    while (!stop.load()) p.b->WaitForProgress(absl::Hours(1));
    exited = true;
  });
  struct StopWaiter {  // also when a REQUIRE ends the test early
    Pair& p;
    std::atomic<bool>& stop;
    std::atomic<bool>& exited;
    std::thread& waiter;
    ~StopWaiter() {
      stop = true;
      while (!exited.load()) {
        p.b->Wake();
        std::this_thread::yield();
      }
      waiter.join();
    }
  } stop_waiter{p, stop, exited, waiter};
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    while (!p.b->doorbell()->sleeping()) std::this_thread::yield();
    const uint64_t before = p.b->doorbell()->wakeups();
    std::memset(p.abuf.data(), 'a' + round, 64);
    OpBatch batch(p.a.get());
    absl::Status s = batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 64});
    INFO(s.ToString());
    REQUIRE(s.ok());
    s = batch.Wait(absl::Seconds(60));
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(p.bbuf[63] == 'a' + round);
    CHECK(p.b->doorbell()->wakeups() > before);  // round 0 also rings for the first contact
    while (!p.b->doorbell()->sleeping()) std::this_thread::yield();
    REQUIRE(batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data() + 64, 64}).ok());
    s = batch.Wait(absl::Seconds(60));
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(p.abuf[64 + 63] == 'a' + round);
  }
}

// Fabric::direct_writes: where shm may attach to its peers' memory (always to this process's own
// endpoints, as here, unless FI_SHM_DISABLE_CMA turns it off: the lane fabric_test_no_attach),
// it places WRITEs longer than its inject size itself and serves READs itself, so both complete
// while the target never progresses its queue, and the WRITE's bytes are there at once. Otherwise
// WRITEs wait for the target (delivery-complete), which is what the rest of this file tests there.
TEST_CASE("shm completes WRITEs and READs to a target that never progresses, where it may attach",
          "[fabric]") {
  const std::vector<std::string> providers = TestProviders({"shm", "tcp;ofi_rxm", "tcp"});
  if (std::find(providers.begin(), providers.end(), "shm") == providers.end()) return;
  Pair p("shm", 1 << 17);
  std::unique_ptr<FabricChannel> channel;
  {
    absl::StatusOr<std::unique_ptr<FabricChannel>> c = p.a->OpenChannel();
    REQUIRE(c.ok());
    channel = std::move(*c);
  }
  // First contact (shm's name exchange) needs the target's progress: one round each while b's
  // poller runs.
  {
    OpBatch batch(p.a.get()), on_channel(channel.get());
    REQUIRE(batch.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8}).ok());
    REQUIRE(batch.Wait(absl::Seconds(10)).ok());
    REQUIRE(on_channel.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8}).ok());
    REQUIRE(on_channel.Wait(absl::Seconds(10)).ok());
  }
  if (ShmAttachOff()) {
    CHECK_FALSE(p.a->direct_writes());
    CHECK(p.a->write_piece() > 0);
    return;
  }
  REQUIRE(p.a->direct_writes());
  p.paused = true;  // b's queue is never progressed again
  // Fewer operations than shm's command queue holds: each leaves a notice there for b. WRITEs
  // longer than the inject size (shorter ones go through b's queue).
  for (int round = 0; round < 40; ++round) {
    INFO("round " << round);
    const size_t size = round % 2 == 0 ? 4096 + 1 : 3 * 4096 + 5;
    const size_t off = 1024 + static_cast<size_t>(round) * 7;
    for (size_t i = 0; i < size; ++i) p.abuf[i] = static_cast<char>(i * 3 + round);
    OpBatch on_fabric(p.a.get()), on_channel(channel.get());
    OpBatch& batch = round % 4 < 2 ? on_fabric : on_channel;
    absl::Status s = batch.Write(p.b_from_a, p.Remote(off), {p.amr.get(), p.abuf.data(), size});
    INFO(s.ToString());
    REQUIRE(s.ok());
    s = batch.Wait(absl::Seconds(60));
    INFO(s.ToString());
    REQUIRE(s.ok());
    const volatile char* target = p.bbuf.data() + off;
    bool whole = true;
    for (size_t i = 0; whole && i < size; ++i) whole = target[i] == p.abuf[i];
    CHECK(whole);
    std::memset(p.abuf.data() + 65536, 0, size);
    s = batch.Read(p.b_from_a, p.Remote(off), {p.amr.get(), p.abuf.data() + 65536, size});
    INFO(s.ToString());
    REQUIRE(s.ok());
    s = batch.Wait(absl::Seconds(60));
    INFO(s.ToString());
    REQUIRE(s.ok());
    CHECK(std::memcmp(p.abuf.data() + 65536, p.abuf.data(), size) == 0);
  }
}

TEST_CASE("a batch of many operations completes together", "[fabric]") {
  Pair p(AnyProvider());
  OpBatch batch(p.a.get());
  for (int i = 0; i < 64; ++i) {
    p.abuf[i * 64] = static_cast<char>(i + 1);
    REQUIRE(
        batch.Write(p.b_from_a, p.Remote(i * 64), {p.amr.get(), p.abuf.data() + i * 64, 64}).ok());
  }
  {
    auto ws = batch.Wait(absl::Seconds(10));
    INFO(ws.ToString());
    REQUIRE(ws.ok());
  }
  CHECK(batch.outstanding() == 0);
  for (int i = 0; i < 64; ++i) CHECK(p.bbuf[i * 64] == static_cast<char>(i + 1));
}

TEST_CASE("local buffers outside their registration are refused before posting", "[fabric]") {
  Pair p(AnyProvider());
  OpBatch batch(p.a.get());
  absl::Status s =
      batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data() + p.abuf.size() - 8, 16});
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(batch.Wait(absl::Seconds(1)).code() == absl::StatusCode::kInvalidArgument);
  CHECK(batch.Wait(absl::Seconds(1)).ok());  // The error is reported once.
}

// Remote keys are checked by the target's provider on tcp;ofi_rxm, tcp and verbs: the READ ends in
// an error completion, and no byte moves. shm with cross-memory attach does not check keys at all
// (its READs copy straight from the peer's address space), so there the READ completes and the
// bytes arrive; this is why the node runtime never posts an address it has not resolved to a
// region. On either kind of provider a timeout is a failure: a refused key must be reported, not
// left hanging.
TEST_CASE("a READ with a wrong remote key is refused, except on shm which ignores keys",
          "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  if (provider == "shm" && ShmAttachOff()) {
    // Without cross-memory attach, shm's target checks the key, and libfabric 1.17 then drops the
    // READ without an answer (smr_progress_cmd_rma returns before responding): it would never
    // complete. The runtime never posts an address it has not resolved to a region.
    return;
  }
  Pair p(provider);
  for (size_t i = 0; i < 64; ++i) p.bbuf[i] = static_cast<char>(i * 5 + 1);
  std::memset(p.abuf.data(), 0, 64);
  OpBatch batch(p.a.get());
  RemoteBuffer bad = p.Remote(0);
  bad.key += 1000;
  REQUIRE(batch.Read(p.b_from_a, bad, {p.amr.get(), p.abuf.data(), 64}).ok());
  absl::Status s = batch.Wait(absl::Seconds(10));
  INFO(s.ToString());
  REQUIRE_FALSE(absl::IsDeadlineExceeded(s));
  CHECK(batch.outstanding() == 0);
  if (p.a->provider() == "shm") {
    CHECK(s.ok());
    CHECK(std::memcmp(p.abuf.data(), p.bbuf.data(), 64) == 0);
  } else {
    // The error completion (Fabric::Progress), not a refusal at posting time.
    CHECK(absl::IsUnavailable(s));
    CHECK(s.message().find("READ of 64 bytes") != absl::string_view::npos);
    CHECK(std::all_of(p.abuf.begin(), p.abuf.begin() + 64, [](char c) { return c == 0; }));
  }
}

// FaRM's thread model: each thread posts on its own channel and reaps its own completions.
// Two threads READ and WRITE through their channels at once, each in its own part of b's buffer;
// every byte is checked, on b's side and read back.
TEST_CASE("two threads READ and WRITE through their own channels concurrently", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  constexpr int kThreads = 2;
  constexpr size_t kSlice = 8192;  // each thread's part of abuf and of bbuf
  constexpr int kRounds = 50;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto channel = p.a->OpenChannel();
      if (!channel.ok()) {
        errors[t] = channel.status().ToString();
        return;
      }
      OpBatch batch(channel->get());
      char* src = p.abuf.data() + t * 2 * kSlice;
      char* dst = src + kSlice;
      for (int round = 0; round < kRounds && errors[t].empty(); ++round) {
        const size_t len = 8 + (round * 997) % (kSlice - 8);
        for (size_t i = 0; i < len; ++i) src[i] = static_cast<char>(t * 101 + round * 7 + i);
        std::memset(dst, 0, len);
        absl::Status s = batch.Write(p.b_from_a, p.Remote(t * kSlice), {p.amr.get(), src, len});
        if (s.ok()) s = batch.Wait(absl::Seconds(10));
        if (s.ok()) s = batch.Read(p.b_from_a, p.Remote(t * kSlice), {p.amr.get(), dst, len});
        if (s.ok()) s = batch.Wait(absl::Seconds(10));
        if (!s.ok()) {
          errors[t] = absl::StrCat("round ", round, ": ", s.ToString());
        } else if (std::memcmp(dst, src, len) != 0) {
          errors[t] = absl::StrCat("round ", round, ": READ returned other bytes than written");
        } else if (std::memcmp(p.bbuf.data() + t * kSlice, src, len) != 0) {
          errors[t] = absl::StrCat("round ", round, ": the target holds other bytes than written");
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    CHECK(errors[t] == "");
  }
}

// Completions go to the channel that posted: while one channel's READ is outstanding, neither
// another channel nor the Fabric's own queue ever reaps it, however long they are progressed and
// whatever they complete themselves; only the owner's Wait does.
TEST_CASE("a channel's completions never show up elsewhere", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  auto one = p.a->OpenChannel();
  auto two = p.a->OpenChannel();
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  std::memcpy(p.bbuf.data() + 512, "channel-one", 12);
  std::memcpy(p.bbuf.data() + 1024, "channel-two", 12);
  {
    // Connect both channels first (MSG connects on the first operation) and check they work.
    OpBatch warm(two->get());
    REQUIRE(warm.Read(p.b_from_a, p.Remote(1024), {p.amr.get(), p.abuf.data() + 1024, 12}).ok());
    REQUIRE(warm.Wait(absl::Seconds(10)).ok());
    // The Fabric's own endpoint too: on MSG, AddPeer started its connection, whose FI_CONNECTED
    // waits in the Fabric's event queue until something progresses it. Left there, the first
    // p.a->Progress() below read it and returned 1 (seen once in CI on a loaded machine), which
    // is a connection event, not a completion showing up elsewhere.
    OpBatch own(p.a.get());
    REQUIRE(own.Read(p.b_from_a, p.Remote(1024), {p.amr.get(), p.abuf.data() + 1024, 12}).ok());
    REQUIRE(own.Wait(absl::Seconds(10)).ok());
  }
  OpBatch first(one->get());
  REQUIRE(first.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8}).ok());
  REQUIRE(first.Wait(absl::Seconds(10)).ok());

  // Target paused: the READ stays outstanding; nothing completes anywhere.
  p.paused = true;
  OpBatch pending(one->get());
  REQUIRE(pending.Read(p.b_from_a, p.Remote(512), {p.amr.get(), p.abuf.data() + 512, 12}).ok());
  for (int i = 0; i < 2000; ++i) {
    REQUIRE((*two)->Progress() == 0);
    REQUIRE(p.a->Progress() == 0);
  }
  // Target running again: the other channel completes its own READs, the Fabric's queue is
  // progressed too, and still the first channel's READ is not reaped by either.
  p.paused = false;
  OpBatch other(two->get());
  for (int i = 0; i < 20; ++i) {
    std::memset(p.abuf.data() + 1024, 0, 12);
    REQUIRE(other.Read(p.b_from_a, p.Remote(1024), {p.amr.get(), p.abuf.data() + 1024, 12}).ok());
    REQUIRE(other.Wait(absl::Seconds(10)).ok());
    CHECK(std::memcmp(p.abuf.data() + 1024, "channel-two", 12) == 0);
    p.a->Progress();
  }
  CHECK(pending.outstanding() == 1);
  // Its owner reaps it.
  REQUIRE(pending.Wait(absl::Seconds(10)).ok());
  CHECK(std::memcmp(p.abuf.data() + 512, "channel-one", 12) == 0);
  CHECK((*two)->Progress() == 0);
}

// Fabric-level batches keep working next to channels, on the same peer.
TEST_CASE("Fabric-level batches and channel batches mix", "[fabric]") {
  Pair p(AnyProvider());
  auto channel = p.a->OpenChannel();
  REQUIRE(channel.ok());
  OpBatch shared(p.a.get());
  OpBatch own(channel->get());
  std::memcpy(p.abuf.data(), "fabric-level", 12);
  std::memcpy(p.abuf.data() + 64, "channel-lvl", 12);
  REQUIRE(shared.Write(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 12}).ok());
  REQUIRE(own.Write(p.b_from_a, p.Remote(64), {p.amr.get(), p.abuf.data() + 64, 12}).ok());
  REQUIRE(shared.Wait(absl::Seconds(10)).ok());
  REQUIRE(own.Wait(absl::Seconds(10)).ok());
  CHECK(std::memcmp(p.bbuf.data(), "fabric-level", 12) == 0);
  CHECK(std::memcmp(p.bbuf.data() + 64, "channel-lvl", 12) == 0);
}

// MSG: a channel's connections are accepted by the peer's passive endpoint, and closed there
// again when the channel goes away, so that threads coming and going leak no connections.
TEST_CASE("a destroyed channel's connections are closed at the peer", "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  Pair p(provider);
  if (p.a->endpoint_type() != EndpointType::kMsg) return;  // RDM providers manage their own
  auto wait_for = [&](int want) {
    for (int i = 0; i < 10000 && p.b->accepted_connections() != want; ++i) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return p.b->accepted_connections();
  };
  {
    // a's own connection to b, set up by a's first operation.
    OpBatch batch(p.a.get());
    REQUIRE(batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8}).ok());
    REQUIRE(batch.Wait(absl::Seconds(10)).ok());
  }
  const int before = wait_for(1);
  CHECK(before == 1);
  for (int round = 0; round < 3; ++round) {
    auto channel = p.a->OpenChannel();
    REQUIRE(channel.ok());
    OpBatch batch(channel->get());
    REQUIRE(batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8}).ok());
    REQUIRE(batch.Wait(absl::Seconds(10)).ok());
    CHECK(wait_for(before + 1) == before + 1);
    channel->reset();
    CHECK(wait_for(before) == before);
  }
}

}  // namespace farm

namespace farm {

// verbs;ofi_rxm: when a connection comes up, each side's ofi_rxm sends the other a flow-control
// credit message. libfabric 1.17 closes a connection's verbs endpoint before it reads what is left
// in the completion queue, so a credit message still unread then is handled on the freed endpoint
// (rxm_handle_credit): ~Fabric died with SIGSEGV inside fi_close in 1 run of node_test in 4 in the
// SoftiWARP lane (a node left right after a peer's first READ of it; a debug libfabric asserts).
// Here b, the target, is progressed only every 50 ms and not at all once a's first READ of it
// completed: a's credit message, which a sent just before that READ on the same connection, is
// then often still unread when b closes (SIGSEGV in 2 of 3 runs of 3 rounds before the fix, with
// Debian's libfabric 1.17 on SoftiWARP; hence 8 rounds). Harmless on the other providers.
TEST_CASE("an endpoint closed right after a peer's first operation on it closes cleanly",
          "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  for (int round = 0; round < 8; ++round) {
    Pair p(provider);
    p.paused = true;  // b progresses only below
    std::atomic<bool> done{false};
    std::thread slow([&] {
      while (!done.load()) {
        p.b->Progress();
        absl::SleepFor(absl::Milliseconds(50));
      }
    });
    OpBatch batch(p.a.get());
    absl::Status s = batch.Read(p.b_from_a, p.Remote(0), {p.amr.get(), p.abuf.data(), 8});
    if (s.ok()) s = batch.Wait(absl::Seconds(10));
    done = true;
    slow.join();
    INFO(s.ToString());
    REQUIRE(s.ok());
    p.bmr.reset();
    p.b.reset();
  }
}

}  // namespace farm

namespace farm {

// shm, between endpoints of one process (the in-process clusters of the tests): libfabric 1.17
// maps a peer that is an endpoint of this process by pointing at that endpoint's own region, and
// closing the endpoint unmaps it. An operation posted to it afterwards took the spinlock in the
// unmapped region: SIGSEGV (a node leaving an in-process shm cluster while the others still
// posted to it; rpc_test under ASan), or a write into whatever was mapped there since.
TEST_CASE("operations to a closed shm endpoint of this process fail instead of crashing",
          "[fabric]") {
  const std::vector<std::string> providers = TestProviders({"shm", "tcp;ofi_rxm", "tcp"});
  if (std::find(providers.begin(), providers.end(), "shm") == providers.end()) return;
  FabricOptions o;
  o.provider = "shm";
  auto a = Fabric::Open(o);
  auto b = Fabric::Open(o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<char> abuf(4096), bbuf(4096);
  auto amr = (*a)->Register(abuf.data(), abuf.size());
  auto bmr = (*b)->Register(bbuf.data(), bbuf.size());
  REQUIRE(amr.ok());
  REQUIRE(bmr.ok());
  auto peer = (*a)->AddPeer((*b)->address());
  REQUIRE(peer.ok());
  const RemoteBuffer remote{(*bmr)->remote_base(), (*bmr)->key()};
  {
    std::atomic<bool> done{false};
    std::thread serve([&] {
      while (!done.load()) (*b)->Progress();
    });
    OpBatch batch(a->get());
    absl::Status s = batch.Write(*peer, remote, {amr->get(), abuf.data(), 64});
    if (s.ok()) s = batch.Wait(absl::Seconds(10));
    done = true;
    serve.join();
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  bmr->reset();
  b->reset();
  for (bool is_read : {true, false}) {
    OpBatch batch(a->get());
    const LocalBuffer local{amr->get(), abuf.data(), 64};
    absl::Status s = is_read ? batch.Read(*peer, remote, local) : batch.Write(*peer, remote, local);
    INFO(s.ToString());
    CHECK(absl::IsUnavailable(s));
    CHECK_THAT(std::string(s.message()), Catch::Contains("closed"));
  }
}

}  // namespace farm

namespace farm {

// The progress of the others is the second access after a close (see LocalShmEndpoints in
// fabric.cc). A WRITE with delivery completion goes through buffers in the target's region and
// an answer in the origin's: an endpoint reaping the answer to a WRITE that a now closed endpoint
// served hands the buffers back into the closed one's region, and an endpoint serving a WRITE
// that a now closed endpoint posted writes the answer into it. Both crashed (SIGSEGV) before
// closed shm endpoints were parked while another of the process is open. (READs are copied by
// the origin itself and touch nothing of the target's afterwards.)
TEST_CASE("the progress of shm endpoints of this process never touches a closed one's memory",
          "[fabric]") {
  const std::vector<std::string> providers = TestProviders({"shm", "tcp;ofi_rxm", "tcp"});
  if (std::find(providers.begin(), providers.end(), "shm") == providers.end()) return;
  const int parked_before = Fabric::ParkedShmEndpointsForTesting();
  FabricOptions o;
  o.provider = "shm";
  auto a = Fabric::Open(o);
  REQUIRE(a.ok());
  std::vector<char> abuf(4096, 'a');
  auto amr = (*a)->Register(abuf.data(), abuf.size());
  REQUIRE(amr.ok());
  // b: a fresh endpoint that has made one round trip each way with a (so each has mapped the
  // other's region and answered its connection request).
  std::vector<char> bbuf(4096);
  auto open_b = [&](std::unique_ptr<Fabric>* b, std::unique_ptr<MemoryRegistration>* bmr,
                    PeerId* b_from_a, PeerId* a_from_b) -> absl::Status {
    auto f = Fabric::Open(o);
    if (!f.ok()) return f.status();
    *b = std::move(*f);
    auto mr = (*b)->Register(bbuf.data(), bbuf.size());
    if (!mr.ok()) return mr.status();
    *bmr = std::move(*mr);
    auto p = (*a)->AddPeer((*b)->address());
    auto q = (*b)->AddPeer((*a)->address());
    if (!p.ok()) return p.status();
    if (!q.ok()) return q.status();
    *b_from_a = *p;
    *a_from_b = *q;
    for (Fabric* from : {a->get(), b->get()}) {
      Fabric* to = from == a->get() ? b->get() : a->get();
      std::atomic<bool> done{false};
      std::thread serve([&] {
        while (!done.load()) to->Progress();
      });
      OpBatch batch(from);
      absl::Status s =
          from == a->get()
              ? batch.Read(*b_from_a, {(*bmr)->remote_base(), (*bmr)->key()},
                           {amr->get(), abuf.data(), 64})
              : batch.Read(*a_from_b, {(*amr)->remote_base(), (*amr)->key()},
                           {bmr->get(), bbuf.data(), 64});
      if (s.ok()) s = batch.Wait(absl::Seconds(10));
      done = true;
      serve.join();
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };

  SECTION("a WRITE served by an endpoint that closed before its answer was reaped") {
    std::unique_ptr<Fabric> b;
    std::unique_ptr<MemoryRegistration> bmr;
    PeerId b_from_a = 0, a_from_b = 0;
    REQUIRE(open_b(&b, &bmr, &b_from_a, &a_from_b).ok());
    std::fill(abuf.begin(), abuf.end(), 'w');
    OpBatch batch(a->get());
    REQUIRE(
        batch.Write(b_from_a, {bmr->remote_base(), bmr->key()}, {amr->get(), abuf.data(), 64})
            .ok());
    for (int i = 0; i < 100; ++i) b->Progress();  // b serves the WRITE; a has not looked yet
    CHECK(std::string(bbuf.data(), 64) == std::string(64, 'w'));
    bmr.reset();
    b.reset();
    CHECK(Fabric::ParkedShmEndpointsForTesting() == parked_before + 1);
    absl::Status s = batch.Wait(absl::Seconds(10));  // a reaps the answer
    INFO(s.ToString());
    CHECK(s.ok());
  }

  SECTION("a WRITE posted by an endpoint that closed before it was served") {
    std::unique_ptr<Fabric> b;
    std::unique_ptr<MemoryRegistration> bmr;
    PeerId b_from_a = 0, a_from_b = 0;
    REQUIRE(open_b(&b, &bmr, &b_from_a, &a_from_b).ok());
    std::fill(bbuf.begin(), bbuf.end(), 'x');
    {
      OpBatch batch(b.get());
      REQUIRE(batch.Write(a_from_b, {(*amr)->remote_base(), (*amr)->key()},
                          {bmr.get(), bbuf.data(), 64})
                  .ok());
    }  // abandoned: b closes with it outstanding
    bmr.reset();
    b.reset();
    for (int i = 0; i < 100; ++i) (*a)->Progress();  // a serves the WRITE of the closed b
    CHECK(std::string(abuf.data(), 64) == std::string(64, 'x'));
    // a goes on working: an endpoint opened now is reached as before.
    REQUIRE(open_b(&b, &bmr, &b_from_a, &a_from_b).ok());
    bmr.reset();
    b.reset();
  }
  amr->reset();
  a->reset();
  // The last shm endpoint of the process closed the parked ones.
  CHECK(Fabric::ParkedShmEndpointsForTesting() == 0);
}

}  // namespace farm

namespace farm {

// On iWARP the RDMA connection manager picks the port an endpoint listens on without knowing
// which TCP ports are in use, and enabling the endpoint fails with EADDRINUSE when it picked a
// taken one (a verbs test cluster in CI: "fi_enable failed: Address already in use"). The sync
// point stands in for that answer here, on every provider.
TEST_CASE("an endpoint whose port is taken is opened again on another", "[fabric]") {
  FabricOptions o;
  o.provider = TestProviders({"shm", "tcp;ofi_rxm", "tcp"})[0];
  o.bind_host = TestHost();
  INFO("provider " << o.provider);
  SyncPoint* sp = SyncPoint::GetInstance();
  std::atomic<int> enables{0}, refuse{0};
  sp->SetCallBack("Fabric::Enable", [&](void* arg) {
    enables.fetch_add(1);
    if (refuse.load() > 0) {
      refuse.fetch_sub(1);
      *static_cast<int*>(arg) = -EADDRINUSE;  // libfabric's FI_EADDRINUSE
    }
  });
  sp->EnableProcessing();
  refuse = 2;
  absl::StatusOr<std::unique_ptr<Fabric>> f = Fabric::Open(o);
  INFO(f.status().ToString());
  CHECK(f.ok());
  CHECK(enables.load() == 3);
  if (f.ok()) {
    enables = 0;
    refuse = 2;
    absl::StatusOr<std::unique_ptr<FabricChannel>> c = (*f)->OpenChannel();
    INFO(c.status().ToString());
    CHECK(c.ok());
    if ((*f)->endpoint_type() == EndpointType::kRdm) CHECK(enables.load() == 3);
  }
  // A port that stays taken: a clear error after a bounded number of attempts.
  refuse = 1000;
  absl::StatusOr<std::unique_ptr<Fabric>> g = Fabric::Open(o);
  CHECK(absl::IsUnavailable(g.status()));
  CHECK_THAT(std::string(g.status().message()), Catch::Contains("in use"));
  CHECK_THAT(std::string(g.status().message()), Catch::Contains("8 attempts"));
  sp->DisableProcessing();
  sp->ClearAllCallBacks();
}

}  // namespace farm

namespace farm {

// MSG endpoints: a connection's FI_CONNECTED is read by whichever thread progresses the event
// queue first, e.g. a poller, possibly while AddPeer, which started the connection, has not yet
// listed the peer. An event for an endpoint nobody lists was dropped, so the peer stayed
// "connecting" for good and every operation to it timed out: a 3-node cluster on SoftiWARP's
// msg endpoints that never became ready, about 1 start in 30. Here another thread reads a's event
// queue (and b accepts) right after a's connect was started, before AddPeer returns.
TEST_CASE("a connection whose FI_CONNECTED another thread reads during AddPeer is established",
          "[fabric]") {
  auto provider = GENERATE(from_range(TestProviders({"shm", "tcp;ofi_rxm", "tcp"})));
  INFO("provider " << provider);
  FabricOptions o;
  o.provider = provider;
  o.bind_host = TestHost();
  auto a = Fabric::Open(o);
  REQUIRE(a.ok());
  auto b = Fabric::Open(o);
  REQUIRE(b.ok());
  if ((*a)->endpoint_type() != EndpointType::kMsg) return;  // RDM providers connect themselves
  std::vector<char> abuf(4096), bbuf(4096);
  auto amr = (*a)->Register(abuf.data(), abuf.size());
  auto bmr = (*b)->Register(bbuf.data(), bbuf.size());
  REQUIRE(amr.ok());
  REQUIRE(bmr.ok());
  std::atomic<int> events_read{0};
  SyncPoint* sp = SyncPoint::GetInstance();
  sp->SetCallBack("Fabric::AddPeer:Connecting", [&](void*) {
    // Drives the connection until a's event queue produced its outcome (bounded: 30 s).
    std::thread reader([&] {
      const absl::Time end = absl::Now() + absl::Seconds(30);
      while (events_read.load() == 0 && absl::Now() < end) {
        (*b)->Progress();
        events_read.fetch_add((*a)->Progress());
      }
    });
    reader.join();
  });
  sp->EnableProcessing();
  absl::StatusOr<PeerId> peer = (*a)->AddPeer((*b)->address());
  sp->DisableProcessing();
  sp->ClearAllCallBacks();
  REQUIRE(peer.ok());
  CHECK(events_read.load() > 0);  // the interleaving this test is about happened
  std::atomic<bool> stop{false};
  std::thread poller([&] {
    while (!stop.load()) (*b)->Progress();
  });
  OpBatch batch(a->get());
  absl::Status s = batch.Write(*peer, RemoteBuffer{(*bmr)->remote_base(), (*bmr)->key()},
                               {amr->get(), abuf.data(), 8});
  if (s.ok()) s = batch.Wait(absl::Seconds(10));
  stop = true;
  poller.join();
  INFO(s.ToString());
  CHECK(s.ok());
}

}  // namespace farm
