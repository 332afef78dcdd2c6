#include "daemon/coordinator/in_process_coordinator.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/coordinator/peer_prober.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/rpc/grpc_deadline.h"

namespace shardd::coordinator {

absl::StatusOr<std::unique_ptr<InProcessCoordinator>>
InProcessCoordinator::Start(const InProcessCoordinatorOptions& options) {
  std::unique_ptr<InProcessCoordinator> c(new InProcessCoordinator());
  auto manager = CoordinatorManager::Create(
      options.coordinator, std::make_unique<RealClock>(),
      options.probe_peers ? MakePeerProber(options.probe_timeout) : Prober());
  if (!manager.ok()) return manager.status();
  c->manager_ = *std::move(manager);
  c->service_ = std::make_unique<CoordinatorService>(
      c->manager_.get(), options.heartbeat_interval,
      options.max_rendezvous_wait);
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &c->port_);
  builder.RegisterService(c->service_.get());
  c->server_ = builder.BuildAndStart();
  if (c->server_ == nullptr || c->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen));
  }
  c->address_ = absl::StrCat(
      options.listen.substr(0, options.listen.rfind(':')), ":", c->port_);
  const absl::Duration lease = options.coordinator.membership.detector.lease;
  InProcessCoordinator* self = c.get();
  c->ticker_ = std::thread([self, lease] {
    while (!self->stop_.HasBeenNotified()) {
      const MonoTime next = self->manager_->Tick();
      self->stop_.WaitUntil(std::min(next, MonoNow() + lease / 4));
    }
  });
  return c;
}

void InProcessCoordinator::Stop() {
  if (stopped_) return;
  stopped_ = true;
  manager_->Shutdown();
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  server_->Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Milliseconds(500)));
  server_->Wait();
}

InProcessCoordinator::~InProcessCoordinator() { Stop(); }

}  // namespace shardd::coordinator
