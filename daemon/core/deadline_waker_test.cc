#include "daemon/core/deadline_waker.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd {
namespace {

TEST(DeadlineWakerTest, AwaitUntilReturnsFalseOnceTheDeadlinePassed) {
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  const MonoTime start = MonoNow();
  EXPECT_FALSE(
      AwaitUntil(&mu, absl::Condition(&flag), start + absl::Milliseconds(50)));
  EXPECT_GE(MonoNow() - start, absl::Milliseconds(50));
}

TEST(DeadlineWakerTest, AwaitUntilReturnsTrueWhenTheConditionHolds) {
  absl::Mutex mu;
  bool flag = false;
  std::thread setter([&] {
    absl::MutexLock lock(&mu);
    flag = true;
  });
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        AwaitUntil(&mu, absl::Condition(&flag), MonoNow() + absl::Minutes(5)));
  }
  setter.join();
}

TEST(DeadlineWakerTest, PastDeadlineAndInfiniteDeadline) {
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(
      AwaitUntil(&mu, absl::Condition(&flag), MonoNow() - absl::Seconds(1)));
  flag = true;
  EXPECT_TRUE(
      AwaitUntil(&mu, absl::Condition(&flag), MonoTime::InfiniteFuture()));
}

// Many waiters on one mutex that another thread keeps taking (so the
// waker's TryLock often fails and it must rely on that thread's Unlock or
// retry), each with its own deadline: every one wakes, none before its
// deadline, and the waker never touches a waiter's mutex after it returned
// (each round's mutex is destroyed right after its waiters return: ASan or
// a crash would show a use after free).
TEST(DeadlineWakerTest, EveryWaiterWakesUnderContention) {
  for (int round = 0; round < 20; ++round) {
    auto mu = std::make_unique<absl::Mutex>();
    bool never = false;
    std::atomic<bool> stop{false};
    std::thread busy([&] {
      while (!stop.load()) {
        absl::MutexLock lock(mu.get());
      }
    });
    std::vector<std::thread> waiters;
    std::atomic<int> early{0};
    for (int i = 0; i < 8; ++i) {
      waiters.emplace_back([&, i] {
        const MonoTime deadline = MonoNow() + absl::Milliseconds(1 + i % 4);
        absl::MutexLock lock(mu.get());
        if (AwaitUntil(mu.get(), absl::Condition(&never), deadline)) ++early;
        if (MonoNow() < deadline) ++early;
      });
    }
    for (auto& w : waiters) w.join();
    stop = true;
    busy.join();
    EXPECT_EQ(early.load(), 0);
    mu.reset();
  }
}

TEST(DeadlineWakerTest, SleepUntilKeepsTheMonotonicSchedule) {
  const MonoTime start = MonoNow();
  SleepUntil(start + absl::Milliseconds(20));
  EXPECT_GE(MonoNow() - start, absl::Milliseconds(20));
}

TEST(DeadlineWakerTest, MonoNotificationWakesWaitersAndTimesOut) {
  MonoNotification n;
  EXPECT_FALSE(n.WaitFor(absl::Milliseconds(10)));
  std::thread t([&] { n.Notify(); });
  EXPECT_TRUE(n.WaitUntil(MonoNow() + absl::Minutes(5)));
  t.join();
  EXPECT_TRUE(n.HasBeenNotified());
  EXPECT_TRUE(n.WaitFor(absl::ZeroDuration()));
}

}  // namespace
}  // namespace shardd
