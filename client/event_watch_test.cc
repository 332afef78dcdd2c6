#include "client/event_watch.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/event_printer.h"
#include "client/trainer_client.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.grpc.pb.h"

namespace shardd::client {
namespace {

// A daemon's WatchEvents: `events` events, then either `end_with` (when
// not OK) or an open stream until the client cancels or the test ends.
class FakeTrainer : public v1::Trainer::Service {
 public:
  FakeTrainer(int events, grpc::Status end_with)
      : events_(events), end_with_(std::move(end_with)) {}

  grpc::Status WatchEvents(
      grpc::ServerContext* context, const v1::WatchEventsRequest* request,
      grpc::ServerWriter<v1::TrainerEvent>* writer) override {
    for (int i = 1; i <= events_; ++i) {
      v1::TrainerEvent event;
      event.set_sequence(request->after_sequence() + i);
      event.mutable_step_committed()->set_step(i);
      writer->Write(event);
    }
    sent_.Notify();
    if (!end_with_.ok()) return end_with_;
    // Held open, as a daemon does; woken twice a second to see a cancel.
    while (!context->IsCancelled() && !release_.WaitFor(absl::Seconds(0.5))) {
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  }

  // Every event of the stream has been handed to gRPC.
  MonoNotification& sent() { return sent_; }
  void Release() { release_.Notify(); }

 private:
  const int events_;
  const grpc::Status end_with_;
  MonoNotification sent_;
  MonoNotification release_;
};

class EventWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/event_watch_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    out_ = open_memstream(&buffer_, &size_);
    printer_ = std::make_unique<EventPrinter>(out_, EventPrinter::Options{});
  }
  void TearDown() override {
    if (service_ != nullptr) service_->Release();
    if (server_ != nullptr) server_->Shutdown(rpc::ToGrpcDeadline(MonoNow()));
    server_.reset();
    std::fclose(out_);
    std::free(buffer_);
    unlink(absl::StrCat(dir_, "/shardd.sock").c_str());
    rmdir(dir_.c_str());
  }

  std::string Target() const {
    return absl::StrCat("unix:", dir_, "/shardd.sock");
  }

  void StartDaemon(int events, grpc::Status end_with = grpc::Status::OK) {
    service_ = std::make_unique<FakeTrainer>(events, std::move(end_with));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(Target(), grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }

  std::unique_ptr<TrainerClient> Client() {
    TrainerClientOptions options;
    options.target = Target();
    auto client = TrainerClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }

  std::string Printed() const { return std::string(buffer_, size_); }

  std::string dir_;
  std::FILE* out_ = nullptr;
  char* buffer_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<EventPrinter> printer_;
  std::unique_ptr<FakeTrainer> service_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(EventWatchTest, EndsCleanlyWhenItsTimeIsUpAndPrintsEveryEvent) {
  StartDaemon(3);
  auto client = Client();
  EventWatch watch(printer_.get());
  const WatchEnd end =
      watch.Run(*client, 10, MonoNow() + absl::Milliseconds(300));
  EXPECT_EQ(end.reason, WatchEnd::Reason::kTimeUp) << end.status;
  EXPECT_EQ(end.events, 3);
  EXPECT_NE(Printed().find("#11  epoch 0  step_committed  step 1"),
            std::string::npos)
      << Printed();
  EXPECT_NE(Printed().find("#13  epoch 0  step_committed  step 3"),
            std::string::npos);
}

TEST_F(EventWatchTest, StopFromAnotherThreadEndsItCleanly) {
  StartDaemon(1);
  auto client = Client();
  EventWatch watch(printer_.get());
  std::thread stopper([&] {
    ASSERT_TRUE(service_->sent().WaitFor(absl::Seconds(30)));
    watch.Stop();
  });
  const WatchEnd end = watch.Run(*client, 0, MonoNow() + absl::Seconds(60));
  stopper.join();
  EXPECT_EQ(end.reason, WatchEnd::Reason::kStopped) << end.status;
  EXPECT_TRUE(end.status.ok());
}

TEST_F(EventWatchTest, StopBeforeRunEndsRunAtOnce) {
  StartDaemon(1);
  auto client = Client();
  EventWatch watch(printer_.get());
  watch.Stop();
  const WatchEnd end = watch.Run(*client, 0, MonoTime::InfiniteFuture());
  EXPECT_EQ(end.reason, WatchEnd::Reason::kStopped) << end.status;
}

TEST_F(EventWatchTest, ADaemonThatGoesAwayAfterEventsIsNotACleanEnd) {
  StartDaemon(2, grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the daemon is shutting down"));
  auto client = Client();
  EventWatch watch(printer_.get());
  const WatchEnd end = watch.Run(*client, 0, MonoNow() + absl::Seconds(60));
  EXPECT_EQ(end.reason, WatchEnd::Reason::kDaemonGone);
  EXPECT_EQ(end.events, 2);
  EXPECT_EQ(end.status.message(), "the daemon is shutting down");
}

TEST_F(EventWatchTest, NoDaemonAtTheSocketSaysSo) {
  auto client = Client();
  EventWatch watch(printer_.get());
  const WatchEnd end = watch.Run(*client, 0, MonoNow() + absl::Seconds(60));
  EXPECT_EQ(end.reason, WatchEnd::Reason::kNoDaemon) << end.status;
  EXPECT_EQ(end.events, 0);
  EXPECT_TRUE(absl::IsUnavailable(end.status)) << end.status;
}

TEST_F(EventWatchTest, AnotherErrorOfTheDaemonIsAFailure) {
  StartDaemon(0, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "after_sequence: must be >= 0"));
  auto client = Client();
  EventWatch watch(printer_.get());
  const WatchEnd end = watch.Run(*client, 0, MonoNow() + absl::Seconds(60));
  EXPECT_EQ(end.reason, WatchEnd::Reason::kFailed);
  EXPECT_TRUE(absl::IsInvalidArgument(end.status)) << end.status;
}

}  // namespace
}  // namespace shardd::client
