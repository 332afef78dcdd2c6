#!/usr/bin/env bash
# Fault test: a second failure during recovery itself.
#
# Rank 0's daemon dies in an all-gather of step 4 (allgather.mid:kill@14).
# The first replacement runs with --failpoint=transfer.target.mid:kill: it
# dies after half of shard 0's state arrived from rank 2 (verified chunks,
# nothing installed yet). A second replacement then takes the slot and
# completes the copy. Checks: fault_lib.sh's common ones (bit-equal
# parameters; commit logs of all three rank-0 incarnations: the
# interrupted one committed nothing), the coordinator planned the copy for
# both replacements, and the second one recovered at the last committed
# step.
#
# Not covered here: killing the SOURCE mid-transfer (transfer.source.mid on
# rank 2). With W/F = 2 that leaves shard 0 with no live replica at all;
# only the checkpoint fallback could rebuild it.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=0
fl_kill_by_failpoint run $RANK "allgather.mid:kill@14"
t_first=$FL_KILL_TIME
died=$(fl_died_in_step run $RANK)
echo "daemon $RANK died in step $died"
fl_expect "daemon $RANK died in step 4" "[[ $died -eq 4 ]]"

fl_start_daemon run $RANK --failpoint=transfer.target.mid:kill
log=$(fl_daemon_log run $RANK)
fl_wait_exit "${FL_DAEMON_PID[$RANK]}" 60 ||
  fl_die "the first replacement (transfer.target.mid:kill) still alive after 60 s"
t_second=$(stat -c %.9Y "$log")
fl_log "run: first replacement died (exit $FL_RC)"
fl_expect "the first replacement was SIGKILLed mid-transfer" \
  "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint transfer.target.mid: kill' '$log' &&
   ! grep -q 'recovered shard' '$log'"

fl_start_daemon run $RANK
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_check_recovered run $RANK $((died - 1))
fl_expect "the coordinator planned the copy for both replacements" \
  "[[ \$(cat '$FL_ROOT'/run/coord-*.log |
        grep -c 'RECOVERY_PLANNED: rank $RANK copies shard 0 at step $((died - 1))') -ge 2 ]]"
echo "timeline from the first kill:"
fl_timeline run $RANK "$t_first"
echo "timeline from the kill of the first replacement:"
fl_report_since run "$t_second" "kill -> recovery planned again" \
  "RECOVERY_PLANNED: rank $RANK "
fl_report_since run "$t_second" "kill -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
