#include "daemon/comm/gloo_pair_exchange_all_reduce.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {

void GlooPairExchangeAllReduce(gloo::Context& context,
                               const GlooBufferFactory& make_buffer,
                               const GlooPairExchangeAllReduceArgs& args) {
  const int peer = 1 - context.rank;
  const int64_t count = args.count;
  if (count == 0) return;
  const int64_t seg = args.segment_elements;
  const int64_t segments = (count + seg - 1) / seg;
  auto length = [&](int64_t k) { return std::min(seg, count - k * seg); };
  constexpr size_t kF32 = sizeof(float);
  std::unique_ptr<GlooAbortableBuffer> from =
      make_buffer(args.scratch, static_cast<size_t>(count) * kF32);
  for (int64_t k = 0; k < segments; ++k) {
    from->recv(peer, args.slot, static_cast<size_t>(k * seg) * kF32,
               static_cast<size_t>(length(k)) * kF32);
  }
  std::unique_ptr<GlooAbortableBuffer> to = make_buffer(
      const_cast<float*>(args.input), static_cast<size_t>(count) * kF32);
  for (int64_t k = 0; k < segments; ++k) {
    to->send(peer, args.slot, static_cast<size_t>(k * seg) * kF32,
             static_cast<size_t>(length(k)) * kF32);
  }
  // Segments arrive in order (one pair, one slot): sum each at once.
  for (int64_t k = 0; k < segments; ++k) {
    from->WaitRecv();
    float* sum = args.scratch + k * seg;
    AddTo(sum, sum, args.input + k * seg, length(k));
  }
  // The output may alias the input: written once every send of it is done.
  for (int64_t k = 0; k < segments; ++k) to->WaitSend();
  for (int64_t k = 0; k < segments; ++k) {
    args.finish(args.scratch + k * seg, k * seg, length(k));
  }
}

}  // namespace shardd::comm
