// DataDir: a node's directory of durable state (the node binaries' --data_dir).
//
// A node that keeps its state on disk keeps it in files of a directory of its own, so that
// stopping every node and starting them again loses nothing committed (docs/replication.md,
// "Durability"). The directory holds:
//   LOCK            locked (flock) while a process uses the directory, and its pid: two
//                   processes never share one (e.g. two nodes started with the same directory)
//   region files    memory regions as shared mappings of files (MapRegion): what the process
//                   writes is the file's, kept by the page cache when the process dies (kill -9,
//                   a crash) and written to disk by the kernel in its time or by Region::Sync
//   small files     written whole and atomically (WriteFile: a temporary file, fsync, rename,
//                   fsync of the directory), so a reader finds the old bytes or the new, never a
//                   mix, even after a machine failure
//   journals        append-only files of framed entries (OpenJournal, Journal): an entry
//                   appended is the file's once Append returns (write(2): it survives the
//                   process, not a machine failure unless appended with sync); a torn or
//                   corrupt tail (the process died inside a write) is cut off at the next open
// File names are 1 to 100 of [A-Za-z0-9._-], not starting with a dot.
//
// Thread-compatible.
#ifndef FARM_PLATFORM_DATA_DIR_H_
#define FARM_PLATFORM_DATA_DIR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "platform/region.h"

namespace farm {

class Journal;

class DataDir {
 public:
  // Opens the directory `path` (created if missing, with its parents) and locks it. Errors:
  // FailedPrecondition when another process holds it (the message gives its pid) or `path` is
  // not a directory; PermissionDenied / Internal when it cannot be made, read or written.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::string& path);

  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;
  ~DataDir();  // unlocks it; regions mapped from it stay valid

  const std::string& path() const { return path_; }

  // Maps file `name` as a region of `size` bytes (a multiple of 4096). A missing file is created
  // with `size` zero bytes whose disk space is reserved at once (a full disk fails here, not
  // with SIGBUS at a later write into the mapping); `*created` says which. Errors:
  // FailedPrecondition when the file exists with another size (made with another region size),
  // ResourceExhausted when the disk is full or the memory cannot be mapped or locked.
  absl::StatusOr<std::unique_ptr<Region>> MapRegion(const std::string& name, size_t size, bool lock,
                                                    bool* created);

  // Replaces file `name` with `bytes`, atomically and durably (see the file comment).
  absl::Status WriteFile(const std::string& name, absl::string_view bytes);
  // The bytes of file `name`; NotFound when there is none.
  absl::StatusOr<std::string> ReadFile(const std::string& name) const;
  // Replaces file `to` with a copy of file `from`, atomically and durably (as WriteFile).
  absl::Status CopyFile(const std::string& from, const std::string& to);
  // Removes file `name` (none there is fine) and makes that durable.
  absl::Status RemoveFile(const std::string& name);
  bool Exists(const std::string& name) const;

  // Opens journal `name` (created empty if missing) for appending, after reading its entries
  // into `entries` in the order they were appended. A frame that is incomplete or fails its
  // check ends the journal there: it and what follows are cut off (logged by the caller from
  // `*cut`, the bytes dropped).
  absl::StatusOr<std::unique_ptr<Journal>> OpenJournal(const std::string& name,
                                                       std::vector<std::string>* entries,
                                                       uint64_t* cut);

 private:
  DataDir(std::string path, int dir_fd, int lock_fd)
      : path_(std::move(path)), dir_fd_(dir_fd), lock_fd_(lock_fd) {}
  std::string PathOf(const std::string& name) const { return path_ + "/" + name; }
  absl::Status SyncDir() const;

  std::string path_;
  int dir_fd_;
  int lock_fd_;
};

// An append-only file of entries, each framed (length, a check over length and bytes, bytes).
// Thread-compatible (its user serializes Append and Rewrite).
class Journal {
 public:
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;
  ~Journal();

  // Appends one entry; with `sync`, also waits until it is on disk (fdatasync).
  absl::Status Append(absl::string_view entry, bool sync);
  // Replaces the whole journal by `entries`, atomically and durably (as DataDir::WriteFile): a
  // reader finds the old entries or the new, never a mix. Appends then go to the new file.
  absl::Status Rewrite(const std::vector<std::string>& entries);
  // Bytes in the file.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  friend class DataDir;
  Journal(std::string path, std::string tmp, int fd, int dir_fd, uint64_t size)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd), dir_fd_(dir_fd), size_(size) {}

  std::string path_;
  std::string tmp_;
  int fd_;
  int dir_fd_;  // a duplicate of the directory's (Rewrite syncs it)
  uint64_t size_;
};

// OK when `name` is a valid file name of a data directory (see the file comment).
absl::Status CheckDataFileName(absl::string_view name);

}  // namespace farm

#endif  // FARM_PLATFORM_DATA_DIR_H_
