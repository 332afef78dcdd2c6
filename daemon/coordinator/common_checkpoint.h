#ifndef SHARDD_DAEMON_COORDINATOR_COMMON_CHECKPOINT_H_
#define SHARDD_DAEMON_COORDINATOR_COMMON_CHECKPOINT_H_

#include <cstdint>
#include <vector>

#include "daemon/coordinator/membership_table.h"

namespace shardd::coordinator {

// The newest checkpoint step every slot's live member reports holding
// intact: the step a rollback planned now would use, and so the one file
// each member must not prune, however far it has written ahead of a slower
// rank (whose writes failed, or were skipped behind a slow disk). -1 when a
// slot has no live member, a member keeps no checkpoints, or no step is
// held by all. Pure; O(W log S) for the usual case of a common newest step.
int64_t NewestCommonCheckpoint(const std::vector<SlotRecord>& slots);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COMMON_CHECKPOINT_H_
