#include "daemon/testing/health_check.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"

namespace shardd::tests {

absl::StatusOr<int> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                const std::string& service,
                                absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // HealthCheckRequest { string service = 1; }
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes =
        absl::StrCat("\x0a", std::string(1, service.size()), service);
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  // The call carries the deadline; this bound only guards the test.
  if (!done.WaitForNotificationWithTimeout(timeout + absl::Seconds(5))) {
    return absl::DeadlineExceededError("health check: no completion");
  }
  if (!status.ok()) return rpc::FromGrpc(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::InternalError("health check: cannot read the reply");
  }
  std::string bytes;
  for (const grpc::Slice& part : slices) {
    bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  // HealthCheckResponse { ServingStatus status = 1; } (empty: UNKNOWN).
  if (bytes.empty()) return 0;
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return absl::InternalError("health check: unexpected reply");
}

}  // namespace shardd::tests
