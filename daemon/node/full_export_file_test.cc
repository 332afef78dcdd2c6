#include "daemon/node/full_export_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "daemon/state/safetensors_writer.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

class FullExportFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/full_export_file_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    request_.set_path(dir_ + "/model.safetensors");
    request_.set_layout(v1::EXPORT_LAYOUT_FULL);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A one-tensor export file with `metadata`.
  void Write(std::vector<std::pair<std::string, std::string>> metadata) {
    const std::vector<state::SafetensorsTensor> tensors = {
        {.name = "w", .dtype = "F32", .shape = {2}, .bytes = 8}};
    auto writer =
        state::SafetensorsWriter::Create(request_.path(), tensors, metadata,
                                         /*overwrite=*/true);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const float data[2] = {1.0f, 2.0f};
    ASSERT_TRUE((*writer)->Append(data, sizeof(data)).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }

  std::string dir_;
  v1::ExportStateRequest request_;
};

TEST_F(FullExportFileTest, AFullExportOfTheStepIsRecognised) {
  Write({{"format", "shardd"}, {"step", "7"}, {"layout", "full"}});
  EXPECT_TRUE(FileHoldsFullExport(request_, 7));
  EXPECT_FALSE(FileHoldsFullExport(request_, 8));  // Another step.
  request_.set_include_optimizer_state(true);      // Asked for; not in it.
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));
}

TEST_F(FullExportFileTest, WithOptimizerStateOnlyWhenAskedFor) {
  Write({{"format", "shardd"},
         {"step", "7"},
         {"layout", "full"},
         {"optimizer", "adamw"}});
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));
  request_.set_include_optimizer_state(true);
  EXPECT_TRUE(FileHoldsFullExport(request_, 7));
}

TEST_F(FullExportFileTest, OtherFilesAreNot) {
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));  // Missing.
  Write({{"format", "shardd"}, {"step", "7"}, {"layout", "sharded"}});
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));
  Write({{"format", "other"}, {"step", "7"}, {"layout", "full"}});
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));
  Write({{"format", "shardd"}, {"step", "7"}, {"layout", "full"}});
  // Cut short: not a written file.
  std::filesystem::resize_file(request_.path(),
                               std::filesystem::file_size(request_.path()) - 4);
  EXPECT_FALSE(FileHoldsFullExport(request_, 7));
}

}  // namespace
}  // namespace shardd::node
