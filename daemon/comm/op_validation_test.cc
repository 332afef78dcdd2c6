#include "daemon/comm/op_validation.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

using core::DType;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;

TEST(OpValidationTest, AllGatherAcceptsGoodArgumentsAndSetsTheTotal) {
  float in[2] = {}, out[5] = {};
  int64_t total = 0;
  EXPECT_TRUE(
      ValidateAllGather(in, out, {2, 3}, DType::kFloat32, {}, 0, 2, &total)
          .ok());
  EXPECT_EQ(total, 5);
}

TEST(OpValidationTest, AllGatherRejectsCountsOfTheWrongLengthOrSign) {
  float in[2] = {}, out[5] = {};
  int64_t total = 0;
  EXPECT_EQ(
      ValidateAllGather(in, out, {2, 3, 1}, DType::kFloat32, {}, 0, 2, &total)
          .code(),
      kInvalid);
  EXPECT_EQ(
      ValidateAllGather(in, out, {2, -1}, DType::kFloat32, {}, 0, 2, &total)
          .code(),
      kInvalid);
  EXPECT_EQ(ValidateAllGather(in, out, {INT64_MAX / 4, INT64_MAX / 4},
                              DType::kFloat32, {}, 0, 2, &total)
                .code(),
            kInvalid);
}

TEST(OpValidationTest, NullBuffersAreRefusedOnlyWhenTheyWouldBeUsed) {
  float buffer[4] = {};
  int64_t total = 0;
  // This rank (1) contributes nothing: a null input is fine.
  EXPECT_TRUE(ValidateAllGather(nullptr, buffer, {4, 0}, DType::kFloat32, {}, 1,
                                2, &total)
                  .ok());
  EXPECT_EQ(ValidateAllGather(nullptr, buffer, {4, 0}, DType::kFloat32, {}, 0,
                              2, &total)
                .code(),
            kInvalid);
  // A reduce-scatter reads every block of its input, and writes only its own.
  EXPECT_EQ(ValidateReduceScatter(nullptr, buffer, {4, 0}, DType::kFloat32,
                                  ReduceOp::kSum, {}, 1, 2, &total)
                .code(),
            kInvalid);
  EXPECT_TRUE(ValidateReduceScatter(buffer, nullptr, {4, 0}, DType::kFloat32,
                                    ReduceOp::kSum, {}, 1, 2, &total)
                  .ok());
  EXPECT_EQ(
      ValidateAllReduce(nullptr, 1, DType::kFloat32, ReduceOp::kSum, {}).code(),
      kInvalid);
  EXPECT_TRUE(
      ValidateAllReduce(nullptr, 0, DType::kFloat32, ReduceOp::kSum, {}).ok());
}

TEST(OpValidationTest, RejectsAnUnknownDTypeReduceOpOrNegativeTimeout) {
  float buffer[4] = {};
  EXPECT_EQ(
      ValidateAllReduce(buffer, 4, static_cast<DType>(99), ReduceOp::kSum, {})
          .code(),
      kInvalid);
  EXPECT_EQ(ValidateAllReduce(buffer, 4, DType::kFloat32,
                              static_cast<ReduceOp>(7), {})
                .code(),
            kInvalid);
  OpOptions negative;
  negative.timeout = absl::Seconds(-1);
  EXPECT_EQ(
      ValidateAllReduce(buffer, 4, DType::kFloat32, ReduceOp::kSum, negative)
          .code(),
      kInvalid);
  EXPECT_EQ(
      ValidateAllReduce(buffer, -1, DType::kFloat32, ReduceOp::kSum, {}).code(),
      kInvalid);
}

TEST(OpValidationTest, BroadcastRejectsARootOutsideTheGroup) {
  float buffer[4] = {};
  EXPECT_TRUE(ValidateBroadcast(buffer, 4, DType::kFloat32, 2, 3, {}).ok());
  EXPECT_EQ(ValidateBroadcast(buffer, 4, DType::kFloat32, 3, 3, {}).code(),
            kInvalid);
  EXPECT_EQ(ValidateBroadcast(buffer, 4, DType::kFloat32, -1, 3, {}).code(),
            kInvalid);
}

TEST(OpValidationTest, PointToPointNeedsAnotherRankOfTheGroup) {
  char buffer[8] = {};
  EXPECT_TRUE(ValidatePointToPoint(buffer, 8, 1, 0, 2, {}).ok());
  EXPECT_EQ(ValidatePointToPoint(buffer, 8, 0, 0, 2, {}).code(), kInvalid);
  EXPECT_EQ(ValidatePointToPoint(buffer, 8, 2, 0, 2, {}).code(), kInvalid);
  EXPECT_EQ(ValidatePointToPoint(buffer, -1, 1, 0, 2, {}).code(), kInvalid);
  EXPECT_EQ(ValidatePointToPoint(nullptr, 8, 1, 0, 2, {}).code(), kInvalid);
  EXPECT_TRUE(ValidatePointToPoint(nullptr, 0, 1, 0, 2, {}).ok());
}

}  // namespace
}  // namespace shardd::comm
