#!/usr/bin/env bash
# Fault test: the coordinator and a daemon run out of file descriptors
# mid-training.
#
# When rank 1's trainer prints "step 20", fd_shortage_lib.sh fills the
# descriptor tables of the coordinator and of rank 1's daemon with held
# connections. Training goes on meanwhile over the connections already
# open: every trainer commits 10 more steps, nobody is removed. Then the
# flood lets go: a new client (shardctl) reaches the coordinator and rank
# 1's daemon, on new connections, and training completes. Checks:
# fault_lib.sh's common ones (bit-equal parameters, commit logs), the
# shortage was real (both tables full, both processes said so), no member
# was removed, both listeners said they accept again.
set -uo pipefail
FL_STEPS=${FL_STEPS:-300}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
# shellcheck source=fd_shortage_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fd_shortage_lib.sh"
fl_init "$@"
[[ -n "$FL_SHARDCTL" ]] || fl_die "usage: ... SHARDCTL (fifth argument)"
fl_reference

RANK=1
fl_start_cluster run
d="$FL_ROOT/run"
fl_wait_line "$(fl_trainer_log run $RANK)" "^step 20 " 60 ||
  fl_die "trainer $RANK did not commit step 20 within 60 s"
fs_start run $RANK

# Training goes on over the open connections: 10 more steps everywhere.
for ((r = 0; r < FL_W; r++)); do
  target=$(($(fl_last_step "$(fl_trainer_log run $r)") + 10))
  fl_expect "trainer $r commits step $target during the shortage" \
    "fl_wait_line '$(fl_trainer_log run $r)' '^step $target ' 60"
done
fl_expect "both tables are still full at the end of the shortage" \
  "fs_full $FL_COORD_PID && fs_full $FS_DAEMON"

fs_release run
fl_expect "a new client reaches the coordinator" \
  "'$FL_SHARDCTL' --coordinator=127.0.0.1:$FL_PORT cluster >'$d/cluster.txt'"
fl_expect "a new client reaches daemon $RANK's Trainer socket" \
  "'$FL_SHARDCTL' --socket=$d/s$RANK.sock status >'$d/status.txt'" ||
  echo "descriptors of daemon $RANK now: $(fs_fds "$FS_DAEMON")"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_expect "nobody was removed during the shortage" \
  "! grep -q MEMBER_REMOVED '$FS_COORD_LOG'"
fl_expect "the coordinator's listener accepts again" \
  "grep -q 'accept on .* works again' '$FS_COORD_LOG'"
fl_expect "daemon $RANK's listeners accept again" \
  "grep -q 'accept on unix:.* works again' '$FS_DAEMON_LOG'"
fl_log "run: shortage from +$(fl_sub "$FS_T0" "$FL_T0") s"
fl_finish
