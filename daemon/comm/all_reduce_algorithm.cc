#include "daemon/comm/all_reduce_algorithm.h"

#include <cstdlib>

namespace shardd::comm {

AllReduceAlgorithm ChooseAllReduceAlgorithm(int world, int64_t fp32_bytes,
                                            absl::string_view forced) {
  if (world != 2 || forced == "split") {
    return AllReduceAlgorithm::kReduceScatterThenGather;
  }
  if (forced == "fused") return AllReduceAlgorithm::kPairFused;
  if (forced == "exchange") return AllReduceAlgorithm::kPairExchange;
  return fp32_bytes <= kPairExchangeMaxBytes ? AllReduceAlgorithm::kPairExchange
                                             : AllReduceAlgorithm::kPairFused;
}

absl::string_view ForcedAllReduceAlgorithm() {
  static const char* const forced = std::getenv("SHARDD_ALL_REDUCE");
  return forced != nullptr ? absl::string_view(forced) : absl::string_view();
}

}  // namespace shardd::comm
