#include "platform/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "platform/hash.h"

namespace farm {
namespace {

std::string Errno(int err) { return std::strerror(err); }

absl::Status FromErrno(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", Errno(err));
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// Writes all of `bytes` at the file's current offset.
bool WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A journal frame: u32 length, u32 zero, u64 check, then the entry's bytes.
constexpr size_t kFrameHeader = 16;
constexpr uint32_t kMaxEntry = 1u << 30;

// The frame's check: over its length and bytes (stable across builds and processes).
uint64_t FrameCheck(absl::string_view bytes) {
  uint64_t h = Mix64(0x6a6f75726e616c31ULL ^ bytes.size());
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = Mix64(h ^ w) + i;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return Mix64(h ^ tail ^ (static_cast<uint64_t>(bytes.size() - i) << 56));
}

void AppendFrame(std::string* out, absl::string_view entry) {
  char header[kFrameHeader] = {};
  const uint32_t length = static_cast<uint32_t>(entry.size());
  const uint64_t check = FrameCheck(entry);
  std::memcpy(header, &length, 4);
  std::memcpy(header + 8, &check, 8);
  out->append(header, kFrameHeader);
  out->append(entry.data(), entry.size());
}

// Replaces `file` with what `fill` writes into a new file `tmp` (false: it failed, errno set),
// atomically and durably: written, fsynced, renamed over `file`, and the directory `dir_fd`
// fsynced, so a reader finds the old bytes or the new, never a mix, even after a machine failure.
absl::Status ReplaceFile(const std::string& tmp, const std::string& file, int dir_fd,
                         const std::function<bool(int fd)>& fill) {
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return FromErrno(errno, absl::StrCat("cannot write ", tmp));
  if (!fill(fd) || fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return FromErrno(err, absl::StrCat("cannot write ", tmp));
  }
  close(fd);
  if (rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return FromErrno(err, absl::StrCat("cannot replace ", file));
  }
  if (fsync(dir_fd) != 0) {
    return FromErrno(errno, absl::StrCat("cannot sync the directory of ", file));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDataFileName(absl::string_view name) {
  bool ok = !name.empty() && name.size() <= 100 && name[0] != '.';
  for (char c : name)
    ok &= absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "'", name, "' is not a data file name (1 to 100 of [A-Za-z0-9._-], no leading dot)"));
}

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("the data directory's path is empty");
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_directory(path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the data directory ", path, " is not a directory"));
  }
  std::filesystem::create_directories(path, ec);
  if (ec && !std::filesystem::is_directory(path)) {
    return FromErrno(ec.value(), absl::StrCat("cannot make the data directory ", path));
  }
  const int dir_fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    if (err == ENOTDIR) {
      return absl::FailedPreconditionError(
          absl::StrCat("the data directory ", path, " is not a directory"));
    }
    return FromErrno(err, absl::StrCat("cannot open the data directory ", path));
  }
  const std::string lock_path = path + "/LOCK";
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    const int err = errno;
    close(dir_fd);
    return FromErrno(err, absl::StrCat("cannot open ", lock_path));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    const ssize_t n = pread(lock_fd, buf, sizeof(buf) - 1, 0);
    close(lock_fd);
    close(dir_fd);
    if (err == EWOULDBLOCK) {
      std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
      int pid = 0;
      const bool named = absl::SimpleAtoi(absl::StripAsciiWhitespace(holder), &pid) && pid > 0;
      return absl::FailedPreconditionError(
          absl::StrCat("the data directory ", path, " is in use by ",
                       named ? absl::StrCat("process ", pid) : std::string("another process"),
                       ": each node needs a directory of its own"));
    }
    return FromErrno(err, absl::StrCat("cannot lock ", lock_path));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(lock_fd, 0) != 0 || pwrite(lock_fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    close(lock_fd);
    close(dir_fd);
    return FromErrno(err, absl::StrCat("cannot write ", lock_path));
  }
  return std::unique_ptr<DataDir>(new DataDir(path, dir_fd, lock_fd));
}

DataDir::~DataDir() {
  close(lock_fd_);  // releases the lock
  close(dir_fd_);
}

absl::Status DataDir::SyncDir() const {
  if (fsync(dir_fd_) != 0) {
    return FromErrno(errno, absl::StrCat("cannot sync the data directory ", path_));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Region>> DataDir::MapRegion(const std::string& name, size_t size,
                                                           bool lock, bool* created) {
  if (absl::Status s = CheckDataFileName(name); !s.ok()) return s;
  if (size == 0 || size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region size ", size, " is not a positive multiple of 4096"));
  }
  const std::string file = PathOf(name);
  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return FromErrno(errno, absl::StrCat("cannot open ", file));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return FromErrno(err, absl::StrCat("cannot stat ", file));
  }
  *created = st.st_size == 0;
  if (*created) {
    // Reserve the disk space now: a write into a mapping whose file has no room is a SIGBUS.
    const int err = posix_fallocate(fd, 0, static_cast<off_t>(size));
    if (err != 0) {
      close(fd);
      unlink(file.c_str());
      return FromErrno(err, absl::StrCat("cannot make ", file, " (", size, " bytes)"));
    }
    if (absl::Status s = SyncDir(); !s.ok()) {
      close(fd);
      return s;
    }
  } else if (static_cast<uint64_t>(st.st_size) != size) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(file, " holds ", st.st_size, " bytes, not the region's ", size,
                     ": the data directory was made for another configuration (region_size?)"));
  }
  absl::StatusOr<std::unique_ptr<Region>> region = Region::MapFile(fd, size, lock, file);
  close(fd);  // the mapping keeps the file
  return region;
}

absl::Status DataDir::WriteFile(const std::string& name, absl::string_view bytes) {
  if (absl::Status s = CheckDataFileName(name); !s.ok()) return s;
  return ReplaceFile(PathOf(absl::StrCat(".", name, ".new")), PathOf(name), dir_fd_,
                     [bytes](int fd) { return WriteAll(fd, bytes); });
}

absl::StatusOr<std::string> DataDir::ReadFile(const std::string& name) const {
  if (absl::Status s = CheckDataFileName(name); !s.ok()) return s;
  const std::string file = PathOf(name);
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(file, " does not exist"));
    return FromErrno(err, absl::StrCat("cannot read ", file));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return FromErrno(err, absl::StrCat("cannot read ", file));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

absl::Status DataDir::CopyFile(const std::string& from, const std::string& to) {
  if (absl::Status s = CheckDataFileName(from); !s.ok()) return s;
  if (absl::Status s = CheckDataFileName(to); !s.ok()) return s;
  const std::string src = PathOf(from);
  const int in = open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::DataLossError(absl::StrCat(src, " does not exist"));
    return FromErrno(err, absl::StrCat("cannot read ", src));
  }
  absl::Status s =
      ReplaceFile(PathOf(absl::StrCat(".", to, ".new")), PathOf(to), dir_fd_, [in](int out) {
        char buf[1 << 16];
        for (;;) {
          const ssize_t n = read(in, buf, sizeof(buf));
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) return n == 0;
          if (!WriteAll(out, absl::string_view(buf, static_cast<size_t>(n)))) {
            return false;
          }
        }
      });
  close(in);
  return s;
}

absl::Status DataDir::RemoveFile(const std::string& name) {
  if (absl::Status s = CheckDataFileName(name); !s.ok()) return s;
  const std::string file = PathOf(name);
  if (unlink(file.c_str()) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return FromErrno(errno, absl::StrCat("cannot remove ", file));
  }
  return SyncDir();
}

bool DataDir::Exists(const std::string& name) const {
  if (!CheckDataFileName(name).ok()) return false;
  struct stat st {};
  return stat(PathOf(name).c_str(), &st) == 0;
}

absl::StatusOr<std::unique_ptr<Journal>> DataDir::OpenJournal(const std::string& name,
                                                              std::vector<std::string>* entries,
                                                              uint64_t* cut) {
  if (absl::Status s = CheckDataFileName(name); !s.ok()) return s;
  entries->clear();
  *cut = 0;
  std::string bytes;
  if (Exists(name)) {
    absl::StatusOr<std::string> read = ReadFile(name);
    if (!read.ok()) return read.status();
    bytes = std::move(*read);
  }
  uint64_t good = 0;
  while (bytes.size() - good >= kFrameHeader) {
    uint32_t length, zero;
    uint64_t check;
    std::memcpy(&length, bytes.data() + good, 4);
    std::memcpy(&zero, bytes.data() + good + 4, 4);
    std::memcpy(&check, bytes.data() + good + 8, 8);
    if (zero != 0 || length > kMaxEntry || bytes.size() - good - kFrameHeader < length) break;
    const absl::string_view entry(bytes.data() + good + kFrameHeader, length);
    if (FrameCheck(entry) != check) break;
    entries->emplace_back(entry);
    good += kFrameHeader + length;
  }
  const std::string file = PathOf(name);
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return FromErrno(errno, absl::StrCat("cannot open ", file));
  if (good < bytes.size()) {
    *cut = bytes.size() - good;
    if (ftruncate(fd, static_cast<off_t>(good)) != 0 || fsync(fd) != 0) {
      const int err = errno;
      close(fd);
      return FromErrno(err, absl::StrCat("cannot cut the torn tail of ", file));
    }
  }
  const int dir_fd = dup(dir_fd_);
  if (dir_fd < 0) {
    const int err = errno;
    close(fd);
    return FromErrno(err, absl::StrCat("cannot open the data directory ", path_));
  }
  if (absl::Status s = SyncDir(); !s.ok()) {
    close(fd);
    close(dir_fd);
    return s;
  }
  return std::unique_ptr<Journal>(
      new Journal(file, PathOf(absl::StrCat(".", name, ".new")), fd, dir_fd, good));
}

Journal::~Journal() {
  close(fd_);
  close(dir_fd_);
}

absl::Status Journal::Append(absl::string_view entry, bool sync) {
  if (entry.size() > kMaxEntry) {
    return absl::InvalidArgumentError(
        absl::StrCat("a journal entry of ", entry.size(), " bytes (at most ", kMaxEntry, ")"));
  }
  std::string frame;
  frame.reserve(kFrameHeader + entry.size());
  AppendFrame(&frame, entry);
  if (!WriteAll(fd_, frame)) {
    const int err = errno;
    // A partial frame may be left: it is cut off at the next open, and nothing follows it
    // that the caller would count on (the caller treats this as fatal for the entry).
    return FromErrno(err, absl::StrCat("cannot append to ", path_));
  }
  size_ += frame.size();
  if (sync && fdatasync(fd_) != 0) return FromErrno(errno, absl::StrCat("cannot sync ", path_));
  return absl::OkStatus();
}

absl::Status Journal::Rewrite(const std::vector<std::string>& entries) {
  std::string bytes;
  for (const std::string& e : entries) AppendFrame(&bytes, e);
  if (absl::Status s =
          ReplaceFile(tmp_, path_, dir_fd_, [&bytes](int fd) { return WriteAll(fd, bytes); });
      !s.ok()) {
    return s;
  }
  // Appends go to the new file, at its end.
  const int append_fd = open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (append_fd < 0) return FromErrno(errno, absl::StrCat("cannot open ", path_));
  close(fd_);
  fd_ = append_fd;
  size_ = bytes.size();
  return absl::OkStatus();
}

}  // namespace farm
