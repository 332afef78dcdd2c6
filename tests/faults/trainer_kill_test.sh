#!/usr/bin/env bash
# Fault test: SIGKILL a trainer in the middle of a step.
#
# Rank 2's trainer is SIGKILLed while its ReduceGrad of step 5 is in
# flight: to make "in the middle" exact, rank 2's daemon runs with
# --failpoint=reducescatter.mid:stop@13 and SIGSTOPs itself inside step 5's
# first reduce-scatter (3 per step); the test waits for that, kills the
# trainer, and SIGCONTs the daemon (milliseconds later, far inside its
# 1.5 s lease). Its daemon keeps every shard; a new trainer process against
# the same daemon re-attaches (RegisterModel: reattached, committed step 4)
# and, since the dead trainer had begun step 5, the daemon abandons the
# epoch so that every rank redoes step 5. Checks: fault_lib.sh's common
# ones (bit-equal parameters, commit logs: no daemon restarted), the killed
# trainer never saw step 5 committed, the new one re-attached at step 4 and
# ran steps 5..12 only, the survivors aborted step 5 and redid it.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=2
STEP=4
fl_start_cluster run $RANK --failpoint=reducescatter.mid:stop@13
daemon=${FL_DAEMON_PID[$RANK]}
log=$(fl_trainer_log run $RANK)
end=$((SECONDS + 60))
until fl_stopped "$daemon"; do
  ((SECONDS < end)) || fl_die "daemon $RANK did not reach its fail point within 60 s"
  sleep 0.005  # poll interval
done
t_kill=$(fl_now)
kill -9 "${FL_TRAINER_PID[$RANK]}"
fl_wait_exit "${FL_TRAINER_PID[$RANK]}" 10 || fl_die "trainer $RANK survived SIGKILL"
kill -CONT "$daemon"
fl_log "run: trainer $RANK killed (exit $FL_RC), daemon $RANK continued"
fl_expect "the daemon stopped at its fail point in step $((STEP + 1))'s ReduceGrad" \
  "grep -q '^failpoint reducescatter.mid: stop (hit 13)' '$(fl_daemon_log run $RANK)'"
fl_expect "the killed trainer's last committed step is $STEP" \
  "[[ \$(fl_last_step '$log') -eq $STEP ]]"
fl_start_trainer run $RANK
fl_wait_trainers run
fl_check_run run "$FL_REF"
new=$(fl_trainer_log run $RANK)
fl_expect "the new trainer re-attached at step $STEP" \
  "grep -q 'committed step $STEP (re-attached)' '$new'"
fl_expect "the new trainer ran steps $((STEP + 1))..$FL_STEPS only" \
  "[[ \$(grep -c '^step [0-9]* loss' '$new') -eq $((FL_STEPS - STEP)) ]] &&
   grep -q '^step $((STEP + 1)) loss' '$new'"
fl_expect "rank $RANK's daemon was never restarted" \
  "[[ ! -e '$FL_ROOT/run/d$RANK-2.log' ]] && ! fl_exited ${FL_DAEMON_PID[$RANK]}"
for r in 0 1 3; do
  fl_expect "trainer $r aborted step $((STEP + 1)) and redid it" \
    "grep -q '^step $((STEP + 1)) aborted' '$(fl_trainer_log run $r)' &&
     grep -q '^step $((STEP + 1)) loss' '$(fl_trainer_log run $r)'"
done
# Who reports first races: rank 2's daemon (the trainer re-attached in the
# middle of a step) or a peer whose collective the abandonment broke.
fl_expect "the coordinator started a new epoch after the kill" \
  "fl_event_after run '$t_kill' EPOCH_STARTED >/dev/null"
fl_report_since run "$t_kill" "kill -> step abandoned (first report)" "FAILURE_REPORT|EPOCH_STARTED"
fl_report_since run "$t_kill" "kill -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
