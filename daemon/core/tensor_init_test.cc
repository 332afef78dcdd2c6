#include "daemon/core/tensor_init.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

std::vector<float> FillAll(const InitSpec& spec, int64_t numel) {
  std::vector<float> out(numel, -1.0f);
  EXPECT_TRUE(TensorInit::Fill(spec, numel, 0, out.data(), numel).ok());
  return out;
}

class TensorInitTest : public ::testing::Test {};

TEST_F(TensorInitTest, AnySubRangeEqualsTheSameSliceOfAFullFill) {
  constexpr int64_t kNumel = 10007;
  std::string raw(kNumel * 2, '\0');
  for (int64_t i = 0; i < kNumel; ++i) {
    const uint16_t bits = FloatToBFloat16(static_cast<float>(i) * 0.25f - 7.0f);
    std::memcpy(raw.data() + 2 * i, &bits, 2);
  }
  const std::vector<InitSpec> specs = {
      InitSpec::Zeros(), InitSpec::Constant(0.5f),
      InitSpec::Normal(1234, 0.1f, 0.02f), InitSpec::Uniform(99, -0.5f, 0.25f),
      InitSpec::Values(raw, DType::kBFloat16)};
  std::mt19937_64 rng(5);
  for (const InitSpec& spec : specs) {
    const std::vector<float> full = FillAll(spec, kNumel);
    for (int trial = 0; trial < 200; ++trial) {
      int64_t a = static_cast<int64_t>(rng() % (kNumel + 1));
      int64_t b = static_cast<int64_t>(rng() % (kNumel + 1));
      if (a > b) std::swap(a, b);
      std::vector<float> part(b - a + 1, -2.0f);
      ASSERT_TRUE(TensorInit::Fill(spec, kNumel, a, part.data(), b - a).ok());
      for (int64_t i = 0; i < b - a; ++i) {
        ASSERT_EQ(Bits(part[i]), Bits(full[a + i])) << "element " << a + i;
      }
      EXPECT_EQ(part[b - a], -2.0f) << "wrote past the range";
    }
  }
}

TEST_F(TensorInitTest, NormalMeanAndStdOfOneMillionSamplesAreClose) {
  constexpr int64_t kNumel = 1 << 20;
  const std::vector<float> values =
      FillAll(InitSpec::Normal(99, 2.0f, 3.0f), kNumel);
  double sum = 0.0;
  double sum_sq = 0.0;
  for (float v : values) {
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double mean = sum / kNumel;
  const double std = std::sqrt(sum_sq / kNumel - mean * mean);
  // Standard error of the mean: 3/sqrt(2^20) ~ 0.003.
  EXPECT_NEAR(mean, 2.0, 0.015);
  EXPECT_NEAR(std, 3.0, 0.015);
}

TEST_F(TensorInitTest, DifferentSeedsGiveDifferentValues) {
  const std::vector<float> a = FillAll(InitSpec::Normal(1, 0.0f, 1.0f), 1000);
  const std::vector<float> b = FillAll(InitSpec::Normal(2, 0.0f, 1.0f), 1000);
  int equal = 0;
  for (int i = 0; i < 1000; ++i) equal += a[i] == b[i];
  EXPECT_EQ(equal, 0);
}

TEST_F(TensorInitTest, NormalValuesMatchGoldenBits) {
  // Pinned so that a change of generator (which would make a restarted run
  // differ from its first run) fails here.
  EXPECT_EQ(Bits(TensorInit::NormalAt(42, 0.0f, 1.0f, 0)), 0x3ed45626u);
  EXPECT_EQ(Bits(TensorInit::NormalAt(42, 0.0f, 1.0f, 1)), 0xbf6452a8u);
  EXPECT_EQ(Bits(TensorInit::NormalAt(42, 0.0f, 1.0f, 2)), 0x3fdd634eu);
  EXPECT_EQ(Bits(TensorInit::NormalAt(42, 0.0f, 1.0f, 1000)), 0xbef834f4u);
  EXPECT_EQ(Bits(TensorInit::NormalAt(42, 0.0f, 1.0f, 123456789)), 0xbee740edu);
  EXPECT_EQ(Bits(TensorInit::NormalAt(7, 1.5f, 0.02f, 5)), 0x3fc54789u);
}

TEST_F(TensorInitTest, NormalWithZeroStdIsTheMean) {
  for (float v : FillAll(InitSpec::Normal(3, 0.25f, 0.0f), 100)) {
    EXPECT_EQ(v, 0.25f);
  }
}

TEST_F(TensorInitTest, ZerosAndConstantFillTheRange) {
  for (float v : FillAll(InitSpec::Zeros(), 10)) EXPECT_EQ(Bits(v), 0u);
  for (float v : FillAll(InitSpec::Constant(-3.5f), 10)) EXPECT_EQ(v, -3.5f);
}

TEST_F(TensorInitTest, Fp32And16BitValuesAreDecodedExactly) {
  const std::vector<float> source = {1.0f, -2.5f, 3.1415927f, 1e-3f};
  std::string f32(source.size() * 4, '\0');
  std::memcpy(f32.data(), source.data(), f32.size());
  std::string f16(source.size() * 2, '\0');
  for (size_t i = 0; i < source.size(); ++i) {
    const uint16_t bits = FloatToHalf(source[i]);
    std::memcpy(f16.data() + 2 * i, &bits, 2);
  }
  const std::vector<float> a =
      FillAll(InitSpec::Values(f32, DType::kFloat32), 4);
  const std::vector<float> b =
      FillAll(InitSpec::Values(f16, DType::kFloat16), 4);
  for (size_t i = 0; i < source.size(); ++i) {
    EXPECT_EQ(Bits(a[i]), Bits(source[i]));
    EXPECT_EQ(Bits(b[i]), Bits(HalfToFloat(FloatToHalf(source[i]))));
  }
}

TEST_F(TensorInitTest, ValuesOfTheWrongSizeAreRejected) {
  const InitSpec spec =
      InitSpec::Values(std::string(12, '\0'), DType::kFloat32);
  float out[4];
  const absl::Status status = TensorInit::Fill(spec, 4, 0, out, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("values.data"), absl::string_view::npos)
      << status;
  EXPECT_EQ(TensorInit::Validate(spec, 4, DType::kBFloat16).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TensorInitTest, RangeOutsideTheTensorIsRejected) {
  float out[8];
  EXPECT_EQ(TensorInit::Fill(InitSpec::Zeros(), 8, 4, out, 5).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TensorInit::Fill(InitSpec::Zeros(), 8, -1, out, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TensorInit::Fill(InitSpec::Zeros(), 8, 8, out, 0).ok());
}

TEST_F(TensorInitTest, NegativeStdIsRejected) {
  float out[1];
  const absl::Status status =
      TensorInit::Fill(InitSpec::Normal(1, 0.0f, -1.0f), 1, 0, out, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("normal.std"), absl::string_view::npos);
}

TEST_F(TensorInitTest, SharedMemoryMustBeResolvedBeforeFilling) {
  InitSpec spec;
  spec.kind = InitKind::kSharedMemory;
  spec.shared_memory = {"/dev/shm/x", 16, 0, 16};
  float out[4];
  EXPECT_EQ(TensorInit::Fill(spec, 4, 0, out, 4).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(TensorInit::Validate(spec, 4, DType::kFloat32).ok());
  spec.shared_memory.byte_offset = 8;
  EXPECT_EQ(TensorInit::Validate(spec, 4, DType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TensorInitTest, UniformValuesMatchGoldenBitsFromTheDocumentedFormula) {
  // Computed in Python from proto UniformInit's formula, so the comment and
  // the code cannot drift apart.
  EXPECT_EQ(Bits(TensorInit::UniformAt(42, -1.0f, 1.0f, 0)), 0x3ef75cc9u);
  EXPECT_EQ(Bits(TensorInit::UniformAt(42, -1.0f, 1.0f, 1)), 0xbf2e203au);
  EXPECT_EQ(Bits(TensorInit::UniformAt(42, -1.0f, 1.0f, 1000)), 0xbeaa6490u);
  EXPECT_EQ(Bits(TensorInit::UniformAt(42, -1.0f, 1.0f, 123456789)),
            0xbf048c4du);
  EXPECT_EQ(Bits(TensorInit::UniformAt(7, -0.125f, 0.0625f, 5)), 0xbda037e2u);
}

TEST_F(TensorInitTest, UniformValuesLieInLowHighWithTheRightMean) {
  constexpr int64_t kNumel = 1 << 20;
  const std::vector<float> values =
      FillAll(InitSpec::Uniform(3, -0.5f, 1.5f), kNumel);
  double sum = 0.0;
  for (float v : values) {
    ASSERT_GE(v, -0.5f);
    ASSERT_LT(v, 1.5f);
    sum += v;
  }
  EXPECT_NEAR(sum / kNumel, 0.5, 0.005);
  // A range one float wide: every value is low (never high).
  const float low = 1.0f, high = std::nextafter(1.0f, 2.0f);
  for (int64_t k = 0; k < 1000; ++k) {
    ASSERT_EQ(TensorInit::UniformAt(5, low, high, k), low);
  }
}

TEST_F(TensorInitTest, UniformWithoutLowBelowHighIsRejected) {
  EXPECT_EQ(
      TensorInit::Validate(InitSpec::Uniform(1, 1.0f, 1.0f), 4, DType::kFloat32)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      TensorInit::Validate(InitSpec::Uniform(1, NAN, 1.0f), 4, DType::kFloat32)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TensorInit::Validate(InitSpec::Uniform(1, -1.0f, 1.0f), 4,
                                   DType::kFloat32)
                  .ok());
}

}  // namespace
}  // namespace shardd::core
