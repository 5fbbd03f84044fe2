// kv/internal/table_txn.h: a key's part of the table inside one transaction (TableTxn): finding
// the key, inserting it (in its neighbourhood, by hopscotch displacement, or in its home
// bucket's overflow chain), changing and removing it; and the read-modify-write that every
// write of the store is made of (UpdateIn).
//
// Not public API: a private header of //kv (the public one is farm/kv/kv.h).
//
// Thread safety: a TableTxn belongs to the thread of its transaction.
#ifndef FARM_KV_INTERNAL_TABLE_TXN_H_
#define FARM_KV_INTERNAL_TABLE_TXN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kv/bucket.h"
#include "kv/internal/shard.h"
#include "kv/internal/value.h"
#include "platform/global_address.h"
#include "txn/transaction.h"

namespace farm {
namespace kv {

// A key's part of the table inside one transaction: its neighbourhood, the overflow chain of its
// home bucket, and (for displacement) the buckets after the neighbourhood.
class TableTxn {
 public:
  TableTxn(txn::Transaction& t, const ShardInfo& s, absl::string_view key, uint64_t h,
           uint64_t inline_max)
      : t_(t), s_(s), key_(key), h_(h), home_(s.Home(h)), inline_max_(inline_max) {}

  // Reads the key's neighbourhood (one READ, unless ReadNeighbourhoods did) and its overflow
  // chain (a READ per block).
  absl::Status Load();

  // The neighbourhoods of several keys (tables of one transaction, to be loaded and changed in
  // this order) with their READs in flight together: each table's Load then takes its copy
  // instead of reading. The read set is what each key's ReadRun would have recorded. A bucket
  // that another of the keys may read (its neighbourhood, or the buckets its displacement may
  // read) counts as read before, so that a key's change keeps validating what another key's
  // outcome depends on, as when the keys are changed one after another. On an error, `*failed`
  // is the table it concerns (tables.size(): the batch's READ).
  static absl::Status ReadNeighbourhoods(txn::Transaction& t, absl::Span<TableTxn* const> tables,
                                         size_t* failed);

  // Reads an object an entry points to. The entry may be stale (a bucket this transaction read
  // before a concurrent commit replaced the item): a freed or resized object then means "changed",
  // and the transaction, which could not have committed, runs again.
  absl::Status ReadItem(GlobalAddress addr, uint64_t size, std::string* out);
  // Frees an object an entry points to that this transaction did not read (a chunk): gone
  // already means "changed", as for ReadItem.
  absl::Status FreeItem(GlobalAddress addr) { return Changed(t_.Free(addr)); }

  struct Loc {
    size_t buf = 0;
    Entry entry;
    std::string value;   // the current value (chunked: after LoadValue)
    bool loaded = true;  // false for a chunked value not read yet
    IndexView index;     // chunked only (its key view is not kept)
  };

  // Where the key is (with its value, unless chunked); nullopt if absent.
  absl::StatusOr<std::optional<Loc>> Find();

  // Reads a chunked value's chunks (one READ each, inside the transaction).
  absl::Status LoadValue(Loc& at);

  // Sets the key's value (`at`: where it is now, if it is).
  absl::Status Put(const std::optional<Loc>& at, absl::string_view value);

  absl::Status Delete(const Loc& at);

  // After a change to a key that was found at `at`: the buckets and blocks this lookup read
  // only to find the key do not decide the outcome, so Commit need not validate them (on the
  // software providers that saves a READ per bucket). The key is in one place only, and whoever
  // moves or removes it writes that place, so the bucket or block that holds it stays in the
  // read set (or is written); what this transaction had read before the lookup stays too. A
  // lookup that did not find the key keeps everything: "absent" depends on every bucket.
  void ReleaseLookupReads(const Loc& at);

 private:
  struct Buf {
    GlobalAddress addr;
    std::string payload;  // a bucket's layout (kv/bucket.h); a block's after its identity
    bool dirty = false;
    bool written = false;  // by Flush
    bool freed = false;
    std::string identity;  // an overflow block's identity word (BlockIdentity); empty: bucket
  };

  txn::Transaction::ObjectRun NeighbourhoodRun(std::vector<std::string>* out) const;
  // The neighbourhood's buckets this transaction read or wrote before this key's lookup
  // (ReleaseLookupReads keeps them).
  void NoteTouched();
  // The same for the buckets of the neighbourhood that the other tables' lookups or
  // displacements (Displace: up to 4 H buckets after their neighbourhood) may read.
  void NoteShared(absl::Span<TableTxn* const> tables);

  // NotFound or InvalidArgument from an object an entry or link pointed to: it was freed, or
  // reused with another size, by a commit after this transaction read the pointer, so this
  // transaction cannot commit: it runs again. (The same codes from the bucket array are not
  // changes: they pass on.)
  // The same codes from reads of the bucket array (never freed or resized): DataLoss.
  absl::Status Buckets(absl::Status st) const;
  static absl::Status Changed(absl::Status st) { return TableChanged(std::move(st)); }

  // Takes the entry out of its bucket or block (and frees its out-of-line object); an overflow
  // block left empty is unlinked and freed.
  absl::Status Remove(const Loc& at);

  // Places an encoded entry: in the neighbourhood, by displacing other keys' entries further out,
  // or in the overflow chain.
  absl::Status Insert(std::string entry);

  // Hopscotch displacement: finds a bucket after the neighbourhood with room, and moves entries
  // of other keys back-to-front into it until the room is inside the neighbourhood. False when
  // that is not possible within kReach buckets (nothing is changed then).
  absl::StatusOr<bool> Displace(std::string& entry);

  absl::Status Flush();

  txn::Transaction& t_;
  const ShardInfo& s_;
  const absl::string_view key_;
  const uint64_t h_;
  const uint64_t home_;
  const uint64_t inline_max_;
  // The neighbourhood's H buckets first (index i: home + i), then chain blocks and displaced
  // buckets in the order they were loaded or created.
  std::vector<Buf> bufs_;
  std::vector<size_t> chain_;                     // indices into bufs_, in chain order
  absl::flat_hash_set<uint64_t> touched_before_;  // read or written before Load (packed)
  // The neighbourhood as ReadNeighbourhoods read it, for Load.
  bool prefetched_ = false;
  std::vector<std::string> prefetched_payloads_;
};

// The operations on a key's part of the table inside one transaction (the standalone calls
// run them in transactions of their own, the Txn& ones in the caller's).

// What an update sets: a view of the new value (valid until UpdateIn returns), or nullopt to leave
// the key as it is.
using NewValue = std::optional<absl::string_view>;

// One read-modify-write of the key: finds it and sets what `update` makes of its current value
// (`value`, null when the key is absent). With `read_value` false a chunked value's chunks are
// not read and `*value` is empty: the update may use only whether the key is there. The update
// may change `*value` (Append) or move it away (GetAndSet): UpdateIn no longer uses it. After a
// change, the lookup's reads that did not decide the outcome are released (ReleaseLookupReads);
// an update that changes nothing keeps them all, so that the commit validates what it saw (the
// transaction is then read-only).
absl::Status UpdateIn(TableTxn& table, bool read_value,
                      absl::FunctionRef<NewValue(std::string* value)> update);

absl::Status PutIn(TableTxn& table, absl::string_view value);
absl::Status DeleteIn(TableTxn& table, bool* deleted);
absl::Status GetIn(TableTxn& table, bool* found, std::string* value);

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_INTERNAL_TABLE_TXN_H_
