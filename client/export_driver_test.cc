#include "client/export_driver.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::client {
namespace {

TEST(ExportDriverTest, FormatsABarPercentBytesAndRate) {
  const std::string line = FormatExportProgress(
      int64_t{1} << 30, int64_t{2} << 30, absl::Seconds(2), 20);
  EXPECT_EQ(line,
            "[##########          ]  50%  1.00 GiB / 2.00 GiB  512.00 MiB/s");
  // Plain (not a terminal): no bar.
  EXPECT_EQ(FormatExportProgress(0, 1000, absl::ZeroDuration(), 0),
            "  0%  0 B / 1000 B");
  // Done past total (header rounding) never overflows the bar.
  EXPECT_TRUE(absl::StartsWith(
      FormatExportProgress(1100, 1000, absl::Seconds(1), 4), "[####] 100%"));
}

TEST(ExportDriverTest, DefaultDeadlineGrowsWithTheModel) {
  EXPECT_EQ(DefaultExportDeadline(0), absl::Minutes(2));
  // 100 GB at 20 MB/s: 5000 s more.
  EXPECT_EQ(DefaultExportDeadline(100'000'000'000),
            absl::Minutes(2) + absl::Seconds(5000));
}

TEST(ExportDriverTest, ExportBytesCountEveryUnitAndStateKind) {
  v1::GetStatusResponse status;
  status.mutable_memory()->add_units()->set_numel(10);
  status.mutable_memory()->add_units()->set_numel(6);
  EXPECT_EQ(ExportBytesOf(status, 0), 64);
  EXPECT_EQ(ExportBytesOf(status, 2), 192);
}

}  // namespace
}  // namespace shardd::client
