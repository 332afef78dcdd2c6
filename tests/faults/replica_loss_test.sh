#!/usr/bin/env bash
# Fault test (compound): every replica of a shard is lost and there is no
# checkpoint: the job fails, once, and everything says so and stops.
#
# When trainer 1 prints "step 5", daemons 0 and 2 (the two holders of shard
# 0; W = 4, F = 2) get SIGKILL at the same moment, and replacements for
# both start at once. No daemon keeps checkpoints. Once both slots are
# claimed the coordinator knows shard 0 is gone for good: it logs JOB_FAILED
# once, naming the shard, its step, the ranks that held it and what is
# missing. Checks: within a few seconds of the kill every trainer exits 3
# printing the reason ("stopping: the job has failed: shard 0 at step N is
# lost: it was held by ranks 0, 2 ..."), every daemon (survivors and
# replacements) exits 3 after draining, the coordinator exits 3 once every
# member has left; the survivors' commit logs end with a final record at
# their last committed step (with its checksum, consistent across the
# replicas); nothing was planned as a checkpoint fallback and no epoch
# became ready after the loss.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"

fl_start_cluster run
fl_wait_line "$(fl_trainer_log run 1)" "^step 5 " 60 ||
  fl_die "trainer 1 did not commit step 5 within 60 s"
t_kill=$(fl_now)
kill -9 "${FL_DAEMON_PID[0]}" "${FL_DAEMON_PID[2]}"
fl_wait_exit "${FL_DAEMON_PID[0]}" 10 || fl_die "daemon 0 survived SIGKILL"
fl_wait_exit "${FL_DAEMON_PID[2]}" 10 || fl_die "daemon 2 survived SIGKILL"
fl_log "run: daemons 0 and 2 (every holder of shard 0) killed"
survivors=("${FL_DAEMON_PID[1]}" "${FL_DAEMON_PID[3]}")
fl_start_daemon run 0
fl_start_daemon run 2
daemons=("${survivors[@]}" "${FL_DAEMON_PID[0]}" "${FL_DAEMON_PID[2]}")

coord=$FL_ROOT/run/coord-1.log
fl_expect "the coordinator declared the job failed" \
  "fl_wait_line '$coord' 'JOB_FAILED' 30"
line=$(grep -m1 'JOB_FAILED' "$coord")
echo "coordinator: ${line:0:400}"
fl_expect "... naming shard 0, its step, its holders and the missing checkpoint" \
  "grep -Eq 'shard 0 at step [5-9] is lost: it was held by ranks 0, 2 .*no --checkpoint_dir' <<<\"\$line\""
fl_expect "... once" "[[ \$(grep -c 'JOB_FAILED' '$coord') -eq 1 ]]"

# Every process ends with the terminal status 3, within a few seconds.
t_end=$t_kill
for r in 0 1 2 3; do
  fl_expect_exit "trainer $r (job failed, not retrying)" "${FL_TRAINER_PID[$r]}" 30 3 &&
    t_end=$FL_EXIT_TIME
  fl_expect "trainer $r printed the reason" \
    "grep -Eq 'stopping: ([A-Za-z]+: )?the job has failed: shard 0 at step' '$(fl_trainer_log run $r)'"
done
for p in "${daemons[@]}"; do
  fl_expect_exit "daemon (pid $p) (job failed, after draining)" "$p" 30 3 &&
    t_end=$FL_EXIT_TIME
done
fl_expect_exit "the coordinator (job failed, every member left)" \
  "$FL_COORD_PID" 40 3
fl_expect "the coordinator said every member had left" \
  "grep -q 'every member has left, exiting with status 3' '$coord'"
echo "timeline: kill -> job failed: $(fl_report_since run "$t_kill" x 'JOB_FAILED' | grep -Eo '\+[0-9.]+ s')"
echo "timeline: kill -> every trainer and daemon exited: +$(fl_sub "$t_end" "$t_kill") s"
fl_expect "every trainer and daemon stopped within 15 s of the kill" \
  "awk -v d=\"\$(fl_sub '$t_end' '$t_kill')\" 'BEGIN { exit !(d < 15) }'"

fl_expect "no checkpoint fallback was planned and no epoch got ready after the loss" \
  "! grep -Eq 'checkpoint fallback|rolls back' '$coord'"
for r in 1 3; do
  last=$(grep -E '^commit ' "$FL_ROOT/run/commit-$r-1.log" | tail -1 | awk '{ print $2 }')
  fl_expect "survivor $r's commit log ends with a final record at its last step (${last:-none})" \
    "tail -1 '$FL_ROOT/run/commit-$r-1.log' | grep -q '^final $last '"
done
out=$("$FL_CHECK" --world_size=$FL_W --sharding_factor=$FL_F \
  "$FL_ROOT"/run/commit-*.log 2>&1)
rc=$?
echo "$out" | head -5
fl_expect "the commit logs are consistent (final records match the replicas)" "[[ $rc -eq 0 ]]"
fl_finish
