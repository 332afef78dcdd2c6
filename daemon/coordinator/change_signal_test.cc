#include "daemon/coordinator/change_signal.h"

#include <thread>

#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

TEST(ChangeSignalTest, AwaitReturnsAtOnceWhenTheCounterIsAlreadyPast) {
  ChangeSignal signal;
  signal.Publish(3, 1);
  const ChangeSignal::Versions v =
      signal.Await(/*scoped=*/false, 2, MonoTime::InfiniteFuture());
  EXPECT_EQ(v.any, 3);
  EXPECT_EQ(v.scoped, 1);
}

TEST(ChangeSignalTest, AwaitTimesOutOnTheMonotonicDeadline) {
  ChangeSignal signal;
  signal.Publish(1, 1);
  const ChangeSignal::Versions v =
      signal.Await(/*scoped=*/true, 1, MonoNow() + absl::Milliseconds(20));
  EXPECT_EQ(v.scoped, 1);  // Nothing moved.
  EXPECT_FALSE(v.shut_down);
}

TEST(ChangeSignalTest, AScopedWaiterWakesForTheScopedCounterOnly) {
  ChangeSignal signal;
  ChangeSignal::Versions seen;
  std::thread waiter([&] {
    seen = signal.Await(/*scoped=*/true, 0, MonoTime::InfiniteFuture());
  });
  // `any` moving alone leaves a scoped waiter asleep; then scoped moves.
  signal.Publish(5, 0);
  signal.Publish(6, 1);
  waiter.join();
  EXPECT_EQ(seen.scoped, 1);
  EXPECT_GE(seen.any, 6);
}

TEST(ChangeSignalTest, CountersNeverGoBack) {
  ChangeSignal signal;
  signal.Publish(4, 2);
  signal.Publish(3, 1);
  const ChangeSignal::Versions v = signal.Current();
  EXPECT_EQ(v.any, 4);
  EXPECT_EQ(v.scoped, 2);
}

TEST(ChangeSignalTest, ShutdownWakesEveryWaiter) {
  ChangeSignal signal;
  ChangeSignal::Versions a, b;
  std::thread wa([&] {
    a = signal.Await(/*scoped=*/false, 0, MonoTime::InfiniteFuture());
  });
  std::thread wb([&] {
    b = signal.Await(/*scoped=*/true, 0, MonoTime::InfiniteFuture());
  });
  signal.Shutdown();
  wa.join();
  wb.join();
  EXPECT_TRUE(a.shut_down);
  EXPECT_TRUE(b.shut_down);
}

}  // namespace
}  // namespace shardd::coordinator
