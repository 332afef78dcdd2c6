#include "client/counter_normal.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardd::client {
namespace {

TEST(CounterNormalTest, ElementsArePureFunctionsOfKeyAndIndex) {
  const CounterNormal stream({7, 1, 3});
  std::vector<float> whole(100), tail(40);
  stream.Fill(0, 1.0, absl::MakeSpan(whole));
  stream.Fill(60, 1.0, absl::MakeSpan(tail));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(whole[60 + i], tail[i]);
  EXPECT_EQ(CounterNormal({7, 1, 3}).At(12345), stream.At(12345));
  EXPECT_NE(CounterNormal({7, 1, 4}).At(0), stream.At(0));
  EXPECT_NE(CounterNormal({8, 1, 3}).At(0), stream.At(0));
}

TEST(CounterNormalTest, MixIsSplitMix64) {
  // SplitMix64 seeded with 0: its first output is mix(0).
  EXPECT_EQ(CounterNormal::Mix(0), 0xe220a8397b1dcdafULL);
}

TEST(CounterNormalTest, MomentsAreThoseOfAStandardNormal) {
  const CounterNormal stream({42});
  const int n = 200000;
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < n; ++i) {
    const double z = stream.At(i);
    sum += z;
    sum_sq += z * z;
  }
  // Standard errors: mean 1/sqrt(n) ≈ 0.0022, variance sqrt(2/n) ≈ 0.0032.
  EXPECT_NEAR(sum / n, 0.0, 0.012);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.016);
}

}  // namespace
}  // namespace shardd::client
