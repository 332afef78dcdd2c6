#include "daemon/core/host_port.h"

#include <string>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

TEST(HostPortTest, ParsesNamesIpv4AndIpv6) {
  auto a = ParseHostPort("node-1.svc:7000", "peer_address");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "node-1.svc");
  EXPECT_EQ(a->port, 7000);
  auto b = ParseHostPort("127.0.0.1:1", "peer_address");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->port, 1);
  auto c = ParseHostPort("[::1]:65535", "peer_address");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
}

TEST(HostPortTest, RejectsMalformedAddressesNamingTheField) {
  for (const char* bad :
       {"", "node", "node:", ":80", "node:0", "node:65536", "node:8x",
        "no de:80", "[::1]80", "[::1", "[]:80", "node:-1"}) {
    auto r = ParseHostPort(bad, "peer_address");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("peer_address: ", 0), 0u)
        << r.status().message();
  }
}

}  // namespace
}  // namespace shardd::core
