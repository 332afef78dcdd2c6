#include "daemon/node/peer_service.h"

#include "daemon/rpc/grpc_status.h"

namespace shardd::node {

grpc::Status PeerService::Probe(grpc::ServerContext*,
                                const v1::ProbeRequest* request,
                                v1::ProbeResponse* response) {
  NodeManager* manager = manager_.load();
  if (manager == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the daemon has not joined the coordinator yet");
  }
  *response = manager->Probe(request->include_model());
  return grpc::Status::OK;
}

grpc::Status PeerService::FetchShard(
    grpc::ServerContext* context, const v1::FetchShardRequest* request,
    grpc::ServerWriter<v1::FetchShardResponse>* writer) {
  NodeManager* manager = manager_.load();
  if (manager == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the daemon has not joined the coordinator yet");
  }
  const auto client_deadline = context->deadline();
  const absl::Time deadline =
      client_deadline == std::chrono::system_clock::time_point::max()
          ? absl::Now() + absl::Minutes(10)
          : absl::FromChrono(client_deadline);
  return rpc::ToGrpc(manager->ServeShard(
      *request, deadline, [&](const v1::FetchShardResponse& message) {
        return !context->IsCancelled() && writer->Write(message);
      }));
}

}  // namespace shardd::node
