#include "tools/kv_peers.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "hiredis/hiredis.h"
#include "libmemcached/memcached.h"

namespace farm {
namespace kvbench {
namespace {

constexpr uint64_t kLoadPipeline = 1000;

// Calls `store` with keys [first, first + count) at version 0 as updates, kLoadPipeline at a time.
absl::Status LoadInBatches(uint64_t first, uint64_t count,
                           const std::function<absl::Status(absl::Span<const Op>)>& store) {
  std::vector<Op> ops;
  for (uint64_t begin = first; begin < first + count; begin += kLoadPipeline) {
    const uint64_t end = std::min(first + count, begin + kLoadPipeline);
    ops.clear();
    for (uint64_t i = begin; i < end; ++i) ops.push_back(Op{false, i, 0});
    if (absl::Status s = store(ops); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// What both peers' targets hold: the server, how clients reach it, and the key space.
class PeerTarget : public KvTarget {
 public:
  PeerTarget(std::unique_ptr<ScriptedServer> server, Transport t, const KeySpace& space)
      : server_(std::move(server)), transport_(t), space_(space) {}
  std::string transport() const override { return TransportName(transport_); }

 protected:
  std::unique_ptr<ScriptedServer> server_;
  Transport transport_;
  const KeySpace& space_;
};

// ---------------------------------------------------------------------------------------------
// memcached

absl::Status MemcachedError(memcached_st* m, memcached_return_t rc, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("memcached ", what, ": ",
                                             memcached_last_error_message(m), " (",
                                             memcached_strerror(m, rc), ")"));
}

class MemcachedConnection : public KvConnection {
 public:
  static absl::StatusOr<std::unique_ptr<MemcachedConnection>> Open(const ScriptedServer& server,
                                                                   Transport t,
                                                                   const KeySpace& space,
                                                                   MemcachedSets sets) {
    memcached_st* m = memcached_create(nullptr);
    if (m == nullptr) return absl::ResourceExhaustedError("memcached_create failed");
    std::unique_ptr<MemcachedConnection> c(new MemcachedConnection(m, space, sets));
    memcached_return_t rc =
        t == Transport::kUnix
            ? memcached_server_add_unix_socket(m, server.UnixSocket("memcached.sock").c_str())
            : memcached_server_add(m, "127.0.0.1", static_cast<in_port_t>(server.port()));
    if (rc != MEMCACHED_SUCCESS) return MemcachedError(m, rc, "server_add");
    if (t == Transport::kTcp) memcached_behavior_set(m, MEMCACHED_BEHAVIOR_TCP_NODELAY, 1);
    // Set once, before connecting: libmemcached closes a connection whenever this changes.
    if (sets == MemcachedSets::kBufferedNoReply &&
        (rc = memcached_behavior_set(m, MEMCACHED_BEHAVIOR_BUFFER_REQUESTS, 1)) !=
            MEMCACHED_SUCCESS) {
      return MemcachedError(m, rc, "BUFFER_REQUESTS");
    }
    return c;
  }
  ~MemcachedConnection() override { memcached_free(m_); }

  absl::Status Round(absl::Span<const Op> ops, const ReadCheck& check) override {
    // Buffered, every set is noreply and confirmed by a get, even alone (see kv_peers.h).
    if (ops.size() == 1 && sets_ == MemcachedSets::kNoReply) {
      return ops[0].read ? GetOne(ops[0].key, check) : SetOne(ops[0]);
    }
    reads_.clear();
    const Op* last_update = nullptr;
    if (absl::Status s = SendSetsNoReply(ops, &last_update); !s.ok()) return s;
    for (const Op& op : ops) {
      if (op.read) reads_.push_back(op.key);
    }
    if (reads_.empty() && last_update != nullptr) reads_.push_back(last_update->key);
    return MultiGet(reads_, check);
  }

  // Noreply sets, confirmed by a get of the batch's last key.
  absl::Status Load(uint64_t first, uint64_t count) override {
    return LoadInBatches(first, count, [this](absl::Span<const Op> ops) {
      const Op* last = nullptr;
      if (absl::Status s = SendSetsNoReply(ops, &last); !s.ok()) return s;
      return GetOne(last->key, ReadCheck(space_, 0));
    });
  }

  memcached_st* handle() { return m_; }

 private:
  MemcachedConnection(memcached_st* m, const KeySpace& space, MemcachedSets sets)
      : m_(m), space_(space), sets_(sets) {}

  absl::Status GetOne(uint64_t key, const ReadCheck& check) {
    space_.KeyInto(key, &key_);
    size_t len = 0;
    uint32_t flags = 0;
    memcached_return_t rc;
    char* v = memcached_get(m_, key_.data(), key_.size(), &len, &flags, &rc);
    if (rc == MEMCACHED_NOTFOUND)
      return absl::DataLossError(absl::StrCat("memcached: no key ", key_));
    if (rc != MEMCACHED_SUCCESS || v == nullptr) {
      std::free(v);
      return MemcachedError(m_, rc, "get");
    }
    absl::Status s = check.Value(key, absl::string_view(v, len));
    std::free(v);
    return s;
  }

  absl::Status SetOne(const Op& op) {
    space_.KeyInto(op.key, &key_);
    space_.ValueInto(op.key, op.version, &value_);
    const memcached_return_t rc =
        memcached_set(m_, key_.data(), key_.size(), value_.data(), value_.size(), 0, 0);
    return rc == MEMCACHED_SUCCESS ? absl::OkStatus() : MemcachedError(m_, rc, "set");
  }

  // The updates among `ops` as "set ... noreply" (no reply awaited): written at once, or, buffered,
  // left in libmemcached's buffer for the next get to write with its own request.
  absl::Status SendSetsNoReply(absl::Span<const Op> ops, const Op** last) {
    bool any = false;
    for (const Op& op : ops) any |= !op.read;
    if (!any) return absl::OkStatus();
    memcached_behavior_set(m_, MEMCACHED_BEHAVIOR_NOREPLY, 1);
    absl::Status status;
    for (const Op& op : ops) {
      if (op.read) continue;
      space_.KeyInto(op.key, &key_);
      space_.ValueInto(op.key, op.version, &value_);
      const memcached_return_t rc =
          memcached_set(m_, key_.data(), key_.size(), value_.data(), value_.size(), 0, 0);
      if (rc != MEMCACHED_SUCCESS) {
        status = MemcachedError(m_, rc, "set noreply");
        break;
      }
      *last = &op;
    }
    memcached_behavior_set(m_, MEMCACHED_BEHAVIOR_NOREPLY, 0);
    return status;
  }

  // One multi-key get of `keys` (repeats allowed); every key must come back with its value.
  absl::Status MultiGet(const std::vector<uint64_t>& keys, const ReadCheck& check) {
    names_.resize(keys.size());
    ptrs_.clear();
    lens_.clear();
    got_.assign(keys.size(), false);
    for (size_t i = 0; i < keys.size(); ++i) {
      space_.KeyInto(keys[i], &names_[i]);
      ptrs_.push_back(names_[i].data());
      lens_.push_back(names_[i].size());
    }
    memcached_return_t rc = memcached_mget(m_, ptrs_.data(), lens_.data(), keys.size());
    if (rc != MEMCACHED_SUCCESS) return MemcachedError(m_, rc, "mget");
    memcached_result_st result;
    memcached_result_create(m_, &result);
    absl::Status status;
    while (memcached_fetch_result(m_, &result, &rc) != nullptr) {
      const absl::string_view k(memcached_result_key_value(&result),
                                memcached_result_key_length(&result));
      const absl::string_view v(memcached_result_value(&result), memcached_result_length(&result));
      for (size_t i = 0; i < keys.size(); ++i) {
        if (names_[i] != k) continue;
        got_[i] = true;
        if (status.ok()) status = check.Value(keys[i], v);
      }
    }
    memcached_result_free(&result);
    if (rc != MEMCACHED_END && rc != MEMCACHED_SUCCESS && rc != MEMCACHED_NOTFOUND) {
      return MemcachedError(m_, rc, "fetch");
    }
    if (!status.ok()) return status;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!got_[i]) return absl::DataLossError(absl::StrCat("memcached: no key ", names_[i]));
    }
    return absl::OkStatus();
  }

  memcached_st* m_;
  const KeySpace& space_;
  const MemcachedSets sets_;
  std::string key_, value_;
  std::vector<uint64_t> reads_;
  std::vector<std::string> names_;
  std::vector<const char*> ptrs_;
  std::vector<size_t> lens_;
  std::vector<bool> got_;
};

memcached_return_t CollectStat(const memcached_instance_st*, const char* key, size_t key_length,
                               const char* value, size_t value_length, void* context) {
  (*static_cast<std::map<std::string, std::string>*>(context))[std::string(key, key_length)] =
      std::string(value, value_length);
  return MEMCACHED_SUCCESS;
}

class MemcachedTarget : public PeerTarget {
 public:
  MemcachedTarget(std::unique_ptr<ScriptedServer> server, Transport t, const KeySpace& space,
                  MemcachedSets sets)
      : PeerTarget(std::move(server), t, space), sets_(sets) {}
  std::string name() const override {
    return sets_ == MemcachedSets::kBufferedNoReply ? "memcached-buf" : "memcached";
  }
  std::string WhyNotMeasured(int in_flight) const override {
    if (sets_ != MemcachedSets::kBufferedNoReply || in_flight > 1) return "";
    return "a round of one operation has nothing to buffer: it is the one command that "
           "memcached's own row measures";
  }
  absl::StatusOr<std::unique_ptr<KvConnection>> Connect() override {
    absl::StatusOr<std::unique_ptr<MemcachedConnection>> c =
        MemcachedConnection::Open(*server_, transport_, space_, sets_);
    if (!c.ok()) return c.status();
    return std::unique_ptr<KvConnection>(std::move(*c));
  }

  // Slab pages (stats slabs: total_malloced) and the hash table (stats: hash_bytes) over the
  // items (curr_items); the items' own bytes (stats: bytes) are named in the method.
  absl::StatusOr<MemoryReport> Memory() override {
    absl::StatusOr<std::unique_ptr<MemcachedConnection>> c =
        MemcachedConnection::Open(*server_, transport_, space_, MemcachedSets::kNoReply);
    if (!c.ok()) return c.status();
    std::map<std::string, std::string> general, slabs;
    for (auto [args, into] :
         {std::pair<const char*, std::map<std::string, std::string>*>{nullptr, &general},
          {"slabs", &slabs}}) {
      const memcached_return_t rc = memcached_stat_execute((*c)->handle(), args, CollectStat, into);
      if (rc != MEMCACHED_SUCCESS) return MemcachedError((*c)->handle(), rc, "stats");
    }
    uint64_t items = 0, bytes = 0, hash = 0, malloced = 0, evictions = 0;
    if (!absl::SimpleAtoi(general["curr_items"], &items) ||
        !absl::SimpleAtoi(general["bytes"], &bytes) ||
        !absl::SimpleAtoi(general["hash_bytes"], &hash) ||
        !absl::SimpleAtoi(general["evictions"], &evictions) ||
        !absl::SimpleAtoi(slabs["total_malloced"], &malloced)) {
      return absl::DataLossError(
          "memcached's stats lack curr_items, bytes, hash_bytes, "
          "evictions or total_malloced");
    }
    if (evictions > 0) {
      return absl::DataLossError(absl::StrCat("memcached evicted ", evictions,
                                              " items: its item memory (-m) is too small"));
    }
    MemoryReport r;
    r.items = items;
    r.bytes = malloced + hash;
    r.method = absl::StrCat(
        "stats slabs total_malloced + stats hash_bytes over curr_items (items alone, stats "
        "bytes: ",
        items == 0 ? 0 : bytes / items, " B/item)");
    absl::StatusOr<uint64_t> rss = server_->ResidentBytes();
    if (!rss.ok()) return rss.status();
    r.resident_bytes = *rss;
    return r;
  }

 private:
  const MemcachedSets sets_;
};

// ---------------------------------------------------------------------------------------------
// Redis

class RedisConnection : public KvConnection {
 public:
  RedisConnection(std::unique_ptr<RedisLink> link, const KeySpace& space)
      : link_(std::move(link)), space_(space) {}

  absl::Status Round(absl::Span<const Op> ops, const ReadCheck& check) override {
    for (const Op& op : ops) Append(op);
    absl::StatusOr<std::vector<RedisReply>> got = link_->Replies(static_cast<int>(ops.size()));
    if (!got.ok()) return got.status();
    for (size_t i = 0; i < ops.size(); ++i) {
      const redisReply& r = *(*got)[i];
      if (!ops[i].read) {
        if (r.type != REDIS_REPLY_STATUS)
          return absl::InternalError("redis: SET did not answer OK");
        continue;
      }
      if (r.type == REDIS_REPLY_NIL) {
        return absl::DataLossError(absl::StrCat("redis: no key ", space_.Key(ops[i].key)));
      }
      if (r.type != REDIS_REPLY_STRING) return absl::InternalError("redis: GET answered no string");
      if (absl::Status s = check.Value(ops[i].key, absl::string_view(r.str, r.len)); !s.ok())
        return s;
    }
    return absl::OkStatus();
  }

  // One pipeline of SETs per batch.
  absl::Status Load(uint64_t first, uint64_t count) override {
    return LoadInBatches(first, count, [this](absl::Span<const Op> ops) {
      return Round(ops, ReadCheck(space_, 0));
    });
  }

  RedisLink& link() { return *link_; }

 private:
  void Append(const Op& op) {
    space_.KeyInto(op.key, &key_);
    if (op.read) {
      redisAppendCommand(link_->context(), "GET %b", key_.data(), key_.size());
      return;
    }
    space_.ValueInto(op.key, op.version, &value_);
    redisAppendCommand(link_->context(), "SET %b %b", key_.data(), key_.size(), value_.data(),
                       value_.size());
  }

  std::unique_ptr<RedisLink> link_;
  const KeySpace& space_;
  std::string key_, value_;
};

class RedisTarget : public PeerTarget {
 public:
  using PeerTarget::PeerTarget;
  std::string name() const override { return "redis"; }
  absl::StatusOr<std::unique_ptr<KvConnection>> Connect() override {
    absl::StatusOr<std::unique_ptr<RedisConnection>> c = Open();
    if (!c.ok()) return c.status();
    return std::unique_ptr<KvConnection>(std::move(*c));
  }

  // INFO memory's used_memory less used_memory_startup (what the server had before any key),
  // over DBSIZE.
  absl::StatusOr<MemoryReport> Memory() override {
    absl::StatusOr<std::unique_ptr<RedisConnection>> c = Open();
    if (!c.ok()) return c.status();
    redisAppendCommand((*c)->link().context(), "INFO memory");
    redisAppendCommand((*c)->link().context(), "DBSIZE");
    absl::StatusOr<std::vector<RedisReply>> got = (*c)->link().Replies(2);
    if (!got.ok()) return got.status();
    const redisReply& info = *(*got)[0];
    const redisReply& size = *(*got)[1];
    if (info.type != REDIS_REPLY_STRING) {
      return absl::DataLossError("redis: INFO memory answered no text");
    }
    uint64_t used = 0, startup = 0;
    for (absl::string_view line : absl::StrSplit(absl::string_view(info.str, info.len), "\r\n")) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ':');
      if (kv.first == "used_memory") (void)absl::SimpleAtoi(kv.second, &used);
      if (kv.first == "used_memory_startup") (void)absl::SimpleAtoi(kv.second, &startup);
    }
    if (used == 0 || size.type != REDIS_REPLY_INTEGER) {
      return absl::DataLossError("redis: no used_memory or DBSIZE");
    }
    MemoryReport r;
    r.items = static_cast<uint64_t>(size.integer);
    r.bytes = used > startup ? used - startup : 0;
    r.method = "INFO memory used_memory - used_memory_startup over DBSIZE";
    absl::StatusOr<uint64_t> rss = server_->ResidentBytes();
    if (!rss.ok()) return rss.status();
    r.resident_bytes = *rss;
    return r;
  }

 private:
  absl::StatusOr<std::unique_ptr<RedisConnection>> Open() {
    absl::StatusOr<std::unique_ptr<RedisLink>> link = RedisLink::Open(*server_, transport_);
    if (!link.ok()) return link.status();
    return std::make_unique<RedisConnection>(std::move(*link), space_);
  }
};

}  // namespace

uint64_t MemcachedMegabytes(const KeySpace& space) {
  const uint64_t item = 56 + static_cast<uint64_t>(space.key_size) + space.value_size + 8;
  const uint64_t mb = (2 * item * space.keys + (1 << 20) - 1) >> 20;
  return std::max<uint64_t>(64, mb + 16);
}

absl::StatusOr<std::unique_ptr<KvTarget>> StartMemcached(const KeySpace& space,
                                                         const PeerOptions& o, MemcachedSets sets) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(o.script, "memcached", o.transport, o.cpus,
                            {absl::StrCat(o.memcached_threads), absl::StrCat(o.memcached_mb)});
  if (!server.ok()) return server.status();
  return std::unique_ptr<KvTarget>(
      std::make_unique<MemcachedTarget>(std::move(*server), o.transport, space, sets));
}

absl::StatusOr<std::unique_ptr<KvTarget>> StartRedis(const KeySpace& space, const PeerOptions& o) {
  absl::StatusOr<std::unique_ptr<ScriptedServer>> server =
      ScriptedServer::Start(o.script, "redis", o.transport, o.cpus);
  if (!server.ok()) return server.status();
  return std::unique_ptr<KvTarget>(
      std::make_unique<RedisTarget>(std::move(*server), o.transport, space));
}

}  // namespace kvbench
}  // namespace farm
