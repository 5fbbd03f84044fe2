// Region: a block of a node's memory that becomes part of the shared address space.
//
// Regions are page-aligned anonymous mappings. With `lock` they are locked in RAM (mlock), as
// FaRM pins its regions: a region the NIC may write must never be paged out. RDMA hardware pins
// registered memory anyway, so the locked-memory limit applies to it either way.
//
// Thread-compatible; the bytes themselves are shared with remote peers through the fabric.
#ifndef FARM_PLATFORM_REGION_H_
#define FARM_PLATFORM_REGION_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace farm {

class Region {
 public:
  // Maps `size` bytes of zeroed memory (size must be a multiple of 4096). Errors:
  // ResourceExhausted when memory cannot be mapped or locked; the message says how to raise the
  // locked-memory limit.
  static absl::StatusOr<std::unique_ptr<Region>> Allocate(size_t size, bool lock);

  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region();

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Region(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

// "raise it with `ulimit -l unlimited` ..." advice with the current limit, for error messages.
std::string MemlockAdvice();

}  // namespace farm

#endif  // FARM_PLATFORM_REGION_H_
