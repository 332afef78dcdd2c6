#include "daemon/state/shard_filler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::state {

ShardFiller::ShardFiller(node::EngineMath& math, int64_t staging_bytes)
    : math_(math), staging_elements_(std::max<int64_t>(1, staging_bytes / 4)) {}

absl::Status ShardFiller::Fill(uint8_t* data, int64_t numel,
                               std::vector<Piece> pieces, bool zero_rest) {
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.dest_offset < b.dest_offset;
  });
  int64_t covered = 0;  // Elements [0, covered) are written or zeroed.
  for (const Piece& piece : pieces) {
    if (piece.dest_offset < covered || piece.numel < 0 ||
        piece.dest_offset + piece.numel > numel) {
      return absl::InternalError(absl::StrCat(
          "shard filler: piece [", piece.dest_offset, ", ",
          piece.dest_offset + piece.numel, ") overlaps another or leaves the ",
          numel, "-element section"));
    }
    if (zero_rest && piece.dest_offset > covered) {
      if (absl::Status s =
              math_.Zero(data + covered * 4, (piece.dest_offset - covered) * 4);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = ReadPiece(data, piece); !s.ok()) return s;
    covered = piece.dest_offset + piece.numel;
  }
  if (zero_rest && numel > covered) {
    return math_.Zero(data + covered * 4, (numel - covered) * 4);
  }
  return absl::OkStatus();
}

absl::Status ShardFiller::ReadPiece(uint8_t* data, const Piece& piece) {
  float* dest = reinterpret_cast<float*>(data) + piece.dest_offset;
  if (!math_.device_memory()) {
    // Host memory: the file's bytes land where they stay.
    return piece.numel == 0 ? absl::OkStatus()
                            : piece.read(0, piece.numel, dest);
  }
  for (int64_t done = 0; done < piece.numel;) {
    const int64_t n = std::min(staging_elements_, piece.numel - done);
    if (static_cast<int64_t>(staging_.size()) < n) staging_.resize(n);
    if (absl::Status s = piece.read(done, n, staging_.data()); !s.ok()) {
      return s;
    }
    if (absl::Status s = math_.Upload(dest + done, staging_.data(), n * 4);
        !s.ok()) {
      return s;
    }
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace shardd::state
