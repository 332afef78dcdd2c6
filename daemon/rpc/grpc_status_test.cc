#include "daemon/rpc/grpc_status.h"

#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

TEST(GrpcStatusTest, KeepsCodeAndMessageBothWays) {
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kAborted, absl::StatusCode::kUnavailable,
        absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kFailedPrecondition,
        absl::StatusCode::kResourceExhausted}) {
    const absl::Status original(code, "rank 3: lease expired");
    const grpc::Status wire = ToGrpc(original);
    EXPECT_EQ(static_cast<int>(wire.error_code()), static_cast<int>(code));
    EXPECT_EQ(wire.error_message(), "rank 3: lease expired");
    EXPECT_EQ(FromGrpc(wire), original);
  }
  EXPECT_TRUE(ToGrpc(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpc(grpc::Status::OK).ok());
}

}  // namespace
}  // namespace shardd::rpc
