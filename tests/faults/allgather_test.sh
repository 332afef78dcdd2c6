#!/usr/bin/env bash
# Fault test: SIGKILL a daemon in the middle of an all-gather.
#
# Rank 1's daemon runs with --failpoint=allgather.mid:kill@14 and dies
# inside its 14th all-gather: the example trainer's Gathers are a fixed
# sequence, 4 all-gathers per step (3 units forward, 1 re-gathered for
# backward), so that is step 4's second. A replacement shardd takes rank 1's slot as soon as the
# old one has exited. The survivors' all-gather fails, they abort that step
# and redo it after the replacement copied shard 1 from rank 3 (its replica)
# at the last committed step. Checks: fault_lib.sh's common ones (bit-equal
# parameters, commit logs), and that the replacement recovered at the step
# before the one the daemon died in.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=1
fl_kill_by_failpoint run $RANK "allgather.mid:kill@14"
fl_start_daemon run $RANK
died=$(fl_died_in_step run $RANK)
echo "daemon $RANK died in step $died"
fl_expect "daemon $RANK died in step 4" "[[ $died -eq 4 ]]"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_check_recovered run $RANK $((died - 1))
fl_timeline run $RANK "$FL_KILL_TIME"
fl_finish
