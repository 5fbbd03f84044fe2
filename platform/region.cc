#include "platform/region.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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
  return Map(-1, size, lock, "");
}

absl::StatusOr<std::unique_ptr<Region>> Region::MapFile(int fd, size_t size, bool lock,
                                                        const std::string& what) {
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat("no open file to map (", what, ")"));
  return Map(fd, size, lock, what);
}

absl::StatusOr<std::unique_ptr<Region>> Region::Map(int fd, size_t size, bool lock,
                                                    const std::string& what) {
  if (size == 0 || size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region size ", size, " is not a positive multiple of 4096"));
  }
  const std::string of = fd < 0 ? std::string() : absl::StrCat(" of ", what);
  void* p = fd < 0 ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                   : mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a ", size, "-byte region", of, ": ", std::strerror(errno)));
  }
  // Large regions benefit from huge pages (fewer NIC translation misses); best effort.
  if (fd < 0 && size >= (size_t{2} << 20)) madvise(p, size, MADV_HUGEPAGE);
  // The system call, not mlock(): the sanitizer runtimes (ASan, TSan) intercept mlock() and turn
  // it into a no-op that reports success, so under the sanitizer lanes a node would run with its
  // regions unlocked and a locked-memory limit that is too low would go unnoticed.
  if (lock && syscall(SYS_mlock, p, size) != 0) {
    int err = errno;
    munmap(p, size);
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot lock a ", size / 1024, " KiB region", of, " in RAM (", std::strerror(err),
        "): ", MemlockAdvice(), " (or set lock_memory: false in the cluster configuration)"));
  }
  return std::unique_ptr<Region>(new Region(static_cast<char*>(p), size, fd >= 0));
}

absl::Status Region::Sync(size_t offset, size_t len) const {
  if (offset > size_ || len > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("sync of [", offset, ", +", len,
                                              ") is outside a region of ", size_, " bytes"));
  }
  if (!file_backed_ || len == 0) return absl::OkStatus();
  const size_t page = 4096;
  const size_t begin = offset / page * page;
  const size_t end = std::min(size_, (offset + len + page - 1) / page * page);
  if (msync(data_ + begin, end - begin, MS_SYNC) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write a region's bytes to disk: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

Region::~Region() { munmap(data_, size_); }

}  // namespace farm
