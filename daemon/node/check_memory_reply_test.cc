#include "daemon/node/check_memory_reply.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// `units` units of one [n, n] fp32 weight, NO_SHARD, AdamW.
v1::ModelSpec Spec(int units, int64_t n) {
  v1::ModelSpec spec;
  for (int u = 0; u < units; ++u) {
    v1::UnitSpec* unit = spec.add_units();
    unit->set_name("layer" + std::to_string(u));
    v1::TensorSpec* t = unit->add_tensors();
    t->set_name("weight");
    t->add_shape(n);
    t->add_shape(n);
    t->set_dtype(v1::DTYPE_FP32);
  }
  spec.mutable_config()->set_strategy(v1::SHARDING_STRATEGY_NO_SHARD);
  v1::AdamW* adamw =
      spec.mutable_config()->mutable_optimizer()->mutable_adamw();
  adamw->set_lr(1e-3);
  adamw->set_beta1(0.9);
  adamw->set_beta2(0.999);
  adamw->set_eps(1e-8);
  return spec;
}

class CheckMemoryReplyTest : public ::testing::Test {
 protected:
  CheckMemoryReplyTest() {
    EngineAdmissionOptions options;
    options.read_limits = [] {
      memory::LimitReading reading;
      reading.limits.push_back(core::MemoryLimit{core::LimitScope::kHost,
                                                 22 * kGiB, true,
                                                 "/proc/meminfo MemAvailable"});
      reading.unreadable.push_back("statvfs /nowhere: No such file");
      return reading;
    };
    options.log = false;
    admission_ = std::make_unique<EngineAdmission>(std::move(options));
    topology_.set_world_size(1);
    topology_.set_rank(0);
  }
  std::unique_ptr<EngineAdmission> admission_;
  v1::Topology topology_;
};

TEST_F(CheckMemoryReplyTest, IssueModelIsNotAdmittedAndTheReplyGivesTheWhy) {
  v1::CheckMemoryRequest request;
  *request.mutable_model() = Spec(4, 65536);
  absl::StatusOr<v1::CheckMemoryResponse> reply =
      CheckMemoryReply(*admission_, topology_, request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_FALSE(reply->admitted());
  EXPECT_TRUE(absl::StartsWith(reply->refusal(),
                               "rank 0 of W = 1, F = 1: the plan does not "
                               "fit in memory"))
      << reply->refusal();
  EXPECT_EQ(reply->world_size(), 1);
  EXPECT_EQ(reply->sharding_factor(), 1);
  ASSERT_GE(reply->plan_size(), 1);
  EXPECT_EQ(reply->plan(0).category(), "parameter shards");
  EXPECT_EQ(reply->plan(0).bytes(), 64 * kGiB);
  EXPECT_EQ(reply->plan(0).placement(), "shm");
  EXPECT_EQ(reply->shm_bytes(), 80 * kGiB);
  ASSERT_EQ(reply->limits_size(), 1);
  EXPECT_EQ(reply->limits(0).scope(), "host memory");
  EXPECT_EQ(reply->limits(0).available_bytes(), 22 * kGiB);
  EXPECT_EQ(reply->limits(0).usable_bytes(), 22 * kGiB - 22 * kGiB / 20);
  EXPECT_TRUE(reply->limits(0).measured());
  ASSERT_EQ(reply->unreadable_size(), 1);
  EXPECT_EQ(admission_->refusals(), 0);  // A question, not a refusal.
}

TEST_F(CheckMemoryReplyTest, WorldSizeAndRankComeFromTheRequestFirst) {
  v1::CheckMemoryRequest request;
  *request.mutable_model() = Spec(1, 64);
  request.mutable_model()->mutable_config()->set_strategy(
      v1::SHARDING_STRATEGY_FULL_SHARD);
  request.set_world_size(4);
  request.set_rank(3);
  absl::StatusOr<v1::CheckMemoryResponse> reply =
      CheckMemoryReply(*admission_, topology_, request);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_TRUE(reply->admitted());
  EXPECT_EQ(reply->refusal(), "");
  EXPECT_EQ(reply->world_size(), 4);
  EXPECT_EQ(reply->sharding_factor(), 4);
  EXPECT_EQ(reply->rank(), 3);
}

TEST_F(CheckMemoryReplyTest, BadRequestsNameTheField) {
  v1::CheckMemoryRequest request;
  *request.mutable_model() = Spec(1, 64);
  v1::Topology unknown;  // No epoch yet.
  absl::StatusOr<v1::CheckMemoryResponse> reply =
      CheckMemoryReply(*admission_, unknown, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StartsWith(reply.status().message(), "world_size"));
  request.set_rank(1);
  reply = CheckMemoryReply(*admission_, topology_, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(reply.status().message(), "rank"));
  request.clear_rank();
  request.mutable_model()->mutable_units(0)->mutable_tensors(0)->set_shape(0,
                                                                           0);
  reply = CheckMemoryReply(*admission_, topology_, request);
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(reply.status().message(), "shape"))
      << reply.status();
}

}  // namespace
}  // namespace shardd::node
