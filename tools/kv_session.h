// A tool's place in a key-value cluster (kv/kv.h): the node a client tool (//tools:kvsh, the RESP
// gateway //tools:kv_resp) runs as, on a cluster it starts (--local=N: N //tools:node --kv
// processes on this host, which die with the tool) or one it joins (--config=FILE, as a `late`
// node, the first free one unless --node_id says which).
//
//   const int signal_fd = BlockTerminationSignals();  // before any thread starts
//   kvsh::KvSession session = kvsh::OpenKvSession({"kv_resp", "the gateway"}, signal_fd, {});
//   if (session.exit_code != 0) return session.exit_code;  // said why in the log
//   kv::Client client(*session.store, *session.worker);
//
// The flags (--local, --join_timeout_s, --late_nodes, --write_config, --host, --region_size,
// --region_count, --lock_memory, --node_binary, --ready_timeout_s, --kv_buckets,
// --kv_bucket_bytes, --kv_neighbourhood) are defined here, the node's own (--config, --node_id,
// --provider, ...) by //:farm's api/node_main.cc; a binary that links this library has them all.
#ifndef FARM_TOOLS_KV_SESSION_H_
#define FARM_TOOLS_KV_SESSION_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include "platform/config.h"
#include "tools/child_process.h"

ABSL_DECLARE_FLAG(int, local);
ABSL_DECLARE_FLAG(int, late_nodes);
ABSL_DECLARE_FLAG(std::string, write_config);

namespace farm {
namespace kvsh {

// Who is asking, for messages and file names: "kvsh" / "the shell".
struct SessionTool {
  std::string name;
  std::string noun;
};

// --local: the serving node processes. Thread safety: one thread's.
class LocalCluster {
 public:
  explicit LocalCluster(std::string tool) : tool_(std::move(tool)) {}
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;
  ~LocalCluster() { Stop(); }

  // Writes the configuration: nodes 0..n-1 serve, node n is the tool, n+1.. are late slots.
  absl::Status Configure(int n, int late_slots);
  // Starts the serving nodes (`extra`: arguments for each).
  absl::Status Launch(const std::string& node_binary, const std::vector<std::string>& extra);
  // Waits until every node printed READY. Fails when one exits first (with its log), on a signal
  // (Cancelled, the message names it) or at the deadline.
  absl::Status WaitReady(int signal_fd, absl::Time deadline);
  // Which nodes exited since the last call ("node 1 was killed by signal 9"), or nothing; the
  // end of each one's log goes to `logs`.
  std::optional<std::string> CheckChildren(std::string* logs);
  // Stops every node: closes its input, so that it leaves the cluster; SIGTERM after a grace
  // period (at once for a node that is not ready: it is still joining and reads no input);
  // SIGKILL after another. Removes the temporary directory (configuration and logs) unless a
  // node failed.
  void Stop();

  const config::ClusterConfig& config() const { return config_; }
  const std::string& config_path() const { return config_path_; }
  std::string LogPath(uint32_t id) const;

 private:
  struct Child {
    uint32_t id = 0;
    std::unique_ptr<ChildProcess> proc;  // its input: closing it makes the node leave
    bool ready = false;
    bool termed = false;  // sent SIGTERM
    absl::Time term_at;
  };

  absl::Status Spawn(uint32_t id, const std::vector<std::string>& args);

  const std::string tool_;
  std::string dir_;  // configuration and node logs; removed by Stop unless a node failed
  config::ClusterConfig config_;
  std::string config_path_;
  int serving_ = 0;
  std::vector<Child> children_;
  bool failed_ = false;  // a node exited on its own: keep the logs
};

// The cluster flags fit together (the node flags' values included). InvalidArgument saying
// which does not.
absl::Status CheckClusterFlags(const SessionTool& tool);

// A path the user gave, relative to where they ran `bazel run`.
std::string UserPath(const std::string& path);

// A joined node with the store (no shard of its own) and one Worker. Destroy `worker`, `store`'s
// clients and `runtime` (which leaves the cluster) before `local` (which stops its nodes): the
// members are declared in that order.
struct KvSession {
  int exit_code = 0;  // not 0: the session could not be opened (logged), exit with this
  std::unique_ptr<LocalCluster> local;  // --local's nodes, else null
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<kv::Store> store;
  std::unique_ptr<Worker> worker;
  std::vector<std::string> shard_nodes;  // the nodes holding shards (empty after a DataLoss)

  KvSession() = default;
  KvSession(KvSession&&) = default;
  KvSession& operator=(KvSession&&) = default;
  ~KvSession();
};

// Starts the --local cluster or finds the configuration's free late node, joins, creates the
// store and checks that it answers (--write_config then written). Call after CheckClusterFlags,
// with termination signals blocked and taken from `signal_fd` (a signal while waiting ends it
// with 128+N). Exit code 2 for a cluster that cannot be started or joined. A wait that is given
// up exits the process (the joining thread cannot be stopped). `node_args`: --local's nodes'
// extra arguments.
KvSession OpenKvSession(const SessionTool& tool, int signal_fd,
                        const std::vector<std::string>& node_args);

}  // namespace kvsh
}  // namespace farm

#endif  // FARM_TOOLS_KV_SESSION_H_
