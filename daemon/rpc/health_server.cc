#include "daemon/rpc/health_server.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/rpc/grpc_deadline.h"

namespace shardd::rpc {

absl::StatusOr<std::unique_ptr<HealthServer>> HealthServer::Start(
    const std::string& address, absl::string_view flag, HealthService* health) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, "=", address, ": expected HOST:PORT (port 0: any)"));
  }
  grpc::ServerBuilder builder;
  builder.RegisterService(health);
  ForbidPortSharing(builder);
  int bound = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return absl::UnavailableError(
        absl::StrCat("--", flag, "=", address, ": cannot listen"));
  }
  std::string host = address.substr(0, colon);
  return std::unique_ptr<HealthServer>(new HealthServer(
      std::move(server), absl::StrCat(host, ":", bound), bound));
}

HealthServer::HealthServer(std::unique_ptr<grpc::Server> server,
                           std::string address, int port)
    : server_(std::move(server)), address_(std::move(address)), port_(port) {}

HealthServer::~HealthServer() {
  server_->Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Milliseconds(500)));
}

}  // namespace shardd::rpc
