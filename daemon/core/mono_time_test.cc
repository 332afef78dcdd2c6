#include "daemon/core/mono_time.h"

#include "gtest/gtest.h"

namespace shardd {
namespace {

TEST(MonoTimeTest, ArithmeticFollowsAbslTime) {
  const MonoTime t0 = MonoTime::FromOrigin(absl::Seconds(10));
  const MonoTime t1 = t0 + absl::Milliseconds(1500);
  EXPECT_EQ(t1 - t0, absl::Milliseconds(1500));
  EXPECT_EQ(t1 - absl::Milliseconds(1500), t0);
  EXPECT_LT(t0, t1);
  EXPECT_GE(t1, t0);
  EXPECT_NE(t0, t1);
  MonoTime t = t0;
  t += absl::Seconds(1);
  t -= absl::Seconds(2);
  EXPECT_EQ(t, MonoTime::FromOrigin(absl::Seconds(9)));
}

TEST(MonoTimeTest, InfinitiesSaturate) {
  const MonoTime never = MonoTime::InfiniteFuture();
  EXPECT_EQ(never + absl::Hours(1), never);
  EXPECT_EQ(never - absl::Hours(1), never);
  EXPECT_GT(never, MonoTime::FromOrigin(absl::Hours(1'000'000)));
  EXPECT_LT(MonoTime::InfinitePast(), MonoTime());
  EXPECT_EQ(never - MonoTime::FromOrigin(absl::Seconds(1)),
            absl::InfiniteDuration());
  EXPECT_EQ(FormatMonoTime(never), "never");
}

TEST(MonoTimeTest, NowNeverGoesBack) {
  MonoTime last = MonoNow();
  for (int i = 0; i < 10000; ++i) {
    const MonoTime now = MonoNow();
    ASSERT_GE(now, last);
    last = now;
  }
}

}  // namespace
}  // namespace shardd
