#!/usr/bin/env bash
# Fault test: a rolling restart of every daemon (an upgrade of the shardd
# sidecars, one node at a time) while training goes on.
#
# Daemon r (0, 1, 2, 3 in turn) gets SIGTERM while its trainer keeps
# running; once it has exited (0) a new daemon takes its slot and socket,
# and the next one goes once all four are READY again. Each time the
# survivors' step aborts, the new daemon copies its shard from the replica,
# and the trainer re-attaches to it. Before the fix, a trainer whose call
# the stopping daemon's server cancelled ("ReduceGrad(unit 1): CANCELLED")
# exited 1 instead of re-attaching (2 of 3 runs), and the job then waited
# on a rank without a trainer.
#
# Checks: fault_lib.sh's common ones (bit-equal parameters, consistent
# commit logs of every daemon incarnation), every stopped daemon exited 0
# and left gracefully, every replacement copied its shard, and every
# trainer re-attached exactly once.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
FL_STEPS=400
fl_reference

fl_start_cluster run
coord="$FL_ROOT/run/coord-1.log"
t_start=$(fl_now)
for r in 0 1 2 3; do
  step=$((40 + r * 60))
  fl_wait_line "$(fl_trainer_log run 0)" "^step $step " 120 ||
    fl_die "trainer 0 did not reach step $step within 120 s"
  ready=$(grep -c 'EPOCH_READY: .*all 4 members READY' "$coord")
  kill -TERM "${FL_DAEMON_PID[$r]}"
  fl_wait_exit "${FL_DAEMON_PID[$r]}" 30 ||
    fl_die "daemon $r did not exit within 30 s of SIGTERM"
  fl_expect "daemon $r exited 0 on SIGTERM" "[[ $FL_RC -eq 0 ]]"
  fl_start_daemon run $r
  end=$((SECONDS + 60))
  until [[ $(grep -c 'EPOCH_READY: .*all 4 members READY' "$coord") -gt $ready ]]; do
    ((SECONDS < end)) || fl_die "not all 4 READY within 60 s of daemon $r's restart"
    sleep 0.05 # poll interval
  done
  fl_log "run: daemon $r restarted"
done
fl_wait_trainers run
fl_check_run run "$FL_REF"
for r in 0 1 2 3; do
  fl_expect "daemon $r left gracefully" \
    "grep -q 'MEMBER_LEFT: rank $r left: SIGTERM' '$coord'"
  fl_expect "daemon $r's replacement copied shard $((r % 2))" \
    "grep -Eq 'RECOVERY_PLANNED: rank $r copies shard $((r % 2)) at step [0-9]+ from rank' '$coord'"
  fl_expect "trainer $r re-attached once" \
    "[[ \$(grep -c '^re-attached: ' '$(fl_trainer_log run $r)') -eq 1 ]]"
done
echo "timeline: four rolling restarts and the rest of training: +$(fl_sub "$(fl_now)" "$t_start") s"
fl_finish
