#!/usr/bin/env bash
# Fault test: a trainer that exits for good while its daemon lives (an
# exception in its data loader, an OOM kill of the trainer alone, a
# supervisor that does not restart it).
#
# Its daemon stays a healthy member (heartbeats, READY in every epoch), so
# nobody is removed; its peers' collectives time out in every epoch
# (--collective_timeout_ms=3000) and a new epoch forms each time with the
# same members. Before, that went on for ever ("no suspect", dismissed,
# about 20 epochs a minute and never a JOB_FAILED). Now the coordinator
# counts epochs that end without a committed step with the same members
# (--max_epochs_without_commit=5 here) and fails the job, naming the rank
# whose trainer did not call its daemon during them (each daemon reports
# its trainer in its heartbeats).
#
# run gone: trainer 2 stops itself in step 5 (--stop_in_step) and is
#   SIGKILLed; never restarted. Checks: EPOCH_STALLED and JOB_FAILED once,
#   naming rank 2's trainer and no other; every trainer and daemon and the
#   coordinator exit 3 with the reason; the survivors' commit logs end
#   with a final record and are consistent.
# run back: the same, but a new trainer for rank 2 starts after two epochs
#   failed: it re-attaches, step 5 is redone and committed, the count
#   starts again, and training ends bit-equal to the no-fault run.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
FL_DAEMON_FLAGS=(--collective_timeout_ms=3000)
FL_COORD_FLAGS=(--max_epochs_without_commit=5)
fl_reference

RANK=2
# Starts RUN with trainer RANK stopping itself in step 5, then kills it.
# Sets t_kill.
start_and_kill_trainer() {
  local run=$1
  FL_TRAINER_FLAGS_RANK=$RANK FL_TRAINER_FLAGS=(--stop_in_step=5)
  fl_start_cluster "$run"
  FL_TRAINER_FLAGS=()
  fl_wait_line "$(fl_trainer_log "$run" $RANK)" "^stopping in step 5" 60 ||
    fl_die "$run: trainer $RANK did not reach step 5 within 60 s"
  t_kill=$(fl_now)
  kill -9 "${FL_TRAINER_PID[$RANK]}"
  fl_wait_exit "${FL_TRAINER_PID[$RANK]}" 10 ||
    fl_die "$run: trainer $RANK survived SIGKILL"
  fl_log "$run: trainer $RANK killed in step 5; its daemon lives"
}

# --- run gone: never restarted ---------------------------------------------
start_and_kill_trainer gone
coord="$FL_ROOT/gone/coord-1.log"
fl_wait_line "$coord" "JOB_FAILED" 90 ||
  fl_die "gone: the job did not fail within 90 s of trainer $RANK's exit"
line=$(grep -m1 'JOB_FAILED' "$coord")
echo "coordinator: ${line:0:480}"
fl_expect "gone: the job failed as making no progress, 5 epochs without a commit" \
  "grep -q 'the job makes no progress: 5 epochs in a row ended without a step committed (the last committed step is 4)' <<<\"\$line\""
fl_expect "gone: ... naming rank $RANK's trainer as quiet" \
  "grep -Eq \"rank $RANK's trainer has not called its daemon for [0-9.]+s\" <<<\"\$line\""
fl_expect "gone: ... and no other rank's" \
  "! grep -Eq \"rank [013]'s trainer|rank [013] has no trainer\" <<<\"\$line\""
fl_expect "gone: EPOCH_STALLED and JOB_FAILED logged once each" \
  "[[ \$(grep -c 'EPOCH_STALLED' '$coord') -eq 1 && \$(grep -c 'JOB_FAILED' '$coord') -eq 1 ]]"
fl_expect "gone: nobody was removed" "! grep -q 'MEMBER_REMOVED' '$coord'"
t_end=$t_kill
for r in 0 1 3; do
  fl_expect_exit "gone: trainer $r (job failed)" "${FL_TRAINER_PID[$r]}" 30 3 &&
    t_end=$FL_EXIT_TIME
  fl_expect "gone: trainer $r printed the reason" \
    "grep -q \"stopping: .*the job has failed: .*rank $RANK's trainer has not called\" '$(fl_trainer_log gone $r)'"
done
for r in 0 1 2 3; do
  fl_expect_exit "gone: daemon $r (job failed)" "${FL_DAEMON_PID[$r]}" 30 3 &&
    t_end=$FL_EXIT_TIME
done
fl_expect_exit "gone: the coordinator (job failed, every member left)" \
  "$FL_COORD_PID" 40 3
echo "timeline: trainer killed -> job failed: $(fl_report_since gone "$t_kill" x 'JOB_FAILED' | grep -Eo '\+[0-9.]+ s')"
echo "timeline: trainer killed -> every process exited: +$(fl_sub "$t_end" "$t_kill") s"
for r in 0 1 2 3; do
  fl_expect "gone: daemon $r's commit log ends with a final record at step 4" \
    "tail -1 '$FL_ROOT/gone/commit-$r-1.log' | grep -q '^final step=4 '"
done
out=$("$FL_CHECK" --world_size=$FL_W --sharding_factor=$FL_F \
  "$FL_ROOT"/gone/commit-*.log 2>&1)
rc=$?
echo "$out" | head -5
fl_expect "gone: the commit logs are consistent" "[[ $rc -eq 0 ]]"
fl_kill_all

# --- run back: restarted after two failed epochs ---------------------------
start_and_kill_trainer back
coord="$FL_ROOT/back/coord-1.log"
fl_wait_line "$coord" "EPOCH_READY: epoch ([4-9]|[1-9][0-9]+) ready" 60 ||
  fl_die "back: epoch 4 was not ready within 60 s of the kill"
fl_start_trainer back $RANK
fl_log "back: a new trainer $RANK started after two epochs without a commit"
fl_wait_trainers back
fl_check_run back "$FL_REF"
fl_expect "back: the new trainer re-attached at step 4" \
  "grep -q 'committed step 4 (re-attached)' '$(fl_trainer_log back $RANK)'"
fl_expect "back: at least two epochs ended without a commit before it" \
  "[[ \$(grep -c 'FAILURE_REPORT_DISMISSED' '$coord') -ge 2 ]]"
fl_finish
