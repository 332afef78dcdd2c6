#ifndef SHARDD_DAEMON_RPC_HEALTH_SERVICE_H_
#define SHARDD_DAEMON_RPC_HEALTH_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace shardd::rpc {

// grpc.health.v1.Health as a synchronous service, for kubelet gRPC probes
// and grpc_health_probe: Check answers from a table of service name ->
// serving ("" is the server as a whole; an unknown name is NOT_FOUND);
// Watch streams a service's status now and after every change
// (SERVICE_UNKNOWN while it is unknown) until the call is cancelled or
// Shutdown.
//
// Why not grpc::EnableDefaultHealthCheckService: gRPC 1.51 implements the
// default service with the callback API, which starts "nexting" threads
// polling every socket of the process (epoll1 has one poller set per
// process). In shardd they picked up the trainer socket's requests and
// handed each over to the sync server's threads: more thread wake-ups per
// call on the latency-critical Unix socket (bench/step; docs/benchmarks.md).
//
// Thread-safe. A Watch holds one server thread while it streams; it notices
// a cancelled call within `watch_poll` (the sync API has no cancellation
// callback).
class HealthService final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthService(absl::Duration watch_poll = absl::Seconds(1))
      : watch_poll_(watch_poll) {}

  // Adds or updates `service`. Ignored after Shutdown.
  void SetServingStatus(const std::string& service, bool serving);

  // Every service becomes NOT_SERVING and stays so; Watch streams send it
  // and end. Call before the server's Shutdown so that it does not wait
  // for them.
  void Shutdown();

  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override;
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>*
                         writer) override;

 private:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;
  Status StatusLocked(const std::string& service) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration watch_poll_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // Bumped on every change.
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_HEALTH_SERVICE_H_
