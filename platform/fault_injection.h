// FaultInjection: tests drop, delay, duplicate and corrupt one-sided WRITEs (as eRPC's fault
// injection, or LevelDB's fault-injecting Env), to check that the protocols above the fabric
// detect or survive what a lossy, reordering or corrupting network would do to them.
//
// Every WRITE an OpBatch posts passes the seam in platform/fault_injection_hook.h. While a
// FaultInjection exists, each WRITE is matched against its rules in the order they were added;
// the first rule that matches and has firings left decides its fate:
//
//   kDrop       The bytes never land, but the sender's completion arrives (OK): a lost or
//               misdirected WRITE that the protocol itself must detect.
//   kDelay      The sender's completion arrives at once (OK); the bytes are copied and posted
//               later, after `delay`, or when the test calls Release() (delay infinite): a WRITE
//               overtaken by later ones, or held up in the network. Held WRITEs that were never
//               posted when the FaultInjection is destroyed are discarded.
//   kDuplicate  Posted twice, the copy right after the original; both complete before the
//               sender's batch does. With a finite or infinite `delay` the copy is held and
//               posted later instead, as with kDelay: a stale copy landing after the original
//               was consumed.
//   kCorrupt    Posted with the byte at `corrupt_offset` (clamped to the WRITE) XORed with
//               `corrupt_mask`, from a copy: the sender's buffer is left alone.
//
//   FaultInjection faults;                   // after the nodes: destroyed before their fabrics
//   const RemoteTarget ring = ...;           // e.g. from Node::Resolve
//   int rule = faults.Add({WritesInto(node->fabric(), ring.peer, ring.buffer, ring_size),
//                          WriteFault::kCorrupt});
//   ... run the protocol ...
//   CHECK(faults.fired(rule) == 1);
//
// Compiled out of release builds: with NDEBUG the seam is empty, kCompiledIn is false and no
// rule ever fires (tests that need faults skip themselves).
//
// Lifetime: one FaultInjection at a time per process. Copies of delayed and corrupted WRITEs are
// registered with the sender's fabric and kept until the FaultInjection is destroyed, which must
// happen before those fabrics are closed (declare it after the nodes in a test).
//
// Thread safety: all methods are safe for concurrent use; WRITEs are intercepted on whichever
// thread posts them. Delayed WRITEs are posted by a thread of the FaultInjection.
#ifndef FARM_PLATFORM_FAULT_INJECTION_H_
#define FARM_PLATFORM_FAULT_INJECTION_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "platform/fabric.h"
#include "platform/fault_injection_hook.h"

namespace farm {

enum class WriteFault { kDrop, kDelay, kDuplicate, kCorrupt };

// What a rule's predicate sees of a WRITE.
struct WriteInfo {
  const Fabric* fabric = nullptr;  // the sender's
  PeerId peer = 0;                 // the target, as the sender's fabric knows it
  RemoteBuffer remote;             // where the bytes go on the target
  size_t length = 0;
};

struct WriteFaultRule {
  std::function<bool(const WriteInfo&)> match;
  WriteFault fault = WriteFault::kDrop;
  // Matching WRITEs let through untouched before the rule fires, then how many it fires for
  // (-1: every one after that).
  int skip = 0;
  int count = 1;
  // kDelay, kDuplicate: when the (copy of the) WRITE is posted. kDelay's infinite default waits
  // for Release(); kDuplicate's zero default posts the copy at once.
  std::optional<absl::Duration> delay;
  // kCorrupt: the byte flipped and how.
  size_t corrupt_offset = 0;
  uint8_t corrupt_mask = 0xff;
};

// A predicate for WRITEs from `fabric` to `peer` that touch [remote.addr, remote.addr + size) of
// the registration with remote.key; `min_length`/`max_length` bound the WRITE's length.
std::function<bool(const WriteInfo&)> WritesInto(const Fabric* fabric, PeerId peer,
                                                 RemoteBuffer remote, uint64_t size,
                                                 size_t min_length = 0,
                                                 size_t max_length = SIZE_MAX);

class FaultInjection : private fault_injection_internal::WriteInterceptor {
 public:
#ifdef NDEBUG
  static constexpr bool kCompiledIn = false;
#else
  static constexpr bool kCompiledIn = true;
#endif

  FaultInjection();  // installs itself
  FaultInjection(const FaultInjection&) = delete;
  FaultInjection& operator=(const FaultInjection&) = delete;
  ~FaultInjection() override;  // uninstalls itself; discards held WRITEs

  // Adds a rule; returns its id for fired().
  int Add(WriteFaultRule rule);
  // How many WRITEs rule `id` has acted on.
  int fired(int id) const;
  // Posts every held WRITE now (delayed ones included) and waits for them; returns how many
  // were posted. An error of such a WRITE is logged, not returned: its sender saw success.
  int Release();
  // WRITEs held for later.
  int held() const;

 private:
  struct Rule {
    WriteFaultRule spec;
    int seen = 0;   // matching WRITEs so far
    int fired = 0;  // of which acted on
  };
  // A WRITE's bytes, copied into memory registered with its sender's fabric.
  struct Copy {
    Fabric* fabric = nullptr;
    PeerId peer = 0;
    RemoteBuffer remote;
    std::unique_ptr<char[]> bytes;
    std::unique_ptr<MemoryRegistration> mr;
    size_t length = 0;
    absl::Time post_at = absl::InfiniteFuture();
  };

  std::optional<absl::Status> Intercept(Fabric* fabric, OpBatch* batch, uint64_t peer,
                                        const RemoteBuffer& remote,
                                        const LocalBuffer& local) override;
  // The rule that acts on this WRITE, counted as fired; nullopt if none.
  std::optional<WriteFaultRule> Decide(const WriteInfo& w);
  static absl::StatusOr<std::unique_ptr<Copy>> MakeCopy(Fabric* fabric, PeerId peer,
                                                        const RemoteBuffer& remote,
                                                        const LocalBuffer& local);
  void Hold(std::unique_ptr<Copy> copy);
  static void Post(const Copy& c);
  void RunPoster();  // the thread that posts delayed WRITEs when they are due

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Rule> rules_;                   // guarded by mu_
  std::vector<std::unique_ptr<Copy>> held_;   // guarded by mu_; not yet posted
  std::vector<std::unique_ptr<Copy>> spent_;  // guarded by mu_; posted, kept registered
  bool stop_ = false;                         // guarded by mu_
  std::thread poster_;
};

}  // namespace farm

#endif  // FARM_PLATFORM_FAULT_INJECTION_H_
