#include "daemon/node/checkpoint_catalog.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class CheckpointCatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/catalog-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    bytes_.assign(1 << 16, 7);
  }

  // Writes rank 1's checkpoint of `step` (one 64 KiB section).
  void Write(int64_t step, int keep_last = 0) {
    v1::ShardHeader header;
    header.set_step(step);
    recovery::SectionSource source;
    source.section.set_unit(0);
    source.section.set_kind(v1::SHARD_SECTION_KIND_PARAMETERS);
    source.section.set_byte_length(static_cast<int64_t>(bytes_.size()));
    source.data = bytes_.data();
    auto path =
        recovery::WriteShardCheckpoint(dir_, 1, header, {source}, keep_last);
    ASSERT_TRUE(path.ok()) << path.status();
  }

  void Corrupt(int64_t step) {
    const std::string path = recovery::ShardCheckpointPath(dir_, 1, step);
    const int fd = ::open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const char bad = 0x55;
    // Inside the payload, well past the header.
    ASSERT_EQ(::pwrite(fd, &bad, 1, 40000), 1);
    ::close(fd);
  }

  std::string dir_;
  std::vector<uint8_t> bytes_;
};

TEST_F(CheckpointCatalogTest, WithoutADirectoryKeepsNone) {
  CheckpointCatalog catalog("");
  catalog.Scan(1);
  const v1::CheckpointInventory inv = catalog.Inventory();
  EXPECT_FALSE(inv.keeps());
  EXPECT_THAT(inv.steps(), IsEmpty());
}

TEST_F(CheckpointCatalogTest, ScanVouchesOnlyForIntactFiles) {
  Write(3);
  Write(6);
  Corrupt(6);
  CheckpointCatalog catalog(dir_);
  catalog.Scan(1);
  const v1::CheckpointInventory inv = catalog.Inventory();
  EXPECT_TRUE(inv.keeps());
  EXPECT_THAT(inv.steps(), ElementsAre(3));
  EXPECT_THAT(inv.problem(), HasSubstr("step-6.shardckpt"));
  EXPECT_THAT(inv.problem(), HasSubstr("DATA_LOSS"));
}

TEST_F(CheckpointCatalogTest, WrittenStepsCountAndPrunedOnesGo) {
  CheckpointCatalog catalog(dir_);
  catalog.Scan(1);  // Nothing yet.
  EXPECT_THAT(catalog.Inventory().steps(), IsEmpty());
  for (int64_t step : {3, 6, 9}) {
    Write(step, /*keep_last=*/2);
    catalog.NoteWritten(1, step);
  }
  EXPECT_THAT(catalog.Inventory().steps(), ElementsAre(6, 9));
  catalog.NoteBad(9, "restore: crc32c mismatch");
  const v1::CheckpointInventory inv = catalog.Inventory();
  EXPECT_THAT(inv.steps(), ElementsAre(6));
  EXPECT_EQ(inv.problem(), "restore: crc32c mismatch");
}

TEST_F(CheckpointCatalogTest, FilesOfAnotherProcessAreNotVouchedForUnscanned) {
  Write(3);
  CheckpointCatalog catalog(dir_);
  catalog.NoteWritten(1, 6);  // This process wrote 6 only (not on disk).
  EXPECT_THAT(catalog.Inventory().steps(), IsEmpty());
}

}  // namespace
}  // namespace shardd::node
