#include "tests/coordinator/port_holder.h"

#include "absl/status/status.h"

namespace shardd::tests {

absl::StatusOr<std::unique_ptr<PortHolder>> PortHolder::Start() {
  std::unique_ptr<PortHolder> holder(new PortHolder());
  grpc::ServerBuilder builder;  // gRPC's defaults: willing to share.
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &holder->port_);
  builder.RegisterService(&holder->health_);
  holder->server_ = builder.BuildAndStart();
  if (holder->server_ == nullptr || holder->port_ == 0) {
    return absl::InternalError("cannot start a gRPC server on 127.0.0.1:0");
  }
  return holder;
}

PortHolder::~PortHolder() {
  health_.Shutdown();
  if (server_ != nullptr) server_->Shutdown();
}

}  // namespace shardd::tests
