#include "daemon/recovery/shard_stream.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "daemon/core/crc32c.h"

namespace shardd::recovery {
namespace {

std::string KindName(int kind) {
  const std::string& name =
      v1::ShardSectionKind_Name(static_cast<v1::ShardSectionKind>(kind));
  if (name.empty()) return absl::StrCat(kind);
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "SHARD_SECTION_KIND_");
  return std::string(short_name);
}

std::string DescribeSectionOf(int index, const v1::ShardSection& section) {
  return absl::StrCat("section ", index, " (unit ", section.unit(), " kind ",
                      KindName(section.kind()), ")");
}

}  // namespace

std::string DescribeSection(const v1::ShardHeader& header, int index) {
  if (index < 0 || index >= header.sections_size()) {
    return absl::StrCat("section ", index);
  }
  return DescribeSectionOf(index, header.sections(index));
}

absl::Status ValidateShardHeaderLayout(const v1::ShardHeader& header) {
  if (header.checksum() != v1::CHECKSUM_ALGORITHM_CRC32C) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header checksum ", v1::ChecksumAlgorithm_Name(header.checksum()),
        " is not supported (CHECKSUM_ALGORITHM_CRC32C only)"));
  }
  int64_t offset = 0;
  for (int i = 0; i < header.sections_size(); ++i) {
    const v1::ShardSection& section = header.sections(i);
    if (section.byte_length() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeSectionOf(i, section), ": byte_length ",
                       section.byte_length(), " < 0"));
    }
    if (section.stream_offset() != offset) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeSectionOf(i, section), ": stream_offset ",
                       section.stream_offset(), ", expected ", offset,
                       " (sections must tile the payload in order)"));
    }
    if (section.byte_length() > INT64_MAX - offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeSectionOf(i, section), ": byte_length overflows"));
    }
    offset += section.byte_length();
  }
  if (header.total_bytes() != offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("header total_bytes ", header.total_bytes(),
                     " != sum of the sections' byte_length ", offset));
  }
  return absl::OkStatus();
}

std::vector<PayloadPiece> PayloadPieces(const v1::ShardHeader& header,
                                        int64_t chunk_bytes,
                                        int64_t from_byte) {
  std::vector<PayloadPiece> pieces;
  if (chunk_bytes <= 0) return pieces;
  const int n = header.sections_size();
  auto end_of = [&](int k) {
    return header.sections(k).stream_offset() +
           header.sections(k).byte_length();
  };
  int i = 0;
  while (i < n) {
    if (header.sections(i).byte_length() == 0) {
      ++i;
      continue;
    }
    // A run: section i and the non-empty sections that follow it in the
    // sender's memory (empty ones in between neither join nor break it).
    const int64_t run_start = header.sections(i).stream_offset();
    int64_t run_end = end_of(i);
    int j = i + 1;
    for (; j < n; ++j) {
      if (header.sections(j).byte_length() == 0) continue;
      if (!header.sections(j).follows_previous()) break;
      run_end = end_of(j);
    }
    int k = i;  // The section holding `at`.
    for (int64_t at = std::max(from_byte, run_start); at < run_end;
         at += chunk_bytes) {
      while (end_of(k) <= at) ++k;
      pieces.push_back(PayloadPiece{
          .section = k,
          .section_offset = at - header.sections(k).stream_offset(),
          .stream_offset = at,
          .length = std::min(chunk_bytes, run_end - at),
          .data = nullptr});
    }
    i = j;
  }
  return pieces;
}

// ---------------------------------------------------------------------------
// ShardStreamWriter

absl::StatusOr<ShardStreamWriter> ShardStreamWriter::Create(
    v1::ShardHeader header, std::vector<SectionSource> sources,
    int64_t max_chunk_bytes, int64_t resume_from_byte, bool payload_out_of_band,
    std::vector<uint32_t> piece_crcs, const ShardMemory& memory) {
  header.clear_sections();
  int64_t total = 0;
  for (int i = 0; i < static_cast<int>(sources.size()); ++i) {
    v1::ShardSection& section = sources[i].section;
    if (section.byte_length() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeSectionOf(i, section), ": byte_length ",
                       section.byte_length(), " < 0"));
    }
    if (section.byte_length() > 0 && sources[i].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeSectionOf(i, section), ": no data for ",
                       section.byte_length(), " bytes"));
    }
    section.set_stream_offset(total);
    total += section.byte_length();
    *header.add_sections() = section;
  }
  header.set_total_bytes(total);
  header.set_checksum(v1::CHECKSUM_ALGORITHM_CRC32C);
  if (resume_from_byte < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from_byte ", resume_from_byte, " < 0"));
  }
  if (resume_from_byte > total) {
    return absl::OutOfRangeError(
        absl::StrCat("resume_from_byte ", resume_from_byte,
                     " is beyond the transfer's size ", total));
  }
  ShardStreamWriter writer;
  writer.memory_ = &memory;
  writer.header_ = std::move(header);
  writer.sources_ = std::move(sources);
  writer.max_chunk_bytes_ =
      max_chunk_bytes <= 0
          ? kDefaultMaxChunkBytes
          : std::min(max_chunk_bytes, payload_out_of_band ? kMaxPieceBytesCap
                                                          : kMaxChunkBytesCap);
  // The CRC of the skipped prefix, so that the trailer covers everything.
  uint32_t crc = 0;
  for (const SectionSource& source : writer.sources_) {
    const int64_t start = source.section.stream_offset();
    if (start >= resume_from_byte) break;
    const int64_t n =
        std::min(source.section.byte_length(), resume_from_byte - start);
    absl::StatusOr<uint32_t> extended =
        ShardCrc32cExtend(memory, crc, source.data, n);
    if (!extended.ok()) return extended.status();
    crc = *extended;
  }
  writer.crc_ = crc;
  writer.position_ = resume_from_byte;
  if (payload_out_of_band) {
    // Runs of sections that are consecutive in this process's memory move
    // as a few large pieces rather than one or more per section.
    v1::ShardHeader& h = writer.header_;
    int previous = -1;  // The last non-empty section.
    for (int k = 0; k < h.sections_size(); ++k) {
      const int64_t length = h.sections(k).byte_length();
      if (length == 0) continue;
      h.mutable_sections(k)->set_follows_previous(
          previous >= 0 &&
          writer.sources_[previous].data + h.sections(previous).byte_length() ==
              writer.sources_[k].data);
      previous = k;
    }
    h.set_payload_out_of_band(true);
    h.set_chunk_bytes(writer.max_chunk_bytes_);
    writer.pieces_ = writer.PiecesFrom(resume_from_byte);
    writer.out_of_band_ = true;
    if (!piece_crcs.empty() && piece_crcs.size() != writer.pieces_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(piece_crcs.size(), " precomputed piece CRCs for ",
                       writer.pieces_.size(), " pieces"));
    }
    writer.piece_crcs_ = std::move(piece_crcs);
  } else if (!piece_crcs.empty()) {
    return absl::InvalidArgumentError(
        "precomputed piece CRCs without the payload out of band");
  }
  return writer;
}

std::vector<PayloadPiece> ShardStreamWriter::PiecesFrom(int64_t byte) const {
  std::vector<PayloadPiece> pieces =
      PayloadPieces(header_, max_chunk_bytes_, byte);
  for (PayloadPiece& piece : pieces) {
    // The writer only reads; the pointer type is shared with the assembler.
    piece.data = const_cast<uint8_t*>(sources_[piece.section].data) +
                 piece.section_offset;
  }
  return pieces;
}

std::vector<PayloadPiece> ShardStreamWriter::PendingPieces() const {
  if (!out_of_band_ || phase_ == Phase::kDone) return {};
  return std::vector<PayloadPiece>(pieces_.begin() + next_piece_,
                                   pieces_.end());
}

bool ShardStreamWriter::Next(v1::FetchShardResponse* out) {
  switch (phase_) {
    case Phase::kHeader:
      *out->mutable_header() = header_;
      phase_ = Phase::kChunks;
      return true;
    case Phase::kChunks: {
      if (out_of_band_) return NextPiece(out);
      const int n = static_cast<int>(sources_.size());
      while (section_ < n &&
             position_ >= sources_[section_].section.stream_offset() +
                              sources_[section_].section.byte_length()) {
        ++section_;
      }
      if (section_ == n) {
        v1::ShardTrailer* trailer = out->mutable_trailer();
        trailer->set_total_bytes(header_.total_bytes());
        trailer->set_crc32c(crc_);
        phase_ = Phase::kDone;
        return true;
      }
      const SectionSource& source = sources_[section_];
      const int64_t section_offset = position_ - source.section.stream_offset();
      const int64_t length = std::min(
          max_chunk_bytes_, source.section.byte_length() - section_offset);
      const uint8_t* data = source.data + section_offset;
      v1::ShardChunk* chunk = out->mutable_chunk();
      chunk->set_section(section_);
      chunk->set_section_offset(section_offset);
      chunk->set_stream_offset(position_);
      if (memory_->host_addressable()) {
        chunk->set_data(data, static_cast<size_t>(length));
      } else {
        std::string* bytes = chunk->mutable_data();
        bytes->resize(static_cast<size_t>(length));
        status_ = memory_->Read(reinterpret_cast<uint8_t*>(bytes->data()), data,
                                length);
        if (!status_.ok()) return false;
      }
      // One pass over the bytes: the whole-payload CRC is folded from the
      // chunk's.
      const uint32_t chunk_crc =
          core::Crc32c(reinterpret_cast<const uint8_t*>(chunk->data().data()),
                       static_cast<size_t>(length));
      chunk->set_crc32c(chunk_crc);
      crc_ =
          core::Crc32cCombine(crc_, chunk_crc, static_cast<uint64_t>(length));
      position_ += length;
      bytes_sent_ += length;
      return true;
    }
    case Phase::kDone:
      return false;
  }
  return false;
}

bool ShardStreamWriter::NextPiece(v1::FetchShardResponse* out) {
  if (next_piece_ == pieces_.size()) {
    v1::ShardTrailer* trailer = out->mutable_trailer();
    trailer->set_total_bytes(header_.total_bytes());
    trailer->set_crc32c(crc_);
    phase_ = Phase::kDone;
    return true;
  }
  const size_t index = next_piece_++;
  const PayloadPiece& piece = pieces_[index];
  v1::ShardChunk* chunk = out->mutable_chunk();
  chunk->set_section(piece.section);
  chunk->set_section_offset(piece.section_offset);
  chunk->set_stream_offset(piece.stream_offset);
  chunk->set_length(piece.length);
  uint32_t piece_crc = 0;
  if (!piece_crcs_.empty()) {
    piece_crc = piece_crcs_[index];
  } else {
    absl::StatusOr<uint32_t> crc =
        ShardCrc32cExtend(*memory_, 0, piece.data, piece.length);
    if (!crc.ok()) {
      status_ = crc.status();
      return false;
    }
    piece_crc = *crc;
  }
  chunk->set_crc32c(piece_crc);
  crc_ =
      core::Crc32cCombine(crc_, piece_crc, static_cast<uint64_t>(piece.length));
  position_ += piece.length;
  bytes_sent_ += piece.length;
  return true;
}

// ---------------------------------------------------------------------------
// ShardStreamAssembler

ShardStreamAssembler::ShardStreamAssembler(Destination dest,
                                           int64_t resume_from_byte,
                                           uint32_t crc_so_far,
                                           const ShardMemory& memory)
    : dest_(std::move(dest)),
      memory_(&memory),
      resume_from_byte_(resume_from_byte),
      verified_(resume_from_byte),
      crc_(crc_so_far) {}

absl::Status ShardStreamAssembler::Add(const v1::FetchShardResponse& msg) {
  if (!status_.ok()) return status_;
  absl::Status status;
  switch (msg.item_case()) {
    case v1::FetchShardResponse::kHeader:
      status = AddHeader(msg.header());
      break;
    case v1::FetchShardResponse::kChunk:
      status = AddChunk(msg.chunk());
      break;
    case v1::FetchShardResponse::kTrailer:
      status = AddTrailer(msg.trailer());
      break;
    case v1::FetchShardResponse::ITEM_NOT_SET:
      status = absl::InvalidArgumentError(
          "FetchShardResponse without header, chunk or trailer");
      break;
  }
  status_ = status;
  return status;
}

absl::Status ShardStreamAssembler::AddHeader(const v1::ShardHeader& header) {
  if (phase_ != Phase::kHeader) {
    return absl::FailedPreconditionError(phase_ == Phase::kDone
                                             ? "header after the trailer"
                                             : "second header in one stream");
  }
  if (resume_from_byte_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resume_from_byte ", resume_from_byte_, " < 0"));
  }
  absl::Status layout = ValidateShardHeaderLayout(header);
  if (!layout.ok()) return layout;
  if (header.payload_out_of_band() && header.chunk_bytes() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("header chunk_bytes ", header.chunk_bytes(),
                     " must be > 0 with the payload out of band"));
  }
  if (resume_from_byte_ > header.total_bytes()) {
    return absl::OutOfRangeError(
        absl::StrCat("resume_from_byte ", resume_from_byte_,
                     " is beyond the transfer's size ", header.total_bytes()));
  }
  std::vector<uint8_t*> destinations;
  destinations.reserve(header.sections_size());
  for (int i = 0; i < header.sections_size(); ++i) {
    absl::StatusOr<uint8_t*> dest = dest_(header, i);
    if (!dest.ok()) return dest.status();
    if (*dest == nullptr && header.sections(i).byte_length() > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("no destination for ", DescribeSection(header, i), " (",
                       header.sections(i).byte_length(), " bytes)"));
    }
    destinations.push_back(*dest);
  }
  std::vector<PayloadPiece> pieces;
  if (header.payload_out_of_band()) {
    // A piece that runs on from one section into the next lands in one
    // receive, so our destinations must be consecutive wherever the
    // sender's sections are.
    int previous = -1;
    for (int k = 0; k < header.sections_size(); ++k) {
      if (header.sections(k).byte_length() == 0) continue;
      if (header.sections(k).follows_previous() &&
          (previous < 0 ||
           destinations[previous] + header.sections(previous).byte_length() !=
               destinations[k])) {
        return absl::FailedPreconditionError(absl::StrCat(
            DescribeSection(header, k),
            " follows the previous section in the sender's memory but not "
            "at its destination here: the payload cannot come out of band"));
      }
      previous = k;
    }
    pieces = PayloadPieces(header, header.chunk_bytes(), resume_from_byte_);
    for (PayloadPiece& piece : pieces) {
      piece.data = destinations[piece.section] + piece.section_offset;
    }
  }
  header_ = header;
  destinations_ = std::move(destinations);
  pieces_ = std::move(pieces);
  phase_ = Phase::kChunks;
  return absl::OkStatus();
}

absl::Status ShardStreamAssembler::AddChunk(const v1::ShardChunk& chunk) {
  if (phase_ != Phase::kChunks) {
    return absl::FailedPreconditionError(phase_ == Phase::kHeader
                                             ? "chunk before the header"
                                             : "chunk after the trailer");
  }
  if (chunk.stream_offset() != verified_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "chunk at stream byte ", chunk.stream_offset(), ", expected byte ",
        verified_, " (out of order, repeated or missing)"));
  }
  if (header_.payload_out_of_band()) return AddPiece(chunk);
  if (chunk.data().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty chunk at stream byte ", chunk.stream_offset()));
  }
  const int n = header_.sections_size();
  while (section_ < n &&
         verified_ >= header_.sections(section_).stream_offset() +
                          header_.sections(section_).byte_length()) {
    ++section_;
  }
  if (chunk.section() < 0 || chunk.section() >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk at stream byte ", chunk.stream_offset(),
                     " names section ", chunk.section(), " of ", n));
  }
  if (section_ == n) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk after all ", header_.total_bytes(),
                     " bytes (expected the trailer)"));
  }
  if (chunk.section() != section_) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk for ", DescribeSection(header_, chunk.section()),
                     " at stream byte ", verified_, ", which belongs to ",
                     DescribeSection(header_, section_)));
  }
  const v1::ShardSection& section = header_.sections(section_);
  const int64_t section_offset = verified_ - section.stream_offset();
  if (chunk.section_offset() != section_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk at stream byte ", verified_, ": section_offset ",
                     chunk.section_offset(), ", expected ", section_offset,
                     " in ", DescribeSection(header_, section_)));
  }
  const int64_t size = static_cast<int64_t>(chunk.data().size());
  if (size > section.byte_length() - section_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk at byte ", section_offset, " of ",
                     DescribeSection(header_, section_), ": ", size,
                     " bytes run past the section's end (",
                     section.byte_length(), " bytes)"));
  }
  const uint32_t crc = core::Crc32c(chunk.data().data(), chunk.data().size());
  if (crc != chunk.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "chunk at byte %d of %s: crc32c mismatch (chunk says 0x%08x, data "
        "has 0x%08x)",
        section_offset, DescribeSection(header_, section_), chunk.crc32c(),
        crc));
  }
  if (absl::Status s = memory_->Write(
          destinations_[section_] + section_offset,
          reinterpret_cast<const uint8_t*>(chunk.data().data()), size);
      !s.ok()) {
    return s;
  }
  crc_ = core::Crc32cCombine(crc_, crc, chunk.data().size());
  verified_ += size;
  return absl::OkStatus();
}

absl::Status ShardStreamAssembler::AddPiece(const v1::ShardChunk& chunk) {
  if (!chunk.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at stream byte ", chunk.stream_offset(),
        " carries data, but the header sends the payload out of band"));
  }
  if (next_piece_ == pieces_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("chunk after all ", header_.total_bytes(),
                     " bytes (expected the trailer)"));
  }
  const PayloadPiece& piece = pieces_[next_piece_];
  if (chunk.section() != piece.section ||
      chunk.section_offset() != piece.section_offset ||
      chunk.length() != piece.length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at stream byte ", chunk.stream_offset(), ": section ",
        chunk.section(), " offset ", chunk.section_offset(), " length ",
        chunk.length(), " is not the piece's (",
        DescribeSection(header_, piece.section), " offset ",
        piece.section_offset, " length ", piece.length, ", chunk_bytes ",
        header_.chunk_bytes(), ")"));
  }
  // The bytes are at their destination already.
  absl::StatusOr<uint32_t> checked =
      ShardCrc32cExtend(*memory_, 0, piece.data, piece.length);
  if (!checked.ok()) return checked.status();
  const uint32_t crc = *checked;
  if (crc != chunk.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "piece at byte %d of %s (%d bytes): crc32c mismatch (chunk says "
        "0x%08x, data has 0x%08x)",
        piece.section_offset, DescribeSection(header_, piece.section),
        piece.length, chunk.crc32c(), crc));
  }
  crc_ = core::Crc32cCombine(crc_, crc, static_cast<uint64_t>(piece.length));
  verified_ += piece.length;
  ++next_piece_;
  return absl::OkStatus();
}

absl::Status ShardStreamAssembler::AddTrailer(const v1::ShardTrailer& trailer) {
  if (phase_ != Phase::kChunks) {
    return absl::FailedPreconditionError(phase_ == Phase::kHeader
                                             ? "trailer before the header"
                                             : "second trailer");
  }
  if (trailer.total_bytes() != header_.total_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("trailer total_bytes ", trailer.total_bytes(),
                     " != header total_bytes ", header_.total_bytes()));
  }
  if (verified_ != header_.total_bytes()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trailer after ", verified_, " of ", header_.total_bytes(), " bytes"));
  }
  if (trailer.crc32c() != crc_) {
    return absl::DataLossError(absl::StrFormat(
        "whole-stream crc32c mismatch over %d bytes (trailer says 0x%08x, "
        "received data has 0x%08x)",
        verified_, trailer.crc32c(), crc_));
  }
  phase_ = Phase::kDone;
  return absl::OkStatus();
}

std::vector<PayloadPiece> ShardStreamAssembler::PendingPieces() const {
  if (phase_ != Phase::kChunks) return {};
  return std::vector<PayloadPiece>(pieces_.begin() + next_piece_,
                                   pieces_.end());
}

absl::Status ShardStreamAssembler::Finish() const {
  if (!status_.ok()) return status_;
  switch (phase_) {
    case Phase::kDone:
      return absl::OkStatus();
    case Phase::kHeader:
      return absl::FailedPreconditionError("stream ended before the header");
    case Phase::kChunks:
      return absl::FailedPreconditionError(
          absl::StrCat("stream ended after ", verified_, " of ",
                       header_.total_bytes(), " bytes without a trailer"));
  }
  return absl::InternalError("unreachable");
}

}  // namespace shardd::recovery
