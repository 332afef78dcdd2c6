#!/usr/bin/env bash
# Fault test: commit votes whose answer never arrives (members in doubt).
#
# A member that voted yes on step N and did not hear the decision keeps the
# prepared step (gradients reduced, norm and clip scale known) and, when the
# next epoch forms, applies it if the coordinator or another member holds
# step N committed, else drops it (recovery::InDoubtStepWasCommitted). The
# runs, each checked with fault_lib.sh's common ones (bit-equal parameters;
# commit logs: step 5 committed exactly once per rank, replicas agree):
#   one_lost   rank 2 loses the answer to its step-5 vote
#              (--failpoint=vote.answer:fail@5) while the others commit:
#              rank 2 applies step 5 in the next epoch, its trainer goes on
#              with step 6;
#   all_lost   every daemon loses it: the coordinator had decided to commit,
#              so every member applies step 5 in the next epoch;
#   no_answer  rank 2's daemon dies before voting on step 5
#              (vote.before:kill@5): no decision is ever made, the others
#              drop their prepared step 5 and redo it with rank 2's
#              replacement;
#   coordinator_died  the coordinator decides to commit step 5 and dies
#              before answering anyone (SHARDD_FAILPOINT=commit.decided:
#              kill@5); a new one starts on the same port with no state, the
#              members re-join at step 4, nobody applied step 5: all drop it
#              and redo it;
#   decision_logged  the same with --decision_log on both coordinators:
#              the first recorded (and synced) its decision before it died,
#              the second reads it and settles step 5 at the members'
#              re-join: every member applies its in-doubt step 5, nobody
#              redoes it. Had one member applied it and died with the
#              coordinator, its trainer's "committed" would stand.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
fl_reference

STEP=5
# one_lost
fl_start_cluster one_lost 2 --failpoint=vote.answer:fail@$STEP
fl_wait_trainers one_lost
fl_check_run one_lost "$FL_REF"
log=$(fl_daemon_log one_lost 2)
grep -E "in doubt|in-doubt" "$log" | cut -c1-160 | sed 's/^/  rank 2: /'
fl_expect "one_lost: rank 2 lost the answer to its step $STEP vote" \
  "grep -q '^failpoint vote.answer: fail (hit $STEP)' '$log' &&
   grep -q '^shardd rank 2: step $STEP is in doubt' '$log'"
fl_expect "one_lost: rank 2 applied step $STEP in the next epoch" \
  "grep -q '^shardd rank 2: in-doubt step $STEP applied' '$log'"
fl_expect "one_lost: rank 2's trainer saw step $STEP aborted, never redid it" \
  "grep -q '^step $STEP aborted' '$(fl_trainer_log one_lost 2)' &&
   ! grep -q '^step $STEP loss' '$(fl_trainer_log one_lost 2)'"
for r in 0 1 3; do
  fl_expect "one_lost: rank $r committed step $STEP in the vote itself" \
    "grep -q '^step $STEP loss' '$(fl_trainer_log one_lost $r)' &&
     ! grep -q 'in-doubt step $STEP' '$(fl_daemon_log one_lost $r)'"
done
fl_kill_all

# all_lost
lost=--failpoint=vote.answer:fail@$STEP
fl_start_cluster all_lost 0 "$lost" 1 "$lost" 2 "$lost" 3 "$lost"
fl_wait_trainers all_lost
fl_check_run all_lost "$FL_REF"
for r in 0 1 2 3; do
  fl_expect "all_lost: rank $r applied step $STEP in the next epoch" \
    "grep -q '^shardd rank $r: in-doubt step $STEP applied' '$(fl_daemon_log all_lost $r)'"
done
fl_kill_all

# no_answer
fl_start_cluster no_answer 2 --failpoint=vote.before:kill@$STEP
fl_wait_exit "${FL_DAEMON_PID[2]}" 60 ||
  fl_die "no_answer: daemon 2 (vote.before:kill@$STEP) still alive after 60 s"
fl_expect "no_answer: daemon 2 was SIGKILLed before its step $STEP vote" \
  "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint vote.before: kill' '$(fl_daemon_log no_answer 2)'"
fl_start_daemon no_answer 2
fl_wait_trainers no_answer
fl_check_run no_answer "$FL_REF"
dropped=0
for r in 0 1 3; do
  if grep -q "^shardd rank $r: in-doubt step $STEP dropped" \
    "$(fl_daemon_log no_answer $r)"; then
    dropped=$((dropped + 1))
  fi
  fl_expect "no_answer: rank $r never applied step $STEP from a vote without a decision" \
    "! grep -q 'in-doubt step $STEP applied' '$(fl_daemon_log no_answer $r)'"
done
echo "no_answer: $dropped survivor(s) dropped a prepared step $STEP"
fl_expect "no_answer: a survivor that had voted dropped its prepared step" \
  "[[ $dropped -ge 1 ]]"
fl_check_recovered no_answer 2 $((STEP - 1))
fl_kill_all

# coordinator_died
SHARDD_FAILPOINT="commit.decided:kill@$STEP" fl_start_cluster coordinator_died
fl_wait_exit "$FL_COORD_PID" 60 ||
  fl_die "coordinator_died: the coordinator (commit.decided:kill@$STEP) still alive after 60 s"
fl_expect "coordinator_died: the coordinator died right after deciding step $STEP" \
  "[[ $FL_RC -eq 137 ]] &&
   grep -q '^failpoint commit.decided: kill (hit $STEP)' '$FL_ROOT/coordinator_died/coord-1.log'"
fl_start_coordinator coordinator_died "$FL_PORT"
fl_log "coordinator_died: coordinator restarted on port $FL_PORT"
fl_wait_trainers coordinator_died
fl_check_run coordinator_died "$FL_REF"
for r in 0 1 2 3; do
  fl_expect "coordinator_died: rank $r dropped its in-doubt step $STEP" \
    "grep -q '^shardd rank $r: in-doubt step $STEP dropped' '$(fl_daemon_log coordinator_died $r)'"
done
fl_kill_all

# decision_logged
FL_COORD_FLAGS=(--decision_log="$FL_ROOT/decisions.log")
SHARDD_FAILPOINT="commit.decided:kill@$STEP" fl_start_cluster decision_logged
fl_wait_exit "$FL_COORD_PID" 60 ||
  fl_die "decision_logged: the coordinator (commit.decided:kill@$STEP) still alive after 60 s"
fl_expect "decision_logged: the coordinator died right after recording step $STEP" \
  "[[ $FL_RC -eq 137 ]] && tail -1 '$FL_ROOT/decisions.log' | grep -q '^commit step=$STEP '"
fl_start_coordinator decision_logged "$FL_PORT"
fl_log "decision_logged: coordinator restarted on port $FL_PORT with the log"
fl_wait_trainers decision_logged
fl_check_run decision_logged "$FL_REF"
fl_expect "decision_logged: the new coordinator settled step $STEP from the log" \
  "grep -q 'step $STEP was committed by the previous coordinator' '$FL_ROOT/decision_logged/coord-2.log'"
for r in 0 1 2 3; do
  fl_expect "decision_logged: rank $r applied its in-doubt step $STEP" \
    "grep -q '^shardd rank $r: in-doubt step $STEP applied' '$(fl_daemon_log decision_logged $r)'"
done
FL_COORD_FLAGS=()
fl_finish
