// Engine: a node's transaction service. It owns the node's allocator and participant, serves
// the commit protocol's RPCs for coordinators on other nodes, aborts the transactions of
// coordinators that leave, and hands out transaction ids and pending truncations to this node's
// coordinators (txn/transaction.h).
//
// Thread safety: all methods are safe for concurrent use.
#ifndef FARM_TXN_ENGINE_H_
#define FARM_TXN_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "messaging/rpc.h"
#include "platform/node.h"
#include "txn/allocator.h"
#include "txn/participant.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {

class Engine {
 public:
  // Carves the node's data regions into the object heap and registers the protocol's handlers
  // on `rpc` (before it serves, so that no request finds them missing). `node` and `rpc` must
  // outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Start(Node* node, Rpc* rpc);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  ~Engine();

  Node* node() const { return node_; }
  Rpc* rpc() const { return rpc_; }
  Allocator& allocator() { return *allocator_; }
  Participant& participant() { return *participant_; }

  // Largest protocol message (what one ring message holds, less RPC's envelope).
  uint64_t max_message() const { return max_message_; }
  // Largest object: what the heap's slots hold and one LOCK message carries (with the default
  // 64 KiB rings, about 15 KiB; 64 KiB - 24 bytes needs rings of 320 KiB or more).
  uint64_t max_object_size() const { return max_object_size_; }
  // Room a LOCK message needs besides its writes' values (header, participants, truncations).
  static constexpr uint64_t kLockOverhead = 2048;
  static constexpr size_t kMaxTruncationsPerLock = 64;

  // Creates `count` objects of `size` payload bytes (zeros, version 1) in consecutive slots of
  // this node's memory, one slot size (the smallest power of two >= ObjectSpan(size)) apart, so
  // that one READ fetches several of them (e.g. a hash table's buckets): the first object's
  // address. They are ordinary objects from then on (transactions read and write them); they
  // are never freed. Errors: as Allocator::ReserveArray.
  absl::StatusOr<GlobalAddress> CreateObjectArray(uint64_t size, uint64_t count);

  TxnId NextId();
  // Transactions of this node whose records `owner` may drop: taken by the next LOCK to it.
  std::vector<uint64_t> TakeTruncations(uint32_t owner, size_t max = kMaxTruncationsPerLock);
  void AddTruncation(uint32_t owner, uint64_t seq);

 private:
  Engine(Node* node, Rpc* rpc) : node_(node), rpc_(rpc) {}
  void OnMembership(const control::Membership& m);

  Node* const node_;
  Rpc* const rpc_;
  std::unique_ptr<Allocator> allocator_;
  std::unique_ptr<Participant> participant_;
  std::atomic<uint64_t> next_seq_{0};
  uint64_t max_message_ = 0;
  uint64_t max_object_size_ = 0;
  int listener_ = -1;
  std::mutex mu_;
  absl::flat_hash_map<uint32_t, std::vector<uint64_t>> truncations_;
};

}  // namespace txn
}  // namespace farm

#endif  // FARM_TXN_ENGINE_H_
