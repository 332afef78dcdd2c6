#include "daemon/comm/gloo_halving_reduce_scatter.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {
namespace {

constexpr size_t kF32 = sizeof(float);

}  // namespace

void GlooHalvingReduceScatter(gloo::Context& context,
                              const GlooBufferFactory& make_buffer,
                              const GlooRingReduceScatterArgs& args) {
  const int world = context.size;
  const int rank = context.rank;
  std::vector<int64_t> offset(world + 1, 0);
  for (int b = 0; b < world; ++b) offset[b + 1] = offset[b] + args.counts[b];
  if (offset[world] == 0) return;
  // Every step's receive is posted before anything is sent: over TCP a
  // receive tells its peer it is ready, and a send waits for that, so
  // posting them all at once leaves one round trip exposed, not log2(W).
  struct Step {
    int partner = 0;
    int mine_lo = 0, mine_hi = 0, other_lo = 0, other_hi = 0;
    int64_t n_mine = 0, n_other = 0;
    float* region = nullptr;  // Where this step receives.
    std::unique_ptr<GlooAbortableBuffer> recv;
  };
  std::vector<Step> steps;
  {
    int lo = 0;
    int hi = world;
    float* region = args.scratch;
    for (int d = world / 2; d >= 1; d /= 2) {
      Step st;
      st.partner = rank ^ d;
      const int mid = lo + (hi - lo) / 2;
      const bool low_half = rank < mid;
      st.mine_lo = low_half ? lo : mid;
      st.mine_hi = low_half ? mid : hi;
      st.other_lo = low_half ? mid : lo;
      st.other_hi = low_half ? hi : mid;
      st.n_mine = offset[st.mine_hi] - offset[st.mine_lo];
      st.n_other = offset[st.other_hi] - offset[st.other_lo];
      st.region = region;
      if (st.n_mine > 0) {
        st.recv = make_buffer(region, static_cast<size_t>(st.n_mine) * kF32);
        st.recv->recv(st.partner, args.slot, 0,
                      static_cast<size_t>(st.n_mine) * kF32);
      }
      region += st.n_mine;
      lo = st.mine_lo;
      hi = st.mine_hi;
      steps.push_back(std::move(st));
    }
  }
  // The current partial sums cover blocks from acc_lo on; block b's
  // elements start at acc + offset[b] - offset[acc_lo].
  const float* acc = args.input;
  int acc_lo = 0;
  std::vector<std::unique_ptr<GlooAbortableBuffer>> sending;
  for (size_t k = 0; k < steps.size(); ++k) {
    Step& st = steps[k];
    auto at = [&](int block) { return acc + (offset[block] - offset[acc_lo]); };
    if (st.n_other > 0) {
      sending.push_back(make_buffer(const_cast<float*>(at(st.other_lo)),
                                    static_cast<size_t>(st.n_other) * kF32));
      sending.back()->send(st.partner, args.slot, 0,
                           static_cast<size_t>(st.n_other) * kF32);
    }
    if (st.recv != nullptr) st.recv->WaitRecv();
    if (k + 1 == steps.size()) {
      // mine = [rank, rank + 1): the block's sum goes to the output.
      AddTo(args.output, st.region, at(rank), st.n_mine);
    } else {
      AddTo(st.region, st.region, at(st.mine_lo), st.n_mine);
      acc = st.region;
      acc_lo = st.mine_lo;
    }
  }
  for (auto& s : sending) s->WaitSend();
}

}  // namespace shardd::comm
