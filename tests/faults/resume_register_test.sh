#!/usr/bin/env bash
# Fault test: a job resumed from its checkpoints (--resume_from) while one
# replica group is slow to register, or dies registering.
#
# The ranks agree on the model and the saved state, then each imports its
# shard of step 6. Ranks 1 and 3 finish first, report step 6 and start
# step 7, whose gathers wait for ranks 0 and 2.
# 1. slow: daemons 0 and 2 (both replicas of shard 0) sleep 6 s after the
#    agreement (a slow disk; the collective timeout is 2 s): ranks 1 and 3
#    time out and a new epoch is planned while ranks 0 and 2 import.
# 2. killed: daemons 0 and 2 are SIGKILLed there (an OOM kill during the
#    allocation); replacements take their slots and their trainers
#    register again.
# Before, either ended the job: the new epoch's plan found shard 0 held by
# nobody at step 6 ("shard 0 at step 6 is lost ... no checkpoint step is
# held by every rank") although every rank can import it again. Now a
# daemon reports whether its shard is still what it registered
# (HeartbeatRequest.registration_state), and a shard no member holds at a
# step every holder registered is made again by registering.
#
# Checks (each run): every trainer ends all 12 steps, the parameters equal
# the uninterrupted run's bit for bit, the job never failed, the
# coordinator said shard 0 is made again by registering, and each rank's
# latest commit log is "checkpoint_restored step=6" then steps 7..12 once,
# and commit_log_check --first_step=6 finds every incarnation's logs
# consistent (replicas agree at every step).
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
FL_DEADLINE=90
fl_reference

CKPT="$FL_ROOT/ckpt"
fl_checkpointed_job first "$CKPT"
fl_expect "first: rank 2 holds the checkpoint of step 6" \
  "[[ -s '$CKPT/rank-2/step-6.shardckpt' ]]"

# resume_with_fault RUN FAILPOINT: daemons 0 and 2 armed with FAILPOINT.
resume_with_fault() {
  local run=$1 r
  fl_start_shard0_armed "$run" "$2"
  for r in 0 1 2 3; do fl_start_trainer "$run" "$r"; done
}

# check_resumed RUN: the checks of the file comment.
check_resumed() {
  local run=$1 r log
  fl_wait_trainers "$run"
  for r in 0 1 2 3; do
    fl_expect "$run: trainer $r ended all 12 steps" \
      "[[ ${FL_TRAINER_RC[$r]} -eq 0 ]] &&
       grep -q '^final loss .* steps 12' '$(fl_trainer_log "$run" "$r")'"
  done
  fl_expect "$run: final parameters equal the uninterrupted run's bit for bit" \
    "cmp '$FL_REF' '$FL_ROOT/$run/params.bin'"
  fl_expect "$run: the job never failed" \
    "! grep -Eq 'JOB_FAILED|EPOCH_STALLED' '$FL_ROOT/$run'/coord-*.log"
  fl_expect "$run: the coordinator made shard 0 again by registering" \
    "grep -q 'shard 0 .*made again by registering the model' '$FL_ROOT/$run'/coord-*.log"
  local want='checkpoint_restored step=6 commit step=7 commit step=8'
  want+=' commit step=9 commit step=10 commit step=11 commit step=12'
  for r in 0 1 2 3; do
    log="$FL_ROOT/$run/commit-$r-${FL_DAEMON_N[$run/$r]}.log"
    fl_expect "$run: rank $r restored step 6 and committed 7..12 once" \
      "[[ \"\$(awk '\$1 != \"final\" { print \$1, \$2 }' '$log' | paste -sd' ')\" == '$want' ]]"
  done
  local out rc
  out=$("$FL_CHECK" --world_size=4 --sharding_factor=2 --first_step=6 \
    --final_step=12 "$FL_ROOT/$run"/commit-*.log 2>&1)
  rc=$?
  echo "$out" | head -5
  fl_expect "$run: commit logs of every incarnation are consistent from step 6" \
    "[[ $rc -eq 0 ]]"
  fl_kill_all
}

FL_DAEMON_FLAGS=(--resume_from="$CKPT" --collective_timeout_ms=2000)
resume_with_fault slow register.agreed:sleep=6000
check_resumed slow

FL_DAEMON_FLAGS=(--resume_from="$CKPT")
resume_with_fault killed register.agreed:kill
for r in 0 2; do
  fl_wait_exit "${FL_DAEMON_PID[$r]}" 60 ||
    fl_die "killed: daemon $r (register.agreed:kill) still alive after 60 s"
  fl_expect "killed: daemon $r was SIGKILLed by its fail point" \
    "[[ $FL_RC -eq 137 ]]"
done
for r in 0 2; do fl_start_daemon killed "$r"; done
check_resumed killed
fl_finish
