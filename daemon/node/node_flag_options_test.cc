#include "daemon/node/node_flag_options.h"

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

TEST(ApplyNodeFlagsTest, SetsTheFieldsTheFlagsName) {
  NodeFlagValues flags;
  flags.rank = 2;
  flags.collective_timeout_ms = 1500;
  flags.peer_probe_interval_ms = 0;
  flags.peer_probe_timeout_ms = 700;
  flags.peer_probe_failures = 5;
  flags.commit_log = "/tmp/commits";
  flags.checkpoint_dir = "/tmp/ckpt";
  flags.checkpoint_interval_steps = 10;
  flags.checkpoint_keep_last = 3;
  flags.resume_from = "/tmp/old";
  flags.recovery_timeout_ms = 9000;
  flags.recovery_transport = "stream";
  flags.collective_transport = "tcp";
  flags.verify_collectives = true;
  NodeOptions options;
  options.identity = "node-2";

  ASSERT_TRUE(ApplyNodeFlags(flags, options).ok());

  EXPECT_EQ(options.rank, 2);
  EXPECT_EQ(options.collective_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options.connect_timeout, absl::Milliseconds(1500));
  EXPECT_EQ(options.peer_probing.interval, absl::ZeroDuration());
  EXPECT_EQ(options.peer_probing.timeout, absl::Milliseconds(700));
  EXPECT_EQ(options.peer_probing.failures_to_report, 5);
  EXPECT_EQ(options.commit_log_path, "/tmp/commits");
  EXPECT_EQ(options.checkpoint_dir, "/tmp/ckpt");
  EXPECT_EQ(options.checkpoint_interval_steps, 10);
  EXPECT_EQ(options.checkpoint_keep_last, 3);
  EXPECT_EQ(options.resume_from, "/tmp/old");
  EXPECT_TRUE(options.verify_collectives);
  EXPECT_EQ(options.recovery_timeout, absl::Seconds(9));
  EXPECT_FALSE(options.recovery_over_replica_group);
  EXPECT_EQ(options.collective_transport, comm::TransportMode::kTcp);
  EXPECT_EQ(options.identity, "node-2");  // Not a field of these flags.
}

TEST(ApplyNodeFlagsTest, TheFlagsDefaultsAreAccepted) {
  NodeOptions options;
  ASSERT_TRUE(ApplyNodeFlags(NodeFlagValues(), options).ok());
  EXPECT_EQ(options.rank, -1);
  EXPECT_EQ(options.collective_timeout, absl::Seconds(30));
  EXPECT_EQ(options.peer_probing.interval, absl::Seconds(1));
  EXPECT_EQ(options.recovery_timeout, absl::Seconds(120));
  EXPECT_TRUE(options.recovery_over_replica_group);
  EXPECT_EQ(options.collective_transport, comm::TransportMode::kAuto);
}

TEST(ApplyNodeFlagsTest, RefusesAnUnknownCollectiveTransport) {
  NodeFlagValues flags;
  flags.collective_transport = "rdma";
  NodeOptions options;
  const absl::Status status = ApplyNodeFlags(flags, options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("--collective_transport: 'rdma'"),
            absl::string_view::npos)
      << status;
  flags.collective_transport = "shm";
  ASSERT_TRUE(ApplyNodeFlags(flags, options).ok());
  EXPECT_EQ(options.collective_transport, comm::TransportMode::kShm);
}

// The refusal of one bad value: its message, as shardd prints it.
std::string RefusalOf(const NodeFlagValues& flags) {
  NodeOptions options;
  const absl::Status status = ApplyNodeFlags(flags, options);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  return std::string(status.message());
}

TEST(ApplyNodeFlagsTest, RefusesBadPeerProbing) {
  const std::string expected =
      "--peer_probe_interval_ms must be >= 0, --peer_probe_timeout_ms > 0 "
      "and --peer_probe_failures >= 1";
  NodeFlagValues flags;
  flags.peer_probe_interval_ms = -1;
  EXPECT_EQ(RefusalOf(flags), expected);
  flags = NodeFlagValues();
  flags.peer_probe_timeout_ms = 0;
  EXPECT_EQ(RefusalOf(flags), expected);
  flags = NodeFlagValues();
  flags.peer_probe_failures = 0;
  EXPECT_EQ(RefusalOf(flags), expected);
}

TEST(ApplyNodeFlagsTest, RefusesBadCheckpointSettings) {
  NodeFlagValues flags;
  flags.checkpoint_keep_last = 0;
  EXPECT_EQ(RefusalOf(flags),
            "--checkpoint_interval_steps must be >= 0 and "
            "--checkpoint_keep_last >= 1");
  flags = NodeFlagValues();
  flags.checkpoint_interval_steps = 5;
  EXPECT_EQ(RefusalOf(flags),
            "--checkpoint_interval_steps needs --checkpoint_dir");
  flags.checkpoint_dir = "/tmp/ckpt";
  EXPECT_EQ(RefusalOf(flags), "--checkpoint_dir needs --rank");
  flags = NodeFlagValues();
  flags.async_checkpoints = true;
  EXPECT_EQ(RefusalOf(flags),
            "--async_checkpoints needs --checkpoint_interval_steps");
}

TEST(ApplyNodeFlagsTest, RefusesAnUnknownRecoveryTransport) {
  NodeFlagValues flags;
  flags.recovery_transport = "carrier-pigeon";
  EXPECT_EQ(RefusalOf(flags),
            "--recovery_transport: 'carrier-pigeon' is neither replica_group "
            "nor stream");
}

TEST(ApplyNodeFlagsTest, TheFirstRefusalWins) {
  NodeFlagValues flags;
  flags.peer_probe_failures = 0;
  flags.checkpoint_keep_last = 0;
  flags.recovery_transport = "x";
  EXPECT_EQ(
      RefusalOf(flags),
      "--peer_probe_interval_ms must be >= 0, --peer_probe_timeout_ms > 0 "
      "and --peer_probe_failures >= 1");
}

}  // namespace
}  // namespace shardd::node
