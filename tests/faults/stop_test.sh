#!/usr/bin/env bash
# Fault test: a hung daemon (SIGSTOP), not a dead one.
#
# When rank 2's trainer prints "step 4", rank 2's daemon gets SIGSTOP. It
# stops heartbeating; the coordinator removes it when its lease (1.5 s)
# expires and starts a new epoch; the survivors' step aborts. Then the test
# sends SIGCONT: the same process finds itself removed, re-joins with its
# shard, and training completes. Checks: fault_lib.sh's common ones
# (bit-equal parameters, commit logs), the removal was by lease expiry,
# rank 2 re-joined, and its daemon was never replaced.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=2
fl_start_cluster run
fl_wait_line "$(fl_trainer_log run $RANK)" "^step 4 " 60 ||
  fl_die "trainer $RANK did not commit step 4 within 60 s"
t_stop=$(fl_now)
kill -STOP "${FL_DAEMON_PID[$RANK]}"
fl_log "run: daemon $RANK stopped"
coord="$FL_ROOT/run/coord-1.log"
fl_wait_line "$coord" "MEMBER_REMOVED: rank $RANK .*lease expired" 30 ||
  fl_expect "the coordinator removed the stopped rank $RANK within 30 s" false
kill -CONT "${FL_DAEMON_PID[$RANK]}"
fl_log "run: daemon $RANK continued"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_expect "the coordinator removed rank $RANK by lease expiry" \
  "grep -q 'MEMBER_REMOVED: rank $RANK lease expired' '$coord'"
fl_expect "the continued rank $RANK re-joined" \
  "sed -n '/MEMBER_REMOVED: rank $RANK /,\$p' '$coord' |
     grep -q 'MEMBER_JOINED: rank $RANK joined'"
fl_expect "rank $RANK's daemon was never replaced (same process, alive)" \
  "[[ ! -e '$FL_ROOT/run/d$RANK-2.log' ]] && ! fl_exited ${FL_DAEMON_PID[$RANK]}"
fl_report_since run "$t_stop" "stop -> rank $RANK removed" "MEMBER_REMOVED: rank $RANK "
fl_report_since run "$t_stop" "stop -> rank $RANK re-joined" "MEMBER_JOINED: rank $RANK "
fl_report_since run "$t_stop" "stop -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
