#include "daemon/core/adamw.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "daemon/core/dtype.h"
#include "daemon/core/kernel_dispatch.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

class AdamWTest : public ::testing::Test {
 protected:
  static std::vector<float> Random(int64_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> out(n);
    for (float& x : out) x = dist(rng);
    return out;
  }

  static AdamW Make(const AdamWOptions& options,
                    KernelIsa isa = KernelIsa::kAuto) {
    absl::StatusOr<AdamW> adamw = AdamW::Create(options, isa);
    EXPECT_TRUE(adamw.ok()) << adamw.status();
    return *std::move(adamw);
  }

  static void ExpectInvalidNaming(const AdamWOptions& options,
                                  const std::string& field) {
    absl::StatusOr<AdamW> adamw = AdamW::Create(options);
    ASSERT_FALSE(adamw.ok()) << "accepted a bad " << field;
    EXPECT_EQ(adamw.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(adamw.status().message().find(field), std::string::npos)
        << adamw.status();
  }
};

TEST_F(AdamWTest, KnownValuesMatchDoubleReferenceForSeveralSteps) {
  AdamWOptions options;
  options.lr = 1e-2;
  options.beta1 = 0.8;
  options.beta2 = 0.95;
  options.eps = 1e-6;
  options.weight_decay = 0.1;
  const AdamW adamw = Make(options);

  constexpr int64_t kN = 37;
  std::vector<float> p = Random(kN, 1, 1.0f);
  std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(kN, 0.0), rv(kN, 0.0);
  for (int64_t step = 1; step <= 6; ++step) {
    const std::vector<float> g = Random(kN, 100 + step, 0.5f);
    ASSERT_TRUE(
        adamw.Update(step, 1.0f, g.data(), p.data(), m.data(), v.data(), kN)
            .ok());
    const double bc1 = 1.0 - std::pow(options.beta1, step);
    const double bc2 = 1.0 - std::pow(options.beta2, step);
    for (int64_t i = 0; i < kN; ++i) {
      rp[i] *= 1.0 - options.lr * options.weight_decay;
      rm[i] = options.beta1 * rm[i] + (1.0 - options.beta1) * g[i];
      rv[i] = options.beta2 * rv[i] + (1.0 - options.beta2) * g[i] * g[i];
      rp[i] -= options.lr / bc1 * rm[i] /
               (std::sqrt(rv[i]) / std::sqrt(bc2) + options.eps);
    }
  }
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_NEAR(p[i], rp[i], 1e-5 * (1.0 + std::abs(rp[i]))) << i;
    EXPECT_NEAR(m[i], rm[i], 1e-6 * (1.0 + std::abs(rm[i]))) << i;
    EXPECT_NEAR(v[i], rv[i], 1e-6 * (1.0 + std::abs(rv[i]))) << i;
  }
}

// Hand-computed: on step 1 from zero state m = 0.1*g, v = 0.001*g^2, and the
// bias corrections undo exactly those factors: the step is lr*g/(|g| + eps).
TEST_F(AdamWTest, FirstStepHandComputed) {
  AdamWOptions options;
  options.lr = 0.1;
  options.weight_decay = 0.0;
  options.eps = 0.0;
  const AdamW adamw = Make(options);
  float g[2] = {0.5f, -2.0f};
  float p[2] = {1.0f, 1.0f};
  float m[2] = {0.0f, 0.0f};
  float v[2] = {0.0f, 0.0f};
  ASSERT_TRUE(adamw.Update(1, 1.0f, g, p, m, v, 2).ok());
  EXPECT_FLOAT_EQ(m[0], 0.05f);
  EXPECT_FLOAT_EQ(v[0], 0.00025f);
  EXPECT_NEAR(p[0], 0.9f, 1e-6f);
  EXPECT_NEAR(p[1], 1.1f, 1e-6f);
}

TEST_F(AdamWTest, WeightDecayIsDecoupledFromTheMoments) {
  AdamWOptions options;
  options.lr = 0.5;
  options.weight_decay = 0.2;
  const AdamW adamw = Make(options);
  // Zero gradient: the moments stay zero and the only change is the decay
  // p * (1 - lr*wd). Adam with L2 decay would instead feed wd*p into m and v
  // and move p by about lr.
  float g[3] = {0.0f, 0.0f, 0.0f};
  float p[3] = {4.0f, -3.0f, 0.25f};
  float m[3] = {0.0f, 0.0f, 0.0f};
  float v[3] = {0.0f, 0.0f, 0.0f};
  ASSERT_TRUE(adamw.Update(1, 1.0f, g, p, m, v, 3).ok());
  const float decay = static_cast<float>(1.0 - 0.5 * 0.2);
  EXPECT_EQ(p[0], 4.0f * decay);
  EXPECT_EQ(p[1], -3.0f * decay);
  EXPECT_EQ(p[2], 0.25f * decay);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(m[i], 0.0f);
    EXPECT_EQ(v[i], 0.0f);
  }
}

TEST_F(AdamWTest, BiasCorrectionMakesAConstantGradientStepByLr) {
  // With a constant gradient from zero state, m/bc1 = g and v/bc2 = g^2 at
  // every step, so each step moves p by lr (eps and wd off). Without bias
  // correction step 1 would move by lr * 0.1 / sqrt(0.001) = 3.16 lr.
  AdamWOptions options;
  options.lr = 1e-3;
  options.eps = 0.0;
  options.weight_decay = 0.0;
  const AdamW adamw = Make(options);
  float g = 0.3f, p = 0.0f, m = 0.0f, v = 0.0f;
  for (int64_t step = 1; step <= 20; ++step) {
    const float before = p;
    ASSERT_TRUE(adamw.Update(step, 1.0f, &g, &p, &m, &v, 1).ok());
    EXPECT_NEAR(before - p, 1e-3f, 1e-8f) << "step " << step;
  }
}

TEST_F(AdamWTest, GradScaleScalesTheGradient) {
  const AdamW adamw = Make(AdamWOptions{});
  constexpr int64_t kN = 100;
  const std::vector<float> g = Random(kN, 7, 1.0f);
  std::vector<float> half_g(kN);
  for (int64_t i = 0; i < kN; ++i) half_g[i] = g[i] * 0.5f;  // Exact.
  std::vector<float> p1 = Random(kN, 8, 1.0f), p2 = p1;
  std::vector<float> m1(kN, 0.1f), m2 = m1, v1(kN, 0.2f), v2 = v1;
  ASSERT_TRUE(
      adamw.Update(3, 0.5f, g.data(), p1.data(), m1.data(), v1.data(), kN)
          .ok());
  ASSERT_TRUE(
      adamw.Update(3, 1.0f, half_g.data(), p2.data(), m2.data(), v2.data(), kN)
          .ok());
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), kN * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(m1.data(), m2.data(), kN * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(v1.data(), v2.data(), kN * sizeof(float)), 0);
}

TEST_F(AdamWTest, RejectsNegativeLearningRate) {
  AdamWOptions options;
  options.lr = -1e-3;
  ExpectInvalidNaming(options, "adamw.lr");
  AdamW adamw = Make(AdamWOptions{});
  EXPECT_EQ(adamw.set_lr(-1.0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw.options().lr, AdamWOptions{}.lr);
  EXPECT_TRUE(adamw.set_lr(0.5).ok());
  EXPECT_EQ(adamw.options().lr, 0.5);
}

TEST_F(AdamWTest, RejectsBadHyperParametersNamingTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  AdamWOptions options;
  options.beta1 = 1.0;
  ExpectInvalidNaming(options, "adamw.beta1 must be in [0, 1)");
  options = {};
  options.beta2 = -0.1;
  ExpectInvalidNaming(options, "adamw.beta2 must be in [0, 1)");
  options = {};
  options.beta2 = nan;
  ExpectInvalidNaming(options, "adamw.beta2");
  options = {};
  options.eps = -1e-8;
  ExpectInvalidNaming(options, "adamw.eps");
  options = {};
  options.weight_decay = nan;
  ExpectInvalidNaming(options, "adamw.weight_decay");
  options = {};
  options.lr = std::numeric_limits<double>::infinity();
  ExpectInvalidNaming(options, "adamw.lr");
  EXPECT_EQ(
      AdamW::Create(AdamWOptions{}, static_cast<KernelIsa>(42)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(AdamWTest, RejectsBadUpdateArgumentsAndChangesNothing) {
  const AdamW adamw = Make(AdamWOptions{});
  float g = 1.0f, p = 2.0f, m = 3.0f, v = 4.0f;
  uint16_t out = 0;
  EXPECT_EQ(adamw.Update(0, 1.0f, &g, &p, &m, &v, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw.Update(1, 1.0f, &g, &p, &m, &v, -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw.Update(1, std::nanf(""), &g, &p, &m, &v, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw.Update(1, -1.0f, &g, &p, &m, &v, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adamw.Update(1, 1.0f, &g, &p, nullptr, &v, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      adamw.Update(1, 1.0f, &g, &p, &m, &v, 1, static_cast<DType>(9), &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p, 2.0f);
  EXPECT_EQ(m, 3.0f);
  EXPECT_EQ(v, 4.0f);
  EXPECT_EQ(out, 0);
  // n == 0 with null buffers is a valid no-op.
  EXPECT_TRUE(
      adamw.Update(1, 1.0f, nullptr, nullptr, nullptr, nullptr, 0).ok());
}

TEST_F(AdamWTest, LowPrecisionCopyEqualsConversionOfTheMaster) {
  const AdamW adamw = Make(AdamWOptions{});
  constexpr int64_t kN = 3001;  // Not a multiple of the chunk or vector.
  const std::vector<float> g = Random(kN, 11, 1.0f);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    std::vector<float> p = Random(kN, 12, 3.0f);
    p[5] = std::numeric_limits<float>::quiet_NaN();  // NaN propagates.
    std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
    std::vector<uint32_t> out(kN, 0xdeadbeef);  // Room for fp32.
    ASSERT_TRUE(adamw
                    .Update(1, 1.0f, g.data(), p.data(), m.data(), v.data(), kN,
                            dtype, out.data())
                    .ok());
    ASSERT_TRUE(std::isnan(p[5]));
    for (int64_t i = 0; i < kN; ++i) {
      if (dtype == DType::kFloat32) {
        uint32_t bits;
        std::memcpy(&bits, &p[i], sizeof(bits));
        ASSERT_EQ(out[i], bits) << i;
      } else {
        const uint16_t got = reinterpret_cast<const uint16_t*>(out.data())[i];
        const uint16_t want = dtype == DType::kBFloat16 ? FloatToBFloat16(p[i])
                                                        : FloatToHalf(p[i]);
        ASSERT_EQ(got, want) << DTypeName(dtype) << " element " << i;
      }
    }
    if (dtype != DType::kFloat32) {
      // Nothing written past n elements of 2 bytes.
      EXPECT_EQ(out[kN / 2 + 1], 0xdeadbeefu) << DTypeName(dtype);
    }
  }
}

TEST_F(AdamWTest, EveryInstructionSetGivesTheSameBits) {
  const std::vector<KernelIsa> isas = SupportedKernelIsas();
  ASSERT_FALSE(isas.empty());
  constexpr int64_t kN = 4099;
  AdamWOptions options;
  options.weight_decay = 0.05;
  std::vector<float> ref_p, ref_m, ref_v;
  std::vector<uint16_t> ref_out;
  for (KernelIsa isa : isas) {
    const AdamW adamw = Make(options, isa);
    EXPECT_EQ(adamw.isa(), isa);
    std::vector<float> p = Random(kN, 21, 1.0f);
    std::vector<float> m = Random(kN, 22, 0.1f);
    std::vector<float> v = Random(kN, 23, 0.1f);
    for (float& x : v) x = x * x;
    std::vector<uint16_t> out(kN);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = Random(kN, 30 + step, 1e-3f);
      ASSERT_TRUE(adamw
                      .Update(step, 0.75f, g.data(), p.data(), m.data(),
                              v.data(), kN, DType::kBFloat16, out.data())
                      .ok());
    }
    if (ref_p.empty()) {
      ref_p = p, ref_m = m, ref_v = v, ref_out = out;
      continue;
    }
    EXPECT_EQ(std::memcmp(p.data(), ref_p.data(), kN * 4), 0)
        << KernelIsaName(isa);
    EXPECT_EQ(std::memcmp(m.data(), ref_m.data(), kN * 4), 0)
        << KernelIsaName(isa);
    EXPECT_EQ(std::memcmp(v.data(), ref_v.data(), kN * 4), 0)
        << KernelIsaName(isa);
    EXPECT_EQ(std::memcmp(out.data(), ref_out.data(), kN * 2), 0)
        << KernelIsaName(isa);
  }
}

}  // namespace
}  // namespace shardd::core
