#!/usr/bin/env bash
# Fault test: SIGKILL the coordinator mid-training and restart it on the
# same port.
#
# When rank 2's trainer prints "step 4" the coordinator gets SIGKILL; as
# soon as it has exited a new coordinator starts on the same port with no
# state. The daemons re-join it, each reporting the step its shard holds,
# and it rebuilds membership from them; steps wait (the commit vote needs
# the coordinator) and continue. Checks: fault_lib.sh's common ones
# (bit-equal parameters, commit logs), every rank re-joined the new
# coordinator with its shard, which declared a ready epoch at the step the
# shards hold, and no daemon was restarted.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

fl_start_cluster run
fl_wait_line "$(fl_trainer_log run 2)" "^step 4 " 60 ||
  fl_die "trainer 2 did not commit step 4 within 60 s"
t_kill=$(fl_now)
kill -9 "$FL_COORD_PID"
fl_wait_exit "$FL_COORD_PID" 10 || fl_die "the coordinator survived SIGKILL"
fl_log "run: coordinator killed"
t_restart=$(fl_now)
fl_start_coordinator run "$FL_PORT"
fl_log "run: coordinator restarted on port $FL_PORT"
fl_wait_trainers run
fl_check_run run "$FL_REF"
new="$FL_ROOT/run/coord-2.log"
for r in 0 1 2 3; do
  fl_expect "rank $r re-joined the new coordinator holding its shard" \
    "grep -Eq 'MEMBER_JOINED: rank $r joined: .* holding its shard at step [0-9]+' '$new'"
  fl_expect "rank $r's daemon was never restarted" \
    "[[ ! -e '$FL_ROOT/run/d$r-2.log' ]]"
done
fl_expect "the new coordinator declared a ready epoch at step >= 4" \
  "grep -Eq 'EPOCH_READY: .* all $FL_W members READY at step ([4-9]|1[0-9])' '$new'"
echo "timeline: kill -> new coordinator launched: +$(fl_sub "$t_restart" "$t_kill") s"
fl_report_since run "$t_kill" "kill -> first re-join" "MEMBER_JOINED"
fl_report_since run "$t_kill" "kill -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
