#ifndef SHARDD_CLIENT_TEACHER_STUDENT_H_
#define SHARDD_CLIENT_TEACHER_STUDENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/mlp.h"

namespace shardd::client {

struct TeacherStudentOptions {
  // Layer widths {in, hidden..., out} of the teacher, which are also the
  // student's (so the student can fit the task exactly).
  std::vector<int64_t> widths;
  uint64_t seed = 0;  // Names the teacher and the data.
};

// Inputs and targets of some samples, row-major [samples, features].
struct TaskBatch {
  int64_t samples = 0;
  std::vector<float> inputs;   // [samples, widths.front()]
  std::vector<float> targets;  // [samples, widths.back()]
};

// The synthetic regression task of the example trainer: a fixed random
// "teacher" MLP (ReLU between layers, drawn from `seed`) labels standard
// normal inputs; a student MLP of the same shape learns it with MSE.
//
// Data. Step s (any int64, the trainer uses the 1-based optimizer step) has
// an unbounded stream of samples; global sample g of step s has inputs
// x[f] = CounterNormal({seed, kInputStream, s}).At(g · in + f). Rank r of W
// ranks with B samples per rank gets global samples [r·B, (r+1)·B), so:
//   * a rank's batch is a pure function of (seed, step, rank, B);
//   * ranks never share a sample; the union of all ranks' batches at a step
//     is GlobalBatch(step, W, B), their concatenation in rank order;
//   * the inputs of GlobalBatch(s, W, B) depend only on W·B (e.g. W=2, B=4
//     and W=1, B=8 give the same inputs).
// Targets are the teacher's outputs for the inputs, computed per rank batch
// (GlobalBatch concatenates rank batches, so it equals the union bit for bit).
//
// Teacher: layer l weight ~ N(0, 2/in) for ReLU layers (He), N(0, 1/in) for
// the last; bias ~ N(0, 0.1²); stream {seed, kTeacherStream, l, tensor}
// (tensor 0 = weight, 1 = bias), element index = position in the tensor.
//
// Student initialisation (what the trainer registers per tensor, normal with
// mean 0): weight std 1/sqrt(in) (StudentWeightInitStd), bias std 0 (zeros).
// StudentInitialParams draws it from stream {init_seed, kStudentStream, l,
// tensor} for a process that initialises locally (the reference trainer).
//
// Immutable after Create; thread-safe. Owns the teacher's parameters
// (ParamCount floats per layer) and keeps no pointer it is given.
class TeacherStudent {
 public:
  static constexpr uint64_t kInputStream = 1;
  static constexpr uint64_t kTeacherStream = 2;
  static constexpr uint64_t kStudentStream = 3;

  // Errors: INVALID_ARGUMENT for widths Mlp::Create rejects.
  static absl::StatusOr<TeacherStudent> Create(
      const TeacherStudentOptions& options);

  // Rank `rank`'s batch of `batch_per_rank` samples at `step`.
  // INVALID_ARGUMENT unless 0 <= rank < world_size and batch_per_rank >= 1.
  absl::StatusOr<TaskBatch> Batch(int64_t step, int rank, int world_size,
                                  int64_t batch_per_rank) const;

  // Batch(step, 0, ...) ++ ... ++ Batch(step, world_size - 1, ...):
  // world_size · batch_per_rank samples. Same errors (world_size >= 1).
  absl::StatusOr<TaskBatch> GlobalBatch(int64_t step, int world_size,
                                        int64_t batch_per_rank) const;

  // Recommended init std of the student's tensors (normal, mean 0).
  static double StudentWeightInitStd(int64_t in_features);
  static constexpr double kStudentBiasInitStd = 0.0;

  // The student's initial [weight, bias] per layer (Mlp layout), drawn from
  // the streams named above with the recommended stds.
  std::vector<std::vector<float>> StudentInitialParams(
      uint64_t init_seed) const;

  const TeacherStudentOptions& options() const { return options_; }
  const Mlp& model() const { return model_; }
  // The teacher's flat [weight, bias] of `layer` (Mlp layout).
  const std::vector<float>& teacher_params(int layer) const {
    return teacher_params_[layer];
  }

 private:
  TeacherStudent(TeacherStudentOptions options, Mlp model)
      : options_(std::move(options)), model_(std::move(model)) {}

  TeacherStudentOptions options_;
  Mlp model_;  // Shape only; used through const methods.
  std::vector<std::vector<float>> teacher_params_;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_TEACHER_STUDENT_H_
