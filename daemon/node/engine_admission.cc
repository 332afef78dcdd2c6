#include "daemon/node/engine_admission.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/checked_math.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"
#include "daemon/node/device_init_reader.h"
#include "daemon/node/shared_memory_init_reader.h"

namespace shardd::node {
namespace {

namespace labels = metrics::node_labels;

const char* ScopeLabel(core::LimitScope scope) {
  switch (scope) {
    case core::LimitScope::kHost:
      return labels::kLimitHost;
    case core::LimitScope::kShm:
      return labels::kLimitShm;
    case core::LimitScope::kDevice:
      return labels::kLimitDevice;
    case core::LimitScope::kTotal:
      return labels::kLimitPlanned;
  }
  return "other";
}

// "host memory 1.00 GiB of 20.10 GiB usable (SOURCE ...); ..."
std::string Summary(const std::vector<core::ScopeCheck>& checks) {
  std::vector<std::string> parts;
  for (const core::ScopeCheck& check : checks) {
    parts.push_back(absl::StrCat(core::LimitScopeName(check.scope), " ",
                                 core::FormatBytes(check.needed_bytes), " of ",
                                 core::FormatBytes(check.usable_bytes),
                                 " usable (", check.limited_by, ")"));
  }
  if (parts.empty()) return "no limit could be read";
  return absl::StrJoin(parts, "; ");
}

}  // namespace

EngineAdmission::EngineAdmission(EngineAdmissionOptions options)
    : options_(std::move(options)) {}

std::shared_ptr<EngineAdmission> EngineAdmission::Unlimited() {
  EngineAdmissionOptions options;
  options.log = false;
  return std::make_shared<EngineAdmission>(std::move(options));
}

std::shared_ptr<EngineAdmission> EngineAdmission::WithReader(
    memory::MemoryLimitOptions limits, double fraction, bool device_memory,
    metrics::NodeObserver* observer, core::CommScratch comm_scratch) {
  auto reader = std::make_shared<memory::MemoryLimitReader>(std::move(limits));
  EngineAdmissionOptions options;
  options.read_limits = [reader] { return reader->Read(); };
  options.fraction = fraction;
  options.device_memory = device_memory;
  options.comm_scratch = comm_scratch;
  options.observer = observer;
  return std::make_shared<EngineAdmission>(std::move(options));
}

std::string EngineAdmission::DescribeLimits() const {
  return core::DescribeLimits(ReadLimits().limits, options_.fraction);
}

memory::LimitReading EngineAdmission::ReadLimits() const {
  if (!options_.read_limits) return {};
  memory::LimitReading reading = options_.read_limits();
  if (options_.log) {
    for (const std::string& problem : reading.unreadable) {
      std::fprintf(stderr, "shardd: memory limit unreadable: %s\n",
                   problem.c_str());
    }
  }
  return reading;
}

absl::StatusOr<AdmissionCheck> EngineAdmission::CheckModel(
    const core::ModelConfig& model, int world, int rank) const {
  if (absl::Status s = core::Validate(model, world); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model.", s.message()));
  }
  absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
      world, model.config.strategy, model.config.sharding_factor);
  if (!plan.ok()) return plan.status();
  if (rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank: ", rank, " is outside [0, ", world, ")"));
  }
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, plan->sharding_factor());
  if (!layouts.ok()) return layouts.status();
  core::MemoryOptions memory = core::ToMemoryOptions(model);
  memory.comm_scratch = options_.comm_scratch;
  absl::StatusOr<core::AdmissionPlan> engine = core::AdmissionPlan::ForEngine(
      *layouts, *plan, rank, memory, options_.device_memory);
  if (!engine.ok()) return engine.status();
  AdmissionCheck check;
  check.world_size = world;
  check.sharding_factor = static_cast<int>(plan->sharding_factor());
  check.rank = rank;
  check.plan = *std::move(engine);
  check.reading = ReadLimits();
  check.fraction = options_.fraction;
  check.checks =
      core::CheckScopes(check.plan, check.reading.limits, options_.fraction);
  check.status = core::DecideAdmission(
      absl::StrCat("rank ", rank, " of W = ", world,
                   ", F = ", plan->sharding_factor()),
      check.plan, check.reading.limits, options_.fraction);
  return check;
}

absl::Status EngineAdmission::AdmitModel(absl::string_view what,
                                         const core::ModelConfig& model,
                                         int world, int rank) {
  absl::StatusOr<AdmissionCheck> check = CheckModel(model, world, rank);
  if (!check.ok()) return check.status();
  const char* label = what == "RegisterModel" ? labels::kAdmitRegisterModel
                                              : labels::kAdmitEngine;
  if (options_.observer != nullptr) {
    for (const core::ScopeCheck& scope : check->checks) {
      options_.observer->MemoryLimit(ScopeLabel(scope.scope),
                                     scope.usable_bytes);
    }
  }
  if (!check->status.ok()) {
    const absl::Status refusal = absl::ResourceExhaustedError(
        absl::StrCat(what, " for ", check->status.message()));
    Note(label, refusal);
    return refusal;
  }
  Note(label, absl::OkStatus());
  beside_engine_bytes_.store(check->plan.total_bytes() -
                             check->plan.engine_breakdown().total_bytes);
  if (options_.log) {
    std::fprintf(stderr,
                 "shardd: %s admitted (rank %d of W = %d, F = %d): %s\n",
                 std::string(what).c_str(), check->rank, check->world_size,
                 check->sharding_factor, Summary(check->checks).c_str());
  }
  return absl::OkStatus();
}

absl::Status EngineAdmission::Decide(absl::string_view what,
                                     const core::AdmissionPlan& plan,
                                     int64_t held_bytes, bool log_admitted) {
  memory::LimitReading reading = ReadLimits();
  // Besides the engine's buffers, its plan counted scratch and staging;
  // an asynchronous checkpoint's staging is held beside them.
  if (held_bytes > 0) held_bytes += beside_engine_bytes_.load();
  held_bytes += checkpoint_staging_bytes_.load();
  for (core::MemoryLimit& limit : reading.limits) {
    if (limit.scope != core::LimitScope::kTotal || held_bytes <= 0) continue;
    limit.available_bytes =
        std::max<int64_t>(limit.available_bytes - held_bytes, 0);
    absl::StrAppend(&limit.source, ", less ", core::FormatBytes(held_bytes),
                    " held");
  }
  const absl::Status status =
      core::DecideAdmission(what, plan, reading.limits, options_.fraction);
  if (status.ok() && log_admitted && options_.log) {
    std::fprintf(
        stderr, "shardd: %s admitted: %s\n", std::string(what).c_str(),
        Summary(core::CheckScopes(plan, reading.limits, options_.fraction))
            .c_str());
  }
  return status;
}

absl::Status EngineAdmission::AdmitAccumulation(absl::string_view what,
                                                int64_t bytes,
                                                core::MemoryPlacement placement,
                                                int64_t held_bytes) {
  const absl::Status status = Decide(
      what, core::AdmissionPlan::ForGrowth(std::string(what), bytes, placement),
      held_bytes, /*log_admitted=*/false);
  Note(labels::kAdmitAccumulation, status);
  return status;
}

absl::Status EngineAdmission::AdmitCheckpointStaging(int64_t bytes,
                                                     int64_t held_bytes) {
  const absl::Status status =
      Decide("an asynchronous checkpoint's staging",
             core::AdmissionPlan::ForGrowth("checkpoint staging", bytes,
                                            core::MemoryPlacement::kHost),
             held_bytes, /*log_admitted=*/true);
  Note(labels::kAdmitCheckpointStaging, status);
  return status;
}

void EngineAdmission::NoteCheckpointStagingHeld(int64_t bytes) {
  checkpoint_staging_bytes_.store(bytes);
}

absl::Status EngineAdmission::AdmitInitCopy(const core::ModelConfig& model) {
  int64_t bytes = 0;
  for (const core::UnitConfig& unit : model.units) {
    for (const core::TensorConfig& tensor : unit.tensors) {
      // A device buffer is checksummed through host staging of the same
      // bound (DeviceInitReader::kWindowBytes).
      int64_t length = 0;
      if (tensor.init.kind == core::InitKind::kSharedMemory) {
        length = tensor.init.shared_memory.byte_length;
      } else if (tensor.init.kind == core::InitKind::kCudaIpc) {
        length = tensor.init.cuda_ipc.byte_length;
      }
      if (length > 0) {
        bytes = core::CheckedAdd(bytes, length)
                    .value_or(std::numeric_limits<int64_t>::max());
      }
    }
  }
  if (bytes == 0) return absl::OkStatus();
  // The values are never copied whole: one window of the trainer's file is
  // mapped (or of its device buffer staged) at a time (issue #18).
  static_assert(SharedMemoryInitReader::kWindowBytes ==
                DeviceInitReader::kWindowBytes);
  bytes = std::min(bytes, SharedMemoryInitReader::kWindowBytes);
  const absl::Status status = Decide(
      "RegisterModel (init values read from shared memory or a "
      "trainer's device buffer)",
      core::AdmissionPlan::ForGrowth("init values", bytes,
                                     core::MemoryPlacement::kHost),
      /*held_bytes=*/0, /*log_admitted=*/false);
  Note(labels::kAdmitInitValues, status);
  return status;
}

ExportAdmission EngineAdmission::AdmitExport(const StepEngine& engine,
                                             bool full, int64_t state_kinds) {
  const EngineConfig& config = engine.config();
  const int64_t f = config.plan.sharding_factor();
  const bool writes = !full || config.rank == 0;
  const core::AdmissionPlan plan = core::AdmissionPlan::ForExport(
      config.units, config.rank % f, full, writes, state_kinds,
      engine.memory_on_device());
  const int64_t held = engine.held_bytes();
  ExportAdmission out;
  out.status = Decide("ExportState", plan, held, /*log_admitted=*/true);
  Note(labels::kAdmitExport, out.status);
  if (out.status.ok()) return out;
  if (full) {
    // Without its staging (nothing kept), can it still take part?
    const core::AdmissionPlan gathers = core::AdmissionPlan::ForExport(
        config.units, config.rank % f, full, /*writes=*/false, 0,
        engine.memory_on_device());
    out.join_gathers = Decide("ExportState gathers", gathers, held, false).ok();
  }
  return out;
}

StepEngine::GrowthAdmission EngineAdmission::ForEngineGrowth() {
  const core::MemoryPlacement placement = options_.device_memory
                                              ? core::MemoryPlacement::kDevice
                                              : core::MemoryPlacement::kHost;
  return [this, placement](absl::string_view what, int64_t bytes,
                           int64_t held_bytes) {
    return AdmitAccumulation(
        absl::StrCat("ReduceGrad (accumulation buffer ", what, ")"), bytes,
        placement, held_bytes);
  };
}

void EngineAdmission::Note(absl::string_view kind, const absl::Status& status) {
  if (options_.observer != nullptr) {
    options_.observer->MemoryAdmission(kind, status.ok());
  }
  if (status.ok()) return;
  refusals_.fetch_add(1);
  if (options_.log) {
    std::fprintf(stderr, "shardd: refused: %s\n", status.ToString().c_str());
  }
}

}  // namespace shardd::node
