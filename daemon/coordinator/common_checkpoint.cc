#include "daemon/coordinator/common_checkpoint.h"

#include <algorithm>

namespace shardd::coordinator {

int64_t NewestCommonCheckpoint(const std::vector<SlotRecord>& slots) {
  if (slots.empty()) return -1;
  for (const SlotRecord& slot : slots) {
    if (!slot.live() || !slot.checkpoints.keeps ||
        slot.checkpoints.steps.empty()) {
      return -1;
    }
  }
  // The first slot's steps, newest first, are the candidates; a step is
  // common when every other (ascending) list has it.
  const std::vector<int64_t>& candidates = slots.front().checkpoints.steps;
  for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
    const bool everywhere =
        std::all_of(slots.begin() + 1, slots.end(), [&](const SlotRecord& s) {
          return std::binary_search(s.checkpoints.steps.begin(),
                                    s.checkpoints.steps.end(), *it);
        });
    if (everywhere) return *it;
  }
  return -1;
}

}  // namespace shardd::coordinator
