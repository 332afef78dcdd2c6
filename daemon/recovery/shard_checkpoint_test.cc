#include "daemon/recovery/shard_checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/recovery/failpoint.h"
#include "daemon/recovery/testing/guarded_shard_memory.h"
#include "gtest/gtest.h"

namespace shardd::recovery {
namespace {

class ShardCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(
        tmp != nullptr ? tmp : "/tmp", "/ckpt-",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);  // Left over from an earlier run.
    std::mt19937 rng(42);
    for (int64_t size : {4000, 0, 1234, 8}) {
      std::vector<uint8_t> b(size);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      bytes_.push_back(std::move(b));
      received_.emplace_back(size, 0);
    }
  }

  std::vector<SectionSource> Sources() const {
    const v1::ShardSectionKind kinds[] = {
        v1::SHARD_SECTION_KIND_PARAMETERS, v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG,
        v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG_SQ,
        v1::SHARD_SECTION_KIND_PARAMETERS};
    std::vector<SectionSource> sources;
    for (size_t i = 0; i < bytes_.size(); ++i) {
      SectionSource s;
      s.section.set_unit(i < 3 ? 0 : 1);
      s.section.set_kind(kinds[i]);
      s.section.set_dtype(v1::DTYPE_FP32);
      s.section.set_numel(static_cast<int64_t>(bytes_[i].size()) / 4);
      s.section.set_byte_length(static_cast<int64_t>(bytes_[i].size()));
      s.data = bytes_[i].data();
      sources.push_back(s);
    }
    return sources;
  }

  static v1::ShardHeader Header(int64_t step) {
    v1::ShardHeader header;
    header.set_step(step);
    header.set_optimizer_step(step);
    header.set_shard_index(1);
    header.set_source_rank(3);
    header.set_model_fingerprint(0x1234567890ull);
    header.set_last_learning_rate(0.5);
    return header;
  }

  std::string Write(int64_t step, int keep_last = 0, int rank = 3) {
    auto path =
        WriteShardCheckpoint(dir_, rank, Header(step), Sources(), keep_last);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.ok() ? *path : "";
  }

  ShardStreamAssembler::Destination Dest() {
    return [this](const v1::ShardHeader&, int s) -> absl::StatusOr<uint8_t*> {
      return received_[s].data();
    };
  }

  static void FlipByte(const std::string& path, int64_t offset) {
    const int fd = ::open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, offset), 1);
    b ^= 0x40;
    ASSERT_EQ(::pwrite(fd, &b, 1, offset), 1);
    ::close(fd);
  }

  static int64_t FileSize(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
  }

  static bool Exists(const std::string& path) {
    return ::access(path.c_str(), F_OK) == 0;
  }

  // Offset of the payload in a checkpoint file.
  static int64_t PayloadOffset(const std::string& path) {
    auto header = ReadShardCheckpointHeader(path);
    EXPECT_TRUE(header.ok()) << header.status();
    return FileSize(path) - header->total_bytes() -
           4 * header->sections_size() - 4 - 4 - 8;
  }

  std::string dir_;
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<std::vector<uint8_t>> received_;
};

TEST_F(ShardCheckpointTest, RoundTrips) {
  const std::string path = Write(7);
  EXPECT_EQ(path, dir_ + "/rank-3/step-7.shardckpt");
  auto header = ReadShardCheckpointHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->step(), 7);
  EXPECT_EQ(header->shard_index(), 1);
  EXPECT_EQ(header->model_fingerprint(), 0x1234567890ull);
  EXPECT_EQ(header->total_bytes(), 4000 + 1234 + 8);
  EXPECT_EQ(header->checksum(), v1::CHECKSUM_ALGORITHM_CRC32C);
  ASSERT_EQ(header->sections_size(), 4);
  EXPECT_EQ(header->sections(3).stream_offset(), 4000 + 1234);

  v1::ShardHeader read_header;
  uint32_t crc = 0;
  ASSERT_TRUE(ReadShardCheckpoint(path, Dest(), &read_header, &crc).ok());
  EXPECT_EQ(received_, bytes_);
  EXPECT_EQ(read_header.SerializeAsString(), header->SerializeAsString());
  uint32_t expected_crc = 0;
  for (const auto& b : bytes_) {
    expected_crc = core::Crc32cExtend(expected_crc, b.data(), b.size());
  }
  EXPECT_EQ(crc, expected_crc);
  EXPECT_EQ(FileSize(path), 16 + static_cast<int64_t>(header->ByteSizeLong()) +
                                header->total_bytes() + 4 * 4 + 4 + 4 + 8);
}

TEST_F(ShardCheckpointTest, KeepLastPrunesOlderSteps) {
  for (int64_t step = 1; step <= 5; ++step) Write(step, /*keep_last=*/2);
  auto steps = ListShardCheckpoints(dir_, 3);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ(*steps, (std::vector<int64_t>{4, 5}));
  auto latest = LatestShardCheckpoint(dir_, 3);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir_ + "/rank-3/step-5.shardckpt");

  // keep_last <= 0 keeps everything.
  Write(6, 0);
  EXPECT_EQ(*ListShardCheckpoints(dir_, 3), (std::vector<int64_t>{4, 5, 6}));

  // After a rollback to step 4, writing step 5 again drops step 6 (an
  // abandoned timeline) so that the new file is the latest.
  Write(5, 3);
  EXPECT_EQ(*ListShardCheckpoints(dir_, 3), (std::vector<int64_t>{4, 5}));

  // Other ranks are untouched.
  Write(1, 1, /*rank=*/0);
  Write(9, 1, /*rank=*/3);
  EXPECT_EQ(*ListShardCheckpoints(dir_, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(*ListShardCheckpoints(dir_, 3), (std::vector<int64_t>{9}));
}

TEST_F(ShardCheckpointTest, DeadWritersTemporaryIsSweptALiveOnesIsNot) {
  Write(3);
  const std::string rank_dir = dir_ + "/rank-3";
  // A writer that died (no lock on its file) and one that lives (locked).
  const std::string dead = rank_dir + "/.step-6.shardckpt.tmp.12345";
  const std::string live = rank_dir + "/.step-9.shardckpt.tmp.12346";
  for (const std::string& p : {dead, live}) {
    std::ofstream(p) << "half a checkpoint";
  }
  const int held = ::open(live.c_str(), O_RDONLY);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  auto removed = RemoveDeadCheckpointTemporaries(dir_, 3);
  ASSERT_TRUE(removed.ok()) << removed.status();
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_EQ((*removed)[0], dead + " (17 bytes)");
  EXPECT_FALSE(Exists(dead));
  EXPECT_TRUE(Exists(live));
  // Never listed as a checkpoint either way.
  EXPECT_EQ(*ListShardCheckpoints(dir_, 3), std::vector<int64_t>{3});
  ::close(held);
}

TEST_F(ShardCheckpointTest, RemoveAboveDropsAnAbandonedTimeline) {
  for (int64_t step : {3, 6, 9}) Write(step, /*keep_last=*/0);
  ASSERT_TRUE(RemoveShardCheckpointsAbove(dir_, 3, 6).ok());
  EXPECT_EQ(*ListShardCheckpoints(dir_, 3), (std::vector<int64_t>{3, 6}));
  ASSERT_TRUE(RemoveShardCheckpointsAbove(dir_, 3, 0).ok());
  EXPECT_EQ(ListShardCheckpoints(dir_, 3).status().code(),
            absl::StatusCode::kNotFound);
  // No folder (a rank that never wrote one): nothing to do.
  EXPECT_TRUE(RemoveShardCheckpointsAbove(dir_, 7, 0).ok());
}

TEST_F(ShardCheckpointTest, DetectsCorruptByteInASection) {
  const std::string path = Write(2);
  // Section 2 (unit 0, ADAMW_EXP_AVG_SQ) starts at payload byte 4000.
  FlipByte(path, PayloadOffset(path) + 4000 + 100);
  EXPECT_TRUE(ReadShardCheckpointHeader(path).ok());  // Header intact.
  absl::Status status = ReadShardCheckpoint(path, Dest(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(path + ": section 2 (unit 0 kind "
                                         "ADAMW_EXP_AVG_SQ): crc32c mismatch"),
            std::string::npos)
      << status;
}

TEST_F(ShardCheckpointTest, VerifyChecksEveryByteWithoutADestination) {
  const std::string path = Write(2);
  auto ok = VerifyShardCheckpoint(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->step(), 2);
  // The last byte of the last section: a header-only check misses it.
  FlipByte(path, PayloadOffset(path) + 4000 + 1234 + 7);
  EXPECT_TRUE(ReadShardCheckpointHeader(path).ok());
  absl::Status status = VerifyShardCheckpoint(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(path + ": section 3"), std::string::npos)
      << status;
  EXPECT_EQ(VerifyShardCheckpoint(dir_ + "/nope").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ShardCheckpointTest, DetectsCorruptHeaderAndFooter) {
  const std::string path = Write(2);
  FlipByte(path, 18);  // Inside the serialized header.
  absl::Status status = ReadShardCheckpointHeader(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(path), std::string::npos) << status;

  const std::string other = Write(3);
  FlipByte(other, FileSize(other) - 1);  // End magic.
  EXPECT_EQ(ReadShardCheckpointHeader(other).status().code(),
            absl::StatusCode::kDataLoss);

  const std::string third = Write(4);
  FlipByte(third, 0);  // Magic.
  status = ReadShardCheckpoint(third, Dest(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("bad magic"), std::string::npos) << status;
}

TEST_F(ShardCheckpointTest, TruncatedFileIsDataLossWithSizes) {
  const std::string path = Write(2);
  const int64_t size = FileSize(path);
  ASSERT_EQ(::truncate(path.c_str(), size - 10), 0);
  const std::string expected = absl::StrCat(
      path, ": truncated (expected ", size, " bytes, found ", size - 10, ")");
  absl::Status status = ReadShardCheckpoint(path, Dest(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(status.message(), expected);
  EXPECT_EQ(ReadShardCheckpointHeader(path).status().message(), expected);

  ASSERT_EQ(::truncate(path.c_str(), 5), 0);
  status = ReadShardCheckpointHeader(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status;
}

TEST_F(ShardCheckpointTest, MissingDirectoryAndFileAreNotFound) {
  absl::Status status = LatestShardCheckpoint(dir_ + "/nowhere", 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(status.message(), absl::StrCat("no checkpoint for rank 3 in ", dir_,
                                           "/nowhere/rank-3"));
  status = ReadShardCheckpoint(dir_ + "/nowhere/x.shardckpt", Dest(), nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadShardCheckpointHeader(dir_ + "/nowhere/x").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ShardCheckpointTest, LatestIgnoresTemporaryAndForeignFiles) {
  Write(5);
  for (const char* name :
       {"/.step-9.shardckpt.tmp.1", "/step-9.shardckpt.tmp",
        "/step-x.shardckpt", "/step-.shardckpt", "/notes.txt"}) {
    const int fd =
        ::open((dir_ + "/rank-3" + name).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0) << name;
    ::close(fd);
  }
  auto latest = LatestShardCheckpoint(dir_, 3);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir_ + "/rank-3/step-5.shardckpt");
  // A later write with pruning removes the stale temporary file of another
  // process, and nothing else that is not a checkpoint.
  Write(6, 5);
  EXPECT_FALSE(Exists(dir_ + "/rank-3/.step-9.shardckpt.tmp.1"));
  EXPECT_TRUE(Exists(dir_ + "/rank-3/notes.txt"));
}

TEST_F(ShardCheckpointTest, FileNameMustMatchTheStep) {
  const std::string path = Write(5);
  const std::string renamed = dir_ + "/rank-3/step-6.shardckpt";
  ASSERT_EQ(::rename(path.c_str(), renamed.c_str()), 0);
  EXPECT_EQ(ReadShardCheckpointHeader(renamed).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(ShardCheckpointTest, RejectsBadArguments) {
  EXPECT_EQ(
      WriteShardCheckpoint(dir_, -1, Header(1), Sources(), 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      WriteShardCheckpoint(dir_, 0, Header(-1), Sources(), 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<SectionSource> sources = Sources();
  sources[0].data = nullptr;
  EXPECT_EQ(
      WriteShardCheckpoint(dir_, 0, Header(1), sources, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ShardCheckpointTest, WriterKilledMidwayLeavesNoCheckpoint) {
  Write(1);
  EXPECT_EXIT(
      {
        if (!Failpoints::Configure("checkpoint.write.mid:exit").ok()) _exit(1);
        (void)WriteShardCheckpoint(dir_, 3, Header(2), Sources(), 1);
        _exit(0);
      },
      ::testing::ExitedWithCode(3), "failpoint checkpoint\\.write\\.mid: exit");
  // The half-written step 2 never got its final name.
  auto latest = LatestShardCheckpoint(dir_, 3);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir_ + "/rank-3/step-1.shardckpt");
  EXPECT_FALSE(Exists(dir_ + "/rank-3/step-2.shardckpt"));
  ASSERT_TRUE(ReadShardCheckpoint(*latest, Dest(), nullptr).ok());
  // Its temporary is left behind, unlocked now that its writer is dead: the
  // next start (or write) removes it.
  auto removed = RemoveDeadCheckpointTemporaries(dir_, 3);
  ASSERT_TRUE(removed.ok()) << removed.status();
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_NE((*removed)[0].find("/rank-3/.step-2.shardckpt.tmp."),
            std::string::npos)
      << (*removed)[0];
  EXPECT_FALSE(Exists((*removed)[0].substr(0, (*removed)[0].find(" ("))));
}

// Written from and read back into memory the host cannot address (as a
// GPU's), through the ShardMemory: the same file as from host memory, and
// the same bytes back.
TEST_F(ShardCheckpointTest, RoundTripsMemoryTheHostCannotAddress) {
  auto arena = memory::testing::GuardedArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  recovery::testing::GuardedShardMemory memory(**arena);
  std::vector<std::unique_ptr<memory::ByteBuffer>> from, to;
  std::vector<SectionSource> sources = Sources();
  for (size_t k = 0; k < bytes_.size(); ++k) {
    from.push_back(*(*arena)->Allocate("from", bytes_[k].size() + 1));
    to.push_back(*(*arena)->Allocate("to", bytes_[k].size() + 1));
    std::memcpy((*arena)->Alias(from[k]->data()), bytes_[k].data(),
                bytes_[k].size());
    sources[k].data = from[k]->data();
  }
  auto guarded = WriteShardCheckpoint(dir_, 3, Header(9), sources, 0, memory);
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  std::ifstream a(*guarded, std::ios::binary);
  const std::string device_file((std::istreambuf_iterator<char>(a)), {});
  const std::string host_path = Write(10);
  std::ifstream b(host_path, std::ios::binary);
  const std::string host_file((std::istreambuf_iterator<char>(b)), {});
  // The same payload and footer (the headers differ in the step).
  ASSERT_EQ(device_file.size(), host_file.size());
  const size_t tail = 4000 + 1234 + 8 + 4 * 4 + 4 + 4 + 8;
  EXPECT_EQ(device_file.substr(device_file.size() - tail, tail - 12),
            host_file.substr(host_file.size() - tail, tail - 12));
  auto dest = [&](const v1::ShardHeader&, int s) -> absl::StatusOr<uint8_t*> {
    return to[s]->data();
  };
  v1::ShardHeader header;
  ASSERT_TRUE(
      ReadShardCheckpoint(*guarded, dest, &header, nullptr, memory).ok());
  for (size_t k = 0; k < bytes_.size(); ++k) {
    const uint8_t* p =
        static_cast<const uint8_t*>((*arena)->Alias(to[k]->data()));
    EXPECT_EQ(std::vector<uint8_t>(p, p + bytes_[k].size()), bytes_[k]) << k;
  }
  EXPECT_GT(memory.reads(), 0);
  EXPECT_GT(memory.writes(), 0);
}

}  // namespace
}  // namespace shardd::recovery
