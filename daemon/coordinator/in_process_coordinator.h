#ifndef SHARDD_DAEMON_COORDINATOR_IN_PROCESS_COORDINATOR_H_
#define SHARDD_DAEMON_COORDINATOR_IN_PROCESS_COORDINATOR_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/coordinator_service.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/grpcpp.h"

namespace shardd::coordinator {

struct InProcessCoordinatorOptions {
  CoordinatorOptions coordinator;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration max_rendezvous_wait = absl::Seconds(60);
  // host:port to listen on; port 0: any free port.
  std::string listen = "127.0.0.1:0";
  // Probe reported suspects over Peer.Probe (off: decide on leases only).
  bool probe_peers = false;
  absl::Duration probe_timeout = absl::Milliseconds(300);
};

// A whole coordinator (manager, gRPC service, lease timer) inside the
// calling process, on a real gRPC server: for tests and benchmarks that
// speak the wire protocol without spawning the binary.
//
// Thread-safe accessors; destruction (or Stop) shuts the server down and
// joins the lease timer. Owns everything it creates.
class InProcessCoordinator {
 public:
  static absl::StatusOr<std::unique_ptr<InProcessCoordinator>> Start(
      const InProcessCoordinatorOptions& options);
  ~InProcessCoordinator();

  // "127.0.0.1:PORT".
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  CoordinatorManager& manager() { return *manager_; }

  // Shuts down like SIGTERM does: watchers released, server stopped.
  void Stop();

 private:
  InProcessCoordinator() = default;

  std::unique_ptr<CoordinatorManager> manager_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  MonoNotification stop_;
  std::thread ticker_;
  bool stopped_ = false;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_IN_PROCESS_COORDINATOR_H_
