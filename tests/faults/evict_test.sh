#!/usr/bin/env bash
# Fault test: a node evicted (a Kubernetes eviction or drain, a supervisor
# stopping the node's processes): rank 2's daemon and its trainer both get
# SIGTERM in the middle of training, and both are started again at once,
# in either order.
#
# The daemon leaves gracefully (MEMBER_LEFT, exit 0), the survivors'
# step aborts, and the replacement daemon copies its shard from the
# replica. The new trainer may start before its daemon listens: it waits
# for it (before, it exited 1 at once with "no shardd daemon at ...", and
# the job then waited on a rank whose trainer was gone).
#
# run daemon_first: the daemon is started, then at once the trainer.
# run trainer_first: the trainer is started, then the daemon.
# Checks (each run): fault_lib.sh's common ones (bit-equal parameters,
# consistent commit logs), the daemon left gracefully and exited 0, the
# replacement copied shard 0 from rank 0, the new trainer re-joined at the
# committed step; in trainer_first, the new trainer said it waited.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
# Long enough to be mid-training at step 50 (~0.5 s of 3 s here).
FL_STEPS=300
fl_reference

RANK=2
evict_and_restart() {
  local run=$1 order=$2
  fl_start_cluster "$run"
  fl_wait_line "$(fl_trainer_log "$run" $RANK)" "^step 50 " 60 ||
    fl_die "$run: trainer $RANK did not reach step 50 within 60 s"
  t_evict=$(fl_now)
  kill -TERM "${FL_DAEMON_PID[$RANK]}" "${FL_TRAINER_PID[$RANK]}"
  fl_wait_exit "${FL_DAEMON_PID[$RANK]}" 30 ||
    fl_die "$run: daemon $RANK did not exit within 30 s of SIGTERM"
  fl_expect "$run: daemon $RANK exited 0 on SIGTERM" "[[ $FL_RC -eq 0 ]]"
  fl_wait_exit "${FL_TRAINER_PID[$RANK]}" 30 ||
    fl_die "$run: trainer $RANK did not exit within 30 s of SIGTERM"
  fl_log "$run: rank $RANK evicted (daemon and trainer SIGTERM)"
  if [[ $order == daemon_first ]]; then
    fl_start_daemon "$run" $RANK
    fl_start_trainer "$run" $RANK
  else
    fl_start_trainer "$run" $RANK
    fl_wait_line "$(fl_trainer_log "$run" $RANK)" \
      "^waiting for the shardd daemon at unix:" 30 ||
      fl_die "$run: the new trainer did not wait for its daemon"
    fl_start_daemon "$run" $RANK
  fi
  fl_wait_trainers "$run"
  fl_check_run "$run" "$FL_REF"
  local coord="$FL_ROOT/$run/coord-1.log"
  fl_expect "$run: daemon $RANK left gracefully" \
    "grep -q 'MEMBER_LEFT: rank $RANK left' '$coord'"
  fl_expect "$run: its replacement copied shard 0 from rank 0" \
    "grep -Eq 'RECOVERY_PLANNED: rank $RANK copies shard 0 at step [0-9]+ from rank\\(s\\) 0' '$coord'"
  fl_expect "$run: the new trainer joined at the committed step" \
    "grep -Eq '^registered rank $RANK of 4 .*committed step (4[0-9]|5[0-9])' '$(fl_trainer_log "$run" $RANK)'"
  fl_report_since "$run" "$t_evict" "eviction -> epoch ready again" \
    "EPOCH_READY: epoch [0-9]+ ready: all 4 members READY at step [1-9]"
  fl_kill_all
}

evict_and_restart daemon_first daemon_first
evict_and_restart trainer_first trainer_first
fl_expect "trainer_first: the new trainer said it waited for its daemon" \
  "grep -q '^waiting for the shardd daemon at unix:' '$(fl_trainer_log trainer_first $RANK)'"
fl_finish
