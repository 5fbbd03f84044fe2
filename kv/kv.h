// farm/kv/kv.h: a key-value store in the cluster's shared memory (FaRM-KV). A library, not a
// server: every node that links it and creates a Store holds one shard of the table in its own
// regions, and any node's threads read and write every shard.
//
//   std::unique_ptr<farm::kv::Store> store;
//   farm::App app;
//   app.setup = [&](farm::Runtime& rt) -> absl::Status {
//     absl::StatusOr<std::unique_ptr<farm::kv::Store>> s = farm::kv::Store::Create(rt);
//     if (!s.ok()) return s.status();
//     store = std::move(*s);
//     return absl::OkStatus();
//   };
//   app.run = [&](farm::Runtime& rt) -> absl::Status {
//     std::unique_ptr<farm::Worker> w = *rt.NewWorker();
//     farm::kv::Client kv(*store, *w);          // one per thread, like its Worker
//     RETURN_IF_ERROR(kv.Put("alice", "100"));   // a transaction
//     absl::StatusOr<std::string> v = kv.Get("alice");  // one one-sided READ
//     ...
//   };
//
// Durability: that of the cluster's regions. With replication (ClusterConfig.f >= 1) a shard's
// buckets and items are objects in regions with backups, so a shard node's death loses no key:
// its regions are served by their promoted backups under the same addresses, clients go on using
// the shard (after a short recovery, during which its keys answer Unavailable), a client that
// never saw the shard learns it from any other shard node (every shard node gathers every
// shard's description when the cluster starts), and the node, started again, takes its previous
// shard back. Without replication (f = 0, the default) every key has exactly one copy, in its
// shard node's memory: when a shard node dies (crash, kill, eviction), the keys of its shard are
// lost. Until then they are unreachable (Unavailable); if the node is restarted, its new shard is
// empty and says so: every operation on its keys gets DataLoss (it does not pose as an empty
// shard, which would answer NotFound for keys whose PUT returned OK), and the only way back is to
// start the whole cluster again.
//
// The table (FaRM's chained associative hopscotch hashing). Each shard is an array of buckets;
// a bucket is one object of the transaction layer (txn/object.h: lock word, check, payload) and
// holds several entries. The shard nodes are the configuration's nodes that form the cluster
// (every node but the `late` ones, which only use the store: the same list on every node, so all
// agree where a key lives even while some are gone). A key hashes to a shard (rendezvous hashing
// over the shard nodes) and to
// a home bucket there (under a random seed drawn by the shard's node, so that clients cannot
// choose keys that collide: hash flooding), and lives in one of the `neighbourhood` (H) buckets
// from its home bucket
// on, so a GET fetches the whole neighbourhood with ONE one-sided READ of H consecutive buckets.
// An insert that finds no room in the neighbourhood moves entries of other keys further out
// (hopscotch displacement); when that fails too, the key goes to a chain of overflow objects
// hanging off its home bucket; each block names its chain (a word derived from the seed and the
// home bucket), so a reader that followed a link to a block freed and reused meanwhile, e.g. by
// an item of the same size, notices and starts again rather than reading user bytes as entries.
// Small items are stored inline in the bucket; a larger one lives in an object of its own (a second
// READ); a value too large for one object is split into chunk objects behind an index object (their
// READs posted together). Every change is a transaction (txn/), so it composes with other
// transactional work (the Txn& overloads).
//
// Consistency: operations are linearizable. A GET that finds its key in a bucket that is neither
// locked nor torn returns that bucket's value, which was the key's value when the bucket was
// read; a GET that does not find it reads the neighbourhood's lock words (and its chain's
// blocks') again and answers NotFound only if none changed in between (otherwise it retries).
// A GET by RPC runs the same lookup on the serving node, in its own memory. MultiGet is one
// such GET per key: each key's result is linearizable on its own, but the set is not a snapshot
// (see Client::MultiGet). The conditional and atomic updates (IncrBy, PutIfAbsent, PutIfPresent,
// GetAndSet, Append, CompareAndSet) are one transaction each: read and change are one atomic step.
// Scan walks every key with Redis's guarantee (a key present throughout is returned; each step
// is a snapshot of its home buckets, the iteration is not); Size() sums per-shard counts.
// Clients keep the shard descriptions they learnt for as long as each shard's bucket array's
// region exists (a shard's description never changes while it does).
//
// Errors (absl::Status): NotFound (no such key), InvalidArgument (empty key, key or value over
// the limits), ResourceExhausted (the shard's memory is full), Unavailable (the key's shard node
// left and, without replication, nobody serves its shard; or its region is recovering), DataLoss
// (the key's shard node restarted and lost its keys, or the shard's memory holds no table),
// Aborted (a write kept conflicting), FailedPrecondition (IncrBy of a value that is not an
// integer, or whose sum would overflow), DeadlineExceeded, and the platform's errors.
//
// Thread safety: a Store is safe for concurrent use; a Client belongs to its Worker's thread.
#ifndef FARM_KV_KV_H_
#define FARM_KV_KV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "farm/farm.h"
#include "farm/kv/shard_stats.h"

namespace farm {
namespace kv {

inline constexpr uint64_t kMaxKeySize = 1024;
// Largest value (less with very small messaging rings: Store::max_value_size()).
inline constexpr uint64_t kMaxValueSize = 1 << 20;

// How Client::MultiGet reads its keys (Options::multi_get, Client::set_multi_get).
enum class MultiGetPath {
  // By the provider (Runtime::provider()) and the keys: where a one-sided READ costs a system
  // call or the target's CPU ("tcp;ofi_rxm", whose ofi_rxm emulates READs over TCP through the
  // target's progress; "tcp", the same in libfabric's tcp provider; "shm", whose READ is the
  // reader's process_vm_readv), kRpc for the nodes that serve at least kAutoMinBatch of the keys
  // and one-sided READs for the others; kOneSided elsewhere ("verbs": the NIC reads). Measured
  // (kvbench YCSB-C, 8 GETs in flight, 1 client thread): with one shard node (8 keys a node)
  // batches gave 2.3x the GETs of READs on tcp;ofi_rxm and 3x on shm; with three (2.7 keys a
  // node) READs gave 1.1-1.4x the batches' on both.
  kAuto,
  // One one-sided READ of each key's neighbourhood, all posted together; then the READs that
  // some keys need next (out-of-line values, chunks, overflow blocks, a miss's re-check) in
  // rounds, each round's posted together: as many rounds as the deepest key needs, not one
  // READ after the other per key.
  kOneSided,
  // One request per node serving the keys' shards (more for over 64 keys, or keys that do not
  // fit one message), all in flight together, each answered with every key's value (HERD's
  // design): k GETs to one node cost it one exchange instead of k READs. Keys of shards that
  // this node serves itself are read from its memory, and those that an answer cannot carry (a
  // value larger than one message) or that the serving node could not look up are read
  // one-sided.
  kRpc,
};

struct Options {
  // Buckets in this node's shard (the table's capacity grows with the number of nodes). The
  // shard needs buckets * bucket_bytes contiguous bytes in one of the node's regions.
  uint64_t buckets = 8192;
  // Bytes of one bucket, header included: a power of two, 128 .. 4096. 256 holds four items of a
  // 16-byte key and a 32-byte value.
  uint32_t bucket_bytes = 256;
  // H: a key lives in one of the H buckets from its home bucket; a GET reads H * bucket_bytes.
  uint32_t neighbourhood = 8;
  // False on a node that only uses the store (a late node, e.g. a shell joining a cluster).
  bool hold_shard = true;
  // Method ids of the store's RPCs (shard descriptions, GET by RPC, statistics, batched GET):
  // four ids from this one up. Change them only if the application uses these ids itself.
  uint16_t first_method = 0xfe00;
  // How this node's clients' MultiGet reads (MultiGetPath). Only this node's reads depend on it:
  // nodes may differ.
  MultiGetPath multi_get = MultiGetPath::kAuto;
};

// kAuto's batches: a node's keys go in one request when it serves at least this many of them.
inline constexpr size_t kAutoMinBatch = 4;

// The path kAuto stands for on `provider` (Runtime::provider()): kRpc where it batches (then only
// to the nodes with kAutoMinBatch keys or more), else kOneSided; other paths are returned as they
// are.
MultiGetPath ResolveMultiGet(MultiGetPath path, absl::string_view provider);

// One shard's statistics (Client::Stats): ShardStats, in farm/kv/shard_stats.h.

class Store {
 public:
  // Call from App::setup, before the node serves: formats this node's shard (unless
  // !options.hold_shard) and registers the store's RPC handlers. Every node of the cluster that
  // uses the store calls it with the same options; the nodes that form the cluster hold shards,
  // late nodes (clients) must not. InvalidArgument for bad options (or hold_shard not matching
  // the node's kind), ResourceExhausted when the shard does not fit this node's memory.
  static absl::StatusOr<std::unique_ptr<Store>> Create(Runtime& runtime,
                                                       const Options& options = {});
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  Runtime& runtime() const;
  const Options& options() const;
  // Largest key and value: kMaxKeySize and kMaxValueSize (less with tiny messaging rings).
  uint64_t max_key_size() const;
  uint64_t max_value_size() const;

  struct Impl;  // internal

 private:
  friend class Client;
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One step of an iteration over the keys (Client::Scan).
struct ScanPage {
  uint64_t cursor = 0;            // to pass to the next step; 0: the iteration is over
  std::vector<std::string> keys;  // this step's keys (those matching the pattern)
};

// One thread's access to the store, through that thread's Worker.
class Client {
 public:
  Client(Store& store, Worker& worker);
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // The value of `key`: NotFound when there is none. One one-sided READ of the key's
  // neighbourhood (a second for an out-of-line value or an overflow chain).
  absl::StatusOr<std::string> Get(absl::string_view key);
  // The same answered by the node that serves the shard (its shard node, or the promoted backup
  // after that failed): one RPC (HERD's single round trip), for comparison.
  absl::StatusOr<std::string> GetRpc(absl::string_view key);
  // Several keys, read together by the path of multi_get(): one result per key, in order, each
  // what Get would answer (an error for one key, e.g. an empty key, leaves the others alone).
  // Each key's value is linearizable on its own: it was the key's value at some moment between
  // the call and the return, on either path. The set is NOT a snapshot: two keys may be read at
  // different moments, so a transaction that changed both between them may show in one and not
  // the other (use Get(Txn&, ...) in one transaction for a consistent set).
  std::vector<absl::StatusOr<std::string>> MultiGet(absl::Span<const std::string> keys);
  // The path MultiGet takes (kOneSided or kRpc: kAuto resolved for this node's provider), and a
  // choice for this client that overrides the store's Options::multi_get (kAuto: by provider).
  MultiGetPath multi_get() const;
  void set_multi_get(MultiGetPath path);
  // Sets `key` to `value` (inserts or replaces).
  absl::Status Put(absl::string_view key, absl::string_view value);
  // Sets every key of `items` to its value in ONE transaction: all of them or none, across
  // shards, retried on conflicts like Put. The keys' neighbourhoods are read with their READs in
  // flight together (overflow chains and displacements are read after, key by key), and the
  // commit is one LOCK, validation and COMMIT round for all the keys, instead of one transaction
  // per key. Every key and value is checked first: a malformed one (InvalidArgument, naming the
  // item) sets nothing. A key given twice gets its last value. No items: OK, nothing done.
  absl::Status MultiPut(absl::Span<const std::pair<std::string, std::string>> items);
  // Removes `key`: true if it was there.
  absl::StatusOr<bool> Delete(absl::string_view key);
  // Sets `key` to `value` if its current value is `expected` (nullopt: if the key is absent).
  // True if it did.
  absl::StatusOr<bool> CompareAndSet(absl::string_view key,
                                     const std::optional<std::string>& expected,
                                     absl::string_view value);

  // Conditional and atomic updates (Redis's INCRBY, SETNX, SET XX, GETSET, APPEND; EXISTS). Each
  // but Exists is ONE transaction that reads the key and changes it, retried on conflicts like
  // Put and CompareAndSet, so each is linearizable: concurrent IncrBys of one key never lose an
  // increment, and of concurrent PutIfAbsents of one key exactly one sets it. A refusal (IncrBy's
  // FailedPrecondition, Append's InvalidArgument for a result over the limit) changes nothing and
  // is returned only once the transaction that read the refused value committed (read-only,
  // validated), so it was true at a moment during the call. A bad key or value is
  // InvalidArgument, as for Put; the other errors are those of Put.

  // Adds `delta` to the key's value read as a decimal int64 (a missing key counts as 0) and
  // stores the sum as its decimal string: the new value. The value must be an integer as Redis
  // writes one: an optional '-', then digits without a leading zero ("0" alone; not "-0", "+1",
  // "007", " 1" or "1.0"), within int64; otherwise FailedPrecondition "value is not an integer or
  // out of range" (Redis's words), and FailedPrecondition "increment or decrement would overflow"
  // when the sum leaves int64. FailedPrecondition, not InvalidArgument: the arguments are fine,
  // the stored value is what must change first (InvalidArgument here means a bad key or value,
  // whatever the store holds). Redis's INCR and DECR are IncrBy(key, 1) and IncrBy(key, -1).
  absl::StatusOr<int64_t> IncrBy(absl::string_view key, int64_t delta);
  // Sets `key` to `value` if the key is absent (SETNX, SET NX): true if it did.
  absl::StatusOr<bool> PutIfAbsent(absl::string_view key, absl::string_view value);
  // Sets `key` to `value` if the key is present (SET XX): true if it did.
  absl::StatusOr<bool> PutIfPresent(absl::string_view key, absl::string_view value);
  // Sets `key` to `value` and returns its previous value, nullopt if it was absent (GETSET, SET
  // GET).
  absl::StatusOr<std::optional<std::string>> GetAndSet(absl::string_view key,
                                                       absl::string_view value);
  // Appends `suffix` to the key's value (a missing key is created with `suffix`): the value's new
  // length. A result longer than max_value_size() is InvalidArgument naming the limit, and
  // nothing is changed. The value is rewritten whole: the cost grows with its length.
  absl::StatusOr<uint64_t> Append(absl::string_view key, absl::string_view suffix);
  // Whether `key` is there: a lock-free lookup like Get (no transaction), linearizable like Get,
  // that copies no value (of a chunked value it reads the index, not the chunks).
  absl::StatusOr<bool> Exists(absl::string_view key);

  // The same inside a caller's transaction (applied when it commits).
  absl::StatusOr<std::string> Get(Txn& txn, absl::string_view key);
  absl::Status Put(Txn& txn, absl::string_view key, absl::string_view value);
  absl::Status MultiPut(Txn& txn, absl::Span<const std::pair<std::string, std::string>> items);
  absl::StatusOr<bool> Delete(Txn& txn, absl::string_view key);
  // Refusals (IncrBy's FailedPrecondition, Append's InvalidArgument) change nothing and leave the
  // transaction usable; the value they refused is validated when it commits.
  absl::StatusOr<int64_t> IncrBy(Txn& txn, absl::string_view key, int64_t delta);
  absl::StatusOr<bool> PutIfAbsent(Txn& txn, absl::string_view key, absl::string_view value);
  absl::StatusOr<bool> PutIfPresent(Txn& txn, absl::string_view key, absl::string_view value);
  absl::StatusOr<std::optional<std::string>> GetAndSet(Txn& txn, absl::string_view key,
                                                       absl::string_view value);
  absl::StatusOr<uint64_t> Append(Txn& txn, absl::string_view key, absl::string_view suffix);
  absl::StatusOr<bool> Exists(Txn& txn, absl::string_view key);

  // One step of an iteration over every key of the store (Redis's SCAN): start with cursor 0,
  // pass each returned cursor to the next call; the iteration is over when the cursor returned
  // is 0. A step returns the keys matching `pattern` (Redis's glob patterns, kv/glob.h; empty:
  // every key) among those whose home bucket lies in the `count` home buckets of one shard that
  // the step covers (Redis's COUNT: a hint of the work, not of the keys returned; a step may
  // return none with a cursor that is not 0, and never crosses into another shard; a COUNT whose
  // buckets do not fit one READ of the Worker's buffer, RuntimeOptions::worker_buffer, covers as
  // many as fit: 4,089 of 256 bytes with H = 8 and the default 1 MiB). The cursor
  // is a shard's position and a home bucket in it.
  // Guarantee (Redis's): a key present from the iteration's first call to its last is returned
  // at least once, whatever is written meanwhile; a key added or removed meanwhile may or may
  // not be. A key never leaves its home bucket's neighbourhood or chain (displacement and a PUT
  // that moves it keep it there), and each step reads its buckets, the H - 1 after them and its
  // homes' overflow chains in one read-only transaction: a consistent view of its homes' keys.
  // So no key comes twice in one iteration either (Redis allows that; a table resize, when there
  // is one, may). Costs a READ per out-of-line item or chain block besides the buckets' one.
  // Errors: InvalidArgument for a cursor that no step returned (also one of a cluster whose
  // tables differ), the errors of reading the shard (Unavailable, DataLoss); after an error the
  // same cursor may be passed again.
  absl::StatusOr<ScanPage> Scan(uint64_t cursor, uint64_t count = 10,
                                absl::string_view pattern = "");
  // The number of keys in the store: the sum of every shard's count (Stats), read shard after
  // shard, so under concurrent writes not a count at one moment (Redis's DBSIZE is).
  absl::StatusOr<uint64_t> Size();

  // Statistics of every shard (one RPC to each shard node).
  absl::StatusOr<std::vector<ShardStats>> Stats();

  struct Impl;  // internal

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kv
}  // namespace farm

#endif  // FARM_KV_KV_H_
