#include "bench/step_profile.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::bench {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ParseKeyValuesTest, ReadsTheTrainersProfileLine) {
  std::optional<KeyValues> kv = ParseKeyValues(
      "profile step=7 total_ms=812.5 compute_ms=400  gather_ms=1e2 "
      "other_ms=-0.25",
      "profile");
  ASSERT_TRUE(kv.has_value());
  EXPECT_THAT(*kv,
              ElementsAre(Pair("compute_ms", 400.0), Pair("gather_ms", 100.0),
                          Pair("other_ms", -0.25), Pair("step", 7.0),
                          Pair("total_ms", 812.5)));
}

TEST(ParseKeyValuesTest, RejectsOtherLines) {
  // example_trainer's step line, another prefix, a prefix that is only the
  // start of a word, a token without '=' and a value that is no number.
  EXPECT_FALSE(ParseKeyValues("step 3 loss 1.5 grad_norm 2", "profile"));
  EXPECT_FALSE(ParseKeyValues("torch_row name=ddp step_ms=3", "profile"));
  EXPECT_FALSE(ParseKeyValues("profiled step=1", "profile"));
  EXPECT_FALSE(ParseKeyValues("profile step=1 total", "profile"));
  EXPECT_FALSE(ParseKeyValues("profile step=1 total_ms=fast", "profile"));
  EXPECT_FALSE(ParseKeyValues("profile", "profile"));
  // torch_step's machine lines: the name is not a number, so it is read
  // by prefix, as bench/step does ("torch_row name=ddp").
  EXPECT_FALSE(ParseKeyValues("torch_row name=ddp step_ms=3", "torch_row"));
  std::optional<KeyValues> ddp =
      ParseKeyValues("torch_row F=4 step_ms=372.5", "torch_row");
  ASSERT_TRUE(ddp.has_value());
  EXPECT_EQ(ddp->at("step_ms"), 372.5);
}

KeyValues Record(double step, double total, double compute) {
  return {{"step", step},
          {"total_ms", total},
          {"compute_ms", compute},
          {"other_ms", total - compute}};
}

TEST(MeanOverRanksTest, MeansPerRankThenOverRanksAfterTheGivenStep) {
  // Step 3 is the first measured step and is left out (it follows the
  // trainer's start). Rank 0: steps 4, 5 -> total 100, 300 (mean 200);
  // rank 1: one step, total 400. Mean over ranks: 300, not the mean over
  // all records (266.7).
  std::vector<std::vector<KeyValues>> ranks = {
      {Record(3, 9000, 9000), Record(4, 100, 60), Record(5, 300, 100)},
      {Record(3, 9000, 9000), Record(4, 400, 200)}};
  absl::StatusOr<KeyValues> mean = MeanOverRanks(ranks, 3);
  ASSERT_TRUE(mean.ok()) << mean.status();
  EXPECT_THAT(*mean, ElementsAre(Pair("compute_ms", DoubleNear(140, 1e-9)),
                                 Pair("other_ms", DoubleNear(160, 1e-9)),
                                 Pair("total_ms", DoubleNear(300, 1e-9))));
}

TEST(MeanOverRanksTest, FailsWithoutMeasuredStepsOrWithMixedKeys) {
  EXPECT_EQ(MeanOverRanks({}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MeanOverRanks({{Record(1, 1, 1)}, {Record(2, 1, 1)}}, 1).status().code(),
      absl::StatusCode::kInvalidArgument);  // Rank 0 has none after 1.
  KeyValues odd = Record(2, 1, 1);
  odd.erase("other_ms");
  odd["gather_ms"] = 0;
  EXPECT_EQ(MeanOverRanks({{Record(2, 1, 1), odd}}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MeanOverRanks({{{{"total_ms", 1.0}}}}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);  // No step.
}

TEST(SlowestRankMedianTest, TakesTheLargestOfTheRanksMedians) {
  // Rank 0: 10, 30, 20 -> 20; rank 1: 25, 5, 100, 27 -> 26 (even count:
  // the middle two's mean). Per step, the slowest rank would be 25, 30,
  // 100: the noise of every step.
  std::vector<std::vector<KeyValues>> ranks = {
      {Record(1, 999, 0), Record(2, 10, 0), Record(3, 30, 0), Record(4, 20, 0)},
      {Record(2, 25, 0), Record(3, 5, 0), Record(4, 100, 0), Record(5, 27, 0)}};
  absl::StatusOr<double> slowest = SlowestRankMedian(ranks, 1, "total_ms");
  ASSERT_TRUE(slowest.ok()) << slowest.status();
  EXPECT_DOUBLE_EQ(*slowest, 26.0);
  EXPECT_FALSE(SlowestRankMedian(ranks, 1, "gather_ms").ok());
  EXPECT_FALSE(SlowestRankMedian(ranks, 5, "total_ms").ok());
}

TEST(ExposedCommFiguresTest, StepMinusEachRowsFloorAndRatiosToDdp) {
  // DDP against torch's floor (300), the shardd rows against the example
  // trainer's (700).
  std::map<std::string, double> figures =
      ExposedCommFigures({{"ddp", {400, 300}},
                          {"no_shard", {900, 700}},
                          {"full_shard", {850, 700}}});
  EXPECT_THAT(figures,
              ElementsAre(Pair("exposed_comm_ms_ddp", 100),
                          Pair("exposed_comm_ms_full_shard", 150),
                          Pair("exposed_comm_ms_no_shard", 200),
                          Pair("exposed_comm_ratio_full_shard_to_ddp", 1.5),
                          Pair("exposed_comm_ratio_no_shard_to_ddp", 2.0)));
}

TEST(ExposedCommFiguresTest, NoRatioMeaningWhenDdpExposesNothing) {
  std::map<std::string, double> figures =
      ExposedCommFigures({{"ddp", {290, 300}}, {"no_shard", {500, 300}}});
  EXPECT_EQ(figures.at("exposed_comm_ms_ddp"), -10);
  EXPECT_TRUE(std::isnan(figures.at("exposed_comm_ratio_no_shard_to_ddp")));
  // Without DDP: the exposed times, no ratio.
  EXPECT_THAT(ExposedCommFigures({{"no_shard", {3, 1}}}),
              ElementsAre(Pair("exposed_comm_ms_no_shard", 2)));
}

}  // namespace
}  // namespace shardd::bench
