#include "daemon/metrics/scrape_recorder.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/clock.h"
#include "daemon/core/manual_clock.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/http_get.h"
#include "daemon/metrics/metrics_server.h"
#include "gtest/gtest.h"
#include "prometheus/gauge.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace shardd::metrics {
namespace {

// A collectable of one family that runs `during` while it is collected.
class Probe : public prometheus::Collectable {
 public:
  explicit Probe(std::function<void()> during) : during_(std::move(during)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    if (during_) during_();
    prometheus::MetricFamily f;
    f.name = "shardd_test_probe";
    f.type = prometheus::MetricType::Gauge;
    return {f};
  }

 private:
  std::function<void()> during_;
};

class ScrapeRecorderTest : public ::testing::Test {
 protected:
  ManualClock clock_;
};

TEST_F(ScrapeRecorderTest, RecordsNothingBeforeTheFirstCollection) {
  ScrapeRecorder recorder(std::make_shared<Probe>(nullptr), &clock_);
  EXPECT_EQ(recorder.LastCollectionStart(), MonoTime::InfinitePast());
  EXPECT_EQ(recorder.collections(), 0);
}

TEST_F(ScrapeRecorderTest, PassesTheFamiliesThroughAndRecordsWhenTheyBegan) {
  const MonoTime began = clock_.MonotonicNow();
  // A slow collection: what it read was read after `began`, not after its
  // end, so the start is what counts.
  ScrapeRecorder recorder(
      std::make_shared<Probe>([this] { clock_.Advance(absl::Seconds(5)); }),
      &clock_);
  const std::vector<prometheus::MetricFamily> families = recorder.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "shardd_test_probe");
  EXPECT_EQ(recorder.LastCollectionStart(), began);
  EXPECT_EQ(recorder.collections(), 1);
}

TEST_F(ScrapeRecorderTest, KeepsTheLaterStartWhenCollectionsEndOutOfOrder) {
  ScrapeRecorder* recorder_ptr = nullptr;
  bool nested = false;
  const MonoTime first = clock_.MonotonicNow();
  // The first collection is overtaken by a second, which begins 1 s later
  // and ends first.
  auto recorder =
      std::make_unique<ScrapeRecorder>(std::make_shared<Probe>([&] {
                                         if (nested) return;
                                         nested = true;
                                         clock_.Advance(absl::Seconds(1));
                                         recorder_ptr->Collect();
                                       }),
                                       &clock_);
  recorder_ptr = recorder.get();
  recorder->Collect();
  EXPECT_EQ(recorder->LastCollectionStart(), first + absl::Seconds(1));
  EXPECT_EQ(recorder->collections(), 2);
}

TEST_F(ScrapeRecorderTest, AnHttpScrapeOfTheMetricsServerIsRecorded) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("shardd_test_failed")
      .Help("A test gauge.")
      .Register(*registry)
      .Add({})
      .Set(1);
  auto recorder = std::make_shared<ScrapeRecorder>(registry, Clock::Real());
  auto server = MetricsServer::Start("127.0.0.1", 0, recorder);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(recorder->collections(), 0);
  const MonoTime before = MonoNow();
  absl::StatusOr<std::string> body =
      HttpGet("127.0.0.1", (*server)->port(), "/metrics",
              absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_TRUE(absl::StrContains(*body, "shardd_test_failed 1")) << *body;
  EXPECT_EQ(recorder->collections(), 1);
  EXPECT_GE(recorder->LastCollectionStart(), before);
}

}  // namespace
}  // namespace shardd::metrics
