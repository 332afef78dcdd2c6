#include "daemon/node/checkpoint_stager.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

// Shard memory whose reads fail (a device copy that errs).
class FailingMemory : public recovery::ShardMemory {
 public:
  bool host_addressable() const override { return false; }
  absl::Status Read(uint8_t*, const uint8_t*, int64_t) const override {
    return absl::InternalError("device read failed");
  }
  absl::Status Write(uint8_t*, const uint8_t*, int64_t) const override {
    return absl::InternalError("device write failed");
  }
};

class CheckpointStagerTest : public ::testing::Test {
 protected:
  // A stager whose writes record the staged bytes and then wait for
  // `release_` (when `block_`).
  std::unique_ptr<CheckpointStager> NewStager() {
    return std::make_unique<CheckpointStager>(CheckpointStager::Options{
        .admit =
            [this](int64_t bytes) {
              absl::MutexLock lock(&mu_);
              admitted_.push_back(bytes);
              return refuse_ ? absl::ResourceExhaustedError("no memory")
                             : absl::OkStatus();
            },
        .held =
            [this](int64_t bytes) {
              absl::MutexLock lock(&mu_);
              held_ = bytes;
            },
        .write =
            [this](const CheckpointStager::Job& job) {
              std::string bytes;
              for (const recovery::SectionSource& s : job.sources) {
                bytes.append(reinterpret_cast<const char*>(s.data),
                             s.section.byte_length());
              }
              {
                absl::MutexLock lock(&mu_);
                written_.push_back(bytes);
                steps_.push_back(job.step);
              }
              if (!writing_.HasBeenNotified()) writing_.Notify();
              if (block_) release_.WaitForNotification();
              absl::MutexLock lock(&mu_);
              discarded_.push_back(job.discarded());
            }});
  }

  // Two sections of `data`.
  std::vector<recovery::SectionSource> Sources(const std::string& data) {
    std::vector<recovery::SectionSource> sources(2);
    const int64_t half = static_cast<int64_t>(data.size()) / 2;
    sources[0].section.set_byte_length(half);
    sources[0].data = reinterpret_cast<const uint8_t*>(data.data());
    sources[1].section.set_byte_length(static_cast<int64_t>(data.size()) -
                                       half);
    sources[1].data = reinterpret_cast<const uint8_t*>(data.data()) + half;
    return sources;
  }

  absl::Status Stage(CheckpointStager& stager, const std::string& data,
                     int64_t step) {
    return stager.Stage(v1::ShardHeader(), Sources(data),
                        recovery::ShardMemory::Host(), /*rank=*/0, step,
                        /*epoch=*/1);
  }

  absl::Mutex mu_;
  std::vector<int64_t> admitted_ ABSL_GUARDED_BY(mu_);
  int64_t held_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::string> written_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> discarded_ ABSL_GUARDED_BY(mu_);
  bool refuse_ = false;
  bool block_ = true;
  absl::Notification writing_;
  absl::Notification release_;
};

TEST_F(CheckpointStagerTest, TheWriteSeesTheBytesAsTheyWereWhenStaged) {
  auto stager = NewStager();
  std::string shard = "0123456789abcdef";
  ASSERT_TRUE(Stage(*stager, shard, 6).ok());
  // The trainer's next step changes the shard while the write runs.
  shard.assign(shard.size(), 'x');
  writing_.WaitForNotification();
  release_.Notify();
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  absl::MutexLock lock(&mu_);
  ASSERT_EQ(written_.size(), 1u);
  EXPECT_EQ(written_[0], "0123456789abcdef");
  EXPECT_EQ(steps_[0], 6);
  EXPECT_EQ(held_, 16);
}

TEST_F(CheckpointStagerTest, ACheckpointOfferedWhileOneIsWrittenIsRefused) {
  auto stager = NewStager();
  const std::string shard = "0123456789abcdef";
  ASSERT_TRUE(Stage(*stager, shard, 3).ok());
  writing_.WaitForNotification();
  const absl::Status second = Stage(*stager, shard, 6);
  EXPECT_EQ(second.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.message().find("step 3"), std::string::npos) << second;
  EXPECT_EQ(stager->in_flight(), 3);
  release_.Notify();
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  EXPECT_EQ(stager->in_flight(), std::nullopt);
  block_ = false;
  ASSERT_TRUE(Stage(*stager, shard, 9).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(steps_, (std::vector<int64_t>{3, 9}));
}

TEST_F(CheckpointStagerTest, QuiesceTimesOutNamingTheStepStillWritten) {
  auto stager = NewStager();
  ASSERT_TRUE(Stage(*stager, "0123", 12).ok());
  writing_.WaitForNotification();
  const absl::Status quiet = stager->Quiesce(absl::Milliseconds(20));
  EXPECT_EQ(quiet.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(quiet.message().find("step 12"), std::string::npos) << quiet;
  release_.Notify();
  EXPECT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
}

TEST_F(CheckpointStagerTest, ARefusedStagingAllocatesAndQueuesNothing) {
  refuse_ = true;
  auto stager = NewStager();
  const absl::Status refused = Stage(*stager, "0123456789", 3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(stager->staging_bytes(), 0);
  EXPECT_EQ(stager->in_flight(), std::nullopt);
  refuse_ = false;
  block_ = false;
  ASSERT_TRUE(Stage(*stager, "0123456789", 6).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(admitted_, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(steps_, (std::vector<int64_t>{6}));
}

TEST_F(CheckpointStagerTest, TheBufferIsAdmittedWhenItGrowsAndReusedOtherwise) {
  block_ = false;
  auto stager = NewStager();
  ASSERT_TRUE(Stage(*stager, std::string(64, 'a'), 3).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  ASSERT_TRUE(Stage(*stager, std::string(64, 'b'), 6).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  ASSERT_TRUE(Stage(*stager, std::string(32, 'c'), 9).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  ASSERT_TRUE(Stage(*stager, std::string(128, 'd'), 12).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  EXPECT_EQ(stager->staging_bytes(), 128);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(admitted_, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(held_, 128);
  ASSERT_EQ(written_.size(), 4u);
  EXPECT_EQ(written_[2], std::string(32, 'c'));
}

TEST_F(CheckpointStagerTest, DiscardAboveMarksOnlyALaterStep) {
  auto stager = NewStager();
  ASSERT_TRUE(Stage(*stager, "0123", 6).ok());
  writing_.WaitForNotification();
  EXPECT_EQ(stager->DiscardAbove(6), std::nullopt);
  EXPECT_EQ(stager->DiscardAbove(3), 6);
  release_.Notify();
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  EXPECT_EQ(stager->DiscardAbove(0), std::nullopt);  // Nothing in flight.
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(discarded_, (std::vector<bool>{true}));
}

TEST_F(CheckpointStagerTest, AFailedReadQueuesNothing) {
  block_ = false;
  auto stager = NewStager();
  const std::string shard = "0123";
  const FailingMemory failing;
  const absl::Status read =
      stager->Stage(v1::ShardHeader(), Sources(shard), failing, 0, 3, 1);
  EXPECT_EQ(read.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(stager->in_flight(), std::nullopt);
  ASSERT_TRUE(Stage(*stager, shard, 6).ok());
  ASSERT_TRUE(stager->Quiesce(absl::Seconds(10)).ok());
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(steps_, (std::vector<int64_t>{6}));
}

TEST_F(CheckpointStagerTest, DestroyingTheStagerLetsTheWriteInFlightFinish) {
  auto stager = NewStager();
  ASSERT_TRUE(Stage(*stager, "0123", 6).ok());
  writing_.WaitForNotification();
  absl::Notification destroyed;
  std::thread destroyer([&] {
    stager.reset();
    destroyed.Notify();
  });
  // The destructor waits for the write (blocked until released).
  EXPECT_FALSE(
      destroyed.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  release_.Notify();
  destroyer.join();
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(discarded_.size(), 1u);
  EXPECT_EQ(held_, 0);
}

}  // namespace
}  // namespace shardd::node
