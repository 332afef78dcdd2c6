#include "daemon/node/peer_client.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

namespace shardd::node {
namespace {

std::unique_ptr<v1::Peer::Stub> Connect(
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A fixed 8 MiB stream window instead of BDP probing. With probing the
  // window of a FetchShard stream grows while the receiver verifies and
  // copies, gRPC buffers that much more, and in a fresh process (a
  // replacement) every such buffer is new memory whose first touch is
  // expensive on virtual machines: the fixed window keeps the receiver's
  // page faults, and its CPU per byte, down (bench/recovery's stream
  // probe).
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  return v1::Peer::NewStub(grpc::CreateCustomChannel(
      address,
      credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(),
      args));
}

absl::Status Named(const std::string& address, absl::Status s) {
  return absl::Status(s.code(),
                      absl::StrCat("peer ", address, ": ", s.message()));
}

}  // namespace

absl::Status PeerClient::FetchShard(
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const std::string& peer_address, const v1::FetchShardRequest& request,
    MonoTime deadline,
    const std::function<absl::Status(const v1::FetchShardResponse&)>&
        on_message) {
  std::unique_ptr<v1::Peer::Stub> stub = Connect(credentials, peer_address);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, deadline);
  std::unique_ptr<grpc::ClientReader<v1::FetchShardResponse>> reader =
      stub->FetchShard(&context, request);
  v1::FetchShardResponse message;
  absl::Status mine = absl::OkStatus();
  while (reader->Read(&message)) {
    mine = on_message(message);
    if (!mine.ok()) {
      context.TryCancel();
      break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!mine.ok()) return mine;
  if (!status.ok()) return Named(peer_address, rpc::FromGrpc(status));
  return absl::OkStatus();
}

absl::StatusOr<v1::ProbeResponse> PeerClient::Probe(
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const std::string& peer_address, MonoTime deadline, bool include_model) {
  std::unique_ptr<v1::Peer::Stub> stub = Connect(credentials, peer_address);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, deadline);
  v1::ProbeRequest request;
  request.set_from_rank(-1);
  request.set_include_model(include_model);
  v1::ProbeResponse response;
  const grpc::Status status = stub->Probe(&context, request, &response);
  if (!status.ok()) return Named(peer_address, rpc::FromGrpc(status));
  return response;
}

}  // namespace shardd::node
