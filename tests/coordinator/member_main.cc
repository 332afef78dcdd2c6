// member: a small process that speaks the daemon side of the coordinator
// protocol, for integration tests.
//
//   member --coordinator=127.0.0.1:PORT --rank=2 --identity=node-2 [--gloo]
//
// It serves Peer.Probe on 127.0.0.1:0 (the other Peer RPCs answer
// UNIMPLEMENTED), joins through MemberClient, and whenever a new epoch has
// all W members live it (with --gloo) forms a Gloo communicator of that
// epoch through the coordinator's rendezvous store, all-reduces and checks
// the sum, then reports READY. Machine-readable lines on stdout:
//   joined rank=R epoch=E
//   rejoined rank=R joins=N
//   epoch epoch=E members=N
//   allreduce ok epoch=E sum=S        (or: allreduce failed epoch=E: ...)
//   ready epoch=E                     (or: ready failed epoch=E: ...)
//   stopped
// SIGTERM or SIGINT: leaves the cluster and exits 0.

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "daemon/comm/coordinator_store/coordinator_store.h"
#include "daemon/comm/gloo_collective.h"
#include "daemon/coordinator/member_client.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/exclusive_port.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/peer.grpc.pb.h"

ABSL_FLAG(std::string, coordinator, "", "host:port of the coordinator");
ABSL_FLAG(int, rank, -1, "slot to claim; -1: any empty slot");
ABSL_FLAG(std::string, identity, "", "stable identity (required)");
ABSL_FLAG(bool, gloo, false,
          "form a Gloo communicator per epoch and check an all-reduce");
ABSL_FLAG(int, gloo_elements, 4096, "floats in the checked all-reduce");
ABSL_FLAG(int64_t, gloo_timeout_ms, 15000,
          "connect and operation timeout of the Gloo communicator");

namespace shardd::member {
namespace {

namespace pb = ::shardd::v1;

// Prints one line and flushes: the test driver reads line by line.
template <typename... Args>
void Say(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::printf("%s\n", absl::StrFormat(format, args...).c_str());
  std::fflush(stdout);
}

// Peer service with only Probe implemented.
class ProbeOnlyPeer final : public pb::Peer::Service {
 public:
  std::atomic<int> rank{-1};
  std::atomic<int64_t> epoch{0};
  std::atomic<int64_t> step{0};
  std::atomic<bool> ready{false};
  std::string incarnation;

  grpc::Status Probe(grpc::ServerContext*, const pb::ProbeRequest*,
                     pb::ProbeResponse* response) override {
    response->set_rank(rank.load());
    response->set_epoch(epoch.load());
    response->set_committed_step(step.load());
    response->set_state(ready.load() ? pb::MEMBER_STATE_READY
                                     : pb::MEMBER_STATE_JOINING);
    response->set_incarnation(incarnation);
    return grpc::Status::OK;
  }
};

// Forms the epoch's world communicator and checks an all-reduce of
// (rank + 1) everywhere: every element must be W (W + 1) / 2.
absl::StatusOr<double> AllReduceCheck(std::shared_ptr<grpc::Channel> channel,
                                      int64_t epoch, int rank, int world,
                                      const std::string& lease_token) {
  comm::CoordinatorStoreOptions store_options;
  store_options.rank = rank;
  store_options.lease_token = lease_token;
  comm::CoordinatorStore store(std::move(channel), epoch, store_options);
  comm::GlooCollectiveOptions options;
  options.rank = rank;
  options.size = world;
  options.epoch = epoch;
  options.group = "world";
  options.hostname = "127.0.0.1";
  options.connect_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_gloo_timeout_ms));
  options.default_op_timeout = options.connect_timeout;
  absl::StatusOr<std::unique_ptr<comm::Collective>> collective =
      comm::CreateGlooCollective(options, store);
  if (!collective.ok()) return collective.status();
  const int n = absl::GetFlag(FLAGS_gloo_elements);
  std::vector<float> buffer(n, static_cast<float>(rank + 1));
  absl::Status s = (*collective)
                       ->AllReduce(buffer.data(), n, core::DType::kFloat32,
                                   comm::ReduceOp::kSum)
                       ->Wait();
  if (!s.ok()) return s;
  const float expected = world * (world + 1) / 2.0f;
  for (int i = 0; i < n; ++i) {
    if (buffer[i] != expected) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", buffer[i],
                                              ", expected ", expected));
    }
  }
  return expected;
}

int Run() {
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty() || absl::GetFlag(FLAGS_identity).empty()) {
    std::fprintf(stderr, "member: --coordinator and --identity are required\n");
    return 2;
  }
  ProbeOnlyPeer peer;
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&peer);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "member: cannot serve Peer on 127.0.0.1\n");
    return 2;
  }

  std::atomic<bool> ever_ready{false};
  coordinator::MemberClientOptions options;
  options.coordinator_address = coordinator;
  options.rank = absl::GetFlag(FLAGS_rank);
  options.identity = absl::GetFlag(FLAGS_identity);
  options.peer_address = absl::StrCat("127.0.0.1:", port);
  options.info["pid"] = absl::StrCat(getpid());
  // A member that was READY once holds its (simulated) shard at step 0.
  options.shard_status = [&] {
    return coordinator::MemberShardStatus{ever_ready.load(), 0, 0};
  };
  absl::StatusOr<std::unique_ptr<coordinator::MemberClient>> client =
      coordinator::MemberClient::Join(options);
  if (!client.ok()) {
    Say("join failed: %s", client.status().ToString());
    return 1;
  }
  peer.incarnation = (*client)->incarnation();
  peer.rank = (*client)->rank();
  Say("joined rank=%d epoch=%d", (*client)->rank(),
      (*client)->join_response().epoch());

  std::atomic<bool> stop{false};
  std::thread signals([&stop] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int signal_number = 0;
    sigwait(&set, &signal_number);
    stop = true;
  });
  signals.detach();

  auto channel =
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials());
  int64_t handled = 0;
  int64_t joins = 1;
  int exit_code = 0;
  while (!stop.load()) {
    // Short waits so that a signal is noticed within 100 ms.
    absl::StatusOr<coordinator::MembershipView> view = (*client)->WaitFor(
        [handled](const coordinator::MembershipView& v) {
          return v.epoch > handled && v.AllLive();
        },
        MonoNow() + absl::Milliseconds(100));
    const coordinator::MembershipView now = (*client)->view();
    if (now.joins > joins) {
      joins = now.joins;
      Say("rejoined rank=%d joins=%d", now.rank, joins);
    }
    if (absl::IsDeadlineExceeded(view.status())) continue;
    if (!view.ok()) {
      Say("member error: %s", view.status().ToString());
      exit_code = 3;
      break;
    }
    handled = view->epoch;
    Say("epoch epoch=%d members=%d", handled, view->LiveCount());
    if (absl::GetFlag(FLAGS_gloo)) {
      absl::StatusOr<double> sum =
          AllReduceCheck(channel, handled, view->rank, view->world_size,
                         (*client)->lease_token());
      if (!sum.ok()) {
        // The epoch moved on (ABORTED) or a peer vanished: the next epoch
        // with all members live gets a fresh communicator.
        Say("allreduce failed epoch=%d: %s", handled, sum.status().ToString());
        continue;
      }
      Say("allreduce ok epoch=%d sum=%g", handled, *sum);
    }
    const absl::Status ready = (*client)->SetReady(handled, 0);
    if (!ready.ok()) {
      Say("ready failed epoch=%d: %s", handled, ready.ToString());
      continue;
    }
    ever_ready = true;
    peer.epoch = handled;
    peer.ready = true;
    Say("ready epoch=%d", handled);
  }
  if (stop.load()) {
    const absl::Status left = (*client)->Leave("SIGTERM");
    if (!left.ok()) Say("leave failed: %s", left.ToString());
  }
  client->reset();
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  Say("stopped");
  return exit_code;
}

}  // namespace
}  // namespace shardd::member

int main(int argc, char** argv) {
  // Signals go to the sigwait thread only.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  absl::ParseCommandLine(argc, argv);
  return shardd::member::Run();
}
