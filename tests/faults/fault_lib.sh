# shellcheck shell=bash disable=SC2034  # FL_* globals are for the tests
# Shared helpers of the fault tests (tests/faults/*_test.sh), sourced, not
# run. A test calls
#
#   source "$(dirname "$0")/fault_lib.sh"
#   fl_init "$@"        # COORDINATOR SHARDD TRAINER COMMIT_LOG_CHECK
#   fl_reference        # the no-fault run of this target: $FL_REF/params.bin
#   fl_start_cluster run
#   ...                 # the fault, with the helpers below
#   fl_wait_trainers run
#   fl_check_run run    # the common assertions
#   fl_finish
#
# Every run is a coordinator, W = 4 shardd daemons and W = 4 example
# trainers (HYBRID_SHARD, F = 2, the example model's defaults, FL_STEPS
# steps) as real processes on 127.0.0.1. The common assertions after a
# fault run: every trainer finished all FL_STEPS steps; no epochs stalled
# (EPOCH_STALLED) and the job never failed; the final parameters equal this target's own no-fault run bit for bit (cmp); the
# commit logs of every daemon incarnation (old and replacement daemons
# write separate files) pass commit_log_check with --final_step: no step
# committed twice or skipped, replicas' checksums equal at every step.
#
# Synchronisation is by log lines and process exits, each with a deadline
# (fl_wait_line, fl_wait_exit, fl_wait_trainers); nothing sleeps to let
# something happen. Every process started here is a direct child of the
# test shell (no timeout(1) wrappers, so a trainer's pid is the trainer's)
# and is SIGKILLed on every exit path.
#
# Files: one short folder under $TMPDIR (Unix socket paths must stay under
# 108 bytes, which TEST_TMPDIR's does not promise), removed at exit. On
# failure the logs are copied to $TEST_UNDECLARED_OUTPUTS_DIR (Bazel's
# outputs.zip) and their tails printed. Nothing is cached between targets.

FL_W=4
FL_F=2
FL_STRATEGY=HYBRID_SHARD
FL_STEPS=${FL_STEPS:-12}
FL_DEADLINE=${FL_DEADLINE:-120}  # seconds for a whole run's trainers
fl_fail=0
fl_pids=()

fl_init() {
  if [[ $# -lt 4 ]]; then
    echo "usage: $0 COORDINATOR SHARDD TRAINER COMMIT_LOG_CHECK [SHARDCTL]" >&2
    exit 2
  fi
  FL_COORDINATOR=$1 FL_SHARDD=$2 FL_TRAINER=$3 FL_CHECK=$4 FL_SHARDCTL=${5:-}
  FL_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/faults.XXXXXX")
  FL_T0=$(fl_now)
  trap fl_exit EXIT
  trap 'exit 3' INT TERM
}

fl_now() { date +%s.%N; }
# fl_sub A B: A - B in seconds, 3 decimals.
fl_sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
fl_log() { echo "[$(fl_sub "$(fl_now)" "$FL_T0")s] $*"; }

fl_kill_all() {
  local p
  for p in "${fl_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${fl_pids[@]}"; do wait "$p" 2>/dev/null; done
  fl_pids=()
}

fl_exit() {
  local rc=$?
  fl_kill_all
  if [[ $fl_fail -ne 0 || $rc -ne 0 ]]; then
    fl_dump
    [[ $rc -eq 0 ]] && rc=1
  fi
  [[ -n "${FL_KEEP:-}" ]] || rm -rf "$FL_ROOT"
  exit "$rc"
}

# fl_dump: the tails of every log, and every log into Bazel's outputs.zip.
fl_dump() {
  local f
  for f in "$FL_ROOT"/*/{coord,d,t}*.log; do
    [[ -f "$f" ]] || continue
    echo "----- ${f#"$FL_ROOT"/} (last 25 lines)"
    tail -25 "$f" | cut -c1-300
  done
  if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then
    (cd "$FL_ROOT" && find . -name '*.log' -print0 |
      xargs -0 -r cp --parents -t "$TEST_UNDECLARED_OUTPUTS_DIR")
  fi
}

# fl_expect DESCRIPTION CONDITION: one assertion; returns CONDITION's status.
fl_expect() {
  if eval "$2"; then
    echo "ok: $1"
  else
    echo "FAILED: $1"
    fl_fail=1
    return 1
  fi
}

# fl_die MESSAGE: a precondition of the rest of the test failed.
fl_die() {
  echo "FAILED: $*"
  fl_fail=1
  exit 1
}

# fl_wait_line FILE EXTENDED_REGEX SECONDS: until a line of FILE matches.
fl_wait_line() {
  local end=$((SECONDS + $3))
  while true; do
    grep -Eq "$2" "$1" 2>/dev/null && return 0
    ((SECONDS > end)) && return 1
    sleep 0.01  # poll interval
  done
}

# fl_exited PID: true when the child PID has exited (a zombie or gone).
fl_exited() {
  local state=""
  read -r _ _ state _ 2>/dev/null <"/proc/$1/stat" || return 0
  [[ "$state" == Z || "$state" == X ]]
}

# fl_stopped PID: true when PID is stopped (SIGSTOP).
fl_stopped() {
  local state=""
  read -r _ _ state _ 2>/dev/null <"/proc/$1/stat" || return 1
  [[ "$state" == T ]]
}

# fl_wait_exit PID SECONDS: until the child PID exits; reaps it and sets
# FL_RC to its exit status and FL_EXIT_TIME to when it was seen gone
# (polled every 5 ms). Returns 1 at the deadline (the process still runs).
fl_wait_exit() {
  local end=$((SECONDS + $2))
  while ! fl_exited "$1"; do
    ((SECONDS > end)) && return 1
    sleep 0.005  # poll interval
  done
  FL_EXIT_TIME=$(fl_now)
  wait "$1" 2>/dev/null
  FL_RC=$?
  return 0
}

# fl_expect_exit WHAT PID SECONDS STATUS: checks that WHAT (e.g. "trainer
# 2") exits with STATUS within SECONDS. Returns 0 when it exited (whatever
# its status; FL_EXIT_TIME is when it was seen gone), 1 when it still runs.
fl_expect_exit() {
  local what=$1 pid=$2 seconds=$3 status=$4
  if fl_wait_exit "$pid" "$seconds"; then
    fl_expect "$what exited $status" "[[ $FL_RC -eq $status ]]"
    return 0
  fi
  fl_expect "$what exited within $seconds s" false
  return 1
}

# fl_start_coordinator RUN [PORT]: FL_PORT, FL_COORD_PID; log coord-N.log
# (N counts the coordinator's incarnations in this run). Without PORT, a
# free port below the kernel's ephemeral range (32768-60999 by default), so
# that no other process's bind to port 0 (another test's, running at the
# same time) can take it while a test has killed the coordinator and
# restarts it there; another test may pick the same one, and then the
# coordinator cannot listen (our servers never share a port), exits, and
# the next candidate is tried.
#
# FL_COORD_ENV: extra environment (VAR=VALUE words) for every coordinator
# started here (not by netns_lib.sh), set through env(1), which execs the
# coordinator: its pid is still the one the test holds (e.g. LD_PRELOAD of
# libfaketime). FL_COORD_FLAGS: extra flags for those coordinators.
declare -A FL_COORD_N
FL_COORD_ENV=()
FL_COORD_FLAGS=()
fl_start_coordinator() {
  local d="$FL_ROOT/$1" port=${2:-} attempt
  mkdir -p "$d"
  for ((attempt = 1; attempt <= 20; attempt++)); do
    FL_COORD_N[$1]=$((${FL_COORD_N[$1]:-0} + 1))
    local n=${FL_COORD_N[$1]}
    local log="$d/coord-$n.log" try=${port:-$((20000 + RANDOM % 12000))}
    env "${FL_COORD_ENV[@]}" "$FL_COORDINATOR" --listen=127.0.0.1:"$try" \
      --world_size=$FL_W --sharding_factor=$FL_F "${FL_COORD_FLAGS[@]}" \
      >"$log" 2>&1 &
    FL_COORD_PID=$!
    fl_pids+=($!)
    fl_wait_line "$log" 'listening on 127\.0\.0\.1:[0-9]+|cannot listen' 30 ||
      fl_die "$1: coordinator $n did not start listening within 30 s"
    if grep -q 'cannot listen' "$log"; then
      [[ -z "$port" ]] || fl_die "$1: coordinator $n: port $port is taken"
      fl_wait_exit "$FL_COORD_PID" 10
      rm -f "$log"
      FL_COORD_N[$1]=$((n - 1))
      continue
    fi
    FL_PORT=$(grep -Eo 'listening on 127\.0\.0\.1:[0-9]+' "$log" | head -1 |
      cut -d: -f2)
    return 0
  done
  fl_die "$1: no free coordinator port in 20 attempts"
}

# fl_start_daemon RUN RANK [FLAG...]: FL_DAEMON_PID[RANK]; incarnation I of
# rank R logs to dR-I.log and writes commit-R-I.log.
# FL_DAEMON_FLAGS: extra flags for every daemon (e.g. checkpoints).
# FL_TRANSPORT: how fl_check_recovered expects the shard's bytes to have
# travelled ("over the replica group", the default, or "in the stream").
# FL_DAEMON_ENV: extra environment (VAR=VALUE words) for the daemons of rank
# FL_DAEMON_ENV_RANK only (every incarnation started here), through env(1)
# like FL_COORD_ENV.
declare -A FL_DAEMON_N
declare -a FL_DAEMON_PID
FL_DAEMON_FLAGS=()
FL_DAEMON_ENV=()
FL_DAEMON_ENV_RANK=-1
fl_start_daemon() {
  local run=$1 r=$2
  shift 2
  local d="$FL_ROOT/$run" key="$run/$r" envs=()
  FL_DAEMON_N[$key]=$((${FL_DAEMON_N[$key]:-0} + 1))
  local n=${FL_DAEMON_N[$key]}
  if [[ $r -eq $FL_DAEMON_ENV_RANK ]]; then envs=("${FL_DAEMON_ENV[@]}"); fi
  env "${envs[@]}" "$FL_SHARDD" --coordinator=127.0.0.1:"$FL_PORT" \
    --identity=node-"$r" --rank="$r" --listen_unix="$d/s$r.sock" \
    --shm_dir="$d" --commit_log="$d/commit-$r-$n.log" \
    "${FL_DAEMON_FLAGS[@]}" "$@" >"$d/d$r-$n.log" 2>&1 &
  FL_DAEMON_PID[r]=$!
  fl_pids+=($!)
}

# fl_daemon_log RUN RANK: the log of RANK's latest daemon incarnation.
fl_daemon_log() { echo "$FL_ROOT/$1/d$2-${FL_DAEMON_N[$1/$2]}.log"; }

# fl_start_trainer RUN RANK [FLAG...]: FL_TRAINER_PID[RANK]; incarnation I
# of rank R's trainer logs to tR-I.log.
declare -A FL_TRAINER_N
declare -a FL_TRAINER_PID
fl_start_trainer() {
  local run=$1 r=$2
  shift 2
  local d="$FL_ROOT/$run" key="$run/$r"
  FL_TRAINER_N[$key]=$((${FL_TRAINER_N[$key]:-0} + 1))
  local n=${FL_TRAINER_N[$key]}
  "$FL_TRAINER" --socket="$d/s$r.sock" --strategy=$FL_STRATEGY \
    --sharding_factor=$FL_F --world_size=$FL_W --rank="$r" \
    --steps="$FL_STEPS" --params_out="$d/params.bin" \
    --rpc_timeout_ms=60000 "$@" >"$d/t$r-$n.log" 2>&1 &
  FL_TRAINER_PID[r]=$!
  fl_pids+=($!)
}

# fl_trainer_log RUN RANK: the log of RANK's latest trainer process.
fl_trainer_log() { echo "$FL_ROOT/$1/t$2-${FL_TRAINER_N[$1/$2]}.log"; }

# fl_wait_started PID LOG EXTENDED_REGEX SECONDS: until a line of LOG
# matches (0), PID exits first (1; e.g. an unknown flag) or the deadline
# passes (2).
fl_wait_started() {
  local end=$((SECONDS + $4))
  while true; do
    grep -Eq "$3" "$2" 2>/dev/null && return 0
    fl_exited "$1" && return 1
    ((SECONDS > end)) && return 2
    sleep 0.01 # poll interval
  done
}

# How fl_start_cluster starts the coordinator (RUN) and a daemon (RUN RANK
# [FLAG...]); netns_lib.sh puts them in network namespaces.
FL_START_COORDINATOR=fl_start_coordinator
FL_START_DAEMON=fl_start_daemon

# fl_start_cluster RUN [RANK FLAG]...: a coordinator, W daemons (each RANK
# named with its FLAG, e.g. --failpoint=...) and, once each daemon listens,
# its trainer; the trainer of rank FL_TRAINER_FLAGS_RANK gets the extra
# flags FL_TRAINER_FLAGS (e.g. --stop_in_step=5).
FL_TRAINER_FLAGS_RANK=-1
FL_TRAINER_FLAGS=()
fl_start_cluster() {
  local run=$1 r
  shift
  local -A flag=()
  while [[ $# -ge 2 ]]; do
    flag[$1]=$2
    shift 2
  done
  "$FL_START_COORDINATOR" "$run"
  for ((r = 0; r < FL_W; r++)); do
    if [[ -n "${flag[$r]:-}" ]]; then
      "$FL_START_DAEMON" "$run" "$r" "${flag[$r]}"
    else
      "$FL_START_DAEMON" "$run" "$r"
    fi
  done
  for ((r = 0; r < FL_W; r++)); do
    fl_wait_started "${FL_DAEMON_PID[$r]}" "$(fl_daemon_log "$run" "$r")" \
      "^shardd rank $r listening" 30 ||
      fl_die "$run: daemon $r did not join within 30 s (or exited)"
    if [[ $r -eq $FL_TRAINER_FLAGS_RANK ]]; then
      fl_start_trainer "$run" "$r" "${FL_TRAINER_FLAGS[@]}"
    else
      fl_start_trainer "$run" "$r"
    fi
  done
  fl_log "$run: cluster up (coordinator port $FL_PORT)"
}

# fl_checkpointed_job RUN DIR: a job of 7 steps that keeps checkpoints of
# steps 3 and 6 in DIR, then every process is killed (a job stopped, to be
# resumed from DIR). FL_STEPS is 12 again afterwards.
fl_checkpointed_job() {
  local run=$1 dir=$2 r
  FL_STEPS=7
  FL_DAEMON_FLAGS=(--checkpoint_dir="$dir" --checkpoint_interval_steps=3)
  fl_start_cluster "$run"
  fl_wait_trainers "$run"
  for ((r = 0; r < FL_W; r++)); do
    fl_expect "$run: trainer $r stopped after step 7" \
      "[[ ${FL_TRAINER_RC[$r]} -eq 0 ]]"
  done
  fl_kill_all
  FL_STEPS=12
  FL_DAEMON_FLAGS=()
}

# fl_start_shard0_armed RUN FAILPOINT: the coordinator and every daemon,
# those holding shard 0 (rank % F == 0) with --failpoint=FAILPOINT; waits
# until each listens (joined). Trainers are the caller's.
fl_start_shard0_armed() {
  local run=$1 failpoint=$2 r
  fl_start_coordinator "$run"
  for ((r = 0; r < FL_W; r++)); do
    if ((r % FL_F == 0)); then
      fl_start_daemon "$run" "$r" --failpoint="$failpoint"
    else
      fl_start_daemon "$run" "$r"
    fi
  done
  for ((r = 0; r < FL_W; r++)); do
    fl_wait_started "${FL_DAEMON_PID[$r]}" "$(fl_daemon_log "$run" "$r")" \
      "^shardd rank $r listening" 30 ||
      fl_die "$run: daemon $r did not join within 30 s (or exited)"
  done
}

# fl_wait_trainers RUN: waits (deadline FL_DEADLINE s in all) for the latest
# trainer of every rank; FL_TRAINER_RC[RANK] is its exit status (124: still
# running at the deadline, then killed).
declare -a FL_TRAINER_RC
fl_wait_trainers() {
  local run=$1 end=$((SECONDS + FL_DEADLINE)) r
  for ((r = 0; r < FL_W; r++)); do
    if fl_wait_exit "${FL_TRAINER_PID[$r]}" $((end - SECONDS)); then
      FL_TRAINER_RC[r]=$FL_RC
    else
      FL_TRAINER_RC[r]=124
      echo "$run: trainer $r still running after ${FL_DEADLINE} s: killed"
      kill -9 "${FL_TRAINER_PID[$r]}" 2>/dev/null
    fi
  done
  fl_log "$run: trainers done (exit ${FL_TRAINER_RC[*]})"
}

# fl_check_run RUN REFERENCE_PARAMS: the common assertions (file comment).
# For the reference run itself pass "" (no comparison).
fl_check_run() {
  local run=$1 ref=$2 d="$FL_ROOT/$1" r
  for ((r = 0; r < FL_W; r++)); do
    fl_expect "$run: trainer $r exited 0 after all $FL_STEPS steps" \
      "[[ ${FL_TRAINER_RC[$r]} -eq 0 ]] &&
       grep -q '^final loss .* steps $FL_STEPS' '$(fl_trainer_log "$run" "$r")'"
  done
  fl_expect "$run: rank 0 wrote the final parameters" "[[ -s '$d/params.bin' ]]"
  fl_expect "$run: no epochs stalled and the job never failed" \
    "! cat '$d'/coord-*.log | grep -Eq 'EPOCH_STALLED|JOB_FAILED'"
  if [[ -n "$ref" ]]; then
    fl_expect "$run: final parameters equal the no-fault run's bit for bit" \
      "cmp '$ref' '$d/params.bin'"
  fi
  local out
  out=$("$FL_CHECK" --world_size=$FL_W --sharding_factor=$FL_F \
    --final_step="$FL_STEPS" "$d"/commit-*.log 2>&1)
  local rc=$?
  echo "$out" | head -20
  fl_expect "$run: commit logs of every daemon incarnation are consistent" \
    "[[ $rc -eq 0 ]]"
}

# fl_reference: this target's own no-fault run; FL_REF = its params.bin.
fl_reference() {
  fl_start_cluster ref
  fl_wait_trainers ref
  fl_check_run ref ""
  fl_kill_all
  FL_REF="$FL_ROOT/ref/params.bin"
  [[ $fl_fail -eq 0 ]] || fl_die "the no-fault reference run failed"
}

# Coordinator lines start with an ISO-8601 UTC timestamp
# (2026-12-02T17:47:43.487Z); this awk program turns field 1 into epoch
# seconds (t), in one process for all lines (no fork per line).
# shellcheck disable=SC2016  # an awk program: $1 is awk's
FL_AWK_TIME='{ split($1, a, /[-T:Z]/); s = int(a[6]);
  t = mktime(a[1] " " a[2] " " a[3] " " a[4] " " a[5] " " s) + a[6] - s }'

# fl_coord_time LINE: a coordinator log line's timestamp in epoch seconds.
fl_coord_time() {
  TZ=UTC awk "$FL_AWK_TIME"' { printf "%.3f\n", t }' <<<"$1"
}

# fl_event_after RUN T0 EXTENDED_REGEX: prints the first coordinator line
# (of any incarnation) matching the pattern whose timestamp is at or after
# T0 - 0.01 s (the coordinator's timestamps have millisecond resolution),
# or nothing (and returns 1).
fl_event_after() {
  cat "$FL_ROOT/$1"/coord-*.log | grep -E "coordinator: .*($3)" | sort |
    TZ=UTC awk -v t0="$2" "$FL_AWK_TIME"'
      t >= t0 - 0.01 { print; found = 1; exit }
      END { exit !found }'
}

# fl_report_since RUN T0 WHAT EXTENDED_REGEX: prints "WHAT: +S s (line)"
# for the first coordinator event matching after T0. That no such event
# came is a failure (every event asked for must follow the fault).
fl_report_since() {
  local line
  line=$(fl_event_after "$1" "$2" "$4") || {
    echo "FAILED: timeline: $3: no coordinator line after the fault matches '$4'"
    fl_fail=1
    return 1
  }
  echo "timeline: $3: +$(fl_sub "$(fl_coord_time "$line")" "$2") s" \
    "($(cut -c1-200 <<<"${line#* }"))"
}

# fl_last_step LOG: the last step a trainer log says committed ("step N
# loss ..."), 0 when none.
fl_last_step() {
  local n
  n=$(grep -Eo '^step [0-9]+ loss' "$1" | tail -1 | awk '{ print $2 }')
  echo "${n:-0}"
}

fl_finish() {
  fl_kill_all
  if [[ $fl_fail -eq 0 ]]; then
    fl_log "PASSED"
  else
    fl_log "FAILED"
  fi
  exit $fl_fail
}

# fl_kill_by_failpoint RUN RANK SPEC: starts the cluster with RANK's daemon
# armed with --failpoint=SPEC (a kill), waits for that daemon to die
# (FL_KILL_TIME: when it was seen gone) and checks that the fail point
# killed it.
fl_kill_by_failpoint() {
  local run=$1 r=$2 spec=$3
  fl_start_cluster "$run" "$r" --failpoint="$spec"
  local log
  log=$(fl_daemon_log "$run" "$r")
  fl_wait_exit "${FL_DAEMON_PID[$r]}" 60 ||
    fl_die "$run: daemon $r (--failpoint=$spec) still alive after 60 s"
  # The fail point's line is the daemon's last write before it SIGKILLs
  # itself: the log's modification time is the moment of the kill (the
  # exit is only seen by polling, milliseconds later under load).
  FL_KILL_TIME=$(stat -c %.9Y "$log")
  fl_log "$run: daemon $r died (exit $FL_RC," \
    "seen $(fl_sub "$FL_EXIT_TIME" "$FL_KILL_TIME") s after the fail point fired)"
  fl_expect "$run: daemon $r was SIGKILLed by its fail point ${spec%%:*}" \
    "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint ${spec%%:*}: kill' '$log'"
}

# fl_died_in_step RUN RANK: the step RANK's daemon died in, from its first
# trainer's log: one past the last step the trainer saw committed before
# it found the daemon gone.
fl_died_in_step() {
  local log
  log="$FL_ROOT/$1/t$2-1.log"
  echo $(($(sed -n '1,/^daemon unavailable/p' "$log" |
    grep -Eo '^step [0-9]+ loss' | tail -1 | awk '{ print $2 }') + 1))
}

# fl_check_recovered RUN RANK STEP: the latest incarnation of RANK's daemon
# rebuilt its shard at STEP from a live replica (same shard index, another
# shard group), the coordinator planned it and removed the dead
# incarnation, and RANK's trainer re-attached at STEP; with SHARDCTL, its
# events reported the copy's bytes (fl_check_copy_progress; with
# FL_COPY_PROGRESS_MID set, also between 0 and the total).
fl_check_recovered() {
  local run=$1 r=$2 step=$3 d="$FL_ROOT/$1" s=$(($2 % FL_F))
  local log line
  log=$(fl_daemon_log "$run" "$r")
  line=$(grep -E "^shardd rank $r recovered shard" "$log")
  echo "replacement: ${line:-<no recovered line>}"
  local from
  from=$(sed -nE 's/.* from rank ([0-9]+):.*/\1/p' <<<"$line")
  fl_expect "$run: the replacement of rank $r recovered shard $s at step $step" \
    "grep -q '^shardd rank $r recovered shard $s at step $step from rank' <<<\"\$line\""
  fl_expect "$run: ... from a replica of shard $s (rank ${from:-?})" \
    "[[ -n '$from' && '$from' -ne $r && \$((${from:-0} % FL_F)) -eq $s ]]"
  fl_expect "$run: ... into an engine prepared during the rendezvous" \
    "grep -q '^shardd rank $r: engine ready for the shard copy (prepared during the rendezvous)' '$log'"
  fl_expect "$run: ... with the bytes ${FL_TRANSPORT:-over the replica group}" \
    "grep -q '${FL_TRANSPORT:-over the replica group})\$' <<<\"\$line\""
  if [[ -z "${FL_TRANSPORT:-}" && -n "$from" ]]; then
    fl_expect "$run: ... the source had computed the pieces' CRCs ahead" \
      "cat '$d'/d$from-*.log |
         grep -q ': sending shard $s at step $step to rank $r over the replica group (piece CRCs precomputed)'"
  fi
  fl_expect "$run: coordinator removed the dead rank $r" \
    "cat '$d'/coord-*.log | grep -q 'MEMBER_REMOVED: rank $r '"
  fl_expect "$run: coordinator planned rank $r's copy of shard $s at step $step" \
    "cat '$d'/coord-*.log |
       grep -q 'RECOVERY_PLANNED: rank $r copies shard $s at step $step from'"
  fl_expect "$run: trainer $r re-attached at step $step" \
    "grep -Eq '^re-attached: epoch [0-9]+, committed step $step\$' \
       '$(fl_trainer_log "$run" "$r")'"
  if [[ -n "$FL_SHARDCTL" ]]; then
    fl_check_copy_progress "$run" "$r" ${FL_COPY_PROGRESS_MID:+--mid}
  fi
}

# fl_check_copy_progress RUN RANK [--mid]: RANK's latest daemon, still
# running, reported its shard copy's bytes in its events (shardctl watch)
# before the copy was COMPLETE (copy_progress_check.py says what is
# checked; --mid: also a report between 0 and the total). What the checker
# printed (a line per attempt) is left in $FL_ROOT/RUN/copy-progress-RANK.txt.
fl_check_copy_progress() {
  local d="$FL_ROOT/$1" r=$2 what="reported the copy's bytes before COMPLETE"
  shift 2
  [[ -n "$FL_SHARDCTL" ]] || fl_die "fl_check_copy_progress needs SHARDCTL"
  [[ "$*" == *--mid* ]] && what="$what, also between 0 and the total"
  "$FL_SHARDCTL" --socket="$d/s$r.sock" watch --after=1 --for=1s -o json \
    >"$d/events-$r.json" 2>&1
  /usr/bin/python3 "$(dirname "$0")/copy_progress_check.py" "$@" \
    <"$d/events-$r.json" >"$d/copy-progress-$r.txt" 2>&1
  local rc=$?
  cat "$d/copy-progress-$r.txt"
  fl_expect "$(basename "$d"): the replacement of rank $r $what" \
    "[[ $rc -eq 0 ]]" || head -c 3000 "$d/events-$r.json"
}

# fl_timeline RUN RANK T0: prints the coordinator's view after a fault at T0
# (detection, removal, recovery plan, ready again); each must be there.
fl_timeline() {
  local run=$1 r=$2 t0=$3
  fl_report_since "$run" "$t0" "fault -> first detection" \
    "FAILURE_REPORT|MEMBER_REMOVED|lease expired"
  fl_report_since "$run" "$t0" "fault -> rank $r removed" \
    "MEMBER_REMOVED: rank $r "
  fl_report_since "$run" "$t0" "fault -> recovery planned" \
    "RECOVERY_PLANNED: rank $r "
  fl_report_since "$run" "$t0" "fault -> all ranks ready again" \
    "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
  true
}
