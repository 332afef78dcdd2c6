#!/usr/bin/env bash
# Fault test: the coordinator hung (SIGSTOP) for several leases, then
# continued, as when its VM is paused or migrated, its container frozen or
# its host starves it. Its members' heartbeats sit unread meanwhile; on
# resuming, the coordinator must not take the leases that ran out as
# failures (before the fix it removed all four members at once).
#
# run "stop": when trainer 0 prints "step 4", the coordinator gets SIGSTOP
# for COORD_STOP_S (5) seconds, 3.3 leases. Checks: fault_lib.sh's common
# ones (every trainer finished, bit-equal parameters, consistent commit
# logs), nobody was removed, no step aborted, and the coordinator logged
# COORDINATOR_STALLED naming the leases it renewed.
#
# run "kill" (compound): the same stop, and daemon 3 SIGKILLed while the
# coordinator is stopped, its replacement started at once (its Join waits
# in the stopped coordinator's queue). Checks: the common ones, rank 3 was
# removed (the replacement took its slot) and only rank 3, the replacement
# copied shard 1 from rank 1, and nobody else was removed.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference
STOP_S=${COORD_STOP_S:-5}

# stop_coordinator RUN: waits for trainer 0's step 4, SIGSTOPs the
# coordinator; T_STOP is when.
stop_coordinator() {
  fl_wait_line "$(fl_trainer_log "$1" 0)" "^step 4 " 60 ||
    fl_die "$1: trainer 0 did not commit step 4 within 60 s"
  T_STOP=$(fl_now)
  kill -STOP "$FL_COORD_PID"
  fl_log "$1: coordinator stopped"
}

# continue_coordinator RUN: after STOP_S seconds (the fault's duration, not
# a wait for an event), SIGCONT.
continue_coordinator() {
  sleep "$STOP_S"
  kill -CONT "$FL_COORD_PID"
  fl_log "$1: coordinator continued after $STOP_S s"
}

fl_start_cluster stop
stop_coordinator stop
continue_coordinator stop
fl_wait_trainers stop
fl_check_run stop "$FL_REF"
coord="$FL_ROOT/stop/coord-1.log"
fl_expect "stop: nobody was removed" "! grep -q 'MEMBER_REMOVED' '$coord'"
fl_expect "stop: no trainer's step aborted" \
  "! grep -q 'aborted' '$FL_ROOT'/stop/t*-1.log"
fl_expect "stop: the coordinator found it had stalled and renewed leases" \
  "grep -Eq 'COORDINATOR_STALLED: the coordinator did not run for [0-9.]+s .* lease\\(s\\) of rank\\(s\\) [0-3]' '$coord'"
fl_report_since stop "$T_STOP" "stop -> leases renewed" "COORDINATOR_STALLED"

fl_start_cluster kill
stop_coordinator kill
kill -9 "${FL_DAEMON_PID[3]}"
fl_wait_exit "${FL_DAEMON_PID[3]}" 10 || fl_die "daemon 3 survived SIGKILL"
fl_start_daemon kill 3
fl_log "kill: daemon 3 killed and its replacement started"
continue_coordinator kill
fl_wait_trainers kill
fl_check_run kill "$FL_REF"
coord="$FL_ROOT/kill/coord-1.log"
fl_expect "kill: only rank 3 was removed" \
  "grep -q 'MEMBER_REMOVED: rank 3 ' '$coord' &&
   ! grep -Eq 'MEMBER_REMOVED: rank [012] ' '$coord'"
fl_expect "kill: the replacement of rank 3 copied shard 1 from rank 1" \
  "grep -Eq '^shardd rank 3 recovered shard 1 at step [0-9]+ from rank 1' '$(fl_daemon_log kill 3)'"
fl_report_since kill "$T_STOP" "stop -> rank 3 removed" "MEMBER_REMOVED: rank 3 "
fl_report_since kill "$T_STOP" "stop -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
