#include "client/reference_trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::client {

absl::StatusOr<ReferenceTrainer> ReferenceTrainer::Create(
    const TeacherStudent* task, const ReferenceTrainerOptions& options,
    std::vector<std::vector<float>> initial_params) {
  if (task == nullptr) {
    return absl::InvalidArgumentError("reference_trainer.task must be set");
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reference_trainer.world_size must be >= 1, got ", options.world_size));
  }
  if (options.batch_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference_trainer.batch_per_rank must be >= 1, got ",
                     options.batch_per_rank));
  }
  absl::StatusOr<core::AdamW> adamw = core::AdamW::Create(options.adamw);
  if (!adamw.ok()) return adamw.status();
  absl::StatusOr<core::GradClipper> clipper =
      core::GradClipper::Create(options.max_grad_norm);
  if (!clipper.ok()) return clipper.status();
  const int64_t global_batch =
      static_cast<int64_t>(options.world_size) * options.batch_per_rank;
  absl::StatusOr<Mlp> mlp = Mlp::Create(task->options().widths, global_batch);
  if (!mlp.ok()) return mlp.status();

  const int layers = mlp->num_layers();
  if (static_cast<int>(initial_params.size()) != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("reference_trainer.initial_params has ",
                     initial_params.size(), " layers, the model ", layers));
  }
  for (int l = 0; l < layers; ++l) {
    if (static_cast<int64_t>(initial_params[l].size()) != mlp->ParamCount(l)) {
      return absl::InvalidArgumentError(
          absl::StrCat("reference_trainer.initial_params[", l, "] has ",
                       initial_params[l].size(), " elements, layer ", l,
                       " needs ", mlp->ParamCount(l)));
    }
  }

  ReferenceTrainer trainer(task, options, *std::move(mlp), *std::move(adamw),
                           *std::move(clipper));
  const Mlp& m = trainer.mlp_;
  trainer.params_ = std::move(initial_params);
  for (int l = 0; l < layers; ++l) {
    trainer.grads_.emplace_back(m.ParamCount(l), 0.0f);
    trainer.exp_avg_.emplace_back(m.ParamCount(l), 0.0f);
    trainer.exp_avg_sq_.emplace_back(m.ParamCount(l), 0.0f);
  }
  for (int64_t width : m.widths()) {
    trainer.acts_.emplace_back(global_batch * width, 0.0f);
    trainer.grad_acts_.emplace_back(global_batch * width, 0.0f);
  }
  return trainer;
}

absl::StatusOr<ReferenceStepResult> ReferenceTrainer::Step() {
  const int64_t t = step_ + 1;
  absl::StatusOr<TaskBatch> batch =
      task_->GlobalBatch(t, options_.world_size, options_.batch_per_rank);
  if (!batch.ok()) return batch.status();
  const int layers = mlp_.num_layers();
  acts_[0] = std::move(batch->inputs);

  for (int l = 0; l < layers; ++l) {
    if (absl::Status status = mlp_.ForwardLayer(l, params_[l], acts_[l],
                                                absl::MakeSpan(acts_[l + 1]));
        !status.ok()) {
      return status;
    }
  }
  absl::StatusOr<double> loss = Mlp::MseLoss(
      acts_[layers], batch->targets, absl::MakeSpan(grad_acts_[layers]));
  if (!loss.ok()) return loss.status();
  for (int l = layers - 1; l >= 0; --l) {
    // Layer 0's input gradient is not needed.
    const absl::Span<float> grad_input =
        l > 0 ? absl::MakeSpan(grad_acts_[l]) : absl::Span<float>();
    if (absl::Status status =
            mlp_.BackwardLayer(l, params_[l], grad_acts_[l + 1],
                               absl::MakeSpan(grads_[l]), grad_input);
        !status.ok()) {
      return status;
    }
  }

  std::vector<core::GradNormPartial> partials;
  for (int l = 0; l < layers; ++l) {
    absl::StatusOr<core::GradNormPartial> partial =
        core::GradClipper::ShardPartial(grads_[l].data(),
                                        static_cast<int64_t>(grads_[l].size()));
    if (!partial.ok()) return partial.status();
    partials.push_back(*partial);
  }
  absl::StatusOr<core::ClipResult> clip = clipper_.Finish(partials);
  if (!clip.ok()) return clip.status();

  for (int l = 0; l < layers; ++l) {
    if (absl::Status status =
            adamw_.Update(t, clip->scale, grads_[l].data(), params_[l].data(),
                          exp_avg_[l].data(), exp_avg_sq_[l].data(),
                          static_cast<int64_t>(params_[l].size()),
                          core::DType::kFloat32, nullptr);
        !status.ok()) {
      return status;
    }
  }
  step_ = t;
  ReferenceStepResult result;
  result.step = t;
  result.loss = *loss;
  result.grad_norm = clip->total_norm;
  result.grad_scale = clip->scale;
  return result;
}

}  // namespace shardd::client
