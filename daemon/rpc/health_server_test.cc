#include "daemon/rpc/health_server.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/testing/health_check.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::rpc {
namespace {

class HealthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    health_.SetServingStatus("", true);
    auto server = HealthServer::Start("127.0.0.1:0", "health_listen", &health_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    EXPECT_EQ(server_->address(), absl::StrCat("127.0.0.1:", server_->port()));
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    health_.Shutdown();
    server_.reset();
  }

  HealthService health_;
  std::unique_ptr<HealthServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HealthServerTest, ServesStatusesSetWithoutCredentials) {
  absl::StatusOr<int> overall = tests::CheckHealth(channel_, "");
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, 1);
  EXPECT_EQ(tests::CheckHealth(channel_, "shardd.ready").status().code(),
            absl::StatusCode::kNotFound);
  health_.SetServingStatus("shardd.ready", false);
  EXPECT_EQ(*tests::CheckHealth(channel_, "shardd.ready"), 2);
  health_.SetServingStatus("shardd.ready", true);
  EXPECT_EQ(*tests::CheckHealth(channel_, "shardd.ready"), 1);
}

TEST_F(HealthServerTest, ServesNothingButHealth) {
  auto stub = v1::Coordinator::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::GetClusterStateRequest request;
  v1::ClusterState response;
  const grpc::Status status =
      stub->GetClusterState(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << status.error_message();
}

TEST(HealthServerStartTest, RejectsMalformedAddressNamingTheFlag) {
  for (const std::string bad :
       {"127.0.0.1", "127.0.0.1:x", ":80", "127.0.0.1:70000", "127.0.0.1:-1"}) {
    HealthService health;
    auto server = HealthServer::Start(bad, "health_listen", &health);
    ASSERT_FALSE(server.ok()) << bad;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        absl::StrContains(server.status().message(), "--health_listen"));
  }
}

TEST(HealthServerStartTest, PortInUseIsUnavailable) {
  HealthService health;
  auto first = HealthServer::Start("127.0.0.1:0", "health_listen", &health);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      HealthServer::Start((*first)->address(), "health_listen", &health);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace shardd::rpc
