#include "daemon/comm/gloo_ring_reduce_scatter.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {
namespace {

constexpr size_t kF32 = sizeof(float);

}  // namespace

void GlooRingReduceScatter(gloo::Context& context,
                           const GlooBufferFactory& make_buffer,
                           const GlooRingReduceScatterArgs& args) {
  const int world = context.size;
  const int rank = context.rank;
  const int right = (rank + 1) % world;
  const int left = (rank + world - 1) % world;
  const std::vector<int64_t>& counts = args.counts;
  const int64_t seg = args.segment_elements;
  const uint64_t slot = args.slot;

  std::vector<int64_t> offset(world + 1, 0);
  int64_t max_count = 0;
  for (int b = 0; b < world; ++b) {
    offset[b + 1] = offset[b] + counts[b];
    max_count = std::max(max_count, counts[b]);
  }
  if (offset[world] == 0) return;

  auto mod = [world](int x) { return ((x % world) + world) % world; };
  // The block this rank receives at step s (and forwards at step s + 1).
  auto block_recv = [&](int s) { return mod(rank - 2 - s); };
  auto num_segments = [&](int b) { return (counts[b] + seg - 1) / seg; };
  auto segment_length = [&](int b, int64_t k) {
    return std::min(seg, counts[b] - k * seg);
  };

  std::unique_ptr<GlooAbortableBuffer> in =
      make_buffer(const_cast<float*>(args.input),
                  static_cast<size_t>(offset[world]) * kF32);
  const int steps = world - 1;
  // One receive buffer per step, and every receive of every step posted
  // now. Gloo's TCP transport sends a segment only once the receiver has
  // posted its receive; posting them all up front means the left peer never
  // waits on this rank's progress, only on the data it forwards.
  std::vector<std::unique_ptr<GlooAbortableBuffer>> ring(steps);
  for (int s = 0; s < steps; ++s) {
    ring[s] = make_buffer(args.scratch + s * max_count,
                          static_cast<size_t>(max_count) * kF32);
    const int b = block_recv(s);
    for (int64_t k = 0; k < num_segments(b); ++k) {
      ring[s]->recv(left, slot, static_cast<size_t>(k * seg) * kF32,
                    static_cast<size_t>(segment_length(b, k)) * kF32);
    }
  }
  // Step 0 sends this rank's own input of block rank - 1.
  const int first_block = mod(rank - 1);
  const int64_t first_segments = num_segments(first_block);
  for (int64_t k = 0; k < first_segments; ++k) {
    in->send(right, slot,
             static_cast<size_t>(offset[first_block] + k * seg) * kF32,
             static_cast<size_t>(segment_length(first_block, k)) * kF32);
  }
  // Receives of (s, k) arrive in the order the left peer sends them, which
  // is the order they were posted; each reduced segment is forwarded at
  // once, so segment k + 1 arrives while segment k is added and sent.
  for (int s = 0; s < steps; ++s) {
    const int b = block_recv(s);
    const bool last = s == steps - 1;
    float* acc = args.scratch + s * max_count;
    const float* mine = args.input + offset[b];
    for (int64_t k = 0; k < num_segments(b); ++k) {
      ring[s]->WaitRecv();
      const int64_t begin = k * seg;
      const int64_t n = segment_length(b, k);
      if (!last) {
        AddTo(acc + begin, acc + begin, mine + begin, n);
        ring[s]->send(right, slot, static_cast<size_t>(begin) * kF32,
                      static_cast<size_t>(n) * kF32);
      } else {
        AddTo(args.output + begin, acc + begin, mine + begin, n);
      }
    }
  }
  for (int64_t k = 0; k < first_segments; ++k) in->WaitSend();
  for (int s = 0; s + 1 < steps; ++s) {
    for (int64_t k = 0; k < num_segments(block_recv(s)); ++k) {
      ring[s]->WaitSend();
    }
  }
}

}  // namespace shardd::comm
