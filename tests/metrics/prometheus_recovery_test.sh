#!/usr/bin/env bash
# A real Prometheus server (Debian's prometheus) scrapes a local cluster
# while a daemon is killed and replaced, and PromQL over its HTTP API sees
# what happened:
#   * prometheus on 127.0.0.1 (a free port picked by bind-and-release, the
#     start retried when the port was taken meanwhile), scraping every second
#     the coordinator and W = 4 shardd daemons (HYBRID_SHARD, F = 2), whose
#     /metrics ports reach it through file_sd files (refreshed every second);
#   * before training, prometheus has scraped all 5 targets and sees no
#     failure yet;
#   * 4 example trainers train STEPS steps; daemon 1 kills itself in an
#     AllGather (fail point) and a replacement (same rank, identity and
#     socket, a new metrics port, put into the file_sd file in place of the
#     old one) copies its shard from a replica; the trainers finish;
#   * once every target was scraped after the trainers finished, PromQL
#     sees exactly one failure detected, one recovery started and completed,
#     one observation of each recovery phase's duration, recovery bytes
#     received (= sent), a step count of STEPS on the coordinator and every
#     daemon, committed steps on every daemon, and up == 1 for all 5 targets;
#   * every rank's trainer waited on collectives in all three calls, and
#     the dashboard's per-rank queries (trainer wait per step, rank state)
#     answer for every rank; the stall alert's gauges are set and quiet;
#   * promtool check metrics passes on every binary's /metrics;
#   * deploy/exported_metrics.txt lists exactly the metric families the
#     binaries export (after training, a checkpoint and a recovery).
# Fails, never skips, when prometheus or promtool is missing.
set -uo pipefail
export LC_ALL=C
coordinator="$1"; shardd="$2"; trainer="$3"; exported="$4"
here=$(dirname "$0")
source "$here/../deploy/junit.sh"
PY=/usr/bin/python3
prom() { "$PY" "$here/prom.py" "$@"; }
W=4
F=2
STEPS=24
# The 40th AllGather of daemon 1 (3 units, forward and backward: step ~7,
# after the checkpoint of step 5).
FAILPOINT=allgather.mid:kill@40
# In /tmp: a Unix socket path must stay under 108 bytes.
root=$(mktemp -d /tmp/prometheus_recovery_test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
# The logs and scrapes go to Bazel's undeclared outputs (outputs.zip).
keep_logs() {
  [[ -n ${TEST_UNDECLARED_OUTPUTS_DIR:-} ]] || return 0
  find "$root" -maxdepth 2 -type f \( -name '*.log' -o -name 'log.*' -o \
    -name '*.metrics' -o -name '*.json' -o -name '*.yml' \) \
    -exec cp {} "$TEST_UNDECLARED_OUTPUTS_DIR"/ \;
}
trap 'cleanup; keep_logs; rm -rf "$root"' EXIT
die() {  # die MESSAGE [LOG...]: a failed check that stops the test.
  local m=$1
  shift
  check "$m" bash -c 'for f; do echo "== $f"; tail -30 "$f"; done; exit 1' _ "$@"
  finish
  exit 1
}

# wait_line FILE PATTERN SECONDS [PID]: waits for PATTERN in FILE (deadline;
# gives up early when process PID has exited).
wait_line() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    [[ -n ${4:-} ]] && ! kill -0 "$4" 2>/dev/null &&
      ! grep -q "$2" "$1" 2>/dev/null && return 1
    sleep 0.05
  done
  return 1
}
stamp() { echo "[${SECONDS} s] $*"; }  # progress, for the wall time
# port_of FILE PREFIX: the port of the line "PREFIX HOST:PORT" in FILE.
port_of() { grep -o "$2 [0-9.]*:[0-9]*" "$1" | head -1 | sed 's/.*://'; }

check "prometheus is installed (scripts/install-deps)" command -v prometheus
check "promtool is installed (scripts/install-deps)" command -v promtool
check "$PY is installed" test -x "$PY"
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null ||
  [[ ! -x $PY ]]; then
  finish
  exit 1
fi

# --- prometheus -------------------------------------------------------------
mkdir -p "$root/prom/data"
echo '[]' >"$root/prom/coordinator.json"
echo '[]' >"$root/prom/shardd.json"
cat >"$root/prom/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: coordinator
    file_sd_configs:
      - files: ["$root/prom/coordinator.json"]
        refresh_interval: 1s
  - job_name: shardd
    file_sd_configs:
      - files: ["$root/prom/shardd.json"]
        refresh_interval: 1s
YAML
# Port 0 is not supported: pick a free port, start, and try another port if
# someone took it in between (prometheus then exits at once).
prom_url=""
for attempt in 1 2 3 4 5; do
  port=$(prom free_port) || break
  prometheus --config.file="$root/prom/prometheus.yml" \
    --storage.tsdb.path="$root/prom/data" \
    --web.listen-address="127.0.0.1:$port" \
    >"$root/prom/log.$attempt" 2>&1 &
  ppid=$!
  pids+=("$ppid")
  prom ready "http://127.0.0.1:$port/-/ready" 30 "$ppid"
  # Ready, and the server on that port is ours (same data folder).
  if kill -0 "$ppid" 2>/dev/null &&
    prom get "http://127.0.0.1:$port/api/v1/status/flags" 2>/dev/null |
    grep -qF "\"storage.tsdb.path\":\"$root/prom/data\""; then
    prom_url="http://127.0.0.1:$port"
    break
  fi
  kill -9 "$ppid" 2>/dev/null
  wait "$ppid" 2>/dev/null
  echo "prometheus did not start on port $port (attempt $attempt):"
  tail -3 "$root/prom/log.$attempt"
done
[[ -n "$prom_url" ]] || die "prometheus starts on 127.0.0.1" "$root"/prom/log.*
check "prometheus ready on $prom_url" true
stamp "prometheus ready"

# --- cluster ----------------------------------------------------------------
d="$root/cluster"
mkdir -p "$d/ckpt"
"$coordinator" --listen=127.0.0.1:0 --world_size=$W --sharding_factor=$F \
  --metrics_port=-1 --metrics_address=127.0.0.1 >"$d/coord.log" 2>&1 &
cpid=$!
pids+=("$cpid")
wait_line "$d/coord.log" "coordinator metrics on" 20 "$cpid" ||
  die "coordinator starts" "$d/coord.log"
cport=$(port_of "$d/coord.log" "coordinator listening on")
cmetrics=$(port_of "$d/coord.log" "coordinator metrics on")
prom sd "$root/prom/coordinator.json" coordinator "127.0.0.1:$cmetrics"

start_daemon() {  # start_daemon RANK LOG [FLAGS...]; sets $! to its pid
  local r=$1 log=$2
  shift 2
  "$shardd" --coordinator=127.0.0.1:"$cport" --identity=node-"$r" \
    --rank="$r" --listen_unix="$d/s$r.sock" --shm_dir="$d" \
    --metrics_port=-1 --metrics_address=127.0.0.1 \
    --checkpoint_dir="$d/ckpt" --checkpoint_interval_steps=5 "$@" \
    >"$log" 2>&1 &
}
declare -A mport dpid
for r in $(seq 0 $((W - 1))); do
  if [[ $r -eq 1 ]]; then
    start_daemon "$r" "$d/d$r.log" --failpoint="$FAILPOINT"
    victim=$!
  else
    start_daemon "$r" "$d/d$r.log"
  fi
  dpid[$r]=$!
  pids+=("$!")
done
sd_daemons() {
  local t=()
  for r in $(seq 0 $((W - 1))); do t+=("127.0.0.1:${mport[$r]}=rank:$r"); done
  prom sd "$root/prom/shardd.json" shardd "${t[@]}"
}
for r in $(seq 0 $((W - 1))); do
  wait_line "$d/d$r.log" "shardd metrics on" 30 "${dpid[$r]}" ||
    die "daemon $r starts" "$d/d$r.log" "$d/coord.log"
  mport[$r]=$(port_of "$d/d$r.log" "shardd metrics on")
done
sd_daemons
check "prometheus scrapes the coordinator and $W daemons before training" \
  prom wait "$prom_url" "count(up == 1) == $((W + 1))" 30
v=$(prom values "$prom_url" 'sum(shardd_coordinator_failures_detected_total)')
echo "  before training: sum(shardd_coordinator_failures_detected_total) = $v"
check "prometheus sees no failure before training" test "$v" == 0

# --- training, kill and replace ---------------------------------------------
stamp "cluster scraped; training"
tps=()
for r in $(seq 0 $((W - 1))); do
  timeout 120 "$trainer" --socket="$d/s$r.sock" --strategy=HYBRID_SHARD \
    --sharding_factor=$F --world_size=$W --rank="$r" --steps=$STEPS \
    --rpc_timeout_ms=60000 >"$d/t$r.log" 2>&1 &
  tps+=("$!")
  pids+=("$!")
done
end=$((SECONDS + 60))
while ((SECONDS < end)) && kill -0 "$victim" 2>/dev/null; do sleep 0.05; done
kill -0 "$victim" 2>/dev/null &&
  die "daemon 1 hits its fail point within 60 s" "$d/d1.log" "$d/t1.log"
wait "$victim"
rc=$?
check "daemon 1 killed itself at the fail point (SIGKILL: exit 137)" \
  bash -c '[[ $0 -eq 137 ]] && grep -q "failpoint allgather.mid: kill" "$1"' \
  "$rc" "$d/d1.log"
stamp "daemon 1 killed; replacement"
start_daemon 1 "$d/d1.replacement.log"
dpid[1]=$!
pids+=("$!")
wait_line "$d/d1.replacement.log" "shardd metrics on" 60 "${dpid[1]}" ||
  die "the replacement of daemon 1 starts" "$d/d1.replacement.log" \
    "$d/coord.log"
old_port=${mport[1]}
mport[1]=$(port_of "$d/d1.replacement.log" "shardd metrics on")
echo "  daemon 1's metrics: old port $old_port, replacement's ${mport[1]}"
sd_daemons
trc=0
for p in "${tps[@]}"; do wait "$p" || trc=1; done
finished=$(date +%s.%N)
stamp "training finished"
check "every trainer exited 0" test "$trc" -eq 0
for r in $(seq 0 $((W - 1))); do
  check "trainer $r finished $STEPS steps" \
    grep -q "^final loss .* steps $STEPS" "$d/t$r.log" ||
    tail -5 "$d/t$r.log"
done
check "trainer 1 re-attached to the replacement" \
  grep -q "^re-attached: " "$d/t1.log"

# --- what prometheus saw ----------------------------------------------------
# Every target (the old daemon 1 is no longer one) scraped after the end:
# the replacement's target found (file_sd refresh) and up, the old one gone
# (a target still listed but dead would show as up == 0).
# timestamp() must take the selector itself: over an expression such as
# `up == 1` it gives the evaluation time, which let this wait pass on the
# scrapes from before the kill when training ended within a scrape interval.
check "prometheus scraped all $((W + 1)) targets after training ended" \
  prom wait "$prom_url" \
  "count(up == 1) == $((W + 1)) and count(up) == $((W + 1)) and min(timestamp(up)) > $finished and count(up{instance=\"127.0.0.1:${mport[1]}\"} == 1) == 1" 30
check "the old daemon 1 (port $old_port) is no longer scraped" bash -c '
  out=$("$0" "$1" query "$2" "up{instance=\"127.0.0.1:$3\"}")
  echo "up of the old target: ${out:-absent}"; [[ -z $out ]]' \
  "$PY" "$here/prom.py" "$prom_url" "$old_port"
# expect_query DESCRIPTION EXPR CONDITION: the single value of the instant
# query EXPR ($v) satisfies CONDITION (bash, over $v). Queued, then asked in
# one go (run_queries).
descs=()
exprs=()
conds=()
expect_query() { descs+=("$1"); exprs+=("$2"); conds+=("$3"); }
run_queries() {
  local values i v
  mapfile -t values < <(prom values "$prom_url" "${exprs[@]}")
  for i in "${!exprs[@]}"; do
    v=${values[$i]:-"error: no answer"}
    echo "  ${exprs[$i]} = $v"
    check "${descs[$i]}: ${exprs[$i]} (${conds[$i]})" \
      env v="$v" bash -c "${conds[$i]}"
  done
}
# num EXPR: a numeric CONDITION, EXPR in awk over v.
num() { echo "awk -v v=\"\$v\" 'BEGIN{exit !($1)}'"; }
expect_query "one failure detected" \
  'sum(shardd_coordinator_failures_detected_total)' '[[ $v == 1 ]]'
expect_query "one recovery started" \
  'shardd_coordinator_recoveries_started_total' '[[ $v == 1 ]]'
expect_query "one recovery completed" \
  'shardd_coordinator_recoveries_completed_total' '[[ $v == 1 ]]'
for phase in detection awaiting_replacement rendezvous transfer; do
  expect_query "one $phase phase observed" \
    "shardd_coordinator_recovery_duration_seconds_count{phase=\"$phase\"}" \
    '[[ $v == 1 ]]'
done
expect_query "one whole recovery observed" \
  'shardd_coordinator_recovery_seconds_count' '[[ $v == 1 ]]'
expect_query "no phase is the whole recovery (sum over phases counts nothing twice)" \
  'count(shardd_coordinator_recovery_duration_seconds_count{phase="total"}) or vector(0)' \
  '[[ $v == 0 ]]'
expect_query "detection took time (from daemon 1's last heartbeat)" \
  'shardd_coordinator_recovery_duration_seconds_sum{phase="detection"}' \
  "$(num 'v > 0')"
expect_query "no phase took negative time" \
  'count(shardd_coordinator_recovery_duration_seconds_sum < 0) or vector(0)' \
  '[[ $v == 0 ]]'
expect_query "the phases add up to the whole recovery" \
  'sum(shardd_coordinator_recovery_duration_seconds_sum) - sum(shardd_coordinator_recovery_seconds_sum)' \
  "$(num 'v < 1e-3 && v > -1e-3')"
expect_query "no checkpoint fallback" \
  'shardd_coordinator_checkpoint_fallbacks_total' '[[ $v == 0 ]]'
expect_query "recovery bytes received" \
  'sum(shardd_recovery_bytes_total{direction="received"})' "$(num 'v > 0')"
expect_query "recovery bytes received equal those sent" \
  'sum(shardd_recovery_bytes_total{direction="received"}) - sum(shardd_recovery_bytes_total{direction="sent"})' \
  '[[ $v == 0 ]]'
expect_query "one shard transfer" \
  'sum(shardd_recovery_transfers_total{role="target",result="ok"})' \
  '[[ $v == 1 ]]'
expect_query "the replacement of rank 1 made it" \
  'sum(shardd_recovery_transfers_total{role="target",result="ok",rank="1"})' \
  '[[ $v == 1 ]]'
expect_query "no failed transfer" \
  'sum(shardd_recovery_transfers_total{result="failed"})' '[[ $v == 0 ]]'
expect_query "every daemon committed steps" \
  "count(shardd_steps_committed_total > 0)" "[[ \$v == $W ]]"
expect_query "every daemon is at step $STEPS" \
  "count(shardd_committed_step == $STEPS)" "[[ \$v == $W ]]"
expect_query "the coordinator is at step $STEPS" \
  'shardd_coordinator_committed_step' "[[ \$v == $STEPS ]]"
expect_query "the coordinator has $W live members" \
  'shardd_coordinator_members_live' "[[ \$v == $W ]]"
expect_query "every target is up" "count(up == 1)" "[[ \$v == $((W + 1)) ]]"
# The trainer wait and the per-rank views of the dashboard (the rank label
# comes from the file_sd targets here, from the PodMonitor in Kubernetes).
expect_query "every rank's trainer waited on collectives" \
  'count(sum by (rank) (shardd_trainer_wait_seconds_sum) > 0)' "[[ \$v == $W ]]"
expect_query "every rank reported its Gather, ReduceGrad and Step waits" \
  'count(count by (rank) (shardd_trainer_wait_seconds_count > 0) == 3)' \
  "[[ \$v == $W ]]"
# The dashboard divides the rates; over the whole run (the counters
# themselves) the same division is the mean wait per committed step. (The
# rates are printed at the end.)
expect_query "the trainer wait per step, per rank, answers for every rank" \
  'count(sum by (rank) (shardd_trainer_wait_seconds_sum) / sum by (rank) (shardd_steps_committed_total) > 0)' \
  "[[ \$v == $W ]]"
expect_query "the rank state timeline shows every rank ready" \
  'count((max by (rank) (shardd_ready{rank!=""} + 1) or max by (rank) (up{rank!=""} * 0)) == 2)' \
  "[[ \$v == $W ]]"
expect_query "the stall time is the coordinator's default (15m)" \
  'shardd_coordinator_stall_alert_after_seconds' '[[ $v == 900 ]]'
expect_query "the coordinator saw a step within the last 2 minutes" \
  'time() - shardd_coordinator_last_step_timestamp_seconds' \
  "$(num 'v >= 0 && v < 120')"
expect_query "the stall alert's expression is quiet" \
  'count((time() - shardd_coordinator_last_step_timestamp_seconds) > shardd_coordinator_stall_alert_after_seconds and shardd_coordinator_stall_alert_after_seconds > 0 and shardd_coordinator_members_live > 0) or vector(0)' \
  '[[ $v == 0 ]]'
stamp "final state scraped"
echo "PromQL results:"
run_queries
echo "More PromQL, at the end:"
prom query "$prom_url" 'shardd_coordinator_failures_detected_total > 0' \
  'shardd_coordinator_recovery_duration_seconds_sum' \
  'shardd_recovery_bytes_total > 0' 'shardd_steps_committed_total' \
  'shardd_steps_aborted_total > 0' 'shardd_collective_failures_total > 0' \
  'shardd_coordinator_failure_reports_total > 0' \
  'shardd_coordinator_membership_epoch' \
  'sum by (rank) (rate(shardd_trainer_wait_seconds_sum[5m]))' \
  'sum by (rank) (rate(shardd_steps_committed_total[5m]))' \
  'shardd_trainer_wait_seconds_sum'

# --- the binaries' own /metrics ---------------------------------------------
# Each binary's /metrics now (after a checkpoint and the recovery). Not
# named shardd-<n>.*: the daemons' shm sweep (--shm_dir is $d) takes such a
# name for a daemon's file of process <n>, and removes it when <n> is dead.
urls=("http://127.0.0.1:$cmetrics/metrics" "$d/coordinator.metrics")
for r in $(seq 0 $((W - 1))); do
  urls+=("http://127.0.0.1:${mport[$r]}/metrics" "$d/scraped-shardd-$r.metrics")
done
check "GET /metrics of the coordinator and every daemon" prom save "${urls[@]}"
bodies=("$d/coordinator.metrics")
for r in $(seq 0 $((W - 1))); do bodies+=("$d/scraped-shardd-$r.metrics"); done
for f in "${bodies[@]}"; do
  check "promtool check metrics: $(basename "$f")" \
    bash -c 'promtool check metrics <"$0"' "$f"
done
prom families "${bodies[@]}" >"$d/families.txt"
grep -vE '^\s*(#|$)' "$exported" | sort -u >"$d/listed.txt"
check "every metric of exported_metrics.txt is exported by a binary" bash -c '
  missing=$(comm -23 "$0" "$1"); [[ -z $missing ]] || { echo "not exported:"; echo "$missing"; exit 1; }' \
  "$d/listed.txt" "$d/families.txt"
check "every metric the binaries export is in exported_metrics.txt" bash -c '
  extra=$(comm -13 "$0" "$1"); [[ -z $extra ]] || { echo "not listed:"; echo "$extra"; exit 1; }' \
  "$d/listed.txt" "$d/families.txt"
check "shardd_checkpoint_last_written_timestamp_seconds is exported on every daemon" bash -c '
  for f; do grep -q "^shardd_checkpoint_last_written_timestamp_seconds " "$f" || { echo "$f: none"; exit 1; }; done' \
  _ "$d"/scraped-shardd-*.metrics
stamp "done"
finish
