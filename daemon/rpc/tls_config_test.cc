#include "daemon/rpc/tls_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/testing/health_check.h"
#include "daemon/testing/peer_certificate.h"
#include "daemon/testing/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

constexpr char kFakeCert[] =
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kFakeKey[] =
    "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

class TlsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tls-config-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }

  // The generated PKI, once per test that needs real certificates.
  tests::TestCerts Certs() {
    auto certs = tests::GenerateTestCerts(dir_);
    EXPECT_TRUE(certs.ok()) << certs.status();
    return certs.ok() ? *certs : tests::TestCerts{};
  }

  std::string dir_;
};

// The error names the flag and the path, and the code tells what is wrong.
void ExpectError(const absl::StatusOr<TlsConfig>& config, absl::StatusCode code,
                 const std::string& flag, const std::string& path) {
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), code) << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), flag))
      << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), path))
      << config.status();
}

TEST_F(TlsConfigTest, NoPathMeansTlsOffWithInsecureCredentials) {
  for (TlsRole role : {TlsRole::kServer, TlsRole::kClient}) {
    absl::StatusOr<TlsConfig> config = TlsConfig::Load(TlsPaths{}, role);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_FALSE(config->enabled());
    EXPECT_FALSE(config->mutual());
    EXPECT_TRUE(absl::StartsWith(config->Describe(), "TLS off"));
    auto server = config->ServerCredentials();
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_NE(*server, nullptr);
    EXPECT_NE(config->ChannelCredentials(), nullptr);
  }
}

TEST_F(TlsConfigTest, MissingFilesAreNotFoundNamingFlagAndPath) {
  const std::string cert = Write("cert.pem", kFakeCert);
  const std::string key = Write("key.pem", kFakeKey);
  const std::string missing = dir_ + "/no-such.pem";
  ExpectError(TlsConfig::Load({missing, key, ""}, TlsRole::kServer),
              absl::StatusCode::kNotFound, "--tls_cert", missing);
  ExpectError(TlsConfig::Load({cert, missing, ""}, TlsRole::kServer),
              absl::StatusCode::kNotFound, "--tls_key", missing);
  ExpectError(TlsConfig::Load({cert, key, missing}, TlsRole::kServer),
              absl::StatusCode::kNotFound, "--tls_ca", missing);
  ExpectError(TlsConfig::Load({"", "", missing}, TlsRole::kClient),
              absl::StatusCode::kNotFound, "--tls_ca", missing);
  const std::string under_file = cert + "/x.pem";  // ENOTDIR.
  ExpectError(TlsConfig::Load({under_file, key, ""}, TlsRole::kServer),
              absl::StatusCode::kNotFound, "--tls_cert", under_file);
}

TEST_F(TlsConfigTest, MissingPartnerFlagIsInvalidArgument) {
  const std::string cert = Write("cert.pem", kFakeCert);
  const std::string key = Write("key.pem", kFakeKey);
  const std::string ca = Write("ca.pem", kFakeCert);
  auto no_key = TlsConfig::Load({cert, "", ca}, TlsRole::kServer);
  ASSERT_FALSE(no_key.ok());
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(no_key.status().message(), "--tls_key"));
  auto no_cert = TlsConfig::Load({"", key, ""}, TlsRole::kClient);
  ASSERT_FALSE(no_cert.ok());
  EXPECT_EQ(no_cert.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(no_cert.status().message(), "--tls_cert"));
  // A server needs a certificate of its own; a CA alone is not enough.
  auto ca_only = TlsConfig::Load({"", "", ca}, TlsRole::kServer);
  ASSERT_FALSE(ca_only.ok());
  EXPECT_EQ(ca_only.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(ca_only.status().message(), "--tls_cert"));
}

TEST_F(TlsConfigTest, FilesWithoutTheirPemBlockAreInvalidArgument) {
  const std::string cert = Write("cert.pem", kFakeCert);
  const std::string key = Write("key.pem", kFakeKey);
  const std::string empty = Write("empty.pem", "");
  const std::string text = Write("text.pem", "not a certificate\n");
  ExpectError(TlsConfig::Load({empty, key, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_cert", empty);
  ExpectError(TlsConfig::Load({text, key, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_cert", text);
  // Swapped: the key file holds no private key, the cert file no cert.
  ExpectError(TlsConfig::Load({key, cert, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_cert", key);
  ExpectError(TlsConfig::Load({cert, cert, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_key", cert);
  ExpectError(TlsConfig::Load({cert, key, key}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_ca", key);
  ExpectError(TlsConfig::Load({dir_, key, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_cert", dir_);
  const std::string huge =
      Write("huge.pem", absl::StrCat(kFakeCert, std::string(2 << 20, 'x')));
  ExpectError(TlsConfig::Load({huge, key, ""}, TlsRole::kServer),
              absl::StatusCode::kInvalidArgument, "--tls_cert", huge);
}

TEST_F(TlsConfigTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files of mode 0000";
  const std::string key = Write("key.pem", kFakeKey);
  const std::string cert = Write("cert.pem", kFakeCert);
  ASSERT_EQ(chmod(key.c_str(), 0), 0);
  ExpectError(TlsConfig::Load({cert, key, ""}, TlsRole::kServer),
              absl::StatusCode::kPermissionDenied, "--tls_key", key);
}

TEST_F(TlsConfigTest, ModesFollowTheFlagsGiven) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  auto server_tls =
      TlsConfig::Load({certs.node_cert, certs.node_key, ""}, TlsRole::kServer);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  EXPECT_TRUE(server_tls->enabled());
  EXPECT_FALSE(server_tls->mutual());
  auto server_mtls = TlsConfig::Load(
      {certs.node_cert, certs.node_key, certs.ca}, TlsRole::kServer);
  ASSERT_TRUE(server_mtls.ok()) << server_mtls.status();
  EXPECT_TRUE(server_mtls->mutual());
  EXPECT_TRUE(absl::StrContains(server_mtls->Describe(), "mutual TLS"));
  EXPECT_TRUE(absl::StrContains(server_mtls->Describe(), certs.ca));
  EXPECT_TRUE(absl::StrContains(server_mtls->Describe(),
                                "read again every 1m (--tls_refresh_interval)"))
      << server_mtls->Describe();
  // A client with a CA only verifies the server and presents nothing: it
  // cannot serve.
  auto client = TlsConfig::Load({"", "", certs.ca}, TlsRole::kClient);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(client->enabled());
  EXPECT_FALSE(client->mutual());
  EXPECT_EQ(client->ServerCredentials().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Start fails fast on a pair that cannot work, instead of a server that
// refuses every handshake.
TEST_F(TlsConfigTest, KeyOfAnotherCertificateOrCorruptBlockStopsLoad) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  for (TlsRole role : {TlsRole::kServer, TlsRole::kClient}) {
    auto config =
        TlsConfig::Load({certs.node_cert, certs.client_key, certs.ca}, role);
    ExpectError(config, absl::StatusCode::kInvalidArgument, "--tls_key",
                certs.client_key);
    EXPECT_TRUE(absl::StrContains(config.status().message(), certs.node_cert))
        << config.status();
  }
  const std::string fake = Write("fake-cert.pem", kFakeCert);
  ExpectError(
      TlsConfig::Load({fake, certs.node_key, certs.ca}, TlsRole::kServer),
      absl::StatusCode::kInvalidArgument, "--tls_cert", fake);
}

TEST_F(TlsConfigTest, RefreshIntervalUnderOneSecondIsInvalidArgument) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  TlsReloadOptions reload;
  reload.interval = absl::Milliseconds(500);
  auto config = TlsConfig::Load({certs.node_cert, certs.node_key, ""},
                                TlsRole::kServer, reload);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(config.status().message(), "--tls_refresh_interval"))
      << config.status();
}

// A mutual-TLS server (gRPC's health service only) and clients of every
// kind, in process: only the client with a certificate of the server's CA
// gets an answer.
TEST_F(TlsConfigTest, MutualTlsServerAnswersOnlyClientsWithTheRightCa) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  auto server_tls = TlsConfig::Load({certs.node_cert, certs.node_key, certs.ca},
                                    TlsRole::kServer);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  auto server_creds = server_tls->ServerCredentials();
  ASSERT_TRUE(server_creds.ok()) << server_creds.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *server_creds, &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  auto check = [&](const TlsPaths& paths) {
    auto client = TlsConfig::Load(paths, TlsRole::kClient);
    EXPECT_TRUE(client.ok()) << client.status();
    return tests::CheckHealth(
        grpc::CreateChannel(address, client.ok()
                                         ? client->ChannelCredentials()
                                         : grpc::InsecureChannelCredentials()),
        "");
  };
  absl::StatusOr<int> good =
      check({certs.client_cert, certs.client_key, certs.ca});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(*good, 1);  // SERVING.
  EXPECT_EQ(check({"", "", certs.ca}).status().code(),
            absl::StatusCode::kUnavailable);  // No client certificate.
  EXPECT_EQ(
      check({certs.rogue_cert, certs.rogue_key, certs.ca}).status().code(),
      absl::StatusCode::kUnavailable);  // Signed by another CA.
  EXPECT_EQ(check({}).status().code(),
            absl::StatusCode::kUnavailable);  // Plaintext.
  // The client refuses a server whose certificate its CA did not sign.
  EXPECT_EQ(check({certs.client_cert, certs.client_key, certs.other_ca})
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  server->Shutdown();
}

// Without --tls_ca the server encrypts but asks for no client certificate.
TEST_F(TlsConfigTest, ServerWithoutCaAcceptsClientsWithoutCertificate) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  auto server_tls =
      TlsConfig::Load({certs.node_cert, certs.node_key, ""}, TlsRole::kServer);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *server_tls->ServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = TlsConfig::Load({"", "", certs.ca}, TlsRole::kClient);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<int> answer =
      tests::CheckHealth(grpc::CreateChannel(absl::StrCat("localhost:", port),
                                             client->ChannelCredentials()),
                         "");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(*answer, 1);
  server->Shutdown();
}

// The server's certificate must name the host dialled: 127.0.0.2 is this
// machine too, but node_cert names only localhost and 127.0.0.1.
TEST_F(TlsConfigTest, ChannelChecksTheServerNameItDialled) {
  const tests::TestCerts certs = Certs();
  ASSERT_FALSE(certs.dir.empty());
  auto server_tls =
      TlsConfig::Load({certs.node_cert, certs.node_key, ""}, TlsRole::kServer);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("0.0.0.0:0", *server_tls->ServerCredentials(),
                           &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = TlsConfig::Load({"", "", certs.ca}, TlsRole::kClient);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<int> named =
      tests::CheckHealth(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                             client->ChannelCredentials()),
                         "");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(*named, 1);
  EXPECT_EQ(
      tests::CheckHealth(grpc::CreateChannel(absl::StrCat("127.0.0.2:", port),
                                             client->ChannelCredentials()),
                         "")
          .status()
          .code(),
      absl::StatusCode::kUnavailable);
  server->Shutdown();
}

// Rotation in process: a TLS server whose files are replaced (a new file
// renamed over the old one, as kubelet and cert-manager do) presents the
// new certificate on new connections, and an established connection keeps
// working with the one it was made with. A rotation caught half-way (the
// new key next to the old certificate) never refuses a connection.
class TlsRotationTest : public TlsConfigTest {
 protected:
  void SetUp() override {
    TlsConfigTest::SetUp();
    certs_ = Certs();
    ASSERT_FALSE(certs_.dir.empty());
    absl::StatusOr<tests::TestPair> next =
        tests::GenerateNodePair(certs_, "next");
    ASSERT_TRUE(next.ok()) << next.status();
    next_ = *next;
    paths_ = {dir_ + "/tls.crt", dir_ + "/tls.key", dir_ + "/ca.crt"};
    Install(certs_.node_cert, paths_.cert);
    Install(certs_.node_key, paths_.key);
    Install(certs_.ca, paths_.ca);
    // The mirror's own thread never runs during the test: Refresh() does
    // its work at a known moment. gRPC's provider still polls every second.
    TlsReloadOptions reload;
    reload.interval = absl::Hours(1);
    auto server_tls = TlsConfig::Load(paths_, TlsRole::kServer, reload);
    ASSERT_TRUE(server_tls.ok()) << server_tls.status();
    server_tls_ = *server_tls;
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", *server_tls_.ServerCredentials(),
                             &port);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = absl::StrCat("127.0.0.1:", port);
    auto client = TlsConfig::Load(
        {certs_.client_cert, certs_.client_key, certs_.ca}, TlsRole::kClient);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *client;
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  void Install(const std::string& from, const std::string& to) {
    const std::string staged = to + ".new";
    std::ofstream(staged) << Read(from);
    ASSERT_EQ(rename(staged.c_str(), to.c_str()), 0) << to;
  }

  // The certificate a new connection is shown.
  absl::StatusOr<std::string> NewConnection() {
    return tests::PresentedCertificate(
        tests::FreshChannel(address_, client_.ChannelCredentials()));
  }

  tests::TestCerts certs_;
  tests::TestPair next_;
  TlsPaths paths_;
  TlsConfig server_tls_;
  TlsConfig client_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(TlsRotationTest, NewConnectionsGetTheNewCertificateOldOnesKeepTheirs) {
  const std::string old_cert = tests::FirstCertificateOfFile(certs_.node_cert);
  const std::string new_cert = tests::FirstCertificateOfFile(next_.cert);
  ASSERT_FALSE(old_cert.empty());
  ASSERT_NE(old_cert, new_cert);
  std::shared_ptr<grpc::Channel> established =
      tests::FreshChannel(address_, client_.ChannelCredentials());
  absl::StatusOr<std::string> first = tests::PresentedCertificate(established);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, old_cert);

  Install(next_.key, paths_.key);
  Install(next_.cert, paths_.cert);
  ASSERT_TRUE(server_tls_.mirror()->Refresh().ok());
  absl::StatusOr<std::string> seen = NewConnection();
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while ((!seen.ok() || *seen != new_cert) && absl::Now() < deadline) {
    // A connection that still sees the old certificate must be answered.
    ASSERT_TRUE(seen.ok()) << seen.status();
    EXPECT_EQ(*seen, old_cert);
    absl::SleepFor(absl::Milliseconds(50));  // Polling, with a deadline.
    seen = NewConnection();
  }
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, new_cert);
  absl::StatusOr<std::string> again = tests::PresentedCertificate(established);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, old_cert);  // The same connection, answered.
}

TEST_F(TlsRotationTest, HalfWrittenRotationNeverRefusesAConnection) {
  const std::string old_cert = tests::FirstCertificateOfFile(certs_.node_cert);
  const std::string new_cert = tests::FirstCertificateOfFile(next_.cert);
  Install(next_.key, paths_.key);  // The certificate is not there yet.
  EXPECT_EQ(server_tls_.mirror()->Refresh().code(),
            absl::StatusCode::kInvalidArgument);
  // gRPC's provider polls every second: over 2.5 s it looks at least twice,
  // and every new connection is still served with the last good pair.
  const absl::Time until = absl::Now() + absl::Milliseconds(2500);
  int connections = 0;
  while (absl::Now() < until) {
    absl::StatusOr<std::string> seen = NewConnection();
    ASSERT_TRUE(seen.ok()) << seen.status() << " after " << connections;
    EXPECT_EQ(*seen, old_cert);
    ++connections;
  }
  EXPECT_GT(connections, 2);
  Install(next_.cert, paths_.cert);
  ASSERT_TRUE(server_tls_.mirror()->Refresh().ok());
  absl::StatusOr<std::string> seen = NewConnection();
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (seen.ok() && *seen != new_cert && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polling, with a deadline.
    seen = NewConnection();
  }
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, new_cert);
}

// The channel side rotates too: a client whose certificate the server's CA
// did not sign is refused until its files hold one that it did.
TEST_F(TlsRotationTest, ChannelPresentsTheRotatedClientCertificate) {
  const TlsPaths client_paths{dir_ + "/rotating.crt", dir_ + "/rotating.key",
                              certs_.ca};
  Install(certs_.rogue_cert, client_paths.cert);  // Of the other CA.
  Install(certs_.rogue_key, client_paths.key);
  TlsReloadOptions reload;
  reload.interval = absl::Hours(1);
  auto client = TlsConfig::Load(client_paths, TlsRole::kClient, reload);
  ASSERT_TRUE(client.ok()) << client.status();
  auto connect = [&] {
    return tests::PresentedCertificate(
        tests::FreshChannel(address_, client->ChannelCredentials()));
  };
  EXPECT_EQ(connect().status().code(), absl::StatusCode::kUnavailable);
  Install(certs_.client_key, client_paths.key);
  Install(certs_.client_cert, client_paths.cert);
  ASSERT_TRUE(client->mirror()->Refresh().ok());
  absl::StatusOr<std::string> seen = connect();
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (!seen.ok() && absl::Now() < deadline) {
    EXPECT_EQ(seen.status().code(), absl::StatusCode::kUnavailable);
    absl::SleepFor(absl::Milliseconds(50));  // Polling, with a deadline.
    seen = connect();
  }
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, tests::FirstCertificateOfFile(certs_.node_cert));
}

}  // namespace
}  // namespace shardd::rpc
