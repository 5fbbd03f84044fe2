// Running a checked command (kvsh_lib.h's Command) against the key-value store: the one place
// where each command of kvsh and of the RESP gateway (//tools:kv_resp) becomes calls of
// kv::Client, so that both front ends answer every command the same way.
//
//   kv::Client client(store, worker);
//   kvsh::KvCommands commands(client, worker, limits);
//   absl::StatusOr<kvsh::Command> c = kvsh::ParseCommand(tokens, commands.limits());
//   kvsh::Reply r = c.ok() ? commands.Execute(*c) : kvsh::Reply::Error(...);
//
// Replies are Redis's: a status, an error, nil, a string, an integer or an array (SCAN's nested).
// Only stats, info and help answer preformatted text (Reply::Kind::kText), which a RESP front
// end sends as a bulk string, as Redis sends INFO.
#ifndef FARM_TOOLS_KV_COMMANDS_H_
#define FARM_TOOLS_KV_COMMANDS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "tools/kvsh_lib.h"

namespace farm {
namespace kvsh {

// The store's key and value limits, for ParseCommand.
Limits StoreLimits(const kv::Store& store);

// Thread safety: as its kv::Client, it belongs to the Worker's thread.
class KvCommands {
 public:
  // `raw`: stats prints its table tab-separated (kvsh --raw). The client must be one of `worker`.
  KvCommands(kv::Client& client, Worker& worker, const Limits& limits, bool raw = false)
      : client_(client), worker_(worker), limits_(limits), raw_(raw) {}
  KvCommands(const KvCommands&) = delete;
  KvCommands& operator=(const KvCommands&) = delete;

  // The reply of `c` (quit is the caller's: it answers an internal error here). A failed store
  // call is an error reply (kvsh::ErrorReply), never a crash.
  Reply Execute(const Command& c);

  // Client::Stats as the rows kvsh_lib prints.
  absl::StatusOr<std::vector<StatsRow>> StatsRows();

  const Limits& limits() const { return limits_; }

 private:
  // Home buckets per Scan step for keys: large, to make few round trips.
  static constexpr uint64_t kKeysStep = 1000;

  Reply Del(const Command& c);
  Reply Mget(const Command& c);
  Reply Exists(const Command& c);
  Reply Keys(const Command& c);
  Reply MultiPutIfNoneExists(const Command& c);
  Reply Put(const Command& c);
  Reply ConditionalPut(const Command& c);

  kv::Client& client_;
  Worker& worker_;
  const Limits limits_;
  const bool raw_;
};

}  // namespace kvsh
}  // namespace farm

#endif  // FARM_TOOLS_KV_COMMANDS_H_
