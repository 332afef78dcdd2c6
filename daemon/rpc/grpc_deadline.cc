#include "daemon/rpc/grpc_deadline.h"

namespace shardd::rpc {

gpr_timespec ToGrpcDeadline(MonoTime deadline) {
  if (deadline == MonoTime::InfiniteFuture()) {
    return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  }
  // Both clocks are CLOCK_MONOTONIC, but gRPC may count from another origin:
  // carry the remaining time over, read on both at the same moment.
  const absl::Duration left = deadline - MonoNow();
  const gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
  if (left <= absl::ZeroDuration()) return now;
  return gpr_time_add(
      now, gpr_time_from_nanos(absl::ToInt64Nanoseconds(left), GPR_TIMESPAN));
}

void SetDeadline(grpc::ClientContext* context, MonoTime deadline) {
  context->set_deadline(ToGrpcDeadline(deadline));
}

void SetTimeout(grpc::ClientContext* context, absl::Duration timeout) {
  SetDeadline(context, MonoNow() + timeout);
}

MonoTime DeadlineOf(const grpc::ServerContextBase& context) {
  const gpr_timespec raw = context.raw_deadline();
  if (gpr_time_cmp(raw, gpr_inf_future(raw.clock_type)) == 0) {
    return MonoTime::InfiniteFuture();
  }
  const gpr_timespec mono = gpr_convert_clock_type(raw, GPR_CLOCK_MONOTONIC);
  const gpr_timespec left = gpr_time_sub(mono, gpr_now(GPR_CLOCK_MONOTONIC));
  return MonoNow() + absl::Seconds(left.tv_sec) +
         absl::Nanoseconds(left.tv_nsec);
}

}  // namespace shardd::rpc
