// CallTable: the calls in flight of one Rpc, by id, for concurrent use without a lock on the
// common path.
//
//   CallTable<Call> calls;
//   calls.Insert(id, call);                          // the caller, before sending the request
//   std::shared_ptr<Call> c = calls.Take(id);        // whoever completes it: once, or nullptr
//   c = calls.Take(id, [](const Call& c) { return c.node == 3; });  // only if it is node 3's
//   auto dead = calls.TakeIf([](const Call& c) { return c.node == 3; });
//   auto old = calls.TakeIfIn(/*first=*/512, /*count=*/512, /*overflow=*/false, is_expired);
//
// Ids come from one counter, so the calls in flight occupy consecutive slots of a power-of-two
// array (slot = id mod kSlots). A call whose slot is still held by an older one (more than
// kSlots calls in flight, or an old call nobody awaits) goes to an overflow map under a mutex.
//
// Each slot's `key` word is both its lock and its key: 0 = free, kBusy = claimed by one thread,
// anything else = the id of the call the slot holds. A thread touches a slot's value only while
// it holds the claim, which it takes with a CAS from the key it expects to kBusy (acquire) and
// gives up by storing the slot's new key (release): the value written under one claim is seen by
// the next claimer. Claims last a few instructions and never block, so a thread that finds a
// slot busy spins until it is released.
//
// Thread safety: all methods are safe for concurrent use. Ids must never be 0 or ~0.
#ifndef FARM_MESSAGING_CALL_TABLE_H_
#define FARM_MESSAGING_CALL_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace farm {

template <typename T>
class CallTable {
 public:
  static constexpr size_t kSlots = 4096;
  static_assert((kSlots & (kSlots - 1)) == 0, "slot = id mod kSlots needs a power of two");

  CallTable() : slots_(new Slot[kSlots]) {}
  CallTable(const CallTable&) = delete;
  CallTable& operator=(const CallTable&) = delete;

  void Insert(uint64_t id, std::shared_ptr<T> value) {
    Slot& s = slots_[id & (kSlots - 1)];
    uint64_t expected = 0;
    if (s.key.compare_exchange_strong(expected, kBusy, std::memory_order_acquire)) {
      s.value = std::move(value);
      s.key.store(id, std::memory_order_release);
      return;
    }
    std::lock_guard<std::mutex> l(overflow_mu_);
    overflow_[id] = std::move(value);
  }

  // Removes and returns the call with this id; nullptr if it is not (any more) in the table.
  std::shared_ptr<T> Take(uint64_t id) {
    return Take(id, [](const T&) { return true; });
  }

  // The same, but only if accept(const T&) is true for the call; otherwise it stays in the table
  // and nullptr is returned (e.g. a response whose sender is not the node the call went to).
  template <typename Accept>
  std::shared_ptr<T> Take(uint64_t id, Accept accept) {
    Slot& s = slots_[id & (kSlots - 1)];
    for (uint64_t key = s.key.load(std::memory_order_relaxed);;) {
      if (key == kBusy) {
        Pause();
        key = s.key.load(std::memory_order_relaxed);
        continue;
      }
      if (key != id) break;
      if (s.key.compare_exchange_weak(key, kBusy, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        if (!accept(*s.value)) {
          s.key.store(id, std::memory_order_release);  // unchanged
          return nullptr;
        }
        std::shared_ptr<T> v = std::move(s.value);
        s.key.store(0, std::memory_order_release);
        return v;
      }
    }
    // Not in its slot: in the overflow map, or gone (completed, or a late response).
    std::lock_guard<std::mutex> l(overflow_mu_);
    auto it = overflow_.find(id);
    if (it == overflow_.end() || !accept(*it->second)) return nullptr;
    std::shared_ptr<T> v = std::move(it->second);
    overflow_.erase(it);
    return v;
  }

  // Removes and returns every call for which pred(const T&) is true. Visits every slot: for rare
  // events (a peer failing, shutdown).
  template <typename Pred>
  std::vector<std::shared_ptr<T>> TakeIf(Pred pred) {
    return TakeIfIn(0, kSlots, /*overflow=*/true, pred);
  }

  // The same for the `count` slots from `first` on (wrapping around), and the overflow map if
  // `overflow`: a bounded share of the table, for a sweep spread over several calls. Empty slots
  // are skipped without claiming them.
  template <typename Pred>
  std::vector<std::shared_ptr<T>> TakeIfIn(size_t first, size_t count, bool overflow, Pred pred) {
    std::vector<std::shared_ptr<T>> out;
    for (size_t k = 0; k < count && k < kSlots; ++k) {
      Slot& s = slots_[(first + k) & (kSlots - 1)];
      for (uint64_t key = s.key.load(std::memory_order_relaxed); key != 0;) {
        if (key == kBusy) {
          Pause();
          key = s.key.load(std::memory_order_relaxed);
          continue;
        }
        if (!s.key.compare_exchange_weak(key, kBusy, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
          continue;
        }
        uint64_t next = key;
        if (pred(*s.value)) {
          out.push_back(std::move(s.value));
          next = 0;
        }
        s.key.store(next, std::memory_order_release);
        break;
      }
    }
    if (!overflow) return out;
    std::lock_guard<std::mutex> l(overflow_mu_);
    for (auto it = overflow_.begin(); it != overflow_.end();) {
      if (pred(*it->second)) {
        out.push_back(std::move(it->second));
        overflow_.erase(it++);
      } else {
        ++it;
      }
    }
    return out;
  }

  // How many calls the table holds: a snapshot that visits every slot, for tests and
  // diagnostics (a slot claimed at that moment counts as held).
  size_t Count() {
    size_t n = 0;
    for (size_t i = 0; i < kSlots; ++i) {
      // Relaxed: a snapshot; nothing is read through the key.
      if (slots_[i].key.load(std::memory_order_relaxed) != 0) ++n;
    }
    std::lock_guard<std::mutex> l(overflow_mu_);
    return n + overflow_.size();
  }

 private:
  static constexpr uint64_t kBusy = ~uint64_t{0};
  struct Slot {
    std::atomic<uint64_t> key{0};
    std::shared_ptr<T> value;  // accessed only under the slot's claim
  };
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  std::unique_ptr<Slot[]> slots_;
  std::mutex overflow_mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<T>> overflow_;  // guarded by overflow_mu_
};

}  // namespace farm

#endif  // FARM_MESSAGING_CALL_TABLE_H_
