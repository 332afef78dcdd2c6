#ifndef SHARDD_DAEMON_NODE_TRAINER_SERVICE_H_
#define SHARDD_DAEMON_NODE_TRAINER_SERVICE_H_

#include "daemon/node/engine_admission.h"
#include "daemon/node/node_manager.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::node {

// The Trainer gRPC service: a thin adapter over NodeManager (deadline from
// the call's context, statuses through daemon/rpc). WatchEvents streams
// the manager's events; CheckMemory asks `admission` (UNIMPLEMENTED when
// none is given). Borrows the manager and the admission.
class TrainerService final : public v1::Trainer::Service {
 public:
  explicit TrainerService(NodeManager* manager,
                          const EngineAdmission* admission = nullptr)
      : manager_(manager), admission_(admission) {}

  grpc::Status RegisterModel(grpc::ServerContext* context,
                             const v1::RegisterModelRequest* request,
                             v1::RegisterModelResponse* response) override;
  grpc::Status Gather(grpc::ServerContext* context,
                      const v1::GatherRequest* request,
                      v1::GatherResponse* response) override;
  grpc::Status Release(grpc::ServerContext* context,
                       const v1::ReleaseRequest* request,
                       v1::ReleaseResponse* response) override;
  grpc::Status ReduceGrad(grpc::ServerContext* context,
                          const v1::ReduceGradRequest* request,
                          v1::ReduceGradResponse* response) override;
  grpc::Status Step(grpc::ServerContext* context,
                    const v1::StepRequest* request,
                    v1::StepResponse* response) override;
  grpc::Status WaitReady(grpc::ServerContext* context,
                         const v1::WaitReadyRequest* request,
                         v1::WaitReadyResponse* response) override;
  grpc::Status ExportState(grpc::ServerContext* context,
                           const v1::ExportStateRequest* request,
                           v1::ExportStateResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context,
                         const v1::GetStatusRequest* request,
                         v1::GetStatusResponse* response) override;
  grpc::Status WatchEvents(
      grpc::ServerContext* context, const v1::WatchEventsRequest* request,
      grpc::ServerWriter<v1::TrainerEvent>* writer) override;
  grpc::Status CheckMemory(grpc::ServerContext* context,
                           const v1::CheckMemoryRequest* request,
                           v1::CheckMemoryResponse* response) override;

 private:
  NodeManager* const manager_;
  const EngineAdmission* const admission_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_TRAINER_SERVICE_H_
