#include "daemon/core/admission_plan.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/core/checked_math.h"

namespace shardd::core {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Saturating arithmetic: a plan too large for 64 bits is simply refused.
int64_t SatAdd(int64_t a, int64_t b) { return CheckedAdd(a, b).value_or(kMax); }
int64_t SatMul(int64_t a, int64_t b) { return CheckedMul(a, b).value_or(kMax); }

int64_t LargestShardStored(const UnitLayout& unit) {
  int64_t largest = 0;
  for (const ShardRange& shard : unit.shards()) {
    largest = std::max(largest, shard.stored());
  }
  return largest;
}

}  // namespace

const char* MemoryPlacementName(MemoryPlacement placement) {
  switch (placement) {
    case MemoryPlacement::kHost:
      return "host";
    case MemoryPlacement::kSharedHost:
      return "shm";
    case MemoryPlacement::kDevice:
      return "device";
  }
  return "unknown";
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30))
    return absl::StrFormat("%.2f GiB", b / 0x1p30);
  if (bytes >= (int64_t{1} << 20))
    return absl::StrFormat("%.2f MiB", b / 0x1p20);
  if (bytes >= (int64_t{1} << 10))
    return absl::StrFormat("%.2f KiB", b / 0x1p10);
  return absl::StrCat(bytes, " B");
}

int64_t CommunicatorScratchBytes(const std::vector<UnitLayout>& units,
                                 const ShardPlan& plan, int64_t shard_index,
                                 DType reduce_dtype) {
  const int64_t f = plan.sharding_factor();
  const int64_t replicas = plan.num_replicas();
  int64_t largest_shard = 0, largest_padded = 0, largest_mine = 0;
  for (const UnitLayout& unit : units) {
    largest_shard = std::max(largest_shard, LargestShardStored(unit));
    largest_padded = std::max(largest_padded, unit.padded_numel());
    if (shard_index >= 0 && shard_index < unit.sharding_factor()) {
      largest_mine = std::max(largest_mine, unit.shard(shard_index).stored());
    }
  }
  int64_t bytes = 0;
  if (f > 1) {
    bytes = SatAdd(bytes, SatMul(SatMul(f - 1, largest_shard), 4));
    if (DTypeSize(reduce_dtype) == 2) {
      bytes = SatAdd(bytes, SatMul(SatAdd(largest_padded, largest_shard), 4));
    }
  }
  if (replicas > 1) {
    const int64_t block =
        largest_mine / replicas + (largest_mine % replicas != 0 ? 1 : 0);
    bytes = SatAdd(bytes, SatMul(SatMul(replicas - 1, block), 4));
  }
  return bytes;
}

absl::StatusOr<AdmissionPlan> AdmissionPlan::ForEngine(
    const std::vector<UnitLayout>& units, const ShardPlan& plan, int64_t rank,
    const MemoryOptions& options, bool device_memory) {
  absl::StatusOr<MemoryBreakdown> m =
      MemoryPlan::ForRank(units, plan, rank, options);
  if (!m.ok()) return m.status();
  absl::StatusOr<RankPlacement> placement = plan.Placement(rank);
  if (!placement.ok()) return placement.status();
  const bool f1 = plan.sharding_factor() == 1;
  const bool lowp = units.front().dtype() != DType::kFloat32;
  // Where StepEngine::Create puts each category.
  const auto where = [&](bool trainer_maps) {
    if (device_memory) return MemoryPlacement::kDevice;
    return trainer_maps ? MemoryPlacement::kSharedHost : MemoryPlacement::kHost;
  };
  AdmissionPlan out;
  out.breakdown_ = *m;
  out.Add("parameter shards", m->parameter_shard_bytes, where(f1 && !lowp));
  out.Add("low-precision shards", m->lowp_parameter_shard_bytes, where(f1));
  out.Add("gradient shards", m->gradient_shard_bytes, where(false));
  out.Add("optimizer state", m->optimizer_state_bytes, where(false));
  out.Add("gathered slots", m->gathered_parameter_bytes, where(true));
  out.Add("gradient slot", m->unsharded_gradient_bytes, where(true));
  out.Add("communicator scratch",
          CommunicatorScratchBytes(units, plan, placement->shard_index,
                                   options.reduce_dtype),
          where(false));
  out.Add("staging", kStagingBytes, MemoryPlacement::kHost);
  return out;
}

AdmissionPlan AdmissionPlan::ForGrowth(std::string category, int64_t bytes,
                                       MemoryPlacement placement) {
  AdmissionPlan out;
  out.Add(std::move(category), bytes, placement);
  return out;
}

AdmissionPlan AdmissionPlan::ForExport(const std::vector<UnitLayout>& units,
                                       int64_t shard_index, bool full,
                                       bool /*writes*/, int64_t /*state_kinds*/,
                                       bool device_memory) {
  // The writer streams: whatever this rank writes and however many state
  // kinds, one unit (FULL: gathered; SHARDED: this rank's shard) is in
  // host memory at a time.
  int64_t transient = 0;
  for (const UnitLayout& unit : units) {
    transient = std::max(
        transient,
        SatMul(full ? unit.padded_numel() : unit.shard(shard_index).stored(),
               4));
  }
  AdmissionPlan out;
  out.Add("export transfer buffer", transient, MemoryPlacement::kHost);
  if (full && device_memory) {
    out.Add("export device scratch", transient, MemoryPlacement::kDevice);
  }
  return out;
}

void AdmissionPlan::Add(std::string category, int64_t bytes,
                        MemoryPlacement placement) {
  items_.push_back(PlannedBytes{std::move(category), bytes, placement});
}

int64_t AdmissionPlan::BytesIn(MemoryPlacement placement) const {
  int64_t sum = 0;
  for (const PlannedBytes& item : items_) {
    if (item.placement == placement) sum = SatAdd(sum, item.bytes);
  }
  return sum;
}

int64_t AdmissionPlan::total_bytes() const {
  int64_t sum = 0;
  for (const PlannedBytes& item : items_) sum = SatAdd(sum, item.bytes);
  return sum;
}

std::string AdmissionPlan::Describe() const {
  std::vector<std::string> parts;
  for (const PlannedBytes& item : items_) {
    if (item.bytes == 0) continue;
    parts.push_back(absl::StrCat(
        item.category, " ", FormatBytes(item.bytes),
        item.placement == MemoryPlacement::kHost
            ? ""
            : absl::StrCat(" (", MemoryPlacementName(item.placement), ")")));
  }
  return absl::StrJoin(parts, ", ");
}

}  // namespace shardd::core
