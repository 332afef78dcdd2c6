#ifndef SHARDD_DAEMON_NODE_STATE_EXPORT_H_
#define SHARDD_DAEMON_NODE_STATE_EXPORT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/engine_admission.h"
#include "daemon/node/step_engine.h"
#include "daemon/state/safetensors_writer.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// Runs one Trainer.ExportState on this rank (trainer.proto): admission of
// its memory, the safetensors files' layout (names, metadata: the formats
// of trainer.proto, unchanged), the gathers of a FULL export and the
// streaming write (state::SafetensorsWriter), with progress reports.
//
// FULL streams unit by unit: each unit's parameters (then each optimizer
// state kind) are gathered and appended to the file at once, so rank 0
// holds one gathered unit of one kind at a time, never the model. A rank
// whose writing fails (disk full, deadline passed) or whose staging was
// refused still takes part in every gather (keeping nothing) and returns
// its error at the end, so that its peers finish instead of waiting for
// their collective timeout. A gather's failure ends the export at once
// (through on_gather_error). The file appears only when complete.
//
// Not thread-safe: one export at a time, and the caller serialises it
// against steps (NodeManager's op lock). Does not own the engine, the
// model or the admission, which must outlive it.
class StateExport {
 public:
  struct Options {
    // Timeout of each gather (the daemon's collective timeout: gathers
    // are matched across ranks, so they do not follow the caller's
    // deadline).
    absl::Duration gather_timeout = absl::Seconds(30);
    // Receives the progress reports (WatchEvents' ExportProgress); may be
    // null.
    std::function<void(const v1::ExportProgress&)> progress;
    // Turns a failed gather into what the export returns (NodeManager
    // abandons the epoch); null: the status unchanged.
    std::function<absl::Status(absl::Status)> on_gather_error;
    // True once the caller went away (the RPC was cancelled): the writing
    // stops as at the deadline (CANCELLED, no file); may be null.
    std::function<bool()> cancelled;
  };

  // Make it once the export's epoch is known (NodeManager: right after it
  // checked that the epoch is ready): the engine's communicators then are
  // the only ones its gathers use.
  StateExport(StepEngine& engine, const core::ModelConfig& model,
              EngineAdmission& admission, Options options);

  // The request's fields alone: INVALID_ARGUMENT naming path or layout.
  static absl::Status CheckRequest(const v1::ExportStateRequest& request);

  // The request checked against the engine (the step it names) and its
  // memory admitted: FAILED_PRECONDITION or INVALID_ARGUMENT, or the
  // refusal when this rank may not even take part in a FULL export's
  // gathers; else the admission Run goes on with (a refused one with
  // join_gathers set: this rank gathers, keeps nothing, returns the
  // refusal). Decided before a FULL export's ranks agree to start, so that
  // none stops after the others began gathering.
  absl::StatusOr<ExportAdmission> Admit(const v1::ExportStateRequest& request);

  // Exports at the engine's committed step. `deadline` (and
  // options.cancelled) bound the writing (see the class comment), not the
  // gathers. `admitted` is Admit's answer for this request.
  absl::StatusOr<v1::ExportStateResponse> Run(
      const v1::ExportStateRequest& request, MonoTime deadline,
      const ExportAdmission& admitted);
  // Admit, then Run.
  absl::StatusOr<v1::ExportStateResponse> Run(
      const v1::ExportStateRequest& request, MonoTime deadline);

 private:
  using Metadata = std::vector<std::pair<std::string, std::string>>;

  absl::StatusOr<v1::ExportStateResponse> RunSharded(
      const v1::ExportStateRequest& request, Metadata metadata,
      const std::vector<StepEngine::StateKind>& state_kinds, int64_t step,
      MonoTime deadline);
  absl::StatusOr<v1::ExportStateResponse> RunFull(
      const v1::ExportStateRequest& request, Metadata metadata,
      const std::vector<StepEngine::StateKind>& state_kinds, int64_t step,
      const ExportAdmission& admitted, MonoTime deadline);

  // RunSharded's pieces. The file's layout: per unit its master shard,
  // then the optimizer state sections asked for (`tensors`), the sections
  // that fill them (`unit_sections`, pointing into `sections`), and each
  // unit's shard range in `metadata`.
  void LayOutShard(
      const std::vector<StepEngine::StateSection>& sections,
      const std::vector<StepEngine::StateKind>& state_kinds, Metadata& metadata,
      std::vector<state::SafetensorsTensor>* tensors,
      std::vector<std::vector<const StepEngine::StateSection*>>* unit_sections);
  // Writes every unit's sections through one reused host buffer.
  absl::Status WriteShard(
      state::SafetensorsWriter& writer,
      const std::vector<std::vector<const StepEngine::StateSection*>>&
          unit_sections,
      const std::string& report_path, const std::string& path, int64_t total,
      MonoTime deadline);

  // RunFull's pieces: rank 0's file, and the first error of writing it.
  struct FullFile;
  FullFile OpenFullFile(const v1::ExportStateRequest& request,
                        const std::vector<state::SafetensorsTensor>& tensors,
                        const Metadata& metadata,
                        const ExportAdmission& admitted);
  // Appends one unit's tensors (of one kind) to the file.
  void AppendUnit(FullFile& file, MonoTime deadline, const float* unit,
                  const std::vector<core::TensorView>& views);
  // Appends unit `u`'s `kind` to the file: from the engine's buffer when
  // `sections` (this rank holds the whole unit in host memory), else
  // gathered into `gathered`. The gather's error, if it failed.
  absl::Status ExportUnitKind(
      FullFile& file, size_t u, StepEngine::StateKind kind,
      const std::vector<StepEngine::StateSection>* sections,
      std::vector<float>& gathered, MonoTime deadline);
  // What a failed gather of unit `u` ends the export with.
  absl::Status GatherFailed(FullFile& file, int u, absl::Status s);
  absl::StatusOr<v1::ExportStateResponse> FinishFull(FullFile& file,
                                                     int64_t step);

  // Reports progress: at most about every 1% of bytes_total, and always
  // the first and the last (done) report.
  void Report(const std::string& path, int64_t done, int64_t total,
              bool finished, const absl::Status& status);
  // DEADLINE_EXCEEDED or CANCELLED naming `path` when the writing must
  // stop; OK otherwise.
  absl::Status Interrupted(const std::string& path, MonoTime deadline) const;

  StepEngine& engine_;
  const core::ModelConfig& model_;
  EngineAdmission& admission_;
  const Options options_;
  // The engine's communicators when the export was made (in its epoch,
  // between steps): a gather never runs on a later epoch's, where the
  // peers are not in this export (ABORTED instead).
  const uint64_t generation_;
  int64_t last_reported_ = -1;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_STATE_EXPORT_H_
