// Two fabric endpoints in one process for the fabric layer's tests (fabric_test,
// fault_injection_test): `a` initiates, `b` is the target, and a thread drives b's progress as a
// node's poller would (shm, tcp;ofi_rxm and tcp complete operations targeting b only then).
// Catch2 tests only (it REQUIREs its set-up).
#ifndef FARM_PLATFORM_TESTING_FABRIC_PAIR_H_
#define FARM_PLATFORM_TESTING_FABRIC_PAIR_H_

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "platform/fabric.h"
#include "platform/testing/test_env.h"

namespace farm {
namespace testing {

struct FabricPair {
  std::unique_ptr<Fabric> a, b;
  std::vector<char> abuf, bbuf;
  std::unique_ptr<MemoryRegistration> amr, bmr;
  PeerId b_from_a = 0;
  std::atomic<bool> stop{false};
  // While set, nobody progresses b: operations targeting it stay outstanding on tcp;ofi_rxm and
  // tcp, and on shm unless it serves them itself (Fabric::direct_writes; verbs serves them in
  // hardware regardless).
  std::atomic<bool> paused{false};
  std::thread poller;

  explicit FabricPair(const std::string& provider, size_t bytes = 1 << 16)
      : abuf(bytes), bbuf(bytes) {
    FabricOptions o;
    o.provider = provider;
    o.bind_host = TestHost();
    auto fa = Fabric::Open(o);
    INFO(fa.status().ToString());
    REQUIRE(fa.ok());
    auto fb = Fabric::Open(o);
    REQUIRE(fb.ok());
    a = std::move(*fa);
    b = std::move(*fb);
    amr = std::move(*a->Register(abuf.data(), abuf.size()));
    bmr = std::move(*b->Register(bbuf.data(), bbuf.size()));
    auto peer = a->AddPeer(b->address());
    REQUIRE(peer.ok());
    b_from_a = *peer;
    poller = std::thread([this] {
      while (!stop.load()) {
        if (!paused.load()) {
          b->Progress();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(100));  // leave the core
        }
      }
    });
  }
  ~FabricPair() {
    stop = true;
    poller.join();
  }
  RemoteBuffer Remote(size_t offset) const {
    return RemoteBuffer{bmr->remote_base() + offset, bmr->key()};
  }
};

}  // namespace testing
}  // namespace farm

#endif  // FARM_PLATFORM_TESTING_FABRIC_PAIR_H_
