#!/usr/bin/env bash
# Fault test: crash leftovers. Five daemons SIGKILLed one after the other
# (ranks 1, 3, 0, 2, 1), each replaced at once; the shared-memory folder
# must end holding exactly the live daemons' segments.
#
# Every daemon sweeps the folder before it creates a segment (and every
# --shm_sweep_interval_ms): a prefix whose owner file is no longer locked
# belongs to a dead daemon, and its files go. Checks: fault_lib.sh's common
# ones (every trainer finished, final parameters bit-equal to the no-fault
# run, commit logs consistent); each replacement logged the dead daemon's
# files it removed (five in all); afterwards every "shardd-<pid>.*" file
# belongs to one of the four live daemons (and each has its owner file),
# each live daemon's segments hold exactly the bytes its memory plan gives
# the gathered parameters and unsharded gradients (`shardctl memory`), and
# no trainer still maps a dead daemon's (deleted) segment.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
FL_STEPS=24
fl_init "$@"
fl_reference

fl_start_cluster run
d="$FL_ROOT/run"
step=3
dead=()
for r in 1 3 0 2 1; do
  watch=$(((r + 1) % FL_W))  # a trainer whose daemon lives on
  fl_wait_line "$(fl_trainer_log run $watch)" "^step $step " 90 ||
    fl_die "trainer $watch did not commit step $step"
  dead+=("${FL_DAEMON_PID[$r]}")
  kill -9 "${FL_DAEMON_PID[$r]}"
  fl_wait_exit "${FL_DAEMON_PID[$r]}" 10 || fl_die "daemon $r survived SIGKILL"
  fl_start_daemon run $r
  fl_wait_line "$(fl_daemon_log run $r)" "^shardd rank $r recovered shard" 60 ||
    fl_die "the replacement of rank $r did not recover"
  fl_log "run: daemon $r (pid ${dead[-1]}) killed at step $step and replaced"
  step=$((step + 3))
done
# A step after the last re-attach: the trainer dropped the old views.
fl_wait_line "$(fl_trainer_log run 1)" "^step $((step + 1)) " 90 ||
  fl_die "trainer 1 did not go on after the last recovery"
for p in "${dead[@]}"; do
  for r in 0 1 2 3; do
    fl_expect "trainer $r maps no segment of the dead daemon $p" \
      "! grep -q 'shardd-$p\\.' /proc/${FL_TRAINER_PID[$r]}/maps"
  done
done
fl_wait_trainers run
fl_check_run run "$FL_REF"

swept=$(cat "$d"/d*-*.log | grep -c 'shm sweep: removed a dead daemon')
fl_expect "the replacements removed the five dead daemons' files ($swept sweeps)" \
  "[[ $swept -eq 5 ]]"
cat "$d"/d*-*.log | grep 'shm sweep: removed' | head -5
live=()
for r in 0 1 2 3; do live+=("${FL_DAEMON_PID[$r]}"); done
for f in "$d"/shardd-*.*; do
  [[ -e "$f" ]] || continue
  pid=$(basename "$f" | sed -E 's/^shardd-([0-9]+)\..*/\1/')
  fl_expect "$(basename "$f") belongs to a live daemon" \
    "[[ ' ${live[*]} ' == *' $pid '* ]]"
done
# The segments' lengths (the plan's byte counts; the pages they occupy are
# rounded up).
bytes() { cat "$d"/shardd-"$1".[0-9]* 2>/dev/null | wc -c; }
for r in 0 1 2 3; do
  fl_expect "daemon $r holds its owner file and segments" \
    "[[ -e '$d/shardd-${live[$r]}.owner' && \$(bytes ${live[$r]}) -gt 0 ]]"
done
for r in 0 1 2 3; do
  "$FL_SHARDCTL" --socket="$d/s$r.sock" memory >"$d/memory-$r.txt" 2>&1
  # "gathered parameters  PLANNED HELD ..." and the same for gradients.
  planned=$(awk '/^gathered parameters|^unsharded gradients/ { s += $3 } END { print s + 0 }' "$d/memory-$r.txt")
  fl_expect "daemon $r's segments hold $(bytes "${live[$r]}") bytes, as its plan says ($planned: gathered parameters + unsharded gradients)" \
    "[[ $planned -gt 0 && \$(bytes ${live[$r]}) -eq $planned ]]"
done
fl_finish
