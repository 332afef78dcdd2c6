#include "bench/membership_update_scan.h"

#include <string>

#include "gtest/gtest.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::bench {
namespace {

namespace pb = ::shardd::v1;

pb::MembershipUpdate SampleUpdate() {
  pb::MembershipUpdate u;
  u.set_epoch(42);
  u.set_ready(true);
  u.set_reason("rank 3 joined");
  u.set_world_size(4);
  u.set_sharding_factor(2);
  u.set_committed_step(7);
  for (int rank : {0, 1, 3}) {
    pb::MemberInfo* m = u.add_members();
    m->set_rank(rank);
    m->set_identity("sim-" + std::to_string(rank));
    m->set_peer_address("127.0.0.1:1");
    m->set_incarnation("abc");
    m->set_committed_step(7);
  }
  pb::RecoveryPlan* plan = u.mutable_plan();
  plan->set_epoch(42);
  plan->set_kind(pb::EPOCH_PLAN_KIND_RESUME);
  plan->set_step(7);
  plan->add_transfers()->set_target_rank(3);
  return u;
}

TEST(MembershipUpdateScanTest, ReadsTheFieldsAMemberActsOn) {
  const std::string bytes = SampleUpdate().SerializeAsString();
  absl::StatusOr<ScannedUpdate> s = MembershipUpdateScan::Scan(bytes);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->epoch, 42);
  EXPECT_TRUE(s->ready);
  EXPECT_FALSE(s->keepalive);
  EXPECT_FALSE(s->job_failed);
  EXPECT_EQ(s->world_size, 4);
  EXPECT_EQ(s->ranks, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(s->plan.kind(), pb::EPOCH_PLAN_KIND_RESUME);
  EXPECT_EQ(s->plan.step(), 7);
  ASSERT_EQ(s->plan.transfers_size(), 1);
  EXPECT_EQ(s->plan.transfers(0).target_rank(), 3);
  EXPECT_EQ(s->bytes, bytes.size());
}

TEST(MembershipUpdateScanTest, ScansAByteBufferOfSeveralSlicesLikeAString) {
  const std::string bytes = SampleUpdate().SerializeAsString();
  // Split mid-member, as a received message may be.
  grpc::Slice slices[] = {grpc::Slice(bytes.substr(0, 40)),
                          grpc::Slice(bytes.substr(40))};
  const grpc::ByteBuffer buffer(slices, 2);
  absl::StatusOr<ScannedUpdate> s = MembershipUpdateScan::Scan(buffer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ranks, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(s->plan.step(), 7);
  EXPECT_EQ(s->bytes, bytes.size());
}

TEST(MembershipUpdateScanTest, KeepaliveAndFailedJobAreSeen) {
  pb::MembershipUpdate u;
  u.set_epoch(3);
  u.set_keepalive(true);
  u.set_job_state(pb::JOB_STATE_FAILED);
  absl::StatusOr<ScannedUpdate> s =
      MembershipUpdateScan::Scan(u.SerializeAsString());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->keepalive);
  EXPECT_TRUE(s->job_failed);
  EXPECT_TRUE(s->ranks.empty());
}

TEST(MembershipUpdateScanTest, TruncatedBytesAreInvalidArgument) {
  const std::string bytes = SampleUpdate().SerializeAsString();
  absl::StatusOr<ScannedUpdate> s =
      MembershipUpdateScan::Scan(bytes.substr(0, bytes.size() - 5));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::bench
