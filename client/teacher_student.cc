#include "client/teacher_student.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/counter_normal.h"
#include "daemon/core/checked_math.h"

namespace shardd::client {
namespace {

constexpr double kTeacherBiasStd = 0.1;

// Fills a layer's flat [weight, bias] from streams {seed, stream, layer, 0}
// (weight) and {seed, stream, layer, 1} (bias).
std::vector<float> DrawLayer(const Mlp& model, int layer, uint64_t seed,
                             uint64_t stream, double weight_std,
                             double bias_std) {
  std::vector<float> params(model.ParamCount(layer));
  const absl::Span<float> all(params);
  const absl::Span<float> weight =
      all.subspan(Mlp::WeightOffset(), model.BiasOffset(layer));
  const absl::Span<float> bias = all.subspan(model.BiasOffset(layer));
  CounterNormal({seed, stream, static_cast<uint64_t>(layer), 0})
      .Fill(0, weight_std, weight);
  if (bias_std != 0.0) {
    CounterNormal({seed, stream, static_cast<uint64_t>(layer), 1})
        .Fill(0, bias_std, bias);
  }
  return params;
}

}  // namespace

absl::StatusOr<TeacherStudent> TeacherStudent::Create(
    const TeacherStudentOptions& options) {
  absl::StatusOr<Mlp> model = Mlp::Create(options.widths);
  if (!model.ok()) return model.status();
  TeacherStudent task(options, *std::move(model));
  const Mlp& m = task.model_;
  for (int l = 0; l < m.num_layers(); ++l) {
    const double gain = m.has_relu(l) ? 2.0 : 1.0;
    const double weight_std =
        std::sqrt(gain / static_cast<double>(m.in_features(l)));
    task.teacher_params_.push_back(DrawLayer(m, l, options.seed, kTeacherStream,
                                             weight_std, kTeacherBiasStd));
  }
  return task;
}

double TeacherStudent::StudentWeightInitStd(int64_t in_features) {
  return 1.0 / std::sqrt(static_cast<double>(in_features));
}

std::vector<std::vector<float>> TeacherStudent::StudentInitialParams(
    uint64_t init_seed) const {
  std::vector<std::vector<float>> params;
  for (int l = 0; l < model_.num_layers(); ++l) {
    params.push_back(DrawLayer(model_, l, init_seed, kStudentStream,
                               StudentWeightInitStd(model_.in_features(l)),
                               kStudentBiasInitStd));
  }
  return params;
}

absl::StatusOr<TaskBatch> TeacherStudent::Batch(int64_t step, int rank,
                                                int world_size,
                                                int64_t batch_per_rank) const {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("teacher_student rank ", rank, " must be in [0, ",
                     world_size, ") with world_size >= 1"));
  }
  if (batch_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "teacher_student.batch_per_rank must be >= 1, got ", batch_per_rank));
  }
  const int64_t in = model_.widths().front();
  const int64_t out = model_.widths().back();
  // The last input element's stream index, (world_size · B) · in, must fit.
  const std::optional<int64_t> samples_needed =
      core::CheckedMul(world_size, batch_per_rank);
  if (!samples_needed ||
      !core::CheckedMul(*samples_needed, std::max(in, out))) {
    return absl::InvalidArgumentError(
        absl::StrCat("teacher_student batch of ", world_size, " x ",
                     batch_per_rank, " samples is too large"));
  }
  TaskBatch batch;
  batch.samples = batch_per_rank;
  batch.inputs.resize(batch_per_rank * in);
  batch.targets.resize(batch_per_rank * out);
  const uint64_t first_sample = static_cast<uint64_t>(rank) * batch_per_rank;
  CounterNormal({options_.seed, kInputStream, static_cast<uint64_t>(step)})
      .Fill(first_sample * in, 1.0, absl::MakeSpan(batch.inputs));

  // The teacher's forward, ping-ponging between two activation buffers.
  std::vector<float> current = batch.inputs;
  std::vector<float> next;
  for (int l = 0; l < model_.num_layers(); ++l) {
    next.resize(batch_per_rank * model_.out_features(l));
    if (absl::Status status = model_.ForwardLayerWithoutSaving(
            l, teacher_params_[l], current, absl::MakeSpan(next));
        !status.ok()) {
      return status;
    }
    std::swap(current, next);
  }
  batch.targets = std::move(current);
  return batch;
}

absl::StatusOr<TaskBatch> TeacherStudent::GlobalBatch(
    int64_t step, int world_size, int64_t batch_per_rank) const {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "teacher_student.world_size must be >= 1, got ", world_size));
  }
  TaskBatch global;
  for (int rank = 0; rank < world_size; ++rank) {
    absl::StatusOr<TaskBatch> part =
        Batch(step, rank, world_size, batch_per_rank);
    if (!part.ok()) return part.status();
    global.samples += part->samples;
    global.inputs.insert(global.inputs.end(), part->inputs.begin(),
                         part->inputs.end());
    global.targets.insert(global.targets.end(), part->targets.begin(),
                          part->targets.end());
  }
  return global;
}

}  // namespace shardd::client
