#include "tests/coordinator/process_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::tests {

namespace pb = ::shardd::v1;

std::string ProcessCluster::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::Status ProcessCluster::StartCoordinator(int port) {
  if (port != 0) return StartCoordinatorOn(port);
  // A port below the kernel's ephemeral range (32768-60999 by default), so
  // that no other process's bind to port 0 can take it while a test has
  // killed the coordinator and is about to restart it there. Another test
  // may pick the same one: the coordinator then cannot listen (our servers
  // never share a port) and exits, and the next candidate is tried.
  std::mt19937 random(static_cast<uint32_t>(getpid()) ^
                      static_cast<uint32_t>(absl::ToUnixNanos(absl::Now())));
  std::uniform_int_distribution<int> pick(20000, 32000);
  absl::Status last;
  for (int attempt = 0; attempt < 20; ++attempt) {
    last = StartCoordinatorOn(pick(random));
    if (!absl::IsOutOfRange(last)) return last;  // OUT_OF_RANGE: it exited.
  }
  return last;
}

absl::Status ProcessCluster::StartCoordinatorOn(int port) {
  std::vector<std::string> argv = {
      options_.coordinator_binary,
      absl::StrCat("--listen=127.0.0.1:", port),
      absl::StrCat("--world_size=", options_.world_size),
      absl::StrCat("--sharding_factor=", options_.sharding_factor),
      absl::StrCat("--lease_ms=", options_.lease_ms),
      absl::StrCat("--heartbeat_interval_ms=", options_.heartbeat_interval_ms)};
  if (options_.metrics) {
    argv.push_back("--metrics_port=-1");
    argv.push_back("--metrics_address=127.0.0.1");
  }
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Spawn(std::move(argv), "coordinator");
  if (!p.ok()) return p.status();
  coordinator_ = *std::move(p);
  absl::StatusOr<std::string> line = coordinator_->WaitForLine(
      "coordinator listening on ", absl::Now() + absl::Seconds(20));
  if (!line.ok()) return line.status();
  // "coordinator listening on 127.0.0.1:PORT (W=...)"
  const size_t colon = line->find(':', line->find("listening on "));
  const size_t space = line->find(' ', colon);
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(line->substr(colon + 1, space - colon - 1), &port_)) {
    return absl::InternalError(absl::StrCat("cannot parse port: ", *line));
  }
  metrics_port_ = 0;
  if (options_.metrics) {
    // "coordinator metrics on 127.0.0.1:PORT"
    absl::StatusOr<std::string> metrics = coordinator_->WaitForLine(
        "coordinator metrics on ", absl::Now() + absl::Seconds(20));
    if (!metrics.ok()) return metrics.status();
    const size_t at = metrics->rfind(':');
    if (at == std::string::npos ||
        !absl::SimpleAtoi(metrics->substr(at + 1), &metrics_port_)) {
      return absl::InternalError(
          absl::StrCat("cannot parse the metrics port: ", *metrics));
    }
  }
  channel_ = grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
  stub_ = pb::Coordinator::NewStub(channel_);
  return absl::OkStatus();
}

absl::Status ProcessCluster::KillCoordinator() {
  coordinator_->Signal(SIGKILL);
  return coordinator_->Wait(absl::Now() + absl::Seconds(10)).status();
}

absl::StatusOr<int> ProcessCluster::StartMember(int rank,
                                                const std::string& identity,
                                                bool gloo,
                                                absl::Time deadline) {
  std::vector<std::string> argv = {
      options_.member_binary, absl::StrCat("--coordinator=", address()),
      absl::StrCat("--rank=", rank), absl::StrCat("--identity=", identity)};
  if (gloo) argv.push_back("--gloo");
  absl::StatusOr<std::unique_ptr<Subprocess>> p =
      Subprocess::Spawn(std::move(argv), identity);
  if (!p.ok()) return p.status();
  members_.push_back(*std::move(p));
  absl::StatusOr<std::string> line =
      members_.back()->WaitForLine("joined rank=", deadline);
  if (!line.ok()) return line.status();
  return static_cast<int>(members_.size()) - 1;
}

absl::StatusOr<pb::ClusterState> ProcessCluster::State() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  pb::GetClusterStateRequest request;
  pb::ClusterState state;
  const grpc::Status s = stub_->GetClusterState(&context, request, &state);
  if (!s.ok()) return rpc::FromGrpc(s);
  return state;
}

absl::StatusOr<pb::ClusterState> ProcessCluster::WaitForState(
    const std::function<bool(const pb::ClusterState&)>& done,
    absl::Time deadline, absl::string_view what) {
  absl::Status last = absl::OkStatus();
  pb::ClusterState state;
  while (true) {
    absl::StatusOr<pb::ClusterState> s = State();
    if (s.ok()) {
      if (done(*s)) return s;
      state = *std::move(s);
    } else {
      last = s.status();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "cluster not ", what, " by the deadline; last error: ",
          last.ToString(), "; last state: ", state.ShortDebugString()));
    }
    // Polling a server at a fixed rate, not synchronising by sleeping.
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<pb::ClusterState> ProcessCluster::WaitForReady(
    int64_t above_epoch, absl::Time deadline) {
  return WaitForState(
      [above_epoch](const pb::ClusterState& s) {
        if (!s.ready() || s.epoch() <= above_epoch) return false;
        for (const pb::SlotState& slot : s.slots()) {
          if (slot.state() != pb::MEMBER_STATE_READY) return false;
        }
        return true;
      },
      deadline, absl::StrCat("ready above epoch ", above_epoch));
}

}  // namespace shardd::tests
