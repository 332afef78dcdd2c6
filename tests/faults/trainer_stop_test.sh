#!/usr/bin/env bash
# Fault test: a trainer stopped in the middle of a step (SIGSTOP; a trainer
# swapped out, paused by a debugger, or stuck in its data loader) past its
# peers' collective timeout, then continued.
#
# Trainer 2 stops itself (--stop_in_step=5) right after its first
# ReduceGrad of step 5, so that its daemon has issued collectives of the
# step. Its peers' collectives time out (--collective_timeout_ms=3000), a
# new epoch forms with all four members (rank 2's daemon is alive), and
# only then is trainer 2 continued. It was told nothing: before the fix it
# went on with the old attempt in the new epoch, its daemon's collectives
# met the peers' fresh attempt (a backward all-gather paired with a forward
# one, the norm's with a parameter gather) and the results were garbage
# ("grad_clip element count is negative"), the trainer exited 1, and the
# others retried forever. Now its next call is ABORTED, it redoes the
# step, and training ends bit-equal. Checks: fault_lib.sh's common ones,
# trainer 2's step 5 aborted with the epoch-change reason, nobody removed.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
# Every collective checked for a match across ranks (the defect this test
# is about made them differ).
FL_DAEMON_FLAGS=(--collective_timeout_ms=3000 --verify_collectives)
fl_reference

RANK=2
FL_TRAINER_FLAGS_RANK=$RANK FL_TRAINER_FLAGS=(--stop_in_step=5)
fl_start_cluster run
fl_wait_line "$(fl_trainer_log run $RANK)" "^stopping in step 5" 60 ||
  fl_die "trainer $RANK did not reach step 5 within 60 s"
t_stop=$(fl_now)
coord="$FL_ROOT/run/coord-1.log"
# Its peers give up on the step and a new epoch forms while it is stopped.
fl_wait_line "$coord" "EPOCH_READY: epoch ([3-9]|[1-9][0-9]+) ready" 60 ||
  fl_die "no new epoch formed within 60 s of trainer $RANK stopping"
grep -q '^State:.*T (stopped)' "/proc/${FL_TRAINER_PID[$RANK]}/status" ||
  fl_die "trainer $RANK is not stopped"
kill -CONT "${FL_TRAINER_PID[$RANK]}"
fl_log "run: trainer $RANK continued after a new epoch formed"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_expect "trainer $RANK was told its step was void and redid it" \
  "grep -q '^step 5 aborted (.*this step attempt began in epoch 2 and the daemon is in epoch' '$(fl_trainer_log run $RANK)'"
fl_expect "nobody was removed" "! grep -q 'MEMBER_REMOVED' '$coord'"
fl_report_since run "$t_stop" "stop -> new epoch ready" "EPOCH_READY: epoch ([3-9]|[1-9][0-9]+) ready"
fl_finish
