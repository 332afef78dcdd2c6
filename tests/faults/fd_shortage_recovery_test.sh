#!/usr/bin/env bash
# Fault test: a daemon dies while the coordinator and the dead daemon's
# replica are out of file descriptors.
#
# When rank 1's trainer prints "step 20", fd_shortage_lib.sh fills the
# descriptor tables of the coordinator and of rank 1's daemon, and rank 3's
# daemon is SIGKILLed: rank 1 now holds the only live copy of shard 1, and
# can open hardly a connection (new communicators, the replacement's
# FetchShard) while the coordinator accepts hardly any (the replacement's
# Join): only the few descriptors the dead daemon's connections give back. A
# replacement for rank 3 is started at once; once the coordinator has
# removed the dead rank 3 the flood lets go, and the replacement joins,
# copies shard 1 from rank 1 and training completes. Checks: fault_lib.sh's
# common ones (bit-equal parameters, commit logs, no job failure), rank 1
# was never removed (a shortage costs no member, and here removing it would
# have lost shard 1), and the replacement recovered at the last committed
# step from rank 1.
set -uo pipefail
FL_STEPS=${FL_STEPS:-300}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
# shellcheck source=fd_shortage_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fd_shortage_lib.sh"
fl_init "$@"
fl_reference

SHORT=1 VICTIM=3
fl_start_cluster run
fl_wait_line "$(fl_trainer_log run $SHORT)" "^step 20 " 60 ||
  fl_die "trainer $SHORT did not commit step 20 within 60 s"
fs_start run $SHORT
kill -9 "${FL_DAEMON_PID[$VICTIM]}"
fl_wait_exit "${FL_DAEMON_PID[$VICTIM]}" 10 || fl_die "daemon $VICTIM lives"
FL_KILL_TIME=$(fl_now)
fl_log "run: daemon $VICTIM SIGKILLed during the shortage"
fl_start_daemon run $VICTIM
fl_expect "the coordinator removed the dead rank $VICTIM during the shortage" \
  "fl_wait_line '$FS_COORD_LOG' 'MEMBER_REMOVED: rank $VICTIM ' 30"
# The dead daemon's connections (its Gloo pairs with rank 1, its heartbeat
# channel) close with it and give a few descriptors back, so the tables
# may have room again by now: said, not asserted.
for pid in "$FL_COORD_PID" "$FS_DAEMON"; do
  fs_full "$pid" && state=full || state="not full"
  echo "descriptors of $pid at the removal ($state): $(fs_fds "$pid")"
done
fs_release run
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_expect "rank $SHORT, short of descriptors, was never removed" \
  "! grep -q 'MEMBER_REMOVED: rank $SHORT ' '$FS_COORD_LOG'"
# SIGKILLed from outside, the daemon may die after its step's commit vote
# and before its trainer heard of it: the replacement then recovers at the
# step the trainer was in, not the one before.
died=$(fl_died_in_step run $VICTIM)
at=$(grep -Eo "^shardd rank $VICTIM recovered shard [0-9]+ at step [0-9]+" \
  "$(fl_daemon_log run $VICTIM)" | awk '{ print $NF }')
echo "daemon $VICTIM died in step $died; its replacement recovered at ${at:-?}"
fl_expect "the replacement recovered at the last step committed before the kill" \
  "[[ '${at:-x}' == $((died - 1)) || '${at:-x}' == $died ]]"
fl_check_recovered run $VICTIM "${at:-$((died - 1))}"
fl_timeline run $VICTIM "$FL_KILL_TIME"
fl_finish
