#include "daemon/comm/gloo_pair_all_reduce.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {
namespace {

constexpr size_t kF32 = sizeof(float);

}  // namespace

void GlooPairAllReduce(gloo::Context& context,
                       const GlooBufferFactory& make_buffer,
                       const GlooPairAllReduceArgs& args) {
  const int rank = context.rank;
  const int peer = 1 - rank;
  const int64_t count = args.count;
  if (count == 0) return;
  const int64_t offsets[2] = {0, args.split};
  const int64_t counts[2] = {args.split, count - args.split};
  const int64_t mine = counts[rank];
  const int64_t theirs = counts[peer];
  const int64_t my_offset = offsets[rank];
  const int64_t peer_offset = offsets[peer];
  const int64_t seg = args.segment_elements;
  const int64_t es = args.element_size;
  const int64_t my_segments = (mine + seg - 1) / seg;
  const int64_t peer_segments = (theirs + seg - 1) / seg;
  auto length = [&](int64_t half, int64_t k) {
    return std::min(seg, half - k * seg);
  };
  const uint64_t input_slot = args.slot;
  const uint64_t result_slot = args.slot + 1;

  // The peer's input of this rank's half lands in a ring of `slots`
  // segment slots: segment k in slot k % slots, posted again for segment
  // k + slots once summed (a small window stays in cache between the
  // kernel's copy and the sum).
  const int64_t window = args.window_segments;
  const int64_t slots =
      window > 0 ? std::min<int64_t>(window, my_segments) : my_segments;
  const int64_t stride = window > 0 ? std::min(mine, window * seg) : mine;
  std::unique_ptr<GlooAbortableBuffer> from;
  auto post = [&](int64_t k) {
    from->recv(peer, input_slot, static_cast<size_t>((k % slots) * seg) * kF32,
               static_cast<size_t>(length(mine, k)) * kF32);
  };
  if (mine > 0) {
    from = make_buffer(args.scratch, static_cast<size_t>(stride) * kF32);
    for (int64_t k = 0; k < slots; ++k) post(k);
  }
  // The peer's finished half arrives in place in the output, every
  // segment posted now: no window, so no round trip holds the peer's sends
  // back.
  std::unique_ptr<GlooAbortableBuffer> out =
      make_buffer(args.output, static_cast<size_t>(count * es));
  for (int64_t j = 0; j < peer_segments; ++j) {
    out->recv(peer, result_slot,
              static_cast<size_t>((peer_offset + j * seg) * es),
              static_cast<size_t>(length(theirs, j) * es));
  }
  // This rank's input of the peer's half, in the same segments as the
  // results that come back (the in-place argument in the header relies on
  // it).
  std::unique_ptr<GlooAbortableBuffer> in;
  if (theirs > 0) {
    in = make_buffer(const_cast<float*>(args.input),
                     static_cast<size_t>(count) * kF32);
    for (int64_t j = 0; j < peer_segments; ++j) {
      in->send(peer, input_slot,
               static_cast<size_t>(peer_offset + j * seg) * kF32,
               static_cast<size_t>(length(theirs, j)) * kF32);
    }
  }
  // Sum each segment of this rank's half as it arrives (peer + own, the
  // reduce-scatter's order), finish it and send it back at once.
  const float* own = args.input + my_offset;
  for (int64_t k = 0; k < my_segments; ++k) {
    const int64_t begin = k * seg;
    const int64_t n = length(mine, k);
    from->WaitRecv();
    float* sum = args.sums + begin;
    AddTo(sum, args.scratch + (k % slots) * seg, own + begin, n);
    args.finish(sum, my_offset + begin, n);
    out->send(peer, result_slot, static_cast<size_t>((my_offset + begin) * es),
              static_cast<size_t>(n * es));
    if (k + slots < my_segments) post(k + slots);
  }
  for (int64_t j = 0; j < peer_segments; ++j) {
    in->WaitSend();
    out->WaitRecv();
  }
  for (int64_t k = 0; k < my_segments; ++k) out->WaitSend();
}

}  // namespace shardd::comm
