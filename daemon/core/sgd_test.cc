#include "daemon/core/sgd.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "daemon/core/dtype.h"
#include "daemon/core/kernel_dispatch.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

class SgdTest : public ::testing::Test {
 protected:
  static std::vector<float> Random(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> out(n);
    for (float& x : out) x = dist(rng);
    return out;
  }

  static Sgd Make(const SgdOptions& options, KernelIsa isa = KernelIsa::kAuto) {
    absl::StatusOr<Sgd> sgd = Sgd::Create(options, isa);
    EXPECT_TRUE(sgd.ok()) << sgd.status();
    return *std::move(sgd);
  }

  // PyTorch's SGD in double, for comparison.
  static void Reference(const SgdOptions& o, int64_t step,
                        const std::vector<float>& grad, std::vector<double>& p,
                        std::vector<double>& buf) {
    for (size_t i = 0; i < grad.size(); ++i) {
      double g = grad[i];
      if (o.weight_decay != 0.0) g += o.weight_decay * p[i];
      if (o.momentum != 0.0) {
        buf[i] = step == 1 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
};

TEST_F(SgdTest, PlainStepIsParamMinusLrTimesGrad) {
  SgdOptions options;
  options.lr = 0.25;
  const Sgd sgd = Make(options);
  EXPECT_FALSE(sgd.has_momentum_buffer());
  float g[3] = {1.0f, -2.0f, 0.5f};
  float p[3] = {1.0f, 1.0f, 1.0f};
  ASSERT_TRUE(sgd.Update(1, 1.0f, g, p, nullptr, 3).ok());
  EXPECT_EQ(p[0], 0.75f);
  EXPECT_EQ(p[1], 1.5f);
  EXPECT_EQ(p[2], 0.875f);
}

TEST_F(SgdTest, MomentumBufferStartsAsTheFirstGradient) {
  SgdOptions options;
  options.lr = 0.5;
  options.momentum = 0.9;
  options.dampening = 0.5;  // Not applied on step 1 (PyTorch).
  options.weight_decay = 0.25;
  const Sgd sgd = Make(options);
  float g[2] = {1.0f, -1.0f};
  float p[2] = {2.0f, 4.0f};
  float buf[2] = {123.0f, 456.0f};  // Garbage: step 1 must not read it.
  ASSERT_TRUE(sgd.Update(1, 1.0f, g, p, buf, 2).ok());
  EXPECT_EQ(buf[0], 1.5f);  // g + wd*p = 1 + 0.5
  EXPECT_EQ(buf[1], 0.0f);  // -1 + 1
  EXPECT_EQ(p[0], 1.25f);   // 2 - 0.5*1.5
  EXPECT_EQ(p[1], 4.0f);
}

TEST_F(SgdTest, MatchesDoubleReferenceForEveryVariant) {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {{0.0, 0.0, 0.0, false}, {0.0, 0.0, 0.01, false},
                        {0.9, 0.0, 0.0, false}, {0.9, 0.1, 0.01, false},
                        {0.9, 0.0, 0.0, true},  {0.8, 0.0, 0.05, true}};
  constexpr int64_t kN = 53;
  for (const Case& c : cases) {
    SgdOptions options;
    options.lr = 0.05;
    options.momentum = c.momentum;
    options.dampening = c.dampening;
    options.weight_decay = c.weight_decay;
    options.nesterov = c.nesterov;
    const Sgd sgd = Make(options);
    std::vector<float> p = Random(kN, 1), buf(kN, 0.0f);
    std::vector<double> rp(p.begin(), p.end()), rbuf(kN, 0.0);
    for (int64_t step = 1; step <= 5; ++step) {
      const std::vector<float> g = Random(kN, 10 + step);
      ASSERT_TRUE(
          sgd.Update(step, 1.0f, g.data(), p.data(), buf.data(), kN).ok());
      Reference(options, step, g, rp, rbuf);
    }
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(p[i], rp[i], 1e-5 * (1 + std::abs(rp[i])))
          << "momentum " << c.momentum << " nesterov " << c.nesterov << " i "
          << i;
      if (c.momentum != 0.0) {
        ASSERT_NEAR(buf[i], rbuf[i], 1e-5 * (1 + std::abs(rbuf[i])));
      }
    }
  }
}

TEST_F(SgdTest, RejectsNegativeLearningRate) {
  SgdOptions options;
  options.lr = -0.1;
  const absl::StatusOr<Sgd> sgd = Sgd::Create(options);
  ASSERT_FALSE(sgd.ok());
  EXPECT_EQ(sgd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(sgd.status().message().find("sgd.lr"), std::string::npos);
}

TEST_F(SgdTest, RejectsBadHyperParametersNamingTheField) {
  SgdOptions options;
  options.momentum = -0.5;
  absl::StatusOr<Sgd> sgd = Sgd::Create(options);
  ASSERT_FALSE(sgd.ok());
  EXPECT_NE(sgd.status().message().find("sgd.momentum"), std::string::npos);

  options = {};
  options.nesterov = true;  // Without momentum.
  sgd = Sgd::Create(options);
  ASSERT_FALSE(sgd.ok());
  EXPECT_NE(sgd.status().message().find("sgd.nesterov"), std::string::npos);

  options = {};
  options.momentum = 0.9;
  options.dampening = 0.1;
  options.nesterov = true;
  EXPECT_FALSE(Sgd::Create(options).ok());

  options = {};
  options.weight_decay = -1.0;
  sgd = Sgd::Create(options);
  ASSERT_FALSE(sgd.ok());
  EXPECT_NE(sgd.status().message().find("sgd.weight_decay"), std::string::npos);
}

TEST_F(SgdTest, RejectsMissingMomentumBufferAndChangesNothing) {
  SgdOptions options;
  options.momentum = 0.9;
  const Sgd sgd = Make(options);
  float g = 1.0f, p = 2.0f;
  EXPECT_EQ(sgd.Update(2, 1.0f, &g, &p, nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sgd.Update(0, 1.0f, &g, &p, &p, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p, 2.0f);
}

TEST_F(SgdTest, LowPrecisionCopyEqualsConversionOfTheMaster) {
  SgdOptions options;
  options.momentum = 0.9;
  const Sgd sgd = Make(options);
  constexpr int64_t kN = 2500;
  const std::vector<float> g = Random(kN, 3);
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<float> p = Random(kN, 4), buf(kN);
    std::vector<uint16_t> out(kN);
    ASSERT_TRUE(sgd.Update(1, 1.0f, g.data(), p.data(), buf.data(), kN, dtype,
                           out.data())
                    .ok());
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_EQ(out[i], dtype == DType::kBFloat16 ? FloatToBFloat16(p[i])
                                                  : FloatToHalf(p[i]))
          << i;
    }
  }
}

TEST_F(SgdTest, EveryInstructionSetGivesTheSameBits) {
  SgdOptions options;
  options.lr = 0.01;
  options.momentum = 0.9;
  options.weight_decay = 0.01;
  options.nesterov = true;
  constexpr int64_t kN = 1031;
  std::vector<float> ref_p, ref_buf;
  for (KernelIsa isa : SupportedKernelIsas()) {
    const Sgd sgd = Make(options, isa);
    std::vector<float> p = Random(kN, 5), buf(kN);
    for (int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> g = Random(kN, 50 + step);
      ASSERT_TRUE(
          sgd.Update(step, 0.5f, g.data(), p.data(), buf.data(), kN).ok());
    }
    if (ref_p.empty()) {
      ref_p = p, ref_buf = buf;
      continue;
    }
    EXPECT_EQ(std::memcmp(p.data(), ref_p.data(), kN * 4), 0)
        << KernelIsaName(isa);
    EXPECT_EQ(std::memcmp(buf.data(), ref_buf.data(), kN * 4), 0)
        << KernelIsaName(isa);
  }
}

}  // namespace
}  // namespace shardd::core
