#include "client/mlp.h"

#include <cmath>
#include <random>
#include <vector>

#include "daemon/core/unit_layout.h"
#include "gtest/gtest.h"

namespace shardd::client {
namespace {

class MlpTest : public ::testing::Test {
 protected:
  static Mlp Make(std::vector<int64_t> widths, int64_t capacity = 0) {
    absl::StatusOr<Mlp> mlp = Mlp::Create(std::move(widths), capacity);
    EXPECT_TRUE(mlp.ok()) << mlp.status();
    return *std::move(mlp);
  }

  static std::vector<float> Random(int64_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> out(n);
    for (float& x : out) x = dist(rng);
    return out;
  }

  static std::vector<std::vector<float>> RandomParams(const Mlp& mlp,
                                                      uint32_t seed) {
    std::vector<std::vector<float>> params;
    for (int l = 0; l < mlp.num_layers(); ++l) {
      params.push_back(Random(mlp.ParamCount(l), seed + l,
                              1.0f / std::sqrt(float(mlp.in_features(l)))));
    }
    return params;
  }

  // The network's loss in double with naive loops: the reference for the
  // finite differences.
  static double LossInDouble(const Mlp& mlp,
                             const std::vector<std::vector<double>>& params,
                             const std::vector<double>& input,
                             const std::vector<double>& target, int64_t batch) {
    std::vector<double> x = input;
    for (int l = 0; l < mlp.num_layers(); ++l) {
      const int64_t in = mlp.in_features(l);
      const int64_t out = mlp.out_features(l);
      std::vector<double> y(batch * out);
      for (int64_t i = 0; i < batch; ++i) {
        for (int64_t o = 0; o < out; ++o) {
          double sum = params[l][mlp.BiasOffset(l) + o];
          for (int64_t k = 0; k < in; ++k) {
            sum += params[l][o * in + k] * x[i * in + k];
          }
          y[i * out + o] = mlp.has_relu(l) ? std::max(sum, 0.0) : sum;
        }
      }
      x = std::move(y);
    }
    double loss = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      loss += (x[i] - target[i]) * (x[i] - target[i]);
    }
    return loss / static_cast<double>(x.size());
  }

  // Forward, loss and backward in fp32 through the Mlp API; returns the
  // loss, the parameter gradients and the input gradient.
  static double ForwardBackward(Mlp& mlp,
                                const std::vector<std::vector<float>>& params,
                                const std::vector<float>& input,
                                const std::vector<float>& target, int64_t batch,
                                std::vector<std::vector<float>>* grads,
                                std::vector<float>* grad_input) {
    const int layers = mlp.num_layers();
    std::vector<std::vector<float>> acts = {input};
    for (int l = 0; l < layers; ++l) {
      acts.emplace_back(batch * mlp.out_features(l));
      EXPECT_TRUE(
          mlp.ForwardLayer(l, params[l], acts[l], absl::MakeSpan(acts[l + 1]))
              .ok());
    }
    std::vector<float> grad(acts.back().size());
    absl::StatusOr<double> loss =
        Mlp::MseLoss(acts.back(), target, absl::MakeSpan(grad));
    EXPECT_TRUE(loss.ok()) << loss.status();
    grads->assign(layers, {});
    for (int l = layers - 1; l >= 0; --l) {
      (*grads)[l].assign(mlp.ParamCount(l), 0.0f);
      std::vector<float> grad_in(batch * mlp.in_features(l));
      const absl::Status status =
          mlp.BackwardLayer(l, params[l], grad, absl::MakeSpan((*grads)[l]),
                            absl::MakeSpan(grad_in));
      EXPECT_TRUE(status.ok()) << status;
      grad = std::move(grad_in);
    }
    *grad_input = std::move(grad);
    return *loss;
  }
};

TEST_F(MlpTest, ForwardOfAKnownTinyNetwork) {
  // Layer 0: 2 -> 2, ReLU. W = [[1, -1], [2, 0.5]], b = [0.5, -1].
  // Layer 1: 2 -> 1, none. W = [[3, -2]], b = [0.25].
  Mlp mlp = Make({2, 2, 1});
  const std::vector<float> p0 = {1.0f, -1.0f, 2.0f, 0.5f, 0.5f, -1.0f};
  const std::vector<float> p1 = {3.0f, -2.0f, 0.25f};
  // Sample 0: x = [1, 2]: z = [1-2+0.5, 2+1-1] = [-0.5, 2] -> h = [0, 2];
  //   y = 0*3 - 2*2 + 0.25 = -3.75.
  // Sample 1: x = [3, -1]: z = [3+1+0.5, 6-0.5-1] = [4.5, 4.5] -> h = same;
  //   y = 13.5 - 9 + 0.25 = 4.75.
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, -1.0f};
  std::vector<float> h(4), y(2);
  ASSERT_TRUE(mlp.ForwardLayer(0, p0, x, absl::MakeSpan(h)).ok());
  EXPECT_EQ(h, (std::vector<float>{0.0f, 2.0f, 4.5f, 4.5f}));
  ASSERT_TRUE(mlp.ForwardLayer(1, p1, h, absl::MakeSpan(y)).ok());
  EXPECT_EQ(y, (std::vector<float>{-3.75f, 4.75f}));

  // MSE against [0, 4.75]: (3.75² + 0) / 2; gradient 2 (y - t) / 2.
  std::vector<float> grad(2);
  absl::StatusOr<double> loss =
      Mlp::MseLoss(y, {0.0f, 4.75f}, absl::MakeSpan(grad));
  ASSERT_TRUE(loss.ok());
  EXPECT_DOUBLE_EQ(*loss, 3.75 * 3.75 / 2.0);
  EXPECT_EQ(grad, (std::vector<float>{-3.75f, 0.0f}));

  // Backward by hand: layer 1: dW = Σ dy·h = [-3.75*0, -3.75*2] = [0, -7.5],
  // db = -3.75, dh = dy·W = [[-11.25, 7.5], [0, 0]].
  std::vector<float> g1(3), dh(4);
  ASSERT_TRUE(
      mlp.BackwardLayer(1, p1, grad, absl::MakeSpan(g1), absl::MakeSpan(dh))
          .ok());
  EXPECT_EQ(g1, (std::vector<float>{0.0f, -7.5f, -3.75f}));
  EXPECT_EQ(dh, (std::vector<float>{-11.25f, 7.5f, 0.0f, 0.0f}));
  // Layer 0: ReLU mask of sample 0 is [0, 1]: dz = [[0, 7.5], [0, 0]];
  // dW = dzᵀ x = [[0, 0], [7.5, 15]], db = [0, 7.5]; no input gradient.
  std::vector<float> g0(6);
  ASSERT_TRUE(mlp.BackwardLayer(0, p0, dh, absl::MakeSpan(g0), {}).ok());
  EXPECT_EQ(g0, (std::vector<float>{0.0f, 0.0f, 7.5f, 15.0f, 0.0f, 7.5f}));
}

TEST_F(MlpTest, GradientsMatchFiniteDifferencesOfADoubleReference) {
  Mlp mlp = Make({5, 7, 6, 3});
  const int64_t batch = 4;
  const std::vector<std::vector<float>> params = RandomParams(mlp, 11);
  const std::vector<float> input = Random(batch * 5, 3, 1.0f);
  const std::vector<float> target = Random(batch * 3, 4, 1.0f);
  std::vector<std::vector<float>> grads;
  std::vector<float> grad_input;
  const double loss =
      ForwardBackward(mlp, params, input, target, batch, &grads, &grad_input);

  std::vector<std::vector<double>> p(params.size());
  for (size_t l = 0; l < params.size(); ++l) {
    p[l].assign(params[l].begin(), params[l].end());
  }
  std::vector<double> x(input.begin(), input.end());
  const std::vector<double> t(target.begin(), target.end());
  // The double reference agrees with the fp32 forward.
  EXPECT_NEAR(LossInDouble(mlp, p, x, t, batch), loss, 1e-5 * loss);

  const double h = 1e-6;
  auto expect_close = [](double analytic, double numeric, const char* what,
                         int l, size_t i) {
    EXPECT_NEAR(analytic, numeric, 1e-4 + 1e-3 * std::abs(numeric))
        << what << " layer " << l << " element " << i;
  };
  for (int l = 0; l < mlp.num_layers(); ++l) {
    ASSERT_EQ(grads[l].size(), p[l].size());
    for (size_t i = 0; i < p[l].size(); ++i) {
      const double saved = p[l][i];
      p[l][i] = saved + h;
      const double up = LossInDouble(mlp, p, x, t, batch);
      p[l][i] = saved - h;
      const double down = LossInDouble(mlp, p, x, t, batch);
      p[l][i] = saved;
      expect_close(grads[l][i], (up - down) / (2 * h), "param", l, i);
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = LossInDouble(mlp, p, x, t, batch);
    x[i] = saved - h;
    const double down = LossInDouble(mlp, p, x, t, batch);
    x[i] = saved;
    expect_close(grad_input[i], (up - down) / (2 * h), "input", 0, i);
  }
}

TEST_F(MlpTest, LossGradientMatchesFiniteDifferences) {
  const std::vector<float> prediction = Random(12, 5, 1.0f);
  const std::vector<float> target = Random(12, 6, 1.0f);
  std::vector<float> grad(12);
  ASSERT_TRUE(Mlp::MseLoss(prediction, target, absl::MakeSpan(grad)).ok());
  for (size_t i = 0; i < prediction.size(); ++i) {
    // The loss is quadratic: the central difference is exact up to rounding.
    double sum_up = 0.0, sum_down = 0.0;
    const double h = 1e-3;
    for (size_t j = 0; j < prediction.size(); ++j) {
      const double d = double(prediction[j]) - target[j];
      const double du = d + (i == j ? h : 0.0);
      const double dd = d - (i == j ? h : 0.0);
      sum_up += du * du;
      sum_down += dd * dd;
    }
    const double numeric = (sum_up - sum_down) / 12.0 / (2 * h);
    EXPECT_NEAR(grad[i], numeric, 1e-6 + 1e-6 * std::abs(numeric)) << i;
  }
}

TEST_F(MlpTest, BatchMeanGradientIsTheAverageOfHalfBatchGradients) {
  // The data-parallel identity: ranks compute the gradient of their own
  // batch's mean loss; averaging those equals the global batch's gradient.
  Mlp mlp = Make({16, 32, 32, 8}, 16);
  const int64_t batch = 16, half = 8;
  const std::vector<std::vector<float>> params = RandomParams(mlp, 21);
  const std::vector<float> input = Random(batch * 16, 7, 1.0f);
  const std::vector<float> target = Random(batch * 8, 8, 1.0f);
  std::vector<std::vector<float>> whole, first, second;
  std::vector<float> unused;
  ForwardBackward(mlp, params, input, target, batch, &whole, &unused);
  ForwardBackward(mlp, params,
                  std::vector<float>(input.begin(), input.begin() + half * 16),
                  std::vector<float>(target.begin(), target.begin() + half * 8),
                  half, &first, &unused);
  ForwardBackward(mlp, params,
                  std::vector<float>(input.begin() + half * 16, input.end()),
                  std::vector<float>(target.begin() + half * 8, target.end()),
                  half, &second, &unused);
  for (int l = 0; l < mlp.num_layers(); ++l) {
    float max_abs = 0.0f;
    for (float g : whole[l]) max_abs = std::max(max_abs, std::abs(g));
    for (size_t i = 0; i < whole[l].size(); ++i) {
      const float average = 0.5f * (first[l][i] + second[l][i]);
      EXPECT_NEAR(whole[l][i], average, 1e-5f * max_abs + 1e-7f)
          << "layer " << l << " element " << i;
    }
  }
}

TEST_F(MlpTest, SameInputsGiveTheSameBits) {
  Mlp a = Make({64, 128, 32});
  Mlp b = Make({64, 128, 32}, 40);
  const std::vector<std::vector<float>> params = RandomParams(a, 31);
  const std::vector<float> input = Random(40 * 64, 9, 1.0f);
  const std::vector<float> target = Random(40 * 32, 10, 1.0f);
  std::vector<std::vector<float>> ga, gb;
  std::vector<float> ia, ib;
  EXPECT_EQ(ForwardBackward(a, params, input, target, 40, &ga, &ia),
            ForwardBackward(b, params, input, target, 40, &gb, &ib));
  EXPECT_EQ(ga, gb);
  EXPECT_EQ(ia, ib);
}

TEST_F(MlpTest, LayoutMatchesTheRegisteredUnit) {
  Mlp mlp = Make({3, 5, 2});
  EXPECT_EQ(mlp.num_layers(), 2);
  EXPECT_EQ(mlp.ParamCount(0), 5 * 3 + 5);
  EXPECT_EQ(mlp.ParamCount(1), 2 * 5 + 2);
  EXPECT_EQ(mlp.TotalParamCount(), 20 + 12);
  for (int l = 0; l < mlp.num_layers(); ++l) {
    const core::UnitSpec spec = mlp.UnitSpecFor(l);
    EXPECT_EQ(spec.name, "layer" + std::to_string(l));
    absl::StatusOr<core::UnitLayout> layout = core::UnitLayout::Create(spec, 4);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->tensors().size(), 2u);
    EXPECT_EQ(layout->tensors()[0].name, "weight");
    EXPECT_EQ(layout->tensors()[0].shape,
              (std::vector<int64_t>{mlp.out_features(l), mlp.in_features(l)}));
    EXPECT_EQ(layout->tensors()[0].offset, Mlp::WeightOffset());
    EXPECT_EQ(layout->tensors()[1].name, "bias");
    EXPECT_EQ(layout->tensors()[1].offset, mlp.BiasOffset(l));
    EXPECT_EQ(layout->numel(), mlp.ParamCount(l));
  }
}

TEST_F(MlpTest, PaddingAfterTheParametersIsNeitherReadNorWritten) {
  Mlp mlp = Make({2, 2, 1});
  const float kNan = std::nanf("");
  std::vector<float> p0 = {1.0f, -1.0f, 2.0f, 0.5f, 0.5f, -1.0f, kNan, kNan};
  std::vector<float> p1 = {3.0f, -2.0f, 0.25f, kNan};
  const std::vector<float> x = {1.0f, 2.0f};
  std::vector<float> h(2), y(1);
  ASSERT_TRUE(mlp.ForwardLayer(0, p0, x, absl::MakeSpan(h)).ok());
  ASSERT_TRUE(mlp.ForwardLayer(1, p1, h, absl::MakeSpan(y)).ok());
  EXPECT_EQ(y[0], -3.75f);
  std::vector<float> g1(4, 42.0f);
  std::vector<float> dh(2);
  ASSERT_TRUE(mlp.BackwardLayer(1, p1, std::vector<float>{1.0f},
                                absl::MakeSpan(g1), absl::MakeSpan(dh))
                  .ok());
  EXPECT_EQ(g1[3], 42.0f);
}

TEST_F(MlpTest, BadArgumentsAreRejected) {
  EXPECT_EQ(Mlp::Create({4}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status zero = Mlp::Create({4, 0, 2}).status();
  EXPECT_EQ(zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.message().find("mlp.widths[1]"), std::string::npos) << zero;
  EXPECT_EQ(Mlp::Create({int64_t{1} << 40, int64_t{1} << 40}).status().code(),
            absl::StatusCode::kInvalidArgument);

  Mlp mlp = Make({3, 2});
  std::vector<float> params(mlp.ParamCount(0));
  std::vector<float> in(6), out(4), grad(4), gparams(8), gin(6);
  EXPECT_EQ(mlp.ForwardLayer(1, params, in, absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mlp.ForwardLayer(0, absl::MakeConstSpan(params.data(), 7), in,
                             absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mlp.ForwardLayer(0, params, absl::MakeConstSpan(in.data(), 5),
                             absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      mlp.ForwardLayer(0, params, in, absl::MakeSpan(out.data(), 3)).code(),
      absl::StatusCode::kInvalidArgument);
  // Backward before any forward.
  EXPECT_EQ(mlp.BackwardLayer(0, params, grad, absl::MakeSpan(gparams),
                              absl::MakeSpan(gin))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(mlp.ForwardLayer(0, params, in, absl::MakeSpan(out)).ok());
  // grad_output of another batch size than the saved forward.
  EXPECT_EQ(mlp.BackwardLayer(0, params, absl::MakeConstSpan(grad.data(), 2),
                              absl::MakeSpan(gparams), absl::MakeSpan(gin))
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Overlapping buffers.
  EXPECT_EQ(mlp.BackwardLayer(0, params, absl::MakeConstSpan(gparams.data(), 4),
                              absl::MakeSpan(gparams), absl::MakeSpan(gin))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(mlp.BackwardLayer(0, params, grad, absl::MakeSpan(gparams),
                                absl::MakeSpan(gin))
                  .ok());
  EXPECT_EQ(
      Mlp::MseLoss(out, absl::MakeConstSpan(grad.data(), 3)).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Mlp::MseLoss({}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::client
