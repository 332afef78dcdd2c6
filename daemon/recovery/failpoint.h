// Fail points: named places in the daemon where a fault test can make the
// process hurt itself deterministically (die, freeze, or stall) at an exact
// moment of a step, a vote, a transfer or a checkpoint.
//
// Arming. A spec is a comma-separated list of `name:action[@N]` entries,
// from the environment variable SHARDD_FAILPOINT (ConfigureFromEnv) or a
// flag the binary passes to Configure:
//
//   SHARDD_FAILPOINT=allgather.mid:kill@3            SIGKILL at the 3rd hit
//   SHARDD_FAILPOINT=vote.before:sleep=2000,transfer.source.mid:stop
//
// Actions: kill (SIGKILL to itself), stop (SIGSTOP to itself; the process
// continues on SIGCONT), abort (std::abort, SIGABRT), exit (_exit(3)),
// sleep=MS (sleep MS milliseconds, then continue), fail (only at sites
// marked SHARDD_FAILPOINT_FAILS, which then behave as if what they were
// doing had failed; elsewhere it only writes its line). @N fires the action at
// the N-th hit of that name only (default 1); one name may have several
// entries with different N. Before acting, the process writes one line
// `failpoint NAME: ACTION (hit N)` to stderr (unbuffered), which tests grep.
//
// Known names (Configure rejects any other) and where each fires:
//   allgather.mid           in a unit's AllGather, after the shard group's
//                           collective has started (between sub-collectives
//                           or halfway through the ring)
//   reducescatter.mid       in a unit's ReduceScatter, likewise
//   allreduce.mid           in Step's replica-group AllReduce, likewise
//   vote.before             in Step, before asking the coordinator whether
//                           to commit (ShouldCommit)
//   vote.answer             in Step, when the coordinator's answer to the
//                           commit vote arrived; `fail` drops the answer as
//                           if it were lost (the member is then in doubt)
//   vote.after              in Step, after a "commit" vote, before the
//                           optimizer runs
//   optimizer.mid           in Step, after half of the units were updated
//                           (the step is half-applied locally)
//   transfer.source.mid     in FetchShard's server, after half of the
//                           payload was sent
//   transfer.target.mid     in a replacement's fetch, after half of the
//                           payload was received and verified
//   checkpoint.write.mid    in WriteShardCheckpoint, after half of the
//                           payload was written to the temporary file
//   recovery.before_install in a replacement's epoch thread, before it
//                           restores a checkpoint or copies its shard
//                           from replicas
//   recovery.before_ready   in a replacement, after its shard is installed
//                           and before it reports ready
//   register.agreed         in RegisterModel, after every rank's model
//                           agreed, before this rank allocates its engine
//   export.concluded        in a FULL export, on rank 0, after it published
//                           its outcome and before it answers its trainer
//   export.mid              in a FULL export, after each unit was gathered
//                           (and, on rank 0, written)
//   commit.decided          in the COORDINATOR (armed by SHARDD_FAILPOINT),
//                           after a commit decision is recorded and before
//                           any voter is answered
//
// Cost. SHARDD_FAILPOINT(name) is one relaxed atomic load while nothing is
// armed; Hit() (counting, matching) only runs when something is.
//
// Thread-safety: every member is safe to call from any thread. Process-wide
// state; no ownership.

#ifndef SHARDD_DAEMON_RECOVERY_FAILPOINT_H_
#define SHARDD_DAEMON_RECOVERY_FAILPOINT_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardd::recovery {

// The process-wide fail point registry (see the file comment).
class Failpoints {
 public:
  // Replaces the armed entries with `spec` and resets every hit count. An
  // empty spec disarms everything. INVALID_ARGUMENT naming the entry for an
  // unknown name or action, a bad @N (N >= 1) or sleep=MS (MS >= 0), or an
  // entry given twice (same name and N); the configuration is then unchanged.
  static absl::Status Configure(absl::string_view spec);
  // Configure(getenv("SHARDD_FAILPOINT")); OK and nothing armed when it is
  // unset or empty. Errors are prefixed with "SHARDD_FAILPOINT: ".
  static absl::Status ConfigureFromEnv();

  // Counts a hit of `name` and runs the action armed for this hit, if any.
  // kill, abort and exit do not return; stop returns after SIGCONT. True
  // only when the action was `fail`.
  static bool Hit(absl::string_view name);
  // How many times Hit(name) ran since the last Configure or ResetForTest.
  // SHARDD_FAILPOINT only calls Hit while something is armed, so names are
  // counted only then.
  static int64_t hits(absl::string_view name);
  // True when any entry is armed (the macro's fast path).
  static bool armed() { return armed_.load(std::memory_order_relaxed); }

  // The known names, in the order of the file comment.
  static const std::vector<absl::string_view>& KnownNames();

  // Disarms everything and clears the counts.
  static void ResetForTest();

 private:
  static inline std::atomic<bool> armed_{false};
};

}  // namespace shardd::recovery

// Marks the fail point `name` (a string literal from the known names).
#define SHARDD_FAILPOINT(name)                     \
  do {                                             \
    if (::shardd::recovery::Failpoints::armed()) { \
      ::shardd::recovery::Failpoints::Hit(name);   \
    }                                              \
  } while (0)

// An expression: true when the fail point `name` fired a `fail` action (the
// site then behaves as if it had failed); any other armed action runs.
#define SHARDD_FAILPOINT_FAILS(name)          \
  (::shardd::recovery::Failpoints::armed() && \
   ::shardd::recovery::Failpoints::Hit(name))

#endif  // SHARDD_DAEMON_RECOVERY_FAILPOINT_H_
