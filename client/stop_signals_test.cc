#include "client/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "absl/time/time.h"
#include "daemon/core/mono_notification.h"
#include "gtest/gtest.h"

namespace shardd::client {
namespace {

TEST(StopSignalsTest, SigtermSentToTheProcessCallsTheCallbackOnce) {
  MonoNotification called;
  std::atomic<int> calls{0};
  std::atomic<int> seen{0};
  StopSignals signals([&](int signal_number) {
    seen = signal_number;
    ++calls;
    called.Notify();
  });
  ASSERT_EQ(kill(getpid(), SIGTERM), 0);
  ASSERT_TRUE(called.WaitFor(absl::Seconds(10)));
  EXPECT_EQ(seen.load(), SIGTERM);
  EXPECT_EQ(calls.load(), 1);
}

TEST(StopSignalsTest, SigintCallsTheCallback) {
  MonoNotification called;
  std::atomic<int> seen{0};
  StopSignals signals([&](int signal_number) {
    seen = signal_number;
    called.Notify();
  });
  ASSERT_EQ(kill(getpid(), SIGINT), 0);
  ASSERT_TRUE(called.WaitFor(absl::Seconds(10)));
  EXPECT_EQ(seen.load(), SIGINT);
}

TEST(StopSignalsTest, DestroyedWithoutASignalNeverCallsTheCallback) {
  std::atomic<int> calls{0};
  {
    StopSignals signals([&](int) { ++calls; });
  }
  EXPECT_EQ(calls.load(), 0);
}

}  // namespace
}  // namespace shardd::client
