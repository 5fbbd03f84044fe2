#include "platform/region.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace farm {

std::string MemlockAdvice() {
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  std::string current =
      lim.rlim_cur == RLIM_INFINITY ? "unlimited" : absl::StrCat(lim.rlim_cur / 1024, " KiB");
  return absl::StrCat("the locked-memory limit (ulimit -l) is ", current,
                      "; raise it with `ulimit -l unlimited` in the shell that starts the node, a "
                      "memlock line in /etc/security/limits.conf, or LimitMEMLOCK=infinity for a "
                      "systemd service");
}

absl::StatusOr<std::unique_ptr<Region>> Region::Allocate(size_t size, bool lock) {
  if (size == 0 || size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region size ", size, " is not a positive multiple of 4096"));
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a ", size, "-byte region: ", std::strerror(errno)));
  }
  // Large regions benefit from huge pages (fewer NIC translation misses); best effort.
  if (size >= (size_t{2} << 20)) madvise(p, size, MADV_HUGEPAGE);
  // The system call, not mlock(): the sanitizer runtimes (ASan, TSan) intercept mlock() and turn
  // it into a no-op that reports success, so under the sanitizer lanes a node would run with its
  // regions unlocked and a locked-memory limit that is too low would go unnoticed.
  if (lock && syscall(SYS_mlock, p, size) != 0) {
    int err = errno;
    munmap(p, size);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot lock a ", size / 1024, " KiB region in RAM (", std::strerror(err),
        "): ", MemlockAdvice(), " (or set lock_memory: false in the cluster configuration)"));
  }
  return std::unique_ptr<Region>(new Region(static_cast<char*>(p), size));
}

Region::~Region() { munmap(data_, size_); }

}  // namespace farm
