// TLS and mutual TLS with real processes: a coordinator and 4 shardd daemons
// (W = 4, HYBRID_SHARD F = 2) on 127.0.0.1, all with --tls_cert, --tls_key
// and --tls_ca from a PKI generated at test time by openssl
// (daemon/testing/test_certs.h), and each with a plaintext --health_listen.
// Checks:
//  - the cluster forms a ready epoch (Join, heartbeats and the rendezvous
//    store over mTLS, Gloo as before): GetClusterState over an mTLS channel
//    shows 4 READY; a model registers on every rank and an all-gather
//    returns its parameters;
//  - a replacement of a killed daemon copies its shard from a replica over
//    mTLS (Peer.Probe + Peer.FetchShard) and the epoch is ready again;
//  - a client without a certificate, one with a certificate of another CA,
//    and a plaintext client are refused (UNAVAILABLE, no response) on the
//    coordinator, peer and TCP trainer ports; the right client is answered;
//  - grpc.health.v1 answers without credentials on the health ports (the
//    daemons mirror "", "shardd.v1.Trainer" and "shardd.ready"), which
//    serve neither the Coordinator, the Peer nor the Trainer API;
//  - shardctl reaches the TCP trainer API with a client certificate only;
//  - a TLS flag naming a missing file, a key without its certificate or
//    of another certificate, or a --tls_refresh_interval under 1s stops
//    either binary at start (exit code 2).
// Rotation while running: cert_rotation_process_test.
// The Unix socket's mode 0600 is checked by tests/node:shardd_process_test.
//
//   tls_process_test COORDINATOR_BINARY SHARDD_BINARY SHARDCTL_BINARY

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/metrics/http_get.h"
#include "daemon/rpc/grpc_status.h"
#include "daemon/rpc/tls_config.h"
#include "daemon/testing/health_check.h"
#include "daemon/testing/subprocess.h"
#include "daemon/testing/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"
#include "shardd/v1/peer.grpc.pb.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;
using rpc::TlsConfig;
using rpc::TlsPaths;
using rpc::TlsRole;

std::string g_coordinator_binary;
std::string g_shardd_binary;
std::string g_shardctl_binary;

constexpr int kW = 4;
constexpr int kF = 2;
constexpr int kUnitElements = 10;

float InitValue(int64_t i) { return 0.5f * static_cast<float>(i) - 1.0f; }

pb::ModelSpec Model() {
  pb::ModelSpec spec;
  pb::UnitSpec* unit = spec.add_units();
  unit->set_name("layer0");
  pb::TensorSpec* t = unit->add_tensors();
  t->set_name("weight");
  t->add_shape(kUnitElements);
  t->set_dtype(pb::DTYPE_FP32);
  std::vector<float> values(kUnitElements);
  for (int i = 0; i < kUnitElements; ++i) values[i] = InitValue(i);
  t->mutable_init()->mutable_values()->set_data(
      std::string(reinterpret_cast<const char*>(values.data()),
                  values.size() * sizeof(float)));
  pb::ShardingConfig* c = spec.mutable_config();
  c->set_strategy(pb::SHARDING_STRATEGY_HYBRID_SHARD);
  c->set_sharding_factor(kF);
  c->set_max_gathered_units(1);
  pb::AdamW* a = c->mutable_optimizer()->mutable_adamw();
  a->set_lr(0.01);
  a->set_beta1(0.9);
  a->set_beta2(0.999);
  a->set_eps(1e-8);
  return spec;
}

void ArmDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// The text after `marker` in `line`, up to the next space.
std::string Field(const std::string& line, const std::string& marker) {
  const size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  const std::string rest = line.substr(at + marker.size());
  return rest.substr(0, rest.find(' '));
}

void RemoveTree(const std::string& dir) {
  const std::string command = absl::StrCat("rm -rf '", dir, "'");
  if (std::system(command.c_str()) != 0) {
    std::fprintf(stderr, "cannot remove %s\n", dir.c_str());
  }
}

// One cluster for the whole suite (forming it dominates the run time).
struct Cluster {
  std::string dir;
  TestCerts certs;
  std::unique_ptr<Subprocess> coordinator;
  std::string coordinator_address;
  std::string coordinator_health;
  std::vector<std::unique_ptr<Subprocess>> daemons;
  std::vector<std::string> sockets;
  std::vector<std::string> peers;
  std::vector<std::string> healths;
  // Daemon 0's --listen_tcp port.
  int trainer_tcp_port = 0;
};
Cluster* g_cluster = nullptr;

class TlsProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_cluster = new Cluster();
    Cluster& c = *g_cluster;
    // Short paths: Unix socket paths are limited to 108 bytes.
    char tmpl[] = "/tmp/shardd-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    c.dir = tmpl;
    ASSERT_EQ(mkdir((c.dir + "/shm").c_str(), 0700), 0);
    absl::StatusOr<TestCerts> certs = GenerateTestCerts(c.dir);
    ASSERT_TRUE(certs.ok()) << certs.status();
    c.certs = *certs;
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    auto coordinator = Subprocess::Spawn(
        {g_coordinator_binary, "--listen=127.0.0.1:0",
         absl::StrCat("--world_size=", kW),
         absl::StrCat("--sharding_factor=", kF), "--health_listen=127.0.0.1:0",
         TlsFlag("cert", c.certs.node_cert), TlsFlag("key", c.certs.node_key),
         TlsFlag("ca", c.certs.ca)},
        "coordinator");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    c.coordinator = *std::move(coordinator);
    auto line =
        c.coordinator->WaitForLine("coordinator listening on", deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    c.coordinator_address = Field(*line, " on ");
    line = c.coordinator->WaitForLine("coordinator health on", deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    c.coordinator_health = Field(*line, " on ");
    for (int r = 0; r < kW; ++r) {
      c.sockets.push_back(absl::StrCat(c.dir, "/r", r, ".sock"));
      c.peers.emplace_back();
      c.healths.emplace_back();
      c.daemons.emplace_back();
      ASSERT_NO_FATAL_FAILURE(StartDaemon(r, deadline));
    }
  }

  static void TearDownTestSuite() {
    if (g_cluster == nullptr) return;
    g_cluster->daemons.clear();  // SIGKILLs whatever still runs.
    g_cluster->coordinator.reset();
    if (!g_cluster->dir.empty()) RemoveTree(g_cluster->dir);
    delete g_cluster;
    g_cluster = nullptr;
  }

  static std::string TlsFlag(const std::string& name, const std::string& path) {
    return absl::StrCat("--tls_", name, "=", path);
  }

  // Starts daemon `r` (mTLS, plaintext health port; daemon 0 also serves the
  // Trainer API on TCP) and waits for its listening line.
  static void StartDaemon(int r, absl::Time deadline) {
    Cluster& c = *g_cluster;
    std::vector<std::string> argv = {
        g_shardd_binary,
        absl::StrCat("--coordinator=", c.coordinator_address),
        absl::StrCat("--identity=node-", r),
        absl::StrCat("--rank=", r),
        absl::StrCat("--shm_dir=", c.dir, "/shm"),
        absl::StrCat("--listen_unix=", c.sockets[r]),
        "--peer_listen=127.0.0.1:0",
        "--health_listen=127.0.0.1:0",
        "--collective_timeout_ms=20000",
        TlsFlag("cert", c.certs.node_cert),
        TlsFlag("key", c.certs.node_key),
        TlsFlag("ca", c.certs.ca)};
    if (r == 0) argv.push_back("--listen_tcp=127.0.0.1:0");
    auto d = Subprocess::Spawn(argv, absl::StrCat("shardd-", r));
    ASSERT_TRUE(d.ok()) << d.status();
    c.daemons[r] = *std::move(d);
    auto line = c.daemons[r]->WaitForLine("shardd rank", deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_TRUE(absl::StrContains(*line, absl::StrCat("rank ", r, " ")));
    c.peers[r] = Field(*line, " peer ");
    if (r == 0) {
      ASSERT_TRUE(
          absl::SimpleAtoi(Field(*line, " tcp port "), &c.trainer_tcp_port))
          << *line;
    }
    line = c.daemons[r]->WaitForLine("shardd health on", deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    c.healths[r] = Field(*line, " on ");
  }

  static std::shared_ptr<grpc::ChannelCredentials> Credentials(
      const TlsPaths& paths) {
    absl::StatusOr<TlsConfig> config = TlsConfig::Load(paths, TlsRole::kClient);
    EXPECT_TRUE(config.ok()) << config.status();
    return config.ok() ? config->ChannelCredentials()
                       : grpc::InsecureChannelCredentials();
  }
  // The good client: a certificate of the cluster's CA.
  static std::shared_ptr<grpc::ChannelCredentials> Good() {
    const TestCerts& t = g_cluster->certs;
    return Credentials({t.client_cert, t.client_key, t.ca});
  }
  // Clients that must be refused, with their names for messages.
  static std::vector<
      std::pair<std::string, std::shared_ptr<grpc::ChannelCredentials>>>
  Refused() {
    const TestCerts& t = g_cluster->certs;
    return {{"TLS without a client certificate", Credentials({"", "", t.ca})},
            {"a client certificate of another CA",
             Credentials({t.rogue_cert, t.rogue_key, t.ca})},
            {"plaintext", grpc::InsecureChannelCredentials()}};
  }

  static absl::StatusOr<pb::ClusterState> State(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& address) {
    auto stub =
        pb::Coordinator::NewStub(grpc::CreateChannel(address, credentials));
    grpc::ClientContext context;
    ArmDeadline(&context, absl::Seconds(5));
    pb::ClusterState state;
    const grpc::Status s =
        stub->GetClusterState(&context, pb::GetClusterStateRequest(), &state);
    if (!s.ok()) {
      EXPECT_EQ(state.ByteSizeLong(), 0u) << "a failed call returned data";
      return rpc::FromGrpc(s);
    }
    return state;
  }

  static absl::StatusOr<pb::ProbeResponse> Probe(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& address) {
    auto stub = pb::Peer::NewStub(grpc::CreateChannel(address, credentials));
    grpc::ClientContext context;
    ArmDeadline(&context, absl::Seconds(5));
    pb::ProbeRequest request;
    request.set_from_rank(-1);
    pb::ProbeResponse response;
    const grpc::Status s = stub->Probe(&context, request, &response);
    if (!s.ok()) {
      EXPECT_EQ(response.ByteSizeLong(), 0u) << "a failed call returned data";
      return rpc::FromGrpc(s);
    }
    return response;
  }

  static absl::StatusOr<pb::GetStatusResponse> TrainerStatus(
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& address) {
    auto stub = pb::Trainer::NewStub(grpc::CreateChannel(address, credentials));
    grpc::ClientContext context;
    ArmDeadline(&context, absl::Seconds(5));
    pb::GetStatusResponse response;
    const grpc::Status s =
        stub->GetStatus(&context, pb::GetStatusRequest(), &response);
    if (!s.ok()) {
      EXPECT_EQ(response.ByteSizeLong(), 0u) << "a failed call returned data";
      return rpc::FromGrpc(s);
    }
    return response;
  }

  // Polls GetClusterState (mTLS) every 20 ms until `done` holds.
  static absl::StatusOr<pb::ClusterState> WaitForState(
      const std::function<bool(const pb::ClusterState&)>& done,
      absl::Time deadline, const std::string& what) {
    absl::Status last = absl::OkStatus();
    while (absl::Now() < deadline) {
      absl::StatusOr<pb::ClusterState> state =
          State(Good(), g_cluster->coordinator_address);
      if (state.ok() && done(*state)) return state;
      if (!state.ok()) last = state.status();
      absl::SleepFor(absl::Milliseconds(20));  // Polling, with a deadline.
    }
    return absl::DeadlineExceededError(
        absl::StrCat("waiting for ", what, "; last error: ", last.ToString()));
  }

  static bool AllReady(const pb::ClusterState& s) {
    if (!s.ready() || s.slots_size() != kW) return false;
    for (const pb::SlotState& slot : s.slots()) {
      if (slot.state() != pb::MEMBER_STATE_READY) return false;
    }
    return true;
  }

  // The trainer stub of daemon r over its Unix socket.
  static std::unique_ptr<pb::Trainer::Stub> Local(int r) {
    return pb::Trainer::NewStub(
        grpc::CreateChannel(absl::StrCat("unix:", g_cluster->sockets[r]),
                            grpc::experimental::LocalCredentials(UDS)));
  }

  // Registers the model on every daemon at once (RegisterModel waits for
  // every rank; registering again re-attaches).
  static void RegisterAll() {
    std::vector<grpc::Status> results(kW);
    std::vector<std::thread> threads;
    for (int r = 0; r < kW; ++r) {
      threads.emplace_back([r, &results] {
        pb::RegisterModelRequest request;
        *request.mutable_model() = Model();
        request.set_transport(pb::TRANSPORT_SHARED_MEMORY);
        pb::RegisterModelResponse response;
        grpc::ClientContext context;
        ArmDeadline(&context, absl::Seconds(60));
        results[r] = Local(r)->RegisterModel(&context, request, &response);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < kW; ++r) {
      EXPECT_TRUE(results[r].ok())
          << "rank " << r << ": " << results[r].error_message();
    }
  }

  // Polls daemon r's plaintext health port until `service` has `status`.
  static absl::StatusOr<int> WaitForHealth(int r, const std::string& service,
                                           int status, absl::Time deadline) {
    auto channel = grpc::CreateChannel(g_cluster->healths[r],
                                       grpc::InsecureChannelCredentials());
    absl::StatusOr<int> last = CheckHealth(channel, service);
    while ((!last.ok() || *last != status) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));  // Polling, with a deadline.
      last = CheckHealth(channel, service);
    }
    return last;
  }

  // Runs shardctl with `flags` and `command`; its exit code.
  static absl::StatusOr<int> Shardctl(std::vector<std::string> flags,
                                      const std::string& command) {
    flags.insert(flags.begin(), g_shardctl_binary);
    flags.push_back(command);
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Spawn(flags, "shardctl");
    if (!p.ok()) return p.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while ((*p)->ReadLine(deadline).ok()) {
    }
    return (*p)->Wait(deadline);
  }
};

TEST_F(TlsProcessTest, MutualTlsClusterFormsReadyEpochAndGathers) {
  ASSERT_NE(g_cluster, nullptr);
  absl::StatusOr<pb::ClusterState> state = WaitForState(
      AllReady, absl::Now() + absl::Seconds(60), "4 READY over mTLS");
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->slots_size(), kW);
  ASSERT_NO_FATAL_FAILURE(RegisterAll());
  // An all-gather within each shard group (Gloo, as before TLS).
  std::vector<grpc::Status> results(kW);
  std::vector<std::vector<float>> params(kW);
  std::vector<std::thread> threads;
  for (int r = 0; r < kW; ++r) {
    threads.emplace_back([r, &results, &params] {
      auto stub = Local(r);
      pb::GatherRequest request;
      request.set_unit(0);
      request.set_pass(pb::PASS_FORWARD);
      pb::GatherResponse gathered;
      grpc::ClientContext context;
      ArmDeadline(&context, absl::Seconds(30));
      results[r] = stub->Gather(&context, request, &gathered);
      if (!results[r].ok()) return;
      const pb::SharedMemoryRef& ref = gathered.params().shared_memory();
      auto segment = memory::SharedMemorySegment::Open(
          ref.path(), ref.segment_bytes(),
          memory::SharedMemorySegment::Access::kReadOnly);
      if (!segment.ok()) {
        results[r] = rpc::ToGrpc(segment.status());
        return;
      }
      const float* p = reinterpret_cast<const float*>(
          static_cast<const uint8_t*>(segment->data()) + ref.byte_offset());
      params[r].assign(p, p + kUnitElements);
      pb::ReleaseRequest release;
      release.set_unit(0);
      pb::ReleaseResponse released;
      grpc::ClientContext release_context;
      ArmDeadline(&release_context, absl::Seconds(10));
      results[r] = stub->Release(&release_context, release, &released);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kW; ++r) {
    ASSERT_TRUE(results[r].ok())
        << "rank " << r << ": " << results[r].error_message();
    ASSERT_EQ(params[r].size(), static_cast<size_t>(kUnitElements));
    for (int i = 0; i < kUnitElements; ++i) {
      EXPECT_EQ(params[r][i], InitValue(i)) << "rank " << r << " element " << i;
    }
  }
}

// Peer reachability probing presents the daemons' client certificates:
// every daemon's GetStatus lists its two group peers (F + W/F - 2) as
// answering. With the wrong credentials every probe fails the handshake
// and no peer ever answers.
TEST_F(TlsProcessTest, DaemonsProbeTheirPeersOverMutualTls) {
  ASSERT_NE(g_cluster, nullptr);
  ASSERT_TRUE(WaitForState(AllReady, absl::Now() + absl::Seconds(60),
                           "4 READY over mTLS")
                  .ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int r = 0; r < kW; ++r) {
    pb::GetStatusResponse status;
    bool answered = false;
    while (!answered && absl::Now() < deadline) {
      auto stub = Local(r);
      grpc::ClientContext context;
      ArmDeadline(&context, absl::Seconds(10));
      status.Clear();
      const grpc::Status s =
          stub->GetStatus(&context, pb::GetStatusRequest(), &status);
      answered = s.ok() && status.peers_size() == kF + kW / kF - 2;
      for (const pb::PeerReachabilityStatus& p : status.peers()) {
        answered = answered && p.probes_answered() >= 2 &&
                   p.consecutive_failures() == 0 && !p.reported_unreachable();
      }
      if (!answered) {
        absl::SleepFor(absl::Milliseconds(100));  // Polling, with a deadline.
      }
    }
    ASSERT_TRUE(answered) << "rank " << r << ": " << status.DebugString();
  }
}

TEST_F(TlsProcessTest, ClientsWithoutTheRightCertificateAreRefused) {
  ASSERT_NE(g_cluster, nullptr);
  const Cluster& c = *g_cluster;
  const std::string trainer_tcp =
      absl::StrCat("127.0.0.1:", c.trainer_tcp_port);
  // The right client is answered on every port.
  absl::StatusOr<pb::ClusterState> state = State(Good(), c.coordinator_address);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->world_size(), kW);
  absl::StatusOr<pb::ProbeResponse> probe = Probe(Good(), c.peers[1]);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->rank(), 1);
  absl::StatusOr<pb::GetStatusResponse> status =
      TrainerStatus(Good(), trainer_tcp);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->rank(), 0);
  // Every other client is refused before any handler runs.
  for (const auto& [name, credentials] : Refused()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(State(credentials, c.coordinator_address).status().code(),
              absl::StatusCode::kUnavailable);
    for (int r = 0; r < kW; ++r) {
      EXPECT_EQ(Probe(credentials, c.peers[r]).status().code(),
                absl::StatusCode::kUnavailable)
          << "peer port of rank " << r;
    }
    EXPECT_EQ(TrainerStatus(credentials, trainer_tcp).status().code(),
              absl::StatusCode::kUnavailable);
    // Health over the TLS ports needs credentials too.
    EXPECT_EQ(
        CheckHealth(grpc::CreateChannel(c.coordinator_address, credentials), "")
            .status()
            .code(),
        absl::StatusCode::kUnavailable);
  }
}

TEST_F(TlsProcessTest,
       HealthPortAnswersWithoutCredentialsAndServesNothingElse) {
  ASSERT_NE(g_cluster, nullptr);
  const Cluster& c = *g_cluster;
  auto plain = [](const std::string& address) {
    return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  };
  absl::StatusOr<int> coordinator =
      CheckHealth(plain(c.coordinator_health), "");
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_EQ(*coordinator, 1);  // SERVING.
  EXPECT_EQ(State(grpc::InsecureChannelCredentials(), c.coordinator_health)
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  for (int r = 0; r < kW; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    for (const std::string service : {"", "shardd.v1.Trainer"}) {
      absl::StatusOr<int> s = CheckHealth(plain(c.healths[r]), service);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(*s, 1) << "service '" << service << "'";
    }
    absl::StatusOr<int> ready = WaitForHealth(r, "shardd.ready", 1, deadline);
    ASSERT_TRUE(ready.ok()) << ready.status();
    EXPECT_EQ(*ready, 1);
    // The same statuses as the (TLS) peer port.
    absl::StatusOr<int> peer_ready =
        CheckHealth(grpc::CreateChannel(c.peers[r], Good()), "shardd.ready");
    ASSERT_TRUE(peer_ready.ok()) << peer_ready.status();
    EXPECT_EQ(*peer_ready, 1);
    EXPECT_EQ(
        Probe(grpc::InsecureChannelCredentials(), c.healths[r]).status().code(),
        absl::StatusCode::kUnimplemented);
    EXPECT_EQ(TrainerStatus(grpc::InsecureChannelCredentials(), c.healths[r])
                  .status()
                  .code(),
              absl::StatusCode::kUnimplemented);
    EXPECT_EQ(
        State(grpc::InsecureChannelCredentials(), c.healths[r]).status().code(),
        absl::StatusCode::kUnimplemented);
  }
}

TEST_F(TlsProcessTest, ShardctlReachesTcpTrainerApiOnlyWithCertificate) {
  ASSERT_NE(g_cluster, nullptr);
  const Cluster& c = *g_cluster;
  const std::string socket =
      absl::StrCat("--socket=127.0.0.1:", c.trainer_tcp_port);
  absl::StatusOr<int> good =
      Shardctl({socket, TlsFlag("cert", c.certs.client_cert),
                TlsFlag("key", c.certs.client_key), TlsFlag("ca", c.certs.ca)},
               "status");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, 0);
  absl::StatusOr<int> no_cert =
      Shardctl({socket, TlsFlag("ca", c.certs.ca)}, "status");
  ASSERT_TRUE(no_cert.ok()) << no_cert.status();
  EXPECT_EQ(*no_cert, 1);  // Unreachable: the handshake is refused.
  absl::StatusOr<int> plaintext = Shardctl({socket}, "status");
  ASSERT_TRUE(plaintext.ok()) << plaintext.status();
  EXPECT_EQ(*plaintext, 1);
  absl::StatusOr<int> bad_flag =
      Shardctl({socket, TlsFlag("ca", c.dir + "/missing.pem")}, "status");
  ASSERT_TRUE(bad_flag.ok()) << bad_flag.status();
  EXPECT_EQ(*bad_flag, 2);
}

// Peer.Probe and Peer.FetchShard between daemons over mTLS: a replacement
// of a killed daemon copies its shard from the replica, and both health
// services follow readiness down and up again.
TEST_F(TlsProcessTest, ReplacementCopiesItsShardOverMutualTls) {
  ASSERT_NE(g_cluster, nullptr);
  Cluster& c = *g_cluster;
  const absl::Time deadline = absl::Now() + absl::Seconds(90);
  ASSERT_TRUE(WaitForState(AllReady, deadline, "4 READY").ok());
  // A model to copy (registering again after another test's gathers would
  // count as a trainer re-attaching mid-step, which abandons the epoch).
  absl::StatusOr<pb::ProbeResponse> registered = Probe(Good(), c.peers[1]);
  ASSERT_TRUE(registered.ok()) << registered.status();
  if (!registered->registered()) {
    ASSERT_NO_FATAL_FAILURE(RegisterAll());
  }
  c.daemons[3].reset();  // SIGKILL.
  absl::StatusOr<pb::ClusterState> gone = WaitForState(
      [](const pb::ClusterState& s) {
        return s.slots_size() == kW &&
               s.slots(3).state() == pb::MEMBER_STATE_FAILED;
      },
      deadline, "slot 3 failed");
  ASSERT_TRUE(gone.ok()) << gone.status();
  absl::StatusOr<int> not_ready = WaitForHealth(0, "shardd.ready", 2, deadline);
  ASSERT_TRUE(not_ready.ok()) << not_ready.status();
  EXPECT_EQ(*not_ready, 2);  // NOT_SERVING.
  ASSERT_NO_FATAL_FAILURE(StartDaemon(3, deadline));
  // Rank 3 holds shard 1, as rank 1 does.
  absl::StatusOr<std::string> copied =
      c.daemons[3]->WaitForLine("recovered shard 1", deadline);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(absl::StrContains(*copied, "from rank 1")) << *copied;
  absl::StatusOr<pb::ClusterState> ready =
      WaitForState(AllReady, deadline, "4 READY after the replacement");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_GT(ready->epoch(), gone->epoch());
  absl::StatusOr<int> back = WaitForHealth(0, "shardd.ready", 1, deadline);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 1);
}

class TlsFlagsProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-tls-flags-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    absl::StatusOr<TestCerts> certs = GenerateTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
  }
  void TearDown() override {
    if (!dir_.empty()) RemoveTree(dir_);
  }

  // Runs `argv` to its end; its exit code.
  static absl::StatusOr<int> ExitCode(std::vector<std::string> argv) {
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Spawn(std::move(argv), "binary");
    if (!p.ok()) return p.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while ((*p)->ReadLine(deadline).ok()) {
    }
    return (*p)->Wait(deadline);
  }

  std::string dir_;
  TestCerts certs_;
};

TEST_F(TlsFlagsProcessTest, BadTlsFlagsStopBothBinariesAtStart) {
  const std::string missing = dir_ + "/missing.pem";
  const std::vector<std::vector<std::string>> bad_tls = {
      {"--tls_cert=" + missing, "--tls_key=" + certs_.node_key},
      {"--tls_cert=" + certs_.node_cert},  // No key.
      {"--tls_ca=" + certs_.ca},           // A server needs a certificate.
      {"--tls_cert=" + certs_.node_cert, "--tls_key=" + certs_.node_key,
       "--tls_ca=" + missing},
      // A key of another certificate.
      {"--tls_cert=" + certs_.node_cert, "--tls_key=" + certs_.client_key},
      {"--tls_cert=" + certs_.node_cert, "--tls_key=" + certs_.node_key,
       "--tls_refresh_interval=0s"}};
  for (const std::vector<std::string>& tls : bad_tls) {
    std::vector<std::string> coordinator = {
        g_coordinator_binary, "--listen=127.0.0.1:0", "--world_size=2",
        "--sharding_factor=2"};
    coordinator.insert(coordinator.end(), tls.begin(), tls.end());
    absl::StatusOr<int> code = ExitCode(coordinator);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << tls[0];
    std::vector<std::string> shardd = {
        g_shardd_binary, "--coordinator=127.0.0.1:1", "--identity=x",
        absl::StrCat("--listen_unix=", dir_, "/x.sock")};
    shardd.insert(shardd.end(), tls.begin(), tls.end());
    code = ExitCode(shardd);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << tls[0];
  }
}

// Secure by default: without TLS, a gRPC endpoint beyond this machine needs
// --insecure. Each binary refuses at start (exit 2) naming the flag and the
// way out; with --insecure the coordinator starts, warns, and says so in
// its metrics.
// `argv` run by /bin/sh with stderr joined to stdout (which Subprocess
// reads); arguments single-quoted (none of ours contains a quote).
std::vector<std::string> WithStderr(const std::vector<std::string>& argv) {
  std::string command = "exec";
  for (const std::string& a : argv) absl::StrAppend(&command, " '", a, "'");
  return {"/bin/sh", "-c", absl::StrCat(command, " 2>&1")};
}

TEST_F(TlsFlagsProcessTest, PlaintextBeyondThisMachineNeedsInsecure) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{g_coordinator_binary, "--listen=0.0.0.0:0", "--world_size=2",
        "--sharding_factor=2"},
       "--listen=0.0.0.0:0"},
      {{g_shardd_binary, "--coordinator=192.0.2.1:7070", "--identity=x",
        absl::StrCat("--listen_unix=", dir_, "/x.sock")},
       "--coordinator=192.0.2.1:7070"},
      {{g_shardd_binary, "--coordinator=127.0.0.1:1", "--identity=x",
        "--peer_listen=192.0.2.1:0",
        absl::StrCat("--listen_unix=", dir_, "/x.sock")},
       "--peer_listen=192.0.2.1:0"},
      {{g_shardd_binary, "--coordinator=127.0.0.1:1", "--identity=x",
        "--listen_tcp=0.0.0.0:0",
        absl::StrCat("--listen_unix=", dir_, "/x.sock")},
       "--listen_tcp=0.0.0.0:0"},
      {{g_shardctl_binary, "--socket=192.0.2.1:7070", "status"},
       "--socket=192.0.2.1:7070"},
  };
  for (const auto& [argv, named] : cases) {
    absl::StatusOr<std::unique_ptr<Subprocess>> p =
        Subprocess::Spawn(WithStderr(argv), "binary");
    ASSERT_TRUE(p.ok()) << p.status();
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while ((*p)->ReadLine(deadline).ok()) {
    }
    absl::StatusOr<int> code = (*p)->Wait(deadline);
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 2) << named;
    const std::string out = absl::StrJoin((*p)->lines(), "\n");
    EXPECT_NE(out.find(named + ": plaintext gRPC beyond this machine"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("--insecure"), std::string::npos) << out;
  }

  absl::StatusOr<std::unique_ptr<Subprocess>> c = Subprocess::Spawn(
      WithStderr({g_coordinator_binary, "--listen=0.0.0.0:0", "--insecure",
                  "--world_size=2", "--sharding_factor=2", "--metrics_port=-1",
                  "--metrics_address=127.0.0.1"}),
      "coordinator");
  ASSERT_TRUE(c.ok()) << c.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int metrics_port = 0;
  bool warned = false;
  while (metrics_port == 0) {
    absl::StatusOr<std::string> line = (*c)->ReadLine(deadline);
    ASSERT_TRUE(line.ok()) << line.status();
    if (line->find("WARNING: --insecure: plaintext gRPC on "
                   "--listen=0.0.0.0:0") != std::string::npos) {
      warned = true;
    }
    const size_t at = line->find("coordinator metrics on 127.0.0.1:");
    if (at != std::string::npos) {
      ASSERT_TRUE(absl::SimpleAtoi(
          line->substr(at + strlen("coordinator metrics on 127.0.0.1:")),
          &metrics_port));
    }
  }
  EXPECT_TRUE(warned);
  absl::StatusOr<std::string> page =
      metrics::HttpGet("127.0.0.1", metrics_port, "/metrics", deadline);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("\nshardd_coordinator_insecure_endpoints 1\n"),
            std::string::npos);
  (*c)->Signal(SIGTERM);
  ASSERT_TRUE((*c)->Wait(deadline).ok());
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 4) {
    std::fprintf(stderr,
                 "usage: %s COORDINATOR_BINARY SHARDD_BINARY SHARDCTL_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  shardd::tests::g_shardctl_binary = argv[3];
  return RUN_ALL_TESTS();
}
