#ifndef SHARDD_DAEMON_RPC_GRPC_DEADLINE_H_
#define SHARDD_DAEMON_RPC_GRPC_DEADLINE_H_

#include <grpc/support/time.h>
#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::rpc {

// Conversions between our monotonic deadlines and gRPC's. gRPC takes a
// deadline on its own monotonic clock (GPR_CLOCK_MONOTONIC), so a deadline
// handed over that way is "now + d" at the call site, and a wall-clock step
// between computing it and the call's end changes nothing (a
// system_clock deadline would be converted with the wall clock).

// gRPC's form of `deadline`; InfiniteFuture stays infinite.
gpr_timespec ToGrpcDeadline(MonoTime deadline);

// Sets `context`'s deadline to `deadline`.
void SetDeadline(grpc::ClientContext* context, MonoTime deadline);
// Sets `context`'s deadline to now + `timeout`.
void SetTimeout(grpc::ClientContext* context, absl::Duration timeout);

// The deadline of an incoming call on our monotonic clock.
MonoTime DeadlineOf(const grpc::ServerContextBase& context);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_GRPC_DEADLINE_H_
