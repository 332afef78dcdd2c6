#ifndef SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_
#define SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_

#include "absl/time/time.h"
#include "daemon/coordinator/concurrency_limit.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/full_update_cache.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {

// The Coordinator gRPC service: a thin adapter that converts messages and
// status codes and delegates every decision to CoordinatorManager.
//
// Thread-safe (gRPC calls it from many threads). Borrows the manager, which
// must outlive the server.
class CoordinatorService final : public shardd::v1::Coordinator::Service {
 public:
  CoordinatorService(CoordinatorManager* manager,
                     absl::Duration heartbeat_interval,
                     absl::Duration max_rendezvous_wait)
      : manager_(manager),
        heartbeat_interval_(heartbeat_interval),
        max_rendezvous_wait_(max_rendezvous_wait) {}

  grpc::Status Join(grpc::ServerContext* context,
                    const shardd::v1::JoinRequest* request,
                    shardd::v1::JoinResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const shardd::v1::HeartbeatRequest* request,
                         shardd::v1::HeartbeatResponse* response) override;
  grpc::Status Leave(grpc::ServerContext* context,
                     const shardd::v1::LeaveRequest* request,
                     shardd::v1::LeaveResponse* response) override;
  grpc::Status WatchMembership(
      grpc::ServerContext* context,
      const shardd::v1::WatchMembershipRequest* request,
      grpc::ServerWriter<shardd::v1::MembershipUpdate>* writer) override;
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
  // WatchMembership for clients that want every member in every message
  // (one shared message per version), and for scoped streams
  // (ScopedUpdateStream over the manager's shared changes).
  grpc::Status WatchFull(
      grpc::ServerContext* context,
      grpc::ServerWriter<shardd::v1::MembershipUpdate>* writer);
  grpc::Status WatchScoped(
      grpc::ServerContext* context, int rank,
      grpc::ServerWriter<shardd::v1::MembershipUpdate>* writer);
  // Why a watch stream ends now (cancelled, shutting down, its deadline),
  // or OK to go on.
  grpc::Status WatchEnded(grpc::ServerContext* context, bool shut_down);

  CoordinatorManager* const manager_;
  FullUpdateCache full_updates_;
  // Watch streams that build a message at the same time. Every stream has
  // a thread; when thousands wake at once (a new epoch, or W streams
  // opening while the job forms) they would all be runnable together and
  // starve the heartbeat handlers until leases expired (measured at
  // W = 4,096). The rest wait, asleep, for a slot.
  ConcurrencyLimit build_slots_{2};
  const absl::Duration heartbeat_interval_;
  const absl::Duration max_rendezvous_wait_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COORDINATOR_SERVICE_H_
