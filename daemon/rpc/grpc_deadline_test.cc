#include "daemon/rpc/grpc_deadline.h"

#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

absl::Duration Left(gpr_timespec deadline) {
  const gpr_timespec d =
      gpr_time_sub(gpr_convert_clock_type(deadline, GPR_CLOCK_MONOTONIC),
                   gpr_now(GPR_CLOCK_MONOTONIC));
  return absl::Seconds(d.tv_sec) + absl::Nanoseconds(d.tv_nsec);
}

TEST(GrpcDeadlineTest, CarriesTheRemainingTimeOnGrpcsMonotonicClock) {
  const gpr_timespec d = ToGrpcDeadline(MonoNow() + absl::Seconds(5));
  EXPECT_EQ(d.clock_type, GPR_CLOCK_MONOTONIC);
  EXPECT_LE(Left(d), absl::Seconds(5));
  EXPECT_GT(Left(d), absl::Seconds(4));
}

TEST(GrpcDeadlineTest, InfiniteStaysInfiniteAndPastIsNow) {
  const gpr_timespec never = ToGrpcDeadline(MonoTime::InfiniteFuture());
  EXPECT_EQ(gpr_time_cmp(never, gpr_inf_future(GPR_CLOCK_MONOTONIC)), 0);
  EXPECT_LE(Left(ToGrpcDeadline(MonoNow() - absl::Seconds(3))),
            absl::ZeroDuration());
}

TEST(GrpcDeadlineTest, ServerContextWithoutDeadlineIsInfinite) {
  grpc::ServerContext context;
  EXPECT_EQ(DeadlineOf(context), MonoTime::InfiniteFuture());
}

}  // namespace
}  // namespace shardd::rpc
