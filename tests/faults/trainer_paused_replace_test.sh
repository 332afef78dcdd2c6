#!/usr/bin/env bash
# Fault test: a trainer paused between two calls (swapped out, a debugger,
# a slow data loader) while its daemon is replaced (restarted, upgraded or
# killed, and a new daemon takes its slot and socket).
#
# Trainer 2 stops itself right after its first ReduceGrad of step 50
# (--stop_in_step); daemon 2 is stopped (SIGTERM, then SIGKILL in a second
# run) and replaced; the replacement copies shard 0 from rank 0 and all
# four are READY; then trainer 2 is continued. Its connection broke while it
# was paused, so its next call reaches the new daemon on a new connection
# with no error of its own, carrying the old daemon's attachment and
# gradient buffer. Before the fix the new daemon ran it: "NOT_FOUND:
# ReduceGrad(unit 1): ... open shared memory segment '...shardd-5526.0.
# gradient_slot': No such file", the trainer exited 1 and the others waited
# on it (had the old segment still existed, the gradient would have been
# read from the dead daemon's buffer). Now a daemon with no trainer
# registered answers UNAVAILABLE ("attachment ... is an earlier daemon's"),
# the trainer re-attaches and redoes step 50.
#
# Checks (each run): fault_lib.sh's common ones (bit-equal, consistent
# commit logs), trainer 2 was told and re-attached at step 49, the
# replacement copied shard 0 from rank 0.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
FL_STEPS=100
fl_reference

RANK=2
replace_while_paused() {
  local run=$1 signal=$2
  FL_TRAINER_FLAGS_RANK=$RANK FL_TRAINER_FLAGS=(--stop_in_step=50)
  fl_start_cluster "$run"
  FL_TRAINER_FLAGS=()
  local trainer=${FL_TRAINER_PID[$RANK]}
  fl_wait_line "$(fl_trainer_log "$run" $RANK)" "^stopping in step 50" 60 ||
    fl_die "$run: trainer $RANK did not reach step 50 within 60 s"
  local end=$((SECONDS + 30))
  until fl_stopped "$trainer"; do
    ((SECONDS < end)) || fl_die "$run: trainer $RANK did not stop"
    sleep 0.01 # poll interval
  done
  local ready
  ready=$(grep -c 'EPOCH_READY: .*all 4 members READY' "$FL_ROOT/$run/coord-1.log")
  kill "-$signal" "${FL_DAEMON_PID[$RANK]}"
  fl_wait_exit "${FL_DAEMON_PID[$RANK]}" 30 ||
    fl_die "$run: daemon $RANK did not exit within 30 s of SIG$signal"
  fl_start_daemon "$run" $RANK
  end=$((SECONDS + 60))
  until [[ $(grep -c 'EPOCH_READY: .*all 4 members READY' "$FL_ROOT/$run/coord-1.log") -gt $ready ]]; do
    ((SECONDS < end)) || fl_die "$run: not all 4 READY within 60 s of the replacement"
    sleep 0.05 # poll interval
  done
  kill -CONT "$trainer"
  fl_log "$run: daemon $RANK replaced (SIG$signal) while trainer $RANK was paused; continued"
  fl_wait_trainers "$run"
  fl_check_run "$run" "$FL_REF"
  local log
  log=$(fl_trainer_log "$run" $RANK)
  fl_expect "$run: trainer $RANK was told its attachment is an earlier daemon's" \
    "grep -q 'attachment [0-9a-f]* is an earlier daemon' '$log'"
  fl_expect "$run: ... and re-attached at step 49" \
    "grep -q '^re-attached: epoch [0-9]*, committed step 49' '$log'"
  fl_expect "$run: the replacement copied shard 0 from rank 0" \
    "grep -Eq 'RECOVERY_PLANNED: rank $RANK copies shard 0 at step 49 from rank\\(s\\) 0' '$FL_ROOT/$run/coord-1.log'"
  fl_kill_all
}

replace_while_paused term TERM
replace_while_paused kill KILL
fl_finish
