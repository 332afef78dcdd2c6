// Four member processes form a real Gloo communicator through the
// coordinator's rendezvous store (CoordinatorStore) and all-reduce; after a
// member is killed and replaced, the new epoch's communicator forms and
// works, and a process that is not a member reads nothing.
#include <signal.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/coordinator/process_cluster.h"
#include "tests/coordinator/test_main.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;

constexpr int kWorld = 4;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

TEST(GlooRendezvousTest, MembersAllReduceInEveryFullEpochIncludingAfterAKill) {
  ProcessCluster cluster({TestBinaries().coordinator, TestBinaries().member,
                          kWorld, 2, 1500, 500});
  ASSERT_TRUE(cluster.StartCoordinator().ok());
  for (int r = 0; r < kWorld; ++r) {
    auto m = cluster.StartMember(r, absl::StrCat("node-", r), /*gloo=*/true,
                                 In(absl::Seconds(20)));
    ASSERT_TRUE(m.ok()) << m.status();
  }
  auto ready = cluster.WaitForReady(0, In(absl::Seconds(40)));
  ASSERT_TRUE(ready.ok()) << ready.status();
  const int64_t first = ready->epoch();
  const std::string expected_sum = absl::StrCat(kWorld * (kWorld + 1) / 2);
  for (auto& m : cluster.members()) {
    // Ready only after the communicator of that epoch worked.
    auto line = m->WaitForLine(
        absl::StrCat("allreduce ok epoch=", first, " sum=", expected_sum),
        In(absl::Seconds(10)));
    EXPECT_TRUE(line.ok()) << line.status();
  }

  const int victim = 1;
  cluster.members()[victim]->Signal(SIGKILL);
  auto failed = cluster.WaitForState(
      [&](const pb::ClusterState& s) {
        return s.slots(victim).state() == pb::MEMBER_STATE_FAILED;
      },
      In(absl::Seconds(10)), "showing rank 1 FAILED");
  ASSERT_TRUE(failed.ok()) << failed.status();
  auto replacement = cluster.StartMember(victim, "node-1-replacement",
                                         /*gloo=*/true, In(absl::Seconds(20)));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  auto again = cluster.WaitForReady(failed->epoch(), In(absl::Seconds(40)));
  ASSERT_TRUE(again.ok()) << again.status();
  const int64_t second = again->epoch();
  EXPECT_GT(second, first);
  for (int i = 0; i < static_cast<int>(cluster.members().size()); ++i) {
    if (i == victim) continue;
    auto line = cluster.members()[i]->WaitForLine(
        absl::StrCat("allreduce ok epoch=", second, " sum=", expected_sum),
        In(absl::Seconds(10)));
    EXPECT_TRUE(line.ok()) << line.status();
  }

  // Whoever is not a member reads nothing of either epoch (the members'
  // Gloo keys hold their addresses): UNAUTHENTICATED, before any epoch is
  // looked at. (A member's read of a stale epoch is ABORTED:
  // bad_input_test, coordinator_store_test.)
  for (int64_t epoch : {first, second}) {
    pb::RendezvousGetRequest get;
    get.set_epoch(epoch);
    get.set_key("gloo/0/epoch/1/world/0");
    pb::RendezvousGetResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(In(absl::Seconds(5))));
    const grpc::Status s =
        cluster.stub().RendezvousGet(&context, get, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
    EXPECT_EQ(response.value(), "");
  }
}

}  // namespace
}  // namespace shardd::tests
