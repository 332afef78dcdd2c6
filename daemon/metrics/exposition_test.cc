#include "daemon/metrics/exposition.h"

#include <cmath>

#include "gtest/gtest.h"

namespace shardd::metrics {
namespace {

TEST(ExpositionTest, KeysSeriesByNameAndSortedLabels) {
  auto s = ParseExposition(
      "# HELP a_total A.\n"
      "# TYPE a_total counter\n"
      "a_total{op=\"x\",group=\"g\"} 3\n"
      "b 1.5e3\n"
      "c{le=\"+Inf\"} +Inf\n"
      "d{v=\"q\\\"uote\"} 2 1700000000000\n");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->at("a_total{group=\"g\",op=\"x\"}"), 3);
  EXPECT_EQ(s->at("b"), 1500);
  EXPECT_TRUE(std::isinf(s->at("c{le=\"+Inf\"}")));
  EXPECT_EQ(s->at("d{v=\"q\"uote\"}"), 2);
  EXPECT_EQ(s->size(), 4u);
}

TEST(ExpositionTest, RejectsAValueThatIsNotANumber) {
  auto s = ParseExposition("a 1\nb x\n");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("'b x'"), absl::string_view::npos)
      << s.status();
}

TEST(ExpositionTest, RejectsADuplicateSeries) {
  auto s = ParseExposition("a{x=\"1\",y=\"2\"} 1\na{y=\"2\",x=\"1\"} 1\n");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExpositionTest, RejectsAnUnterminatedLabelSet) {
  auto s = ParseExposition("a{x=\"1\" 1\n");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::metrics
