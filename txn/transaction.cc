#include "txn/transaction.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "messaging/ring.h"
#include "platform/mutant.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/object.h"

namespace farm {
namespace txn {
namespace {

// How long a read inside a transaction waits for a locked object before aborting: a commit holds
// its locks for about one round trip, so a short wait usually succeeds where an abort would
// repeat the whole transaction.
constexpr absl::Duration kTxnLockedWait = absl::Milliseconds(2);

// After a batch's Wait failed: its READs still in flight may land later, so the thread's next
// READs go to fresh memory.
void RetireStaging(ThreadContext& ctx, const Node::Batch& batch) {
  if (absl::Status s = ctx.staging->Retire(batch.in_flight()); !s.ok()) {
    spdlog::error("node {}: {}", ctx.engine->node()->id(), std::string(s.message()));
  }
}

// Reads end with this check (FaRM's leases): once this node's lease with the configuration
// manager ended, the CM may have moved on without it, so what it just read, even in its own
// memory, may no longer be the configuration's current value.
absl::Status CheckLease(const Node& node) {
  if (node.lease_held()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "node ", node.id(),
      "'s lease with the configuration manager expired: what it read may be "
      "stale (the cluster may have moved on without it), so it reads and commits nothing"));
}

// Where a read copies a local object: on the stack when it is small (no allocation per read).
class LocalCopy {
 public:
  char* Get(uint64_t span) {
    if (span <= sizeof(inline_)) return inline_;
    heap_.resize(span);
    return heap_.data();
  }

 private:
  alignas(8) char inline_[512];
  std::string heap_;
};

// One copy of the object: a local one into `local`, or a READ into the thread's buffer (which
// the copy is then read from, until the thread's next READ). `*copy` is where it is.
absl::Status CopyOnce(ThreadContext& ctx, GlobalAddress addr, uint64_t span, LocalCopy& local,
                      const char** copy) {
  Node* node = ctx.engine->node();
  absl::StatusOr<RemoteTarget> t = node->Resolve(addr, span);
  if (!t.ok()) return t.status();
  if (t->local != nullptr) {
    char* dst = local.Get(span);
    CopyLocalObject(t->local, dst, span);
    *copy = dst;
    return CheckLease(*node);
  }
  if (span > ctx.staging->size()) {
    return absl::InvalidArgumentError(absl::StrCat("an object of ", span,
                                                   " bytes does not fit the thread's ",
                                                   ctx.staging->size(), "-byte buffer"));
  }
  Node::Batch batch(ctx.channel);
  batch.Read(addr, ctx.staging->At(0, span)).IgnoreError();
  absl::Status s = batch.Wait(ctx.timeout);
  if (!s.ok()) {
    RetireStaging(ctx, batch);
    return absl::Status(s.code(), absl::StrCat("READ of object ", addr.ToString(), " on node ",
                                               t->node_id, ": ", s.message()));
  }
  *copy = ctx.staging->data();
  return CheckLease(*node);
}

// What a read saw of an object when it found a consistent state (a value, no object, or an
// object of another size): the lock word (unlocked) and the size, which validation checks.
struct Observed {
  bool valid = false;
  uint64_t word = 0;
  uint64_t size = 0;
};

// Reads until a consistent copy, or until `budget` has passed with the object locked or torn.
absl::Status ReadConsistent(ThreadContext& ctx, GlobalAddress addr, uint64_t size,
                            absl::Duration budget, std::string* out, uint64_t* version,
                            Observed* seen = nullptr) {
  if (size == 0) return absl::InvalidArgumentError("an object has at least 1 byte");
  if (size > kMaxObjectSize) {
    return absl::InvalidArgumentError(absl::StrCat("an object of ", size,
                                                   " bytes is larger than the largest object (",
                                                   kMaxObjectSize, " bytes)"));
  }
  const uint64_t span = ObjectSpan(size);
  LocalCopy local;
  absl::Time deadline = absl::InfinitePast();
  absl::Duration pause = absl::Microseconds(1);
  for (int attempt = 0;; ++attempt) {
    const char* copy = nullptr;
    if (absl::Status s = CopyOnce(ctx, addr, span, local, &copy); !s.ok()) return s;
    ObjectView v;
    const ObjectState state = DecodeObject(copy, size, &v);
    if (seen != nullptr && (state == ObjectState::kOk || state == ObjectState::kFree ||
                            state == ObjectState::kWrongSize)) {
      *seen = Observed{true, MakeLockWord(v.version, state != ObjectState::kFree, false),
                       state == ObjectState::kFree ? 0 : v.size};
    }
    switch (state) {
      case ObjectState::kOk:
        out->assign(v.payload.data(), v.payload.size());
        if (version != nullptr) *version = v.version;
        return absl::OkStatus();
      case ObjectState::kFree:
        return absl::NotFoundError(
            absl::StrCat("no object at ", addr.ToString(), " (freed, or never allocated)"));
      case ObjectState::kWrongSize:
        return absl::InvalidArgumentError(
            absl::StrCat("the object at ", addr.ToString(), " has ", v.size, " bytes, not ", size));
      case ObjectState::kLocked:
      case ObjectState::kTorn:
        break;
    }
    // Retry: spin a few times, then back off, up to the budget.
    if (attempt < 16) continue;
    const absl::Time now = absl::Now();
    if (deadline == absl::InfinitePast()) deadline = now + budget;
    if (now > deadline) {
      if (state == ObjectState::kLocked) {
        return absl::AbortedError(absl::StrCat("object ", addr.ToString(), " stayed locked for ",
                                               absl::FormatDuration(budget)));
      }
      if (v.size != size) {
        return absl::InvalidArgumentError(absl::StrCat("no consistent copy of ", addr.ToString(),
                                                       " as an object of ", size,
                                                       " bytes (its size word says ", v.size, ")"));
      }
      return absl::AbortedError(absl::StrCat("no consistent copy of object ", addr.ToString(),
                                             " within ", absl::FormatDuration(budget)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Microseconds(100));
  }
}

// Whether a test's callback at the sync point `point` drops this send (DecisionProbe): it then
// fails as a back-pressured send would.
bool DroppedByTest(const char* point, uint32_t owner, uint16_t method) {
  DecisionProbe probe{method, owner, false};
  FARM_SYNC_POINT_CALLBACK(point, &probe);
  (void)point;
  return probe.drop;
}
absl::Status DroppedError() { return absl::ResourceExhaustedError("send dropped by a test"); }

// rpc.Start, unless a test drops this send (DroppedByTest).
absl::StatusOr<std::shared_ptr<Rpc::Pending>> StartUnlessDropped(const char* point, Rpc& rpc,
                                                                 Messenger::Lane& lane,
                                                                 uint32_t owner, uint16_t method,
                                                                 const std::string& payload,
                                                                 absl::Duration timeout) {
  if (DroppedByTest(point, owner, method)) return DroppedError();
  return rpc.Start(lane, owner, method, payload, timeout);
}

}  // namespace

absl::Status CopyRanges(ThreadContext& ctx, absl::Span<const Range> ranges,
                        std::vector<std::string>* out) {
  Node* node = ctx.engine->node();
  out->resize(ranges.size());
  size_t i = 0;
  while (i < ranges.size()) {
    // One batch: the remote ranges that fit the buffer together.
    Node::Batch batch(ctx.channel);
    std::vector<std::pair<size_t, uint64_t>> remote;  // range, offset in the buffer
    uint64_t used = 0;
    for (; i < ranges.size(); ++i) {
      const Range& r = ranges[i];
      absl::StatusOr<RemoteTarget> t = node->Resolve(r.addr, r.len);
      if (!t.ok()) {
        RetireStaging(ctx, batch);  // this batch's READs posted so far are not waited for
        return t.status();
      }
      std::string& copy = (*out)[i];
      copy.resize(r.len);
      if (t->local != nullptr) {
        CopyLocalObject(t->local, copy.data(), r.len);
        continue;
      }
      if (r.len > ctx.staging->size()) {
        RetireStaging(ctx, batch);
        return absl::InvalidArgumentError(absl::StrCat("a READ of ", r.len,
                                                       " bytes does not fit the thread's ",
                                                       ctx.staging->size(), "-byte buffer"));
      }
      const uint64_t at = RoundUp8(used);
      if (at + r.len > ctx.staging->size()) break;  // the next batch
      batch.Read(r.addr, ctx.staging->At(at, r.len)).IgnoreError();
      remote.emplace_back(i, at);
      used = at + r.len;
    }
    if (remote.empty()) continue;
    if (absl::Status s = batch.Wait(ctx.timeout); !s.ok()) {
      RetireStaging(ctx, batch);
      return absl::Status(s.code(),
                          absl::StrCat("READ of ", remote.size(), " range(s) from ",
                                       ranges[remote[0].first].addr.ToString(), ": ", s.message()));
    }
    for (const auto& [k, at] : remote) {
      std::memcpy((*out)[k].data(), ctx.staging->data() + at, ranges[k].len);
    }
  }
  return CheckLease(*node);
}

absl::Status LockFreeRead(ThreadContext& ctx, GlobalAddress addr, uint64_t size, std::string* out,
                          uint64_t* version) {
  return ReadConsistent(ctx, addr, size, ctx.timeout, out, version);
}

absl::Status Transaction::CheckSize(uint64_t size) const {
  if (size == 0) return absl::InvalidArgumentError("an object has at least 1 byte");
  if (size > engine_->max_object_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("an object of ", size, " bytes is larger than the largest object (",
                     engine_->max_object_size(), " bytes; larger messaging rings allow up to ",
                     kMaxObjectSize, ")"));
  }
  return absl::OkStatus();
}

Transaction::Transaction(ThreadContext* ctx)
    : ctx_(ctx), engine_(ctx->engine), id_(ctx->engine->NextId()) {}

Transaction::~Transaction() {
  if (state_ == State::kActive) Abort();
  engine_->ReleaseId(id_.seq);
}

absl::Status Transaction::CheckActive() const {
  if (state_ == State::kActive) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("transaction ", id_.ToString(), " was already ",
                   state_ == State::kCommitted ? "committed" : "aborted", "; begin a new one"));
}

absl::StatusOr<uint32_t> Transaction::OwnerOf(GlobalAddress addr) const {
  absl::StatusOr<RemoteTarget> t = engine_->node()->Resolve(addr, 1);
  if (!t.ok()) return t.status();
  return t->node_id;
}

absl::Status Transaction::Read(GlobalAddress addr, uint64_t size, std::string* out) {
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  if (absl::Status s = CheckSize(size); !s.ok()) return s;
  const uint64_t key = addr.Pack();
  if (auto w = writes_.find(key); w != writes_.end()) {
    if (w->second.kind == WriteKind::kFree) {
      return absl::NotFoundError(
          absl::StrCat("object ", addr.ToString(), " was freed by this transaction"));
    }
    if (w->second.size != size) {
      return absl::InvalidArgumentError(absl::StrCat("the object at ", addr.ToString(), " has ",
                                                     w->second.size, " bytes, not ", size));
    }
    const absl::string_view v = Value(w->second);
    out->assign(v.data(), v.size());
    return absl::OkStatus();
  }
  uint64_t version = 0;
  Observed seen;
  absl::Status s = ReadConsistent(*ctx_, addr, size, kTxnLockedWait, out, &version, &seen);
  // What was seen is validated at commit, absence and another size included: a transaction that
  // acts on "no object here" (creates one elsewhere, say) must not commit if one appeared.
  if (seen.valid) {
    if (absl::Status r = Record(addr, seen.word, seen.size); !r.ok()) return r;
  }
  return s;
}

absl::Status Transaction::Record(GlobalAddress addr, uint64_t word, uint64_t size) {
  auto [it, inserted] = reads_.emplace(addr.Pack(), ReadEntry{word, size});
  if (inserted) return absl::OkStatus();
  if (it->second.word != word) {
    // Read twice, two states: the first read can no longer be valid.
    const uint64_t before = it->second.word;
    Abort();
    return absl::AbortedError(absl::StrCat("object ", addr.ToString(), " changed (version ",
                                           VersionOf(before), IsAllocated(before) ? "" : " free",
                                           ", then ", VersionOf(word),
                                           IsAllocated(word) ? "" : " free", ")"));
  }
  if (it->second.size == 0) it->second.size = size;  // known now (a lock word alone had no size)
  return absl::OkStatus();
}

absl::Status Transaction::ReadRun(GlobalAddress first, uint64_t stride, uint64_t size,
                                  uint64_t count, std::vector<std::string>* out) {
  const ObjectRun run{first, stride, size, count, out};
  return ReadRuns(absl::MakeConstSpan(&run, 1));
}

absl::Status Transaction::ReadRuns(absl::Span<const ObjectRun> runs, size_t* failed) {
  if (failed != nullptr) *failed = runs.size();
  auto fail = [failed](size_t k, absl::Status s) {
    if (failed != nullptr) *failed = k;
    return s;
  };
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  for (size_t k = 0; k < runs.size(); ++k) {
    const ObjectRun& r = runs[k];
    if (absl::Status s = CheckSize(r.size); !s.ok()) return fail(k, s);
    if (r.count == 0 || r.stride < ObjectSpan(r.size) || r.stride % 8 != 0) {
      return fail(k, absl::InvalidArgumentError(absl::StrCat("a run of ", r.count, " objects of ",
                                                             r.size, " bytes cannot be ", r.stride,
                                                             " bytes apart")));
    }
  }
  std::vector<std::string> copies(runs.size());
  std::vector<std::vector<ObjectView>> views(runs.size());
  std::vector<size_t> pending(runs.size());  // the runs to copy (again)
  for (size_t k = 0; k < runs.size(); ++k) pending[k] = k;
  std::vector<Range> wholes;
  std::vector<std::string> got;
  absl::Time deadline = absl::InfinitePast();
  absl::Duration pause = absl::Microseconds(1);
  for (int attempt = 0;; ++attempt) {
    // One batch of READs for every run still to copy.
    wholes.clear();
    for (size_t k : pending) {
      const ObjectRun& r = runs[k];
      wholes.push_back(Range{r.first, (r.count - 1) * r.stride + ObjectSpan(r.size)});
    }
    if (absl::Status s = CopyRanges(*ctx_, wholes, &got); !s.ok()) {
      return fail(pending.size() == 1 ? pending[0] : runs.size(), s);
    }
    std::vector<size_t> again;
    for (size_t j = 0; j < pending.size(); ++j) {
      const size_t k = pending[j];
      const ObjectRun& r = runs[k];
      copies[k] = std::move(got[j]);
      views[k].assign(r.count, ObjectView());
      for (uint64_t i = 0; i < r.count; ++i) {
        const GlobalAddress a{r.first.region, r.first.offset + i * r.stride};
        ObjectView& v = views[k][i];
        const ObjectState state = DecodeObject(copies[k].data() + i * r.stride, r.size, &v);
        if (state == ObjectState::kFree) {
          if (absl::Status e = Record(a, MakeLockWord(v.version, false, false), 0); !e.ok()) {
            return fail(k, e);
          }
          return fail(k, absl::NotFoundError(absl::StrCat("no object at ", a.ToString(),
                                                          " (freed, or never allocated)")));
        }
        if (state == ObjectState::kWrongSize) {
          if (absl::Status e = Record(a, MakeLockWord(v.version, true, false), v.size); !e.ok()) {
            return fail(k, e);
          }
          return fail(
              k, absl::InvalidArgumentError(absl::StrCat("the object at ", a.ToString(), " has ",
                                                         v.size, " bytes, not ", r.size)));
        }
        if (state == ObjectState::kLocked || state == ObjectState::kTorn) {
          again.push_back(k);
          break;
        }
      }
    }
    if (again.empty()) break;
    pending = std::move(again);
    if (attempt < 16) continue;
    const absl::Time now = absl::Now();
    if (deadline == absl::InfinitePast()) deadline = now + kTxnLockedWait;
    if (now > deadline) {
      return fail(pending[0],
                  absl::AbortedError(absl::StrCat(
                      "objects from ", runs[pending[0]].first.ToString(),
                      " stayed locked or changing for ", absl::FormatDuration(kTxnLockedWait))));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Microseconds(100));
  }
  for (size_t k = 0; k < runs.size(); ++k) {
    if (absl::Status s = Take(runs[k], views[k]); !s.ok()) return fail(k, s);
  }
  return absl::OkStatus();
}

absl::Status Transaction::Take(const ObjectRun& r, const std::vector<ObjectView>& views) {
  std::vector<std::string>& out = *r.out;
  out.resize(r.count);
  for (uint64_t i = 0; i < r.count; ++i) {
    const GlobalAddress a{r.first.region, r.first.offset + i * r.stride};
    if (auto w = writes_.find(a.Pack()); w != writes_.end()) {
      if (w->second.kind == WriteKind::kFree) {
        return absl::NotFoundError(
            absl::StrCat("object ", a.ToString(), " was freed by this transaction"));
      }
      const absl::string_view v = Value(w->second);
      out[i].assign(v.data(), v.size());
      continue;
    }
    if (absl::Status e = Record(a, MakeLockWord(views[i].version, true, false), r.size); !e.ok()) {
      return e;
    }
    out[i].assign(views[i].payload.data(), views[i].payload.size());
  }
  return absl::OkStatus();
}

std::optional<absl::string_view> Transaction::PendingWrite(GlobalAddress addr) const {
  auto w = writes_.find(addr.Pack());
  if (w == writes_.end() || w->second.kind == WriteKind::kFree) return std::nullopt;
  return Value(w->second);
}

absl::Status Transaction::Write(GlobalAddress addr, absl::string_view value) {
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  if (absl::Status s = CheckSize(value.size()); !s.ok()) return s;
  const uint64_t key = addr.Pack();
  if (auto w = writes_.find(key); w != writes_.end()) {
    if (w->second.kind == WriteKind::kFree) {
      return absl::NotFoundError(
          absl::StrCat("object ", addr.ToString(), " was freed by this transaction"));
    }
    if (value.size() != w->second.size) {
      return absl::InvalidArgumentError(absl::StrCat("the object at ", addr.ToString(), " has ",
                                                     w->second.size, " bytes, not ", value.size()));
    }
    std::memcpy(values_.data() + w->second.offset, value.data(), value.size());
    return absl::OkStatus();
  }
  auto r = reads_.find(key);
  if (r == reads_.end()) {
    std::string ignored;
    if (absl::Status s = Read(addr, value.size(), &ignored); !s.ok()) return s;
    r = reads_.find(key);
  }
  if (!IsAllocated(r->second.word)) {
    return absl::NotFoundError(
        absl::StrCat("no object at ", addr.ToString(), " (freed, or never allocated)"));
  }
  if (r->second.size != value.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the object at ", addr.ToString(), " has ",
                                                   r->second.size, " bytes, not ", value.size()));
  }
  absl::StatusOr<uint32_t> owner = OwnerOf(addr);
  if (!owner.ok()) return owner.status();
  writes_[key] = WriteEntry{WriteKind::kWrite, VersionOf(r->second.word), value.size(),
                            values_.size(), *owner};
  values_.insert(values_.end(), value.begin(), value.end());
  return absl::OkStatus();
}

absl::StatusOr<GlobalAddress> Transaction::Alloc(uint64_t size, const AllocHint& hint) {
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  if (absl::Status s = CheckSize(size); !s.ok()) return s;
  Node* node = engine_->node();
  uint32_t target = node->id();
  switch (hint.kind) {
    case AllocHint::Kind::kLocal:
      break;
    case AllocHint::Kind::kOnNode:
      target = hint.node;
      break;
    case AllocHint::Kind::kNear: {
      absl::StatusOr<uint32_t> o = OwnerOf(hint.near);
      if (!o.ok()) return o.status();
      target = *o;
      break;
    }
    case AllocHint::Kind::kAnywhere: {
      // Rendezvous hashing: the member with the highest weight for the key. Keys spread evenly,
      // and a membership change moves only the keys of the nodes that came or went.
      uint64_t best = 0;
      bool any = false;
      for (uint32_t m : node->members()) {
        const uint64_t w = Mix64(hint.key ^ Mix64(m + 0x9e3779b97f4a7c15ull));
        if (!any || w > best) {
          best = w;
          target = m;
          any = true;
        }
      }
      break;
    }
  }
  const ReserveRequest req{id_, size};
  // From now on the owner may hold a reservation of this transaction, even if the answer never
  // comes back (a timeout): the decision sent there at the end releases it.
  reserve_owners_.insert(target);
  absl::StatusOr<GlobalAddress> slot;
  uint64_t slot_version = 0;  // the free slot's: the object is created with the next one
  if (target == node->id()) {
    slot = engine_->participant().Reserve(target, req);
    if (slot.ok()) {
      absl::StatusOr<uint64_t> v = engine_->participant().SlotVersion(*slot);
      if (!v.ok()) return v.status();
      slot_version = *v;
    }
  } else {
    absl::StatusOr<std::string> r = engine_->rpc()->Call(*ctx_->lane, target, kReserveMethod,
                                                         EncodeReserve(req), ctx_->timeout);
    if (!r.ok()) return r.status();
    if (r->size() != 16) return absl::DataLossError("malformed reservation response");
    uint64_t words[2] = {0, 0};
    std::memcpy(words, r->data(), 16);
    slot = GlobalAddress::Unpack(words[0]);
    slot_version = words[1];
  }
  if (!slot.ok()) return slot.status();
  const uint64_t key = slot->Pack();
  if (auto r = reads_.find(key);
      writes_.count(key) > 0 || (r != reads_.end() && IsAllocated(r->second.word))) {
    // This transaction read (or wrote) an object in this slot, another commit freed it since,
    // and the slot came back here: what it read is gone, so it cannot commit. Left alone, a
    // write of the old object would land in the new one unnoticed (an allocation is not
    // version-checked at LOCK), as the KV store's PUT once wrote an overflow block it had read
    // into its new item of the same size. The reservation is released with the transaction.
    return absl::AbortedError(
        absl::StrCat("object ", slot->ToString(),
                     " was freed after this transaction read it (its slot was "
                     "just reserved for this transaction)"));
  }
  writes_[key] = WriteEntry{WriteKind::kAlloc, slot_version, size, values_.size(), target};
  values_.resize(values_.size() + size);  // zeros
  return *slot;
}

absl::Status Transaction::Free(GlobalAddress addr) {
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  const uint64_t key = addr.Pack();
  if (auto w = writes_.find(key); w != writes_.end()) {
    if (w->second.kind == WriteKind::kFree) {
      return absl::NotFoundError(
          absl::StrCat("object ", addr.ToString(), " is already freed by this transaction"));
    }
    if (w->second.kind == WriteKind::kAlloc) {
      // Allocated and freed in the same transaction: the reservation is cancelled at the end
      // (AbortAt-style release happens in Commit for such slots).
      w->second.kind = WriteKind::kFree;
      w->second.version = UINT64_MAX;  // marks "never created"
      return absl::OkStatus();
    }
    w->second.kind = WriteKind::kFree;  // its value is no longer sent (Value)
    return absl::OkStatus();
  }
  uint64_t word = 0;
  uint64_t size = 0;
  if (auto r = reads_.find(key); r != reads_.end()) {
    word = r->second.word;
    size = r->second.size;
  } else {
    // The lock word says the version; the object's size is not needed to free it.
    std::vector<uint64_t> words;
    if (absl::Status s = ReadLockWords({addr}, &words); !s.ok()) return s;
    if (IsLocked(words[0])) {
      Abort();
      return absl::AbortedError(absl::StrCat("object ", addr.ToString(), " is locked"));
    }
    word = words[0];
    // Validated at commit like any read, absence included.
    if (absl::Status r = Record(addr, word, 0); !r.ok()) return r;
  }
  if (!IsAllocated(word)) {
    return absl::NotFoundError(
        absl::StrCat("no object at ", addr.ToString(), " (freed, or never allocated)"));
  }
  const uint64_t version = VersionOf(word);
  absl::StatusOr<uint32_t> owner = OwnerOf(addr);
  if (!owner.ok()) return owner.status();
  writes_[key] = WriteEntry{WriteKind::kFree, version, size, values_.size(), *owner};
  return absl::OkStatus();
}

absl::Status Transaction::ReadLockWords(const std::vector<GlobalAddress>& addrs,
                                        std::vector<uint64_t>* words) {
  words->assign(addrs.size(), 0);
  Node* node = engine_->node();
  // The remote ones in address order. Lock words that lie close together in one region (a
  // neighbourhood of buckets, an object array) are fetched with ONE READ of the span holding
  // them: on the software providers a READ costs the same at 8 bytes as at a few KiB (a system
  // call or a message each), and on a NIC one READ of a few KiB is not slower than several small
  // ones posted together.
  std::vector<size_t> remote;
  for (size_t i = 0; i < addrs.size(); ++i) {
    absl::StatusOr<RemoteTarget> t = node->Resolve(addrs[i], 8);
    if (!t.ok()) return t.status();
    if (t->local != nullptr) {
      (*words)[i] = LoadLockWord(t->local);
    } else {
      remote.push_back(i);
    }
  }
  if (remote.empty()) return absl::OkStatus();
  std::sort(remote.begin(), remote.end(),
            [&](size_t a, size_t b) { return addrs[a].Pack() < addrs[b].Pack(); });
  struct Span {
    GlobalAddress first;
    uint64_t len = 0;
    size_t begin = 0, end = 0;  // in `remote`
  };
  const uint64_t max_span = std::min<uint64_t>(kMaxCoalescedRead, ctx_->staging->size());
  std::vector<Span> spans;
  for (size_t k = 0; k < remote.size(); ++k) {
    const GlobalAddress a = addrs[remote[k]];
    if (!spans.empty()) {
      Span& s = spans.back();
      if (s.first.region == a.region && a.offset + 8 - s.first.offset <= max_span) {
        s.len = std::max(s.len, a.offset + 8 - s.first.offset);
        s.end = k + 1;
        continue;
      }
    }
    spans.push_back(Span{a, 8, k, k + 1});
  }
  for (size_t begin = 0; begin < spans.size();) {
    Node::Batch batch(ctx_->channel);
    std::vector<uint64_t> at;  // each span's place in the buffer
    uint64_t used = 0;
    size_t end = begin;
    for (; end < spans.size() && used + spans[end].len <= ctx_->staging->size(); ++end) {
      at.push_back(used);
      batch.Read(spans[end].first, ctx_->staging->At(used, spans[end].len)).IgnoreError();
      used += (spans[end].len + 7) & ~uint64_t{7};
    }
    validation_reads_ += static_cast<int>(end - begin);
    if (absl::Status s = batch.Wait(ctx_->timeout); !s.ok()) {
      RetireStaging(*ctx_, batch);
      return absl::Status(s.code(), absl::StrCat("READ of lock words: ", s.message()));
    }
    for (size_t j = begin; j < end; ++j) {
      const Span& s = spans[j];
      for (size_t k = s.begin; k < s.end; ++k) {
        const size_t i = remote[k];
        std::memcpy(&(*words)[i],
                    ctx_->staging->data() + at[j - begin] + (addrs[i].offset - s.first.offset), 8);
      }
    }
    begin = end;
  }
  return absl::OkStatus();
}

void Transaction::ReleaseRead(GlobalAddress addr) {
  const uint64_t key = addr.Pack();
  if (writes_.count(key) == 0) reads_.erase(key);
}

absl::Status Transaction::Validate() {
  if (FARM_MUTANT("skip_validate")) return absl::OkStatus();
  std::vector<GlobalAddress> addrs;
  std::vector<uint64_t> expected;
  for (const auto& [key, r] : reads_) {
    if (writes_.count(key) > 0) continue;  // checked by LOCK
    addrs.push_back(GlobalAddress::Unpack(key));
    expected.push_back(r.word);
  }
  if (addrs.empty()) return absl::OkStatus();
  std::vector<uint64_t> words;
  if (absl::Status s = ReadLockWords(addrs, &words); !s.ok()) return s;
  for (size_t i = 0; i < addrs.size(); ++i) {
    if (words[i] != expected[i]) {
      std::string why = IsLocked(words[i]) ? "is locked by a committing transaction"
                        : !IsAllocated(words[i]) && IsAllocated(expected[i]) ? "was freed"
                        : IsAllocated(words[i]) && !IsAllocated(expected[i])
                            ? "was absent when read and exists now"
                            : absl::StrCat("changed (version ", VersionOf(words[i]), ", read at ",
                                           VersionOf(expected[i]), ")");
      return absl::AbortedError(
          absl::StrCat("validation failed: object ", addrs[i].ToString(), " ", why));
    }
  }
  return absl::OkStatus();
}

absl::Status Transaction::SendLocks(const std::map<uint32_t, std::vector<LockView>>& locks) {
  Node* node = engine_->node();
  Rpc* rpc = engine_->rpc();
  absl::Status first;
  std::vector<std::pair<uint32_t, std::shared_ptr<Rpc::Pending>>> calls;
  for (const auto& [owner, parts] : locks) {
    if (owner == node->id()) continue;
    for (const LockView& r : parts) {
      // Encoded straight into the lane's buffer: the values go from the write set to the
      // message in one copy.
      absl::StatusOr<std::shared_ptr<Rpc::Pending>> p;
      if (DroppedByTest("Transaction::SendLocks:Send", owner, kLockMethod)) {
        p = DroppedError();
      } else {
        p = rpc->StartInPlace(
            *ctx_->lane, owner, kLockMethod, LockSize(r), [&r](char* dst) { EncodeLockTo(r, dst); },
            ctx_->timeout);
      }
      if (!p.ok()) {
        // Back-pressure (the owner's ring stayed full): nothing of this transaction is applied
        // anywhere, so it is a conflict like any other; the caller runs it again.
        if (first.ok()) {
          first = absl::IsResourceExhausted(p.status())
                      ? absl::AbortedError(absl::StrCat(
                            "LOCK to node ", owner, " could not be sent: ", p.status().message()))
                      : p.status();
        }
        continue;
      }
      calls.emplace_back(owner, *p);
    }
  }
  // This node's own part while the messages travel. (They leave only when Await flushes the
  // lane: posting them first, without waiting, made a lane's later sends wait for ring space
  // for good on verbs over SoftiWARP, not yet understood; see issue 17's note.)
  if (auto own = locks.find(node->id()); own != locks.end()) {
    for (const LockView& r : own->second) {
      absl::Status s = engine_->participant().Lock(node->id(), EncodeLock(r));
      if (!s.ok() && first.ok()) first = s;
    }
  }
  for (auto& [owner, call] : calls) {
    absl::StatusOr<std::string> r = rpc->Await(*ctx_->lane, *call);
    if (!r.ok() && first.ok()) first = r.status();
  }
  return first;
}

Transaction::Delivery Transaction::Decide(uint16_t method, std::vector<uint32_t> owners) {
  const DecisionRequest decision{id_};
  const std::string payload = EncodeDecision(decision);
  std::vector<std::pair<uint32_t, std::string>> messages;
  for (uint32_t o : owners) messages.emplace_back(o, payload);
  Participant& local = engine_->participant();
  const uint32_t self = engine_->node()->id();
  return Deliver(method, method == kCommitMethod ? "COMMIT-PRIMARY" : "ABORT", std::move(messages),
                 [&](const std::string&) {
                   if (method != kCommitMethod) return local.Abort(self, decision);
                   // Like a remote owner (Rpc::OnRequest), a node whose lease ended applies
                   // nothing: its regions may be served by their backups by now, and readers
                   // that have not applied that membership yet still READ this copy (this
                   // process was paused after its decision and resumed).
                   if (!engine_->node()->lease_held()) {
                     return absl::UnavailableError(
                         absl::StrCat("node ", self, "'s lease expired: it applies nothing"));
                   }
                   return local.Commit(self, decision);
                 });
}

Transaction::Delivery Transaction::Deliver(
    uint16_t method, absl::string_view name, std::vector<std::pair<uint32_t, std::string>> messages,
    const std::function<absl::Status(const std::string&)>& local) {
  Node* node = engine_->node();
  Rpc* rpc = engine_->rpc();
  Delivery out;
  // Back-off between rounds, and when to ask the CM to evict a node that stays silent while it
  // is still a member (a broken ring): its departure ends the wait, here and at the recovery.
  absl::Duration pause = absl::Microseconds(10);
  const absl::Time suspect_at = absl::Now() + ctx_->timeout;
  bool suspected = false;
  auto classify = [&](size_t i, const absl::Status& s, std::vector<size_t>& again) {
    const uint32_t o = messages[i].first;
    if (s.ok()) return;
    if (absl::IsFailedPrecondition(s)) {
      out.refused.emplace_back(o, s);  // the node decided otherwise: a protocol violation
    } else {
      out.last_error = s;
      again.push_back(i);
    }
  };
  std::vector<size_t> todo(messages.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::set<uint32_t> all_nodes;
  for (const auto& [o, payload] : messages) all_nodes.insert(o);
  std::set<uint32_t> left;
  while (!todo.empty()) {
    std::vector<size_t> again;
    std::vector<std::pair<size_t, std::shared_ptr<Rpc::Pending>>> calls;
    for (size_t i : todo) {
      const uint32_t o = messages[i].first;
      if (o == node->id()) continue;
      // Tests drop or delay a message here (as a back-pressured Start would).
      absl::StatusOr<std::shared_ptr<Rpc::Pending>> p =
          StartUnlessDropped("Transaction::Decide:Send", *rpc, *ctx_->lane, o, method,
                             messages[i].second, ctx_->timeout);
      if (!p.ok()) {
        out.last_error = p.status();
        again.push_back(i);
        continue;
      }
      calls.emplace_back(i, *p);
    }
    for (size_t i : todo) {
      if (messages[i].first == node->id()) classify(i, local(messages[i].second), again);
    }
    for (auto& [i, call] : calls) {
      absl::StatusOr<std::string> r = rpc->Await(*ctx_->lane, *call);
      classify(i, r.status(), again);
      if (method == kCommitMethod && r.ok()) {
        uint32_t o = messages[i].first;
        FARM_SYNC_POINT_CALLBACK("Transaction::Decide:Acked", &o);
      }
    }
    todo.clear();
    std::set<uint32_t> gone;
    for (size_t i : again) {
      if (node->IsMember(messages[i].first)) {
        todo.push_back(i);
      } else {
        gone.insert(messages[i].first);
      }
    }
    // Read after the membership: an evicted node's last membership lists nobody (Node::Evict
    // sets the eviction first), and that says nothing of whether the owners left. Its messages
    // not acknowledged stay unacknowledged.
    if (!gone.empty() && !node->evicted().ok()) {
      todo = std::move(again);
      out.evicted = true;
      break;
    }
    left.insert(gone.begin(), gone.end());  // they took their parts with them
    if (todo.empty()) break;
    if (!node->evicted().ok()) {
      // This node is out: the owners settle the transaction among themselves.
      out.evicted = true;
      break;
    }
    if (!suspected && absl::Now() > suspect_at) {
      suspected = true;
      std::set<uint32_t> silent;
      for (size_t i : todo) silent.insert(messages[i].first);
      for (uint32_t o : silent) {
        spdlog::warn("txn: node {} has not acknowledged {} of transaction {} for {}: {}", o,
                     std::string(name), id_.ToString(), absl::FormatDuration(ctx_->timeout),
                     out.last_error.ToString());
        node->ReportSuspect(
            o, absl::StrCat("it did not acknowledge ", name, " of transaction ", id_.ToString()));
      }
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(10));
  }
  // A node is acked once none of its messages is still pending, refused or lost with it.
  std::set<uint32_t> not_acked(left.begin(), left.end());
  for (size_t i : todo) not_acked.insert(messages[i].first);
  for (const auto& [o, s] : out.refused) not_acked.insert(o);
  for (uint32_t o : all_nodes) {
    if (!not_acked.count(o)) out.acked.push_back(o);
  }
  out.left.assign(left.begin(), left.end());
  for (const auto& [o, s] : out.refused) {
    // A backup promoted meanwhile refuses COMMIT-BACKUP: expected, and the transaction aborts.
    // Any other refusal is a protocol violation.
    spdlog::log(method == kCommitBackupMethod ? spdlog::level::warn : spdlog::level::err,
                "txn: node {} refused {} of transaction {}: {}", o, std::string(name),
                id_.ToString(), s.ToString());
  }
  return out;
}

std::vector<uint32_t> Transaction::SendBackups(bool* moved) {
  Node* node = engine_->node();
  *moved = false;
  // Each written region's primary now (resolved once per region) must be the one its writes
  // were locked at: the promoted backup locked only what its records held then, and this
  // transaction's writes are not among them. The primary and the backups are read together, of
  // one membership: the old primary with the backups of the membership that promoted one of them
  // (none left, often) would send the region's writes to no backup, and the promoted copy would
  // never get them (a committed write lost, seen once in replication_test under ASan).
  struct RegionCopies {
    uint32_t primary = 0;
    std::vector<uint32_t> backups;
    bool recorded = false;  // some write of it goes to the backups
  };
  absl::flat_hash_map<uint32_t, RegionCopies> regions;
  for (const auto& [key, w] : writes_) {
    const GlobalAddress addr = GlobalAddress::Unpack(key);
    auto [it, added] = regions.try_emplace(addr.region);
    if (added) {
      absl::StatusOr<Node::Copies> c = node->CopiesOf(addr.region);
      if (!c.ok()) {
        *moved = true;
        return {};
      }
      it->second.primary = c->primary;
      it->second.backups = std::move(c->backups);
    }
    if (it->second.primary != w.owner) {
      *moved = true;
      return {};
    }
  }
  // Tests change the membership here (a promotion after the copies were read).
  FARM_SYNC_POINT("Transaction::SendBackups:AfterCopies");
  // Mutant: the backups are read again, apart from the primary (in a later membership).
  if (FARM_MUTANT("backups_read_apart")) {
    for (auto& [region, copies] : regions) copies.backups = node->BackupsOf(region);
  }
  // Every part names every region written, with its primary and backups: the recovery vote
  // (txn/recovery.h) tells from them whether this COMMIT-BACKUP was complete.
  std::vector<WrittenRegion> written;
  uint64_t written_bytes = 8;
  for (const auto& [key, w] : writes_) {
    if (w.kind == WriteKind::kFree && w.version == UINT64_MAX) continue;  // never created
    const uint32_t region = GlobalAddress::Unpack(key).region;
    if (std::any_of(written.begin(), written.end(),
                    [&](const WrittenRegion& x) { return x.region == region; })) {
      continue;
    }
    const RegionCopies& copies = regions[region];
    written.push_back(WrittenRegion{region, copies.primary, copies.backups});
    written_bytes += 16 + 4 * copies.backups.size();
  }
  std::sort(written.begin(), written.end(),
            [](const WrittenRegion& a, const WrittenRegion& b) { return a.region < b.region; });
  const uint64_t room = engine_->max_message() - Engine::kLockOverhead;
  const uint64_t part_room = written_bytes < room / 2 ? room - written_bytes : room / 2;
  // The writes by backup node, in COMMIT-BACKUP messages of at most max_message bytes each.
  // The values are views into writes_ (unchanged until the transaction ends): EncodeLock copies
  // each one once, into its message.
  std::map<uint32_t, std::vector<LockView>> parts;
  std::map<uint32_t, uint64_t> part_bytes;
  for (const auto& [key, w] : writes_) {
    if (w.kind == WriteKind::kFree && w.version == UINT64_MAX) continue;  // never created
    const GlobalAddress addr = GlobalAddress::Unpack(key);
    RegionCopies& copies = regions[addr.region];
    copies.recorded = true;
    for (uint32_t b : copies.backups) {
      std::vector<LockView>& p = parts[b];
      const uint64_t bytes = 64 + Value(w).size();
      if (p.empty() || part_bytes[b] + bytes > part_room) {
        p.emplace_back();
        p.back().txn = id_;
        part_bytes[b] = 0;
      }
      part_bytes[b] += bytes;
      p.back().writes.push_back(WriteRef{addr, w.kind, w.version, Value(w)});
    }
  }
  // Mutant: no COMMIT-BACKUP (the backups never learn of the writes).
  if (parts.empty() || FARM_MUTANT("skip_commit_backup")) return {};
  std::vector<std::pair<uint32_t, std::string>> messages;
  std::map<uint32_t, std::vector<uint64_t>> truncations;  // piggybacked, by backup
  const uint64_t bound = engine_->TruncationBound();
  for (auto& [b, ps] : parts) {
    ps.front().truncate = truncations[b] = engine_->TakeBackupTruncations(b);
    for (size_t i = 0; i < ps.size(); ++i) {
      LockView& r = ps[i];
      r.written = written;
      r.part = static_cast<uint32_t>(i);
      r.parts = static_cast<uint32_t>(ps.size());
      r.finished_below = bound;
      messages.emplace_back(b, EncodeLock(r));
    }
  }
  BackupLog& local = engine_->backup_log();
  const uint32_t self = node->id();
  const Delivery d = Deliver(kCommitBackupMethod, "COMMIT-BACKUP", std::move(messages),
                             [&](const std::string& payload) {
                               absl::StatusOr<LockView> r = DecodeLockView(payload);
                               return r.ok() ? local.Append(self, *r, payload) : r.status();
                             });
  // The truncations went with the first part: a backup that acknowledged or refused it
  // applied them first (BackupLog::Append), one that left took its records with it; if this
  // node was evicted meanwhile, they go back to the queue (an acknowledgement may be another
  // part's).
  for (auto& [b, seqs] : truncations) {
    auto in = [b = b](const auto& v) { return std::find(v.begin(), v.end(), b) != v.end(); };
    const bool refused = std::any_of(d.refused.begin(), d.refused.end(),
                                     [b = b](const auto& r) { return r.first == b; });
    if (!d.evicted && (in(d.acked) || in(d.left) || refused)) {
      engine_->Truncated(seqs);
    } else {
      engine_->RequeueBackupTruncations(b, seqs);
    }
  }
  // A backup that left holds no copy to keep up to date (the region is degraded until it gets
  // a new one). One that refused was promoted (or fenced this node): the commit cannot go on.
  *moved = !d.refused.empty();
  backed_up_ = true;
  for (const auto& [region, copies] : regions) {
    if (!copies.recorded) continue;
    const std::vector<uint32_t>& bs = copies.backups;
    backed_up_ = backed_up_ && std::any_of(bs.begin(), bs.end(), [&](uint32_t b) {
                   return std::find(d.acked.begin(), d.acked.end(), b) != d.acked.end();
                 });
  }
  return d.acked;
}

std::vector<uint32_t> Transaction::ReservationOnlyOwners(
    const std::vector<uint32_t>& owners) const {
  std::vector<uint32_t> out;
  for (uint32_t o : reserve_owners_) {
    if (std::find(owners.begin(), owners.end(), o) == owners.end()) out.push_back(o);
  }
  return out;
}

void Transaction::AbortAt(const std::vector<uint32_t>& owners) {
  // Until every owner acknowledged or left: an owner that misses the ABORT would keep the locks
  // (and reservations) until this node leaves.
  std::vector<uint32_t> all = owners;
  for (uint32_t o : ReservationOnlyOwners(owners)) all.push_back(o);
  if (!all.empty()) Decide(kAbortMethod, all);
  state_ = State::kAborted;
}

void Transaction::Abort() {
  if (state_ != State::kActive) return;
  AbortAt({});
}

absl::Status Transaction::Commit() {
  if (absl::Status s = CheckActive(); !s.ok()) return s;
  commit_rounds_ = 0;
  validation_reads_ = 0;
  // Objects allocated and freed by this transaction never existed: not locked, only released.
  // The writes by owner, in LOCK messages of at most max_message bytes each. The values are views
  // into writes_ (unchanged until the transaction ends): EncodeLock copies each one once, into its
  // message.
  std::map<uint32_t, std::vector<LockView>> locks;
  std::map<uint32_t, uint64_t> part_bytes;
  for (const auto& [key, w] : writes_) {
    if (w.kind == WriteKind::kFree && w.version == UINT64_MAX) continue;
    std::vector<LockView>& parts = locks[w.owner];
    const uint64_t bytes = 64 + Value(w).size();
    if (parts.empty() ||
        part_bytes[w.owner] + bytes > engine_->max_message() - Engine::kLockOverhead) {
      parts.emplace_back();
      parts.back().txn = id_;
      part_bytes[w.owner] = 0;
    }
    part_bytes[w.owner] += bytes;
    parts.back().writes.push_back(
        WriteRef{GlobalAddress::Unpack(key), w.kind, w.version, Value(w)});
  }
  if (locks.empty()) {
    // Read-only: validation alone, no messages.
    absl::Status s = Validate();
    if (!s.ok()) {
      AbortAt({});
      return s;
    }
    if (absl::Status s = CheckLease(*engine_->node()); !s.ok()) {
      AbortAt({});
      return s;
    }
    if (!reserve_owners_.empty()) AbortAt({});  // releases the reservations; still a commit
    state_ = State::kCommitted;
    return absl::OkStatus();
  }
  std::vector<uint32_t> owners;
  for (const auto& [o, r] : locks) owners.push_back(o);
  for (auto& [o, parts] : locks) {
    parts.front().truncate = engine_->TakeTruncations(o);
    for (LockView& r : parts) r.participants = owners;
  }
  // LOCK.
  ++commit_rounds_;
  if (absl::Status s = SendLocks(locks); !s.ok()) {
    AbortAt(owners);
    return s.code() == absl::StatusCode::kAborted
               ? s
               : absl::Status(s.code(), absl::StrCat("transaction ", id_.ToString(),
                                                     " aborted during LOCK: ", s.message()));
  }
  // Tests stop or kill the coordinator here (platform/sync_point.h; compiled out in NDEBUG).
  FARM_SYNC_POINT("Transaction::Commit:AfterLock");
  // VALIDATE.
  if (absl::Status s = Validate(); !s.ok()) {
    AbortAt(owners);
    return s;
  }
  FARM_SYNC_POINT("Transaction::Commit:AfterValidate");
  // A coordinator whose lease ended does not decide: the CM may have removed it, and with it the
  // right to commit (the others settle what it left locked).
  if (absl::Status s = CheckLease(*engine_->node()); !s.ok()) {
    AbortAt(owners);
    return absl::Status(s.code(), absl::StrCat("transaction ", id_.ToString(),
                                               " aborted before its decision: ", s.message()));
  }
  // The decision is COMMIT: every owner locked and validation passed. COMMIT-BACKUP to every
  // backup of the regions written, acknowledged before any COMMIT-PRIMARY (so that a committed
  // write is on every copy's log before any primary shows it); then COMMIT-PRIMARY until every
  // owner acknowledged or left; the owners of slots it reserved and did not use get their
  // release too.
  std::vector<uint32_t> backups;
  if (engine_->node()->f() > 0) {
    ++commit_rounds_;
    bool moved = false;
    backups = SendBackups(&moved);
    if (moved) {
      // Nothing was applied anywhere yet: the backups that kept the records drop them first (a
      // record nobody holds undecided would be applied by a recovery), then the owners unlock.
      std::vector<std::pair<uint32_t, std::string>> drops;
      for (uint32_t b : backups) drops.emplace_back(b, EncodeDecision(DecisionRequest{id_}));
      BackupLog& local = engine_->backup_log();
      const uint32_t self = engine_->node()->id();
      Deliver(kDropBackupMethod, "DROP-BACKUP", std::move(drops),
              [&](const std::string&) { return local.Drop(self, id_); });
      AbortAt(owners);
      return absl::AbortedError(absl::StrCat("transaction ", id_.ToString(),
                                             " aborted: a region it wrote moved to a promoted "
                                             "backup during its commit"));
    }
    if (!engine_->node()->evicted().ok()) {
      // Evicted, perhaps before every backup kept its record: the members decide it without
      // this node, and abort it if a record is missing (txn/recovery.h), so nothing is applied
      // here and its outcome is unknown.
      state_ = State::kAborted;
      return absl::UnavailableError(absl::StrCat(
          "transaction ", id_.ToString(),
          " was decided, but this node was evicted during COMMIT-BACKUP: the other members "
          "settle it, and its outcome is unknown here"));
    }
    FARM_SYNC_POINT("Transaction::Commit:AfterCommitBackup");
  }
  ++commit_rounds_;
  std::vector<uint32_t> commit_at = owners;
  // Mutant: COMMIT-PRIMARY reaches only the first owner (the others keep their locks until the
  // coordinator leaves, then abort: a half-applied transaction).
  if (FARM_MUTANT("commit_first_owner_only")) commit_at.resize(1);
  const Delivery d = Decide(kCommitMethod, commit_at);
  state_ = State::kCommitted;
  if (const std::vector<uint32_t> rest = ReservationOnlyOwners(owners); !rest.empty()) {
    Decide(kAbortMethod, rest);
  }
  for (uint32_t o : d.acked) engine_->AddTruncation(o, id_.seq);
  // The backups apply their records once told: after every owner applied COMMIT-PRIMARY (one
  // that left took its part with it). Until then a record is only kept.
  if (d.refused.empty() && !d.evicted) {
    for (uint32_t b : backups) engine_->AddBackupTruncation(b, id_.seq);
  }
  const uint32_t self = engine_->node()->id();
  const bool only_self =
      std::all_of(d.acked.begin(), d.acked.end(), [&](uint32_t o) { return o == self; });
  // Read after the acknowledgements: a lease that ended at any point before (this process was
  // paused mid-commit) has not been renewed since, unless a CM that took over readmitted this
  // node with its regions.
  const bool lease_lapsed = !engine_->node()->lease_held();
  if (!d.acked.empty() && only_self && (d.evicted || lease_lapsed)) {
    // Only this node's own part was applied, and it was evicted, or its lease ended, before
    // another owner confirmed: the cluster settles the transaction without this node (it may
    // have been paused past its lease after its decision, and its regions served by their
    // backups since), so it may well be aborted there, even with this node the only owner.
    // Its outcome is unknown here; saying "committed" could report a transaction that the
    // cluster aborted.
    return absl::UnavailableError(absl::StrCat(
        "transaction ", id_.ToString(),
        " was decided, but this node was evicted before another owner confirmed COMMIT-PRIMARY: "
        "the owners settle it, and its outcome is unknown here"));
  }
  if (!d.acked.empty()) {
    // Committed at an owner: the decision is final (the owners settle the rest among
    // themselves if this node is evicted). Owners that left took their part with them (f = 0).
    for (uint32_t o : d.left) {
      spdlog::warn("txn: transaction {} committed; node {} left before applying its part",
                   id_.ToString(), o);
    }
    return absl::OkStatus();
  }
  if (d.evicted) {
    return absl::UnavailableError(absl::StrCat(
        "transaction ", id_.ToString(),
        " was decided, but this node was evicted before an owner "
        "confirmed COMMIT-PRIMARY: the owners settle it, and its outcome is unknown here"));
  }
  if (!d.refused.empty()) {
    return absl::InternalError(
        absl::StrCat("transaction ", id_.ToString(), ": node ", d.refused[0].first,
                     " refused COMMIT-PRIMARY: ", d.refused[0].second.message()));
  }
  if (backed_up_) {
    // Every region it wrote has a backup that keeps its record: the promoted backups apply it
    // (at the truncation below, or at the recovery if this node leaves first).
    spdlog::warn(
        "txn: transaction {} committed; its owners left before applying it, and their "
        "regions' backups hold it",
        id_.ToString());
    return absl::OkStatus();
  }
  return absl::UnavailableError(
      absl::StrCat("transaction ", id_.ToString(),
                   " was decided, but every owner left before confirming "
                   "COMMIT-PRIMARY (without replication their parts are lost): ",
                   d.last_error.message()));
}

}  // namespace txn
}  // namespace farm
