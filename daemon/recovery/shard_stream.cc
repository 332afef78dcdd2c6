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
  for (int i = 0; i < header.sections_size(); ++i) {
    const v1::ShardSection& section = header.sections(i);
    const int64_t end = section.stream_offset() + section.byte_length();
    for (int64_t at = std::max(from_byte, section.stream_offset()); at < end;
         at += chunk_bytes) {
      pieces.push_back(
          PayloadPiece{.section = i,
                       .section_offset = at - section.stream_offset(),
                       .stream_offset = at,
                       .length = std::min(chunk_bytes, end - at),
                       .data = nullptr});
    }
  }
  return pieces;
}

// ---------------------------------------------------------------------------
// ShardStreamWriter

absl::StatusOr<ShardStreamWriter> ShardStreamWriter::Create(
    v1::ShardHeader header, std::vector<SectionSource> sources,
    int64_t max_chunk_bytes, int64_t resume_from_byte,
    bool payload_out_of_band) {
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
  writer.header_ = std::move(header);
  writer.sources_ = std::move(sources);
  writer.max_chunk_bytes_ = max_chunk_bytes <= 0
                                ? kDefaultMaxChunkBytes
                                : std::min(max_chunk_bytes, kMaxChunkBytesCap);
  // The CRC of the skipped prefix, so that the trailer covers everything.
  uint32_t crc = 0;
  for (const SectionSource& source : writer.sources_) {
    const int64_t start = source.section.stream_offset();
    if (start >= resume_from_byte) break;
    const int64_t n =
        std::min(source.section.byte_length(), resume_from_byte - start);
    crc = core::Crc32cExtend(crc, source.data, static_cast<size_t>(n));
  }
  writer.crc_ = crc;
  writer.position_ = resume_from_byte;
  writer.out_of_band_ = payload_out_of_band;
  writer.header_.set_payload_out_of_band(payload_out_of_band);
  writer.header_.set_chunk_bytes(payload_out_of_band ? writer.max_chunk_bytes_
                                                     : 0);
  return writer;
}

std::vector<PayloadPiece> ShardStreamWriter::PendingPieces() const {
  if (phase_ == Phase::kDone) return {};
  std::vector<PayloadPiece> pieces =
      PayloadPieces(header_, max_chunk_bytes_, position_);
  for (PayloadPiece& piece : pieces) {
    // The writer only reads; the pointer type is shared with the assembler.
    piece.data = const_cast<uint8_t*>(sources_[piece.section].data) +
                 piece.section_offset;
  }
  return pieces;
}

bool ShardStreamWriter::Next(v1::FetchShardResponse* out) {
  switch (phase_) {
    case Phase::kHeader:
      *out->mutable_header() = header_;
      phase_ = Phase::kChunks;
      return true;
    case Phase::kChunks: {
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
      if (out_of_band_) {
        chunk->set_length(length);
      } else {
        chunk->set_data(data, static_cast<size_t>(length));
      }
      // One pass over the bytes: the whole-payload CRC is folded from the
      // chunk's.
      const uint32_t chunk_crc =
          core::Crc32c(data, static_cast<size_t>(length));
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

// ---------------------------------------------------------------------------
// ShardStreamAssembler

ShardStreamAssembler::ShardStreamAssembler(Destination dest,
                                           int64_t resume_from_byte,
                                           uint32_t crc_so_far)
    : dest_(std::move(dest)),
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
  header_ = header;
  destinations_ = std::move(destinations);
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
  const bool out_of_band = header_.payload_out_of_band();
  if (out_of_band && !chunk.data().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at stream byte ", chunk.stream_offset(),
        " carries data, but the header sends the payload out of band"));
  }
  const int64_t size =
      out_of_band ? chunk.length() : static_cast<int64_t>(chunk.data().size());
  if (size <= 0) {
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
  if (size > section.byte_length() - section_offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk at byte ", section_offset, " of ",
                     DescribeSection(header_, section_), ": ", size,
                     " bytes run past the section's end (",
                     section.byte_length(), " bytes)"));
  }
  if (out_of_band && size != std::min(header_.chunk_bytes(),
                                      section.byte_length() - section_offset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk at byte ", section_offset, " of ",
        DescribeSection(header_, section_), ": length ", size,
        " is not the piece's (chunk_bytes ", header_.chunk_bytes(), ")"));
  }
  // Out of band the bytes are at their destination already.
  uint8_t* dest = destinations_[section_] + section_offset;
  const uint8_t* bytes =
      out_of_band ? dest
                  : reinterpret_cast<const uint8_t*>(chunk.data().data());
  const uint32_t crc = core::Crc32c(bytes, static_cast<size_t>(size));
  if (crc != chunk.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "chunk at byte %d of %s: crc32c mismatch (chunk says 0x%08x, data "
        "has 0x%08x)",
        section_offset, DescribeSection(header_, section_), chunk.crc32c(),
        crc));
  }
  if (!out_of_band) std::memcpy(dest, bytes, static_cast<size_t>(size));
  crc_ = core::Crc32cCombine(crc_, crc, static_cast<uint64_t>(size));
  verified_ += size;
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
  if (phase_ != Phase::kChunks || !header_.payload_out_of_band()) return {};
  std::vector<PayloadPiece> pieces =
      PayloadPieces(header_, header_.chunk_bytes(), verified_);
  for (PayloadPiece& piece : pieces) {
    piece.data = destinations_[piece.section] + piece.section_offset;
  }
  return pieces;
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
