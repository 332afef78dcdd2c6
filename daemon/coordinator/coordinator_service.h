#ifndef SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_
#define SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_

#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/watch_hub.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {

// The Coordinator gRPC service: a thin adapter that converts messages and
// status codes and delegates every decision to CoordinatorManager.
//
// WatchMembership is served by a WatchHub on gRPC's callback API (no thread
// per stream); every other method is synchronous.
//
// Thread-safe (gRPC calls it from many threads). Borrows the manager, which
// must outlive the server; the server must be shut down before the service
// is destroyed.
class CoordinatorService final
    : public shardd::v1::Coordinator::WithCallbackMethod_WatchMembership<
          shardd::v1::Coordinator::Service> {
 public:
  CoordinatorService(CoordinatorManager* manager,
                     absl::Duration heartbeat_interval,
                     absl::Duration max_rendezvous_wait)
      : manager_(manager),
        heartbeat_interval_(heartbeat_interval),
        max_rendezvous_wait_(max_rendezvous_wait),
        watches_(manager) {}

  grpc::Status Join(grpc::ServerContext* context,
                    const shardd::v1::JoinRequest* request,
                    shardd::v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const shardd::v1::HeartbeatRequest* request,
                         shardd::v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* context,
                     const shardd::v1::LeaveRequest* request,
                     shardd::v1::LeaveResponse* response) override;
  grpc::ServerWriteReactor<shardd::v1::MembershipUpdate>* WatchMembership(
      grpc::CallbackServerContext* context,
      const shardd::v1::WatchMembershipRequest* request) override;
  grpc::Status ReportFailure(
      grpc::ServerContext* context,
      const shardd::v1::ReportFailureRequest* request,
      shardd::v1::ReportFailureResponse* response) override;
  grpc::Status ShouldCommit(
      grpc::ServerContext* context,
      const shardd::v1::ShouldCommitRequest* request,
      shardd::v1::ShouldCommitResponse* response) override;
  grpc::Status RendezvousSet(
      grpc::ServerContext* context,
      const shardd::v1::RendezvousSetRequest* request,
      shardd::v1::RendezvousSetResponse* response) override;
  grpc::Status RendezvousGet(
      grpc::ServerContext* context,
      const shardd::v1::RendezvousGetRequest* request,
      shardd::v1::RendezvousGetResponse* response) override;
  grpc::Status RendezvousWait(
      grpc::ServerContext* context,
      const shardd::v1::RendezvousWaitRequest* request,
      shardd::v1::RendezvousWaitResponse* response) override;
  grpc::Status GetClusterState(
      grpc::ServerContext* context,
      const shardd::v1::GetClusterStateRequest* request,
      shardd::v1::ClusterState* response) override;

 private:
  CoordinatorManager* const manager_;
  const absl::Duration heartbeat_interval_;
  const absl::Duration max_rendezvous_wait_;
  WatchHub watches_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_
