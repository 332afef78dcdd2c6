// Process-level tests of the coordinator: a real coordinator binary and W = 4
// member processes on 127.0.0.1 (lease 1.5 s, heartbeat 0.5 s).
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "daemon/testing/subprocess.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/coordinator/port_holder.h"
#include "tests/coordinator/process_cluster.h"
#include "tests/coordinator/test_main.h"

namespace shardd::tests {
namespace {

namespace pb = ::shardd::v1;

constexpr int kWorld = 4;
constexpr int64_t kLeaseMs = 1500;
constexpr int64_t kHeartbeatMs = 500;

absl::Time In(absl::Duration d) { return absl::Now() + d; }

class CoordinatorProcessTest : public ::testing::Test {
 protected:
  CoordinatorProcessTest()
      : cluster_({TestBinaries().coordinator, TestBinaries().member, kWorld, 2,
                  kLeaseMs, kHeartbeatMs}) {}

  // Coordinator plus W members, ready. Returns the ready epoch.
  int64_t StartReadyCluster() {
    absl::Status s = cluster_.StartCoordinator();
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return -1;
    for (int r = 0; r < kWorld; ++r) {
      auto m = cluster_.StartMember(r, absl::StrCat("node-", r), false,
                                    In(absl::Seconds(20)));
      EXPECT_TRUE(m.ok()) << m.status();
      if (!m.ok()) return -1;
    }
    auto state = cluster_.WaitForReady(0, In(absl::Seconds(20)));
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? state->epoch() : -1;
  }

  ProcessCluster cluster_;
};

// grpc.health.v1 over the wire, without generated health stubs: an empty
// HealthCheckRequest (service "" = the server) must come back as
// HealthCheckResponse{status: SERVING}, i.e. the bytes 08 01.
TEST_F(CoordinatorProcessTest, HealthServiceAnswersServing) {
  ASSERT_TRUE(cluster_.StartCoordinator().ok());
  auto channel = grpc::CreateChannel(cluster_.address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(In(absl::Seconds(10))));
  grpc::ByteBuffer request;  // Empty message.
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(15)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// Started with a soft open-file limit of 1024 (inherited from this test,
// as from a systemd unit or a containerd 2 container), the coordinator
// runs with its soft limit raised to the hard one (core::FdLimit).
TEST_F(CoordinatorProcessTest, StartsWithItsOpenFileLimitRaisedToTheHardOne) {
  rlimit mine{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &mine), 0);
  rlimit lowered = mine;
  lowered.rlim_cur = std::min<rlim_t>(1024, mine.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const absl::Status started = cluster_.StartCoordinator();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &mine), 0);  // This test's own back.
  ASSERT_TRUE(started.ok()) << started;
  std::ifstream limits(
      absl::StrCat("/proc/", cluster_.coordinator().pid(), "/limits"));
  std::string line;
  std::string found;
  while (std::getline(limits, line)) {
    if (absl::StartsWith(line, "Max open files")) found = line;
  }
  ASSERT_FALSE(found.empty()) << "no open-file line in /proc/PID/limits";
  const std::string hard = mine.rlim_max == RLIM_INFINITY
                               ? std::string("unlimited")
                               : absl::StrCat(mine.rlim_max);
  // "Max open files            20000                20000                files"
  std::vector<std::string> fields =
      absl::StrSplit(found.substr(std::string("Max open files").size()), ' ',
                     absl::SkipEmpty());
  ASSERT_GE(fields.size(), 2u) << found;
  EXPECT_EQ(fields[0], hard) << found;
  EXPECT_EQ(fields[1], hard) << found;
}

TEST_F(CoordinatorProcessTest, FourMembersJoinAndTheJobBecomesReady) {
  const int64_t epoch = StartReadyCluster();
  ASSERT_GT(epoch, 0);
  // The first joins share the forming epoch 1, the last join starts 2;
  // readiness does not start epochs.
  EXPECT_EQ(epoch, 2);
  auto state = cluster_.State();
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->slots_size(), kWorld);
  for (const pb::SlotState& slot : state->slots()) {
    EXPECT_EQ(slot.state(), pb::MEMBER_STATE_READY);
    EXPECT_EQ(slot.member().identity(), absl::StrCat("node-", slot.rank()));
    EXPECT_TRUE(absl::StartsWith(slot.member().peer_address(), "127.0.0.1:"));
  }
  // Every member saw the full epoch and reported READY for it.
  for (auto& m : cluster_.members()) {
    auto line = m->WaitForLine(absl::StrCat("ready epoch=", epoch),
                               In(absl::Seconds(5)));
    EXPECT_TRUE(line.ok()) << line.status();
  }
}

TEST_F(CoordinatorProcessTest,
       KilledMemberIsDeclaredDeadWithinTheLeaseAndReplacedInItsSlot) {
  const int64_t epoch = StartReadyCluster();
  ASSERT_GT(epoch, 0);
  const int victim = 2;
  const absl::Time killed = absl::Now();
  cluster_.members()[victim]->Signal(SIGKILL);
  auto failed = cluster_.WaitForState(
      [&](const pb::ClusterState& s) {
        return s.slots(victim).state() == pb::MEMBER_STATE_FAILED;
      },
      In(absl::Seconds(10)), "showing rank 2 FAILED");
  ASSERT_TRUE(failed.ok()) << failed.status();
  const absl::Duration detection = absl::Now() - killed;
  std::printf("detection time after SIGKILL: %s (lease %lld ms)\n",
              absl::FormatDuration(detection).c_str(),
              static_cast<long long>(kLeaseMs));
  RecordProperty("detection_ms",
                 static_cast<int>(absl::ToInt64Milliseconds(detection)));
  // The lease runs out at most one lease after the last heartbeat, which
  // was at most one heartbeat interval before the kill... and at least one
  // lease minus one interval after it.
  EXPECT_LE(detection, absl::Milliseconds(kLeaseMs + kHeartbeatMs + 500));
  EXPECT_GE(detection, absl::Milliseconds(kLeaseMs - kHeartbeatMs - 100));
  EXPECT_GT(failed->epoch(), epoch);
  EXPECT_FALSE(failed->ready());
  bool reason_found = false;
  for (const pb::Decision& d : failed->decisions()) {
    if (d.kind() == pb::DECISION_KIND_MEMBER_REMOVED && d.ranks_size() == 1 &&
        d.ranks(0) == victim) {
      reason_found = true;
      EXPECT_TRUE(absl::StrContains(d.reason(), "lease")) << d.reason();
    }
  }
  EXPECT_TRUE(reason_found);

  // A replacement with a new identity asks for any slot and gets the dead
  // one; the survivors were never restarted.
  auto replacement = cluster_.StartMember(-1, "node-2-replacement", false,
                                          In(absl::Seconds(20)));
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  const auto& joined = cluster_.members()[*replacement]->lines();
  ASSERT_FALSE(joined.empty());
  EXPECT_TRUE(absl::StartsWith(joined.back(), "joined rank=2 "))
      << joined.back();
  auto ready = cluster_.WaitForReady(failed->epoch(), In(absl::Seconds(20)));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->slots(victim).member().identity(), "node-2-replacement");
  bool recovery_planned = false;
  for (const pb::Decision& d : ready->decisions()) {
    if (d.kind() == pb::DECISION_KIND_RECOVERY_PLANNED && d.ranks_size() == 1 &&
        d.ranks(0) == victim) {
      recovery_planned = true;
    }
  }
  EXPECT_TRUE(recovery_planned) << "the replacement copies its shard";
  for (int r = 0; r < kWorld; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(cluster_.members()[r]->Running()) << r;
  }
}

TEST_F(CoordinatorProcessTest,
       RestartedCoordinatorIsRejoinedByTheRunningMembersAndBecomesReady) {
  const int64_t epoch = StartReadyCluster();
  ASSERT_GT(epoch, 0);
  auto before = cluster_.State();
  ASSERT_TRUE(before.ok());
  const int port = cluster_.port();
  ASSERT_TRUE(cluster_.KillCoordinator().ok());
  ASSERT_TRUE(cluster_.StartCoordinator(port).ok());
  ASSERT_EQ(cluster_.port(), port);

  for (auto& m : cluster_.members()) {
    auto line = m->WaitForLine("rejoined rank=", In(absl::Seconds(20)));
    ASSERT_TRUE(line.ok()) << line.status();
  }
  auto ready = cluster_.WaitForReady(epoch, In(absl::Seconds(20)));
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_GT(ready->epoch(), epoch);
  EXPECT_NE(ready->coordinator_started_unix_ms(),
            before->coordinator_started_unix_ms());
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(ready->slots(r).member().identity(), absl::StrCat("node-", r));
    // Same processes: same incarnation as before the restart.
    EXPECT_EQ(ready->slots(r).member().incarnation(),
              before->slots(r).member().incarnation());
    EXPECT_TRUE(cluster_.members()[r]->Running()) << r;
  }
}

// gRPC lets a second server listen on a port in use (SO_REUSEPORT) and the
// kernel then splits new connections between the two: a coordinator
// restarted on its port while anything else still listens there would get
// a random share of its members' calls. It must refuse to start instead,
// even when the holder would share.
TEST(CoordinatorPortTest, RefusesAPortAnotherServerListensOn) {
  auto holder = PortHolder::Start();
  ASSERT_TRUE(holder.ok()) << holder.status();
  const int port = (*holder)->port();
  auto c = Subprocess::Spawn(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", TestBinaries().coordinator,
                    "' --listen=127.0.0.1:", port,
                    " --world_size=2 --sharding_factor=1 2>&1")},
      "coordinator");
  ASSERT_TRUE(c.ok()) << c.status();
  auto line = (*c)->WaitForLine("cannot listen on", In(absl::Seconds(30)));
  ASSERT_TRUE(line.ok()) << line.status();
  EXPECT_TRUE(absl::StrContains(*line, absl::StrCat("127.0.0.1:", port)))
      << *line;
  auto code = (*c)->Wait(In(absl::Seconds(10)));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0);
}

TEST_F(CoordinatorProcessTest, SigtermStopsMembersAndCoordinatorCleanly) {
  ASSERT_GT(StartReadyCluster(), 0);
  cluster_.members()[0]->Signal(SIGTERM);
  auto code = cluster_.members()[0]->Wait(In(absl::Seconds(10)));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
  auto left = cluster_.WaitForState(
      [](const pb::ClusterState& s) {
        return s.slots(0).state() == pb::MEMBER_STATE_LEFT;
      },
      In(absl::Seconds(5)), "showing rank 0 LEFT");
  EXPECT_TRUE(left.ok()) << left.status();
  cluster_.coordinator().Signal(SIGTERM);
  code = cluster_.coordinator().Wait(In(absl::Seconds(10)));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0);
}

}  // namespace
}  // namespace shardd::tests
