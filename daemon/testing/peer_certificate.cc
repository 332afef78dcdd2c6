#include "daemon/testing/peer_certificate.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/generic/generic_stub.h"

namespace shardd::tests {

std::shared_ptr<grpc::Channel> FreshChannel(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, credentials, args);
}

absl::StatusOr<std::string> PresentedCertificate(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice slice("");
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  // The call carries the deadline; this bound only guards the test.
  if (!done.WaitForNotificationWithTimeout(timeout + absl::Seconds(5))) {
    return absl::DeadlineExceededError("health check: no completion");
  }
  if (!status.ok()) return rpc::FromGrpc(status);
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return absl::InternalError("no auth context");
  const std::vector<grpc::string_ref> pem =
      auth->FindPropertyValues("x509_pem_cert");
  if (pem.empty()) {
    return absl::InternalError("the connection carries no certificate");
  }
  return std::string(pem[0].data(), pem[0].size());
}

std::string FirstCertificateOfFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  constexpr char kEnd[] = "-----END CERTIFICATE-----\n";
  const size_t begin = all.find("-----BEGIN CERTIFICATE-----");
  if (begin == std::string::npos) return "";
  const size_t end = all.find(kEnd, begin);
  if (end == std::string::npos) return "";
  return all.substr(begin, end + sizeof(kEnd) - 1 - begin);
}

}  // namespace shardd::tests
