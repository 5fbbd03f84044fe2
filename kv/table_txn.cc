#include "kv/internal/table_txn.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/sync_point.h"
#include "txn/object.h"

namespace farm {
namespace kv {

absl::Status TableTxn::Load() {
  std::vector<std::string> payloads;
  if (prefetched_) {
    payloads = std::move(prefetched_payloads_);
    prefetched_ = false;
    // Read with the other keys' neighbourhoods, before their changes: what ReadRun would give
    // now is the same copy with this transaction's writes since.
    for (uint64_t i = 0; i < payloads.size(); ++i) {
      if (std::optional<absl::string_view> w = t_.PendingWrite(s_.Bucket(home_ + i))) {
        payloads[i] = std::string(*w);
      }
    }
  } else {
    NoteTouched();
    if (absl::Status st = Buckets(t_.ReadRun(s_.Bucket(home_), s_.bucket_bytes, s_.payload(),
                                             s_.neighbourhood, &payloads));
        !st.ok()) {
      return st;
    }
  }
  for (uint64_t i = 0; i < payloads.size(); ++i) {
    bufs_.push_back(Buf{s_.Bucket(home_ + i), std::move(payloads[i])});
  }
  GlobalAddress link;
  bool has = ReadLink(bufs_[0].payload, &link);
  for (int n = 0; has; ++n) {
    if (n > 1 << 20) return absl::DataLossError("an overflow chain does not end");
    Buf b{link, std::string()};
    FARM_SYNC_POINT("kv::TableTxn::Load:BeforeBlockRead");
    if (t_.Touched(link)) touched_before_.insert(link.Pack());
    std::string block;
    if (absl::Status st = ReadItem(link, s_.payload(), &block); !st.ok()) return st;
    absl::string_view entries;
    if (!BlockEntries(s_, home_, block, &entries)) {
      // The link was read before a commit freed the block and its slot was reused: this
      // transaction read a chain that is gone, and cannot commit.
      return absl::AbortedError("kv: an overflow block changed while it was read");
    }
    b.identity = block.substr(0, kBlockIdentityBytes);
    b.payload = std::string(entries);
    has = ReadLink(b.payload, &link);
    chain_.push_back(bufs_.size());
    bufs_.push_back(std::move(b));
  }
  FARM_SYNC_POINT("kv::TableTxn::Load:Done");
  return absl::OkStatus();
}

absl::Status TableTxn::ReadNeighbourhoods(txn::Transaction& t, absl::Span<TableTxn* const> tables,
                                          size_t* failed) {
  *failed = tables.size();
  std::vector<txn::Transaction::ObjectRun> runs;
  for (TableTxn* table : tables) {
    table->NoteTouched();
    table->NoteShared(tables);
    runs.push_back(table->NeighbourhoodRun(&table->prefetched_payloads_));
  }
  absl::Status st = t.ReadRuns(runs, failed);
  if (*failed < tables.size()) st = tables[*failed]->Buckets(st);
  if (!st.ok()) return st;
  for (TableTxn* table : tables) table->prefetched_ = true;
  return absl::OkStatus();
}

absl::Status TableTxn::ReadItem(GlobalAddress addr, uint64_t size, std::string* out) {
  return Changed(t_.Read(addr, size, out));
}

absl::StatusOr<std::optional<TableTxn::Loc>> TableTxn::Find() {
  const uint64_t H = s_.neighbourhood;
  for (size_t b = 0; b < bufs_.size(); ++b) {
    const bool in_chain = b >= H;
    absl::StatusOr<std::vector<Entry>> entries = ParseEntries(bufs_[b].payload);
    if (!entries.ok()) return entries.status();
    for (const Entry& e : *entries) {
      if (!in_chain && e.delta != b) continue;
      if (e.kind == kInline) {
        if (e.key != key_) continue;
        return std::optional<Loc>(Loc{b, e, std::string(e.value)});
      }
      if (e.hash != h_) continue;
      if (e.kind == kChunked) {
        std::string obj;
        const uint64_t isize = IndexSize(e.key_len, e.value_len, s_.chunk_bytes);
        if (absl::Status st = ReadItem(e.object, isize, &obj); !st.ok()) return st;
        Loc loc{b, e, std::string(), false};
        if (!DecodeIndex(obj, e, s_.chunk_bytes, &loc.index)) {
          return absl::AbortedError("kv: an item changed while it was read");  // reused
        }
        if (loc.index.key != key_) continue;
        loc.index.key = absl::string_view();
        return std::optional<Loc>(std::move(loc));
      }
      std::string obj;
      if (absl::Status st = ReadItem(e.object, ItemSize(e.key_len, e.value_len), &obj); !st.ok()) {
        return st;
      }
      absl::string_view found;
      if (!ItemValue(obj, e, key_, &found)) continue;
      return std::optional<Loc>(Loc{b, e, std::string(found)});
    }
  }
  return std::optional<Loc>();
}

absl::Status TableTxn::LoadValue(Loc& at) {
  if (at.loaded) return absl::OkStatus();
  at.value.clear();
  for (uint64_t i = 0; i < at.index.chunks.size(); ++i) {
    std::string c;
    const uint64_t size = kChunkHeader + ChunkLen(at.entry.value_len, s_.chunk_bytes, i);
    if (absl::Status st = ReadItem(at.index.chunks[i], size, &c); !st.ok()) return st;
    absl::string_view data;
    if (!ChunkData(c, at.index.tag, static_cast<uint32_t>(i), &data)) {
      // Only possible if the index changed since this transaction read it: it will not commit.
      return absl::AbortedError("kv: a value changed while it was read");
    }
    at.value.append(data.data(), data.size());
  }
  at.loaded = true;
  return absl::OkStatus();
}

absl::Status TableTxn::Put(const std::optional<Loc>& at, absl::string_view value) {
  const bool want_inline = InlineEntryBytes(key_.size(), value.size()) <= inline_max_;
  const bool want_chunked = !want_inline && ItemSize(key_.size(), value.size()) > s_.max_object;
  if (at.has_value()) {
    const Entry& e = at->entry;
    if (!want_inline && !want_chunked && e.kind == kOutOfLine && e.value_len == value.size()) {
      // In place (a concurrent free of the item may have handed its slot to an Alloc of this
      // transaction: then the item changed).
      return Changed(t_.Write(e.object, EncodeItem(key_, value)));
    }
    if (want_inline && e.kind == kInline && e.value_len == value.size()) {
      Buf& b = bufs_[at->buf];
      std::memcpy(b.payload.data() + e.offset + kEntryHeaderBytes + e.key_len, value.data(),
                  value.size());
      b.dirty = true;
      return Flush();
    }
    if (absl::Status st = Remove(*at); !st.ok()) return st;
  }
  std::string entry;
  const txn::AllocHint near{txn::AllocHint::Kind::kNear, 0, s_.Bucket(home_), 0};
  if (want_inline) {
    entry = EncodeInline(0, key_, value);
  } else if (want_chunked) {
    const uint64_t tag = NewTag();
    std::vector<GlobalAddress> chunks;
    for (uint64_t i = 0; i < ChunkCount(value.size(), s_.chunk_bytes); ++i) {
      const absl::string_view data =
          value.substr(i * s_.chunk_bytes, ChunkLen(value.size(), s_.chunk_bytes, i));
      absl::StatusOr<GlobalAddress> c = t_.Alloc(kChunkHeader + data.size(), near);
      if (!c.ok()) return c.status();
      if (absl::Status st = t_.Write(*c, EncodeChunk(tag, static_cast<uint32_t>(i), data));
          !st.ok()) {
        return st;
      }
      chunks.push_back(*c);
    }
    absl::StatusOr<GlobalAddress> index =
        t_.Alloc(IndexSize(key_.size(), value.size(), s_.chunk_bytes), near);
    if (!index.ok()) return index.status();
    if (absl::Status st = t_.Write(*index, EncodeIndex(tag, key_, chunks)); !st.ok()) return st;
    entry = EncodeOutOfLine(0, static_cast<uint32_t>(key_.size()),
                            static_cast<uint32_t>(value.size()), h_, *index, kChunked);
  } else {
    absl::StatusOr<GlobalAddress> obj = t_.Alloc(ItemSize(key_.size(), value.size()), near);
    if (!obj.ok()) return obj.status();
    if (absl::Status st = t_.Write(*obj, EncodeItem(key_, value)); !st.ok()) return st;
    entry = EncodeOutOfLine(0, static_cast<uint32_t>(key_.size()),
                            static_cast<uint32_t>(value.size()), h_, *obj);
  }
  if (absl::Status st = Insert(entry); !st.ok()) return st;
  return Flush();
}

absl::Status TableTxn::Delete(const Loc& at) {
  if (absl::Status st = Remove(at); !st.ok()) return st;
  return Flush();
}

void TableTxn::ReleaseLookupReads(const Loc& at) {
  for (size_t b = 0; b < bufs_.size(); ++b) {
    if (b == at.buf || bufs_[b].written || bufs_[b].freed) continue;
    if (touched_before_.count(bufs_[b].addr.Pack()) > 0) continue;
    t_.ReleaseRead(bufs_[b].addr);
  }
}

txn::Transaction::ObjectRun TableTxn::NeighbourhoodRun(std::vector<std::string>* out) const {
  return txn::Transaction::ObjectRun{s_.Bucket(home_), s_.bucket_bytes, s_.payload(),
                                     s_.neighbourhood, out};
}

void TableTxn::NoteTouched() {
  for (uint64_t i = 0; i < s_.neighbourhood; ++i) {
    if (t_.Touched(s_.Bucket(home_ + i))) touched_before_.insert(s_.Bucket(home_ + i).Pack());
  }
}

void TableTxn::NoteShared(absl::Span<TableTxn* const> tables) {
  const uint64_t H = s_.neighbourhood;
  for (const TableTxn* other : tables) {
    if (other == this || other->s_.first != s_.first) continue;
    const uint64_t lo = std::max(home_, other->home_);
    const uint64_t hi = std::min(home_ + H, other->home_ + 5 * H);
    for (uint64_t b = lo; b < hi; ++b) touched_before_.insert(s_.Bucket(b).Pack());
  }
}

absl::Status TableTxn::Buckets(absl::Status st) const {
  if (absl::IsNotFound(st) || absl::IsInvalidArgument(st)) return NotABucket(s_, st.message());
  return st;
}

absl::Status TableTxn::Remove(const Loc& at) {
  Buf& b = bufs_[at.buf];
  RemoveEntry(&b.payload, at.entry);
  b.dirty = true;
  if (at.entry.kind == kOutOfLine || at.entry.kind == kChunked) {
    if (absl::Status st = t_.Free(at.entry.object); !st.ok()) return st;
  }
  if (at.entry.kind == kChunked) {
    for (const GlobalAddress& c : at.index.chunks) {
      if (absl::Status st = FreeItem(c); !st.ok()) return st;
    }
  }
  if (at.buf < s_.neighbourhood) return absl::OkStatus();
  absl::StatusOr<std::vector<Entry>> left = ParseEntries(b.payload);
  if (!left.ok()) return left.status();
  if (!left->empty()) return absl::OkStatus();
  // Unlink: the predecessor (home bucket or previous block) takes this block's link.
  const auto pos = std::find(chain_.begin(), chain_.end(), at.buf);
  Buf& pred = pos == chain_.begin() ? bufs_[0] : bufs_[*(pos - 1)];
  GlobalAddress next;
  const bool has_next = ReadLink(b.payload, &next);
  WriteLink(&pred.payload, has_next ? &next : nullptr);
  pred.dirty = true;
  b.freed = true;
  chain_.erase(pos);
  return t_.Free(b.addr);
}

absl::Status TableTxn::Insert(std::string entry) {
  const uint64_t H = s_.neighbourhood;
  for (uint64_t i = 0; i < H; ++i) {
    SetDelta(&entry, static_cast<uint8_t>(i));
    if (AppendEntry(&bufs_[i].payload, entry)) {
      bufs_[i].dirty = true;
      return absl::OkStatus();
    }
  }
  absl::StatusOr<bool> displaced = Displace(entry);
  if (!displaced.ok()) return displaced.status();
  if (*displaced) return absl::OkStatus();
  SetDelta(&entry, 0);
  for (size_t b : chain_) {
    if (AppendEntry(&bufs_[b].payload, entry)) {
      bufs_[b].dirty = true;
      return absl::OkStatus();
    }
  }
  // A new overflow block at the head of the chain.
  absl::StatusOr<GlobalAddress> block =
      t_.Alloc(s_.payload(), txn::AllocHint{txn::AllocHint::Kind::kNear, 0, s_.Bucket(home_), 0});
  if (!block.ok()) return block.status();
  Buf nb{*block, std::string(s_.payload() - kBlockIdentityBytes, '\0')};
  const uint64_t identity = BlockIdentity(s_, home_);
  nb.identity.assign(reinterpret_cast<const char*>(&identity), 8);
  GlobalAddress old;
  const bool has_old = ReadLink(bufs_[0].payload, &old);
  WriteLink(&nb.payload, has_old ? &old : nullptr);
  if (!AppendEntry(&nb.payload, entry)) {
    return absl::InternalError("an entry does not fit an empty overflow block");
  }
  nb.dirty = true;
  WriteLink(&bufs_[0].payload, &*block);
  bufs_[0].dirty = true;
  chain_.insert(chain_.begin(), bufs_.size());
  bufs_.push_back(std::move(nb));
  return absl::OkStatus();
}

absl::StatusOr<bool> TableTxn::Displace(std::string& entry) {
  const uint64_t H = s_.neighbourhood;
  const uint64_t reach = std::min<uint64_t>(4 * H, s_.total - (home_ + H));
  if (reach == 0) return false;
  std::vector<std::string> ext;
  if (absl::Status st =
          Buckets(t_.ReadRun(s_.Bucket(home_ + H), s_.bucket_bytes, s_.payload(), reach, &ext));
      !st.ok()) {
    return st;
  }
  // Work on copies: bucket j of `work` is home + j.
  std::vector<std::string> work;
  for (uint64_t i = 0; i < H; ++i) work.push_back(bufs_[i].payload);
  for (std::string& p : ext) work.push_back(std::move(p));
  std::vector<bool> changed(work.size(), false);
  auto free_bytes = [&](uint64_t j) -> uint64_t {
    absl::StatusOr<std::vector<Entry>> e = ParseEntries(work[j]);
    return e.ok() ? FreeBytes(work[j], *e) : 0;
  };
  uint64_t free_at = H;
  while (free_at < work.size() && free_bytes(free_at) < entry.size()) ++free_at;
  if (free_at == work.size()) return false;
  for (int moves = 0; free_at >= H; ++moves) {
    if (moves > static_cast<int>(2 * H)) return false;
    bool moved = false;
    for (uint64_t j = free_at + 1 - H; j < free_at && !moved; ++j) {
      absl::StatusOr<std::vector<Entry>> entries = ParseEntries(work[j]);
      if (!entries.ok()) return entries.status();
      for (const Entry& e : *entries) {
        // Its home bucket (relative to ours; may be before it) must reach free_at.
        const int64_t e_home = static_cast<int64_t>(j) - e.delta;
        const int64_t dist = static_cast<int64_t>(free_at) - e_home;
        if (dist >= static_cast<int64_t>(H) || e.bytes > free_bytes(free_at)) continue;
        std::string bytes = work[j].substr(e.offset, e.bytes);
        SetDelta(&bytes, static_cast<uint8_t>(dist));
        AppendEntry(&work[free_at], bytes);
        RemoveEntry(&work[j], e);
        changed[free_at] = changed[j] = true;
        free_at = j;
        moved = true;
        break;
      }
    }
    if (!moved) return false;
  }
  SetDelta(&entry, static_cast<uint8_t>(free_at));
  if (!AppendEntry(&work[free_at], entry)) return false;
  changed[free_at] = true;
  for (uint64_t j = 0; j < work.size(); ++j) {
    if (!changed[j]) continue;
    if (j < H) {
      bufs_[j].payload = std::move(work[j]);
      bufs_[j].dirty = true;
    } else {
      bufs_.push_back(Buf{s_.Bucket(home_ + j), std::move(work[j]), true});
    }
  }
  return true;
}

absl::Status TableTxn::Flush() {
  for (Buf& b : bufs_) {
    if (!b.dirty || b.freed) continue;
    if (b.identity.empty()) {
      if (absl::Status st = t_.Write(b.addr, b.payload); !st.ok()) return st;
    } else if (absl::Status st = Changed(t_.Write(b.addr, absl::StrCat(b.identity, b.payload)));
               !st.ok()) {
      // A block this transaction read was freed since, and an Alloc of this transaction got
      // its slot (the block then has this transaction's new object's size): the chain changed.
      return st;
    }
    b.dirty = false;
    b.written = true;
  }
  return absl::OkStatus();
}

absl::Status UpdateIn(TableTxn& table, bool read_value,
                      absl::FunctionRef<NewValue(std::string* value)> update) {
  absl::StatusOr<std::optional<TableTxn::Loc>> at = table.Find();
  if (!at.ok()) return at.status();
  if (read_value && at->has_value()) {
    if (absl::Status st = table.LoadValue(**at); !st.ok()) return st;
  }
  const NewValue next = update(at->has_value() ? &(*at)->value : nullptr);
  if (!next.has_value()) return absl::OkStatus();
  if (absl::Status st = table.Put(*at, *next); !st.ok()) return st;
  if (at->has_value()) table.ReleaseLookupReads(**at);
  return absl::OkStatus();
}

absl::Status PutIn(TableTxn& table, absl::string_view value) {
  return UpdateIn(table, false, [&](std::string*) { return NewValue(value); });
}

absl::Status DeleteIn(TableTxn& table, bool* deleted) {
  absl::StatusOr<std::optional<TableTxn::Loc>> at = table.Find();
  if (!at.ok()) return at.status();
  *deleted = at->has_value();
  if (!*deleted) return absl::OkStatus();
  if (absl::Status st = table.Delete(**at); !st.ok()) return st;
  table.ReleaseLookupReads(**at);
  return absl::OkStatus();
}

absl::Status GetIn(TableTxn& table, bool* found, std::string* value) {
  return UpdateIn(table, true, [&](std::string* current) {
    *found = current != nullptr;
    if (*found) *value = std::move(*current);
    return NewValue();
  });
}

}  // namespace kv
}  // namespace farm
