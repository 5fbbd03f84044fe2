#include "txn/protocol.h"

#include "txn/object.h"
#include "txn/wire.h"

namespace farm {
namespace txn {
namespace {

template <typename Out>
void PutTxn(Out& w, const TxnId& t) {
  w.U32(t.node);
  w.U64(t.incarnation);
  w.U64(t.seq);
}
bool GetTxn(WireReader& r, TxnId* t) {
  return r.U32(&t->node) && r.U64(&t->incarnation) && r.U64(&t->seq);
}

// A count of entries of at least `entry` bytes each: more than the bytes left can hold is
// corrupt (and is refused before anything is allocated for it).
bool GetCount(WireReader& r, uint64_t* n, uint64_t entry) {
  return r.U64(n) && *n <= r.remaining() / entry;
}

template <typename Out>
void PutIds(Out& w, const std::vector<uint32_t>& ids) {
  w.U64(ids.size());
  for (uint32_t id : ids) w.U32(id);
}
bool GetIds(WireReader& r, std::vector<uint32_t>* ids) {
  uint64_t n = 0;
  if (!GetCount(r, &n, 4)) return false;
  ids->resize(n);
  for (uint32_t& id : *ids) {
    if (!r.U32(&id)) return false;
  }
  return true;
}

template <typename Out>
void PutWritten(Out& w, const std::vector<WrittenRegion>& written) {
  w.U64(written.size());
  for (const WrittenRegion& x : written) {
    w.U32(x.region);
    w.U32(x.primary);
    PutIds(w, x.backups);
  }
}
bool GetWritten(WireReader& r, std::vector<WrittenRegion>* written) {
  uint64_t n = 0;
  if (!GetCount(r, &n, 16)) return false;
  written->resize(n);
  for (WrittenRegion& x : *written) {
    if (!r.U32(&x.region) || !r.U32(&x.primary) || !GetIds(r, &x.backups)) return false;
  }
  return true;
}

}  // namespace

absl::string_view LogRecordTypeName(LogRecordType type) {
  switch (type) {
    case LogRecordType::kLock:
      return "LOCK";
    case LogRecordType::kCommitBackup:
      return "COMMIT-BACKUP";
    case LogRecordType::kCommitPrimary:
      return "COMMIT-PRIMARY";
    case LogRecordType::kAbort:
      return "ABORT";
    case LogRecordType::kTruncate:
      return "TRUNCATE";
  }
  return "UNKNOWN";
}

namespace {

// The size of a LOCK's encoding (PutLock).
template <typename W>
size_t LockSizeOf(const BasicLockRequest<W>& r) {
  size_t size = 20 + 8 + 4 * r.participants.size() + 8 + 8 + 8 * r.truncate.size() + 8 + 4 + 4 + 8;
  for (const W& wr : r.writes) size += 25 + wr.data.size();
  for (const WrittenRegion& x : r.written) size += 16 + 4 * x.backups.size();
  return size;
}

template <typename Out, typename W>
void PutLock(Out& w, const BasicLockRequest<W>& r) {
  PutTxn(w, r.txn);
  w.U64(r.participants.size());
  for (uint32_t p : r.participants) w.U32(p);
  w.U64(r.writes.size());
  for (const W& wr : r.writes) {
    w.U64(wr.addr.Pack());
    w.U8(static_cast<uint8_t>(wr.kind));
    w.U64(wr.version);
    w.Bytes(wr.data);
  }
  w.U64(r.truncate.size());
  for (uint64_t s : r.truncate) w.U64(s);
  PutWritten(w, r.written);
  w.U32(r.part);
  w.U32(r.parts);
  w.U64(r.finished_below);
}

template <typename W>
std::string EncodeLockOf(const BasicLockRequest<W>& r) {
  WireWriter w;
  w.Reserve(LockSizeOf(r));  // one allocation for the message, whatever its writes
  PutLock(w, r);
  return std::move(w.str());
}

template <typename W>
absl::StatusOr<BasicLockRequest<W>> DecodeLockOf(absl::string_view b) {
  WireReader r(b);
  BasicLockRequest<W> out;
  uint64_t n = 0;
  if (!GetTxn(r, &out.txn) || !GetCount(r, &n, 4)) return WireReader::Corrupt("LOCK");
  out.participants.resize(n);
  for (uint32_t& p : out.participants) {
    if (!r.U32(&p)) return WireReader::Corrupt("LOCK");
  }
  if (!GetCount(r, &n, 25)) return WireReader::Corrupt("LOCK");
  out.writes.resize(n);
  for (W& wr : out.writes) {
    uint64_t packed = 0;
    uint8_t kind = 0;
    absl::string_view data;
    if (!r.U64(&packed) || !r.U8(&kind) || !r.U64(&wr.version) || !r.Bytes(&data) || kind < 1 ||
        kind > 3 || data.size() > kMaxObjectSize) {
      return WireReader::Corrupt("LOCK");
    }
    wr.addr = GlobalAddress::Unpack(packed);
    wr.kind = static_cast<WriteKind>(kind);
    wr.data = decltype(wr.data)(data);
  }
  if (!GetCount(r, &n, 8)) return WireReader::Corrupt("LOCK");
  out.truncate.resize(n);
  for (uint64_t& s : out.truncate) {
    if (!r.U64(&s)) return WireReader::Corrupt("LOCK");
  }
  if (!GetWritten(r, &out.written) || !r.U32(&out.part) || !r.U32(&out.parts) ||
      !r.U64(&out.finished_below) || out.parts == 0 || out.part >= out.parts || !r.done()) {
    return WireReader::Corrupt("LOCK");
  }
  return out;
}

}  // namespace

std::string EncodeLock(const LockRequest& r) { return EncodeLockOf(r); }
std::string EncodeLock(const LockView& r) { return EncodeLockOf(r); }
size_t LockSize(const LockView& r) { return LockSizeOf(r); }
void EncodeLockTo(const LockView& r, char* dst) {
  WireBufferWriter w(dst);
  PutLock(w, r);
}
absl::StatusOr<LockRequest> DecodeLock(absl::string_view b) { return DecodeLockOf<WriteRecord>(b); }
absl::StatusOr<LockView> DecodeLockView(absl::string_view b) { return DecodeLockOf<WriteRef>(b); }

LockView ViewOf(const LockRequest& r) {
  LockView v;
  v.txn = r.txn;
  v.participants = r.participants;
  v.writes.reserve(r.writes.size());
  for (const WriteRecord& w : r.writes)
    v.writes.push_back(WriteRef{w.addr, w.kind, w.version, w.data});
  v.truncate = r.truncate;
  v.written = r.written;
  v.part = r.part;
  v.parts = r.parts;
  v.finished_below = r.finished_below;
  return v;
}

std::string EncodeDecision(const DecisionRequest& r) {
  WireWriter w;
  PutTxn(w, r.txn);
  return std::move(w.str());
}

absl::StatusOr<DecisionRequest> DecodeDecision(absl::string_view b) {
  WireReader r(b);
  DecisionRequest out;
  if (!GetTxn(r, &out.txn) || !r.done()) return WireReader::Corrupt("decision");
  return out;
}

std::string EncodeRecover(const RecoverRequest& r) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(r.op));
  w.U32(r.coordinator);
  w.U64(r.fence_epoch);
  w.U64(r.epoch);
  w.U64(r.decisions.size());
  for (const auto& [t, commit] : r.decisions) {
    PutTxn(w, t);
    w.U8(commit ? 1 : 0);
  }
  w.U64(r.answer);
  w.U64(r.offset);
  return std::move(w.str());
}

absl::StatusOr<RecoverRequest> DecodeRecover(absl::string_view b) {
  WireReader r(b);
  RecoverRequest out;
  uint8_t op = 0;
  uint64_t n = 0;
  if (!r.U8(&op) || op < 1 || op > 4 || !r.U32(&out.coordinator) || !r.U64(&out.fence_epoch) ||
      !r.U64(&out.epoch) || !GetCount(r, &n, 21)) {
    return WireReader::Corrupt("RECOVER");
  }
  out.op = static_cast<RecoverOp>(op);
  out.decisions.resize(n);
  for (auto& [t, commit] : out.decisions) {
    uint8_t c = 0;
    if (!GetTxn(r, &t) || !r.U8(&c) || c > 1) return WireReader::Corrupt("RECOVER");
    commit = c == 1;
  }
  if (!r.U64(&out.answer) || !r.U64(&out.offset) || !r.done()) {
    return WireReader::Corrupt("RECOVER");
  }
  return out;
}

std::string EncodeRecoverAnswer(const RecoverAnswer& a) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(a.status));
  w.U64(a.epoch);
  w.U64(a.votes.size());
  for (const TxnVote& v : a.votes) {
    PutTxn(w, v.txn);
    w.U8(static_cast<uint8_t>(v.decided));
    w.U8(static_cast<uint8_t>(v.owner));
    PutIds(w, v.locked);
    PutIds(w, v.recorded);
    PutWritten(w, v.written);
  }
  w.U64(a.truncated.size());
  for (const TxnId& t : a.truncated) PutTxn(w, t);
  return std::move(w.str());
}

absl::StatusOr<RecoverAnswer> DecodeRecoverAnswer(absl::string_view b) {
  WireReader r(b);
  RecoverAnswer out;
  uint8_t status = 0;
  uint64_t n = 0;
  if (!r.U8(&status) || status > 3 || !r.U64(&out.epoch) || !GetCount(r, &n, 46)) {
    return WireReader::Corrupt("RECOVER answer");
  }
  out.status = static_cast<RecoverStatus>(status);
  out.votes.resize(n);
  for (TxnVote& v : out.votes) {
    uint8_t decided = 0, owner = 0;
    if (!GetTxn(r, &v.txn) || !r.U8(&decided) || decided > 2 || !r.U8(&owner) || owner > 3 ||
        !GetIds(r, &v.locked) || !GetIds(r, &v.recorded) || !GetWritten(r, &v.written)) {
      return WireReader::Corrupt("RECOVER answer");
    }
    v.decided = static_cast<Decided>(decided);
    v.owner = static_cast<SettleState>(owner);
  }
  if (!GetCount(r, &n, 20)) return WireReader::Corrupt("RECOVER answer");
  out.truncated.resize(n);
  for (TxnId& t : out.truncated) {
    if (!GetTxn(r, &t)) return WireReader::Corrupt("RECOVER answer");
  }
  if (!r.done()) return WireReader::Corrupt("RECOVER answer");
  return out;
}

std::string EncodeRecoverPiece(const RecoverPiece& p) {
  WireWriter w;
  w.U64(p.answer);
  w.U64(p.total);
  w.Bytes(p.bytes);
  return std::move(w.str());
}

absl::StatusOr<RecoverPiece> DecodeRecoverPiece(absl::string_view b) {
  WireReader r(b);
  RecoverPiece out;
  absl::string_view bytes;
  if (!r.U64(&out.answer) || !r.U64(&out.total) || !r.Bytes(&bytes) || !r.done() ||
      bytes.size() > out.total) {
    return WireReader::Corrupt("RECOVER piece");
  }
  out.bytes = std::string(bytes);
  return out;
}

std::string EncodeReserve(const ReserveRequest& r) {
  WireWriter w;
  PutTxn(w, r.txn);
  w.U64(r.size);
  return std::move(w.str());
}

absl::StatusOr<ReserveRequest> DecodeReserve(absl::string_view b) {
  WireReader r(b);
  ReserveRequest out;
  if (!GetTxn(r, &out.txn) || !r.U64(&out.size) || !r.done()) {
    return WireReader::Corrupt("reserve");
  }
  return out;
}

std::string EncodeArray(const ArrayRecord& r) {
  WireWriter w;
  w.U64(r.first.Pack());
  w.U64(r.size);
  w.U64(r.count);
  return std::move(w.str());
}

absl::StatusOr<ArrayRecord> DecodeArray(absl::string_view b) {
  WireReader r(b);
  ArrayRecord out;
  uint64_t first = 0;
  if (!r.U64(&first) || !r.U64(&out.size) || !r.U64(&out.count) || !r.done()) {
    return WireReader::Corrupt("object array");
  }
  out.first = GlobalAddress::Unpack(first);
  return out;
}

std::string EncodeResync(const ResyncRequest& r) {
  WireWriter w;
  w.U32(r.region);
  w.U64(r.epoch);
  w.U64(r.first_block);
  w.U64(r.max_blocks);
  return std::move(w.str());
}

absl::StatusOr<ResyncRequest> DecodeResync(absl::string_view b) {
  WireReader r(b);
  ResyncRequest out;
  if (!r.U32(&out.region) || !r.U64(&out.epoch) || !r.U64(&out.first_block) ||
      !r.U64(&out.max_blocks) || !r.done()) {
    return WireReader::Corrupt("RESYNC request");
  }
  return out;
}

std::string EncodeResyncAnswer(const ResyncAnswer& a) {
  WireWriter w;
  w.U64(a.block_size);
  w.U64(a.blocks);
  w.U64(a.block_class.size());
  // Slot classes are small (a slot is 64 bytes << class, at most a block); -1: not carved.
  for (int c : a.block_class) w.U8(static_cast<uint8_t>(c + 1));
  w.U64(a.arrays.size());
  for (const auto& [begin, end] : a.arrays) {
    w.U64(begin);
    w.U64(end);
  }
  return std::move(w.str());
}

absl::StatusOr<ResyncAnswer> DecodeResyncAnswer(absl::string_view b) {
  WireReader r(b);
  ResyncAnswer out;
  uint64_t n = 0;
  if (!r.U64(&out.block_size) || !r.U64(&out.blocks) || !r.U64(&n) || n > b.size()) {
    return WireReader::Corrupt("RESYNC answer");
  }
  out.block_class.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint8_t c = 0;
    if (!r.U8(&c)) return WireReader::Corrupt("RESYNC answer");
    out.block_class.push_back(static_cast<int>(c) - 1);
  }
  if (!r.U64(&n) || n > b.size()) return WireReader::Corrupt("RESYNC answer");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t begin = 0, end = 0;
    if (!r.U64(&begin) || !r.U64(&end)) return WireReader::Corrupt("RESYNC answer");
    out.arrays.emplace_back(begin, end);
  }
  if (!r.done()) return WireReader::Corrupt("RESYNC answer");
  return out;
}

}  // namespace txn
}  // namespace farm
