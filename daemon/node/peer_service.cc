#include "daemon/node/peer_service.h"

#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
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
  // A call without a deadline gets ten minutes.
  const MonoTime deadline =
      std::min(rpc::DeadlineOf(*context), MonoNow() + absl::Minutes(10));
  return rpc::ToGrpc(manager->ServeShard(
      *request, deadline, [&](const v1::FetchShardResponse& message) {
        return !context->IsCancelled() && writer->Write(message);
      }));
}

}  // namespace shardd::node
