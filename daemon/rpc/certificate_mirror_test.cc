#include "daemon/rpc/certificate_mirror.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/rpc/tls_pem.h"
#include "daemon/testing/test_certs.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t ModificationTime(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return st.st_mtime;
}

// The mirror watches tls.crt, tls.key and ca.crt in a folder of its own,
// which the tests replace the way kubelet and cert-manager do (a new file
// renamed over the old one).
class CertificateMirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/mirror-XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<tests::TestCerts> certs = tests::GenerateTestCerts(dir_);
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *certs;
    absl::StatusOr<tests::TestPair> next =
        tests::GenerateNodePair(certs_, "next");
    ASSERT_TRUE(next.ok()) << next.status();
    next_ = *next;
    paths_ = {dir_ + "/tls.crt", dir_ + "/tls.key", dir_ + "/ca.crt"};
    Install(certs_.node_cert, paths_.cert);
    Install(certs_.node_key, paths_.key);
    Install(certs_.ca, paths_.ca);
  }

  // Copies `from` over `to` atomically.
  void Install(const std::string& from, const std::string& to) {
    const std::string staged = to + ".new";
    std::ofstream(staged) << Read(from);
    ASSERT_EQ(rename(staged.c_str(), to.c_str()), 0) << to;
  }

  std::unique_ptr<CertificateMirror> Start(absl::Duration interval) {
    absl::StatusOr<TlsPem> pem = ReadTlsPem(paths_);
    EXPECT_TRUE(pem.ok()) << pem.status();
    if (!pem.ok()) return nullptr;
    absl::StatusOr<std::unique_ptr<CertificateMirror>> mirror =
        CertificateMirror::Start("test", paths_, *pem, interval);
    EXPECT_TRUE(mirror.ok()) << mirror.status();
    return mirror.ok() ? *std::move(mirror) : nullptr;
  }

  // Long enough that the mirror's own thread never polls during a test
  // that drives Refresh itself.
  static constexpr absl::Duration kNever = absl::Hours(1);

  std::string dir_;
  tests::TestCerts certs_;
  tests::TestPair next_;
  TlsPaths paths_;
};

TEST_F(CertificateMirrorTest, PublishesKeyAndCertificateInOneFileAndTheCa) {
  std::unique_ptr<CertificateMirror> mirror = Start(kNever);
  ASSERT_NE(mirror, nullptr);
  EXPECT_EQ(mirror->generation(), 1);
  EXPECT_TRUE(absl::StartsWith(mirror->identity_path(), "/proc/self/fd/"));
  const std::string identity = Read(mirror->identity_path());
  EXPECT_TRUE(absl::StartsWith(identity, Read(certs_.node_key)));
  EXPECT_TRUE(absl::EndsWith(identity, Read(certs_.node_cert)));
  EXPECT_EQ(Read(mirror->ca_path()), Read(certs_.ca));
  // What gRPC will read parses as a matching pair from either path.
  const TlsPaths published{mirror->identity_path(), mirror->identity_path(),
                           mirror->ca_path()};
  EXPECT_TRUE(ReadTlsPem(published).ok());
}

TEST_F(CertificateMirrorTest, RefreshPublishesANewPairUnderTheSamePath) {
  std::unique_ptr<CertificateMirror> mirror = Start(kNever);
  ASSERT_NE(mirror, nullptr);
  const std::string path = mirror->identity_path();
  const int64_t before = ModificationTime(path);
  ASSERT_TRUE(mirror->Refresh().ok());
  EXPECT_EQ(mirror->generation(), 1);  // Nothing changed: nothing published.
  EXPECT_EQ(ModificationTime(path), before);

  Install(next_.key, paths_.key);
  Install(next_.cert, paths_.cert);
  ASSERT_TRUE(mirror->Refresh().ok());
  EXPECT_EQ(mirror->generation(), 2);
  EXPECT_EQ(mirror->identity_path(), path);
  EXPECT_EQ(Read(path), Read(next_.key) + Read(next_.cert));
  // Later in whole seconds: gRPC's check for a swap between its reads.
  EXPECT_GT(ModificationTime(path), before);
  EXPECT_EQ(Read(mirror->ca_path()), Read(certs_.ca));
}

TEST_F(CertificateMirrorTest, HalfWrittenRotationKeepsTheLastGoodPair) {
  std::unique_ptr<CertificateMirror> mirror = Start(kNever);
  ASSERT_NE(mirror, nullptr);
  const std::string published = Read(mirror->identity_path());
  // The key first: for a moment the key is not the certificate's.
  Install(next_.key, paths_.key);
  absl::Status refused = mirror->Refresh();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "does not belong"))
      << refused;
  EXPECT_EQ(Read(mirror->identity_path()), published);
  EXPECT_EQ(mirror->generation(), 1);
  // A file missing for a moment (deleted, then written).
  ASSERT_EQ(unlink(paths_.cert.c_str()), 0);
  EXPECT_EQ(mirror->Refresh().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Read(mirror->identity_path()), published);
  // Then the certificate: the new pair is whole and goes out.
  Install(next_.cert, paths_.cert);
  ASSERT_TRUE(mirror->Refresh().ok());
  EXPECT_EQ(mirror->generation(), 2);
  EXPECT_EQ(Read(mirror->identity_path()), Read(next_.key) + Read(next_.cert));
}

TEST_F(CertificateMirrorTest, NewCaIsPublishedAloneKeepingTheIdentity) {
  std::unique_ptr<CertificateMirror> mirror = Start(kNever);
  ASSERT_NE(mirror, nullptr);
  const int64_t identity_mtime = ModificationTime(mirror->identity_path());
  const std::string bundle = dir_ + "/bundle.pem";
  std::ofstream(bundle) << Read(certs_.ca) << Read(certs_.other_ca);
  Install(bundle, paths_.ca);
  ASSERT_TRUE(mirror->Refresh().ok());
  EXPECT_EQ(Read(mirror->ca_path()), Read(bundle));
  EXPECT_EQ(ModificationTime(mirror->identity_path()), identity_mtime);
}

TEST_F(CertificateMirrorTest, OwnThreadPicksUpARotationWithinItsInterval) {
  std::unique_ptr<CertificateMirror> mirror = Start(absl::Seconds(1));
  ASSERT_NE(mirror, nullptr);
  Install(next_.key, paths_.key);
  Install(next_.cert, paths_.cert);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (mirror->generation() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));  // Polling, with a deadline.
  }
  EXPECT_EQ(mirror->generation(), 2);
  EXPECT_EQ(Read(mirror->identity_path()), Read(next_.key) + Read(next_.cert));
}

}  // namespace
}  // namespace shardd::rpc
