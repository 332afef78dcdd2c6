// coordinator: owns rank membership, leases, failure detection and the
// rendezvous store of one shardd job.
//
//   coordinator --listen=0.0.0.0:7070 --world_size=4 --sharding_factor=2
//               [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM]]
//               [--health_listen=0.0.0.0:7072]
//
// Prints "coordinator listening on HOST:PORT" once it serves (with
// --listen=HOST:0 the port is the one the kernel chose), then, with
// --health_listen, "coordinator health on HOST:PORT", and with
// --metrics_port, "coordinator metrics on HOST:PORT" (Prometheus /metrics;
// docs/metrics.md lists the names). With --tls_cert/--tls_key the
// Coordinator API is TLS, mutual with --tls_ca, and the coordinator's
// Peer.Probe calls present the same certificate; grpc.health.v1 then stays
// reachable without credentials only on --health_listen. The TLS mode is
// printed on stderr at start ("coordinator: TLS off ..."). SIGTERM or SIGINT
// shut it down cleanly: watchers and waiters are released, in-flight calls
// get a grace period.
//
// When the job fails for good (a shard lost with no live replica and no
// checkpoint every rank holds, or --max_failed_epochs epochs in a row
// without progress: JOB_FAILED in the log), the coordinator keeps serving
// until every member has left (or --failed_drain_s), so that daemons,
// trainers and shardctl read the reason, then exits with status 3
// (core::kExitJobFailed).

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/coordinator_service.h"
#include "daemon/coordinator/peer_prober.h"
#include "daemon/core/exit_status.h"
#include "daemon/core/host_port.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/prometheus_coordinator_observer.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/health_server.h"
#include "daemon/rpc/health_service.h"
#include "daemon/rpc/tls_config.h"
#include "daemon/rpc/tls_flags.h"
#include "grpcpp/grpcpp.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070",
          "host:port to serve the Coordinator API on (port 0: any)");
ABSL_FLAG(int, world_size, 0, "W: the number of ranks of the job (required)");
ABSL_FLAG(int, sharding_factor, 0,
          "F: ranks per shard group; must divide W (required)");
ABSL_FLAG(int64_t, lease_ms, 1500,
          "a member that does not renew its lease within this is removed "
          "(bounds failure detection)");
ABSL_FLAG(int64_t, heartbeat_interval_ms, 500,
          "how often members renew (must be at most half the lease)");
ABSL_FLAG(int64_t, join_timeout_s, 300,
          "record which slots are missing if the job is not ready by then");
ABSL_FLAG(int64_t, probe_timeout_ms, 300,
          "deadline of the Peer.Probe that confirms a reported failure");
ABSL_FLAG(int64_t, partition_quarantine_ms, 30000,
          "a member removed as cut off from its peers (every link to them "
          "reported down both ways) cannot join again from the same peer "
          "address for this long; doubled at each further removal from "
          "that address, up to 10 minutes");
ABSL_FLAG(int, max_failed_epochs, 5,
          "epochs in a row that may fail with the same members in every slot "
          "before the job is declared failed (EPOCH_STALLED)");
ABSL_FLAG(int64_t, rejoin_grace_ms, 0,
          "how long a shard without a live holder is waited for (after the "
          "coordinator starts, or its last holder is removed) before it is "
          "declared lost, unless every slot is claimed; 0: 2 x --lease_ms");
ABSL_FLAG(int64_t, failed_drain_s, 30,
          "after the job failed: longest the coordinator keeps serving for "
          "members to read the reason and leave before it exits (status 3)");
ABSL_FLAG(int64_t, max_rendezvous_wait_s, 300,
          "longest a RendezvousWait may block");
ABSL_FLAG(int, metrics_port, 0,
          "serve Prometheus /metrics on this port (0: off; -1: any free "
          "port, printed)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "IP address /metrics listens on");
ABSL_FLAG(std::string, health_listen, "",
          "also serve grpc.health.v1, and nothing else, in plaintext on this "
          "host:port (port 0: any), for probes that cannot present a "
          "certificate when --tls_cert is set; empty: none");

namespace shardd::coordinator {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "coordinator: %s\n", message.c_str());
  return 2;
}

int Run() {
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (auto hp = core::ParseHostPort(listen, "--listen");
      !hp.ok() && listen.substr(listen.rfind(':') + 1) != "0") {
    return Fail(std::string(hp.status().message()));
  }
  const absl::Duration lease =
      absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  const absl::Duration heartbeat =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  if (lease <= absl::ZeroDuration()) return Fail("--lease_ms must be positive");
  if (heartbeat <= absl::ZeroDuration() || heartbeat * 2 > lease) {
    return Fail(absl::StrCat(
        "--heartbeat_interval_ms must be positive and at most half of "
        "--lease_ms (",
        absl::FormatDuration(lease), ")"));
  }
  const absl::Duration quarantine =
      absl::Milliseconds(absl::GetFlag(FLAGS_partition_quarantine_ms));
  if (quarantine < absl::ZeroDuration()) {
    return Fail("--partition_quarantine_ms must not be negative");
  }
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < -1 || metrics_port > 65535) {
    return Fail("--metrics_port must be in [-1, 65535] (0: off, -1: any)");
  }
  absl::StatusOr<rpc::TlsConfig> tls =
      rpc::TlsConfigFromFlags(rpc::TlsRole::kServer);
  if (!tls.ok()) return Fail(tls.status().ToString());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server_credentials =
      tls->ServerCredentials();
  if (!server_credentials.ok()) {
    return Fail(server_credentials.status().ToString());
  }
  std::fprintf(stderr, "coordinator: %s\n", tls->Describe().c_str());
  const absl::StatusOr<int> insecure_endpoints =
      rpc::CheckPlaintextFromFlags("coordinator", *tls, {{"--listen", listen}});
  if (!insecure_endpoints.ok()) {
    return Fail(std::string(insecure_endpoints.status().message()));
  }
  const std::string health_listen = absl::GetFlag(FLAGS_health_listen);
  if (tls->enabled() && health_listen.empty()) {
    std::fprintf(stderr,
                 "coordinator: no --health_listen: grpc.health.v1 is only "
                 "served over TLS, which probes cannot use\n");
  }
  // Metrics: the registry and observer outlive the manager that reports to
  // them; the server (below) stops first.
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<metrics::PrometheusCoordinatorObserver> observer;
  if (metrics_port != 0) {
    registry = std::make_shared<prometheus::Registry>();
    observer =
        std::make_unique<metrics::PrometheusCoordinatorObserver>(*registry);
  }
  if (observer != nullptr) observer->InsecureEndpoints(*insecure_endpoints);
  CoordinatorOptions options;
  options.observer = observer.get();
  options.membership.world_size = absl::GetFlag(FLAGS_world_size);
  options.membership.sharding_factor = absl::GetFlag(FLAGS_sharding_factor);
  options.membership.detector.lease = lease;
  options.membership.partition_quarantine = quarantine;
  options.membership.partition_quarantine_max =
      std::max(quarantine, absl::Minutes(10));
  options.join_timeout = absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  options.membership.max_failed_epochs = absl::GetFlag(FLAGS_max_failed_epochs);
  options.membership.rejoin_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_rejoin_grace_ms));
  if (options.membership.rejoin_grace < absl::ZeroDuration()) {
    return Fail("--rejoin_grace_ms must not be negative");
  }
  const absl::Duration failed_drain =
      absl::Seconds(absl::GetFlag(FLAGS_failed_drain_s));
  auto manager = CoordinatorManager::Create(
      options, std::make_unique<RealClock>(),
      MakePeerProber(absl::Milliseconds(absl::GetFlag(FLAGS_probe_timeout_ms)),
                     tls->ChannelCredentials()));
  if (!manager.ok()) {
    return Fail(absl::StrCat("--", manager.status().message()));
  }

  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (metrics_port != 0) {
    absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> started =
        metrics::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_address),
                                      std::max(metrics_port, 0), registry);
    if (!started.ok()) {
      return Fail(absl::StrCat("--metrics_address/--metrics_port: ",
                               started.status().ToString()));
    }
    metrics_server = *std::move(started);
  }

  CoordinatorService service(
      manager->get(), heartbeat,
      absl::Seconds(absl::GetFlag(FLAGS_max_rendezvous_wait_s)));
  // grpc.health.v1 ("" SERVING while the process runs) from the same
  // synchronous service as shardd's (daemon/rpc/health_service.h), on the
  // API port and on --health_listen.
  rpc::HealthService health;
  health.SetServingStatus("", true);
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  int port = 0;
  builder.AddListeningPort(listen, *server_credentials, &port);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(absl::StrCat(
        "cannot listen on ", listen,
        tls->enabled() ? " with TLS (does --tls_key belong to --tls_cert?)"
                       : ""));
  }
  std::unique_ptr<rpc::HealthServer> health_server;
  if (!health_listen.empty()) {
    absl::StatusOr<std::unique_ptr<rpc::HealthServer>> started =
        rpc::HealthServer::Start(health_listen, "health_listen", &health);
    if (!started.ok()) return Fail(started.status().ToString());
    health_server = *std::move(started);
  }
  const std::string host = listen.substr(0, listen.rfind(':'));
  std::printf("coordinator listening on %s:%d (W=%d F=%d lease=%s)\n",
              host.c_str(), port, options.membership.world_size,
              options.membership.sharding_factor,
              absl::FormatDuration(lease).c_str());
  if (health_server != nullptr) {
    std::printf("coordinator health on %s\n", health_server->address().c_str());
  }
  if (metrics_server != nullptr) {
    const std::string& m = metrics_server->address();
    std::printf("coordinator metrics on %s:%d\n",
                m.find(':') != std::string::npos
                    ? absl::StrCat("[", m, "]").c_str()
                    : m.c_str(),
                metrics_server->port());
  }
  std::fflush(stdout);

  // Lease timer: expire leases when they are due, at least every lease/4.
  MonoNotification stop;
  std::thread ticker([&] {
    while (!stop.HasBeenNotified()) {
      const MonoTime next = (*manager)->Tick();
      stop.WaitUntil(std::min(next, MonoNow() + lease / 4));
    }
  });

  // Signals are blocked in every thread (see main); wait for one here.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  int signal_number = 0;
  int exit_status = core::kExitOk;
  MonoTime failed_at = MonoTime::InfiniteFuture();
  while (true) {
    const timespec poll{0, 100'000'000};
    signal_number = sigtimedwait(&signals, nullptr, &poll);
    if (signal_number > 0) {
      std::fprintf(stderr, "coordinator: signal %d, shutting down\n",
                   signal_number);
      break;
    }
    const ClusterSnapshot s = (*manager)->Snapshot(0);
    if (!s.failed) continue;
    if (failed_at == MonoTime::InfiniteFuture()) failed_at = MonoNow();
    const bool drained =
        std::none_of(s.slots.begin(), s.slots.end(),
                     [](const SlotRecord& slot) { return slot.live(); });
    if (drained || MonoNow() - failed_at >= failed_drain) {
      std::fprintf(stderr,
                   "coordinator: the job has failed (%s); %s, exiting with "
                   "status %d\n",
                   s.failure.c_str(),
                   drained ? "every member has left" : "drain time is up",
                   core::kExitJobFailed);
      exit_status = core::kExitJobFailed;
      break;
    }
  }
  (*manager)->Shutdown();
  stop.Notify();
  ticker.join();
  health.Shutdown();  // NOT_SERVING; open Watch streams end.
  server->Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Seconds(2)));
  health_server.reset();
  std::fprintf(stderr, "coordinator: stopped\n");
  return exit_status;
}

}  // namespace
}  // namespace shardd::coordinator

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts, so only sigwait
  // sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::SetProgramUsageMessage(
      "shardd coordinator: membership, leases, failure detection, rendezvous");
  absl::ParseCommandLine(argc, argv);
  // Fault tests arm fail points (commit.decided) through the environment.
  if (absl::Status armed = shardd::recovery::Failpoints::ConfigureFromEnv();
      !armed.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", armed.ToString().c_str());
    return 2;
  }
  return shardd::coordinator::Run();
}
