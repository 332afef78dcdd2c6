#!/usr/bin/env bash
# Fault test (compound): every replica of a shard is lost, and every daemon
# keeps sharded checkpoints: the job rolls back instead of failing.
#
# As replica_loss_test (daemons 0 and 2, both holders of shard 0, SIGKILLed
# together, replacements started at once), but every daemon writes a
# checkpoint every 3 steps (--checkpoint_dir, one folder per rank that the
# replacement finds again). Every member reports the checkpoints it
# verified, so the coordinator plans a rollback to the newest step every
# rank holds; every rank not already at that step restores its checkpoint
# of it and the trainers redo the steps after it. Checks: fault_lib.sh's
# common ones (every trainer finished, final parameters bit-equal to the
# no-fault run, commit logs with their checkpoint_restored records
# consistent), the ranks restored the same step: the newest both killed
# ranks had written when they died, a multiple of 3 at or after step 6 and
# at most the step the cluster had reached, and the job did not fail.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-ref"
  --checkpoint_interval_steps=3)
fl_reference

FL_DAEMON_FLAGS=(--checkpoint_dir="$FL_ROOT/ckpt-run"
  --checkpoint_interval_steps=3)
fl_start_cluster run
fl_wait_line "$(fl_trainer_log run 1)" "^step 7 " 60 ||
  fl_die "trainer 1 did not commit step 7 within 60 s"
t_kill=$(fl_now)
kill -9 "${FL_DAEMON_PID[0]}" "${FL_DAEMON_PID[2]}"
fl_wait_exit "${FL_DAEMON_PID[0]}" 10 || fl_die "daemon 0 survived SIGKILL"
fl_wait_exit "${FL_DAEMON_PID[2]}" 10 || fl_die "daemon 2 survived SIGKILL"
fl_log "run: daemons 0 and 2 (every holder of shard 0) killed"
# The newest checkpoint both killed ranks had written when they died (their
# folders are frozen from now on; the live ranks committed at least their
# steps, and write a step's checkpoint before answering its Step): the
# newest step every rank holds, which the rollback must pick. How many
# steps the ranks got past step 7 before the kill landed depends on the
# machine's speed, so the step itself is read, not assumed.
newest_of() {
  local f n best=0
  for f in "$FL_ROOT/ckpt-run/rank-$1"/step-*.shardckpt; do
    [[ -e "$f" ]] || continue
    n=${f##*/step-}
    n=${n%.shardckpt}
    ((n > best)) && best=$n
  done
  echo "$best"
}
newest0=$(newest_of 0)
newest2=$(newest_of 2)
newest_common=$((newest0 < newest2 ? newest0 : newest2))
fl_log "run: newest checkpoints of the killed ranks: rank 0 step $newest0, rank 2 step $newest2"
# The replacements wait 1.5 s before they restore, so that their trainers
# have re-attached (see checkpoint_test).
fl_start_daemon run 0 --failpoint=recovery.before_install:sleep=1500
fl_start_daemon run 2 --failpoint=recovery.before_install:sleep=1500
fl_wait_trainers run
fl_check_run run "$FL_REF"

coord=$FL_ROOT/run/coord-1.log
plan=$(grep -m1 'RECOVERY_PLANNED: shard 0 at step' "$coord")
echo "coordinator: ${plan:0:400}"
restored=$(grep -Eo 'rolls back to its checkpoint of step [0-9]+' <<<"$plan" |
  grep -Eo '[0-9]+$')
lost=$(grep -Eo 'shard 0 at step [0-9]+' <<<"$plan" | grep -Eo '[0-9]+$')
fl_expect "the coordinator planned a rollback of every rank (shard 0 lost at step ${lost:-?}, back to ${restored:-?})" \
  "[[ -n '$restored' && -n '$lost' ]] && grep -q 'it was held by ranks 0, 2' <<<\"\$plan\""
fl_expect "... to the newest checkpoint every rank holds (step $newest_common): a multiple of 3, >= 6, <= step $lost" \
  "[[ -n '$restored' && \$((restored % 3)) -eq 0 && $restored -ge 6 && $restored -le ${lost:-0} && $restored -eq $newest_common ]]"
# The killed ranks' replacements restore. A survivor restores too, unless
# the kill landed right after the checkpoint step (restored = lost): then
# it is at that step already and the plan leaves its state as it is (the
# final parameters, checked above, show it was right). Faster steps make
# that landing likelier.
for ((r = 0; r < FL_W; r++)); do
  restore_line="^shardd rank $r restored its checkpoint of step $restored from $FL_ROOT/ckpt-run/rank-$r/step-$restored.shardckpt"
  if [[ $r == 0 || $r == 2 || ${restored:-0} != "${lost:-0}" ]]; then
    fl_expect "rank $r restored its checkpoint of step $restored" \
      "cat '$FL_ROOT'/run/d$r-*.log | grep -q '$restore_line'"
  else
    fl_expect "rank $r kept its state (already at step $restored)" \
      "! cat '$FL_ROOT'/run/d$r-*.log | grep -q 'restored its checkpoint'"
  fi
done
fl_expect "the epoch became ready at step $restored as a checkpoint fallback" \
  "grep -q 'READY at step $restored (checkpoint fallback' '$coord'"
fl_expect "the job did not fail or stall" "! grep -Eq 'JOB_FAILED|EPOCH_STALLED' '$coord'"
fl_report_since run "$t_kill" "kill -> rollback planned" "RECOVERY_PLANNED: shard 0 "
fl_report_since run "$t_kill" "kill -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_finish
