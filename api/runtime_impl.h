// The insides of farm::Runtime and farm::Worker (farm.h), shared by the files of //:farm. Not part
// of the public API: applications never include it; the project's libraries built on the API
// (kv/) reach the platform's insides through it (target //:runtime_internal).
#ifndef FARM_API_RUNTIME_IMPL_H_
#define FARM_API_RUNTIME_IMPL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "farm.h"
#include "messaging/messenger.h"
#include "messaging/rpc.h"
#include "platform/node.h"
#include "platform/region.h"
#include "txn/engine.h"
#include "txn/transaction.h"

namespace farm {

struct Runtime::Impl {
  RuntimeOptions options;
  // Destroyed (~Impl): the engine stops, then rpc (no handler runs after that), txn, messenger,
  // node.
  std::unique_ptr<Node> node;
  std::unique_ptr<Messenger> messenger;
  std::unique_ptr<Rpc> rpc;
  std::unique_ptr<txn::Engine> txn;  // objects, allocation, the commit protocol's participant
  std::atomic<int> workers{0};       // Workers alive
  // Run first when the runtime stops (~Impl), before anything is torn down: libraries built on
  // the runtime stop the threads of their own that use it (the KV store's shard gathering).
  std::mutex stop_hooks_mu;
  std::vector<std::function<void()>> stop_hooks;

  // The whole cluster ends and this node keeps its regions in its data directory
  // (RuntimeOptions.data_dir): no new lock or allocation, wait (up to `timeout`) until nothing is
  // locked or being recovered here (txn::Engine::Quiesce), then write the regions to disk and
  // mark the directory clean (Node::SealDataDir), so that a restart serves them again. OK at once
  // without a data directory. On error the directory stays unclean, and a restart refuses it.
  absl::Status KeepForRestart(absl::Duration timeout);

  ~Impl();
};

struct Worker::Impl {
  Runtime::Impl* rt = nullptr;
  Messenger::LaneLease lane;
  // This thread's own endpoint and completion queue: its READs and WRITEs complete here, reaped
  // by this thread only.
  std::unique_ptr<Node::Channel> channel;
  // This worker's registered staging memory for remote READs and WRITEs (replaced after an
  // abandoned operation: see Node::StagingBuffer).
  std::unique_ptr<Node::StagingBuffer> staging;
  // What this thread's transactions use of the above.
  txn::ThreadContext txn_context;

  // One direction of Read/Write: `local` is the caller's memory.
  absl::Status Access(bool is_read, GlobalAddress addr, char* local, uint64_t len,
                      absl::Duration timeout);
  ~Impl();
};

struct Txn::Impl {
  explicit Impl(txn::ThreadContext* ctx) : t(ctx) {}
  txn::Transaction t;
};

// How the library's own files reach a Runtime's insides.
struct RuntimeAccess {
  static Runtime::Impl& Of(Runtime& rt) { return *rt.impl_; }
  static Worker::Impl& Of(Worker& w) { return *w.impl_; }
  static Txn::Impl& Of(Txn& t) { return *t.impl_; }
};

// The runtime's own RPC methods (ids from kFirstReservedMethod up).
inline constexpr uint16_t kAppDoneMethod = kFirstReservedMethod + 1;

}  // namespace farm

#endif  // FARM_API_RUNTIME_IMPL_H_
