#include "daemon/comm/reduce_scatter_algorithm.h"

#include <algorithm>
#include <cstdlib>

namespace shardd::comm {
namespace {

// Small blocks, where per-message latency dominates, go to recursive
// halving (log2 W steps, at power-of-two W > 2), middle ones to the direct
// exchange (one step), large ones to the bandwidth-optimal ring. The
// thresholds come from scripts/bench collectives (docs/benchmarks.md).
constexpr int64_t kHalvingMaxBlockBytes = int64_t{256} << 10;
constexpr int64_t kDirectMaxBlockBytes = int64_t{2} << 20;

}  // namespace

ReduceScatterAlgorithm ChooseReduceScatterAlgorithm(int world,
                                                    int64_t max_count,
                                                    absl::string_view forced) {
  const bool power_of_two = world > 0 && (world & (world - 1)) == 0;
  if (forced == "ring") return ReduceScatterAlgorithm::kRing;
  if (forced == "direct") return ReduceScatterAlgorithm::kDirect;
  if (forced == "halving" && power_of_two) {
    return ReduceScatterAlgorithm::kHalving;
  }
  if (world == 2) return ReduceScatterAlgorithm::kDirect;
  const int64_t block_bytes = max_count * static_cast<int64_t>(sizeof(float));
  if (power_of_two && world > 2 && block_bytes <= kHalvingMaxBlockBytes) {
    return ReduceScatterAlgorithm::kHalving;
  }
  return block_bytes <= kDirectMaxBlockBytes ? ReduceScatterAlgorithm::kDirect
                                             : ReduceScatterAlgorithm::kRing;
}

ReduceScatterPipelining ChooseReduceScatterPipelining(int world,
                                                      int64_t max_count) {
  constexpr int64_t kMiBElements = (int64_t{1} << 20) / sizeof(float);
  ReduceScatterPipelining pipelining;
  if (world == 2) {
    pipelining.segment_elements =
        std::clamp<int64_t>(max_count, 1, kMiBElements);
    pipelining.window_segments = 2;
    return pipelining;
  }
  // Large enough for full bandwidth over TCP, small enough that reducing
  // one segment overlaps receiving the next; blocks of a few MiB still
  // pipeline in four.
  constexpr int64_t kMinElements = kMiBElements / 4;
  constexpr int64_t kSegmentsPerBlock = 4;
  pipelining.segment_elements =
      std::clamp((max_count + kSegmentsPerBlock - 1) / kSegmentsPerBlock,
                 kMinElements, kMiBElements);
  return pipelining;
}

absl::string_view ForcedReduceScatterAlgorithm() {
  static const char* const forced = std::getenv("SHARDD_REDUCE_SCATTER");
  return forced != nullptr ? absl::string_view(forced) : absl::string_view();
}

}  // namespace shardd::comm
