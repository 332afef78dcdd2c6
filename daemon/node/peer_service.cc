#include "daemon/node/peer_service.h"

namespace shardd::node {

grpc::Status PeerService::Probe(grpc::ServerContext*, const v1::ProbeRequest*,
                                v1::ProbeResponse* response) {
  NodeManager* manager = manager_.load();
  if (manager == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the daemon has not joined the coordinator yet");
  }
  *response = manager->Probe();
  return grpc::Status::OK;
}

grpc::Status PeerService::FetchShard(
    grpc::ServerContext*, const v1::FetchShardRequest*,
    grpc::ServerWriter<v1::FetchShardResponse>*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "FetchShard is not implemented yet: shard transfer for "
                      "checkpoint-free recovery comes with the recovery issue");
}

}  // namespace shardd::node
