#ifndef SHARDD_DAEMON_CORE_EXIT_STATUS_H_
#define SHARDD_DAEMON_CORE_EXIT_STATUS_H_

namespace shardd::core {

// Process exit statuses shared by the coordinator, shardd and the example
// trainer, so that a supervisor (Kubernetes, a Job's podFailurePolicy, a
// script) can tell why a process ended.
inline constexpr int kExitOk = 0;
// shardd: its membership ended (another process took its identity, or it
// was refused for good).
inline constexpr int kExitMembershipEnded = 1;
inline constexpr int kExitUsage = 2;
// The job has FAILED (terminal, DATA_LOSS): a shard was lost with no live
// replica and no checkpoint every rank holds, or epochs kept failing
// without progress. Retrying the same job cannot help.
inline constexpr int kExitJobFailed = 3;

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_EXIT_STATUS_H_
