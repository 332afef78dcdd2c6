#include "daemon/comm/all_reduce_algorithm.h"

#include <cstdlib>

namespace shardd::comm {

AllReduceAlgorithm ChooseAllReduceAlgorithm(int world,
                                            absl::string_view forced) {
  if (world == 2 && forced != "split") return AllReduceAlgorithm::kPairFused;
  return AllReduceAlgorithm::kReduceScatterThenGather;
}

absl::string_view ForcedAllReduceAlgorithm() {
  static const char* const forced = std::getenv("SHARDD_ALL_REDUCE");
  return forced != nullptr ? absl::string_view(forced) : absl::string_view();
}

}  // namespace shardd::comm
