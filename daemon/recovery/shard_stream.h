// The FetchShard stream (peer.proto), both ends, without gRPC: a source
// turns its shard's sections into header, chunk and trailer messages; a
// replacement checks and assembles them into buffers it provides.
//
//   Source (FetchShard handler):
//     v1::ShardHeader header;  // epoch, source_rank, shard_index, step,
//                              // model, fingerprint, ...
//     auto writer = ShardStreamWriter::Create(header, sources,
//                                             request.max_chunk_bytes(),
//                                             request.resume_from_byte());
//     v1::FetchShardResponse msg;
//     while (writer->Next(&msg)) stream->Write(msg);
//
//   Target (recovering replacement):
//     ShardStreamAssembler assembler(
//         [&](const v1::ShardHeader& h, int s) -> absl::StatusOr<uint8_t*> {
//           // check h against the plan once (s == 0), then return where
//           // h.sections(s).byte_length() bytes go
//         });
//     while (reader->Read(&msg)) RETURN_IF_ERROR(assembler.Add(msg));
//     RETURN_IF_ERROR(assembler.Finish());  // only now install the shard
//
//   Resuming a broken stream: ask the next source with resume_from_byte =
//   assembler.verified_bytes() and assemble into a new
//   ShardStreamAssembler(dest, old.verified_bytes(), old.running_crc()); the
//   trailer's CRC then still covers the whole payload.
//
// Wire rules (the assembler enforces them, the writer follows them): one
// header first, listing sections that tile [0, total_bytes) in order;
// chunks in stream order, each inside one section, never empty, each with
// the CRC-32C of its data; then one trailer with total_bytes and the CRC-32C
// of the whole payload in stream order.
//
// Payload out of band (header.payload_out_of_band): the bytes travel
// elsewhere (the replica group's Send/Recv, straight from the source's shard
// into the replacement's, no copy), one piece per chunk, laid out by
// PayloadPieces(header, header.chunk_bytes, resume point); the chunks carry
// length and CRC but no data, and the assembler checks the CRC over the
// bytes already at the destination.

#ifndef SHARDD_DAEMON_RECOVERY_SHARD_STREAM_H_
#define SHARDD_DAEMON_RECOVERY_SHARD_STREAM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/recovery/shard_memory.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::recovery {

// One section's description and its bytes: section.byte_length() bytes at
// data (borrowed; may be null when byte_length is 0). The writer fills
// section.stream_offset.
struct SectionSource {
  v1::ShardSection section;
  const uint8_t* data = nullptr;
};

inline constexpr int64_t kDefaultMaxChunkBytes = int64_t{4} << 20;
inline constexpr int64_t kMaxChunkBytesCap = int64_t{16} << 20;
// The largest piece of a payload sent out of band. There a piece is one
// Send/Recv, not a message, so round trips do not set its size: the
// receiver's check does. The receiver checks each piece's CRC-32C as soon
// as it has landed, while the next ones arrive, so a piece must be small
// enough to be still in the cache when it is checked, and the last check,
// which nothing overlaps, must be short; it must be large enough that the
// per-piece hand-offs stay negligible. bench/recovery measures the copy
// against raw Gloo send/recv of the same bytes (docs/benchmarks.md).
inline constexpr int64_t kMaxPieceBytesCap = int64_t{8} << 20;

// One piece of the payload in stream order: `length` bytes at
// `section_offset` of section `section` (stream offset `stream_offset`).
// With the payload out of band each piece is one Send/Recv; `data` is the
// source's bytes (writer) or the destination (assembler).
struct PayloadPiece {
  int section = 0;
  int64_t section_offset = 0;
  int64_t stream_offset = 0;
  int64_t length = 0;
  uint8_t* data = nullptr;
};

// The pieces of a payload laid out by `header`'s sections, from stream byte
// `from_byte` on: chunk_bytes long, except that none crosses a section's end
// (empty sections have none). Both ends compute the same list. `data` is
// left null. Requires chunk_bytes > 0 and a valid layout.
std::vector<PayloadPiece> PayloadPieces(const v1::ShardHeader& header,
                                        int64_t chunk_bytes, int64_t from_byte);

// "section 2 (unit 1 kind ADAMW_EXP_AVG)"; for an index out of range,
// "section 9".
std::string DescribeSection(const v1::ShardHeader& header, int index);

// Checks that the header's sections tile [0, total_bytes) in order
// (stream_offset = sum of the previous byte_lengths, byte_length >= 0) and
// that the checksum is CRC32C. INVALID_ARGUMENT naming the section or field.
absl::Status ValidateShardHeaderLayout(const v1::ShardHeader& header);

// Produces the messages of one FetchShard stream from borrowed section
// bytes, which must stay valid and unchanged until Next returns false.
// Movable; not thread-safe (one stream, one thread).
class ShardStreamWriter {
 public:
  // Sets header.sections from sources (with stream offsets), total_bytes
  // and checksum = CRC32C. max_chunk_bytes <= 0 means 4 MiB; values above
  // 16 MiB are capped. resume_from_byte skips that much of the payload (its
  // CRC is computed here, so the trailer still covers everything).
  // INVALID_ARGUMENT for a negative byte_length, a null data pointer with
  // byte_length > 0, or resume_from_byte < 0; OUT_OF_RANGE for
  // resume_from_byte > the total.
  //
  // payload_out_of_band: the header says so (with chunk_bytes = the
  // effective chunk size), chunks carry `length` and their CRC but no data,
  // and the caller moves each of PendingPieces() itself (one Send each, in
  // order).
  //
  // piece_crcs (out of band only): the CRC-32C of every piece, in order,
  // computed earlier from the same bytes (a source that knew a copy was
  // coming); the chunks then carry them instead of reading the bytes again.
  // INVALID_ARGUMENT when their number is not the pieces'.
  //
  // The sources' bytes are read through `memory` (borrowed; it must outlive
  // the writer).
  static absl::StatusOr<ShardStreamWriter> Create(
      v1::ShardHeader header, std::vector<SectionSource> sources,
      int64_t max_chunk_bytes, int64_t resume_from_byte,
      bool payload_out_of_band = false, std::vector<uint32_t> piece_crcs = {},
      const ShardMemory& memory = ShardMemory::Host());

  // The pieces the chunks still to come describe, with the source's
  // pointers (the same pieces, in the same order, as the chunks Next will
  // produce).
  std::vector<PayloadPiece> PendingPieces() const;

  // Fills *out with the next message (header, then chunks, then the
  // trailer) and returns true; returns false once the trailer was produced,
  // or when reading the source memory failed (then status() says why).
  bool Next(v1::FetchShardResponse* out);
  // OK unless reading the sources failed.
  const absl::Status& status() const { return status_; }

  // Payload bytes put into chunks so far (the resumed prefix excluded).
  int64_t bytes_sent() const { return bytes_sent_; }
  // Stream offset of the next chunk (resume_from_byte + bytes_sent()).
  int64_t position() const { return position_; }
  const v1::ShardHeader& header() const { return header_; }

 private:
  enum class Phase { kHeader, kChunks, kDone };

  ShardStreamWriter() = default;
  // Out of band: the chunk after pieces_[next_piece_ - 1], or the trailer.
  bool NextPiece(v1::FetchShardResponse* out);
  // PayloadPieces from `byte` with the sources' pointers.
  std::vector<PayloadPiece> PiecesFrom(int64_t byte) const;

  v1::ShardHeader header_;
  std::vector<SectionSource> sources_;
  int64_t max_chunk_bytes_ = kDefaultMaxChunkBytes;
  bool out_of_band_ = false;
  std::vector<PayloadPiece> pieces_;  // Out of band: all, from the resume.
  std::vector<uint32_t> piece_crcs_;  // Given by the caller, or empty.
  size_t next_piece_ = 0;
  Phase phase_ = Phase::kHeader;
  int section_ = 0;
  int64_t position_ = 0;
  int64_t bytes_sent_ = 0;
  uint32_t crc_ = 0;
  const ShardMemory* memory_ = &ShardMemory::Host();
  absl::Status status_;
};

// Receives one FetchShard stream: validates every message, verifies every
// chunk's CRC before copying its data to the caller's destination, keeps
// the whole-stream CRC and checks the trailer. Nothing it wrote counts
// until Finish() returns OK; after an error the assembler stays failed
// (Add and Finish return that error) while verified_bytes() and
// running_crc() still describe the verified prefix, for resuming.
// Not thread-safe. Holds the destination pointers, which the caller owns.
class ShardStreamAssembler {
 public:
  // Called once per section, in order, when the header arrives (for every
  // section, also those before a resume point and empty ones, where null
  // is fine); returns where that section's byte_length bytes go. An error
  // it returns (e.g. a header that does not match the plan) fails Add
  // unchanged.
  using Destination = std::function<absl::StatusOr<uint8_t*>(
      const v1::ShardHeader& header, int section_index)>;

  // resume_from_byte and crc_so_far: the verified_bytes() and running_crc()
  // of an earlier assembler of the same transfer (0, 0 for a fresh one).
  // Chunks' bytes are written to the destinations, and out-of-band pieces
  // checked there, through `memory` (borrowed; it must outlive the
  // assembler).
  explicit ShardStreamAssembler(
      Destination dest, int64_t resume_from_byte = 0, uint32_t crc_so_far = 0,
      const ShardMemory& memory = ShardMemory::Host());

  // Error codes: FAILED_PRECONDITION for a message out of protocol order
  // (chunk before the header, a second header, a chunk not at
  // verified_bytes(), a trailer before all bytes, anything after the
  // trailer); INVALID_ARGUMENT for a malformed message (no item, sections
  // not tiling, an empty chunk or one outside its section, a trailer with
  // the wrong total); OUT_OF_RANGE when resume_from_byte exceeds the
  // header's total; DATA_LOSS "chunk at byte X of section S (unit U kind K):
  // crc32c mismatch ..." or a whole-stream CRC mismatch in the trailer.
  absl::Status Add(const v1::FetchShardResponse& msg);

  // OK only when the trailer arrived and verified; otherwise the earlier
  // error or FAILED_PRECONDITION saying how far the stream got.
  absl::Status Finish() const;

  // After a header with payload_out_of_band: the pieces still to receive,
  // from verified_bytes() on, with their destinations. The caller receives
  // each piece into its `data` (one Recv each, in order) and only then Adds
  // its chunk, whose CRC is checked over the bytes in place (nothing is
  // copied). Empty before the header or for an inline stream.
  std::vector<PayloadPiece> PendingPieces() const;

  // The header (empty until it arrived).
  const v1::ShardHeader& header() const { return header_; }
  // Payload bytes verified and copied, counting the resumed prefix: the
  // stream offset the next chunk must have.
  int64_t verified_bytes() const { return verified_; }
  // CRC-32C of payload bytes [0, verified_bytes()).
  uint32_t running_crc() const { return crc_; }
  // True once the trailer verified.
  bool done() const { return phase_ == Phase::kDone; }

 private:
  enum class Phase { kHeader, kChunks, kDone };

  absl::Status AddHeader(const v1::ShardHeader& header);
  absl::Status AddChunk(const v1::ShardChunk& chunk);
  absl::Status AddPiece(const v1::ShardChunk& chunk);
  absl::Status AddTrailer(const v1::ShardTrailer& trailer);

  Destination dest_;
  const ShardMemory* memory_;
  const int64_t resume_from_byte_;
  Phase phase_ = Phase::kHeader;
  absl::Status status_;  // First error; sticky.
  v1::ShardHeader header_;
  std::vector<uint8_t*> destinations_;
  std::vector<PayloadPiece> pieces_;  // Out of band: all, from the resume.
  size_t next_piece_ = 0;
  int section_ = 0;
  int64_t verified_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace shardd::recovery

#endif  // SHARDD_DAEMON_RECOVERY_SHARD_STREAM_H_
