#include "daemon/node/state_export.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

// An optimizer state's name in exports, as PyTorch's optimizers name it.
const char* StateKindName(StepEngine::StateKind kind) {
  switch (kind) {
    case StepEngine::StateKind::kParameters:
      return "param";
    case StepEngine::StateKind::kExpAvg:
      return "exp_avg";
    case StepEngine::StateKind::kExpAvgSq:
      return "exp_avg_sq";
    case StepEngine::StateKind::kMomentum:
      return "momentum_buffer";
  }
  return "unknown";
}

// The payload bytes of `tensors` (the file's size without its header).
int64_t DataBytes(const std::vector<state::SafetensorsTensor>& tensors) {
  int64_t data = 0;
  for (const state::SafetensorsTensor& t : tensors) data += t.bytes;
  return data;
}

// A FULL export's tensors: per unit its tensors' parameters, then per state
// kind its tensors' state (the order of the data in the file).
std::vector<state::SafetensorsTensor> FullFileTensors(
    const EngineConfig& config, const core::ModelConfig& model,
    const std::vector<StepEngine::StateKind>& state_kinds) {
  std::vector<state::SafetensorsTensor> tensors;
  for (size_t u = 0; u < config.units.size(); ++u) {
    const std::string& unit = model.units[u].name;
    for (const core::TensorView& t : config.units[u].tensors()) {
      tensors.push_back({absl::StrCat(unit, ".", t.name), "F32", t.shape,
                         t.numel * static_cast<int64_t>(sizeof(float))});
    }
    for (StepEngine::StateKind kind : state_kinds) {
      for (const core::TensorView& t : config.units[u].tensors()) {
        tensors.push_back(
            {absl::StrCat(unit, ".", t.name, ".", StateKindName(kind)), "F32",
             t.shape, t.numel * static_cast<int64_t>(sizeof(float))});
      }
    }
  }
  return tensors;
}

int64_t HeaderAndDataBytes(
    const std::vector<state::SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  int64_t total = 8 + static_cast<int64_t>(
                          state::SafetensorsHeader(tensors, metadata).size());
  for (const state::SafetensorsTensor& t : tensors) total += t.bytes;
  return total;
}

v1::ExportedFile ToProto(const state::WrittenFile& file) {
  v1::ExportedFile out;
  out.set_path(file.path);
  out.set_bytes(file.bytes);
  out.set_crc32c(file.crc32c);
  return out;
}

}  // namespace

StateExport::StateExport(StepEngine& engine, const core::ModelConfig& model,
                         EngineAdmission& admission, Options options)
    : engine_(engine),
      model_(model),
      admission_(admission),
      options_(std::move(options)),
      generation_(engine.communicator_generation()) {}

absl::Status StateExport::CheckRequest(const v1::ExportStateRequest& request) {
  if (request.path().empty() || request.path()[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("path: must be absolute, got '", request.path(), "'"));
  }
  if (request.layout() != v1::EXPORT_LAYOUT_FULL &&
      request.layout() != v1::EXPORT_LAYOUT_SHARDED) {
    return absl::InvalidArgumentError("layout: FULL or SHARDED required");
  }
  return absl::OkStatus();
}

void StateExport::Report(const std::string& path, int64_t done, int64_t total,
                         bool finished, const absl::Status& status) {
  if (!options_.progress) return;
  const int64_t step = std::max<int64_t>(1, total / 100);
  if (!finished && last_reported_ >= 0 && done - last_reported_ < step) return;
  last_reported_ = done;
  v1::ExportProgress progress;
  progress.set_bytes_done(done);
  progress.set_bytes_total(total);
  progress.set_path(path);
  progress.set_done(finished);
  if (finished) progress.set_status(status.ToString());
  options_.progress(progress);
}

absl::Status StateExport::Interrupted(const std::string& path,
                                      MonoTime deadline) const {
  if (MonoNow() >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("ExportState: the deadline passed while writing ", path));
  }
  if (options_.cancelled && options_.cancelled()) {
    return absl::CancelledError(
        absl::StrCat("ExportState: the caller cancelled while writing ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExportAdmission> StateExport::Admit(
    const v1::ExportStateRequest& request) {
  if (absl::Status s = CheckRequest(request); !s.ok()) return s;
  const int64_t step = engine_.committed_step();
  if (request.has_step() && request.step() != step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: ", request.step(), " is not the committed step ", step));
  }
  const int64_t state_kinds =
      request.include_optimizer_state()
          ? static_cast<int64_t>(engine_.OptimizerStateKinds().size())
          : 0;
  ExportAdmission admitted = admission_.AdmitExport(
      engine_, request.layout() == v1::EXPORT_LAYOUT_FULL, state_kinds);
  if (!admitted.status.ok() && !admitted.join_gathers) return admitted.status;
  return admitted;
}

absl::StatusOr<v1::ExportStateResponse> StateExport::Run(
    const v1::ExportStateRequest& request, MonoTime deadline) {
  absl::StatusOr<ExportAdmission> admitted = Admit(request);
  if (!admitted.ok()) return admitted.status();
  return Run(request, deadline, *admitted);
}

absl::StatusOr<v1::ExportStateResponse> StateExport::Run(
    const v1::ExportStateRequest& request, MonoTime deadline,
    const ExportAdmission& admitted) {
  if (absl::Status s = CheckRequest(request); !s.ok()) return s;
  const EngineConfig& config = engine_.config();
  const int64_t step = engine_.committed_step();
  Metadata metadata = {
      {"format", "shardd"},
      {"step", absl::StrCat(step)},
      {"world_size", absl::StrCat(config.plan.world_size())},
      {"sharding_factor", absl::StrCat(config.plan.sharding_factor())}};
  // With include_optimizer_state: each unit's optimizer state next to its
  // parameters, named as PyTorch's optimizers name it.
  std::vector<StepEngine::StateKind> state_kinds;
  if (request.include_optimizer_state()) {
    state_kinds = engine_.OptimizerStateKinds();
    const char* optimizer =
        config.optimizer.kind == core::OptimizerKind::kAdamW ? "adamw"
        : config.optimizer.kind == core::OptimizerKind::kSgdMomentum
            ? "sgd_momentum"
            : "sgd";
    metadata.push_back({"optimizer", optimizer});
    metadata.push_back({"optimizer_step", absl::StrCat(step)});
    metadata.push_back(
        {"learning_rate", absl::StrCat(engine_.learning_rate())});
  }
  const bool full = request.layout() == v1::EXPORT_LAYOUT_FULL;
  last_reported_ = -1;
  absl::StatusOr<v1::ExportStateResponse> result =
      full ? RunFull(request, std::move(metadata), state_kinds, step, admitted,
                     deadline)
           : RunSharded(request, std::move(metadata), state_kinds, step,
                        deadline);
  return result;
}

absl::StatusOr<v1::ExportStateResponse> StateExport::RunSharded(
    const v1::ExportStateRequest& request, Metadata metadata,
    const std::vector<StepEngine::StateKind>& state_kinds, int64_t step,
    MonoTime deadline) {
  const int rank = engine_.config().rank;
  if (mkdir(request.path().c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot create ", request.path()));
  }
  metadata.push_back({"layout", "sharded"});
  metadata.push_back({"rank", absl::StrCat(rank)});
  // The file's layout first (header written before any data).
  const std::vector<StepEngine::StateSection> sections =
      engine_.StateSections();
  std::vector<state::SafetensorsTensor> tensors;
  std::vector<std::vector<const StepEngine::StateSection*>> unit_sections;
  LayOutShard(sections, state_kinds, metadata, &tensors, &unit_sections);
  const std::string path =
      absl::StrCat(request.path(), "/rank-", rank, ".safetensors");
  const int64_t total = HeaderAndDataBytes(tensors, metadata);
  auto finish = [&](absl::Status s) {
    Report(request.path(), s.ok() ? total : 0, total, true, s);
    return s;
  };
  absl::StatusOr<std::unique_ptr<state::SafetensorsWriter>> writer =
      state::SafetensorsWriter::Create(path, tensors, metadata,
                                       request.overwrite());
  if (!writer.ok()) return finish(writer.status());
  if (absl::Status s = WriteShard(**writer, unit_sections, request.path(), path,
                                  total, deadline);
      !s.ok()) {
    return finish(s);
  }
  absl::StatusOr<state::WrittenFile> file = (*writer)->Finish();
  if (!file.ok()) return finish(file.status());
  Report(request.path(), total, total, true, absl::OkStatus());
  v1::ExportStateResponse response;
  response.set_step(step);
  *response.add_files() = ToProto(*file);
  return response;
}

void StateExport::LayOutShard(
    const std::vector<StepEngine::StateSection>& sections,
    const std::vector<StepEngine::StateKind>& state_kinds, Metadata& metadata,
    std::vector<state::SafetensorsTensor>* tensors,
    std::vector<std::vector<const StepEngine::StateSection*>>* unit_sections) {
  const EngineConfig& config = engine_.config();
  const int f = config.plan.sharding_factor();
  unit_sections->resize(config.units.size());
  for (size_t u = 0; u < config.units.size(); ++u) {
    const core::ShardRange& range = config.units[u].shard(config.rank % f);
    const std::string& name = model_.units[u].name;
    metadata.push_back(
        {absl::StrCat(name, ".shard_offset"), absl::StrCat(range.offset)});
    metadata.push_back(
        {absl::StrCat(name, ".shard_numel"), absl::StrCat(range.numel)});
    metadata.push_back({absl::StrCat(name, ".unit_numel"),
                        absl::StrCat(config.units[u].numel())});
    const int64_t bytes = range.numel * static_cast<int64_t>(sizeof(float));
    // Its master shard (the parameters section) first, then its optimizer
    // state sections asked for, in StateSections' order.
    for (const StepEngine::StateSection& section : sections) {
      if (section.unit != static_cast<int>(u) ||
          section.kind != StepEngine::StateKind::kParameters) {
        continue;
      }
      tensors->push_back(
          {absl::StrCat(name, ".master"), "F32", {range.numel}, bytes});
      (*unit_sections)[u].push_back(&section);
    }
    for (const StepEngine::StateSection& section : sections) {
      if (section.unit != static_cast<int>(u) ||
          std::find(state_kinds.begin(), state_kinds.end(), section.kind) ==
              state_kinds.end()) {
        continue;
      }
      tensors->push_back({absl::StrCat(name, ".", StateKindName(section.kind)),
                          "F32",
                          {range.numel},
                          bytes});
      (*unit_sections)[u].push_back(&section);
    }
  }
}

absl::Status StateExport::WriteShard(
    state::SafetensorsWriter& writer,
    const std::vector<std::vector<const StepEngine::StateSection*>>&
        unit_sections,
    const std::string& report_path, const std::string& path, int64_t total,
    MonoTime deadline) {
  const EngineConfig& config = engine_.config();
  const int f = config.plan.sharding_factor();
  Report(report_path, writer.written_bytes(), total, false, absl::OkStatus());
  // Sections may be device memory: each goes through one host buffer,
  // reused, so one shard is in host memory at a time.
  std::vector<uint8_t> buffer;
  for (size_t u = 0; u < config.units.size(); ++u) {
    if (absl::Status s = Interrupted(path, deadline); !s.ok()) return s;
    const int64_t bytes = config.units[u].shard(config.rank % f).numel *
                          static_cast<int64_t>(sizeof(float));
    for (const StepEngine::StateSection* section : unit_sections[u]) {
      buffer.resize(bytes);
      if (absl::Status s =
              engine_.math().Download(buffer.data(), section->data, bytes);
          !s.ok()) {
        return s;
      }
      if (absl::Status s = writer.Append(buffer.data(), bytes); !s.ok()) {
        return s;
      }
    }
    Report(report_path, writer.written_bytes(), total, false, absl::OkStatus());
  }
  return absl::OkStatus();
}

// A FULL export's file as this rank writes it (only rank 0 has a writer)
// and how far the export got.
struct StateExport::FullFile {
  std::string path;
  int64_t done = 0;  // The header's bytes and every unit's gathered so far.
  int64_t total = 0;
  // The first error of this rank's writing; the gathers go on without it.
  absl::Status status;
  // Dropped (removing the partial file) on the first error.
  std::unique_ptr<state::SafetensorsWriter> writer;
};

absl::StatusOr<v1::ExportStateResponse> StateExport::RunFull(
    const v1::ExportStateRequest& request, Metadata metadata,
    const std::vector<StepEngine::StateKind>& state_kinds, int64_t step,
    const ExportAdmission& admitted, MonoTime deadline) {
  // Every rank gathers every unit's fp32 master shards in its shard group
  // (whatever the units' parameter dtype: the masters are the state);
  // rank 0 writes.
  const EngineConfig& config = engine_.config();
  metadata.push_back({"layout", "full"});
  const std::vector<state::SafetensorsTensor> tensors =
      FullFileTensors(config, model_, state_kinds);
  FullFile file = OpenFullFile(request, tensors, metadata, admitted);
  Report(file.path, file.done, file.total, false, absl::OkStatus());
  // F = 1 in host memory: this rank holds every whole unit.
  const bool local =
      config.plan.sharding_factor() == 1 && !engine_.memory_on_device();
  const std::vector<StepEngine::StateSection> sections =
      local ? engine_.StateSections() : std::vector<StepEngine::StateSection>();
  std::vector<StepEngine::StateKind> kinds = {
      StepEngine::StateKind::kParameters};
  kinds.insert(kinds.end(), state_kinds.begin(), state_kinds.end());
  std::vector<float> gathered;
  for (size_t u = 0; u < config.units.size(); ++u) {
    for (StepEngine::StateKind kind : kinds) {
      if (absl::Status s = ExportUnitKind(
              file, u, kind, local ? &sections : nullptr, gathered, deadline);
          !s.ok()) {
        return GatherFailed(file, u, s);
      }
      for (const core::TensorView& t : config.units[u].tensors()) {
        file.done += t.numel * static_cast<int64_t>(sizeof(float));
      }
    }
    Report(file.path, file.done, file.total, false, absl::OkStatus());
    SHARDD_FAILPOINT("export.mid");
  }
  return FinishFull(file, step);
}

StateExport::FullFile StateExport::OpenFullFile(
    const v1::ExportStateRequest& request,
    const std::vector<state::SafetensorsTensor>& tensors,
    const Metadata& metadata, const ExportAdmission& admitted) {
  FullFile file;
  file.path = request.path();
  file.total = HeaderAndDataBytes(tensors, metadata);
  file.done = file.total - DataBytes(tensors);
  file.status = admitted.status;
  if (engine_.config().rank == 0 && file.status.ok()) {
    absl::StatusOr<std::unique_ptr<state::SafetensorsWriter>> created =
        state::SafetensorsWriter::Create(file.path, tensors, metadata,
                                         request.overwrite());
    if (created.ok()) {
      file.writer = std::move(*created);
    } else {
      file.status = created.status();
    }
  }
  return file;
}

// On the first error the writer is dropped (removing the partial file) and
// the gathers go on.
void StateExport::AppendUnit(FullFile& file, MonoTime deadline,
                             const float* unit,
                             const std::vector<core::TensorView>& views) {
  for (const core::TensorView& t : views) {
    if (file.writer == nullptr) return;
    absl::Status s = Interrupted(file.path, deadline);
    if (s.ok()) {
      s = file.writer->Append(unit + t.offset,
                              t.numel * static_cast<int64_t>(sizeof(float)));
    }
    if (!s.ok()) {
      file.status = s;
      file.writer.reset();
    }
  }
}

absl::Status StateExport::ExportUnitKind(
    FullFile& file, size_t u, StepEngine::StateKind kind,
    const std::vector<StepEngine::StateSection>* sections,
    std::vector<float>& gathered, MonoTime deadline) {
  const std::vector<core::TensorView>& views =
      engine_.config().units[u].tensors();
  if (sections != nullptr) {
    // The unit is written from the engine's buffer, with no gather and no
    // copy.
    for (const StepEngine::StateSection& section : *sections) {
      if (section.unit == static_cast<int>(u) && section.kind == kind) {
        AppendUnit(file, deadline, reinterpret_cast<const float*>(section.data),
                   views);
      }
    }
    return absl::OkStatus();
  }
  // One gathered unit (of one kind) in memory at a time, in one buffer
  // reused for every unit.
  if (absl::Status s = engine_.GatherStateInto(u, kind, options_.gather_timeout,
                                               gathered, generation_);
      !s.ok()) {
    return s;
  }
  AppendUnit(file, deadline, gathered.data(), views);
  return absl::OkStatus();
}

absl::Status StateExport::GatherFailed(FullFile& file, int u, absl::Status s) {
  if (u == 0) {
    // Most likely some rank did not call ExportState at all.
    s = absl::Status(
        s.code(),
        absl::StrCat(
            "a FULL export is collective: every rank's daemon must call "
            "ExportState at the same committed step (shardctl export "
            "--sockets=<every rank's socket>, or shardctl export on every "
            "node at once); the gather of the first unit failed: ",
            s.message()));
  }
  Report(file.path, file.done, file.total, true, s);
  return options_.on_gather_error ? options_.on_gather_error(s) : s;
}

absl::StatusOr<v1::ExportStateResponse> StateExport::FinishFull(FullFile& file,
                                                                int64_t step) {
  v1::ExportStateResponse response;
  response.set_step(step);
  if (file.writer != nullptr) {
    absl::StatusOr<state::WrittenFile> written = file.writer->Finish();
    if (written.ok()) {
      *response.add_files() = ToProto(*written);
    } else {
      file.status = written.status();
    }
  }
  Report(file.path, file.done, file.total, true, file.status);
  if (!file.status.ok()) return file.status;
  return response;
}

}  // namespace shardd::node
