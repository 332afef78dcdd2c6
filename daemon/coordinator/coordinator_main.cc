// coordinator: owns rank membership, leases, failure detection and the
// rendezvous store of one shardd job.
//
//   coordinator --listen=0.0.0.0:7070 --world_size=4 --sharding_factor=2
//               [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM]]
//               [--tls_refresh_interval=60s]
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
// that never got ready, or --max_epochs_without_commit in a row without a
// committed step: JOB_FAILED in the log), the coordinator keeps serving
// until every member has left (or --failed_drain_s), so that daemons,
// trainers and shardctl read the reason, then exits with status 3
// (core::kExitJobFailed). With --metrics_port it first waits, at most
// --failed_report_wait from the failure, until /metrics has been scraped
// once since the failure (shardd_coordinator_job_failed = 1 has reached
// Prometheus, or the SharddJobFailed alert could miss a coordinator that
// lived half a second after the failure); a SIGTERM or SIGINT after the
// failure waits the same way, a second one exits at once (status 3).

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
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/coordinator_service.h"
#include "daemon/coordinator/decision_log.h"
#include "daemon/coordinator/peer_prober.h"
#include "daemon/coordinator/shutdown_decision.h"
#include "daemon/core/clock.h"
#include "daemon/core/exit_status.h"
#include "daemon/core/fd_limit.h"
#include "daemon/core/host_port.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/accept_retry_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/prometheus_coordinator_observer.h"
#include "daemon/metrics/scrape_recorder.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/rpc/accept4_interposer.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/health_server.h"
#include "daemon/rpc/health_service.h"
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
ABSL_FLAG(int, max_epochs_without_commit, 20,
          "epochs in a row that may end without a step committed (ready or "
          "not) with the same members in every slot before the job is "
          "declared failed (EPOCH_STALLED; e.g. a trainer that exited for "
          "good while its daemon lives: its peers' collectives time out "
          "every epoch)");
ABSL_FLAG(int64_t, rejoin_grace_ms, 0,
          "how long a shard without a live holder is waited for (after the "
          "coordinator starts, or its last holder is removed) before it is "
          "declared lost, unless every slot is claimed; 0: 2 x --lease_ms");
ABSL_FLAG(int64_t, failed_drain_s, 30,
          "after the job failed: longest the coordinator keeps serving for "
          "members to read the reason and leave before it exits (status 3)");
ABSL_FLAG(absl::Duration, failed_report_wait, absl::Seconds(60),
          "after the job failed: longest (from the failure) the exit, on "
          "drain or on a first SIGTERM/SIGINT, is held until /metrics has "
          "been scraped once since the failure, so that the SharddJobFailed "
          "alert sees it; only with --metrics_port; 0: not held. Keep it at "
          "least two scrape intervals, and the pod's "
          "terminationGracePeriodSeconds above it");
ABSL_FLAG(int64_t, max_rendezvous_wait_s, 300,
          "longest a RendezvousWait may block");
ABSL_FLAG(int, metrics_port, 0,
          "serve Prometheus /metrics on this port (0: off; -1: any free "
          "port, printed)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "IP address /metrics listens on");
ABSL_FLAG(int, max_pollers, 16,
          "idle gRPC server threads kept waiting for calls (at least 2): "
          "fewer makes every call under load start and end a thread");
ABSL_FLAG(absl::Duration, stall_alert_after, absl::Minutes(15),
          "how long the job may go without a committed step, members live, "
          "before the SharddTrainingStalled alert fires (exported as "
          "shardd_coordinator_stall_alert_after_seconds for the rule; 0: "
          "never)");
ABSL_FLAG(double, behind_late_fraction, 0.1,
          "when this share of the live members (and at least 16) are late "
          "at once, the coordinator judges itself behind (their heartbeats "
          "queued at it, or its own link cut) and holds expired leases back "
          "instead of removing members one by one; in (0, 1]");
ABSL_FLAG(absl::Duration, max_expiry_deferral, absl::Seconds(15),
          "the longest expired leases are held back while the coordinator is "
          "behind (then the members are removed: a real failure of that "
          "many); 0: never held");
ABSL_FLAG(std::string, decision_log, "",
          "record every commit decision in this file (appended and synced "
          "before any member is answered), and at start settle the step its "
          "last one decided for members in doubt about it: a coordinator "
          "that dies with the only member that applied a commit then loses "
          "nothing. Keep it where a restarted coordinator finds it (a "
          "volume that outlives the container); empty: none");
ABSL_FLAG(std::string, health_listen, "",
          "also serve grpc.health.v1, and nothing else, in plaintext on this "
          "host:port (port 0: any), for probes that cannot present a "
          "certificate when --tls_cert is set; empty: none");

namespace shardd::coordinator {
namespace {

// Every step of Run below that can refuse to start returns the line the
// coordinator prints then (after "coordinator: ") as its status's message.

int Fail(const std::string& message) {
  std::fprintf(stderr, "coordinator: %s\n", message.c_str());
  return 2;
}

int Fail(const absl::Status& status) {
  return Fail(std::string(status.message()));
}

// What the flags say about listening and leases, checked.
struct ServeFlags {
  std::string listen;
  absl::Duration lease;
  absl::Duration heartbeat;
  absl::Duration quarantine;
  int metrics_port = 0;
  absl::Duration stall_alert_after;
  double behind_late_fraction = 0.1;
  absl::Duration max_expiry_deferral;
  std::string health_listen;
};

// Reads and checks the flags, in the order the coordinator has always
// checked them (the first refusal is the one printed).
absl::StatusOr<ServeFlags> ParseServeFlags() {
  ServeFlags flags;
  flags.listen = absl::GetFlag(FLAGS_listen);
  const std::string& listen = flags.listen;
  if (auto hp = core::ParseHostPort(listen, "--listen");
      !hp.ok() && listen.substr(listen.rfind(':') + 1) != "0") {
    return hp.status();
  }
  flags.lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  flags.heartbeat =
      absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_interval_ms));
  if (flags.lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--lease_ms must be positive");
  }
  if (flags.heartbeat <= absl::ZeroDuration() ||
      flags.heartbeat * 2 > flags.lease) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_interval_ms must be positive and at most half of "
        "--lease_ms (",
        absl::FormatDuration(flags.lease), ")"));
  }
  flags.quarantine =
      absl::Milliseconds(absl::GetFlag(FLAGS_partition_quarantine_ms));
  if (flags.quarantine < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--partition_quarantine_ms must not be negative");
  }
  flags.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (flags.metrics_port < -1 || flags.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        "--metrics_port must be in [-1, 65535] (0: off, -1: any)");
  }
  flags.stall_alert_after = absl::GetFlag(FLAGS_stall_alert_after);
  if (flags.stall_alert_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--stall_alert_after must not be negative (0: the alert never fires)");
  }
  flags.behind_late_fraction = absl::GetFlag(FLAGS_behind_late_fraction);
  if (!(flags.behind_late_fraction > 0 && flags.behind_late_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--behind_late_fraction must be in (0, 1], got ",
                     flags.behind_late_fraction));
  }
  flags.max_expiry_deferral = absl::GetFlag(FLAGS_max_expiry_deferral);
  if (flags.max_expiry_deferral < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--max_expiry_deferral must not be negative (0: never held)");
  }
  flags.health_listen = absl::GetFlag(FLAGS_health_listen);
  return flags;
}

// The manager's options from the flags.
// How often the lease timer runs at the least.
absl::Duration LeaseCheckPeriod(absl::Duration lease) { return lease / 4; }

absl::StatusOr<CoordinatorOptions> BuildOptions(
    const ServeFlags& flags, metrics::CoordinatorObserver* observer) {
  CoordinatorOptions options;
  options.observer = observer;
  options.membership.world_size = absl::GetFlag(FLAGS_world_size);
  options.membership.sharding_factor = absl::GetFlag(FLAGS_sharding_factor);
  options.membership.detector.lease = flags.lease;
  options.membership.detector.behind_late_fraction = flags.behind_late_fraction;
  options.membership.detector.max_expiry_deferral = flags.max_expiry_deferral;
  // ServeUntilStopped's ticker checks leases at least this often.
  options.membership.detector.check_period = LeaseCheckPeriod(flags.lease);
  options.membership.partition_quarantine = flags.quarantine;
  options.membership.partition_quarantine_max =
      std::max(flags.quarantine, absl::Minutes(10));
  options.join_timeout = absl::Seconds(absl::GetFlag(FLAGS_join_timeout_s));
  options.membership.max_failed_epochs = absl::GetFlag(FLAGS_max_failed_epochs);
  options.membership.max_epochs_without_commit =
      absl::GetFlag(FLAGS_max_epochs_without_commit);
  options.membership.rejoin_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_rejoin_grace_ms));
  if (options.membership.rejoin_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--rejoin_grace_ms must not be negative");
  }
  if (const std::string path = absl::GetFlag(FLAGS_decision_log);
      !path.empty()) {
    absl::StatusOr<std::unique_ptr<DecisionLog>> log = DecisionLog::Open(path);
    if (!log.ok()) {
      return absl::Status(
          log.status().code(),
          absl::StrCat("--decision_log: ", log.status().message()));
    }
    if ((*log)->last().has_value()) {
      std::fprintf(stderr,
                   "coordinator: --decision_log %s: the last decision "
                   "recorded commits step %lld (epoch %lld)\n",
                   path.c_str(), static_cast<long long>((*log)->last()->step),
                   static_cast<long long>((*log)->last()->epoch));
    }
    options.decision_log = std::move(*log);
  }
  return options;
}

// Serves /metrics of `registry` (nothing when the port is 0).
absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> StartMetricsServer(
    int metrics_port, std::shared_ptr<prometheus::Collectable> registry) {
  if (metrics_port == 0) return nullptr;
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> started =
      metrics::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_address),
                                    std::max(metrics_port, 0),
                                    std::move(registry));
  if (!started.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address/--metrics_port: ", started.status().ToString()));
  }
  (*started)->AddCollectable(metrics::AcceptRetryCollector::ForThisProcess());
  return started;
}

// The Coordinator API's server and, with --health_listen, the plaintext
// health server; the health server stops first.
struct Servers {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::unique_ptr<rpc::HealthServer> health_server;
};

// Serves `service` and grpc.health.v1 ("" SERVING while the process runs)
// from the same synchronous service as shardd's
// (daemon/rpc/health_service.h), on the API port and on --health_listen.
absl::StatusOr<Servers> StartServers(const ServeFlags& flags,
                                     const rpc::ServerTls& credentials,
                                     CoordinatorService& service,
                                     rpc::HealthService& health) {
  health.SetServingStatus("", true);
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  Servers servers;
  builder.AddListeningPort(flags.listen, credentials.server_credentials,
                           &servers.port);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  // Every watch stream holds a sync-server thread; with gRPC's default of
  // at most 2 idle pollers, under load each unary call (a heartbeat) starts
  // a thread and ends one. Measured with bench/coordinator_sim at W = 1,024
  // (capacity scenario): 143 us of coordinator CPU per heartbeat with the
  // default, 48 us with 16 idle pollers.
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS,
      std::max(2, absl::GetFlag(FLAGS_max_pollers)));
  servers.server = builder.BuildAndStart();
  if (servers.server == nullptr || servers.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", flags.listen,
        credentials.enabled ? " with TLS (does --tls_key belong to --tls_cert?)"
                            : ""));
  }
  if (!flags.health_listen.empty()) {
    absl::StatusOr<std::unique_ptr<rpc::HealthServer>> started =
        rpc::HealthServer::Start(flags.health_listen, "health_listen", &health);
    if (!started.ok()) {
      return absl::UnavailableError(started.status().ToString());
    }
    servers.health_server = *std::move(started);
  }
  return servers;
}

// The lines tests and scripts wait for: where each API listens.
void PrintListening(const ServeFlags& flags, const CoordinatorOptions& options,
                    const Servers& servers,
                    const metrics::MetricsServer* metrics_server) {
  const std::string host = flags.listen.substr(0, flags.listen.rfind(':'));
  std::printf("coordinator listening on %s:%d (W=%d F=%d lease=%s)\n",
              host.c_str(), servers.port, options.membership.world_size,
              options.membership.sharding_factor,
              absl::FormatDuration(flags.lease).c_str());
  if (servers.health_server != nullptr) {
    std::printf("coordinator health on %s\n",
                servers.health_server->address().c_str());
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
}

// SIGTERM and SIGINT: blocked in every thread (main), taken here.
sigset_t TerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

// When the coordinator may exit, from the flags (--metrics_port: whether
// there is a /metrics to wait for).
absl::StatusOr<ShutdownOptions> ParseShutdownFlags(int metrics_port) {
  ShutdownOptions options;
  options.failed_drain = absl::Seconds(absl::GetFlag(FLAGS_failed_drain_s));
  options.failed_report_wait = absl::GetFlag(FLAGS_failed_report_wait);
  if (options.failed_report_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--failed_report_wait must not be negative (0: exit without waiting "
        "for a /metrics scrape)");
  }
  options.metrics_served = metrics_port != 0;
  return options;
}

// Serves until SIGTERM or SIGINT (exit status 0) or, once the job has
// failed, until DecideShutdown lets it go (exit status 3). `scrapes` (null
// without /metrics) says when /metrics was last collected.
int WaitForSignalOrDrainedFailure(CoordinatorManager& manager,
                                  const ShutdownOptions& options,
                                  const metrics::ScrapeRecorder* scrapes) {
  const sigset_t signals = TerminationSignals();
  ShutdownInput in;
  std::string failure;
  std::string announced;  // The leave reason last logged as held.
  while (true) {
    const timespec poll{0, 100'000'000};
    const int signal_number = sigtimedwait(&signals, nullptr, &poll);
    if (signal_number > 0) {
      ++in.signals;
      std::fprintf(stderr, "coordinator: signal %d%s\n", signal_number,
                   in.failed ? "" : ", shutting down");
    }
    const ClusterSnapshot s = manager.Snapshot(0);
    in.now = MonoNow();
    if (s.failed && !in.failed) {
      // The manager set the job-failed gauge before its snapshot showed
      // the failure: a collection that begins from now on reads it.
      in.failed = true;
      in.failed_at = in.now;
      failure = s.failure;
    }
    in.drained =
        std::none_of(s.slots.begin(), s.slots.end(),
                     [](const SlotRecord& slot) { return slot.live(); });
    if (scrapes != nullptr) in.last_scrape = scrapes->LastCollectionStart();
    const ShutdownDecision d = DecideShutdown(options, in);
    if (d.exit) {
      if (in.failed) {
        std::fprintf(stderr,
                     "coordinator: the job has failed (%s); %s%s%s, exiting "
                     "with status %d\n",
                     failure.c_str(), d.leave.c_str(),
                     d.report.empty() ? "" : "; ", d.report.c_str(),
                     d.exit_status);
      }
      return d.exit_status;
    }
    if (d.awaiting_scrape && d.leave != announced) {
      announced = d.leave;
      std::fprintf(
          stderr,
          "coordinator: the job has failed; %s, but /metrics has not been "
          "scraped since the failure: waiting up to %s more for a scrape "
          "(--failed_report_wait), so that the SharddJobFailed alert sees "
          "shardd_coordinator_job_failed = 1; a second SIGTERM/SIGINT exits "
          "now\n",
          d.leave.c_str(),
          absl::FormatDuration(
              absl::Trunc(d.report_deadline - in.now, absl::Milliseconds(100)))
              .c_str());
    }
  }
}

// Expires leases while the coordinator serves, then shuts it down in order
// and returns the exit status.
int ServeUntilStopped(CoordinatorManager& manager, absl::Duration lease,
                      const ShutdownOptions& shutdown,
                      const metrics::ScrapeRecorder* scrapes,
                      rpc::HealthService& health, Servers& servers) {
  // Lease timer: expire leases when they are due, at least every
  // LeaseCheckPeriod (which the failure detector is told: a longer gap
  // means the coordinator did not run).
  MonoNotification stop;
  std::thread ticker([&] {
    while (!stop.HasBeenNotified()) {
      const MonoTime next = manager.Tick();
      stop.WaitUntil(std::min(next, MonoNow() + LeaseCheckPeriod(lease)));
    }
  });
  const int exit_status =
      WaitForSignalOrDrainedFailure(manager, shutdown, scrapes);
  manager.Shutdown();
  stop.Notify();
  ticker.join();
  health.Shutdown();  // NOT_SERVING; open Watch streams end.
  servers.server->Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Seconds(2)));
  servers.health_server.reset();
  std::fprintf(stderr, "coordinator: stopped\n");
  return exit_status;
}

int Run() {
  absl::StatusOr<ServeFlags> flags = ParseServeFlags();
  if (!flags.ok()) return Fail(flags.status());
  absl::StatusOr<ShutdownOptions> shutdown =
      ParseShutdownFlags(flags->metrics_port);
  if (!shutdown.ok()) return Fail(shutdown.status());
  absl::StatusOr<rpc::ServerTls> credentials = rpc::ServerTlsFromFlags(
      "coordinator", {{"--listen", flags->listen}}, flags->health_listen);
  if (!credentials.ok()) return Fail(credentials.status());
  // Metrics: the registry and observer outlive the manager that reports to
  // them; the server (below) stops first.
  std::shared_ptr<prometheus::Registry> registry;
  std::shared_ptr<metrics::ScrapeRecorder> scrapes;
  std::unique_ptr<metrics::PrometheusCoordinatorObserver> observer;
  if (flags->metrics_port != 0) {
    registry = std::make_shared<prometheus::Registry>();
    scrapes =
        std::make_shared<metrics::ScrapeRecorder>(registry, Clock::Real());
    observer =
        std::make_unique<metrics::PrometheusCoordinatorObserver>(*registry);
    observer->InsecureEndpoints(credentials->insecure_endpoints);
    observer->StallAlertAfter(flags->stall_alert_after);
  }
  absl::StatusOr<CoordinatorOptions> options =
      BuildOptions(*flags, observer.get());
  if (!options.ok()) return Fail(options.status());
  auto manager = CoordinatorManager::Create(
      *options, std::make_unique<RealClock>(),
      MakePeerProber(absl::Milliseconds(absl::GetFlag(FLAGS_probe_timeout_ms)),
                     credentials->channel_credentials));
  if (!manager.ok()) {
    return Fail(absl::StrCat("--", manager.status().message()));
  }
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      StartMetricsServer(flags->metrics_port, scrapes);
  if (!metrics_server.ok()) return Fail(metrics_server.status());
  CoordinatorService service(
      manager->get(), flags->heartbeat,
      absl::Seconds(absl::GetFlag(FLAGS_max_rendezvous_wait_s)));
  rpc::HealthService health;
  absl::StatusOr<Servers> servers =
      StartServers(*flags, *credentials, service, health);
  if (!servers.ok()) return Fail(servers.status());
  PrintListening(*flags, *options, *servers, metrics_server->get());
  return ServeUntilStopped(**manager, flags->lease, *shutdown, scrapes.get(),
                           health, *servers);
}

}  // namespace
}  // namespace shardd::coordinator

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts, so only sigwait
  // sees them.
  const sigset_t signals = shardd::coordinator::TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::SetProgramUsageMessage(
      "shardd coordinator: membership, leases, failure detection, rendezvous");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks lock order at every absl::Mutex acquisition (its
  // deadlock detector's GraphCycles); gRPC's own locks are absl::Mutexes
  // too. Measured with bench/coordinator_sim at W = 1,024: 8% of the
  // coordinator's CPU. The check stays on in tests, which run the same
  // locking in-process.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A connection per member (coordinator) or per peer (daemon): far more
  // descriptors than a default soft limit of 1024 (core/fd_limit.h).
  shardd::core::FdLimit::RaiseAtStartup("coordinator");
  // And a listener that meets a shortage anyway keeps listening
  // (rpc/accept_retry.h).
  shardd::rpc::PrepareAcceptRetry("coordinator");
  // Fault tests arm fail points (commit.decided) through the environment.
  if (absl::Status armed = shardd::recovery::Failpoints::ConfigureFromEnv();
      !armed.ok()) {
    std::fprintf(stderr, "coordinator: %s\n", armed.ToString().c_str());
    return 2;
  }
  return shardd::coordinator::Run();
}
