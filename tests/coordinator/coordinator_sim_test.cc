// The coordinator_sim harness at a small W against a real coordinator
// process: the simulated members form the job, recover from one crash
// through a spare, carry heartbeat load and leave; the coordinator's own
// cluster state confirms each step.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/coordinator_scenarios.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::bench {
namespace {

namespace pb = ::shardd::v1;

std::string coordinator_binary;

constexpr int kWorld = 16;

class CoordinatorSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimConfig config;
    config.coordinator_binary = coordinator_binary;
    config.world_size = kWorld;
    config.sharding_factor = 8;
    const char* tmp = std::getenv("TEST_TMPDIR");
    config.coordinator_log =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/coordinator.log");
    absl::StatusOr<SimJob> job = StartJob(config);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *std::move(job);
    stub_ = pb::Coordinator::NewStub(grpc::CreateChannel(
        job_.coordinator->address(), grpc::InsecureChannelCredentials()));
  }

  pb::ClusterState State() {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, MonoNow() + absl::Seconds(10));
    pb::ClusterState state;
    const grpc::Status s =
        stub_->GetClusterState(&context, pb::GetClusterStateRequest(), &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state;
  }

  SimJob job_;
  std::unique_ptr<pb::Coordinator::Stub> stub_;
};

TEST_F(CoordinatorSimTest, FormsRecoversFromACrashAndLeaves) {
  const FormResult form = JoinToReady(job_, absl::Seconds(60));
  ASSERT_TRUE(form.formed) << "epoch " << form.epoch << ", " << form.joined
                           << " joined";
  EXPECT_EQ(form.joined, kWorld);
  EXPECT_GE(form.all_seen_seconds, form.seconds);
  EXPECT_GT(form.change_bytes, 0);
  // Read from /proc in clock ticks: a 16-member job may take less than one.
  EXPECT_GE(form.cpu.coordinator_s, 0);
  // Two epochs: the forming one, and the one the last join starts.
  EXPECT_EQ(form.epoch, 2);
  pb::ClusterState state = State();
  EXPECT_TRUE(state.ready());
  EXPECT_EQ(state.epoch(), form.epoch);

  const int victim = 9;
  const FailureResult failure = FailureToReady(job_, victim, absl::Seconds(60));
  ASSERT_TRUE(failure.recovered) << "epoch " << failure.epoch;
  // The coordinator noticed the crash only when the lease (1.5 s) ran out,
  // at least a lease minus one heartbeat period (0.5 s + jitter) after it.
  EXPECT_GT(failure.detection_seconds, 0.9);
  EXPECT_GE(failure.joined_seconds, failure.detection_seconds);
  EXPECT_GE(failure.seconds, failure.joined_seconds);
  // The removal and the spare's join each start an epoch.
  EXPECT_GE(failure.epochs, 2);
  EXPECT_GT(failure.bytes_per_member_per_change, 0);
  state = State();
  EXPECT_TRUE(state.ready());
  EXPECT_EQ(state.epoch(), failure.epoch);
  ASSERT_EQ(state.slots_size(), kWorld);
  for (const pb::SlotState& slot : state.slots()) {
    EXPECT_EQ(slot.state(), pb::MEMBER_STATE_READY) << "rank " << slot.rank();
  }
  // The spare holds the slot, under its own identity.
  EXPECT_EQ(state.slots(victim).member().identity(),
            absl::StrCat("sim-", victim, "-r", kWorld));

  const CapacityResult capacity =
      HeartbeatCapacity(job_, 1, 4, absl::Milliseconds(500));
  EXPECT_GT(capacity.load_ok, 0);
  EXPECT_EQ(capacity.load_failed, 0);

  EXPECT_EQ(job_.members->LeaveAll(MonoNow() + absl::Seconds(20)), kWorld);
  state = State();
  for (const pb::SlotState& slot : state.slots()) {
    EXPECT_EQ(slot.state(), pb::MEMBER_STATE_LEFT) << "rank " << slot.rank();
  }
}

}  // namespace
}  // namespace shardd::bench

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s COORDINATOR_BINARY\n", argv[0]);
    return 2;
  }
  shardd::bench::coordinator_binary = argv[1];
  return RUN_ALL_TESTS();
}
