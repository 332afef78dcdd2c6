#include "daemon/metrics/promtool.h"

#include "gtest/gtest.h"

namespace shardd::metrics {
namespace {

TEST(PromtoolTest, IsInstalled) {
  // The metrics tests depend on it: a missing promtool fails, never skips.
  absl::StatusOr<std::string> path = FindPromtool();
  EXPECT_TRUE(path.ok()) << path.status();
}

TEST(PromtoolTest, AcceptsAWellFormedExposition) {
  const absl::Status s = PromtoolCheckMetrics(
      "# HELP shardd_things_total Things.\n"
      "# TYPE shardd_things_total counter\n"
      "shardd_things_total{kind=\"a\"} 3\n");
  EXPECT_TRUE(s.ok()) << s;
}

TEST(PromtoolTest, RejectsACounterWithoutTheTotalSuffix) {
  const absl::Status s = PromtoolCheckMetrics(
      "# HELP shardd_things Things.\n"
      "# TYPE shardd_things counter\n"
      "shardd_things 3\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("_total"), absl::string_view::npos) << s;
}

TEST(PromtoolTest, RejectsTextThatIsNotTheExpositionFormat) {
  const absl::Status s = PromtoolCheckMetrics("garbage{\n");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace shardd::metrics
