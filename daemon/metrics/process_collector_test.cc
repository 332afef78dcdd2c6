#include "daemon/metrics/process_collector.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/metrics/exposition.h"
#include "daemon/metrics/promtool.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace shardd::metrics {
namespace {

// A /proc/self/stat line whose comm holds spaces and a ')': utime 250,
// stime 50, starttime 1000, vsize 123456789, rss 300.
constexpr char kStat[] =
    "4242 (shardd (x) y) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 "
    "0 9 0 1000 123456789 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 "
    "17 1 0 0 0 0 0\n";

constexpr char kProcStat[] =
    "cpu  1 2 3 4 5 6 7 0 0 0\n"
    "intr 12345\n"
    "btime 1700000000\n"
    "processes 99\n";

constexpr char kLimits[] =
    "Limit                     Soft Limit           Hard Limit           "
    "Units     \n"
    "Max cpu time              unlimited            unlimited            "
    "seconds   \n"
    "Max open files            1024                 524288               "
    "files     \n";

class ProcessCollectorTest : public ::testing::Test {
 protected:
  ProcessCollectorTest() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/proc-XXXXXX");
    const char* made = mkdtemp(pattern.data());  // A fresh folder per test.
    EXPECT_NE(made, nullptr) << pattern;
    root_ = made != nullptr ? made : "/nonexistent";
    mkdir((root_ + "/self").c_str(), 0755);
    mkdir((root_ + "/self/fd").c_str(), 0755);
  }

  void Write(const std::string& relative, const std::string& text) {
    std::ofstream(root_ + relative) << text;
  }

  ProcessCollector Fake() {
    ProcessCollectorOptions options;
    options.proc_root = root_;
    options.clock_ticks_per_second = 100;
    options.page_size = 4096;
    return ProcessCollector(options);
  }

  std::string root_;
};

TEST_F(ProcessCollectorTest, ReadsEveryMetricFromProcFiles) {
  Write("/self/stat", kStat);
  Write("/stat", kProcStat);
  Write("/self/limits", kLimits);
  for (const char* fd : {"0", "1", "2", "7"})
    Write(absl::StrCat("/self/fd/", fd), "");
  const ProcessSample s = Fake().Sample();
  ASSERT_TRUE(s.cpu_seconds.has_value());
  EXPECT_DOUBLE_EQ(*s.cpu_seconds, 3.0);  // (250 + 50) / 100
  EXPECT_EQ(s.virtual_bytes, 123456789);
  EXPECT_EQ(s.resident_bytes, 300.0 * 4096);
  EXPECT_EQ(s.start_time_seconds, 1700000000.0 + 10);  // 1000 / 100
  EXPECT_EQ(s.open_fds, 4);
  EXPECT_EQ(s.max_fds, 1024);
}

TEST_F(ProcessCollectorTest, LeavesOutWhatCannotBeRead) {
  // Only the limits exist: no stat, no btime, no fd folder entries.
  Write("/self/limits", kLimits);
  rmdir((root_ + "/self/fd").c_str());
  const ProcessCollector collector = Fake();
  const ProcessSample s = collector.Sample();
  EXPECT_FALSE(s.cpu_seconds.has_value());
  EXPECT_FALSE(s.start_time_seconds.has_value());
  EXPECT_FALSE(s.open_fds.has_value());
  EXPECT_EQ(s.max_fds, 1024);
  const auto families = collector.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "process_max_fds");
}

TEST(ProcessParsersTest, RejectMalformedText) {
  ProcessSample s;
  EXPECT_EQ(ParseProcSelfStat("4242 shardd S 1", 100, 4096, &s).status().code(),
            absl::StatusCode::kInvalidArgument);
  const auto short_stat = ParseProcSelfStat("1 (a) S 1 2 3", 100, 4096, &s);
  EXPECT_EQ(short_stat.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_stat.status().message().find("utime"),
            absl::string_view::npos)
      << short_stat.status();
  EXPECT_EQ(ParseBootTime("cpu 1 2\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseBootTime("btime soon\n").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMaxOpenFiles("Max processes 10 10\n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProcessParsersTest, UnlimitedOpenFilesIsInfinite) {
  auto max = ParseMaxOpenFiles(
      "Max open files            unlimited            unlimited            "
      "files\n");
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_TRUE(std::isinf(*max));
}

TEST(ProcessCollectorRealTest, ReadsThisProcess) {
  const ProcessCollector collector;
  const ProcessSample s = collector.Sample();
  ASSERT_TRUE(s.resident_bytes.has_value());
  EXPECT_GT(*s.resident_bytes, 0);
  ASSERT_TRUE(s.virtual_bytes.has_value());
  EXPECT_GE(*s.virtual_bytes, *s.resident_bytes);
  ASSERT_TRUE(s.open_fds.has_value());
  EXPECT_GE(*s.open_fds, 3);  // stdin, stdout, stderr at least
  ASSERT_TRUE(s.max_fds.has_value());
  EXPECT_GE(*s.max_fds, *s.open_fds);
  ASSERT_TRUE(s.cpu_seconds.has_value());
  EXPECT_GE(*s.cpu_seconds, 0);
  ASSERT_TRUE(s.start_time_seconds.has_value());
  // Started before now and after the machine booted in this century.
  EXPECT_LE(*s.start_time_seconds, absl::ToUnixSeconds(absl::Now()) + 1);
  EXPECT_GT(*s.start_time_seconds, 946684800);

  const std::string text =
      prometheus::TextSerializer().Serialize(collector.Collect());
  auto samples = ParseExposition(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  for (const char* name :
       {"process_cpu_seconds_total", "process_resident_memory_bytes",
        "process_virtual_memory_bytes", "process_start_time_seconds",
        "process_open_fds", "process_max_fds"}) {
    EXPECT_EQ(samples->count(name), 1u) << name << "\n" << text;
  }
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"),
            std::string::npos);
  EXPECT_NE(text.find("# HELP process_resident_memory_bytes Resident memory "
                      "size in bytes."),
            std::string::npos);
  const absl::Status check = PromtoolCheckMetrics(text);
  EXPECT_TRUE(check.ok()) << check << "\n" << text;
}

}  // namespace
}  // namespace shardd::metrics
