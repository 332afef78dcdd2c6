#include "client/teacher_student.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::client {
namespace {

class TeacherStudentTest : public ::testing::Test {
 protected:
  static TeacherStudent Make(std::vector<int64_t> widths, uint64_t seed) {
    absl::StatusOr<TeacherStudent> task =
        TeacherStudent::Create({std::move(widths), seed});
    EXPECT_TRUE(task.ok()) << task.status();
    return *std::move(task);
  }

  static TaskBatch BatchOf(const TeacherStudent& task, int64_t step, int rank,
                           int world_size, int64_t batch_per_rank) {
    absl::StatusOr<TaskBatch> batch =
        task.Batch(step, rank, world_size, batch_per_rank);
    EXPECT_TRUE(batch.ok()) << batch.status();
    return *std::move(batch);
  }

  static TaskBatch GlobalOf(const TeacherStudent& task, int64_t step,
                            int world_size, int64_t batch_per_rank) {
    absl::StatusOr<TaskBatch> batch =
        task.GlobalBatch(step, world_size, batch_per_rank);
    EXPECT_TRUE(batch.ok()) << batch.status();
    return *std::move(batch);
  }
};

TEST_F(TeacherStudentTest, SameSeedStepAndRankGiveTheSameBatch) {
  const TeacherStudent a = Make({8, 16, 4}, 5);
  const TeacherStudent b = Make({8, 16, 4}, 5);
  const TaskBatch x = BatchOf(a, 3, 1, 4, 6);
  const TaskBatch y = BatchOf(b, 3, 1, 4, 6);
  EXPECT_EQ(x.samples, 6);
  EXPECT_EQ(x.inputs.size(), 6u * 8);
  EXPECT_EQ(x.targets.size(), 6u * 4);
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.targets, y.targets);
}

TEST_F(TeacherStudentTest, RanksStepsAndSeedsDiffer) {
  const TeacherStudent task = Make({8, 16, 4}, 5);
  const TaskBatch base = BatchOf(task, 3, 1, 4, 6);
  EXPECT_NE(BatchOf(task, 3, 2, 4, 6).inputs, base.inputs);
  EXPECT_NE(BatchOf(task, 4, 1, 4, 6).inputs, base.inputs);
  const TeacherStudent other = Make({8, 16, 4}, 6);
  EXPECT_NE(BatchOf(other, 3, 1, 4, 6).inputs, base.inputs);
  // Another seed is another teacher too: same inputs, different targets.
  EXPECT_NE(other.teacher_params(0), task.teacher_params(0));
}

TEST_F(TeacherStudentTest, GlobalBatchIsTheConcatenationOfRankBatches) {
  const TeacherStudent task = Make({8, 16, 4}, 5);
  const TaskBatch global = GlobalOf(task, 9, 3, 5);
  EXPECT_EQ(global.samples, 15);
  std::vector<float> inputs, targets;
  for (int rank = 0; rank < 3; ++rank) {
    const TaskBatch part = BatchOf(task, 9, rank, 3, 5);
    inputs.insert(inputs.end(), part.inputs.begin(), part.inputs.end());
    targets.insert(targets.end(), part.targets.begin(), part.targets.end());
  }
  EXPECT_EQ(global.inputs, inputs);
  EXPECT_EQ(global.targets, targets);
}

TEST_F(TeacherStudentTest, GlobalInputsDependOnlyOnTheGlobalBatchSize) {
  const TeacherStudent task = Make({8, 16, 4}, 5);
  const TaskBatch one = GlobalOf(task, 2, 1, 8);
  const TaskBatch two = GlobalOf(task, 2, 2, 4);
  const TaskBatch four = GlobalOf(task, 2, 4, 2);
  EXPECT_EQ(one.inputs, two.inputs);
  EXPECT_EQ(one.inputs, four.inputs);
  // Targets go through batched matrix products: equal up to rounding.
  ASSERT_EQ(one.targets.size(), four.targets.size());
  for (size_t i = 0; i < one.targets.size(); ++i) {
    EXPECT_NEAR(one.targets[i], four.targets[i],
                1e-5f * (1.0f + std::abs(one.targets[i])));
  }
}

TEST_F(TeacherStudentTest, TargetsAreTheTeachersOutputs) {
  const TeacherStudent task = Make({3, 4, 2}, 1);
  const TaskBatch batch = BatchOf(task, 1, 0, 1, 2);
  const Mlp& m = task.model();
  for (int64_t i = 0; i < 2; ++i) {
    std::vector<double> hidden(4);
    const std::vector<float>& p0 = task.teacher_params(0);
    const std::vector<float>& p1 = task.teacher_params(1);
    for (int o = 0; o < 4; ++o) {
      double z = p0[m.BiasOffset(0) + o];
      for (int k = 0; k < 3; ++k) z += p0[o * 3 + k] * batch.inputs[i * 3 + k];
      hidden[o] = std::max(z, 0.0);
    }
    for (int o = 0; o < 2; ++o) {
      double y = p1[m.BiasOffset(1) + o];
      for (int k = 0; k < 4; ++k) y += p1[o * 4 + k] * hidden[k];
      EXPECT_NEAR(batch.targets[i * 2 + o], y, 1e-5 * (1.0 + std::abs(y)));
    }
  }
}

TEST_F(TeacherStudentTest, StudentInitHasTheRecommendedStds) {
  const TeacherStudent task = Make({256, 512, 64}, 1);
  EXPECT_DOUBLE_EQ(TeacherStudent::StudentWeightInitStd(256), 1.0 / 16.0);
  EXPECT_EQ(TeacherStudent::kStudentBiasInitStd, 0.0);
  const std::vector<std::vector<float>> init = task.StudentInitialParams(9);
  EXPECT_EQ(init, task.StudentInitialParams(9));
  EXPECT_NE(init, task.StudentInitialParams(10));
  const Mlp& m = task.model();
  ASSERT_EQ(init.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    ASSERT_EQ(static_cast<int64_t>(init[l].size()), m.ParamCount(l));
    double sum_sq = 0.0;
    for (int64_t i = 0; i < m.BiasOffset(l); ++i)
      sum_sq += init[l][i] * init[l][i];
    const double std = std::sqrt(sum_sq / m.BiasOffset(l));
    EXPECT_NEAR(std, TeacherStudent::StudentWeightInitStd(m.in_features(l)),
                0.02 * std);
    for (int64_t i = m.BiasOffset(l); i < m.ParamCount(l); ++i) {
      EXPECT_EQ(init[l][i], 0.0f);
    }
  }
}

TEST_F(TeacherStudentTest, BadArgumentsAreRejected) {
  EXPECT_EQ(TeacherStudent::Create({{4}, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const TeacherStudent task = Make({4, 2}, 0);
  EXPECT_EQ(task.Batch(0, 2, 2, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(task.Batch(0, -1, 2, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(task.Batch(0, 0, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(task.GlobalBatch(0, 0, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(task.Batch(0, 0, 1 << 30, int64_t{1} << 40).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::client
