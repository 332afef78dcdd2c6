#ifndef SHARDD_CLIENT_REFERENCE_TRAINER_H_
#define SHARDD_CLIENT_REFERENCE_TRAINER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/mlp.h"
#include "client/teacher_student.h"
#include "daemon/core/adamw.h"
#include "daemon/core/grad_clip.h"

namespace shardd::client {

struct ReferenceTrainerOptions {
  int world_size = 1;  // >= 1: ranks whose batches form the global one.
  int64_t batch_per_rank = 64;  // >= 1.
  core::AdamWOptions adamw;
  double max_grad_norm = 0.0;  // Global 2-norm clip; <= 0: none.
};

// What one step did.
struct ReferenceStepResult {
  int64_t step = 0;        // The 1-based step number now committed.
  double loss = 0.0;       // Mean MSE over the global batch, before the update.
  double grad_norm = 0.0;  // Global 2-norm of the gradient, before clipping.
  float grad_scale = 1.0f;  // The clip scale AdamW applied.
};

// Single-process, unsharded training of the teacher-student student: the
// result a data-parallel run of the same configuration must reproduce within
// a tolerance (summation orders differ).
//
// Step t (1-based) does, on GlobalBatch(t, world_size, batch_per_rank):
// forward through every layer, MSE over the whole global batch, backward
// (the gradient of the global-batch mean, which is what the daemon's average
// reduce-scatter of per-rank mean-loss gradients yields), one GradClipper
// pass over all layers' gradients (as the daemon: one global norm), then
// core::AdamW::Update(t, scale, ...) on each layer's whole flat buffer (as
// the daemon does shard by shard; AdamW is elementwise, so sharding does not
// change it). Optimizer state starts at zero; no low-precision copy.
//
// Ownership: keeps a pointer to `task`, which must outlive the trainer; owns
// parameters, gradients, optimizer state and the Mlp workspace. Not
// thread-safe (Step mutates everything); distinct trainers are independent.
class ReferenceTrainer {
 public:
  // initial_params: per layer the flat [weight, bias] (Mlp layout, exactly
  // ParamCount elements), e.g. task.StudentInitialParams(seed) or the
  // parameters a daemon reports at step 0. Errors: INVALID_ARGUMENT naming
  // the field (world_size, batch_per_rank, adamw.*, max_grad_norm, layer
  // sizes).
  static absl::StatusOr<ReferenceTrainer> Create(
      const TeacherStudent* task, const ReferenceTrainerOptions& options,
      std::vector<std::vector<float>> initial_params);

  // Runs step step() + 1. A non-finite gradient fails with
  // FAILED_PRECONDITION (from GradClipper) and changes no parameter.
  absl::StatusOr<ReferenceStepResult> Step();

  // Committed steps so far.
  int64_t step() const { return step_; }
  int num_layers() const { return mlp_.num_layers(); }
  absl::Span<const float> params(int layer) const { return params_[layer]; }
  // The gradient of the last step, before clipping.
  absl::Span<const float> grads(int layer) const { return grads_[layer]; }
  const Mlp& mlp() const { return mlp_; }

 private:
  ReferenceTrainer(const TeacherStudent* task,
                   const ReferenceTrainerOptions& options, Mlp mlp,
                   core::AdamW adamw, core::GradClipper clipper)
      : task_(task),
        options_(options),
        mlp_(std::move(mlp)),
        adamw_(std::move(adamw)),
        clipper_(std::move(clipper)) {}

  const TeacherStudent* task_;
  ReferenceTrainerOptions options_;
  Mlp mlp_;
  core::AdamW adamw_;
  core::GradClipper clipper_;
  int64_t step_ = 0;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> grads_;
  std::vector<std::vector<float>> exp_avg_;
  std::vector<std::vector<float>> exp_avg_sq_;
  // Activations: acts_[l] is layer l's input, acts_[L] the prediction; and
  // gradients with respect to them.
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> grad_acts_;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_REFERENCE_TRAINER_H_
