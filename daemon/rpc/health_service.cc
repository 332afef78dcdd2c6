#include "daemon/rpc/health_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

namespace shardd::rpc {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

void HealthService::SetServingStatus(const std::string& service, bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  auto [it, added] = serving_.try_emplace(service, serving);
  if (!added && it->second == serving) return;
  it->second = serving;
  ++version_;
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [service, serving] : serving_) serving = false;
  ++version_;
}

HealthService::Status HealthService::StatusLocked(
    const std::string& service) const {
  auto it = serving_.find(service);
  if (it == serving_.end()) return HealthCheckResponse::SERVICE_UNKNOWN;
  return it->second ? HealthCheckResponse::SERVING
                    : HealthCheckResponse::NOT_SERVING;
}

grpc::Status HealthService::Check(grpc::ServerContext*,
                                  const HealthCheckRequest* request,
                                  HealthCheckResponse* response) {
  absl::MutexLock lock(&mu_);
  const Status status = StatusLocked(request->service());
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    return grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("service: unknown service '", request->service(), "'"));
  }
  response->set_status(status);
  return grpc::Status::OK;
}

grpc::Status HealthService::Watch(
    grpc::ServerContext* context, const HealthCheckRequest* request,
    grpc::ServerWriter<HealthCheckResponse>* writer) {
  int64_t sent_version = -1;
  for (;;) {
    HealthCheckResponse response;
    bool last = false;
    {
      absl::MutexLock lock(&mu_);
      const int64_t seen = sent_version;
      auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return version_ != seen;
      };
      // Waits in slices so that a cancelled call is noticed.
      while (!changed() && !context->IsCancelled()) {
        AwaitUntil(&mu_, absl::Condition(&changed), MonoNow() + watch_poll_);
      }
      if (context->IsCancelled()) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "Watch cancelled");
      }
      sent_version = version_;
      response.set_status(StatusLocked(request->service()));
      last = shut_down_;
    }
    if (!writer->Write(response)) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "Watch: the client went away");
    }
    if (last) return grpc::Status::OK;
  }
}

}  // namespace shardd::rpc
