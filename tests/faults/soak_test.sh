#!/usr/bin/env bash
# Soak (opt-in): SIGKILL a random daemon at a random moment, again and
# again, with a replacement each time, in one long training run.
#
#   SHARDD_SOAK=1             required (the target is also tagged manual);
#                             scripts/soak sets it
#   SHARDD_SOAK_KILLS=20      how many daemons to kill
#   SHARDD_SOAK_STEPS=600     training steps (enough to outlast the kills:
#                             each kill and recovery lets 15-30 steps pass)
#   SHARDD_SOAK_SEED=N        the random sequence (default: from the time;
#                             printed, so that a run can be repeated)
#
# Loop, KILLS times: sleep a random 0.05..0.6 s (the random moment: any
# point of a step (~0.1 s here), a vote or an optimizer update); SIGKILL the daemon of a
# random rank; once it has exited, start its replacement and wait until it
# has recovered its shard (so that a kill never takes the last live replica
# of a shard: W/F = 2 keeps two). Then the run trains to the end and the
# common checks apply (fault_lib.sh): every trainer finished all steps, the
# parameters equal the no-fault run's bit for bit, and the commit logs of
# all 4 + KILLS daemon incarnations are consistent. Per kill it prints the
# step, how long until the coordinator noticed, and until all ranks were
# ready again.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
if [[ "${SHARDD_SOAK:-}" != 1 ]]; then
  echo "The soak is opt-in: run scripts/soak, or" \
    "bazel test //tests/faults:soak_test --test_env=SHARDD_SOAK=1"
  exit 1
fi
KILLS=${SHARDD_SOAK_KILLS:-20}
FL_STEPS=${SHARDD_SOAK_STEPS:-600}
SEED=${SHARDD_SOAK_SEED:-$(($(date +%s) % 32768))}
FL_DEADLINE=$((120 + 2 * FL_STEPS))
RANDOM=$SEED
echo "soak: $KILLS kills, $FL_STEPS steps, seed $SEED" \
  "(repeat with SHARDD_SOAK_SEED=$SEED)"
fl_init "$@"
fl_reference

fl_start_cluster run
fl_wait_line "$(fl_trainer_log run 0)" '^step 1 ' 60 ||
  fl_die "run: training did not start within 60 s"
ready_times=()
for ((k = 1; k <= KILLS; k++)); do
  # The random moment. This sleep is the point of the soak, not a wait.
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.3f", 0.05 + 0.55 * r / 32767 }')"
  r=$((RANDOM % FL_W))
  step=$(fl_last_step "$(fl_trainer_log run 0)")
  if ((step >= FL_STEPS - 5)); then
    fl_die "kill $k: training reached step $step of $FL_STEPS before the" \
      "last kill; raise SHARDD_SOAK_STEPS"
  fi
  t_kill=$(fl_now)
  kill -9 "${FL_DAEMON_PID[$r]}"
  fl_wait_exit "${FL_DAEMON_PID[$r]}" 10 || fl_die "kill $k: daemon $r survived SIGKILL"
  fl_start_daemon run "$r"
  log=$(fl_daemon_log run "$r")
  if ! fl_wait_line "$log" "^shardd rank $r recovered shard" 60; then
    fl_expect "kill $k: the replacement of rank $r recovered within 60 s" false
    break
  fi
  detect=$(fl_event_after run "$t_kill" "FAILURE_REPORT|MEMBER_REMOVED: rank $r ")
  ready=""
  end=$((SECONDS + 30))
  while [[ -z "$ready" ]] && ((SECONDS < end)); do
    ready=$(fl_event_after run "$t_kill" \
      "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY")
    [[ -n "$ready" ]] || sleep 0.01  # poll interval
  done
  [[ -n "$ready" ]] || {
    echo "FAILED: kill $k: all ranks not ready again within 30 s"
    fl_fail=1
  }
  d_detect="?" d_ready="?"
  [[ -n "$detect" ]] && d_detect=$(fl_sub "$(fl_coord_time "$detect")" "$t_kill")
  [[ -n "$ready" ]] && d_ready=$(fl_sub "$(fl_coord_time "$ready")" "$t_kill")
  [[ -n "$ready" ]] && ready_times+=("$d_ready")
  echo "kill $k: rank $r at step ~$step; detected +$d_detect s, ready +$d_ready s;" \
    "$(grep -o 'recovered shard .*' "$log")"
done
fl_wait_trainers run
fl_check_run run "$FL_REF"
recovered=$(cat "$FL_ROOT"/run/d*.log | grep -c 'recovered shard')
fl_expect "$KILLS replacements recovered their shard" "[[ $recovered -eq $KILLS ]]"
fl_expect "the commit logs cover 4 + $KILLS daemon incarnations" \
  "[[ \$(ls '$FL_ROOT'/run/commit-*.log | wc -l) -eq $((FL_W + KILLS)) ]]"
printf '%s\n' "${ready_times[@]}" | sort -n |
  awk '{ v[NR] = $1 } END { if (NR) printf "kill -> all ready: min %.3f s, median %.3f s, max %.3f s (%d kills)\n", v[1], v[int((NR + 1) / 2)], v[NR], NR }'
fl_finish
