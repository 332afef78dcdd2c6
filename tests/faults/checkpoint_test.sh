#!/usr/bin/env bash
# Fault test: no replica, so the checkpoint fallback (W = 4, F = 4,
# FULL_SHARD: W/F = 1, every shard has exactly one holder).
#
# Every daemon writes a sharded checkpoint every 3 steps. Rank 1's daemon is
# SIGKILLed in an all-gather of step 8 (fail point; the example trainer's
# gathers are a fixed sequence, 4 all-gathers per step), so the cluster has
# committed step 7 and the latest checkpoint is step 6. Its replacement
# joins with the checkpoints it verified in rank 1's folder; every member
# reports the checkpoints it holds, so the coordinator plans a rollback to
# the newest step every rank holds (RECOVERY_PLANNED: "shard 1 ... is
# lost ...; every rank rolls back to its checkpoint of step 6"). Every rank
# restores its own checkpoint of that step (the replacement after its
# trainer re-attached); the epoch becomes ready at that step (logged as a
# checkpoint fallback) and the trainers redo the steps after it. Checks:
# fault_lib.sh's common ones (the final parameters equal the no-fault run's
# bit for bit; the commit logs, with their checkpoint_restored records,
# have no step committed twice or skipped), that all four ranks restored
# the same step, the last multiple of 3 before the step the daemon died in,
# and the coordinator's lines.
# Then a second fault run where the dead rank's latest checkpoint (step 6)
# is corrupted before its replacement starts: the replacement names the
# file and leaves it out of what it reports, so the coordinator rolls every
# rank back to the older checkpoint all of them hold intact (step 3), and
# training still ends bit-equal to the no-fault run.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
FL_F=4
FL_STRATEGY=FULL_SHARD
fl_init "$@"
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-ref"
  --checkpoint_interval_steps=3)
fl_reference

RANK=1
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-run"
  --checkpoint_interval_steps=3)
fl_kill_by_failpoint run $RANK "allgather.mid:kill@31"
# The replacement waits 1.5 s before it restores, so that its trainer has
# re-attached and is waiting in RegisterModel for the ready epoch (a
# RegisterModel that held the trainer-operation lock while it waited kept
# the restore, and so the epoch, waiting until the trainer's deadline).
fl_start_daemon run $RANK --failpoint=recovery.before_install:sleep=1500
died=$(fl_died_in_step run $RANK)
restored=$(((died - 1) / 3 * 3))
echo "daemon $RANK died in step $died; the latest common checkpoint is step $restored"
fl_expect "daemon $RANK died in step 8 (step 7 committed: a rollback to 6)" \
  "[[ $died -eq 8 && $restored -eq 6 ]]"
fl_wait_trainers run
fl_check_run run "$FL_REF"
for ((r = 0; r < FL_W; r++)); do
  fl_expect "run: rank $r restored its checkpoint of step $restored" \
    "cat '$FL_ROOT'/run/d$r-*.log |
       grep -q '^shardd rank $r restored its checkpoint of step $restored from $FL_ROOT/ckpt-run/rank-$r/step-$restored.shardckpt'"
done
fl_expect "run: the coordinator planned a rollback of every rank to step $restored" \
  "cat '$FL_ROOT'/run/coord-*.log | grep -q 'RECOVERY_PLANNED: shard $RANK at step [0-9]* is lost: it was held by rank $RANK .*every rank rolls back to its checkpoint of step $restored'"
fl_expect "run: the epoch became ready at step $restored as a checkpoint fallback" \
  "cat '$FL_ROOT'/run/coord-*.log |
     grep -q 'READY at step $restored (checkpoint fallback'"
fl_expect "run: trainer $RANK re-attached at step $restored" \
  "grep -Eq '^re-attached: epoch [0-9]+, committed step $restored\$' \
     '$(fl_trainer_log run $RANK)'"
fl_kill_all

# A corrupt checkpoint: named, left out, and the job rolls back further.
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-bad"
  --checkpoint_interval_steps=3)
fl_kill_by_failpoint bad $RANK "allgather.mid:kill@31"
latest=$(ls "$FL_ROOT/ckpt-bad/rank-$RANK"/step-*.shardckpt | sort -V | tail -1)
size=$(stat -c %s "$latest")
# Flip one byte in the middle of the payload.
printf '\xff' | dd of="$latest" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
fl_start_daemon bad $RANK --failpoint=recovery.before_install:sleep=1500
fl_expect "bad: the replacement names the corrupt file" \
  "fl_wait_line '$(fl_daemon_log bad $RANK)' 'ignoring checkpoint: DATA_LOSS: $latest' 60"
fl_wait_trainers bad
fl_check_run bad "$FL_REF"
for ((r = 0; r < FL_W; r++)); do
  fl_expect "bad: rank $r restored its checkpoint of step 3" \
    "cat '$FL_ROOT'/bad/d$r-*.log | grep -q '^shardd rank $r restored its checkpoint of step 3 from '"
done
fl_expect "bad: nobody restored the corrupt step" \
  "! cat '$FL_ROOT'/bad/d*-*.log | grep -q 'restored its checkpoint of step 6'"
grep -h "DATA_LOSS" "$(fl_daemon_log bad $RANK)" | head -2 | cut -c1-200
fl_finish
