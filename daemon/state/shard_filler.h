#ifndef SHARDD_DAEMON_STATE_SHARD_FILLER_H_
#define SHARDD_DAEMON_STATE_SHARD_FILLER_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "daemon/node/engine_math.h"

namespace shardd::state {

// Writes fp32 ranges read from files into an engine's state sections (a
// shard of parameters or optimizer state), with as few copies as the
// memory allows:
// - host memory (the CPU backend): each range is read straight into the
//   section, no staging at all;
// - device memory: through one host staging buffer of at most
//   `staging_bytes`, reused for every range and every section, and
//   uploaded piece by piece.
// Elements of the section that no range covers (padding, or a tensor the
// source does not hold) are set to zero, as a zeroed staging buffer would.
//
// Not thread-safe: one import at a time. `math` is borrowed and must
// outlive the filler.
class ShardFiller {
 public:
  // One piece of a section: `numel` elements at element `dest_offset`,
  // read by `read(done, count, out)`: `count` elements starting `done`
  // elements into the piece (the whole piece at once into host memory,
  // at most the staging buffer's worth at a time into device memory).
  struct Piece {
    int64_t dest_offset = 0;
    int64_t numel = 0;
    std::function<absl::Status(int64_t done, int64_t count, float* out)> read;
  };

  static constexpr int64_t kDefaultStagingBytes = int64_t{8} << 20;

  explicit ShardFiller(node::EngineMath& math,
                       int64_t staging_bytes = kDefaultStagingBytes);

  // Fills section [data, data + numel * 4) from `pieces` (disjoint, inside
  // the section); zeroes what they leave uncovered when `zero_rest`.
  absl::Status Fill(uint8_t* data, int64_t numel, std::vector<Piece> pieces,
                    bool zero_rest);

  // The host staging buffer's size now (0 until a device section needed
  // it): what the import holds beyond the engine's own memory.
  int64_t staging_bytes_used() const {
    return static_cast<int64_t>(staging_.capacity() * sizeof(float));
  }

 private:
  absl::Status ReadPiece(uint8_t* data, const Piece& piece);

  node::EngineMath& math_;
  const int64_t staging_elements_;
  std::vector<float> staging_;
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_SHARD_FILLER_H_
