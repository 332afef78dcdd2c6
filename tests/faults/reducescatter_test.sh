#!/usr/bin/env bash
# Fault test: SIGKILL a daemon in the middle of a reduce-scatter.
#
# Rank 2's daemon runs with --failpoint=reducescatter.mid:kill@N and dies
# inside its N-th reduce-scatter (one per unit and step: N = 11 is step 4's
# second unit). A replacement takes rank 2's slot as soon as the old daemon
# has exited. The survivors abort that step (gradients reduced so far are
# thrown away) and redo it once the replacement has copied shard 0 from
# rank 0 at the last committed step. Checks: fault_lib.sh's common ones
# (bit-equal parameters, commit logs), and that the replacement recovered at
# the step before the one the daemon died in. The replacement waits 1 s
# before it copies (fail point recovery.before_install), so that its trainer
# re-attaches first and waits in RegisterModel for the ready epoch; the
# copy must not wait for that call (the timeline includes the second).
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=2
fl_kill_by_failpoint run $RANK "reducescatter.mid:kill@11"
fl_start_daemon run $RANK --failpoint=recovery.before_install:sleep=1000
died=$(fl_died_in_step run $RANK)
echo "daemon $RANK died in step $died"
fl_expect "daemon $RANK died in step 4" "[[ $died -eq 4 ]]"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_check_recovered run $RANK $((died - 1))
fl_timeline run $RANK "$FL_KILL_TIME"
fl_finish
