#include "daemon/comm/all_gather_algorithm.h"

#include <cstdlib>

namespace shardd::comm {

namespace {

// From scripts/bench collectives at W = 4 and 8 (docs/benchmarks.md).
constexpr int64_t kDirectMaxPartBytes = int64_t{2} << 20;

}  // namespace

AllGatherAlgorithm ChooseAllGatherAlgorithm(int world, int64_t max_part_bytes,
                                            absl::string_view forced) {
  if (forced == "ring") return AllGatherAlgorithm::kRing;
  if (forced == "direct") return AllGatherAlgorithm::kDirect;
  if (world <= 2 || max_part_bytes <= kDirectMaxPartBytes) {
    return AllGatherAlgorithm::kDirect;
  }
  return AllGatherAlgorithm::kRing;
}

absl::string_view ForcedAllGatherAlgorithm() {
  static const char* const forced = std::getenv("SHARDD_ALL_GATHER");
  return forced != nullptr ? absl::string_view(forced) : absl::string_view();
}

}  // namespace shardd::comm
