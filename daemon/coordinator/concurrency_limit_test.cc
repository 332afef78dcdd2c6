#include "daemon/coordinator/concurrency_limit.h"

#include <thread>

#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

TEST(ConcurrencyLimitTest, GivesAtMostTheLimitAndTimesOutPastIt) {
  ConcurrencyLimit limit(2);
  ASSERT_TRUE(limit.Acquire(MonoTime::InfiniteFuture()));
  ASSERT_TRUE(limit.Acquire(MonoTime::InfiniteFuture()));
  EXPECT_FALSE(limit.Acquire(MonoNow() + absl::Milliseconds(10)));
  limit.Release();
  EXPECT_TRUE(limit.Acquire(MonoNow() + absl::Milliseconds(10)));
}

TEST(ConcurrencyLimitTest, AReleaseWakesAWaiterBeforeItsDeadline) {
  ConcurrencyLimit limit(1);
  ASSERT_TRUE(limit.Acquire(MonoTime::InfiniteFuture()));
  bool got = false;
  // A deadline far beyond the test's timeout: only the release can end
  // the wait in time.
  std::thread waiter([&] { got = limit.Acquire(MonoNow() + absl::Hours(1)); });
  limit.Release();
  waiter.join();
  EXPECT_TRUE(got);
}

TEST(ConcurrencyLimitTest, SlotReleasesOnlyWhatItHeld) {
  ConcurrencyLimit limit(1);
  {
    ConcurrencyLimit::Slot a(limit, MonoTime::InfiniteFuture());
    EXPECT_TRUE(a.held());
    ConcurrencyLimit::Slot b(limit, MonoNow() + absl::Milliseconds(5));
    EXPECT_FALSE(b.held());
  }
  // Both gone: exactly one slot is free again.
  EXPECT_TRUE(limit.Acquire(MonoNow() + absl::Milliseconds(5)));
  EXPECT_FALSE(limit.Acquire(MonoNow() + absl::Milliseconds(5)));
}

}  // namespace
}  // namespace shardd::coordinator
