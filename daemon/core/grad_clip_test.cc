#include "daemon/core/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/kernel_dispatch.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

// Values spread over many binades, subnormals and near-FLT_MAX included.
std::vector<float> WideRandom(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-140, 60);
  std::vector<float> out(n);
  for (float& x : out) x = std::ldexp(mantissa(rng), exponent(rng));
  return out;
}

GradNormPartial PartialOf(const float* data, int64_t n) {
  absl::StatusOr<GradNormPartial> partial = GradClipper::ShardPartial(data, n);
  EXPECT_TRUE(partial.ok()) << partial.status();
  return *partial;
}

TEST(GradClipTest, ExactNormOfAPythagoreanTriple) {
  const float g[2] = {3.0f, -4.0f};
  const GradClipper clipper = *GradClipper::Create(1.0);
  const absl::StatusOr<ClipResult> result = clipper.Finish({PartialOf(g, 2)});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->total_norm, 5.0);
  EXPECT_TRUE(result->clipped);
  EXPECT_EQ(result->scale, static_cast<float>(1.0 / (5.0 + 1e-6)));
}

TEST(GradClipTest, PaddingDoesNotCountTowardsNorm) {
  // A shard of 3 real elements stored with 5 elements of padding, poisoned.
  std::vector<float> shard = {1.0f, 2.0f, 2.0f};
  shard.push_back(std::numeric_limits<float>::quiet_NaN());
  shard.push_back(std::numeric_limits<float>::infinity());
  shard.push_back(1e30f);
  shard.push_back(-3.0e38f);
  shard.push_back(7.0f);
  const GradNormPartial partial = PartialOf(shard.data(), 3);
  EXPECT_EQ(partial.elements, 3);
  EXPECT_EQ(partial.nonfinite, 0);
  const GradClipper clipper = *GradClipper::Create(10.0);
  const absl::StatusOr<ClipResult> result = clipper.Finish({partial});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->total_norm, 3.0);
  EXPECT_FALSE(result->clipped);
  EXPECT_EQ(result->scale, 1.0f);
}

TEST(GradClipTest, ResultIsIndependentOfTheSplitBitForBit) {
  constexpr int64_t kN = 200003;  // Crosses the internal flush boundary.
  const std::vector<float> g = WideRandom(kN, 1);
  const GradNormPartial whole = PartialOf(g.data(), kN);
  const GradClipper clipper = *GradClipper::Create(1e-3);
  const ClipResult want = *clipper.Finish({whole});

  std::mt19937 rng(2);
  for (int trial = 0; trial < 20; ++trial) {
    // Random cut points -> shards, some of them empty.
    std::uniform_int_distribution<int64_t> cut(0, kN);
    std::vector<int64_t> cuts = {0, kN};
    for (int i = 0; i < 1 + trial % 7; ++i) cuts.push_back(cut(rng));
    std::sort(cuts.begin(), cuts.end());
    std::vector<GradNormPartial> partials;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      partials.push_back(PartialOf(g.data() + cuts[i], cuts[i + 1] - cuts[i]));
    }
    GradNormPartial merged;
    for (auto it = partials.rbegin(); it != partials.rend(); ++it) {
      ASSERT_TRUE(GradClipper::Merge(*it, &merged).ok());  // Reverse order.
    }
    EXPECT_EQ(merged.limbs, whole.limbs);
    EXPECT_EQ(merged.elements, kN);
    const ClipResult got = *clipper.Finish(partials);
    EXPECT_EQ(std::memcmp(&got.total_norm, &want.total_norm, sizeof(double)),
              0);
    EXPECT_EQ(got.scale, want.scale);
  }
}

TEST(GradClipTest, MatchesALongDoubleReference) {
  constexpr int64_t kN = 100000;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1e-2f);
  std::vector<float> g(kN);
  long double ref = 0.0L;
  for (float& x : g) {
    x = dist(rng);
    ref += static_cast<long double>(x) * x;
  }
  const GradNormPartial partial = PartialOf(g.data(), kN);
  EXPECT_NEAR(partial.SumOfSquares(), static_cast<double>(ref),
              1e-14 * static_cast<double>(ref));
}

TEST(GradClipTest, ExtremeMagnitudesAreExact) {
  const float max = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  // FLT_MAX^2 does not overflow the accumulator (nor double).
  std::vector<float> big(1000, max);
  const double big_sum = PartialOf(big.data(), 1000).SumOfSquares();
  EXPECT_TRUE(std::isfinite(big_sum));
  EXPECT_NEAR(big_sum, 1000.0 * double{max} * max, 1e-12 * big_sum);
  // The smallest subnormal squared (2^-298) is still counted exactly.
  const float small[2] = {tiny, -tiny};
  EXPECT_EQ(PartialOf(small, 2).SumOfSquares(), std::ldexp(2.0, -298));
  // A huge and a tiny square do not absorb each other in the integer.
  const float mixed[2] = {max, tiny};
  const GradNormPartial m = PartialOf(mixed, 2);
  EXPECT_EQ(m.limbs[0], 4u);  // 2^-298 in units of 2^-300.
}

TEST(GradClipTest, NoClippingBelowMaxNormOrWhenDisabled) {
  const float g[1] = {0.5f};
  const absl::StatusOr<ClipResult> below =
      GradClipper::Create(1.0)->Finish({PartialOf(g, 1)});
  ASSERT_TRUE(below.ok());
  EXPECT_FALSE(below->clipped);
  EXPECT_EQ(below->scale, 1.0f);

  const float big[1] = {1e6f};
  for (double disabled : {0.0, -1.0}) {
    const absl::StatusOr<ClipResult> off =
        GradClipper::Create(disabled)->Finish({PartialOf(big, 1)});
    ASSERT_TRUE(off.ok());
    EXPECT_FALSE(off->clipped);
    EXPECT_EQ(off->scale, 1.0f);
    EXPECT_EQ(off->total_norm, 1e6);  // Still reported.
  }
  // No partials at all: norm 0, nothing to clip.
  const absl::StatusOr<ClipResult> empty = GradClipper::Create(1.0)->Finish({});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->total_norm, 0.0);
  EXPECT_EQ(empty->scale, 1.0f);
}

TEST(GradClipTest, NonFiniteGradientIsAnError) {
  const GradClipper clipper = *GradClipper::Create(1.0);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    -std::numeric_limits<float>::infinity()}) {
    const float g[3] = {1.0f, bad, 2.0f};
    const GradNormPartial partial = PartialOf(g, 3);
    EXPECT_EQ(partial.nonfinite, 1);
    const absl::StatusOr<ClipResult> result =
        clipper.Finish({PartialOf(g, 1), partial});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(result.status().message().find("1 of 4"), std::string::npos)
        << result.status();
  }
}

TEST(GradClipTest, RejectsBadArguments) {
  const absl::StatusOr<GradClipper> nan =
      GradClipper::Create(std::numeric_limits<double>::quiet_NaN());
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("grad_clip.max_norm"),
            std::string::npos);
  const float g = 1.0f;
  EXPECT_EQ(GradClipper::ShardPartial(&g, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GradClipper::ShardPartial(nullptr, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(GradClipper::ShardPartial(nullptr, 0).ok());
  GradNormPartial huge;
  huge.elements = INT64_MAX;
  GradNormPartial one = PartialOf(&g, 1);
  EXPECT_EQ(GradClipper::Merge(one, &huge).code(),
            absl::StatusCode::kOutOfRange);
}

// The bins as a GPU kernel would fill them, element by element with 128-bit
// additions.
SquareBins BinsOf(const std::vector<float>& g) {
  SquareBins bins;
  for (float v : g) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    const uint32_t e = (bits >> 23) & 0xffu;
    const uint64_t m =
        (bits & 0x7fffffu) | (static_cast<uint32_t>(e != 0) << 23);
    ++bins.elements;
    if (e == 0xffu) {
      ++bins.nonfinite;
      continue;
    }
    const uint64_t before = bins.lo[e];
    bins.lo[e] += m * m;
    bins.hi[e] += bins.lo[e] < before;
  }
  return bins;
}

// Binned squares fold into the same limbs as Accumulate over the same
// elements: across every exponent (subnormals, zeros, the largest finite
// values), with bins whose sums overflow 64 bits, and with NaN/inf counted.
TEST(GradClipTest, BinnedSquaresEqualAccumulateExactly) {
  std::mt19937 rng(7);
  std::vector<float> g(200000);
  for (size_t i = 0; i < g.size(); ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 3 == 0) bits = (bits & 0x807fffffu) | (0x7eu << 23);  // Same exp.
    if (i % 11 == 0) bits &= 0x807fffffu;  // Subnormal or zero.
    if (i % 97 == 0) bits |= 0x7f800000u;  // NaN or infinity.
    std::memcpy(&g[i], &bits, sizeof(bits));
  }
  // 2^17 maximal significands in one exponent: their sum needs 65 bits.
  const float big = std::nextafter(2.0f, 0.0f);  // M = 2^24 - 1, e = 127.
  g.insert(g.end(), size_t{1} << 17, big);
  const SquareBins bins = BinsOf(g);
  ASSERT_GT(bins.hi[127], 0u);
  GradNormPartial from_bins;
  ASSERT_TRUE(GradClipper::AddBins(bins, &from_bins).ok());
  GradNormPartial direct;
  ASSERT_TRUE(GradClipper::Accumulate(g.data(), g.size(), &direct).ok());
  EXPECT_EQ(from_bins.limbs, direct.limbs);
  EXPECT_EQ(from_bins.elements, direct.elements);
  EXPECT_EQ(from_bins.nonfinite, direct.nonfinite);
  EXPECT_GT(direct.nonfinite, 0);
}

TEST(GradClipTest, AddBinsRejectsInconsistentCounts) {
  SquareBins bins;
  bins.elements = 1;
  bins.nonfinite = 2;
  GradNormPartial p;
  EXPECT_EQ(GradClipper::AddBins(bins, &p).code(),
            absl::StatusCode::kInvalidArgument);
  bins.nonfinite = -1;
  EXPECT_EQ(GradClipper::AddBins(bins, &p).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.elements, 0);
  EXPECT_EQ(GradClipper::AddBins(SquareBins{}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// Inputs that exercise both ways the vector kernels sum a block (the
// fixed-point window and the exponent bins) and the edges between them.
std::vector<std::pair<std::string, std::vector<float>>> KernelInputs() {
  constexpr int64_t kN = 150000;  // Over two flush chunks of 2^16.
  std::vector<std::pair<std::string, std::vector<float>>> out;
  std::mt19937 rng(11);
  out.emplace_back("wide", WideRandom(kN, 5));
  {
    // Gradient-like: one binade range per block, zeros sprinkled in.
    std::normal_distribution<float> dist(0.0f, 1e-3f);
    std::vector<float> g(kN);
    for (size_t i = 0; i < g.size(); ++i) g[i] = i % 13 == 0 ? 0.0f : dist(rng);
    out.emplace_back("normal", g);
  }
  {
    // Every biased exponent 0..255 with random signs and significands,
    // including +-0, subnormals, the largest finite value, inf and NaN.
    std::vector<float> g;
    for (uint32_t e = 0; e < 256; ++e) {
      for (int k = 0; k < 40; ++k) {
        uint32_t fraction = static_cast<uint32_t>(rng()) & 0x7fffffu;
        if (k == 0) fraction = 0;
        if (k == 1) fraction = 0x7fffffu;
        const uint32_t sign = static_cast<uint32_t>(k % 2) << 31;
        g.push_back(FromBits(sign | (e << 23) | fraction));
      }
    }
    out.emplace_back("every_exponent", g);
    std::vector<float> finite;
    for (float x : g) {
      if (std::isfinite(x)) finite.push_back(x);
    }
    out.emplace_back("every_finite_exponent", finite);
  }
  // Blocks at the edge of the window: exponents top and top-28 fit, top-29
  // does not (by one binade), at several heights including the subnormals.
  for (uint32_t top : {30u, 28u, 127u, 200u, 254u}) {
    for (uint32_t span : {28u, 29u}) {
      std::vector<float> g(5000);
      for (size_t i = 0; i < g.size(); ++i) {
        uint32_t e = top - static_cast<uint32_t>(rng() % (span + 1));
        if (e > 254 || e < 1) e = top;  // Stays finite, or the subnormals.
        if (top <= span && i % 5 == 0) e = 0;
        g[i] =
            FromBits((static_cast<uint32_t>(rng()) & 0x807fffffu) | (e << 23));
      }
      out.emplace_back(absl::StrCat("edge_top", top, "_span", span), g);
    }
  }
  {
    // The largest sums a window block can hold: identical maximal squares.
    out.emplace_back("max_finite",
                     std::vector<float>(kN, std::numeric_limits<float>::max()));
    out.emplace_back("max_significand",
                     std::vector<float>(kN, std::nextafter(2.0f, 0.0f)));
    out.emplace_back("zeros", std::vector<float>(5000, -0.0f));
    out.emplace_back(
        "smallest_subnormal",
        std::vector<float>(5000, std::numeric_limits<float>::denorm_min()));
  }
  {
    // Narrow blocks with one tiny or non-finite element in some of them.
    std::vector<float> g(kN);
    std::uniform_real_distribution<float> unit(0.5f, 1.0f);
    for (float& x : g) x = unit(rng);
    g[100] = 1e-30f;
    g[5000] = std::numeric_limits<float>::denorm_min();
    g[70000] = std::numeric_limits<float>::infinity();
    g[100000] = std::numeric_limits<float>::quiet_NaN();
    out.emplace_back("narrow_with_outliers", g);
  }
  return out;
}

GradNormPartial PartialWith(KernelIsa isa, const float* data, int64_t n) {
  GradNormPartial partial;
  const absl::Status s = GradClipper::Accumulate(data, n, &partial, isa);
  EXPECT_TRUE(s.ok()) << s;
  return partial;
}

// Every instruction set (and the default's choice) adds the same bits as the
// scalar reference, for every length around the vector widths, the window
// block (2048) and the flush chunk (2^16), from unaligned starts.
TEST(GradClipTest, EveryIsaEqualsTheScalarReference) {
  std::vector<KernelIsa> isas = SupportedKernelIsas();
  isas.push_back(KernelIsa::kAuto);
  const std::vector<int64_t> lengths = {
      0,  1,  3,    4,    7,    8,    9,     15,    16,    17,
      31, 33, 2047, 2048, 2049, 4111, 65535, 65536, 65537, 131073};
  for (const auto& [name, data] : KernelInputs()) {
    for (int64_t length : lengths) {
      for (int64_t start : {0, 1, 3}) {
        if (start + length > static_cast<int64_t>(data.size())) continue;
        const float* g = data.data() + start;
        const GradNormPartial want =
            PartialWith(KernelIsa::kBaseline, g, length);
        for (KernelIsa isa : isas) {
          const GradNormPartial got = PartialWith(isa, g, length);
          const std::string where =
              absl::StrCat(name, " length ", length, " start ", start, " isa ",
                           KernelIsaName(isa));
          ASSERT_EQ(got.limbs, want.limbs) << where;
          ASSERT_EQ(got.nonfinite, want.nonfinite) << where;
          ASSERT_EQ(got.elements, length) << where;
        }
      }
    }
  }
}

// The whole input at once, then in pieces that split blocks anywhere: the
// vector kernels' partials merge to the reference's bits.
TEST(GradClipTest, EveryIsaIsIndependentOfHowTheInputIsCut) {
  for (const auto& [name, data] : KernelInputs()) {
    const int64_t n = static_cast<int64_t>(data.size());
    const GradNormPartial want =
        PartialWith(KernelIsa::kBaseline, data.data(), n);
    for (KernelIsa isa : SupportedKernelIsas()) {
      GradNormPartial pieces;
      for (int64_t begin = 0, step = 1; begin < n; begin += step, step *= 3) {
        const int64_t len = std::min(step, n - begin);
        ASSERT_TRUE(
            GradClipper::Accumulate(data.data() + begin, len, &pieces, isa)
                .ok());
      }
      EXPECT_EQ(pieces.limbs, want.limbs) << name << " " << KernelIsaName(isa);
      EXPECT_EQ(pieces.nonfinite, want.nonfinite) << name;
      EXPECT_EQ(pieces.elements, n) << name;
    }
  }
}

TEST(GradClipTest, AccumulateRejectsAnInvalidIsa) {
  const float g = 1.0f;
  GradNormPartial partial;
  const absl::Status s =
      GradClipper::Accumulate(&g, 1, &partial, static_cast<KernelIsa>(42));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grad_clip.isa"), std::string::npos) << s;
  EXPECT_EQ(partial.elements, 0);
}

}  // namespace
}  // namespace shardd::core
