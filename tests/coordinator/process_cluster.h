#ifndef SHARDD_TESTS_COORDINATOR_PROCESS_CLUSTER_H_
#define SHARDD_TESTS_COORDINATOR_PROCESS_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::tests {

struct ProcessClusterOptions {
  std::string coordinator_binary;
  std::string member_binary;
  int world_size = 4;
  int sharding_factor = 2;
  int64_t lease_ms = 1500;
  int64_t heartbeat_interval_ms = 500;
  // Serve Prometheus metrics on 127.0.0.1, any free port (metrics_port()).
  bool metrics = false;
};

// A coordinator process and member processes on 127.0.0.1, for tests.
//
// Starts the coordinator on a free port below the kernel's ephemeral range
// (parsed from its "listening on" line; its metrics port, when asked, is
// ephemeral) and can kill and restart it on the same port; starts members
// (tests/coordinator:member); reads the cluster state over gRPC. Every wait has
// a deadline. Destruction SIGKILLs every child still running.
//
// Not thread-safe. Owns its children.
class ProcessCluster {
 public:
  explicit ProcessCluster(ProcessClusterOptions options)
      : options_(std::move(options)) {}

  // Starts the coordinator (port 0: a free one below the ephemeral range,
  // which a restart can count on getting back) and connects a stub.
  absl::Status StartCoordinator(int port = 0);
  // SIGKILLs the coordinator and waits for it to be reaped.
  absl::Status KillCoordinator();
  int port() const { return port_; }
  // The coordinator's /metrics port (options.metrics), else 0.
  int metrics_port() const { return metrics_port_; }
  std::string address() const;
  Subprocess& coordinator() { return *coordinator_; }

  // Starts a member and waits for its "joined rank=R" line; returns its
  // index in members().
  absl::StatusOr<int> StartMember(int rank, const std::string& identity,
                                  bool gloo, absl::Time deadline);
  std::vector<std::unique_ptr<Subprocess>>& members() { return members_; }

  absl::StatusOr<shardd::v1::ClusterState> State();
  // Polls GetClusterState every 20 ms until `done` holds; returns that state.
  absl::StatusOr<shardd::v1::ClusterState> WaitForState(
      const std::function<bool(const shardd::v1::ClusterState&)>& done,
      absl::Time deadline, absl::string_view what);
  // Ready with every slot READY, in an epoch above `min_epoch`.
  absl::StatusOr<shardd::v1::ClusterState> WaitForReady(int64_t above_epoch,
                                                        absl::Time deadline);

  shardd::v1::Coordinator::Stub& stub() { return *stub_; }

 private:
  // One attempt on `port`; OUT_OF_RANGE when the coordinator exited before
  // listening (the port is taken).
  absl::Status StartCoordinatorOn(int port);

  ProcessClusterOptions options_;
  std::unique_ptr<Subprocess> coordinator_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<shardd::v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<Subprocess>> members_;
};

}  // namespace shardd::tests

#endif  // SHARDD_TESTS_COORDINATOR_PROCESS_CLUSTER_H_
