// Certificate rotation without a restart, with a real coordinator process:
// its --tls_cert, --tls_key and --tls_ca are copies in a folder of the test
// (tls.crt, tls.key, ca.crt, as cert-manager's Secret has them), read again
// every second (--tls_refresh_interval=1s). The test replaces them the way
// kubelet and cert-manager do (a new file renamed over the old one) and
// checks, reading the certificate each connection is shown from its auth
// context:
//  - a new pair signed by the same CA reaches new connections, while a
//    connection made before keeps working;
//  - between the key and the certificate (a rotation caught half-way) the
//    coordinator says it keeps the last good pair, and every new
//    connection is still served with it;
//  - a CA rotation: with a bundle of the old and a new CA and a certificate
//    of the new CA, a client of the new CA, refused before, gets in;
//  - a shardd daemon joined to that coordinator, with its own copies of the
//    files: a new pair reaches new connections to its peer port, while a
//    connection made before keeps working.
//
//   cert_rotation_process_test COORDINATOR_BINARY SHARDD_BINARY

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/rpc/tls_config.h"
#include "daemon/testing/peer_certificate.h"
#include "daemon/testing/subprocess.h"
#include "daemon/testing/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardd::tests {
namespace {

std::string g_coordinator_binary;
std::string g_shardd_binary;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text after `marker` in `line`, up to the next space.
std::string Field(const std::string& line, const std::string& marker) {
  const size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  const std::string rest = line.substr(at + marker.size());
  return rest.substr(0, rest.find(' '));
}

class CertRotationProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardd-rotation-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    absl::StatusOr<TestCerts> certs = GenerateTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
    absl::StatusOr<TestPair> next = GenerateNodePair(certs_, "next");
    ASSERT_TRUE(next.ok()) << next.status();
    next_ = *next;
    cert_ = dir_ + "/tls.crt";
    key_ = dir_ + "/tls.key";
    ca_ = dir_ + "/ca.crt";
    Install(Read(certs_.node_cert), cert_);
    Install(Read(certs_.node_key), key_);
    Install(Read(certs_.ca), ca_);
    // stderr joined to stdout: the reload lines are on stderr.
    auto coordinator = Subprocess::Spawn(
        {"/bin/sh", "-c",
         absl::StrCat("exec '", g_coordinator_binary,
                      "' --listen=127.0.0.1:0 --world_size=2 "
                      "--sharding_factor=2 --tls_refresh_interval=1s "
                      "--tls_cert='",
                      cert_, "' --tls_key='", key_, "' --tls_ca='", ca_,
                      "' 2>&1")},
        "coordinator");
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    absl::StatusOr<std::string> line = coordinator_->WaitForLine(
        "coordinator listening on", absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = Field(*line, " on ");
  }

  void TearDown() override {
    coordinator_.reset();  // SIGKILL.
    if (!dir_.empty()) {
      const std::string command = absl::StrCat("rm -rf '", dir_, "'");
      if (std::system(command.c_str()) != 0) {
        std::fprintf(stderr, "cannot remove %s\n", dir_.c_str());
      }
    }
  }

  // Writes `text` next to `to` and renames it over `to`.
  static void Install(const std::string& text, const std::string& to) {
    const std::string staged = to + ".new";
    std::ofstream(staged) << text;
    ASSERT_EQ(rename(staged.c_str(), to.c_str()), 0) << to;
  }

  std::shared_ptr<grpc::ChannelCredentials> Credentials(
      const rpc::TlsPaths& paths) {
    absl::StatusOr<rpc::TlsConfig> config =
        rpc::TlsConfig::Load(paths, rpc::TlsRole::kClient);
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return grpc::InsecureChannelCredentials();
    clients_.push_back(*config);
    return config->ChannelCredentials();
  }
  std::shared_ptr<grpc::ChannelCredentials> Good() {
    return Credentials({certs_.client_cert, certs_.client_key, certs_.ca});
  }

  // The certificate a new connection to `address` with `credentials` is
  // shown.
  absl::StatusOr<std::string> NewConnection(
      const std::string& address,
      const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    return PresentedCertificate(FreshChannel(address, credentials));
  }

  // Polls new connections to `address` until one is shown `cert` (every
  // connection before it must be answered, with `before`).
  void WaitForCertificate(
      const std::string& address,
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      const std::string& before, const std::string& cert) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    absl::StatusOr<std::string> seen = NewConnection(address, credentials);
    while (!(seen.ok() && *seen == cert) && absl::Now() < deadline) {
      if (!before.empty()) {
        ASSERT_TRUE(seen.ok()) << seen.status();
        ASSERT_EQ(*seen, before);
      }
      absl::SleepFor(absl::Milliseconds(50));  // Polling, with a deadline.
      seen = NewConnection(address, credentials);
    }
    ASSERT_TRUE(seen.ok()) << seen.status();
    EXPECT_EQ(*seen, cert);
  }

  std::string dir_;
  TestCerts certs_;
  TestPair next_;
  std::string cert_, key_, ca_;
  std::unique_ptr<Subprocess> coordinator_;
  std::string address_;
  // The clients' configurations, kept while their credentials are used.
  std::vector<rpc::TlsConfig> clients_;
};

TEST_F(CertRotationProcessTest,
       NewPairReachesNewConnectionsOldOnesKeepWorking) {
  const std::string old_cert = FirstCertificateOfFile(certs_.node_cert);
  const std::string new_cert = FirstCertificateOfFile(next_.cert);
  ASSERT_FALSE(old_cert.empty());
  ASSERT_NE(old_cert, new_cert);
  const std::shared_ptr<grpc::ChannelCredentials> good = Good();
  std::shared_ptr<grpc::Channel> established = FreshChannel(address_, good);
  absl::StatusOr<std::string> first = PresentedCertificate(established);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, old_cert);

  // Half-way: the new key beside the old certificate.
  Install(Read(next_.key), key_);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  absl::StatusOr<std::string> kept =
      coordinator_->WaitForLine("TLS files not reloaded", deadline);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_NE(kept->find("does not belong"), std::string::npos) << *kept;
  // The coordinator looks at its copy every second: over 2.5 s at least
  // twice. Every new connection is still served with the old pair.
  const absl::Time until = absl::Now() + absl::Milliseconds(2500);
  int connections = 0;
  while (absl::Now() < until) {
    absl::StatusOr<std::string> seen = NewConnection(address_, good);
    ASSERT_TRUE(seen.ok()) << seen.status() << " after " << connections;
    EXPECT_EQ(*seen, old_cert);
    ++connections;
  }
  EXPECT_GT(connections, 2);

  const absl::Time installed = absl::Now();
  Install(Read(next_.cert), cert_);
  absl::StatusOr<std::string> reloaded =
      coordinator_->WaitForLine("TLS files reloaded (set 2)", deadline);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_NO_FATAL_FAILURE(
      WaitForCertificate(address_, good, old_cert, new_cert));
  std::printf(
      "rotation: a new connection saw the new certificate %.2f s after it "
      "was installed (--tls_refresh_interval=1s)\n",
      absl::ToDoubleSeconds(absl::Now() - installed));
  // The connection made before the rotation is answered, still with the
  // certificate of its handshake.
  absl::StatusOr<std::string> again = PresentedCertificate(established);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, old_cert);
}

TEST_F(CertRotationProcessTest, CaRotationAdmitsClientsOfTheNewCa) {
  // A client of the other CA, trusting only that CA: refused before.
  const std::shared_ptr<grpc::ChannelCredentials> other =
      Credentials({certs_.rogue_cert, certs_.rogue_key, certs_.other_ca});
  EXPECT_EQ(NewConnection(address_, other).status().code(),
            absl::StatusCode::kUnavailable);
  // Both CAs trusted, and a certificate of the new one.
  Install(Read(certs_.ca) + Read(certs_.other_ca), ca_);
  Install(Read(certs_.rogue_key), key_);
  Install(Read(certs_.rogue_cert), cert_);
  ASSERT_NO_FATAL_FAILURE(WaitForCertificate(
      address_, other, "", FirstCertificateOfFile(certs_.rogue_cert)));
}

TEST_F(CertRotationProcessTest,
       DaemonPeerPortShowsNewPairToNewConnectionsOldOnesKeepWorking) {
  // The daemon's own copies of the files, as each pod mounts the Secret.
  const std::string files = dir_ + "/daemon";
  ASSERT_EQ(mkdir(files.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((dir_ + "/shm").c_str(), 0700), 0);
  const std::string cert = files + "/tls.crt";
  const std::string key = files + "/tls.key";
  Install(Read(certs_.node_cert), cert);
  Install(Read(certs_.node_key), key);
  Install(Read(certs_.ca), files + "/ca.crt");
  // stderr joined to stdout: the reload lines are on stderr.
  absl::StatusOr<std::unique_ptr<Subprocess>> daemon = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", g_shardd_binary, "' --coordinator=", address_,
                    " --identity=node-0 --rank=0 --shm_dir='", dir_,
                    "/shm' --listen_unix='", dir_,
                    "/shardd.sock' --peer_listen=127.0.0.1:0 "
                    "--tls_refresh_interval=1s --tls_cert='",
                    cert, "' --tls_key='", key, "' --tls_ca='", files,
                    "/ca.crt' 2>&1")},
      "shardd");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::StatusOr<std::string> line =
      (*daemon)->WaitForLine("shardd rank", deadline);
  ASSERT_TRUE(line.ok()) << line.status();
  const std::string peer = Field(*line, " peer ");
  ASSERT_FALSE(peer.empty()) << *line;

  const std::string old_cert = FirstCertificateOfFile(certs_.node_cert);
  const std::string new_cert = FirstCertificateOfFile(next_.cert);
  ASSERT_FALSE(old_cert.empty());
  ASSERT_NE(old_cert, new_cert);
  const std::shared_ptr<grpc::ChannelCredentials> good = Good();
  std::shared_ptr<grpc::Channel> established = FreshChannel(peer, good);
  absl::StatusOr<std::string> first = PresentedCertificate(established);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, old_cert);

  const absl::Time installed = absl::Now();
  Install(Read(next_.key), key);
  Install(Read(next_.cert), cert);
  absl::StatusOr<std::string> reloaded =
      (*daemon)->WaitForLine("TLS files reloaded (set 2)", deadline);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ASSERT_NO_FATAL_FAILURE(WaitForCertificate(peer, good, old_cert, new_cert));
  std::printf(
      "daemon rotation: a new connection to the peer port saw the new "
      "certificate %.2f s after it was installed (--tls_refresh_interval=1s)\n",
      absl::ToDoubleSeconds(absl::Now() - installed));
  absl::StatusOr<std::string> again = PresentedCertificate(established);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, old_cert);
}

}  // namespace
}  // namespace shardd::tests

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s COORDINATOR_BINARY SHARDD_BINARY\n",
                 argv[0]);
    return 2;
  }
  shardd::tests::g_coordinator_binary = argv[1];
  shardd::tests::g_shardd_binary = argv[2];
  return RUN_ALL_TESTS();
}
