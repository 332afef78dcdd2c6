#include "daemon/comm/host_transport.h"

#include <string>
#include <vector>

#include "daemon/comm/host_identity.h"
#include "gtest/gtest.h"

namespace shardd::comm {
namespace {

const std::string kHostA = "boot=a ipc=1 pid=2 shm=3";
const std::string kHostB = "boot=b ipc=1 pid=2 shm=3";

TEST(HostTransportTest, ModesParseAndPrint) {
  for (TransportMode mode :
       {TransportMode::kAuto, TransportMode::kTcp, TransportMode::kShm}) {
    absl::StatusOr<TransportMode> parsed =
        ParseTransportMode(TransportModeName(mode));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, mode);
  }
  absl::StatusOr<TransportMode> bad = ParseTransportMode("rdma");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("rdma"), absl::string_view::npos);
}

TEST(HostTransportTest, AutoUsesSharedMemoryOnlyWhenEveryIdentityIsEqual) {
  EXPECT_EQ(*ChooseHostTransport(TransportMode::kAuto, {kHostA, kHostA}),
            HostTransport::kShm);
  EXPECT_EQ(
      *ChooseHostTransport(TransportMode::kAuto, {kHostA, kHostA, kHostB}),
      HostTransport::kTcp);
  EXPECT_EQ(*ChooseHostTransport(TransportMode::kAuto, {kHostA, ""}),
            HostTransport::kTcp)
      << "a rank without an identity never shares memory";
  EXPECT_EQ(*ChooseHostTransport(TransportMode::kAuto, {"", ""}),
            HostTransport::kTcp);
}

TEST(HostTransportTest, TcpNeverAndSingleRankNeverUseSharedMemory) {
  EXPECT_EQ(*ChooseHostTransport(TransportMode::kTcp, {kHostA, kHostA}),
            HostTransport::kTcp);
  EXPECT_EQ(*ChooseHostTransport(TransportMode::kShm, {kHostA}),
            HostTransport::kTcp);
}

TEST(HostTransportTest, ShmRefusesAGroupAcrossHostsNamingTheRank) {
  absl::StatusOr<HostTransport> chosen =
      ChooseHostTransport(TransportMode::kShm, {kHostA, kHostA, kHostB});
  EXPECT_EQ(chosen.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(chosen.status().message().find("rank 2"), absl::string_view::npos)
      << chosen.status();
}

TEST(HostTransportTest, OneFailedMappingSendsEveryRankToTcp) {
  EXPECT_EQ(*ChooseAfterMapping(TransportMode::kAuto, {"ok", "ok", "ok"}),
            HostTransport::kShm);
  EXPECT_EQ(*ChooseAfterMapping(TransportMode::kAuto, {"ok", "ENOSPC", "ok"}),
            HostTransport::kTcp);
  absl::StatusOr<HostTransport> required =
      ChooseAfterMapping(TransportMode::kShm, {"ok", "ENOSPC", "ok"});
  EXPECT_EQ(required.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(required.status().message().find("rank 1"),
            absl::string_view::npos);
  EXPECT_NE(required.status().message().find("ENOSPC"),
            absl::string_view::npos);
}

TEST(HostIdentityTest, ThisProcessHasAStableIdentity) {
  absl::StatusOr<HostIdentity> first = ReadHostIdentity();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->boot_id.empty());
  EXPECT_NE(first->pid_ns, 0u);
  absl::StatusOr<HostIdentity> second = ReadHostIdentity();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(first->ToString(), second->ToString());
  absl::StatusOr<HostIdentity> other_dir = ReadHostIdentity("/proc");
  ASSERT_TRUE(other_dir.ok());
  EXPECT_NE(other_dir->ToString(), first->ToString())
      << "a different file system for shared memory is a different host";
}

}  // namespace
}  // namespace shardd::comm
