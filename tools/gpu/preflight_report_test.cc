#include "tools/gpu/preflight_report.h"

#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace shardd::tools {
namespace {

// What the report wrote, read back from a memory stream.
class PreflightReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = open_memstream(&buffer_, &size_);
    ASSERT_NE(out_, nullptr);
  }
  void TearDown() override {
    std::fclose(out_);
    std::free(buffer_);
  }
  std::string Written() {
    std::fflush(out_);
    return std::string(buffer_, size_);
  }

  char* buffer_ = nullptr;
  size_t size_ = 0;
  std::FILE* out_ = nullptr;
};

TEST_F(PreflightReportTest, PrintsOneLinePerVerdictAsItComes) {
  PreflightReport report(out_);
  report.Ok("driver", "13.0");
  EXPECT_EQ(Written(), "preflight driver: ok 13.0\n");
  report.Fail("cuda-ipc", "cudaIpcOpenMemHandle: invalid device context");
  EXPECT_EQ(Written(),
            "preflight driver: ok 13.0\n"
            "preflight cuda-ipc: FAIL cudaIpcOpenMemHandle: invalid device "
            "context\n");
  EXPECT_EQ(report.passes(), 1);
  EXPECT_EQ(report.failures(), 1);
  EXPECT_FALSE(report.all_passed());
  EXPECT_EQ(report.exit_code(), 1);
}

TEST_F(PreflightReportTest, ANotRunCheckIsAFailure) {
  PreflightReport report(out_);
  report.Ok("driver", "");
  report.NotRun("nccl-init", "no CUDA device");
  EXPECT_EQ(Written(),
            "preflight driver: ok\n"
            "preflight nccl-init: FAIL not run: no CUDA device\n");
  EXPECT_EQ(report.exit_code(), 1);
}

TEST_F(PreflightReportTest, NoChecksIsNotAPass) {
  PreflightReport report(out_);
  EXPECT_FALSE(report.all_passed());
  EXPECT_EQ(report.exit_code(), 1);
  report.Ok("driver", "13.0");
  EXPECT_TRUE(report.all_passed());
  EXPECT_EQ(report.exit_code(), 0);
}

TEST_F(PreflightReportTest, AReasonWithNewlinesStaysOnOneLine) {
  PreflightReport report(out_);
  report.Fail("nccl\ninit", "line one\nline two\r");
  report.Fail("empty", "");
  EXPECT_EQ(Written(),
            "preflight nccl init: FAIL line one line two \n"
            "preflight empty: FAIL (no reason given)\n");
}

}  // namespace
}  // namespace shardd::tools
