#!/usr/bin/env bash
# Fault test: SIGKILL a daemon in the middle of the optimizer step.
#
# Rank 3's daemon runs with --failpoint=optimizer.mid:kill@4: in step 4,
# after the commit vote said "commit", it has updated half of its units and
# dies (its shard is half-applied, and lost with the process). The
# survivors voted too and commit step 4; rank 3's replica (rank 1) holds
# shard 1 at step 4, so the replacement must recover AT step 4, not redo
# it. Checks: fault_lib.sh's common ones (bit-equal parameters, commit logs:
# step 4 committed once per rank, the old rank 3 never committed it), the
# survivors' trainers committed step 4 in the first attempt, and the
# replacement and rank 3's trainer continue from step 4.
#
# The daemons of the faulty run use --recovery_transport=stream: the other
# fault tests copy shards over the replica group (the default), this one
# checks the copy inside the FetchShard stream. In the stream every state
# section is a chunk of its own, so the replacement, which sleeps 1 s once
# half of the shard has arrived (transfer.target.mid:sleep, from
# SHARDD_FAILPOINT; the first incarnation's --failpoint flag overrides it),
# must show the copy's bytes between 0 and the total in its WatchEvents
# (ProgressThrottle reports at most every 250 ms), not only at 0. (Over the
# replica group this model's shard is two pieces, parameters and optimizer
# state, and the second crosses the half: nothing between 0 and the total
# to see.)
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference
FL_DAEMON_FLAGS=(--recovery_transport=stream)
FL_TRANSPORT="in the stream"

RANK=3
STEP=4
FL_DAEMON_ENV=(SHARDD_FAILPOINT=transfer.target.mid:sleep=1000)
FL_DAEMON_ENV_RANK=$RANK
FL_COPY_PROGRESS_MID=1
fl_kill_by_failpoint run $RANK "optimizer.mid:kill@$STEP"
fl_start_daemon run $RANK
died=$(fl_died_in_step run $RANK)
echo "daemon $RANK died in step $died"
fl_expect "daemon $RANK died in step $STEP" "[[ $died -eq $STEP ]]"
fl_wait_trainers run
fl_check_run run "$FL_REF"
for r in 0 1 2; do
  fl_expect "trainer $r committed step $STEP without an abort" \
    "! grep -q '^step $STEP aborted' '$(fl_trainer_log run $r)' &&
     grep -q '^step $STEP loss' '$(fl_trainer_log run $r)'"
done
fl_expect "the old rank $RANK daemon never committed step $STEP" \
  "! grep -q '^commit step=$STEP ' '$FL_ROOT/run/commit-$RANK-1.log'"
fl_check_recovered run $RANK $STEP
fl_timeline run $RANK "$FL_KILL_TIME"
fl_finish
