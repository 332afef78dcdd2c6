#include "daemon/rpc/tls_pem.h"

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/testing/test_certs.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

// A block with the right label whose contents are not DER.
constexpr char kCorruptCert[] =
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
constexpr char kCorruptKey[] =
    "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n";

class TlsPemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tls-pem-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<tests::TestCerts> certs = tests::GenerateTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
  }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
  tests::TestCerts certs_;
};

// The message names every flag and path given.
void ExpectInvalid(const absl::StatusOr<TlsPem>& pem,
                   const std::vector<std::string>& named) {
  ASSERT_FALSE(pem.ok());
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kInvalidArgument)
      << pem.status();
  for (const std::string& text : named) {
    EXPECT_TRUE(absl::StrContains(pem.status().message(), text))
        << pem.status() << " does not name " << text;
  }
}

TEST_F(TlsPemTest, MatchingSetIsReadWhole) {
  const TlsPaths paths{certs_.node_cert, certs_.node_key, certs_.ca};
  absl::StatusOr<TlsPem> pem = ReadTlsPem(paths);
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(pem->cert, Read(certs_.node_cert));
  EXPECT_EQ(pem->key, Read(certs_.node_key));
  EXPECT_EQ(pem->ca, Read(certs_.ca));
  // A client may give only the CA, or only its pair.
  EXPECT_TRUE(ReadTlsPem({"", "", certs_.ca}).ok());
  EXPECT_TRUE(ReadTlsPem({certs_.client_cert, certs_.client_key, ""}).ok());
}

TEST_F(TlsPemTest, KeyOfAnotherCertificateIsInvalidArgumentNamingBoth) {
  ExpectInvalid(ReadTlsPem({certs_.node_cert, certs_.client_key, certs_.ca}),
                {"--tls_key=" + certs_.client_key,
                 "--tls_cert=" + certs_.node_cert, "does not belong"});
}

TEST_F(TlsPemTest, BlocksThatDoNotParseAreInvalidArgument) {
  const std::string bad_cert = Write("bad-cert.pem", kCorruptCert);
  const std::string bad_key = Write("bad-key.pem", kCorruptKey);
  ExpectInvalid(ReadTlsPem({bad_cert, certs_.node_key, ""}),
                {"--tls_cert=" + bad_cert});
  ExpectInvalid(ReadTlsPem({certs_.node_cert, bad_key, ""}),
                {"--tls_key=" + bad_key});
  ExpectInvalid(ReadTlsPem({"", "", bad_cert}), {"--tls_ca=" + bad_cert});
  // A chain whose second certificate is broken.
  const std::string chain =
      Write("chain.pem", Read(certs_.node_cert) + kCorruptCert);
  ExpectInvalid(ReadTlsPem({chain, certs_.node_key, ""}),
                {"--tls_cert=" + chain, "certificate 2"});
}

TEST_F(TlsPemTest, ChainAndCaBundleWithSeveralCertificatesPass) {
  const std::string chain =
      Write("chain.pem", Read(certs_.node_cert) + Read(certs_.ca));
  const std::string bundle =
      Write("bundle.pem", Read(certs_.ca) + Read(certs_.other_ca));
  EXPECT_TRUE(ReadTlsPem({chain, certs_.node_key, bundle}).ok());
}

TEST_F(TlsPemTest, ReadErrorsKeepTheirCodes) {
  const std::string missing = dir_ + "/missing.pem";
  absl::StatusOr<TlsPem> pem = ReadTlsPem({missing, certs_.node_key, ""});
  ASSERT_FALSE(pem.ok());
  EXPECT_EQ(pem.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(pem.status().message(), "--tls_cert"));
  // The key's file given as the certificate: no CERTIFICATE block.
  ExpectInvalid(ReadTlsPem({certs_.node_key, certs_.node_key, ""}),
                {"--tls_cert=" + certs_.node_key, "no PEM block"});
}

}  // namespace
}  // namespace shardd::rpc
