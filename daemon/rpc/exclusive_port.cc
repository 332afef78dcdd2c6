#include "daemon/rpc/exclusive_port.h"

#include "grpc/grpc.h"

namespace shardd::rpc {

void ForbidPortSharing(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

}  // namespace shardd::rpc
