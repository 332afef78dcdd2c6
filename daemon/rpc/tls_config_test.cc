#include "daemon/rpc/tls_config.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/testing/health_check.h"
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
  const std::string cert = Write("cert.pem", kFakeCert);
  const std::string key = Write("key.pem", kFakeKey);
  const std::string ca = Write("ca.pem", kFakeCert);
  auto server_tls = TlsConfig::Load({cert, key, ""}, TlsRole::kServer);
  ASSERT_TRUE(server_tls.ok()) << server_tls.status();
  EXPECT_TRUE(server_tls->enabled());
  EXPECT_FALSE(server_tls->mutual());
  auto server_mtls = TlsConfig::Load({cert, key, ca}, TlsRole::kServer);
  ASSERT_TRUE(server_mtls.ok()) << server_mtls.status();
  EXPECT_TRUE(server_mtls->mutual());
  EXPECT_TRUE(absl::StrContains(server_mtls->Describe(), "mutual TLS"));
  EXPECT_TRUE(absl::StrContains(server_mtls->Describe(), ca));
  // A client with a CA only verifies the server and presents nothing: it
  // cannot serve.
  auto client = TlsConfig::Load({"", "", ca}, TlsRole::kClient);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(client->enabled());
  EXPECT_FALSE(client->mutual());
  EXPECT_EQ(client->ServerCredentials().status().code(),
            absl::StatusCode::kFailedPrecondition);
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

}  // namespace
}  // namespace shardd::rpc
