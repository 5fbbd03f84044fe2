// What a process SIGKILLed inside libfabric's shm provider leaves behind for its peers.
//
// libfabric 1.17's shm guards each endpoint's command queue with a spinlock in shared memory: the
// endpoint's own progress holds it while it serves its queue (the copies of peers' WRITEs
// included), and a peer holds it while it posts. A process killed while it holds the lock never
// releases it, and pthread_spin_lock has no timeout: whoever posts to that queue next spins inside
// fi_writemsg for good, before any deadline of ours can apply.
//
// Each trial: a target process serves its memory with a busy progress loop, a writer process
// WRITEs 1 MiB to it over and over (so the target is nearly always copying, inside its lock), and
// the target is killed with SIGKILL. The writer's WRITE in flight then times out ("timeout ...")
// and it posts another, as a survivor that has not heard of the death yet would: if that one
// returns, it reports an error within its 2 s bound ("error ..."); if it is stuck inside the
// provider it says nothing more. The test prints how many
// trials ended which way (README, "Providers", quotes the measurement) and requires the writer to
// be stuck exactly in the trials where the dead target's lock was left held (read from the file
// the dead process leaves in /dev/shm). Its own threads never call into the provider, so it
// cannot hang.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace farm {
namespace {

// A child process with its standard output on a pipe.
class Child {
 public:
  explicit Child(std::vector<std::string> args) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~Child() {
    Kill();
    close(out_);
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // The next line of output that starts with "target", "writing", "timeout" or "error" (the peer's
  // own words; log lines are skipped) within `timeout`, or nullopt (nothing said, output closed).
  std::optional<std::string> ReadLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      std::optional<std::string> line = ReadAnyLine(deadline - absl::Now());
      if (!line.has_value()) return line;
      for (const char* word : {"target ", "writing", "timeout ", "error "}) {
        if (line->rfind(word, 0) == 0) return line;
      }
    }
  }

 private:
  std::optional<std::string> ReadAnyLine(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      if (size_t nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return std::nullopt;
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
      char chunk[256];
      const ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
};

constexpr char kPeer[] = "platform/testing/shm_kill_peer";

// Whether the queue lock of the shm endpoint at `address_hex` (a dead process's: its file stays in
// /dev/shm) was left held. Reads libfabric 1.17's struct smr_region (include/ofi_shm.h: the
// pthread_spinlock_t after version, resv, flags, pid, cma_cap_peer, cma_cap_self,
// max_sar_buf_per_peer and base_addr, at byte 24) and glibc's x86-64 spinlock (1 is free, 0 or
// less held). nullopt if the file cannot be read.
std::optional<bool> LockLeftHeld(const std::string& address_hex) {
  std::string name = absl::HexStringToBytes(address_hex);
  name = name.substr(0, name.find('\0'));
  if (size_t p = name.find("://"); p != std::string::npos) name = name.substr(p + 3);
  const int fd = open(absl::StrCat("/dev/shm/", name).c_str(), O_RDONLY);
  if (fd < 0) return std::nullopt;
  int32_t lock = 1;
  const bool read_ok = pread(fd, &lock, sizeof(lock), 24) == sizeof(lock);
  close(fd);
  if (!read_ok) return std::nullopt;
  return lock <= 0;
}

}  // namespace

TEST_CASE("a writer to an shm target killed inside the provider errs in time or is stuck",
          "[shm]") {
  constexpr int kTrials = 4;
  int bounded = 0, stuck = 0, locked = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    Child target({kPeer, "target"});
    std::optional<std::string> hello = target.ReadLine(absl::Seconds(30));
    REQUIRE(hello.has_value());
    std::vector<std::string> f = absl::StrSplit(*hello, ' ');
    REQUIRE(f.size() == 4);
    REQUIRE(f[0] == "target");
    Child writer({kPeer, "writer", f[1], f[2], f[3]});
    std::optional<std::string> started = writer.ReadLine(absl::Seconds(30));
    INFO(started.value_or("(nothing)"));
    REQUIRE(started == std::optional<std::string>("writing"));
    absl::SleepFor(absl::Milliseconds(50 + 37 * trial));  // the writer keeps the target copying
    target.Kill();
    // Read the lock once the writer sits in its 2 s wait: a post of its own that was under way at
    // the kill has released the lock by then (a stuck one never takes it).
    absl::SleepFor(absl::Milliseconds(500));
    const std::optional<bool> held = LockLeftHeld(f[1]);
    REQUIRE(held.has_value());
    locked += *held ? 1 : 0;
    // The writer's operations have a 2 s bound; give it far more than that. Its WRITE in flight
    // times out (or fails); the WRITE it posts next is the one that may never return.
    std::optional<std::string> first = writer.ReadLine(absl::Seconds(15));
    std::optional<std::string> second;
    if (first.has_value() && first->rfind("timeout ", 0) == 0) {
      second = writer.ReadLine(absl::Seconds(15));
    }
    INFO("writer after the kill: " << first.value_or("(nothing)") << " / "
                                   << second.value_or("(nothing)"));
    INFO("the target's queue lock was left " << (*held ? "held" : "free"));
    if (second.has_value()) {
      CHECK(second->rfind("error ", 0) == 0);
      ++bounded;
    } else {
      ++stuck;
    }
    // Cause and effect: stuck exactly when the dead target left its lock held.
    CHECK(second.has_value() == !*held);
  }
  WARN("shm, target killed with SIGKILL while serving WRITEs, " << kTrials << " trials: its queue "
       "lock was left held in " << locked << "; the writer's next WRITE ended in an error within "
       "its bound in " << bounded << " and was stuck inside the provider in " << stuck);
  CHECK(bounded + stuck == kTrials);
}

}  // namespace farm
