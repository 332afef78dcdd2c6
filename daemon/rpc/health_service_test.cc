#include "daemon/rpc/health_service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace shardd::rpc {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port, 0);
    stub_ = Health::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    service_.Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(5));
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    return context;
  }

  // The status Check returns, or -1 with the call's error in `error`.
  int Check(const std::string& service, grpc::Status* error = nullptr) {
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = stub_->Check(Context().get(), request, &response);
    if (error != nullptr) *error = status;
    return status.ok() ? response.status() : -1;
  }

  HealthService service_{absl::Milliseconds(10)};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, CheckAnswersFromTheServiceTable) {
  service_.SetServingStatus("", true);
  service_.SetServingStatus("shardd.ready", false);
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("shardd.ready"), HealthCheckResponse::NOT_SERVING);
  service_.SetServingStatus("shardd.ready", true);
  EXPECT_EQ(Check("shardd.ready"), HealthCheckResponse::SERVING);
}

TEST_F(HealthServiceTest, CheckOfAnUnknownServiceIsNotFound) {
  service_.SetServingStatus("", true);
  grpc::Status error;
  EXPECT_EQ(Check("no.such.service", &error), -1);
  EXPECT_EQ(error.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(error.error_message().find("no.such.service"), std::string::npos);
}

TEST_F(HealthServiceTest, ShutdownMakesEveryServiceNotServingForGood) {
  service_.SetServingStatus("", true);
  service_.Shutdown();
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  service_.SetServingStatus("", true);  // Ignored.
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchStreamsEveryChangeAndEndsAtShutdown) {
  service_.SetServingStatus("shardd.ready", false);
  HealthCheckRequest request;
  request.set_service("shardd.ready");
  auto context = Context();
  auto reader = stub_->Watch(context.get(), request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  service_.SetServingStatus("shardd.ready", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  service_.Shutdown();
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceWaitsForIt) {
  HealthCheckRequest request;
  request.set_service("later");
  auto context = Context();
  auto reader = stub_->Watch(context.get(), request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  service_.SetServingStatus("later", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  context->TryCancel();
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace shardd::rpc
