#include "daemon/comm/gloo_direct_reduce_scatter.h"

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

void GlooDirectReduceScatter(gloo::Context& context,
                             const GlooBufferFactory& make_buffer,
                             const GlooRingReduceScatterArgs& args) {
  const int world = context.size;
  const int rank = context.rank;
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
  const int64_t mine = counts[rank];
  const int64_t segments = (mine + seg - 1) / seg;
  auto length = [&](int64_t count, int64_t k) {
    return std::min(seg, count - k * seg);
  };
  // Peers in the ring's summation order for this rank's block: rank+1,
  // rank+2, ..., rank-1 (this rank's own input is added last).
  std::vector<int> order;
  for (int i = 1; i < world; ++i) order.push_back((rank + i) % world);

  // One receive buffer per peer (its region of the scratch), used as a ring
  // of `slots` segments: segment k lands in slot k % slots, and is posted
  // again for segment k + slots once summed. The first `slots` receives
  // are posted before anything is sent. A small window keeps the slots in
  // cache between the kernel's copy and the sum.
  const int64_t window = args.window_segments;
  const int64_t slots =
      window > 0 ? std::min<int64_t>(window, segments) : segments;
  // Each peer's region: the window's slots, or its whole block.
  const int64_t stride =
      window > 0 ? std::min(max_count, window * seg) : max_count;
  auto region = [&](int i) { return args.scratch + i * stride; };
  std::vector<std::unique_ptr<GlooAbortableBuffer>> from(world);
  auto post = [&](int peer, int64_t k) {
    from[peer]->recv(peer, slot, static_cast<size_t>((k % slots) * seg) * kF32,
                     static_cast<size_t>(length(mine, k)) * kF32);
  };
  for (int i = 0; i < world - 1; ++i) {
    const int peer = order[i];
    from[peer] = make_buffer(region(i), static_cast<size_t>(stride) * kF32);
    for (int64_t k = 0; k < slots; ++k) post(peer, k);
  }
  std::unique_ptr<GlooAbortableBuffer> in =
      make_buffer(const_cast<float*>(args.input),
                  static_cast<size_t>(offset[world]) * kF32);
  // Send each peer its block, segment by segment, the peers that sum this
  // rank's input early first (they can start reducing sooner).
  int64_t sends = 0;
  for (int i = 1; i < world; ++i) {
    const int peer = (rank + world - i) % world;
    for (int64_t k = 0; k * seg < counts[peer]; ++k) {
      in->send(peer, slot, static_cast<size_t>(offset[peer] + k * seg) * kF32,
               static_cast<size_t>(length(counts[peer], k)) * kF32);
      ++sends;
    }
  }
  // Segment by segment: acc = in[rank+1] + in[rank+2] + ... + in[rank-1],
  // then out = acc + own input, exactly the ring's order of additions.
  const float* own = args.input + offset[rank];
  for (int64_t k = 0; k < segments; ++k) {
    const int64_t begin = k * seg;
    const int64_t at = (k % slots) * seg;
    const int64_t n = length(mine, k);
    float* acc = region(0) + at;  // The first peer's slot accumulates.
    from[order[0]]->WaitRecv();
    for (int i = 1; i < world - 1; ++i) {
      from[order[i]]->WaitRecv();
      AddTo(acc, acc, region(i) + at, n);
    }
    AddTo(args.output + begin, acc, own + begin, n);
    if (k + slots < segments) {
      for (int i = 0; i < world - 1; ++i) post(order[i], k + slots);
    }
  }
  for (int64_t i = 0; i < sends; ++i) in->WaitSend();
}

}  // namespace shardd::comm
