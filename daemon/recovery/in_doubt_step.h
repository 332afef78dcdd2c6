#ifndef SHARDD_DAEMON_RECOVERY_IN_DOUBT_STEP_H_
#define SHARDD_DAEMON_RECOVERY_IN_DOUBT_STEP_H_

#include <cstdint>
#include <vector>

#include "shardd/v1/common.pb.h"

namespace shardd::recovery {

// What a member does with a step it prepared and voted yes on but whose
// commit decision it never heard (the coordinator died, or the epoch moved
// on, between the decision and its answer): the two-phase commit's in-doubt
// participant, resolved from what the others hold.
//
// The coordinator commits a step only when every member voted yes; its
// committed step (`cluster_committed_step`, the view's) reaches N at that
// decision, and a member's only through it (or a replica copy or checkpoint
// of a rank that applied it). So if the cluster's committed step is >= N,
// or any other member of a view in which all W are live reports
// committed_step >= N (a restarted coordinator learns the step from the
// members' joins), the decision was to commit and the in-doubt member
// applies its prepared step (its reduced gradients, norm and clip scale are
// those of that decision); otherwise nobody applied N and it is dropped and
// redone. A member's own heartbeat may lag its commit, which is why the
// cluster's step is asked first. Either way
// every member ends at the same step: without this a member that heard
// "commit" and one that did not stay one step apart and every later vote
// fails (the livelock tests/faults:coordinator_restart_test once hit).
//
// `members` is the new epoch's view (v1::MemberInfo.committed_step as each
// member reported it when it joined or heartbeat); `self` is left out.
// Pure.
bool InDoubtStepWasCommitted(int64_t step, int self,
                             int64_t cluster_committed_step,
                             const std::vector<v1::MemberInfo>& members);

}  // namespace shardd::recovery

#endif  // SHARDD_DAEMON_RECOVERY_IN_DOUBT_STEP_H_
