#include "daemon/rpc/plaintext_policy.h"

#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

TEST(PlaintextPolicyTest, LoopbackAndUnixSocketsStayOnThisMachine) {
  for (const char* a :
       {"127.0.0.1:7070", "127.5.6.7:0", "localhost:7070", "LOCALHOST:1",
        "[::1]:7070", "::1", "[::ffff:127.0.0.1]:80", "unix:/tmp/s.sock",
        "/dev/shm/shardd.sock", "unix-abstract:x", "dns:///localhost:7070",
        "ipv4:127.0.0.1:7070"}) {
    EXPECT_TRUE(StaysOnThisMachine(a)) << a;
  }
}

TEST(PlaintextPolicyTest, WildcardsAndOtherHostsLeaveIt) {
  for (const char* a :
       {"0.0.0.0:7070", "[::]:7070", "10.1.2.3:7071", "192.168.0.1:1",
        "coordinator.ns.svc:7070", "node1:7071", "[2001:db8::1]:7070",
        "128.0.0.1:7070", "localhost.example.com:1", "dns:///node1:7070"}) {
    EXPECT_FALSE(StaysOnThisMachine(a)) << a;
  }
}

TEST(PlaintextPolicyTest, RefusesPlaintextBeyondTheMachineWithoutInsecure) {
  std::vector<Endpoint> exposed;
  const absl::Status s = CheckPlaintextEndpoints(
      {{"--listen_unix", "/tmp/x.sock"}, {"--listen", "0.0.0.0:7070"}},
      /*tls_enabled=*/false, /*insecure=*/false, &exposed);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--listen=0.0.0.0:7070"), absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("--insecure"), absl::string_view::npos);
  EXPECT_TRUE(exposed.empty());
}

TEST(PlaintextPolicyTest, InsecureAllowsItAndListsWhatIsExposed) {
  std::vector<Endpoint> exposed;
  ASSERT_TRUE(CheckPlaintextEndpoints({{"--listen", "127.0.0.1:1"},
                                       {"--peer_listen", "10.0.0.5:7071"},
                                       {"--coordinator", "coord:7070"},
                                       {"--listen_tcp", ""}},
                                      false, /*insecure=*/true, &exposed)
                  .ok());
  ASSERT_EQ(exposed.size(), 2u);
  EXPECT_EQ(exposed[0].flag, "--peer_listen");
  EXPECT_EQ(exposed[1].flag, "--coordinator");
}

TEST(PlaintextPolicyTest, TlsNeedsNoCheck) {
  std::vector<Endpoint> exposed = {{"stale", "x"}};
  EXPECT_TRUE(CheckPlaintextEndpoints({{"--listen", "0.0.0.0:7070"}},
                                      /*tls_enabled=*/true, false, &exposed)
                  .ok());
  EXPECT_TRUE(exposed.empty());
}

}  // namespace
}  // namespace shardd::rpc
