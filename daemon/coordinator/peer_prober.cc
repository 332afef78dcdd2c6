#include "daemon/coordinator/peer_prober.h"

#include <memory>
#include <string>

#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::coordinator {

Prober MakePeerProber(absl::Duration timeout,
                      std::shared_ptr<grpc::ChannelCredentials> credentials) {
  if (credentials == nullptr) {
    credentials = grpc::InsecureChannelCredentials();
  }
  return [timeout, credentials](const std::string& address) {
    auto channel = grpc::CreateChannel(address, credentials);
    auto stub = shardd::v1::Peer::NewStub(channel);
    grpc::ClientContext context;
    rpc::SetTimeout(&context, timeout);
    shardd::v1::ProbeRequest request;
    request.set_from_rank(-1);
    shardd::v1::ProbeResponse response;
    const grpc::Status status = stub->Probe(&context, request, &response);
    return status.ok() ? ProbeResult::kAlive : ProbeResult::kUnreachable;
  };
}

}  // namespace shardd::coordinator
