#include "txn/resync.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "platform/sync_point.h"
#include "spdlog/spdlog.h"
#include "txn/allocator.h"
#include "txn/object.h"
#include "txn/protocol.h"

namespace farm {
namespace txn {
namespace {

// How long a RESYNC call or a READ may take before the copy is tried again from the start.
constexpr absl::Duration kCallTimeout = absl::Seconds(5);
// Pause before a copy that failed is tried again, and between rounds of slots read again.
constexpr absl::Duration kRetryPause = absl::Milliseconds(20);
// How often a copy complete is reported again while the membership still lists it as syncing
// (a report is best effort: one sent while the CM changes is lost, and a quiet cluster publishes
// no next membership that would have it said again).
constexpr absl::Duration kReportAgain = absl::Seconds(1);
// How long a copy may wait for one step (a RESYNC answer, a slot's commit to finish) before it
// says so, and then again each time as long.
constexpr absl::Duration kStallWarning = absl::Seconds(5);

// Why a slot copy must be read again (BackupLog::InstallCopied's kRetry), for the stall warning.
std::string WhyRetry(const char* copy, uint64_t slot) {
  uint64_t word, size;
  std::memcpy(&word, copy, 8);
  std::memcpy(&size, copy + 16, 8);
  if (IsLocked(word)) {
    return absl::StrCat("locked at version ", VersionOf(word), " (a commit holds it)");
  }
  if (size > kMaxObjectSize || ObjectSpan(size) > slot) {
    return absl::StrCat("version ", VersionOf(word), " has a size word of ", size,
                        ", more than its slot of ", slot, " bytes holds");
  }
  ObjectView view;
  return absl::StrCat("version ", VersionOf(word), " of ", size, " bytes reads as ",
                      ObjectStateName(DecodeObject(copy, size, &view)));
}

bool Lists(const google::protobuf::RepeatedField<uint32_t>& nodes, uint32_t id) {
  return std::find(nodes.begin(), nodes.end(), id) != nodes.end();
}

}  // namespace

Resync::Resync(Node* node, Rpc* rpc, BackupLog* log, Options options)
    : node_(node), rpc_(rpc), log_(log), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

Resync::~Resync() { Stop(); }

void Resync::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  lane_ = Messenger::LaneLease();
}

uint64_t Resync::regions_copied() const {
  std::lock_guard<std::mutex> l(mu_);
  return regions_copied_;
}

void Resync::OnMembership(const control::Membership& m) {
  std::map<uint32_t, Job> now;
  for (const control::RegionInfo& r : m.regions()) {
    if (!Lists(r.syncing_backup(), node_->id())) continue;
    now[r.region_id()] = Job{r.region_id(), m.epoch(), r.node_id()};
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [region, job] : now) {
    auto it = wanted_.find(region);
    if (it != wanted_.end() && it->second.primary == job.primary) {
      job = it->second;  // the same copy goes on
    } else if (it != wanted_.end() && copied_.count(region)) {
      // Copied from the old primary, which was promoted away since: the copy holds the region
      // as it was then plus every commit since (records), like the new primary. Still complete.
      job.epoch = it->second.epoch;
    } else {
      copied_.erase(region);  // a new job, or a copy under way that starts again
    }
    // Still listed although copied: the report was lost or is in flight; say it again now.
    if (copied_.count(region)) report_again_at_ = absl::InfinitePast();
  }
  for (auto it = copied_.begin(); it != copied_.end();) {
    it = now.count(*it) ? std::next(it) : copied_.erase(it);
  }
  wanted_ = std::move(now);
  cv_.notify_all();
}

bool Resync::StillWanted(const Job& job) const {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return false;
  auto it = wanted_.find(job.region);
  return it != wanted_.end() && it->second.primary == job.primary;
}

void Resync::Loop() {
  for (;;) {
    Job job;
    bool have_job = false;
    std::set<uint32_t> report;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(100), [&] {
        if (stopping_ || (!copied_.empty() && absl::Now() >= report_again_at_)) return true;
        for (const auto& [region, j] : wanted_) {
          if (!copied_.count(region)) return true;
        }
        return false;
      });
      if (stopping_) return;
      const absl::Time now = absl::Now();
      if (!copied_.empty() && now >= report_again_at_) {
        report = copied_;
        report_again_at_ = now + kReportAgain;
      }
      for (const auto& [region, j] : wanted_) {
        if (copied_.count(region)) continue;
        job = j;
        have_job = true;
        break;
      }
    }
    for (uint32_t region : report) node_->ReportBackupSynced(region);
    if (!have_job) continue;
    const absl::Time start = absl::Now();
    absl::Status s = Copy(job);
    if (s.ok()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (wanted_.count(job.region) && wanted_.at(job.region).primary == job.primary) {
          copied_.insert(job.region);
          ++regions_copied_;
        }
        report_again_at_ = absl::Now() + kReportAgain;
      }
      spdlog::warn("txn: node {} copied region {} from node {} ({}): its backup copy is complete",
                   node_->id(), job.region, job.primary, absl::FormatDuration(absl::Now() - start));
      node_->ReportBackupSynced(job.region);
      continue;
    }
    if (absl::IsAborted(s)) continue;  // the membership moved on: the next job says what to do
    // Said once per job, then only after kStallWarning without a success.
    const absl::Time now = absl::Now();
    const bool say =
        job.region != failed_region_ || job.primary != failed_primary_ || now >= failed_warn_at_;
    if (say) {
      spdlog::warn("txn: node {}: copying region {} from node {} failed ({}); trying again",
                   node_->id(), job.region, job.primary, std::string(s.message()));
      failed_region_ = job.region;
      failed_primary_ = job.primary;
      failed_warn_at_ = now + kStallWarning;
    }
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, absl::ToChronoMilliseconds(kRetryPause), [&] { return stopping_; });
  }
}

absl::Status Resync::FetchLayout(const Job& job, RegionLayout* layout) {
  *layout = RegionLayout{};
  uint64_t blocks = 1;
  absl::Time waiting_since = absl::Now();
  absl::Time warn_at = waiting_since + kStallWarning;
  for (uint64_t first = 0; first < blocks;) {
    if (!StillWanted(job)) return absl::AbortedError("the membership moved on");
    ResyncRequest req{job.region, job.epoch, first, options_.layout_blocks};
    absl::StatusOr<std::string> r =
        rpc_->Call(*lane_, job.primary, kResyncMethod, EncodeResync(req), kCallTimeout);
    if (!r.ok()) {
      // Not yet at the epoch, or fenced, or recovering: ask again shortly.
      if (absl::IsUnavailable(r.status()) || absl::IsAborted(r.status())) {
        if (absl::Now() >= warn_at) {
          spdlog::warn(
              "txn: node {}: node {} has not answered RESYNC of region {} (membership epoch {}) "
              "for {}: {}; asking again",
              node_->id(), job.primary, job.region, job.epoch,
              absl::FormatDuration(absl::Now() - waiting_since), std::string(r.status().message()));
          warn_at = absl::Now() + kStallWarning;
        }
        absl::SleepFor(absl::Milliseconds(5));
        continue;
      }
      return r.status();
    }
    waiting_since = absl::Now();
    warn_at = waiting_since + kStallWarning;
    absl::StatusOr<ResyncAnswer> a = DecodeResyncAnswer(*r);
    if (!a.ok()) return a.status();
    if (a->block_size == 0 || a->blocks == 0 || a->block_class.empty() ||
        first + a->block_class.size() > a->blocks) {
      return absl::DataLossError(absl::StrCat("node ", job.primary, " answered RESYNC of region ",
                                              job.region, " with an impossible layout"));
    }
    if (first == 0) {
      blocks = a->blocks;
      layout->block_size = a->block_size;
      for (const auto& [begin, end] : a->arrays) layout->arrays.push_back({begin, end});
    } else if (a->blocks != blocks || a->block_size != layout->block_size) {
      return absl::DataLossError("the region's layout changed shape between two RESYNC answers");
    }
    layout->block_class.insert(layout->block_class.end(), a->block_class.begin(),
                               a->block_class.end());
    first += a->block_class.size();
  }
  return absl::OkStatus();
}

absl::Status Resync::ReadInto(const Job& job, uint64_t offset, uint64_t size) {
  Node::Batch batch(node_);
  absl::Status s = batch.Read(GlobalAddress{job.region, offset},
                              LocalBuffer{buffer_mr_.get(), buffer_->data(), size});
  if (s.ok()) s = batch.Wait(kCallTimeout);
  if (!s.ok() && batch.outstanding() > 0) {
    // The READ may still land: its buffer is not reused.
    abandoned_.push_back(Abandoned{std::move(buffer_), std::move(buffer_mr_), batch.in_flight()});
  }
  return s;
}

absl::Status Resync::Copy(const Job& job) {
  CopyPoint point{node_->id(), job.region};
  FARM_SYNC_POINT_CALLBACK("Resync::Copy", &point);
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    it = it->in_flight.done() ? abandoned_.erase(it) : std::next(it);
  }
  if (lane_.get() == nullptr) {
    absl::StatusOr<Messenger::LaneLease> lane =
        rpc_->messenger()->AcquireLane(absl::ZeroDuration());
    if (!lane.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no messaging lane is free for copying: ", lane.status().message()));
    }
    lane_ = std::move(*lane);
  }
  RegionLayout layout;
  if (absl::Status s = FetchLayout(job, &layout); !s.ok()) return s;
  if (!log_->AdoptLayout(job.region, layout)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the layout of region ", job.region, " does not fit this node's copy"));
  }
  const uint64_t bs = layout.block_size;
  if (buffer_ == nullptr || buffer_->size() < bs) {
    absl::StatusOr<std::unique_ptr<Region>> b = Region::Allocate((bs + 4095) / 4096 * 4096, false);
    if (!b.ok()) return b.status();
    absl::StatusOr<std::unique_ptr<MemoryRegistration>> mr =
        node_->RegisterBuffer((*b)->data(), (*b)->size());
    if (!mr.ok()) return mr.status();
    buffer_mr_.reset();
    buffer_ = std::move(*b);
    buffer_mr_ = std::move(*mr);
  }
  // Slots read again later: (offset, slot size).
  std::vector<std::pair<uint64_t, uint64_t>> again;
  for (uint64_t b = 0; b < layout.block_class.size(); ++b) {
    const int c = layout.block_class[b];
    if (c < 0) continue;  // never carved: nothing in it
    if (!StillWanted(job)) return absl::AbortedError("the membership moved on");
    if (absl::Status s = ReadInto(job, b * bs, bs); !s.ok()) return s;
    const uint64_t slot = Allocator::SlotSize(c);
    for (uint64_t o = 0; o + slot <= bs; o += slot) {
      switch (log_->InstallCopied(job.region, b * bs + o, buffer_->data() + o, slot)) {
        case BackupLog::SlotCopy::kRetry:
          again.emplace_back(b * bs + o, slot);
          break;
        case BackupLog::SlotCopy::kNoCopy:
          return absl::AbortedError("this node holds no copy of the region any more");
        default:
          break;
      }
    }
    absl::SleepFor(options_.pause);
  }
  // Slots whose commit was under way: read until it finished (applied or aborted).
  const absl::Time again_since = absl::Now();
  absl::Time warn_at = again_since + kStallWarning;
  while (!again.empty()) {
    if (!StillWanted(job)) return absl::AbortedError("the membership moved on");
    std::vector<std::pair<uint64_t, uint64_t>> still;
    std::string first_why;
    for (const auto& [offset, slot] : again) {
      if (absl::Status s = ReadInto(job, offset, slot); !s.ok()) return s;
      const BackupLog::SlotCopy r = log_->InstallCopied(job.region, offset, buffer_->data(), slot);
      if (r == BackupLog::SlotCopy::kNoCopy) {
        return absl::AbortedError("this node holds no copy of the region any more");
      }
      if (r == BackupLog::SlotCopy::kRetry) {
        if (still.empty() && absl::Now() >= warn_at) {
          first_why = absl::StrCat("offset ", offset, ": ", WhyRetry(buffer_->data(), slot));
        }
        still.emplace_back(offset, slot);
      }
    }
    if (!first_why.empty()) {
      spdlog::warn(
          "txn: node {}: copying region {} from node {}: {} slot(s) still cannot be copied "
          "after {} (the first, {}); reading them again",
          node_->id(), job.region, job.primary, still.size(),
          absl::FormatDuration(absl::Now() - again_since), first_why);
      warn_at = absl::Now() + kStallWarning;
    }
    again.swap(still);
    if (!again.empty()) absl::SleepFor(absl::Milliseconds(1));
  }
  return absl::OkStatus();
}

}  // namespace txn
}  // namespace farm
