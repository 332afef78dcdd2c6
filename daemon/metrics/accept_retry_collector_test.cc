#include "daemon/metrics/accept_retry_collector.h"

#include <string>

#include "absl/status/status.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/promtool.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace shardd::metrics {
namespace {

TEST(AcceptRetryCollectorTest, ExportsShortagesOpenAndDeferredAccepts) {
  rpc::AcceptRetry::Counts counts;
  counts.episodes = 5;
  counts.recovered = 3;
  counts.abandoned = 1;
  counts.deferred = 42;
  counts.kicks = 7;
  rpc::AcceptPacer::Counts paced;
  paced.paced = 9;
  paced.episodes = 2;
  AcceptRetryCollector collector([&] { return counts; }, [&] { return paced; });
  const std::string text =
      prometheus::TextSerializer().Serialize(collector.Collect());
  auto samples = ParseExposition(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->at("shardd_accept_shortages_total"), 5) << text;
  EXPECT_EQ(samples->at("shardd_accept_shortages_open"), 1) << text;
  EXPECT_EQ(samples->at("shardd_accept_deferred_total"), 42) << text;
  EXPECT_EQ(samples->at("shardd_accept_paced_total"), 9) << text;
  EXPECT_NE(text.find("# TYPE shardd_accept_paced_total counter"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE shardd_accept_shortages_total counter"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE shardd_accept_shortages_open gauge"),
            std::string::npos);
  const absl::Status check = PromtoolCheckMetrics(text);
  EXPECT_TRUE(check.ok()) << check << "\n" << text;
}

TEST(AcceptRetryCollectorTest, ReadsTheCountsAtEachScrape) {
  rpc::AcceptRetry::Counts counts;
  rpc::AcceptPacer::Counts paced;
  AcceptRetryCollector collector([&] { return counts; }, [&] { return paced; });
  auto before = ParseExposition(
      prometheus::TextSerializer().Serialize(collector.Collect()));
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->at("shardd_accept_shortages_total"), 0);
  EXPECT_EQ(before->at("shardd_accept_shortages_open"), 0);
  EXPECT_EQ(before->at("shardd_accept_paced_total"), 0);
  counts.episodes = 1;
  counts.deferred = 3;
  paced.paced = 4;
  auto after = ParseExposition(
      prometheus::TextSerializer().Serialize(collector.Collect()));
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->at("shardd_accept_shortages_total"), 1);
  EXPECT_EQ(after->at("shardd_accept_shortages_open"), 1);
  EXPECT_EQ(after->at("shardd_accept_deferred_total"), 3);
  EXPECT_EQ(after->at("shardd_accept_paced_total"), 4);
}

}  // namespace
}  // namespace shardd::metrics
