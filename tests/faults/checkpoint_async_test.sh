#!/usr/bin/env bash
# Fault test: asynchronous checkpoints (--async_checkpoints) against a slow
# disk and a rollback that catches writes in flight (W = 4, F = 4,
# FULL_SHARD: W/F = 1, so a lost shard can only come back from a
# checkpoint).
#
# Run "sync": every daemon writes a checkpoint every 3 steps, synchronously;
# daemon 1's disk is slow (fail point checkpoint.write.mid sleeps 4 s in
# its first write, past the 2 s collective timeout). Its Step holds the
# write, its peers' next collectives time out, and the coordinator starts
# another epoch on their report: the premise of the next run, checked.
# Run "slow": the same with --async_checkpoints, and every one of daemon 1's
# writes that slow. The write runs behind the
# step, so training never waits for the disk: no collective times out, no
# epoch is started on a report; every step bit-equal to the no-fault run. Each
# daemon's log says which checkpoints it wrote or skipped (a checkpoint due
# while the previous one is written is skipped), and rank 1's folder holds
# its first checkpoint once its daemon, SIGTERMed with that write in flight,
# has exited 0; and its checkpoint of step 12, the job's last (skipped
# behind the slow write, and written as the daemon stopped; or written in
# the background, on a machine so loaded that the first write had ended).
# Run "rollback" (compound): async checkpoints; daemon 1 is SIGKILLed
# halfway through writing its checkpoint of step 6 (so its newest on disk
# is step 3) while daemon 0's write of step 6 is held 10 s halfway. The
# replacement joins; every rank rolls back to step 3, the newest step all
# hold. Daemon 0 discards its write in flight before it removes the
# abandoned timeline (it says so), every rank restores step 3 and training
# ends bit-equal to the no-fault run; the commit logs are consistent.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
FL_F=4
FL_STRATEGY=FULL_SHARD
fl_init "$@"
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-ref"
  --checkpoint_interval_steps=3)
fl_reference

slow_disk="checkpoint.write.mid:sleep=4000@1,checkpoint.write.mid:sleep=4000@2"
slow_disk+=",checkpoint.write.mid:sleep=4000@3,checkpoint.write.mid:sleep=4000@4"
# Epochs started because a member reported its collectives broken.
broken_epochs() {
  grep -c 'EPOCH_STARTED: .* reported its communicators broken' \
    "$FL_ROOT/$1"/coord-*.log
}

# The premise: a slow synchronous write holds the job.
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-sync"
  --checkpoint_interval_steps=3 --collective_timeout_ms=2000)
fl_start_cluster sync 1 --failpoint=checkpoint.write.mid:sleep=4000
fl_wait_trainers sync
fl_log "sync: $(broken_epochs sync) epoch(s) started on a broken collective"
fl_expect "sync: daemon 1's slow synchronous write made its peers time out" \
  "(( \$(broken_epochs sync) >= 1 ))"
fl_kill_all

FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-slow"
  --checkpoint_interval_steps=3 --collective_timeout_ms=2000
  --async_checkpoints)
fl_start_cluster slow 1 --failpoint="$slow_disk"
fl_wait_trainers slow
fl_check_run slow "$FL_REF"
fl_log "slow: $(broken_epochs slow) epoch(s) started on a broken collective"
fl_expect "slow: no collective timed out: nobody waited for daemon 1's disk" \
  "[[ \$(broken_epochs slow) -eq 0 ]]"
fl_expect "slow: daemon 1 did hit its slow disk" \
  "grep -q '^failpoint checkpoint.write.mid: sleep' '$(fl_daemon_log slow 1)'"
# Daemon 1 finishes its write in flight before it exits (SIGTERM).
kill -TERM "${FL_DAEMON_PID[1]}"
fl_wait_exit "${FL_DAEMON_PID[1]}" 30 || fl_die "slow: daemon 1 did not exit"
fl_expect "slow: daemon 1 exited 0 (SIGTERM) with its write in flight" \
  "[[ $FL_RC -eq 0 ]]"
fl_expect "slow: rank 1's checkpoints of steps 3 and 12 are on disk" \
  "[[ -s '$FL_ROOT/ckpt-slow/rank-1/step-3.shardckpt' &&
     -s '$FL_ROOT/ckpt-slow/rank-1/step-12.shardckpt' ]]"
grep -h "checkpoint of step" "$FL_ROOT"/slow/d1-*.log | head -6
fl_kill_all

# A rollback while writes are in flight.
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-run"
  --checkpoint_interval_steps=3 --async_checkpoints)
fl_start_cluster run 0 --failpoint=checkpoint.write.mid:sleep=10000@2 \
  1 --failpoint=checkpoint.write.mid:kill@2
fl_wait_exit "${FL_DAEMON_PID[1]}" 60 ||
  fl_die "run: daemon 1 still alive after 60 s"
fl_expect "run: daemon 1 was SIGKILLed halfway through its second checkpoint" \
  "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint checkpoint.write.mid: kill' '$(fl_daemon_log run 1)'"
fl_expect "run: rank 1's newest checkpoint on disk is step 3" \
  "[[ \$(ls '$FL_ROOT/ckpt-run/rank-1' | grep -c '^step-') -eq 1 &&
     -s '$FL_ROOT/ckpt-run/rank-1/step-3.shardckpt' ]]"
fl_start_daemon run 1 --failpoint=recovery.before_install:sleep=1500
fl_wait_trainers run
fl_check_run run "$FL_REF"
for ((r = 0; r < FL_W; r++)); do
  fl_expect "run: rank $r restored its checkpoint of step 3" \
    "cat '$FL_ROOT'/run/d$r-*.log |
       grep -q '^shardd rank $r restored its checkpoint of step 3 from '"
done
fl_expect "run: daemon 0 discarded its checkpoint of step 6 in flight" \
  "grep -q '^shardd rank 0: the rollback to step 3 discards the checkpoint of step 6 being written' '$(fl_daemon_log run 0)'"
fl_expect "run: the coordinator planned a rollback of every rank to step 3" \
  "cat '$FL_ROOT'/run/coord-*.log | grep -q 'every rank rolls back to its checkpoint of step 3'"
fl_finish
