// kv/internal/lookup.h: the lock-free lookup of a key (GET's one-sided READ of its
// neighbourhood, Exists, MultiGet's rounds, the GET RPCs' lookups in the serving node's own
// memory): one attempt, LookupOnce, that reports kRetry when the table changed under it. Its
// retries are Client::Impl::Find's (kv/lookup.cc).
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: LookupOnce is safe for concurrent use (it only reads the table).
#ifndef FARM_KV_INTERNAL_LOOKUP_H_
#define FARM_KV_INTERNAL_LOOKUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kv/internal/shard.h"
#include "platform/global_address.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {

// Copies ranges of the shared address space: remote READs, or local copies (CopyRanges' contract).
using CopyFn =
    absl::FunctionRef<absl::Status(absl::Span<const txn::Range>, std::vector<std::string>*)>;

enum class Lookup { kFound, kMissing, kRetry };

// This node's memory of a range of the shared address space (Runtime::Local).
using LocalFn = absl::FunctionRef<absl::StatusOr<absl::Span<char>>(GlobalAddress, uint64_t)>;

// One lock-free lookup of `key` in shard `s` (see kv.h, "Consistency"). `first_copy`, if given,
// is a copy of the neighbourhood made already (MultiGet); otherwise it is copied into `scratch`
// (kept by the caller, so that its memory is reused): with one `copy` of the whole neighbourhood
// (a READ), or, where `local` is given (the shard is in this node's memory), bucket by bucket as
// the search reaches them (txn::CopyLocalObject each), so that a hit in the first bucket copies
// that bucket alone. Buckets copied at different moments are no weaker than one READ, which
// promises no order among its bytes either: each bucket is checked on its own, and a miss checks
// them all again at the end. kRetry: something changed under it. A null `value` asks only whether
// the key is there: a hit copies no value (an out-of-line item is still read, for its key; a
// chunked value's chunks are not).
absl::StatusOr<Lookup> LookupOnce(const ShardInfo& s, absl::string_view key, uint64_t h,
                                  CopyFn copy, const std::string* first_copy,
                                  std::vector<std::string>* scratch, std::string* value,
                                  const LocalFn* local = nullptr);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_LOOKUP_H_
