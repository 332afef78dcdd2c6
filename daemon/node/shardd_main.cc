// shardd: the node daemon. Serves the Trainer API to the local trainer
// (Unix socket by default), the Peer API to other daemons, joins the
// coordinator and forms each epoch's Gloo communicators.
//
//   shardd --coordinator=127.0.0.1:7070 --identity=node-0 [--rank=0]
//          [--listen_unix=/dev/shm/shardd.sock] [--listen_tcp=HOST:PORT]
//          [--peer_listen=127.0.0.1:0] [--shm_dir=/dev/shm] [--device=cpu]
//          [--tls_cert=PEM --tls_key=PEM [--tls_ca=PEM]]
//          [--tls_refresh_interval=60s]
//          [--health_listen=0.0.0.0:7072]
//
// Prints "shardd rank R listening on unix:PATH peer HOST:PORT" once joined,
// then, with --health_listen, "shardd health on HOST:PORT", and with
// --metrics_port, "shardd metrics on HOST:PORT" (Prometheus /metrics, served
// from before the join; docs/metrics.md lists the names).
// TLS (--tls_cert/--tls_key; mutual with --tls_ca, the CA of the peers'
// and the coordinator's certificates): the Peer API and --listen_tcp are
// TLS, and every channel to the coordinator and to peers presents the same
// certificate. The Unix socket stays local (mode 0600). grpc.health.v1 is
// then reachable without credentials only on --health_listen (plaintext,
// health only). The TLS mode is printed on stderr at start.
// SIGTERM/SIGINT: stops accepting, drains in-flight calls (5 s), leaves the
// coordinator, frees its shared memory and the socket, exits 0.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/core/device_choice.h"
#include "daemon/core/fd_limit.h"
#include "daemon/core/host_port.h"
#include "daemon/memory/device_probe.h"
#include "daemon/memory/memory_limit_reader.h"
#ifdef SHARDD_WITH_CUDA
#include "daemon/node/cuda/cuda_engine_backend.h"
#endif
#include "daemon/core/exit_status.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/accept_retry_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/metrics/prometheus_node_observer.h"
#include "daemon/node/coordinator_ports.h"
#include "daemon/node/engine_admission.h"
#include "daemon/node/node_flag_options.h"
#include "daemon/node/node_manager.h"
#include "daemon/node/peer_client.h"
#include "daemon/node/peer_probe_pool.h"
#include "daemon/node/peer_service.h"
#include "daemon/node/shm_janitor.h"
#include "daemon/node/trainer_service.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/rpc/accept4_interposer.h"
#include "daemon/rpc/exclusive_port.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/health_server.h"
#include "daemon/rpc/health_service.h"
#include "daemon/rpc/tls_flags.h"
#include "daemon/rpc/unix_socket_probe.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"
#include "prometheus/registry.h"

ABSL_FLAG(std::string, coordinator, "", "host:port of the coordinator");
ABSL_FLAG(std::string, identity, "", "stable identity (required)");
ABSL_FLAG(int, rank, -1, "slot to claim; -1: any empty slot");
ABSL_FLAG(std::string, listen_unix, "",
          "Unix socket of the Trainer API (default <shm_dir>/shardd.sock; "
          "mode 0600)");
ABSL_FLAG(std::string, listen_tcp, "",
          "also serve the Trainer API on this host:port (only when asked; "
          "TLS with --tls_cert, plaintext without)");
ABSL_FLAG(std::string, health_listen, "",
          "also serve grpc.health.v1, and nothing else, in plaintext on this "
          "host:port (port 0: any), for probes that cannot present a "
          "certificate when --tls_cert is set; empty: none");
ABSL_FLAG(std::string, peer_listen, "127.0.0.1:0",
          "host:port of the Peer API; the host is also where Gloo listens "
          "(must be an address peers can reach; port 0: any)");
ABSL_FLAG(int64_t, shm_sweep_interval_ms, 30000,
          "how often the shm directory is swept of dead daemons' segments "
          "(also once at start, before this daemon creates any); 0: only at "
          "start");
ABSL_FLAG(std::string, shm_dir, "/dev/shm",
          "directory of the shared-memory segments");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, cuda:N or auto: where the engine's buffers live and what "
          "runs the collectives (cuda:N: GPU N and NCCL, a --config=cuda "
          "build only; auto: the GPU where one is usable, else the CPU, "
          "saying why)");
ABSL_FLAG(int, metrics_port, 0,
          "serve Prometheus /metrics on this port (0: off; -1: any free "
          "port, printed)");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "IP address /metrics listens on");
ABSL_FLAG(int64_t, collective_timeout_ms, 30000,
          "deadline of every collective and of communicator set-up");
ABSL_FLAG(int64_t, max_message_mb, 64, "largest gRPC message accepted");
ABSL_FLAG(bool, verify_collectives, false,
          "debugging: before every collective, check that every rank of the "
          "group issues the same one (kind, element type, counts, root, "
          "place in the sequence); a mismatch fails it on every rank with "
          "INTERNAL naming both (costs a small all-gather per collective)");
ABSL_FLAG(std::string, commit_log, "",
          "append every commit (step, epoch, shard CRC-32C) to this file, for "
          "tests and audits (costs a CRC of the shard per step)");
ABSL_FLAG(std::string, failpoint, "",
          "fail points to arm (tests), as SHARDD_FAILPOINT: "
          "name:action[@N],...; the flag wins over the environment");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "where this rank writes its sharded checkpoints (the fallback when "
          "a shard has no live replica); empty: none");
ABSL_FLAG(int64_t, checkpoint_interval_steps, 0,
          "write a checkpoint every N committed steps (0: never)");
ABSL_FLAG(int, checkpoint_keep_last, 2,
          "checkpoints kept per rank (besides the newest step every rank "
          "holds, which is never removed)");
ABSL_FLAG(bool, async_checkpoints, false,
          "write checkpoints in the background: the shard is copied into "
          "host staging (admitted memory: one more copy of the shard's "
          "parameters and optimizer state) and written while training goes "
          "on; a checkpoint due while the previous one is still being "
          "written is skipped");
ABSL_FLAG(std::string, resume_from, "",
          "resume a stopped job: its checkpoint directory (--checkpoint_dir "
          "of the old job, at any W and F); the model registered starts "
          "from the latest step all old ranks hold intact");
ABSL_FLAG(int64_t, recovery_timeout_ms, 120000,
          "how long a replacement tries its sources in one epoch");
ABSL_FLAG(std::string, nccl_reductions, "fixed",
          "with --device=cuda:N, how NCCL reductions sum: fixed (one order "
          "whatever NCCL's topology and tuning, so a replacement on other "
          "hardware computes the same bits: recovery stays bit-identical) or "
          "nccl (NCCL's own reduce-scatter/all-reduce: can be faster, the "
          "bits may change with the topology)");
ABSL_FLAG(std::string, recovery_transport, "replica_group",
          "how a replacement's shard bytes travel: replica_group (the "
          "epoch's replica-group communicator, Gloo pairs straight into the "
          "new shard; FetchShard carries header and CRCs) or stream (inside "
          "the FetchShard gRPC stream)");
ABSL_FLAG(std::string, collective_transport, "auto",
          "what the CPU communicators run on: auto (shared memory for a "
          "group whose members all run on this host, Gloo over TCP "
          "otherwise), tcp (always Gloo over TCP) or shm (shared memory, "
          "and a group that cannot use it fails to form)");
ABSL_FLAG(int64_t, peer_probe_interval_ms, 1000,
          "how often every other member's Peer service is probed; peers "
          "that fail --peer_probe_failures probes in a row are reported to "
          "the coordinator, which removes a node cut off from its peers "
          "(0: no probing)");
ABSL_FLAG(int64_t, peer_probe_timeout_ms, 2000, "deadline of each probe");
ABSL_FLAG(int, peer_probe_failures, 3,
          "consecutive failed probes that make a peer unreachable");
ABSL_FLAG(int64_t, memory_limit_bytes, 0,
          "memory admission: the most this daemon's plan may hold in all "
          "(engine buffers, communicator scratch, staging), used as given; "
          "0: only the measured limits (cgroup, MemAvailable, shm space, "
          "GPU), which keep a safety margin of max(256 MiB, 5%) (shm "
          "space: 5%)");
ABSL_FLAG(double, memory_limit_fraction, 1.0,
          "memory admission: a plan may use at most this share of each "
          "measured limit, in (0, 1] (more headroom than the margin)");

namespace shardd::node {
namespace {

// The version shardd_build_info reports.
constexpr char kVersion[] = "0.1.0";

// Every step of Run below that can refuse to start returns the line shardd
// prints then (after "shardd: ") as its status's message.

int Fail(const std::string& message) {
  std::fprintf(stderr, "shardd: %s\n", message.c_str());
  return 2;
}

int Fail(const absl::Status& status) {
  return Fail(std::string(status.message()));
}

// What the flags say, checked, before anything starts.
struct DaemonFlags {
  std::string coordinator;
  core::DeviceChoice device;
  comm::nccl::ReductionOrder reduction_order;
  // --peer_listen as given, and parsed (port 0: any).
  std::string peer_listen;
  core::HostPort peer;
  std::string shm_dir;
  // The Trainer API's Unix socket (free, or a dead daemon's).
  std::string socket_path;
  std::string listen_tcp;
  std::string health_listen;
  int max_message = 0;
  int metrics_port = 0;
};

// Arms the fail points of --failpoint, or else of SHARDD_FAILPOINT.
absl::Status ArmFailpoints() {
  const std::string failpoint = absl::GetFlag(FLAGS_failpoint);
  const absl::Status armed = failpoint.empty()
                                 ? recovery::Failpoints::ConfigureFromEnv()
                                 : recovery::Failpoints::Configure(failpoint);
  if (armed.ok()) return armed;
  return absl::InvalidArgumentError(
      absl::StrCat("--failpoint: ", armed.message()));
}

// --device: cuda:N (and auto where a GPU is usable) keeps the shards in
// that GPU's memory, in a CUDA build; a CPU build has only the CPU.
absl::StatusOr<core::DeviceChoice> ResolveDeviceFlag() {
  core::DeviceSupport support;
#ifdef SHARDD_WITH_CUDA
  support.cuda = true;
#else
  support.cuda = false;
  support.cuda_missing_reason =
      "this shardd was built without CUDA (bazel build --config=cuda)";
#endif
  absl::StatusOr<core::DeviceChoice> device = core::ResolveDevice(
      absl::GetFlag(FLAGS_device), memory::ProbeDevices(), support);
  if (device.ok()) return device;
  return absl::InvalidArgumentError(
      absl::StrCat("--device: ", device.status().message()));
}

// --peer_listen: host:port with port 0 allowed (ParseHostPort wants a real
// port), and a host peers can reach.
absl::StatusOr<core::HostPort> ParsePeerListen(const std::string& flag) {
  const size_t colon = flag.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError("--peer_listen: expected host:port");
  }
  absl::StatusOr<core::HostPort> peer = core::ParseHostPort(
      absl::StrCat(flag.substr(0, colon), ":1"), "--peer_listen");
  if (!peer.ok()) return peer;
  if (!absl::SimpleAtoi(flag.substr(colon + 1), &peer->port) ||
      peer->port < 0 || peer->port > 65535) {
    return absl::InvalidArgumentError(
        "--peer_listen: port must be a number in [0, 65535]");
  }
  if (peer->host == "0.0.0.0" || peer->host == "::") {
    return absl::InvalidArgumentError(
        "--peer_listen: give an address peers can reach, not a wildcard");
  }
  return peer;
}

// Before joining anything: a path another daemon serves is refused, a stale
// one (a previous process's) is replaced when the server starts. A
// supervisor may start us the moment it has SIGKILLed our predecessor,
// whose socket still accepts until the kernel has torn down its memory
// (tens of ms for GBs of shards): a served path gets a moment to go.
absl::Status WaitUntilSocketIsFree(const std::string& socket_path) {
  const MonoTime until = MonoNow() + absl::Seconds(2);
  absl::Status free = rpc::CheckUnixSocketIsFree(socket_path);
  while (absl::IsUnavailable(free) && MonoNow() < until) {
    absl::SleepFor(absl::Milliseconds(10));
    free = rpc::CheckUnixSocketIsFree(socket_path);
  }
  if (free.ok()) return free;
  return absl::InvalidArgumentError(
      absl::StrCat("--listen_unix: ", free.message()));
}

// Reads and checks the flags, in the order shardd has always checked them
// (the first refusal is the one printed); prints the device chosen.
absl::StatusOr<DaemonFlags> ParseDaemonFlags() {
  DaemonFlags flags;
  flags.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (flags.coordinator.empty()) {
    return absl::InvalidArgumentError("--coordinator is required");
  }
  if (absl::GetFlag(FLAGS_identity).empty()) {
    return absl::InvalidArgumentError("--identity is required");
  }
  if (absl::Status armed = ArmFailpoints(); !armed.ok()) return armed;
  absl::StatusOr<core::DeviceChoice> device = ResolveDeviceFlag();
  if (!device.ok()) return device.status();
  flags.device = *std::move(device);
  // Checked in every build, so that a CPU build rejects the same typos.
  const absl::StatusOr<comm::nccl::ReductionOrder> reduction_order =
      comm::nccl::ParseReductionOrder(absl::GetFlag(FLAGS_nccl_reductions));
  if (!reduction_order.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nccl_reductions: ", reduction_order.status().message()));
  }
  flags.reduction_order = *reduction_order;
  std::fprintf(stderr, "shardd: device %s\n", flags.device.reason.c_str());
  flags.peer_listen = absl::GetFlag(FLAGS_peer_listen);
  absl::StatusOr<core::HostPort> peer = ParsePeerListen(flags.peer_listen);
  if (!peer.ok()) return peer.status();
  flags.peer = *std::move(peer);
  flags.shm_dir = absl::GetFlag(FLAGS_shm_dir);
  flags.socket_path = absl::GetFlag(FLAGS_listen_unix);
  if (flags.socket_path.empty()) {
    flags.socket_path = absl::StrCat(flags.shm_dir, "/shardd.sock");
  }
  if (absl::Status free = WaitUntilSocketIsFree(flags.socket_path);
      !free.ok()) {
    return free;
  }
  flags.max_message =
      static_cast<int>(absl::GetFlag(FLAGS_max_message_mb) * 1024 * 1024);
  flags.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (flags.metrics_port < -1 || flags.metrics_port > 65535) {
    return absl::InvalidArgumentError(
        "--metrics_port must be in [-1, 65535] (0: off, -1: any)");
  }
  flags.listen_tcp = absl::GetFlag(FLAGS_listen_tcp);
  flags.health_listen = absl::GetFlag(FLAGS_health_listen);
  return flags;
}

// Prometheus /metrics, with --metrics_port. The registry and the observer
// outlive the manager that reports to them; the server stops first.
struct Metrics {
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<metrics::PrometheusNodeObserver> observer;
  std::unique_ptr<metrics::MetricsServer> server;
};

// Serves /metrics (nothing when the port is 0).
absl::StatusOr<Metrics> StartMetrics(int metrics_port, int insecure_endpoints) {
  Metrics m;
  if (metrics_port == 0) return m;
  m.registry = std::make_shared<prometheus::Registry>();
  m.observer =
      std::make_unique<metrics::PrometheusNodeObserver>(*m.registry, kVersion);
  m.observer->InsecureEndpoints(insecure_endpoints);
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> started =
      metrics::MetricsServer::Start(absl::GetFlag(FLAGS_metrics_address),
                                    std::max(metrics_port, 0), m.registry);
  if (!started.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address/--metrics_port: ", started.status().ToString()));
  }
  m.server = *std::move(started);
  m.server->AddCollectable(metrics::AcceptRetryCollector::ForThisProcess());
  return m;
}

// The Peer API's server and, with --health_listen, the plaintext health
// server; the health server stops first.
struct PeerServers {
  std::unique_ptr<grpc::Server> server;
  std::string address;  // host:port, as peers reach it.
  std::unique_ptr<rpc::HealthServer> health_server;
};

// Serves the Peer API, first: the coordinator needs its address at Join.
// It also serves grpc.health.v1 for probes (kubelet): "" is liveness
// (SERVING while the process runs, never dependent on peers),
// "shardd.v1.Trainer" startup (the trainer socket listens), "shardd.ready"
// readiness (in a ready epoch with the shards loaded). With --health_listen
// the same statuses are also served in plaintext there (and nothing else).
// Our own synchronous health service, not
// grpc::EnableDefaultHealthCheckService: gRPC's default one uses the
// callback API, whose threads poll every socket of the process and slowed
// down each call on the trainer socket (see daemon/rpc/health_service.h).
absl::StatusOr<PeerServers> StartPeerServers(const DaemonFlags& flags,
                                             const rpc::ServerTls& credentials,
                                             rpc::HealthService& health,
                                             PeerService& peer) {
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);
  int port = 0;
  const std::string host = flags.peer.host.find(':') != std::string::npos
                               ? absl::StrCat("[", flags.peer.host, "]")
                               : flags.peer.host;
  builder.AddListeningPort(absl::StrCat(host, ":", flags.peer.port),
                           credentials.server_credentials, &port);
  builder.RegisterService(&peer);
  builder.RegisterService(&health);
  PeerServers servers;
  servers.server = builder.BuildAndStart();
  if (servers.server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", flags.peer_listen,
        credentials.enabled ? " with TLS (does --tls_key belong to --tls_cert?)"
                            : ""));
  }
  servers.address = absl::StrCat(host, ":", port);
  if (!flags.health_listen.empty()) {
    absl::StatusOr<std::unique_ptr<rpc::HealthServer>> started =
        rpc::HealthServer::Start(flags.health_listen, "health_listen", &health);
    if (!started.ok()) {
      servers.server->Shutdown(rpc::ToGrpcDeadline(MonoNow()));
      return absl::UnavailableError(started.status().ToString());
    }
    servers.health_server = *std::move(started);
  }
  health.SetServingStatus("", true);
  health.SetServingStatus("shardd.v1.Trainer", false);
  health.SetServingStatus("shardd.ready", false);
  return servers;
}

#ifdef SHARDD_WITH_CUDA
// With a CUDA device: the shards in its memory, collectives on NCCL.
absl::Status UseCudaBackend(const DaemonFlags& flags, NodeOptions& options) {
  if (flags.device.kind != core::DeviceKind::kCuda) return absl::OkStatus();
  absl::StatusOr<std::shared_ptr<CudaEngineBackend>> backend =
      CudaEngineBackend::Create(static_cast<int>(flags.device.cuda_index),
                                flags.reduction_order);
  if (!backend.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: ", backend.status().ToString()));
  }
  options.backend = *std::move(backend);
  std::fprintf(
      stderr,
      "shardd: shards in %s memory, exported by CUDA IPC; "
      "collectives on NCCL (%s reductions)\n",
      options.backend->name().c_str(),
      std::string(comm::nccl::ReductionOrderName(flags.reduction_order))
          .c_str());
  return absl::OkStatus();
}
#endif

// The gRPC clients the manager reaches its peers with (FetchShard and
// Probe), over `channel_credentials`.
void SetPeerCalls(
    const std::shared_ptr<grpc::ChannelCredentials>& channel_credentials,
    NodeOptions& options) {
  options.fetch_shard =
      [channel_credentials](
          const std::string& peer_address, const v1::FetchShardRequest& request,
          MonoTime deadline,
          const std::function<absl::Status(const v1::FetchShardResponse&)>&
              on_message) {
        return PeerClient::FetchShard(channel_credentials, peer_address,
                                      request, deadline, on_message);
      };
  // Kept for the daemon's life: its channels outlive the rounds (the
  // manager, which calls it, is destroyed first).
  auto probe_pool = std::make_shared<PeerProbePool>(channel_credentials);
  options.probe_peers = [probe_pool](const std::vector<std::string>& addresses,
                                     MonoTime deadline) {
    return probe_pool->ProbeAll(addresses, deadline);
  };
  options.probe_peer = [channel_credentials](const std::string& peer_address,
                                             MonoTime deadline,
                                             bool include_model) {
    return PeerClient::Probe(channel_credentials, peer_address, deadline,
                             include_model);
  };
}

// Memory admission (engine_admission.h): a plan that does not fit is
// refused before anything is allocated. Prints the limits read.
absl::Status SetMemoryAdmission(const DaemonFlags& flags,
                                metrics::NodeObserver* observer,
                                NodeOptions& options) {
  const double memory_fraction = absl::GetFlag(FLAGS_memory_limit_fraction);
  memory::MemoryLimitOptions limits;
  limits.shm_dir = flags.shm_dir;
  limits.explicit_limit_bytes = absl::GetFlag(FLAGS_memory_limit_bytes);
  if (limits.explicit_limit_bytes < 0 ||
      !(memory_fraction > 0 && memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "--memory_limit_bytes must be >= 0 and --memory_limit_fraction in "
        "(0, 1]");
  }
  const bool cuda = flags.device.kind == core::DeviceKind::kCuda;
  if (cuda) {
    const int index = static_cast<int>(flags.device.cuda_index);
    limits.device_memory = [index] { return memory::ProbeDeviceMemory(index); };
    limits.device_name = absl::StrCat("cuda:", index);
  }
  options.admission = EngineAdmission::WithReader(
      std::move(limits), memory_fraction, cuda, observer,
      options.backend != nullptr ? options.backend->comm_scratch()
                                 : core::CommScratch::kNone);
  std::fprintf(stderr, "shardd: memory limits: %s\n",
               options.admission->DescribeLimits().c_str());
  return absl::OkStatus();
}

// The manager's options from the flags, for a Peer API at `peer_address`.
absl::StatusOr<NodeOptions> BuildNodeOptions(const DaemonFlags& flags,
                                             const rpc::ServerTls& credentials,
                                             const std::string& peer_address,
                                             metrics::NodeObserver* observer) {
  NodeOptions options;
  UseCoordinator(flags.coordinator, credentials.channel_credentials, &options);
  options.identity = absl::GetFlag(FLAGS_identity);
  options.peer_address = peer_address;
  options.gloo_hostname = flags.peer.host;
  options.shm_dir = flags.shm_dir;
  options.shm_prefix = absl::StrCat("shardd-", getpid());
#ifdef SHARDD_WITH_CUDA
  if (absl::Status cuda = UseCudaBackend(flags, options); !cuda.ok()) {
    return cuda;
  }
#endif
  const absl::Status applied = ApplyNodeFlags(
      {.rank = absl::GetFlag(FLAGS_rank),
       .collective_timeout_ms = absl::GetFlag(FLAGS_collective_timeout_ms),
       .peer_probe_interval_ms = absl::GetFlag(FLAGS_peer_probe_interval_ms),
       .peer_probe_timeout_ms = absl::GetFlag(FLAGS_peer_probe_timeout_ms),
       .peer_probe_failures = absl::GetFlag(FLAGS_peer_probe_failures),
       .commit_log = absl::GetFlag(FLAGS_commit_log),
       .checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir),
       .checkpoint_interval_steps =
           absl::GetFlag(FLAGS_checkpoint_interval_steps),
       .checkpoint_keep_last = absl::GetFlag(FLAGS_checkpoint_keep_last),
       .async_checkpoints = absl::GetFlag(FLAGS_async_checkpoints),
       .resume_from = absl::GetFlag(FLAGS_resume_from),
       .recovery_timeout_ms = absl::GetFlag(FLAGS_recovery_timeout_ms),
       .recovery_transport = absl::GetFlag(FLAGS_recovery_transport),
       .collective_transport = absl::GetFlag(FLAGS_collective_transport),
       .verify_collectives = absl::GetFlag(FLAGS_verify_collectives)},
      options);
  if (!applied.ok()) return applied;
  SetPeerCalls(credentials.channel_credentials, options);
  options.observer = observer;
  if (absl::Status admission = SetMemoryAdmission(flags, observer, options);
      !admission.ok()) {
    return admission;
  }
  return options;
}

// Sweeps the shm directory before any segment of this process exists: a
// dead daemon's leftovers (e.g. this sidecar's previous incarnation, often
// with the same pid in a container) go, and this prefix is marked as owned
// by a live process. Reports the sweeps through `options.shm_usage`.
absl::StatusOr<std::unique_ptr<ShmJanitor>> StartJanitor(
    metrics::NodeObserver* observer, NodeOptions& options) {
  const int64_t sweep_ms = absl::GetFlag(FLAGS_shm_sweep_interval_ms);
  if (sweep_ms < 0) {
    return absl::InvalidArgumentError("--shm_sweep_interval_ms must be >= 0");
  }
  absl::StatusOr<std::unique_ptr<ShmJanitor>> janitor =
      ShmJanitor::Start(options.shm_dir, options.shm_prefix,
                        absl::Milliseconds(sweep_ms), observer);
  if (!janitor.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shm_dir: ", janitor.status().ToString()));
  }
  options.shm_usage = [j = janitor->get()] {
    return std::make_pair(j->leftover_bytes(), j->swept_bytes());
  };
  return janitor;
}

// Serves the Trainer API on the Unix socket (mode 0600) and, with
// --listen_tcp, on that port (`tcp_port`: the one bound).
absl::StatusOr<std::unique_ptr<grpc::Server>> StartTrainerServer(
    const DaemonFlags& flags, const rpc::ServerTls& credentials,
    TrainerService& trainer, int& tcp_port) {
  grpc::ServerBuilder builder;
  rpc::ForbidPortSharing(builder);  // --listen_tcp
  builder.SetMaxReceiveMessageSize(flags.max_message);
  // gRPC's sync server keeps 1 to 2 polling threads by default; with the
  // trainer's calls coming one at a time it still created and destroyed a
  // thread every few calls (the thrashing gRPC's thread_manager.cc warns
  // about when max_pollers is small): 32 server threads over 6,000 calls in
  // bench/step --gather_only, 4 with up to 4 pollers.
  builder.SetSyncServerOption(
      grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 4);
  builder.SetMaxSendMessageSize(flags.max_message);
  const std::string& socket_path = flags.socket_path;
  struct stat st;
  if (lstat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    // Stale (checked at start): a previous daemon's, killed before it could
    // unlink it.
    unlink(socket_path.c_str());
  }
  builder.AddListeningPort(absl::StrCat("unix:", socket_path),
                           grpc::experimental::LocalServerCredentials(UDS));
  const std::string& tcp = flags.listen_tcp;
  if (!tcp.empty()) {
    builder.AddListeningPort(tcp, credentials.server_credentials, &tcp_port);
  }
  builder.RegisterService(&trainer);
  const mode_t old_umask = umask(0077);  // The socket is created 0600.
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  umask(old_umask);
  if (server == nullptr || (!tcp.empty() && tcp_port == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on unix:", socket_path,
                     tcp.empty() ? "" : absl::StrCat(" and ", tcp)));
  }
  chmod(socket_path.c_str(), 0600);
  return server;
}

// The lines tests and scripts wait for: where each API listens.
void PrintListening(int rank, const DaemonFlags& flags, const PeerServers& peer,
                    int tcp_port,
                    const metrics::MetricsServer* metrics_server) {
  std::printf("shardd rank %d listening on unix:%s peer %s%s\n", rank,
              flags.socket_path.c_str(), peer.address.c_str(),
              flags.listen_tcp.empty()
                  ? ""
                  : absl::StrCat(" tcp port ", tcp_port).c_str());
  if (peer.health_server != nullptr) {
    std::printf("shardd health on %s\n", peer.health_server->address().c_str());
  }
  if (metrics_server != nullptr) {
    const std::string& m = metrics_server->address();
    std::printf("shardd metrics on %s:%d\n",
                m.find(':') != std::string::npos
                    ? absl::StrCat("[", m, "]").c_str()
                    : m.c_str(),
                metrics_server->port());
  }
  std::fflush(stdout);
}

// SIGTERM and SIGINT: blocked in every thread (main), taken by sigwait.
sigset_t TerminationSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  return signals;
}

// How the daemon comes to stop, as the readiness thread finds it.
struct StopState {
  std::atomic<bool> stopping{false};
  std::atomic<bool> membership_ended{false};
  std::atomic<bool> job_failed{false};
};

// The membership ended for good (`membership`): says so and ends the
// daemon through the same shutdown as SIGTERM. DATA_LOSS: the job has
// failed for good (exit status 3 after the drain); anything else ended only
// this daemon's membership.
void EndMembership(NodeManager& manager, const absl::Status& membership,
                   StopState& stop) {
  stop.job_failed = absl::IsDataLoss(membership);
  std::printf("shardd: %s: %s; exiting\n",
              stop.job_failed ? "the job has failed" : "membership ended",
              membership.ToString().c_str());
  if (stop.job_failed) {
    // Keep answering for a moment so that the trainer hears the reason (a
    // trainer call answered DATA_LOSS), not a vanished daemon; bounded, a
    // trainer may be gone too.
    const MonoTime until = MonoNow() + absl::Seconds(5);
    while (manager.job_failure_replies() == 0 && MonoNow() < until) {
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  std::fflush(stdout);
  kill(getpid(), SIGTERM);
}

// Readiness follows the daemon's state (a probe reads it; this only mirrors
// it, every 200 ms) until `stop.stopping`. A membership the coordinator
// ended for good (a re-join refused: another live process took this
// identity while this one was unreachable) ends the daemon, with exit
// status 1, so that a supervisor sees it instead of a process that stays
// alive outside the job.
void MirrorReadiness(NodeManager& manager, rpc::HealthService& health,
                     StopState& stop) {
  bool last = false;
  while (!stop.stopping.load()) {
    const bool ready = manager.Probe().state() == v1::MEMBER_STATE_READY;
    if (ready != last) {
      health.SetServingStatus("shardd.ready", ready);
      last = ready;
    }
    const absl::Status membership = manager.MembershipStatus();
    if (!membership.ok() && !stop.membership_ended.exchange(true)) {
      EndMembership(manager, membership, stop);
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

// Serves until SIGTERM or SIGINT, then shuts down in order and returns the
// exit status.
int ServeUntilSignal(std::unique_ptr<NodeManager>& manager,
                     grpc::Server& trainer_server, rpc::HealthService& health,
                     PeerServers& peer, const std::string& socket_path) {
  StopState stop;
  std::thread readiness([&] { MirrorReadiness(*manager, health, stop); });
  const sigset_t signals = TerminationSignals();
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::fprintf(stderr, "shardd: signal %d, shutting down\n", signal_number);
  stop.stopping = true;
  readiness.join();
  health.SetServingStatus("shardd.ready", false);
  // Stop accepting and drain in-flight trainer calls (cancelled after 5 s);
  // those waiting for a ready epoch return at once.
  manager->BeginShutdown();
  trainer_server.Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Seconds(5)));
  const absl::Status left = manager->Shutdown("SIGTERM");
  if (!left.ok()) {
    std::fprintf(stderr, "shardd: leave: %s\n", left.ToString().c_str());
  }
  health.Shutdown();  // NOT_SERVING; open Watch streams end.
  peer.server->Shutdown(rpc::ToGrpcDeadline(MonoNow() + absl::Seconds(1)));
  peer.health_server.reset();
  manager.reset();  // Frees every buffer: segments are unlinked.
  unlink(socket_path.c_str());
  std::fprintf(stderr, "shardd: stopped\n");
  if (stop.job_failed.load()) return core::kExitJobFailed;
  return stop.membership_ended.load() ? core::kExitMembershipEnded
                                      : core::kExitOk;
}

int Run() {
  absl::StatusOr<DaemonFlags> flags = ParseDaemonFlags();
  if (!flags.ok()) return Fail(flags.status());
  absl::StatusOr<rpc::ServerTls> credentials =
      rpc::ServerTlsFromFlags("shardd",
                              {{"--coordinator", flags->coordinator},
                               {"--peer_listen", flags->peer_listen},
                               {"--listen_tcp", flags->listen_tcp}},
                              flags->health_listen);
  if (!credentials.ok()) return Fail(credentials.status());
  // Metrics first, so that the join can be watched.
  absl::StatusOr<Metrics> metrics =
      StartMetrics(flags->metrics_port, credentials->insecure_endpoints);
  if (!metrics.ok()) return Fail(metrics.status());
  rpc::HealthService health;
  PeerService peer;
  absl::StatusOr<PeerServers> peer_servers =
      StartPeerServers(*flags, *credentials, health, peer);
  if (!peer_servers.ok()) return Fail(peer_servers.status());
  metrics::NodeObserver* const observer = metrics->observer.get();
  absl::StatusOr<NodeOptions> options =
      BuildNodeOptions(*flags, *credentials, peer_servers->address, observer);
  if (!options.ok()) return Fail(options.status());
  absl::StatusOr<std::unique_ptr<ShmJanitor>> janitor =
      StartJanitor(observer, *options);
  if (!janitor.ok()) return Fail(janitor.status());
  absl::StatusOr<std::unique_ptr<NodeManager>> manager =
      NodeManager::Start(*options);
  if (!manager.ok()) {
    peer_servers->server->Shutdown(rpc::ToGrpcDeadline(MonoNow()));
    const int status =
        Fail(absl::StrCat("cannot join the coordinator at ", flags->coordinator,
                          ": ", manager.status().ToString()));
    return absl::IsDataLoss(manager.status()) ? core::kExitJobFailed : status;
  }
  peer.Attach(manager->get());
  TrainerService trainer(manager->get(), options->admission.get());
  int tcp_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartTrainerServer(*flags, *credentials, trainer, tcp_port);
  if (!server.ok()) return Fail(server.status());
  PrintListening((*manager)->rank(), *flags, *peer_servers, tcp_port,
                 metrics->server.get());
  health.SetServingStatus("shardd.v1.Trainer", true);
  return ServeUntilSignal(*manager, **server, health, *peer_servers,
                          flags->socket_path);
}

}  // namespace
}  // namespace shardd::node

int main(int argc, char** argv) {
  // Keep freed heap memory for reuse. gRPC and protobuf allocate a buffer
  // per streamed message (Peer.FetchShard chunks of MiBs); with glibc's
  // dynamic thresholds such blocks go back to the kernel on free, so chunks
  // keep landing in fresh pages, whose first touch is expensive on virtual
  // machines (bench/recovery's stream probe shows the page faults and the
  // CPU per byte this saves). Blocks below 32 MiB come from the heap; up
  // to 256 MiB of free heap is kept (the admission margin counts it).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  const sigset_t signals = shardd::node::TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::SetProgramUsageMessage(
      "shardd node daemon: Trainer API, Peer API, ZeRO step engine");
  absl::ParseCommandLine(argc, argv);
  // A connection per member (coordinator) or per peer (daemon): far more
  // descriptors than a default soft limit of 1024 (core/fd_limit.h).
  shardd::core::FdLimit::RaiseAtStartup("shardd");
  // And a listener that meets a shortage anyway keeps listening
  // (rpc/accept_retry.h).
  shardd::rpc::PrepareAcceptRetry("shardd");
  return shardd::node::Run();
}
