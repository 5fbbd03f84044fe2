#include "txn/allocator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "txn/object.h"

namespace farm {
namespace txn {

uint64_t Allocator::BlockSizeOf(uint64_t region_size) {
  uint64_t b = std::min<uint64_t>(kMaxBlockSize, region_size);
  // Power of two, at least one slot of the smallest class.
  while ((b & (b - 1)) != 0) b &= b - 1;
  return b < kMinSlot ? 0 : b;
}

int Allocator::SlotClassOf(uint64_t size) {
  int c = 0;
  while (SlotSize(c) < ObjectSpan(size)) ++c;
  return c;
}

void Allocator::GrowClasses(uint64_t block_size) {
  while (block_size >= SlotSize(classes_)) ++classes_;
  if (free_.size() < static_cast<size_t>(classes_)) free_.resize(classes_);
}

Allocator::Allocator(std::vector<LocalRegion> regions) {
  for (const LocalRegion& r : regions) {
    Region reg;
    reg.info = r;
    reg.block_size = BlockSizeOf(r.size);
    if (reg.block_size == 0) continue;
    reg.block_class.assign(r.size / reg.block_size, -1);
    GrowClasses(reg.block_size);
    region_index_[r.id] = regions_.size();
    regions_.push_back(std::move(reg));
  }
}

absl::Status Allocator::Adopt(LocalRegion region, const RegionLayout& layout) {
  const uint64_t block_size = BlockSizeOf(region.size);
  if (block_size == 0 || layout.block_size != block_size ||
      layout.block_class.size() != region.size / block_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the layout of region ", region.id, " (", layout.block_class.size(), " blocks of ",
        layout.block_size, " bytes) does not fit its ", region.size, " bytes"));
  }
  for (int c : layout.block_class) {
    if (c < -1 || (c >= 0 && SlotSize(c) > block_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the layout of region ", region.id, " has a block of slot class ", c));
    }
  }
  for (const RegionLayout::Array& a : layout.arrays) {
    if (a.begin >= a.end || a.end > region.size || layout.block_class[a.begin / block_size] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("the layout of region ", region.id,
                                                     " has an array outside its carved blocks"));
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  if (region_index_.contains(region.id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("region ", region.id, " is already in this node's heap"));
  }
  Region reg;
  reg.info = region;
  reg.block_size = block_size;
  reg.block_class = layout.block_class;
  GrowClasses(block_size);
  auto in_array = [&](uint64_t off) {
    for (const RegionLayout::Array& a : layout.arrays) {
      if (off >= a.begin && off < a.end) return true;
    }
    return false;
  };
  for (uint64_t b = 0; b < reg.block_class.size(); ++b) {
    const int c = reg.block_class[b];
    if (c < 0) continue;
    const uint64_t slot = SlotSize(c);
    // Pushed in reverse, so that slots are handed out in address order.
    for (uint64_t off = block_size; off >= slot; off -= slot) {
      const uint64_t at = b * block_size + off - slot;
      if (!in_array(at) && !IsAllocated(LoadLockWord(region.base + at))) {
        free_[c].push_back(GlobalAddress{region.id, at});
      } else {
        ++in_use_;
      }
    }
  }
  for (const RegionLayout::Array& a : layout.arrays) {
    arrays_.push_back(Array{region.id, a.begin, a.end});
  }
  region_index_[region.id] = regions_.size();
  regions_.push_back(std::move(reg));
  return absl::OkStatus();
}

bool Allocator::Has(uint32_t region) const {
  std::lock_guard<std::mutex> l(mu_);
  return region_index_.contains(region);
}

std::vector<uint32_t> Allocator::Regions() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint32_t> out;
  for (const Region& r : regions_) out.push_back(r.info.id);
  std::sort(out.begin(), out.end());
  return out;
}

void Allocator::Freeze(uint32_t region) {
  std::lock_guard<std::mutex> l(mu_);
  if (!region_index_.contains(region)) return;
  frozen_.try_emplace(region);
}

void Allocator::Unfreeze(uint32_t region) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = frozen_.find(region);
  if (it == frozen_.end()) return;
  for (const auto& [c, slot] : it->second) free_[c].push_back(slot);
  frozen_.erase(it);
}

bool Allocator::Remove(uint32_t region) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = region_index_.find(region);
  if (it == region_index_.end()) return false;
  const size_t index = it->second;
  const Region& r = regions_[index];
  // Its slots in use leave the count: every carved slot but the free ones.
  uint64_t carved = 0;
  for (int c : r.block_class) carved += c < 0 ? 0 : r.block_size / SlotSize(c);
  uint64_t free = 0;
  for (std::vector<GlobalAddress>& list : free_) {
    const size_t before = list.size();
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const GlobalAddress& a) { return a.region == region; }),
               list.end());
    free += before - list.size();
  }
  if (auto f = frozen_.find(region); f != frozen_.end()) {
    free += f->second.size();
    frozen_.erase(f);
  }
  in_use_ -= std::min(in_use_, carved - std::min(carved, free));
  arrays_.erase(std::remove_if(arrays_.begin(), arrays_.end(),
                               [&](const Array& a) { return a.region == region; }),
                arrays_.end());
  absl::erase_if(reserved_,
                 [&](uint64_t packed) { return GlobalAddress::Unpack(packed).region == region; });
  regions_.erase(regions_.begin() + static_cast<std::ptrdiff_t>(index));
  region_index_.clear();
  for (size_t i = 0; i < regions_.size(); ++i) region_index_[regions_[i].info.id] = i;
  return true;
}

RegionLayout Allocator::EmptyLayout(uint64_t region_size) {
  RegionLayout out;
  out.block_size = BlockSizeOf(region_size);
  if (out.block_size != 0) out.block_class.assign(region_size / out.block_size, -1);
  return out;
}

RegionLayout Allocator::LayoutOf(uint32_t region) const {
  std::lock_guard<std::mutex> l(mu_);
  RegionLayout out;
  auto it = region_index_.find(region);
  if (it == region_index_.end()) return out;
  const Region& r = regions_[it->second];
  out.block_size = r.block_size;
  out.block_class = r.block_class;
  for (const Array& a : arrays_) {
    if (a.region == region) out.arrays.push_back(RegionLayout::Array{a.begin, a.end});
  }
  return out;
}

uint64_t Allocator::FindUncarved(const Region& r, uint64_t n) {
  const uint64_t blocks = r.block_class.size();
  uint64_t run = 0;
  for (uint64_t b = r.next_block; b < blocks; ++b) {
    run = r.block_class[b] < 0 ? run + 1 : 0;
    if (run == n) return b + 1 - n;
  }
  return blocks;
}

uint64_t Allocator::max_object_size() const {
  if (classes_ == 0) return 0;
  return std::min(kMaxObjectSize, SlotSize(classes_ - 1) - kObjectHeaderSize);
}

bool Allocator::CarveBlock(int c, uint32_t* first_use) {
  const uint64_t slot = SlotSize(c);
  for (Region& r : regions_) {
    if (r.block_size < slot || frozen_.contains(r.info.id)) continue;
    const uint64_t b = FindUncarved(r, 1);
    if (b >= r.block_class.size()) continue;
    if (std::all_of(r.block_class.begin(), r.block_class.end(), [](int k) { return k < 0; })) {
      *first_use = r.info.id;
    }
    r.next_block = b + 1;  // FindUncarved found every block from the hint to b carved
    r.block_class[b] = c;
    char* base = r.info.base + b * r.block_size;
    // The region may hold anything (a fill pattern, raw writes): the slots start as never
    // allocated, version 0. Nobody holds an address in a block that was never carved.
    std::memset(base, 0, r.block_size);
    // Pushed in reverse, so that slots are handed out in address order.
    for (uint64_t off = r.block_size; off >= slot; off -= slot) {
      free_[c].push_back(GlobalAddress{r.info.id, b * r.block_size + off - slot});
    }
    return true;
  }
  return false;
}

absl::StatusOr<int> Allocator::ClassOf(uint64_t size) const {
  if (size == 0) return absl::InvalidArgumentError("cannot allocate an object of 0 bytes");
  if (size > max_object_size()) {
    return absl::InvalidArgumentError(absl::StrCat("an object of ", size,
                                                   " bytes is larger than the largest object (",
                                                   max_object_size(), " bytes)"));
  }
  return SlotClassOf(size);
}

absl::StatusOr<GlobalAddress> Allocator::Reserve(uint64_t size) {
  absl::StatusOr<int> cls = ClassOf(size);
  if (!cls.ok()) return cls.status();
  const int c = *cls;
  GlobalAddress a;
  uint32_t first_use = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (;;) {
      if (free_[c].empty() && !CarveBlock(c, &first_use)) {
        if (!frozen_.empty()) {
          // Room may be left in a region being handed over: it is another node's soon.
          return absl::AbortedError(
              absl::StrCat("no free ", SlotSize(c),
                           "-byte slot outside the region(s) this node is handing "
                           "over to another node: the configuration is changing; retry"));
        }
        return absl::ResourceExhaustedError(
            absl::StrCat("out of memory: no free ", SlotSize(c), "-byte slot for an object of ",
                         size, " bytes and no block left to carve (", in_use_, " slots in use)"));
      }
      a = free_[c].back();
      free_[c].pop_back();
      auto f = frozen_.find(a.region);
      if (f == frozen_.end()) break;
      f->second.emplace_back(c, a);  // set aside until Unfreeze
    }
    reserved_.insert(a.Pack());
    ++in_use_;
  }
  if (first_use != 0 && on_first_use_) on_first_use_(first_use);
  return a;
}

absl::StatusOr<GlobalAddress> Allocator::ReserveArray(uint64_t size, uint64_t count) {
  if (count == 0) return absl::InvalidArgumentError("an object array needs at least one object");
  absl::StatusOr<int> cls = ClassOf(size);
  if (!cls.ok()) return cls.status();
  const int c = *cls;
  uint32_t first_use = 0;
  absl::StatusOr<GlobalAddress> out = CarveArray(c, count, &first_use);
  if (first_use != 0 && on_first_use_) on_first_use_(first_use);
  return out;
}

absl::StatusOr<GlobalAddress> Allocator::CarveArray(int c, uint64_t count, uint32_t* first_use) {
  const uint64_t slot = SlotSize(c);
  std::lock_guard<std::mutex> l(mu_);
  for (Region& r : regions_) {
    if (r.block_size < slot || frozen_.contains(r.info.id)) continue;
    const uint64_t per_block = r.block_size / slot;
    const uint64_t blocks = (count + per_block - 1) / per_block;
    const uint64_t first = FindUncarved(r, blocks);
    if (first >= r.block_class.size()) continue;
    if (std::all_of(r.block_class.begin(), r.block_class.end(), [](int k) { return k < 0; })) {
      *first_use = r.info.id;
    }
    if (first == r.next_block) r.next_block += blocks;
    char* base = r.info.base + first * r.block_size;
    std::memset(base, 0, blocks * r.block_size);
    for (uint64_t b = first; b < first + blocks; ++b) r.block_class[b] = c;
    // The slots after the array in its last block are ordinary free slots of the class.
    for (uint64_t i = blocks * per_block; i > count; --i) {
      free_[c].push_back(GlobalAddress{r.info.id, first * r.block_size + (i - 1) * slot});
    }
    in_use_ += count;
    arrays_.push_back(Array{r.info.id, first * r.block_size, first * r.block_size + count * slot});
    return GlobalAddress{r.info.id, first * r.block_size};
  }
  return absl::ResourceExhaustedError(absl::StrCat("out of memory: no region of this node has ",
                                                   count, " consecutive free ", slot,
                                                   "-byte slots (", count * slot, " bytes) left"));
}

bool Allocator::InArray(GlobalAddress slot) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const Array& a : arrays_) {
    if (a.region == slot.region && slot.offset >= a.begin && slot.offset < a.end) return true;
  }
  return false;
}

bool Allocator::IsReserved(GlobalAddress slot) const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_.contains(slot.Pack());
}

void Allocator::ReturnSlot(GlobalAddress slot) {
  uint64_t slot_size = 0;
  if (!Locate(slot, &slot_size).ok()) return;
  int c = 0;
  while (SlotSize(c) < slot_size) ++c;
  if (auto f = frozen_.find(slot.region); f != frozen_.end()) {
    f->second.emplace_back(c, slot);
  } else {
    free_[c].push_back(slot);
  }
  --in_use_;
}

void Allocator::CancelReservation(GlobalAddress slot) {
  std::lock_guard<std::mutex> l(mu_);
  if (reserved_.erase(slot.Pack()) == 0) return;
  ReturnSlot(slot);
}

void Allocator::Installed(GlobalAddress slot) {
  std::lock_guard<std::mutex> l(mu_);
  reserved_.erase(slot.Pack());
}

void Allocator::Freed(GlobalAddress slot) {
  std::lock_guard<std::mutex> l(mu_);
  ReturnSlot(slot);
}

absl::StatusOr<char*> Allocator::Locate(GlobalAddress addr, uint64_t* slot_size) const {
  auto it = region_index_.find(addr.region);
  if (it == region_index_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(addr.ToString(), " is not in a region of this node's heap"));
  }
  const Region& r = regions_[it->second];
  const uint64_t b = addr.offset / r.block_size;
  if (b >= r.block_class.size() || r.block_class[b] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(addr.ToString(), " is not an object: nothing was allocated there"));
  }
  const uint64_t slot = SlotSize(r.block_class[b]);
  if ((addr.offset % r.block_size) % slot != 0) {
    return absl::InvalidArgumentError(absl::StrCat(addr.ToString(),
                                                   " is not an object: it is inside a ", slot,
                                                   "-byte slot, not at its start"));
  }
  *slot_size = slot;
  return r.info.base + addr.offset;
}

absl::StatusOr<char*> Allocator::SlotOf(GlobalAddress addr, uint64_t* slot_size) const {
  std::lock_guard<std::mutex> l(mu_);
  return Locate(addr, slot_size);
}

absl::StatusOr<char*> Allocator::Object(GlobalAddress addr, uint64_t size) const {
  uint64_t slot = 0;
  absl::StatusOr<char*> p = SlotOf(addr, &slot);
  if (!p.ok()) return p.status();
  if (ObjectSpan(size) > slot) {
    return absl::InvalidArgumentError(absl::StrCat("an object of ", size,
                                                   " bytes does not fit the ", slot,
                                                   "-byte slot at ", addr.ToString()));
  }
  return p;
}

uint64_t Allocator::slots_in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

uint64_t Allocator::reserved() const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_.size();
}

}  // namespace txn
}  // namespace farm
