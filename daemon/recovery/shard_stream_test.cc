#include "daemon/recovery/shard_stream.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "daemon/core/crc32c.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/recovery/testing/guarded_shard_memory.h"
#include "gtest/gtest.h"

namespace shardd::recovery {
namespace {

// A shard with sections of the given sizes and random bytes, and receiving
// buffers of the same sizes.
class ShardStreamTest : public ::testing::Test {
 protected:
  void MakeShard(const std::vector<int64_t>& sizes, uint32_t seed = 1) {
    std::mt19937 rng(seed);
    bytes_.clear();
    received_.clear();
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> b(sizes[i]);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      bytes_.push_back(std::move(b));
      received_.emplace_back(sizes[i], 0xEE);
    }
  }

  std::vector<SectionSource> Sources() const {
    std::vector<SectionSource> sources;
    for (size_t i = 0; i < bytes_.size(); ++i) {
      SectionSource s;
      s.section.set_unit(static_cast<int>(i / 2));
      s.section.set_kind(i % 2 == 0 ? v1::SHARD_SECTION_KIND_PARAMETERS
                                    : v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG);
      s.section.set_dtype(v1::DTYPE_FP32);
      s.section.set_byte_length(static_cast<int64_t>(bytes_[i].size()));
      s.section.set_numel(static_cast<int64_t>(bytes_[i].size()) / 4);
      s.data = bytes_[i].data();
      sources.push_back(s);
    }
    return sources;
  }

  static v1::ShardHeader BaseHeader() {
    v1::ShardHeader header;
    header.set_epoch(3);
    header.set_source_rank(2);
    header.set_shard_index(0);
    header.set_step(17);
    header.set_model_fingerprint(0xABCDEF);
    return header;
  }

  std::vector<v1::FetchShardResponse> Stream(int64_t max_chunk,
                                             int64_t resume = 0) {
    auto writer =
        ShardStreamWriter::Create(BaseHeader(), Sources(), max_chunk, resume);
    EXPECT_TRUE(writer.ok()) << writer.status();
    std::vector<v1::FetchShardResponse> messages;
    if (!writer.ok()) return messages;
    v1::FetchShardResponse msg;
    while (writer->Next(&msg)) messages.push_back(msg);
    last_bytes_sent_ = writer->bytes_sent();
    return messages;
  }

  ShardStreamAssembler::Destination Dest() {
    return [this](const v1::ShardHeader& header,
                  int s) -> absl::StatusOr<uint8_t*> {
      EXPECT_EQ(header.sections(s).byte_length(),
                static_cast<int64_t>(received_[s].size()));
      ++dest_calls_;
      return received_[s].data();
    };
  }

  uint32_t WholeCrc() const {
    uint32_t crc = 0;
    for (const auto& b : bytes_)
      crc = core::Crc32cExtend(crc, b.data(), b.size());
    return crc;
  }

  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<std::vector<uint8_t>> received_;
  int dest_calls_ = 0;
  int64_t last_bytes_sent_ = 0;
};

TEST_F(ShardStreamTest, RoundTripsSectionsOfManySizes) {
  const std::vector<int64_t> sizes = {0, 1, 1000, 0, 4097, 12345, 3, 0};
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  for (int64_t chunk :
       {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4096}, int64_t{0}}) {
    MakeShard(sizes, static_cast<uint32_t>(chunk) + 1);
    dest_calls_ = 0;
    std::vector<v1::FetchShardResponse> messages = Stream(chunk);
    ASSERT_GE(messages.size(), 2u);
    ASSERT_TRUE(messages.front().has_header());
    ASSERT_TRUE(messages.back().has_trailer());
    const v1::ShardHeader& header = messages.front().header();
    EXPECT_EQ(header.total_bytes(), total);
    EXPECT_EQ(header.checksum(), v1::CHECKSUM_ALGORITHM_CRC32C);
    EXPECT_EQ(header.step(), 17);
    ASSERT_EQ(header.sections_size(), static_cast<int>(sizes.size()));
    EXPECT_EQ(header.sections(5).stream_offset(), 1 + 1000 + 4097);
    EXPECT_EQ(messages.back().trailer().crc32c(), WholeCrc());
    EXPECT_EQ(last_bytes_sent_, total);

    // Chunks: within one section, at most `chunk` bytes, ceil(size/chunk)
    // per section.
    const int64_t max_chunk = chunk <= 0 ? kDefaultMaxChunkBytes : chunk;
    size_t expected_chunks = 0;
    for (int64_t s : sizes) expected_chunks += (s + max_chunk - 1) / max_chunk;
    EXPECT_EQ(messages.size(), expected_chunks + 2) << "chunk " << chunk;
    for (size_t m = 1; m + 1 < messages.size(); ++m) {
      ASSERT_TRUE(messages[m].has_chunk());
      const v1::ShardChunk& c = messages[m].chunk();
      EXPECT_LE(static_cast<int64_t>(c.data().size()), max_chunk);
      EXPECT_LE(c.section_offset() + static_cast<int64_t>(c.data().size()),
                header.sections(c.section()).byte_length());
    }

    ShardStreamAssembler assembler(Dest());
    for (const auto& msg : messages) {
      ASSERT_TRUE(assembler.Add(msg).ok()) << assembler.Add(msg);
    }
    ASSERT_TRUE(assembler.Finish().ok()) << assembler.Finish();
    EXPECT_TRUE(assembler.done());
    EXPECT_EQ(assembler.verified_bytes(), total);
    EXPECT_EQ(assembler.running_crc(), WholeCrc());
    EXPECT_EQ(assembler.header().step(), 17);
    EXPECT_EQ(dest_calls_, static_cast<int>(sizes.size()));
    EXPECT_EQ(received_, bytes_) << "chunk " << chunk;
  }
}

TEST_F(ShardStreamTest, EmptyShardIsHeaderAndTrailer) {
  MakeShard({});
  std::vector<v1::FetchShardResponse> messages = Stream(0);
  ASSERT_EQ(messages.size(), 2u);
  ShardStreamAssembler assembler(Dest());
  for (const auto& msg : messages) ASSERT_TRUE(assembler.Add(msg).ok());
  EXPECT_TRUE(assembler.Finish().ok());
}

TEST_F(ShardStreamTest, CapsChunksAtSixteenMiB) {
  MakeShard({(int64_t{16} << 20) + 5});
  std::vector<v1::FetchShardResponse> messages = Stream(int64_t{64} << 20);
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ(messages[1].chunk().data().size(), size_t{16} << 20);
  EXPECT_EQ(messages[2].chunk().data().size(), 5u);
}

TEST_F(ShardStreamTest, WriterRejectsBadInput) {
  MakeShard({10, 20});
  EXPECT_EQ(
      ShardStreamWriter::Create(BaseHeader(), Sources(), 0, 31).status().code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_EQ(
      ShardStreamWriter::Create(BaseHeader(), Sources(), 0, -1).status().code(),
      absl::StatusCode::kInvalidArgument);
  std::vector<SectionSource> sources = Sources();
  sources[1].data = nullptr;
  absl::Status status =
      ShardStreamWriter::Create(BaseHeader(), sources, 0, 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("section 1 (unit 0 kind ADAMW_EXP_AVG)"),
            std::string::npos)
      << status;
}

TEST_F(ShardStreamTest, DetectsCorruptedChunk) {
  MakeShard({100, 3000, 50});
  std::vector<v1::FetchShardResponse> messages = Stream(1000);
  // messages: header, s0 [0,100), s1 [0,1000) [1000,2000) [2000,3000), s2.
  v1::ShardChunk* chunk = messages[3].mutable_chunk();
  ASSERT_EQ(chunk->section(), 1);
  ASSERT_EQ(chunk->section_offset(), 1000);
  (*chunk->mutable_data())[17] ^= 0x01;
  ShardStreamAssembler assembler(Dest());
  absl::Status status;
  for (const auto& msg : messages) {
    status = assembler.Add(msg);
    if (!status.ok()) break;
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("chunk at byte 1000 of section 1 (unit 0 "
                                  "kind ADAMW_EXP_AVG): crc32c mismatch"),
            std::string::npos)
      << status;
  // Only the verified prefix was accepted, and the failure is sticky.
  EXPECT_EQ(assembler.verified_bytes(), 1100);
  EXPECT_EQ(received_[1][1017], 0xEE);
  EXPECT_EQ(assembler.Add(messages[4]).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(assembler.Finish().code(), absl::StatusCode::kDataLoss);
}

TEST_F(ShardStreamTest, DetectsWrongTrailer) {
  MakeShard({100, 200});
  std::vector<v1::FetchShardResponse> messages = Stream(64);
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.back().mutable_trailer()->set_crc32c(bad.back().trailer().crc32c() ^
                                             0x80000000u);
    ShardStreamAssembler assembler(Dest());
    absl::Status status;
    for (const auto& msg : bad) status = assembler.Add(msg);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_NE(status.message().find("whole-stream crc32c mismatch"),
              std::string::npos);
    EXPECT_FALSE(assembler.Finish().ok());
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.back().mutable_trailer()->set_total_bytes(299);
    ShardStreamAssembler assembler(Dest());
    absl::Status status;
    for (const auto& msg : bad) status = assembler.Add(msg);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
  {
    // A chunk corrupted together with its own CRC passes the chunk check
    // but not the trailer.
    std::vector<v1::FetchShardResponse> bad = messages;
    v1::ShardChunk* chunk = bad[2].mutable_chunk();
    (*chunk->mutable_data())[0] ^= 0x10;
    chunk->set_crc32c(core::Crc32c(chunk->data().data(), chunk->data().size()));
    ShardStreamAssembler assembler(Dest());
    absl::Status status;
    for (const auto& msg : bad) status = assembler.Add(msg);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  }
}

TEST_F(ShardStreamTest, RejectsReorderedMissingAndMisplacedMessages) {
  MakeShard({100, 200});
  std::vector<v1::FetchShardResponse> messages = Stream(64);
  auto run = [&](const std::vector<v1::FetchShardResponse>& stream) {
    ShardStreamAssembler assembler(Dest());
    for (const auto& msg : stream) {
      absl::Status status = assembler.Add(msg);
      if (!status.ok()) return status;
    }
    return assembler.Finish();
  };
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    std::swap(bad[2], bad[3]);
    absl::Status status = run(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(status.message().find("out of order"), std::string::npos)
        << status;
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.erase(bad.begin() + 2);  // A missing chunk.
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad(messages.begin() + 1,
                                            messages.end());
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.insert(bad.begin() + 1, messages[0]);  // Second header.
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.erase(bad.end() - 2);  // Trailer before all bytes.
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.push_back(messages[1]);  // Anything after the trailer.
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad.pop_back();  // No trailer.
    absl::Status status = run(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(status.message().find("after 300 of 300 bytes without a trailer"),
              std::string::npos)
        << status;
  }
  {
    // Right stream offset, but claims the wrong section.
    std::vector<v1::FetchShardResponse> bad = messages;
    ASSERT_EQ(bad[2].chunk().section(), 0);
    bad[2].mutable_chunk()->set_section(1);
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    ASSERT_EQ(bad[2].chunk().section_offset(), 64);
    bad[2].mutable_chunk()->set_section_offset(0);
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kInvalidArgument);
  }
  {
    // A header whose sections do not tile the payload.
    std::vector<v1::FetchShardResponse> bad = messages;
    bad[0].mutable_header()->mutable_sections(1)->set_stream_offset(99);
    absl::Status status = run(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("section 1"), std::string::npos) << status;
  }
  {
    std::vector<v1::FetchShardResponse> bad = messages;
    bad[1] = v1::FetchShardResponse();
    EXPECT_EQ(run(bad).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ShardStreamTest, DestinationErrorFailsTheHeader) {
  MakeShard({10});
  std::vector<v1::FetchShardResponse> messages = Stream(0);
  ShardStreamAssembler assembler(
      [](const v1::ShardHeader&, int) -> absl::StatusOr<uint8_t*> {
        return absl::FailedPreconditionError("step 17 is not the plan's 18");
      });
  absl::Status status = assembler.Add(messages[0]);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "step 17 is not the plan's 18");
}

TEST_F(ShardStreamTest, ResumesABrokenStreamWithTheSameBytes) {
  MakeShard({0, 1500, 0, 2500, 700});
  std::vector<v1::FetchShardResponse> first = Stream(600);
  // The first stream breaks after header + 4 chunks.
  ShardStreamAssembler broken(Dest());
  for (size_t m = 0; m < 5; ++m) ASSERT_TRUE(broken.Add(first[m]).ok());
  EXPECT_FALSE(broken.Finish().ok());
  const int64_t resume = broken.verified_bytes();
  ASSERT_EQ(resume, 600 + 600 + 300 + 600);

  std::vector<v1::FetchShardResponse> second = Stream(600, resume);
  ASSERT_TRUE(second[1].has_chunk());
  EXPECT_EQ(second[1].chunk().stream_offset(), resume);
  EXPECT_EQ(last_bytes_sent_, 1500 + 2500 + 700 - resume);
  EXPECT_EQ(second.back().trailer().crc32c(), WholeCrc());
  ShardStreamAssembler resumed(Dest(), resume, broken.running_crc());
  for (const auto& msg : second) {
    ASSERT_TRUE(resumed.Add(msg).ok()) << resumed.Add(msg);
  }
  ASSERT_TRUE(resumed.Finish().ok()) << resumed.Finish();
  EXPECT_EQ(received_, bytes_);

  // Resuming at an arbitrary byte (not a chunk boundary) also works, and a
  // wrong running CRC is caught by the trailer.
  const int64_t odd = 2345;
  std::vector<v1::FetchShardResponse> third = Stream(600, odd);
  uint32_t prefix_crc = core::Crc32c(bytes_[1].data(), 1500);
  prefix_crc = core::Crc32cExtend(prefix_crc, bytes_[3].data(), odd - 1500);
  ShardStreamAssembler at_odd(Dest(), odd, prefix_crc);
  for (const auto& msg : third) ASSERT_TRUE(at_odd.Add(msg).ok());
  EXPECT_TRUE(at_odd.Finish().ok());
  ShardStreamAssembler wrong_crc(Dest(), odd, prefix_crc ^ 1);
  absl::Status status;
  for (const auto& msg : third) status = wrong_crc.Add(msg);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);

  // Resuming at the very end: header and trailer only.
  std::vector<v1::FetchShardResponse> at_end = Stream(600, 4700);
  ASSERT_EQ(at_end.size(), 2u);
  ShardStreamAssembler end(Dest(), 4700, WholeCrc());
  for (const auto& msg : at_end) ASSERT_TRUE(end.Add(msg).ok());
  EXPECT_TRUE(end.Finish().ok());

  // The assembler refuses a resume point beyond the header's total.
  ShardStreamAssembler beyond(Dest(), 4701, 0);
  EXPECT_EQ(beyond.Add(at_end[0]).code(), absl::StatusCode::kOutOfRange);
}

// Out of band: the writer's pieces are moved by the caller (here a memcpy
// standing in for the replica group's Send/Recv, which this layer does not
// know about), the chunks carry only place, length and CRC.
class ShardStreamOutOfBandTest : public ShardStreamTest {
 protected:
  // Runs writer and assembler from `resume`, moving each piece before its
  // chunk is added; `corrupt` (a stream offset, or -1) flips a byte of the
  // piece that holds it after the move. Returns the first error.
  absl::Status Transfer(int64_t chunk, int64_t resume = 0,
                        uint32_t crc_so_far = 0, int64_t corrupt = -1) {
    auto writer = ShardStreamWriter::Create(BaseHeader(), Sources(), chunk,
                                            resume, /*payload_out_of_band=*/
                                            true);
    if (!writer.ok()) return writer.status();
    ShardStreamAssembler assembler(Dest(), resume, crc_so_far);
    v1::FetchShardResponse header;
    EXPECT_TRUE(writer->Next(&header));
    EXPECT_TRUE(header.header().payload_out_of_band());
    if (absl::Status s = assembler.Add(header); !s.ok()) return s;
    const std::vector<PayloadPiece> sent = writer->PendingPieces();
    const std::vector<PayloadPiece> expected = assembler.PendingPieces();
    EXPECT_EQ(sent.size(), expected.size());
    pieces_ = static_cast<int>(sent.size());
    v1::FetchShardResponse msg;
    for (size_t i = 0; writer->Next(&msg); ++i) {
      if (msg.has_chunk()) {
        EXPECT_TRUE(msg.chunk().data().empty());
        EXPECT_LT(i, sent.size());
        EXPECT_EQ(sent[i].stream_offset, expected[i].stream_offset);
        EXPECT_EQ(sent[i].length, expected[i].length);
        EXPECT_EQ(msg.chunk().stream_offset(), sent[i].stream_offset);
        EXPECT_EQ(msg.chunk().length(), sent[i].length);
        std::memcpy(expected[i].data, sent[i].data, sent[i].length);
        if (corrupt >= sent[i].stream_offset &&
            corrupt < sent[i].stream_offset + sent[i].length) {
          expected[i].data[corrupt - sent[i].stream_offset] ^= 0x10;
        }
      }
      if (absl::Status s = assembler.Add(msg); !s.ok()) return s;
    }
    return assembler.Finish();
  }

  int pieces_ = 0;
};

TEST_F(ShardStreamOutOfBandTest, MovesEveryPieceOnceWithoutDataInChunks) {
  const std::vector<int64_t> sizes = {0, 1, 1000, 0, 4097, 12345, 3, 0};
  for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{0}}) {
    MakeShard(sizes, static_cast<uint32_t>(chunk) + 7);
    ASSERT_TRUE(Transfer(chunk).ok()) << "chunk " << chunk;
    EXPECT_EQ(received_, bytes_) << "chunk " << chunk;
    const int64_t max_chunk = chunk <= 0 ? kDefaultMaxChunkBytes : chunk;
    int expected = 0;
    for (int64_t size : sizes) {
      expected += static_cast<int>((size + max_chunk - 1) / max_chunk);
    }
    EXPECT_EQ(pieces_, expected) << "chunk " << chunk;
  }
}

TEST_F(ShardStreamOutOfBandTest, CorruptedPieceIsDataLossNamingItsSection) {
  MakeShard({1000, 5000, 300});
  const absl::Status status = Transfer(1024, 0, 0, /*corrupt=*/1000 + 2500);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("section 1 (unit 0 kind ADAMW_EXP_AVG)"),
            std::string::npos)
      << status;
}

TEST_F(ShardStreamOutOfBandTest, ResumesAtAnyByteWithTheSamePieces) {
  MakeShard({0, 1500, 0, 2500, 700});
  const int64_t resume = 2345;
  uint32_t prefix_crc = core::Crc32c(bytes_[1].data(), 1500);
  prefix_crc = core::Crc32cExtend(prefix_crc, bytes_[3].data(), resume - 1500);
  std::memcpy(received_[1].data(), bytes_[1].data(), 1500);
  std::memcpy(received_[3].data(), bytes_[3].data(), resume - 1500);
  ASSERT_TRUE(Transfer(600, resume, prefix_crc).ok());
  EXPECT_EQ(received_, bytes_);
  // Pieces start at the resume point: 600 + 600 + 455 bytes to the end of
  // section 3, then 600 + 100 of section 4.
  EXPECT_EQ(pieces_, 5);
}

TEST_F(ShardStreamOutOfBandTest, RejectsChunksThatDisagreeWithTheHeader) {
  MakeShard({1000});
  auto writer = ShardStreamWriter::Create(BaseHeader(), Sources(), 400, 0,
                                          /*payload_out_of_band=*/true);
  ASSERT_TRUE(writer.ok());
  v1::FetchShardResponse header, chunk;
  ASSERT_TRUE(writer->Next(&header));
  ASSERT_TRUE(writer->Next(&chunk));
  {
    // Data inside an out-of-band chunk.
    ShardStreamAssembler assembler(Dest());
    ASSERT_TRUE(assembler.Add(header).ok());
    v1::FetchShardResponse with_data = chunk;
    with_data.mutable_chunk()->set_data("x");
    EXPECT_EQ(assembler.Add(with_data).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    // A length that is not the piece's.
    ShardStreamAssembler assembler(Dest());
    ASSERT_TRUE(assembler.Add(header).ok());
    v1::FetchShardResponse shorter = chunk;
    shorter.mutable_chunk()->set_length(300);
    const absl::Status status = assembler.Add(shorter);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("is not the piece's"), std::string::npos)
        << status;
  }
  {
    // A header without a piece size.
    ShardStreamAssembler assembler(Dest());
    v1::FetchShardResponse no_size = header;
    no_size.mutable_header()->set_chunk_bytes(0);
    EXPECT_EQ(assembler.Add(no_size).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(assembler.PendingPieces().empty());
  }
}

// Sections that lie back to back in the sender's memory (as a shard's
// parameters of every unit do) form one run: pieces run across section
// boundaries, so a shard of many small sections moves in a few receives.
TEST_F(ShardStreamOutOfBandTest, PiecesRunAcrossConsecutiveSections) {
  // Sections 0-2 consecutive in `one`, 3 elsewhere, 4 consecutive with 3
  // in `two`; an empty section between 0 and 1 neither joins nor breaks.
  std::vector<uint8_t> one(3000), two(1500);
  for (size_t i = 0; i < one.size(); ++i) one[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < two.size(); ++i) two[i] = static_cast<uint8_t>(i * 3);
  const std::vector<std::pair<uint8_t*, int64_t>> parts = {
      {one.data(), 1000},       {nullptr, 0},      {one.data() + 1000, 1500},
      {one.data() + 2500, 500}, {two.data(), 700}, {two.data() + 700, 800}};
  std::vector<SectionSource> sources;
  for (size_t k = 0; k < parts.size(); ++k) {
    SectionSource source;
    source.section.set_unit(static_cast<int>(k));
    source.section.set_kind(v1::SHARD_SECTION_KIND_PARAMETERS);
    source.section.set_byte_length(parts[k].second);
    source.data = parts[k].first;
    sources.push_back(source);
  }
  auto writer = ShardStreamWriter::Create(BaseHeader(), sources, 1024, 0,
                                          /*payload_out_of_band=*/true);
  ASSERT_TRUE(writer.ok()) << writer.status();
  v1::FetchShardResponse header;
  ASSERT_TRUE(writer->Next(&header));
  const v1::ShardHeader& h = header.header();
  EXPECT_FALSE(h.sections(0).follows_previous());
  EXPECT_TRUE(h.sections(2).follows_previous());
  EXPECT_TRUE(h.sections(3).follows_previous());
  EXPECT_FALSE(h.sections(4).follows_previous());
  EXPECT_TRUE(h.sections(5).follows_previous());
  // Runs of 3000 and 1500 bytes in pieces of at most 1024.
  const std::vector<PayloadPiece> pieces = writer->PendingPieces();
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_EQ(pieces[0].length, 1024);
  EXPECT_EQ(pieces[1].section, 2);  // Starts at byte 24 of section 2.
  EXPECT_EQ(pieces[1].section_offset, 24);
  EXPECT_EQ(pieces[2].length, 3000 - 2048);
  EXPECT_EQ(pieces[3].stream_offset, 3000);
  EXPECT_EQ(pieces[4].length, 1500 - 1024);

  // A receiver laid out the same way gets every byte.
  std::vector<uint8_t> got_one(3000, 0xEE), got_two(1500, 0xEE);
  const std::vector<uint8_t*> dests = {
      got_one.data(),        nullptr,        got_one.data() + 1000,
      got_one.data() + 2500, got_two.data(), got_two.data() + 700};
  ShardStreamAssembler assembler(
      [&](const v1::ShardHeader&, int k) -> absl::StatusOr<uint8_t*> {
        return dests[k];
      });
  ASSERT_TRUE(assembler.Add(header).ok());
  ASSERT_EQ(assembler.PendingPieces().size(), pieces.size());
  const std::vector<PayloadPiece> landing = assembler.PendingPieces();
  v1::FetchShardResponse msg;
  for (size_t i = 0; writer->Next(&msg); ++i) {
    if (msg.has_chunk()) {
      std::memcpy(landing[i].data, pieces[i].data, pieces[i].length);
    }
    ASSERT_TRUE(assembler.Add(msg).ok()) << assembler.Add(msg);
  }
  ASSERT_TRUE(assembler.Finish().ok());
  EXPECT_EQ(got_one, one);
  EXPECT_EQ(got_two, two);

  // A receiver whose section 3 is not right after its section 2 cannot
  // take a piece across them, and says which section.
  std::vector<uint8_t> elsewhere(500);
  ShardStreamAssembler scattered(
      [&](const v1::ShardHeader&, int k) -> absl::StatusOr<uint8_t*> {
        return k == 3 ? elsewhere.data() : dests[k];
      });
  const absl::Status status = scattered.Add(header);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("section 3 (unit 3 kind PARAMETERS) "
                                  "follows the previous section"),
            std::string::npos)
      << status;
}

// A source may hand the writer CRCs it computed earlier from the same
// bytes; the chunks carry them, and a stale one is still caught by the
// receiver, which checks the bytes that arrived.
TEST_F(ShardStreamOutOfBandTest, PrecomputedPieceCrcsAreCarriedAndChecked) {
  MakeShard({1000, 5000, 300});
  std::vector<uint32_t> crcs;
  {
    auto probe = ShardStreamWriter::Create(BaseHeader(), Sources(), 1024, 0,
                                           /*payload_out_of_band=*/true);
    ASSERT_TRUE(probe.ok());
    for (const PayloadPiece& piece : probe->PendingPieces()) {
      crcs.push_back(core::Crc32c(piece.data, piece.length));
    }
  }
  auto run = [&](std::vector<uint32_t> given) -> absl::Status {
    auto writer = ShardStreamWriter::Create(BaseHeader(), Sources(), 1024, 0,
                                            /*payload_out_of_band=*/true,
                                            std::move(given));
    if (!writer.ok()) return writer.status();
    ShardStreamAssembler assembler(Dest());
    v1::FetchShardResponse msg;
    EXPECT_TRUE(writer->Next(&msg));
    if (absl::Status s = assembler.Add(msg); !s.ok()) return s;
    const std::vector<PayloadPiece> sent = writer->PendingPieces();
    const std::vector<PayloadPiece> landing = assembler.PendingPieces();
    for (size_t i = 0; writer->Next(&msg); ++i) {
      if (msg.has_chunk()) {
        std::memcpy(landing[i].data, sent[i].data, sent[i].length);
      }
      if (absl::Status s = assembler.Add(msg); !s.ok()) return s;
    }
    return assembler.Finish();
  };
  EXPECT_TRUE(run(crcs).ok());
  EXPECT_EQ(received_, bytes_);
  std::vector<uint32_t> stale = crcs;
  stale[2] ^= 1;
  EXPECT_EQ(run(stale).code(), absl::StatusCode::kDataLoss);
  std::vector<uint32_t> short_list(crcs.begin(), crcs.end() - 1);
  const absl::Status count = run(short_list);
  EXPECT_EQ(count.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("precomputed piece CRCs"), std::string::npos)
      << count;
  EXPECT_EQ(ShardStreamWriter::Create(BaseHeader(), Sources(), 1024, 0,
                                      /*payload_out_of_band=*/false, crcs)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ShardStreamOutOfBandTest, InlineStreamHasNoPendingPieces) {
  MakeShard({1000});
  std::vector<v1::FetchShardResponse> messages = Stream(400);
  ShardStreamAssembler assembler(Dest());
  ASSERT_TRUE(assembler.Add(messages[0]).ok());
  EXPECT_FALSE(messages[0].header().payload_out_of_band());
  EXPECT_TRUE(assembler.PendingPieces().empty());
}

// Inline and out of band, from sections in memory the host cannot address
// into destinations the host cannot address: the same bytes arrive, and
// every byte went through the ShardMemory (a direct access would fault).
TEST_F(ShardStreamTest, MovesShardsInMemoryTheHostCannotAddress) {
  const std::vector<int64_t> sizes = {0, 1, 1000, 0, 4097, 12345, 3};
  MakeShard(sizes, 11);
  auto arena = memory::testing::GuardedArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  recovery::testing::GuardedShardMemory memory(**arena);
  std::vector<std::unique_ptr<memory::ByteBuffer>> from, to;
  std::vector<SectionSource> sources = Sources();
  for (size_t k = 0; k < sizes.size(); ++k) {
    from.push_back(*(*arena)->Allocate("from", sizes[k] + 1));
    to.push_back(*(*arena)->Allocate("to", sizes[k] + 1));
    std::memcpy((*arena)->Alias(from[k]->data()), bytes_[k].data(), sizes[k]);
    sources[k].data = from[k]->data();
  }
  auto dest = [&](const v1::ShardHeader&, int s) -> absl::StatusOr<uint8_t*> {
    return to[s]->data();
  };
  auto received = [&](size_t k) {
    const uint8_t* p =
        static_cast<const uint8_t*>((*arena)->Alias(to[k]->data()));
    return std::vector<uint8_t>(p, p + sizes[k]);
  };
  for (bool out_of_band : {false, true}) {
    for (auto& b : to) {
      std::memset((*arena)->Alias(b->data()), 0xEE, b->size());
    }
    auto writer = ShardStreamWriter::Create(BaseHeader(), sources, 1000, 0,
                                            out_of_band, {}, memory);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ShardStreamAssembler assembler(dest, 0, 0, memory);
    v1::FetchShardResponse msg;
    ASSERT_TRUE(writer->Next(&msg));
    ASSERT_TRUE(assembler.Add(msg).ok());
    const std::vector<PayloadPiece> sent = writer->PendingPieces();
    const std::vector<PayloadPiece> landing = assembler.PendingPieces();
    for (size_t i = 0; writer->Next(&msg); ++i) {
      if (out_of_band && msg.has_chunk()) {
        // The collective's move, device to device.
        std::memcpy((*arena)->Alias(landing[i].data),
                    (*arena)->Alias(sent[i].data), sent[i].length);
      }
      ASSERT_TRUE(assembler.Add(msg).ok()) << assembler.Add(msg);
    }
    ASSERT_TRUE(writer->status().ok()) << writer->status();
    ASSERT_TRUE(assembler.Finish().ok()) << assembler.Finish();
    EXPECT_EQ(assembler.running_crc(), WholeCrc());
    for (size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_EQ(received(k), bytes_[k])
          << "section " << k << " oob " << out_of_band;
    }
  }
  EXPECT_GT(memory.reads(), 0);
  EXPECT_GT(memory.writes(), 0);
}

// A source whose memory cannot be read ends the stream with that error.
TEST_F(ShardStreamTest, UnreadableSourceEndsTheStreamWithItsError) {
  MakeShard({5000});
  auto arena = memory::testing::GuardedArena::Create(1 << 16);
  ASSERT_TRUE(arena.ok());
  recovery::testing::GuardedShardMemory memory(
      **arena);  // Sources() point outside the arena.
  auto writer = ShardStreamWriter::Create(BaseHeader(), Sources(), 1000, 0,
                                          false, {}, memory);
  ASSERT_TRUE(writer.ok()) << writer.status();
  v1::FetchShardResponse msg;
  EXPECT_TRUE(writer->Next(&msg));  // The header.
  EXPECT_FALSE(writer->Next(&msg));
  EXPECT_EQ(writer->status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardd::recovery
