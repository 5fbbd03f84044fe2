// A process for platform/shm_kill_test: one side of one-sided traffic on the shm provider, so
// that the test can SIGKILL a process while it is inside the provider.
//
//   shm_kill_peer target            opens an endpoint, registers 4 MiB, prints
//                                   "target ADDRESS_HEX BASE KEY" and progresses until killed
//   shm_kill_peer writer ADDR BASE KEY
//                                   WRITEs 1 MiB to the target over and over; prints "writing"
//                                   after the first one. When one fails or does not complete
//                                   within 2 s it prints "timeout STATUS" and posts one more
//                                   WRITE, as a survivor that has not yet heard of the death
//                                   would; when that returns too, "error STATUS" (exit 1)
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "platform/fabric.h"

namespace farm {
namespace {

constexpr size_t kTargetBytes = 4 << 20;
constexpr size_t kWriteBytes = 1 << 20;

std::unique_ptr<Fabric> OpenShm() {
  FabricOptions o;
  o.provider = "shm";
  absl::StatusOr<std::unique_ptr<Fabric>> f = Fabric::Open(o);
  if (!f.ok()) {
    std::printf("error %s\n", f.status().ToString().c_str());
    std::fflush(stdout);
    _exit(2);
  }
  return std::move(*f);
}

int Target() {
  std::unique_ptr<Fabric> f = OpenShm();
  std::vector<char> mem(kTargetBytes);
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr = f->Register(mem.data(), mem.size());
  if (!mr.ok()) return 2;
  std::printf("target %s %llu %llu\n", absl::BytesToHexString(f->address()).c_str(),
              static_cast<unsigned long long>((*mr)->remote_base()),
              static_cast<unsigned long long>((*mr)->key()));
  std::fflush(stdout);
  for (;;) f->Progress();  // a busy node's poller
}

int Writer(const std::string& address_hex, uint64_t base, uint64_t key) {
  std::unique_ptr<Fabric> f = OpenShm();
  std::vector<char> mem(kWriteBytes, 'w');
  absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr = f->Register(mem.data(), mem.size());
  if (!mr.ok()) return 2;
  absl::StatusOr<PeerId> peer = f->AddPeer(absl::HexStringToBytes(address_hex));
  if (!peer.ok()) return 2;
  bool timed_out = false;
  for (uint64_t n = 0;; ++n) {
    OpBatch batch(f.get());
    absl::Status s = batch.Write(*peer, RemoteBuffer{base, key},
                                 LocalBuffer{mr->get(), mem.data(), mem.size()});
    if (s.ok()) s = batch.Wait(absl::Seconds(2));
    if (!s.ok()) {
      std::printf("%s %s\n", timed_out ? "error" : "timeout", s.ToString().c_str());
      std::fflush(stdout);
      // In-flight operations are abandoned; nothing to clean up for the test.
      if (timed_out) _exit(1);
      timed_out = true;
      continue;
    }
    if (n == 0) {
      std::printf("writing\n");
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace farm

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "target") == 0) return farm::Target();
  uint64_t base = 0, key = 0;
  if (argc == 5 && std::strcmp(argv[1], "writer") == 0 && absl::SimpleAtoi(argv[3], &base) &&
      absl::SimpleAtoi(argv[4], &key)) {
    return farm::Writer(argv[2], base, key);
  }
  std::fprintf(stderr, "usage: shm_kill_peer target | writer ADDRESS_HEX BASE KEY\n");
  return 2;
}
