#include "tools/kv_farm.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "platform/config.h"
#include "spdlog/spdlog.h"
#include "tools/bench_driver.h"

namespace farm {
namespace kvbench {
namespace {

// A read that found nothing, said as the benchmark means it: every key was preloaded.
absl::Status Missing(const absl::Status& s, const std::string& key) {
  if (absl::IsNotFound(s)) return absl::DataLossError(absl::StrCat("farm: no key ", key));
  return s;
}

class FarmConnection : public KvConnection {
 public:
  FarmConnection(std::unique_ptr<Worker> worker, kv::Store& store, const KeySpace& space, bool rpc,
                 kv::MultiGetPath multi_get, int load_batch)
      : worker_(std::move(worker)),
        client_(store, *worker_),
        space_(space),
        rpc_(rpc),
        load_batch_(load_batch) {
    client_.set_multi_get(multi_get);
  }

  absl::Status Round(absl::Span<const Op> ops, const ReadCheck& check) override {
    names_.clear();
    reads_.clear();
    for (const Op& op : ops) {
      if (!op.read) continue;
      names_.emplace_back();
      space_.KeyInto(op.key, &names_.back());
      reads_.push_back(op.key);
    }
    if (absl::Status s = Reads(check); !s.ok()) return s;
    return Updates(ops);
  }

  absl::Status Load(uint64_t first, uint64_t count) override {
    for (uint64_t begin = first; begin < first + count; begin += load_batch_) {
      const uint64_t end = std::min<uint64_t>(first + count, begin + load_batch_);
      absl::Status s = worker_->Run([&](Txn& t) -> absl::Status {
        for (uint64_t i = begin; i < end; ++i) {
          space_.KeyInto(i, &key_);
          space_.ValueInto(i, 0, &value_);
          if (absl::Status p = client_.Put(t, key_, value_); !p.ok()) return p;
        }
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  kv::Client& client() { return client_; }

 private:
  absl::Status Check(size_t i, const absl::StatusOr<std::string>& v, const ReadCheck& check) {
    if (!v.ok()) return Missing(v.status(), names_[i]);
    return check.Value(reads_[i], *v);
  }

  // The round's updates: one Put, or one MultiPut for two or more (one transaction: all of the
  // round's updates commit together, a key updated twice gets the later value).
  absl::Status Updates(absl::Span<const Op> ops) {
    size_t n = 0;
    for (const Op& op : ops) {
      if (op.read) continue;
      if (updates_.size() <= n) updates_.emplace_back();
      space_.KeyInto(op.key, &updates_[n].first);
      space_.ValueInto(op.key, op.version, &updates_[n].second);
      ++n;
    }
    if (n == 0) return absl::OkStatus();
    if (n == 1) return client_.Put(updates_[0].first, updates_[0].second);
    return client_.MultiPut(absl::MakeConstSpan(updates_).first(n));
  }

  absl::Status Reads(const ReadCheck& check) {
    if (names_.empty()) return absl::OkStatus();
    if (rpc_) {
      for (size_t i = 0; i < names_.size(); ++i) {
        if (absl::Status s = Check(i, client_.GetRpc(names_[i]), check); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (names_.size() == 1) return Check(0, client_.Get(names_[0]), check);
    const std::vector<absl::StatusOr<std::string>> got = client_.MultiGet(names_);
    for (size_t i = 0; i < names_.size(); ++i) {
      if (absl::Status s = Check(i, got[i], check); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Worker> worker_;
  kv::Client client_;
  const KeySpace& space_;
  const bool rpc_;
  const int load_batch_;
  std::vector<std::string> names_;
  std::vector<uint64_t> reads_;
  std::string key_, value_;
  std::vector<std::pair<std::string, std::string>> updates_;  // a round's (reused)
};

std::string NodeHow(ChildProcess& node) {
  std::string how;
  return node.Exited(&how) ? how : std::string("is running");
}

}  // namespace

class FarmTarget : public KvTarget {
 public:
  FarmTarget(FarmCluster& cluster, bool rpc, kv::MultiGetPath multi_get)
      : cluster_(cluster), rpc_(rpc), multi_get_(multi_get) {}
  std::string name() const override { return rpc_ ? "farm-rpc" : "farm"; }
  std::string transport() const override { return cluster_.runtime_->provider(); }

  absl::StatusOr<std::unique_ptr<KvConnection>> Connect() override {
    absl::StatusOr<std::unique_ptr<FarmConnection>> c = Open();
    if (!c.ok()) return c.status();
    return std::unique_ptr<KvConnection>(std::move(*c));
  }

  // kv::Client::Stats: every shard's memory_bytes (its buckets, overflow blocks and the slots of
  // out-of-line values) over its items.
  absl::StatusOr<MemoryReport> Memory() override {
    absl::StatusOr<std::unique_ptr<FarmConnection>> c = Open();
    if (!c.ok()) return c.status();
    absl::StatusOr<std::vector<kv::ShardStats>> stats = (*c)->client().Stats();
    if (!stats.ok()) return stats.status();
    MemoryReport r;
    uint64_t inline_items = 0, overflow = 0;
    for (const kv::ShardStats& s : *stats) {
      r.items += s.items;
      r.bytes += s.memory_bytes;
      inline_items += s.inline_items;
      overflow += s.overflow_blocks;
    }
    r.method = absl::StrCat("kv::Client::Stats memory_bytes (", stats->size(),
                            " shards: buckets + overflow blocks + out-of-line slots) over items (",
                            inline_items, " inline, ", overflow, " overflow blocks)");
    // The shard nodes this bench started (none when attached to a running cluster).
    for (const std::unique_ptr<ChildProcess>& n : cluster_.nodes_) {
      absl::StatusOr<uint64_t> rss = ResidentBytesOf(n->pid());
      if (!rss.ok()) return rss.status();
      r.resident_bytes += *rss;
    }
    return r;
  }

 private:
  absl::StatusOr<std::unique_ptr<FarmConnection>> Open() {
    absl::StatusOr<std::unique_ptr<Worker>> w = cluster_.runtime_->NewWorker();
    if (!w.ok()) return w.status();
    return std::make_unique<FarmConnection>(std::move(*w), *cluster_.store_, *cluster_.space_, rpc_,
                                            multi_get_, cluster_.options_.load_batch);
  }

  FarmCluster& cluster_;
  const bool rpc_;
  const kv::MultiGetPath multi_get_;
};

absl::Status FarmCluster::Join(std::unique_ptr<Runtime> rt, const kv::Options& kv) {
  runtime_ = std::move(rt);
  kv::Options client = kv;
  client.hold_shard = false;  // kvbench's own node is a late one: it holds no shard
  absl::StatusOr<std::unique_ptr<kv::Store>> store = kv::Store::Create(*runtime_, client);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  runtime_->Serve();
  return absl::OkStatus();
}

uint64_t FarmCluster::ShardBytes(const kv::Options& kv) {
  return (kv.buckets + kv.neighbourhood - 1) * uint64_t{kv.bucket_bytes};
}

absl::StatusOr<std::unique_ptr<FarmCluster>> FarmCluster::Start(const FarmOptions& o,
                                                                const KeySpace& space) {
  std::unique_ptr<FarmCluster> c(new FarmCluster());
  c->options_ = o;
  c->space_ = &space;
  if (!o.attach_config.empty()) {
    RuntimeOptions ro;
    ro.config_path = o.attach_config;
    ro.provider = o.provider;
    ro.poll = o.poll;
    ro.workers = o.workers;
    absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Start(ro);
    if (!rt.ok()) {
      return absl::Status(rt.status().code(),
                          absl::StrCat("joining the cluster of ", o.attach_config, ": ",
                                       rt.status().message()));
    }
    if (absl::Status st = c->Join(std::move(*rt), o.kv); !st.ok()) return st;
    return c;
  }
  const std::string node_bin = FindRunfile("tools/node", "node");
  if (node_bin.empty()) return absl::NotFoundError("//tools:node is not built");
  absl::StatusOr<std::unique_ptr<TempDir>> dir = TempDir::Create("kvbench");
  if (!dir.ok()) return dir.status();
  c->dir_ = std::move(*dir);
  // Nodes 0 .. nodes-1 hold the shards; node `nodes` is this process.
  absl::StatusOr<config::ClusterConfig> cfg = LocalClusterConfig(o.nodes + 1, o.provider, o.host);
  if (!cfg.ok()) return cfg.status();
  // This process holds no shard: it is a late node (the shard nodes are those that form it).
  cfg->mutable_node(o.nodes)->set_late(true);
  // The shard's buckets are one array in one region, with room beside it for overflow blocks
  // and out-of-line values (a quarter more, at least 4 MiB).
  const uint64_t shard = ShardBytes(o.kv);
  const uint64_t region =
      ((shard + std::max<uint64_t>(shard / 4, 4 << 20)) + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1};
  cfg->set_region_size(region);
  cfg->set_region_count(1);
  cfg->set_join_timeout_s(static_cast<uint32_t>(o.timeout_s));
  absl::StatusOr<std::string> path = c->dir_->Write("cluster.textproto", ToText(*cfg));
  if (!path.ok()) return path.status();

  for (int i = 0; i < o.nodes; ++i) {
    std::vector<std::string> args = {
        absl::StrCat("--config=", *path),
        absl::StrCat("--node_id=", i),
        absl::StrCat("--provider=", o.provider),
        absl::StrCat("--poll=", o.poll),
        absl::StrCat("--log_level=", o.log_level),
        absl::StrCat("--workers=", o.workers),  // the same messaging lanes on every node
        "--control_stdin",
        "--kv",
        absl::StrCat("--kv_buckets=", o.kv.buckets),
        absl::StrCat("--kv_bucket_bytes=", o.kv.bucket_bytes),
        absl::StrCat("--kv_neighbourhood=", o.kv.neighbourhood)};
    std::string program = node_bin;
    if (!o.store_cpus.empty()) {
      args.insert(args.begin(), {"-c", o.store_cpus, node_bin});
      program = "taskset";
    }
    absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(program, args);
    if (!child.ok()) return child.status();
    c->nodes_.push_back(std::move(*child));
  }

  RuntimeOptions ro;
  ro.config_path = *path;
  ro.node_id = o.nodes;
  ro.provider = o.provider;
  ro.poll = o.poll;
  ro.workers = o.workers;
  absl::StatusOr<std::unique_ptr<Runtime>> rt = Runtime::Start(ro);
  if (!rt.ok()) {
    std::string nodes;
    for (size_t i = 0; i < c->nodes_.size(); ++i) {
      absl::StrAppend(&nodes, i == 0 ? "" : ", ", "node ", i, " ", NodeHow(*c->nodes_[i]));
    }
    return absl::Status(rt.status().code(),
                        absl::StrCat("farm cluster on ", o.provider,
                                     " did not form: ", rt.status().message(), " (", nodes, ")"));
  }
  if (absl::Status st = c->Join(std::move(*rt), o.kv); !st.ok()) return st;
  const absl::Time deadline = absl::Now() + absl::Seconds(o.timeout_s);
  for (size_t i = 0; i < c->nodes_.size(); ++i) {
    absl::StatusOr<std::string> ready = c->nodes_[i]->WaitForLine("READY", deadline);
    if (!ready.ok()) {
      return absl::Status(
          ready.status().code(),
          absl::StrCat("farm node ", i, " (a KV shard of ", o.kv.buckets, " buckets of ",
                       o.kv.bucket_bytes, " bytes): ", ready.status().message()));
    }
  }
  return c;
}

FarmCluster::~FarmCluster() {
  store_.reset();
  runtime_.reset();  // leaves the cluster
  // The configuration manager (node 0) last: the others leave through it.
  for (auto n = nodes_.rbegin(); n != nodes_.rend(); ++n) {
    const std::string how = (*n)->Stop(absl::Seconds(10));
    if (!how.empty() && how != "exited with status 0") spdlog::warn("a farm node {}", how);
  }
}

std::unique_ptr<KvTarget> FarmCluster::Target(bool rpc, kv::MultiGetPath multi_get) {
  return std::make_unique<FarmTarget>(*this, rpc, multi_get);
}

kv::MultiGetPath FarmCluster::MultiGetPathFor(kv::MultiGetPath multi_get) const {
  return kv::ResolveMultiGet(multi_get, runtime_->provider());
}

}  // namespace kvbench
}  // namespace farm
