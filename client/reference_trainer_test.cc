#include "client/reference_trainer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::client {
namespace {

class ReferenceTrainerTest : public ::testing::Test {
 protected:
  ReferenceTrainerTest()
      : task_(*TeacherStudent::Create({{16, 64, 64, 8}, /*seed=*/1})) {}

  ReferenceTrainer Make(const ReferenceTrainerOptions& options,
                        uint64_t init_seed = 2) {
    absl::StatusOr<ReferenceTrainer> trainer = ReferenceTrainer::Create(
        &task_, options, task_.StudentInitialParams(init_seed));
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    return *std::move(trainer);
  }

  static std::vector<double> Train(ReferenceTrainer& trainer, int steps) {
    std::vector<double> losses;
    for (int i = 0; i < steps; ++i) {
      absl::StatusOr<ReferenceStepResult> result = trainer.Step();
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok()) break;
      EXPECT_EQ(result->step, i + 1);
      losses.push_back(result->loss);
    }
    return losses;
  }

  static double MeanOf(const std::vector<double>& v, size_t begin, size_t end) {
    double sum = 0.0;
    for (size_t i = begin; i < end; ++i) sum += v[i];
    return sum / static_cast<double>(end - begin);
  }

  TeacherStudent task_;
};

TEST_F(ReferenceTrainerTest, LossFallsSubstantiallyIn200Steps) {
  ReferenceTrainerOptions options;
  options.world_size = 2;
  options.batch_per_rank = 32;
  options.adamw.lr = 3e-3;
  options.max_grad_norm = 1.0;
  ReferenceTrainer trainer = Make(options);
  const std::vector<double> losses = Train(trainer, 200);
  ASSERT_EQ(losses.size(), 200u);
  // Every step sees fresh samples, so single losses are noisy: compare the
  // means of the first and last 10 steps. Over teacher seeds 1-6 and student
  // init seeds 2-3 the ratio measured 0.10-0.19 (this case: 0.12), so 0.3
  // leaves a margin of 1.6x over the worst.
  const double first = MeanOf(losses, 0, 10);
  const double last = MeanOf(losses, 190, 200);
  EXPECT_LT(last, 0.3 * first) << "first " << first << " last " << last;
}

TEST_F(ReferenceTrainerTest, RunsAreBitForBitReproducible) {
  ReferenceTrainerOptions options;
  options.world_size = 4;
  options.batch_per_rank = 8;
  options.max_grad_norm = 0.5;
  ReferenceTrainer a = Make(options);
  ReferenceTrainer b = Make(options);
  EXPECT_EQ(Train(a, 20), Train(b, 20));
  for (int l = 0; l < a.num_layers(); ++l) {
    EXPECT_TRUE(std::equal(a.params(l).begin(), a.params(l).end(),
                           b.params(l).begin(), b.params(l).end()))
        << "layer " << l;
  }
}

TEST_F(ReferenceTrainerTest, StepAppliesClippedAdamWToTheGlobalGradient) {
  ReferenceTrainerOptions options;
  options.world_size = 2;
  options.batch_per_rank = 4;
  options.max_grad_norm = 1e-3;  // Tiny: the step is certainly clipped.
  ReferenceTrainer trainer = Make(options);
  const std::vector<std::vector<float>> before = task_.StudentInitialParams(2);
  absl::StatusOr<ReferenceStepResult> result = trainer.Step();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->grad_norm, 1e-3);
  EXPECT_LT(result->grad_scale, 1.0f);

  // Recompute step 1 by hand from the public pieces: the global batch's
  // gradient (already checked by Mlp's tests), its norm, then AdamW.
  double sum_sq = 0.0;
  for (int l = 0; l < trainer.num_layers(); ++l) {
    for (float g : trainer.grads(l)) sum_sq += double(g) * g;
  }
  EXPECT_NEAR(result->grad_norm, std::sqrt(sum_sq), 1e-9 * result->grad_norm);
  const core::AdamW adamw = *core::AdamW::Create(options.adamw);
  for (int l = 0; l < trainer.num_layers(); ++l) {
    std::vector<float> p = before[l];
    std::vector<float> m(p.size()), v(p.size());
    ASSERT_TRUE(adamw
                    .Update(1, result->grad_scale, trainer.grads(l).data(),
                            p.data(), m.data(), v.data(),
                            static_cast<int64_t>(p.size()),
                            core::DType::kFloat32, nullptr)
                    .ok());
    EXPECT_TRUE(std::equal(p.begin(), p.end(), trainer.params(l).begin(),
                           trainer.params(l).end()))
        << "layer " << l;
  }
}

TEST_F(ReferenceTrainerTest, GradientIsTheMeanOfPerRankGradients) {
  // What the daemon computes: each rank's gradient of its own mean loss,
  // then the average over ranks.
  ReferenceTrainerOptions options;
  options.world_size = 2;
  options.batch_per_rank = 16;
  ReferenceTrainer trainer = Make(options);
  ASSERT_TRUE(trainer.Step().ok());

  const std::vector<std::vector<float>> params = task_.StudentInitialParams(2);
  Mlp mlp = *Mlp::Create(task_.options().widths);
  std::vector<std::vector<double>> average(mlp.num_layers());
  for (int l = 0; l < mlp.num_layers(); ++l) {
    average[l].assign(mlp.ParamCount(l), 0.0);
  }
  for (int rank = 0; rank < 2; ++rank) {
    const TaskBatch batch = *task_.Batch(1, rank, 2, 16);
    std::vector<std::vector<float>> acts = {batch.inputs};
    for (int l = 0; l < mlp.num_layers(); ++l) {
      acts.emplace_back(16 * mlp.out_features(l));
      ASSERT_TRUE(
          mlp.ForwardLayer(l, params[l], acts[l], absl::MakeSpan(acts[l + 1]))
              .ok());
    }
    std::vector<float> grad(acts.back().size());
    ASSERT_TRUE(
        Mlp::MseLoss(acts.back(), batch.targets, absl::MakeSpan(grad)).ok());
    for (int l = mlp.num_layers() - 1; l >= 0; --l) {
      std::vector<float> grad_params(mlp.ParamCount(l));
      std::vector<float> grad_in(16 * mlp.in_features(l));
      ASSERT_TRUE(mlp.BackwardLayer(l, params[l], grad,
                                    absl::MakeSpan(grad_params),
                                    absl::MakeSpan(grad_in))
                      .ok());
      for (size_t i = 0; i < grad_params.size(); ++i) {
        average[l][i] += 0.5 * grad_params[i];
      }
      grad = std::move(grad_in);
    }
  }
  for (int l = 0; l < mlp.num_layers(); ++l) {
    float max_abs = 0.0f;
    for (float g : trainer.grads(l)) max_abs = std::max(max_abs, std::abs(g));
    for (size_t i = 0; i < average[l].size(); ++i) {
      EXPECT_NEAR(trainer.grads(l)[i], average[l][i], 1e-5 * max_abs)
          << "layer " << l << " element " << i;
    }
  }
}

TEST_F(ReferenceTrainerTest, BadOptionsAreRejected) {
  ReferenceTrainerOptions options;
  options.world_size = 0;
  EXPECT_EQ(
      ReferenceTrainer::Create(&task_, options, task_.StudentInitialParams(0))
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  options = {};
  options.adamw.beta1 = 1.0;
  absl::Status status =
      ReferenceTrainer::Create(&task_, options, task_.StudentInitialParams(0))
          .status();
  EXPECT_NE(status.message().find("adamw.beta1"), std::string::npos) << status;
  options = {};
  std::vector<std::vector<float>> params = task_.StudentInitialParams(0);
  params[1].pop_back();
  status = ReferenceTrainer::Create(&task_, options, params).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("initial_params[1]"), std::string::npos)
      << status;
  EXPECT_EQ(ReferenceTrainer::Create(nullptr, options, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::client
