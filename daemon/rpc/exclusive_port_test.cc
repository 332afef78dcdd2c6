#include "daemon/rpc/exclusive_port.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/health_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

// A started server on `address` and the port it got (0 and no server when
// it could not listen).
struct Started {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

class ExclusivePortTest : public ::testing::Test {
 protected:
  Started Start(const std::string& address, bool exclusive) {
    grpc::ServerBuilder builder;
    if (exclusive) ForbidPortSharing(builder);
    Started started;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                             &started.port);
    builder.RegisterService(&health_);
    started.server = builder.BuildAndStart();
    if (started.server == nullptr) started.port = 0;
    return started;
  }

  void TearDown() override { health_.Shutdown(); }

  HealthService health_;
};

TEST_F(ExclusivePortTest, SecondExclusiveServerOnTheSamePortDoesNotStart) {
  Started first = Start("127.0.0.1:0", /*exclusive=*/true);
  ASSERT_GT(first.port, 0);
  Started second =
      Start(absl::StrCat("127.0.0.1:", first.port), /*exclusive=*/true);
  EXPECT_EQ(second.server, nullptr);
  EXPECT_EQ(second.port, 0);
}

// Either side refusing to share is enough: an old exclusive server keeps a
// default one out, and an exclusive newcomer will not join a default one.
TEST_F(ExclusivePortTest, ExclusiveOnEitherSideRefusesTheSecond) {
  {
    Started first = Start("127.0.0.1:0", /*exclusive=*/true);
    ASSERT_GT(first.port, 0);
    EXPECT_EQ(Start(absl::StrCat("127.0.0.1:", first.port), /*exclusive=*/false)
                  .server,
              nullptr);
  }
  {
    Started first = Start("127.0.0.1:0", /*exclusive=*/false);
    ASSERT_GT(first.port, 0);
    EXPECT_EQ(Start(absl::StrCat("127.0.0.1:", first.port), /*exclusive=*/true)
                  .server,
              nullptr);
  }
}

// Why the call exists: gRPC's default lets two servers share a port.
TEST_F(ExclusivePortTest, GrpcsDefaultWouldShareThePort) {
  Started first = Start("127.0.0.1:0", /*exclusive=*/false);
  ASSERT_GT(first.port, 0);
  Started second =
      Start(absl::StrCat("127.0.0.1:", first.port), /*exclusive=*/false);
  EXPECT_NE(second.server, nullptr);
  EXPECT_EQ(second.port, first.port);
}

}  // namespace
}  // namespace shardd::rpc
