#ifndef SHARDD_DAEMON_NODE_ENGINE_ADMISSION_H_
#define SHARDD_DAEMON_NODE_ENGINE_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/admission_decision.h"
#include "daemon/core/admission_plan.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/model_config.h"
#include "daemon/memory/memory_limit_reader.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/step_engine.h"

namespace shardd::node {

struct EngineAdmissionOptions {
  // Reads what the daemon may still use, at every check
  // (MemoryLimitReader::Read in shardd). Null: no limits (everything is
  // admitted).
  std::function<memory::LimitReading()> read_limits;
  // --memory_limit_fraction: a measured limit counts only this share of
  // what is available, in (0, 1].
  double fraction = 1.0;
  // The engine's buffers are a GPU's (the backend's memory).
  bool device_memory = false;
  // The device scratch the backend's communicators reserve with an engine
  // (EngineBackend::comm_scratch): admitted with the engine's buffers.
  core::CommScratch comm_scratch = core::CommScratch::kNone;
  // Told about decisions (refusals, the binding limits). Optional; not
  // owned, must outlive this object.
  metrics::NodeObserver* observer = nullptr;
  // Print each engine admission and every refusal on stderr.
  bool log = true;
};

// One check of a model's engine against the limits.
struct AdmissionCheck {
  int world_size = 0;
  int sharding_factor = 0;
  int rank = 0;
  core::AdmissionPlan plan;
  memory::LimitReading reading;
  double fraction = 1.0;
  // Per scope: the plan's bytes against the binding limit.
  std::vector<core::ScopeCheck> checks;
  // OK, or DecideAdmission's RESOURCE_EXHAUSTED.
  absl::Status status;
};

// How ExportState may go on (AdmitExport).
struct ExportAdmission {
  // OK, or RESOURCE_EXHAUSTED naming the export's staging and the limit.
  absl::Status status;
  // Refused, but this rank may still take part in a FULL export's gathers
  // (one unit at a time, admitted) keeping nothing, so that its peers do
  // not wait for it until the collective timeout; the status is returned
  // once they are done.
  bool join_gathers = false;
};

// Memory admission of one daemon: before anything is allocated, what a
// request would make the daemon hold is planned (core::AdmissionPlan),
// compared with what the daemon may use now (the injected limit reader)
// and refused with RESOURCE_EXHAUSTED naming the plan's breakdown, the
// limit and its source (core::DecideAdmission) when it does not fit:
//  * an engine for a model (RegisterModel, before the ranks exchange their
//    models; again just before a replacement's, a restored checkpoint's or
//    a registration's engine is allocated);
//  * a copy of a trainer's shared-memory init values into the daemon;
//  * growth after registration: gradient accumulation buffers (a
//    StepEngine's GrowthAdmission), ExportState's staging and an
//    asynchronous checkpoint's staging.
// Measured limits already see what the daemon holds; the operator's
// explicit limit (kTotal) is for everything planned, so growth is checked
// against it less the engine's held bytes and the scratch and staging its
// admitted plan counted.
//
// Thread-safe (checks run concurrently; each reads the limits afresh).
// Borrows the observer.
class EngineAdmission {
 public:
  explicit EngineAdmission(EngineAdmissionOptions options);

  // Admits everything (no limits, no log): for managers given none.
  static std::shared_ptr<EngineAdmission> Unlimited();
  // shardd's: limits read by a MemoryLimitReader with `limits` at every
  // check, logged on stderr.
  static std::shared_ptr<EngineAdmission> WithReader(
      memory::MemoryLimitOptions limits, double fraction, bool device_memory,
      metrics::NodeObserver* observer,
      core::CommScratch comm_scratch = core::CommScratch::kNone);

  // Every limit as it reads now (core::DescribeLimits), for the log.
  std::string DescribeLimits() const;

  // The plan of an engine for `model` on `rank` of `world` ranks and its
  // decision (in `status`), without logging or counting. Errors:
  // INVALID_ARGUMENT for a model that cannot be planned for W (field paths
  // as core::Validate's, "model." in front) or a rank outside [0, W).
  absl::StatusOr<AdmissionCheck> CheckModel(const core::ModelConfig& model,
                                            int world, int rank) const;

  // CheckModel's decision, with `what` ("RegisterModel") naming the request
  // in the refusal; logged and counted.
  absl::Status AdmitModel(absl::string_view what,
                          const core::ModelConfig& model, int world, int rank);

  // A gradient accumulation buffer of `bytes` in `placement` while the
  // daemon holds `held_bytes` (its engine's buffers).
  absl::Status AdmitAccumulation(absl::string_view what, int64_t bytes,
                                 core::MemoryPlacement placement,
                                 int64_t held_bytes);

  // An asynchronous checkpoint's host staging of `bytes` (the shard's
  // checkpointed sections) while the daemon's engine holds `held_bytes`.
  absl::Status AdmitCheckpointStaging(int64_t bytes, int64_t held_bytes);
  // The asynchronous checkpoint staging held now: counted as held by every
  // later decision against an explicit limit.
  void NoteCheckpointStagingHeld(int64_t bytes);

  // The window of kSharedMemory (or kCudaIpc) init values RegisterModel
  // maps (or stages) at a time (at most SharedMemoryInitReader::kWindowBytes,
  // equal to DeviceInitReader::kWindowBytes), before it reads them.
  absl::Status AdmitInitCopy(const core::ModelConfig& model);

  // ExportState's staging for `engine` (core::AdmissionPlan::ForExport):
  // FULL when `full`, with `state_kinds` optimizer states.
  ExportAdmission AdmitExport(const StepEngine& engine, bool full,
                              int64_t state_kinds);

  // For StepEngine::SetGrowthAdmission: accumulation buffers (in device
  // memory with a device backend). This object must outlive the engine.
  StepEngine::GrowthAdmission ForEngineGrowth();

  // Requests refused so far.
  int64_t refusals() const { return refusals_.load(); }
  double fraction() const { return options_.fraction; }

 private:
  memory::LimitReading ReadLimits() const;
  // Decides `plan` with the explicit limit reduced by `held_bytes`.
  absl::Status Decide(absl::string_view what, const core::AdmissionPlan& plan,
                      int64_t held_bytes, bool log_admitted);
  // Tells the observer; counts and logs a refusal.
  void Note(absl::string_view kind, const absl::Status& status);

  const EngineAdmissionOptions options_;
  std::atomic<int64_t> refusals_{0};
  // What the last admitted engine plan counted besides the engine's own
  // buffers (communicator scratch, staging): growth is checked against the
  // explicit limit less these and the held bytes.
  std::atomic<int64_t> beside_engine_bytes_{0};
  std::atomic<int64_t> checkpoint_staging_bytes_{0};
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_ADMISSION_H_
