// Region: a block of a node's memory that becomes part of the shared address space.
//
// Regions are page-aligned anonymous mappings, or shared mappings of files (MapFile: a node's data
// directory, so that its memory outlives the process). With `lock` they are locked in RAM (mlock),
// as FaRM pins its regions: a region the NIC may write must never be paged out. RDMA hardware pins
// registered memory anyway, so the locked-memory limit applies to it either way.
//
// Thread-compatible; the bytes themselves are shared with remote peers through the fabric.
#ifndef FARM_PLATFORM_REGION_H_
#define FARM_PLATFORM_REGION_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace farm {

class Region {
 public:
  // Maps `size` bytes of zeroed memory (size must be a multiple of 4096). Errors:
  // ResourceExhausted when memory cannot be mapped or locked; the message says how to raise the
  // locked-memory limit.
  static absl::StatusOr<std::unique_ptr<Region>> Allocate(size_t size, bool lock);
  // Maps the open file `fd` (at least `size` bytes; the caller keeps or closes fd) as shared
  // memory: what the process writes is the file's, kept by the page cache when the process dies
  // (kill -9, a crash) and written to disk by the kernel in its time or by Sync. `what` names the
  // file in error messages. Same size rule and errors as Allocate.
  static absl::StatusOr<std::unique_ptr<Region>> MapFile(int fd, size_t size, bool lock,
                                                         const std::string& what);

  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  char* data() const { return data_; }
  size_t size() const { return size_; }
  // Whether its memory is a file's (MapFile).
  bool file_backed() const { return file_backed_; }
  // Writes bytes [offset, offset + len) of a file-backed region to disk and waits for it (msync
  // MS_SYNC of the pages they are on); a no-op for anonymous memory. Errors: OutOfRange for a
  // range outside the region, Internal when the kernel reports an I/O error.
  absl::Status Sync(size_t offset, size_t len) const;

 private:
  Region(char* data, size_t size, bool file_backed)
      : data_(data), size_(size), file_backed_(file_backed) {}
  static absl::StatusOr<std::unique_ptr<Region>> Map(int fd, size_t size, bool lock,
                                                     const std::string& what);
  char* data_;
  size_t size_;
  bool file_backed_;
};

// "raise it with `ulimit -l unlimited` ..." advice with the current limit, for error messages.
std::string MemlockAdvice();

}  // namespace farm

#endif  // FARM_PLATFORM_REGION_H_
