#include "daemon/recovery/in_doubt_step.h"

namespace shardd::recovery {

bool InDoubtStepWasCommitted(int64_t step, int self,
                             int64_t cluster_committed_step,
                             const std::vector<v1::MemberInfo>& members) {
  if (cluster_committed_step >= step) return true;
  for (const v1::MemberInfo& m : members) {
    if (m.rank() != self && m.committed_step() >= step) return true;
  }
  return false;
}

}  // namespace shardd::recovery
