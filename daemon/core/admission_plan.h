#ifndef SHARDD_DAEMON_CORE_ADMISSION_PLAN_H_
#define SHARDD_DAEMON_CORE_ADMISSION_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"

namespace shardd::core {

// Where a planned buffer lives, which decides the limits it counts against
// (admission_decision.h).
enum class MemoryPlacement {
  // Private host memory (anonymous mappings, the heap).
  kHost,
  // Host memory in a shared-memory segment of the shm directory: host
  // memory and free space of the shm directory's file system.
  kSharedHost,
  // GPU memory.
  kDevice,
};

// "host", "shm", "device".
const char* MemoryPlacementName(MemoryPlacement placement);

// Bounded host staging a daemon keeps besides its engine's buffers: the
// device upload buffer of initialisation (16 MiB), recovery pieces (at most
// 8 MiB each, recovery::kMaxPieceBytesCap), checkpoint and CRC bounce
// buffers (4 MiB each). Counted once in every engine plan.
inline constexpr int64_t kStagingBytes = int64_t{32} << 20;

// One category of a plan: `bytes` bytes in `placement`.
struct PlannedBytes {
  std::string category;
  int64_t bytes = 0;
  MemoryPlacement placement = MemoryPlacement::kHost;
};

// What an admission decides on: the bytes a request would make the daemon
// hold, by category and placement. Built by the factories below from the
// same inputs the allocations use; immutable afterwards.
//
// A value type: thread-compatible, owns its data.
class AdmissionPlan {
 public:
  // Everything a StepEngine for `rank` allocates (MemoryPlan::ForRank's
  // categories, placed where the engine puts them: with host memory the
  // buffers a trainer maps (gathered slots, the gradient slot and with F = 1
  // the shard Gather hands out) are shared-memory segments, the rest
  // private; with device memory all of them are on the device), plus the
  // communicators' scratch (CommunicatorScratchBytes; on the device with
  // device memory) and kStagingBytes of host staging. Errors as
  // MemoryPlan::ForRank's.
  static absl::StatusOr<AdmissionPlan> ForEngine(
      const std::vector<UnitLayout>& units, const ShardPlan& plan, int64_t rank,
      const MemoryOptions& options, bool device_memory);

  // A single later allocation (an accumulation buffer, export staging).
  static AdmissionPlan ForGrowth(std::string category, int64_t bytes,
                                 MemoryPlacement placement);

  // The host memory ExportState needs for this rank. The safetensors
  // writer streams (header first, then each unit as soon as it is in host
  // memory), so it is one unit at a time whatever `writes` (false for FULL
  // ranks other than 0) and `state_kinds`: SHARDED one shard copied out
  // (its stored fp32 elements), FULL one unit gathered (its padded fp32
  // elements, and with device memory as much device scratch).
  static AdmissionPlan ForExport(const std::vector<UnitLayout>& units,
                                 int64_t shard_index, bool full, bool writes,
                                 int64_t state_kinds, bool device_memory);

  // Appends a category (bytes >= 0).
  void Add(std::string category, int64_t bytes, MemoryPlacement placement);

  const std::vector<PlannedBytes>& items() const { return items_; }
  // Σ bytes of the items in `placement`.
  int64_t BytesIn(MemoryPlacement placement) const;
  int64_t total_bytes() const;
  // "parameter shards 64.00 GiB (shm), gradient shards 64.00 GiB, ...":
  // every category that is not empty, with its placement when it is not
  // private host memory.
  std::string Describe() const;

  // The engine's share of the plan as MemoryPlan computed it (ForEngine
  // only; zero otherwise).
  const MemoryBreakdown& engine_breakdown() const { return breakdown_; }

 private:
  std::vector<PlannedBytes> items_;
  MemoryBreakdown breakdown_;
};

// Scratch the epoch's communicators keep for a step of this rank's engine
// (grow-only in both backends, so the largest operation's): the shard
// group's reduce-scatter of the gradient slot keeps (F - 1) receive blocks
// of the largest shard in fp32, plus fp32 copies of the input and of the
// output when the reduce dtype is 16-bit; the replica group's all-reduce of
// each gradient shard keeps (W/F - 1) blocks of 1/(W/F) of this rank's
// largest shard. 0 when W = 1.
int64_t CommunicatorScratchBytes(const std::vector<UnitLayout>& units,
                                 const ShardPlan& plan, int64_t shard_index,
                                 DType reduce_dtype);

// "0 B", "512 B", "12.50 KiB", "1.00 MiB", "64.00 GiB".
std::string FormatBytes(int64_t bytes);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_ADMISSION_PLAN_H_
