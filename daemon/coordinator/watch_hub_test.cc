#include "daemon/coordinator/watch_hub.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/coordinator/in_process_coordinator.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"

// WatchHub through a real coordinator's gRPC server (InProcessCoordinator):
// what its streams owe their clients on the days that matter.
namespace shardd::coordinator {
namespace {

namespace pb = ::shardd::v1;

constexpr int kWorld = 4;

class WatchHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InProcessCoordinatorOptions o;
    o.coordinator.membership.world_size = kWorld;
    o.coordinator.membership.sharding_factor = 2;
    o.coordinator.membership.detector.lease = absl::Milliseconds(600);
    o.heartbeat_interval = absl::Milliseconds(200);
    auto coord = InProcessCoordinator::Start(o);
    ASSERT_TRUE(coord.ok()) << coord.status();
    coord_ = *std::move(coord);
  }

  // A stub on a connection of its own: one stream's flow control must not
  // be shared with the others'.
  std::unique_ptr<pb::Coordinator::Stub> NewStub() {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("shardd.test.connection", ++connections_);
    return pb::Coordinator::NewStub(grpc::CreateCustomChannel(
        coord_->address(), grpc::InsecureChannelCredentials(), args));
  }

  // Rank `rank` joins as a new identity; its lease token.
  std::string Join(pb::Coordinator::Stub& stub, int rank, int n) {
    pb::JoinRequest request;
    request.set_rank(rank);
    request.set_identity(absl::StrCat("node-", rank, "-", n));
    request.set_peer_address(absl::StrCat("127.0.0.1:", 21000 + rank));
    request.set_incarnation(absl::StrCat("inc-", n));
    pb::JoinResponse response;
    grpc::ClientContext context;
    rpc::SetTimeout(&context, absl::Seconds(10));
    const grpc::Status s = stub.Join(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.lease_token();
  }

  void Leave(pb::Coordinator::Stub& stub, int rank, const std::string& token) {
    pb::LeaveRequest request;
    request.set_rank(rank);
    request.set_lease_token(token);
    request.set_reason("test");
    pb::LeaveResponse response;
    grpc::ClientContext context;
    rpc::SetTimeout(&context, absl::Seconds(10));
    const grpc::Status s = stub.Leave(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  int64_t Epoch() { return coord_->manager().Snapshot(0).epoch; }

  std::unique_ptr<InProcessCoordinator> coord_;
  int connections_ = 0;
};

// Reads `reader` until a non-keepalive message of epoch >= `epoch` or the
// deadline (the stream's own, set by its context).
bool ReadUntilEpoch(grpc::ClientReader<pb::MembershipUpdate>& reader,
                    int64_t epoch) {
  pb::MembershipUpdate update;
  while (reader.Read(&update)) {
    if (!update.keepalive() && update.epoch() >= epoch) return true;
  }
  return false;
}

TEST_F(WatchHubTest, AClientThatStopsReadingHoldsUpNoOtherStream) {
  auto stuck_stub = NewStub();
  grpc::ClientContext stuck_context;
  rpc::SetTimeout(&stuck_context, absl::Seconds(60));
  pb::WatchMembershipRequest full;  // Every member in every message.
  auto stuck = stuck_stub->WatchMembership(&stuck_context, full);
  pb::MembershipUpdate first;
  ASSERT_TRUE(stuck->Read(&first));
  // From here on the stuck client reads nothing while 400 changes, a few
  // hundred bytes each, overflow its flow-control windows.
  auto stub = NewStub();
  for (int n = 0; n < 200; ++n) {
    Leave(*stub, 3, Join(*stub, 3, n));
  }
  const int64_t epoch = Epoch();
  // A scoped stream opened now sees the latest epoch at once.
  grpc::ClientContext context;
  rpc::SetTimeout(&context, absl::Seconds(10));
  pb::WatchMembershipRequest scoped;
  scoped.set_rank(0);
  scoped.set_scoped(true);
  auto reader = stub->WatchMembership(&context, scoped);
  EXPECT_TRUE(ReadUntilEpoch(*reader, epoch)) << "epoch " << epoch;
  context.TryCancel();
  (void)reader->Finish();
  // The stuck client, reading again, catches up to the latest version
  // (changes made while its writes were held are sent after them).
  EXPECT_TRUE(ReadUntilEpoch(*stuck, epoch)) << "epoch " << epoch;
  stuck_context.TryCancel();
  (void)stuck->Finish();
}

TEST_F(WatchHubTest, AQuietStreamGetsAKeepaliveEveryLease) {
  auto stub = NewStub();
  grpc::ClientContext context;
  rpc::SetTimeout(&context, absl::Seconds(10));
  pb::WatchMembershipRequest scoped;
  scoped.set_rank(1);
  scoped.set_scoped(true);
  auto reader = stub->WatchMembership(&context, scoped);
  pb::MembershipUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_FALSE(update.keepalive());
  // Nothing changes; the next two messages are keepalives (one a lease,
  // 600 ms, apart), long before the stream's 10 s deadline.
  const MonoTime start = MonoNow();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(reader->Read(&update));
    EXPECT_TRUE(update.keepalive());
  }
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
  context.TryCancel();
  (void)reader->Finish();
}

TEST_F(WatchHubTest, ShutdownEndsEveryStreamUnavailable) {
  auto stub = NewStub();
  grpc::ClientContext full_context, scoped_context;
  rpc::SetTimeout(&full_context, absl::Seconds(30));
  rpc::SetTimeout(&scoped_context, absl::Seconds(30));
  pb::WatchMembershipRequest full, scoped;
  scoped.set_rank(2);
  scoped.set_scoped(true);
  auto full_reader = stub->WatchMembership(&full_context, full);
  auto scoped_reader = stub->WatchMembership(&scoped_context, scoped);
  pb::MembershipUpdate update;
  ASSERT_TRUE(full_reader->Read(&update));
  ASSERT_TRUE(scoped_reader->Read(&update));
  const MonoTime start = MonoNow();
  coord_->manager().Shutdown();
  while (full_reader->Read(&update)) {
  }
  while (scoped_reader->Read(&update)) {
  }
  EXPECT_EQ(full_reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(scoped_reader->Finish().error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace shardd::coordinator
