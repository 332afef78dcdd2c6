#include "daemon/memory/segment_pool.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::memory {
namespace {

class SegmentPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(base != nullptr ? base : "/tmp", "/pool_test_XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto pool = SegmentPool::Create(dir_, "pool", 2, 1000);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }
  void TearDown() override {
    pool_.reset();
    rmdir(dir_.c_str());
  }

  static MonoTime Soon() { return MonoNow() + absl::Milliseconds(50); }

  std::string dir_;
  std::unique_ptr<SegmentPool> pool_;
};

TEST_F(SegmentPoolTest, SegmentHoldsExactlyKSlots) {
  EXPECT_EQ(pool_->segment().size(), 2000);
  EXPECT_EQ(pool_->slots(), 2);
}

TEST_F(SegmentPoolTest, UnitsGetDistinctSlotsAtSlotOffsets) {
  auto a = pool_->Acquire(5, Soon());
  auto b = pool_->Acquire(9, Soon());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->index, b->index);
  EXPECT_EQ(a->byte_offset, a->index * 1000);
  EXPECT_EQ(static_cast<char*>(b->data) - static_cast<char*>(a->data),
            (b->index - a->index) * 1000);
  EXPECT_TRUE(a->newly_acquired);
}

TEST_F(SegmentPoolTest, AcquiringAHeldUnitReturnsItsSlot) {
  auto first = pool_->Acquire(3, Soon());
  auto again = pool_->Acquire(3, Soon());
  ASSERT_TRUE(first.ok() && again.ok());
  EXPECT_EQ(first->index, again->index);
  EXPECT_FALSE(again->newly_acquired);
}

TEST_F(SegmentPoolTest, AllSlotsHeldPastTheDeadlineIsResourceExhausted) {
  ASSERT_TRUE(pool_->Acquire(1, Soon()).ok());
  ASSERT_TRUE(pool_->Acquire(2, Soon()).ok());
  const MonoTime start = MonoNow();
  auto third = pool_->Acquire(3, MonoNow() + absl::Milliseconds(30));
  EXPECT_GE(MonoNow() - start, absl::Milliseconds(25));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("units 1, 2"),
            absl::string_view::npos)
      << third.status();
}

TEST_F(SegmentPoolTest, WaiterGetsTheSlotThatIsReleased) {
  auto held = pool_->Acquire(1, Soon());
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(pool_->Acquire(2, Soon()).ok());
  absl::StatusOr<SegmentSlot> waited;
  std::thread waiter(
      [&] { waited = pool_->Acquire(3, MonoNow() + absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_TRUE(pool_->Release(1));
  waiter.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->index, held->index);
}

TEST_F(SegmentPoolTest, ReleaseOfAnUnheldUnitReturnsFalse) {
  EXPECT_FALSE(pool_->Release(4));
  ASSERT_TRUE(pool_->Acquire(4, Soon()).ok());
  EXPECT_TRUE(pool_->Release(4));
  EXPECT_FALSE(pool_->Release(4));
}

TEST_F(SegmentPoolTest, CloseWakesWaitersWithAborted) {
  ASSERT_TRUE(pool_->Acquire(1, Soon()).ok());
  ASSERT_TRUE(pool_->Acquire(2, Soon()).ok());
  absl::StatusOr<SegmentSlot> waited;
  std::thread waiter(
      [&] { waited = pool_->Acquire(3, MonoNow() + absl::Seconds(10)); });
  absl::SleepFor(absl::Milliseconds(20));
  pool_->Close();
  waiter.join();
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kAborted);
}

TEST_F(SegmentPoolTest, ManyThreadsNeverShareASlot) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const int64_t unit = t * 1000 + i;
        auto slot = pool_->Acquire(unit, MonoNow() + absl::Seconds(10));
        if (!slot.ok()) {
          ++failures;
          continue;
        }
        auto* word = static_cast<volatile int64_t*>(slot->data);
        *word = unit;
        std::this_thread::yield();
        if (*word != unit) ++failures;
        pool_->Release(unit);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(SegmentPoolTest, BadArgumentsAreRejected) {
  EXPECT_EQ(SegmentPool::Create(dir_, "x", 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool_->Acquire(-1, Soon()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::memory
