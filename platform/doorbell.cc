#include "platform/doorbell.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace farm {

namespace {

constexpr uint64_t kMagic = 0x6c6c65626d726166;  // "farmbell"
constexpr uint32_t kVersion = 1;
constexpr size_t kPageBytes = 4096;

}  // namespace

struct Doorbell::Page {
  std::atomic<uint64_t> magic;
  uint32_t version;
  uint32_t unused;
  alignas(64) std::atomic<uint32_t> seq;  // the futex word
  std::atomic<uint32_t> sleeping;
  std::atomic<uint64_t> wakeups;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "the page is shared between processes");

namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Doorbell>> Doorbell::Create(const std::string& path) {
  static_assert(sizeof(Page) <= kPageBytes);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create doorbell", path);
  if (ftruncate(fd, kPageBytes) != 0) {
    absl::Status s = Errno("cannot size doorbell", path);
    close(fd);
    unlink(path.c_str());
    return s;
  }
  void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    absl::Status s = Errno("cannot map doorbell", path);
    close(fd);
    unlink(path.c_str());
    return s;
  }
  close(fd);
  // The file starts zeroed: seq, sleeping and wakeups are 0. The magic goes last.
  Page* page = static_cast<Page*>(p);
  page->version = kVersion;
  page->magic.store(kMagic, std::memory_order_release);
  return std::unique_ptr<Doorbell>(new Doorbell(path, page, /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<Doorbell>> Doorbell::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no doorbell at ", path));
    return Errno("cannot open doorbell", path);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(kPageBytes)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a doorbell (size)"));
  }
  void* p = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Errno("cannot map doorbell", path);
  Page* page = static_cast<Page*>(p);
  if (page->magic.load(std::memory_order_acquire) != kMagic || page->version != kVersion) {
    munmap(p, kPageBytes);
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a doorbell of this version"));
  }
  return std::unique_ptr<Doorbell>(new Doorbell(path, page, /*owner=*/false));
}

Doorbell::Doorbell(std::string path, Page* page, bool owner)
    : path_(std::move(path)), page_(page), owner_(owner) {}

Doorbell::~Doorbell() {
  if (owner_) unlink(path_.c_str());
  munmap(page_, kPageBytes);
}

uint32_t Doorbell::PrepareSleep() {
  const uint32_t ticket = page_->seq.load(std::memory_order_relaxed);
  page_->sleeping.store(1, std::memory_order_relaxed);
  // Orders the flag before the caller's look for work (the ringer's fence pairs with it).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ticket;
}

void Doorbell::CancelSleep() { page_->sleeping.store(0, std::memory_order_relaxed); }

bool Doorbell::Sleep(uint32_t ticket, absl::Duration max_wait) {
  if (page_->seq.load(std::memory_order_acquire) == ticket) {
    const timespec ts = absl::ToTimespec(max_wait);
    // Not FUTEX_PRIVATE_FLAG: the word is shared with other processes. EAGAIN (seq moved on
    // before the wait), EINTR and ETIMEDOUT all end the sleep; seq tells whether it was rung.
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&page_->seq), FUTEX_WAIT, ticket, &ts, nullptr,
            0);
  }
  page_->sleeping.store(0, std::memory_order_relaxed);
  return page_->seq.load(std::memory_order_acquire) != ticket;
}

bool Doorbell::Ring() {
  // Orders the caller's post before the look at the flag (PrepareSleep's fence pairs with it).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (page_->sleeping.load(std::memory_order_relaxed) == 0) return false;
  // The first ringer lowers the flag and makes the system call; the others of a burst need not.
  if (page_->sleeping.exchange(0, std::memory_order_relaxed) == 0) return false;
  page_->seq.fetch_add(1, std::memory_order_release);
  page_->wakeups.fetch_add(1, std::memory_order_relaxed);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&page_->seq), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  return true;
}

uint64_t Doorbell::wakeups() const { return page_->wakeups.load(std::memory_order_relaxed); }

bool Doorbell::sleeping() const { return page_->sleeping.load(std::memory_order_relaxed) != 0; }

}  // namespace farm
