#!/usr/bin/env bash
# Fault test: a second trainer process started for rank 2 while the first
# still runs (a supervisor restarting a trainer it believes dead, a stale
# process left over by an earlier launch).
#
# Rank 2's first trainer stops itself in step 5 (--stop_in_step, after its
# first ReduceGrad); a new trainer for rank 2 starts against the same
# daemon and re-attaches, and only then is the first continued. The new
# one's attachment supersedes the first's: the daemon refuses the first's
# calls by name (FAILED_PRECONDITION "... is superseded ..."), so it exits
# 1 instead of interleaving its steps with the new one's (before, the two
# interleaved until one failed with "unit 2 was already reduced", which of
# them by chance). Checks: fault_lib.sh's common ones on the newest trainer
# of each rank, the first trainer of rank 2 exited 1 saying why.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

RANK=2
FL_TRAINER_FLAGS_RANK=$RANK FL_TRAINER_FLAGS=(--stop_in_step=5)
fl_start_cluster run
first=${FL_TRAINER_PID[$RANK]}
first_log=$(fl_trainer_log run $RANK)
fl_wait_line "$first_log" "^stopping in step 5" 60 ||
  fl_die "trainer $RANK did not reach step 5 within 60 s"
fl_start_trainer run $RANK
fl_wait_line "$(fl_trainer_log run $RANK)" "(re-attached)" 60 ||
  fl_die "the second trainer of rank $RANK did not re-attach within 60 s"
kill -CONT "$first"
fl_log "run: a second trainer for rank $RANK re-attached; the first continued"
fl_wait_trainers run
fl_wait_exit "$first" 60 || fl_die "the first trainer of rank $RANK still runs"
fl_check_run run "$FL_REF"
fl_expect "the superseded trainer exited 1 (got $FL_RC)" "[[ $FL_RC -eq 1 ]]"
fl_expect "the superseded trainer was told why" \
  "grep -q 'FAILED_PRECONDITION: .*attachment [0-9a-f]* is superseded' '$first_log'"
fl_finish
