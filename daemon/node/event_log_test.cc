#include "daemon/node/event_log.h"

#include <thread>

#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

v1::TrainerEvent Committed(int64_t step) {
  v1::TrainerEvent e;
  e.mutable_step_committed()->set_step(step);
  return e;
}

TEST(EventLogTest, NumbersEventsAndReturnsThoseAfterASequence) {
  EventLog log;
  EXPECT_EQ(log.Append(Committed(1)), 1);
  EXPECT_EQ(log.Append(Committed(2)), 2);
  EXPECT_EQ(log.Append(Committed(3)), 3);
  std::vector<v1::TrainerEvent> out;
  EXPECT_TRUE(log.WaitAfter(1, MonoNow(), &out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sequence(), 2);
  EXPECT_EQ(out[1].step_committed().step(), 3);
  EXPECT_GT(out[0].time_unix_ms(), 0);
}

TEST(EventLogTest, KeepsOnlyTheNewestAndShowsTheGap) {
  EventLog log(2);
  for (int s = 1; s <= 5; ++s) log.Append(Committed(s));
  EXPECT_EQ(log.oldest_sequence(), 4);
  EXPECT_EQ(log.last_sequence(), 5);
  std::vector<v1::TrainerEvent> out;
  log.WaitAfter(1, MonoNow(), &out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sequence(), 4);  // 2 and 3 are gone: a gap.
}

TEST(EventLogTest, WaitReturnsAtTheDeadlineWithNothing) {
  EventLog log;
  std::vector<v1::TrainerEvent> out;
  EXPECT_TRUE(log.WaitAfter(0, MonoNow() + absl::Milliseconds(20), &out));
  EXPECT_TRUE(out.empty());
}

TEST(EventLogTest, AWaiterIsWokenByAnAppendAndByClose) {
  EventLog log;
  std::vector<v1::TrainerEvent> out;
  std::thread appender([&] { log.Append(Committed(7)); });
  EXPECT_TRUE(log.WaitAfter(0, MonoNow() + absl::Seconds(30), &out));
  appender.join();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].step_committed().step(), 7);
  std::thread closer([&] { log.Close(); });
  std::vector<v1::TrainerEvent> none;
  EXPECT_FALSE(log.WaitAfter(1, MonoNow() + absl::Seconds(30), &none));
  closer.join();
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace shardd::node
