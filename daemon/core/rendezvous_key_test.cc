#include "daemon/core/rendezvous_key.h"

#include <string>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

TEST(RendezvousKeyTest, BuildersSpellTheOwnerAfterTheKeyspace) {
  EXPECT_EQ(ModelKey(3), "model/3");
  EXPECT_EQ(GlooKeyPrefix(5, 7, "shard/1"), "gloo/5/epoch/7/shard/1/");
  EXPECT_EQ(NcclIdKey(2, 9, "replica.0"), "nccl/2/epoch/9/replica.0/id");
  EXPECT_EQ(ExportKey(4, "join"), "export/4/join");
  EXPECT_EQ(ShmKey(3, 2, "shard/0", "host"), "shm/3/epoch/2/shard/0/host");
}

TEST(RendezvousKeyTest, EveryKeyTheWritersBuildParsesToItsOwner) {
  auto model = ParseRendezvousKey(ModelKey(12));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->keyspace, "model");
  EXPECT_EQ(model->owner, 12);
  EXPECT_EQ(model->rest, "");
  EXPECT_TRUE(model->replaceable);

  for (const char* gloo_key : {"0", "3", "rank_3"}) {
    const std::string key = GlooKeyPrefix(6, 4, "shard/1") + gloo_key;
    auto gloo = ParseRendezvousKey(key);
    ASSERT_TRUE(gloo.ok()) << key << ": " << gloo.status();
    EXPECT_EQ(gloo->keyspace, "gloo");
    EXPECT_EQ(gloo->owner, 6);
    EXPECT_EQ(gloo->rest, std::string("epoch/4/shard/1/") + gloo_key);
    EXPECT_FALSE(gloo->replaceable) << "peers connect to what they read";
  }

  auto nccl = ParseRendezvousKey(NcclIdKey(0, 11, "shard.0"));
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ(nccl->owner, 0);
  EXPECT_FALSE(nccl->replaceable);

  auto shm = ParseRendezvousKey(ShmKey(5, 3, "replica/1", "segment"));
  ASSERT_TRUE(shm.ok()) << shm.status();
  EXPECT_EQ(shm->keyspace, "shm");
  EXPECT_EQ(shm->owner, 5);
  EXPECT_EQ(shm->rest, "epoch/3/replica/1/segment");
  EXPECT_FALSE(shm->replaceable) << "peers map the segment they read";

  auto join = ParseRendezvousKey(ExportKey(7, "join"));
  ASSERT_TRUE(join.ok()) << join.status();
  EXPECT_EQ(join->keyspace, "export");
  EXPECT_EQ(join->owner, 7);
  EXPECT_EQ(join->rest, "join");
  EXPECT_TRUE(join->replaceable) << "one key per role for every export";
}

TEST(RendezvousKeyTest, KeysOutsideTheGrammarAreInvalidArgumentNamingWhy) {
  const struct {
    std::string key;
    const char* why;
  } cases[] = {
      {"", "empty"},
      {"attacker/probe", "unknown keyspace 'attacker'"},
      {"shard/0/0", "unknown keyspace 'shard'"},
      {"epoch/3/shard/0/rank_0", "unknown keyspace 'epoch'"},
      {"model", "no owner rank"},
      {"model/", "empty segment"},
      {"/model/0", "empty segment"},
      {"gloo/1//x", "empty segment"},
      {"model/-1", "is not a rank"},
      {"model/01", "is not a rank"},
      {"model/1x", "is not a rank"},
      {"model/1234567890", "is not a rank"},
      {"model/0/extra", "takes nothing after the rank"},
      {"gloo/0", "needs a name after the rank"},
      {"nccl/3", "needs a name after the rank"},
      {"export/3", "needs a name after the rank"},
      {"model/0 ", "outside [A-Za-z0-9_.-/]"},
      {std::string("model/\0", 7), "outside [A-Za-z0-9_.-/]"},
  };
  for (const auto& c : cases) {
    auto parsed = ParseRendezvousKey(c.key);
    ASSERT_FALSE(parsed.ok()) << "'" << c.key << "' was accepted";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.why), std::string::npos)
        << c.key << ": " << parsed.status();
    EXPECT_NE(parsed.status().message().find("<keyspace>/<owner rank>"),
              std::string::npos)
        << "the message states the grammar: " << parsed.status();
  }
}

TEST(RendezvousKeyTest, OverlongKeysAreRefusedWithoutEchoingThem) {
  const std::string key = "gloo/1/" + std::string(kMaxRendezvousKeyBytes, 'x');
  auto parsed = ParseRendezvousKey(key);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(parsed.status().message().size(), 200u) << parsed.status();
  EXPECT_TRUE(ParseRendezvousKey("gloo/1/" +
                                 std::string(kMaxRendezvousKeyBytes - 7, 'x'))
                  .ok());
}

TEST(RendezvousKeyTest, DotsAreCharactersOfANameNotPathSteps) {
  // Keys are names, not paths: "gloo/0/../1/x" is rank 0's, never rank 1's.
  auto owner = RendezvousKeyOwner("gloo/0/../1/x");
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(*owner, 0);
}

TEST(RendezvousKeyTest, TheLargestCanonicalRankParses) {
  auto owner = RendezvousKeyOwner("model/999999999");
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(*owner, 999999999);
  EXPECT_EQ(*RendezvousKeyOwner("model/0"), 0);
}

}  // namespace
}  // namespace shardd::core
