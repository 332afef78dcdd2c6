#include "daemon/node/group_spec.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

TEST(GroupSpecTest, ToGlooOptionsCopiesEveryField) {
  GroupSpec spec;
  spec.rank = 3;
  spec.size = 4;
  spec.epoch = 17;
  spec.group = "replica/1";
  spec.listen_host = "10.0.0.7";
  spec.connect_timeout = absl::Seconds(12);
  spec.default_op_timeout = absl::Milliseconds(2500);
  const comm::GlooCollectiveOptions options = ToGlooOptions(spec);
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.size, 4);
  EXPECT_EQ(options.epoch, 17);
  EXPECT_EQ(options.group, "replica/1");
  EXPECT_EQ(options.hostname, "10.0.0.7");
  EXPECT_EQ(options.connect_timeout, absl::Seconds(12));
  EXPECT_EQ(options.default_op_timeout, absl::Milliseconds(2500));
}

TEST(GroupSpecTest, NcclGroupNameReplacesSlashesOnly) {
  EXPECT_EQ(NcclGroupName("shard/0"), "shard.0");
  EXPECT_EQ(NcclGroupName("replica/12"), "replica.12");
  EXPECT_EQ(NcclGroupName("world"), "world");
  EXPECT_NE(NcclGroupName("shard/1"), NcclGroupName("replica/1"));
}

}  // namespace
}  // namespace shardd::node
