#!/usr/bin/env bash
# A failed job reaches the SharddJobFailed alert of a real Prometheus,
# although the coordinator is gone seconds later.
#
# Each run is the cluster of the fault tests (coordinator, W = 4 shardd
# daemons, 4 example trainers, HYBRID_SHARD F = 2), the coordinator with
# /metrics on. When trainer 1 prints "step 3", both holders of shard 0
# (daemons 0 and 2) get SIGKILL and replacements start: the job fails (no
# replica, no checkpoint) and every trainer and daemon exits 3 within a
# second (tests/faults/replica_loss_test.sh), long before a 15 s scrape.
#
#   scraped     --failed_report_wait=60s; Prometheus (Debian's, on
#               127.0.0.1, scraping every second, evaluating
#               deploy/prometheus/alerts.yml every second) is not yet told
#               about the coordinator. Every member has left, and the
#               coordinator does not exit: it logs that it waits for a
#               scrape. A SIGTERM (what Kubernetes sends when the failed
#               JobSet's pods are deleted) does not make it exit either.
#               Then the coordinator's /metrics becomes a target: within
#               seconds of the first scrape the coordinator exits 3, having
#               logged that /metrics was served; once Prometheus finds it
#               gone (up == 0, shardd_coordinator_job_failed stale),
#               SharddJobFailed is firing.
#   unscraped   --failed_report_wait=3s and nobody scrapes: the coordinator
#               exits 3 once 3 s have passed since the failure, logging
#               that no scrape came.
#   signalled   --failed_report_wait=60s, nobody scrapes: a first SIGTERM
#               leaves it waiting, a second one makes it exit 3 at once.
#
# Synchronisation by log lines, process exits and PromQL answers, each with
# a deadline. Fails, never skips, when prometheus is missing.
# shellcheck disable=SC2034  # FL_* globals are read by fault_lib.sh
set -uo pipefail
here=$(dirname "$0")
# shellcheck source=../faults/fault_lib.sh source-path=SCRIPTDIR
source "$here/../faults/fault_lib.sh"
alerts=$5
fl_init "$1" "$2" "$3" "$4"
PY=/usr/bin/python3
prom() { "$PY" "$here/prom.py" "$@"; }
FL_STEPS=200  # Far more than are trained before the kill.

command -v prometheus >/dev/null ||
  fl_die "prometheus is installed (scripts/install-deps)"
[[ -x $PY ]] || fl_die "$PY is installed"

# fail_job RUN: starts RUN's cluster, kills both holders of shard 0 at
# step 3, starts their replacements and waits until the coordinator logs
# JOB_FAILED and every trainer and daemon has exited 3. FAIL_TIME: the
# JOB_FAILED line's timestamp (epoch seconds).
fail_job() {
  local run=$1 p coord
  fl_start_cluster "$run"
  fl_wait_line "$(fl_trainer_log "$run" 1)" "^step 3 " 60 ||
    fl_die "$run: trainer 1 did not commit step 3 within 60 s"
  kill -9 "${FL_DAEMON_PID[0]}" "${FL_DAEMON_PID[2]}"
  fl_wait_exit "${FL_DAEMON_PID[0]}" 10 || fl_die "daemon 0 survived SIGKILL"
  fl_wait_exit "${FL_DAEMON_PID[2]}" 10 || fl_die "daemon 2 survived SIGKILL"
  local survivors=("${FL_DAEMON_PID[1]}" "${FL_DAEMON_PID[3]}")
  fl_start_daemon "$run" 0
  fl_start_daemon "$run" 2
  coord=$FL_ROOT/$run/coord-1.log
  fl_wait_line "$coord" 'JOB_FAILED' 30 ||
    fl_die "$run: the coordinator did not declare the job failed within 30 s"
  FAIL_TIME=$(fl_coord_time "$(grep -m1 'JOB_FAILED' "$coord")")
  fl_log "$run: job failed"
  local statuses=()
  for p in "${FL_TRAINER_PID[@]}" "${survivors[@]}" "${FL_DAEMON_PID[0]}" \
    "${FL_DAEMON_PID[2]}"; do
    fl_wait_exit "$p" 30 ||
      fl_die "$run: pid $p (trainer or daemon) still runs 30 s after the failure"
    statuses+=("$FL_RC")
  done
  fl_log "$run: every trainer and daemon exited (trainers 0-3, daemons 1, 3, 0, 2: ${statuses[*]})"
  fl_expect "$run: every trainer and daemon exited 3 (job failed)" \
    "[[ '${statuses[*]}' == '3 3 3 3 3 3 3 3' ]]"
}

metrics_port() {  # metrics_port LOG: the port of "coordinator metrics on".
  grep -Eo 'coordinator metrics on 127\.0\.0\.1:[0-9]+' "$1" | head -1 |
    cut -d: -f2
}

# --- prometheus -------------------------------------------------------------
p="$FL_ROOT/prom"
mkdir -p "$p/data"
cp "$alerts" "$p/alerts.yml"
echo '[]' >"$p/coordinator.json"
cat >"$p/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["$p/alerts.yml"]
scrape_configs:
  - job_name: shardd-coordinator
    file_sd_configs:
      - files: ["$p/coordinator.json"]
        refresh_interval: 1s
YAML
prom_url=""
for attempt in 1 2 3 4 5; do
  port=$(prom free_port) || break
  prometheus --config.file="$p/prometheus.yml" --storage.tsdb.path="$p/data" \
    --web.listen-address="127.0.0.1:$port" >"$p/log.$attempt" 2>&1 &
  ppid=$!
  fl_pids+=("$ppid")
  prom ready "http://127.0.0.1:$port/-/ready" 30 "$ppid"
  if kill -0 "$ppid" 2>/dev/null &&
    prom get "http://127.0.0.1:$port/api/v1/status/flags" 2>/dev/null |
    grep -qF "\"storage.tsdb.path\":\"$p/data\""; then
    prom_url="http://127.0.0.1:$port"
    break
  fi
  kill -9 "$ppid" 2>/dev/null
  wait "$ppid" 2>/dev/null
done
[[ -n $prom_url ]] || fl_die "prometheus did not start ($(tail -3 "$p"/log.*))"
fl_expect "prometheus loaded the alert rules (SharddJobFailed among them)" \
  "prom get '$prom_url/api/v1/rules' | grep -q '\"name\":\"SharddJobFailed\"'"
fl_log "prometheus ready on $prom_url"

# --- scraped: held until the first scrape -----------------------------------
FL_COORD_FLAGS=(--metrics_port=-1 --metrics_address=127.0.0.1
  --failed_report_wait=60s)
fail_job scraped
coord=$FL_ROOT/scraped/coord-1.log
cpid=$FL_COORD_PID
fl_expect "scraped: the coordinator holds its exit for a scrape once every member has left" \
  "fl_wait_line '$coord' 'every member has left, but /metrics has not been scraped since the failure: waiting up to' 10"
kill -TERM "$cpid"
fl_expect "scraped: after a SIGTERM it still waits for the scrape" \
  "fl_wait_line '$coord' 'signal received, but /metrics has not been scraped since the failure' 10"
fl_expect "scraped: ... and still runs" "! fl_exited $cpid"
t_target=$(fl_now)
prom sd "$p/coordinator.json" shardd-coordinator \
  "127.0.0.1:$(metrics_port "$coord")"
if fl_wait_exit "$cpid" 20; then
  fl_expect "scraped: the coordinator exited 3 after Prometheus scraped it" \
    "[[ $FL_RC -eq 3 ]]"
  echo "scraped: target added -> coordinator exited: +$(fl_sub "$FL_EXIT_TIME" "$t_target") s"
else
  fl_expect "scraped: the coordinator exited within 20 s of becoming a target" false
fi
grep -E 'coordinator: (the job has failed|signal)' "$coord" | cut -c1-400
fl_expect "scraped: ... saying that /metrics was served after the failure" \
  "grep -Eq 'signal received; /metrics was served [0-9.ms]+ after the failure, exiting with status 3' '$coord'"
fl_expect "scraped: Prometheus ingested shardd_coordinator_job_failed = 1" \
  "prom wait '$prom_url' 'max_over_time(shardd_coordinator_job_failed[5m]) == 1' 10 >/dev/null"
fl_expect "scraped: Prometheus then found the coordinator gone (up == 0)" \
  "prom wait '$prom_url' 'up{job=\"shardd-coordinator\"} == 0' 15 >/dev/null"
fl_expect "scraped: SharddJobFailed is firing with the coordinator gone" \
  "prom wait '$prom_url' 'ALERTS{alertname=\"SharddJobFailed\",alertstate=\"firing\"} and on() (up{job=\"shardd-coordinator\"} == 0)' 15"
# What the alert read before (the gauge itself) is stale now: it would not
# fire on a coordinator that has exited.
fl_expect "scraped: the bare gauge is stale once the coordinator is gone" \
  "[[ -z \$(prom query '$prom_url' 'shardd_coordinator_job_failed') ]]"

# --- unscraped: exits at the bound ------------------------------------------
FL_COORD_FLAGS=(--metrics_port=-1 --metrics_address=127.0.0.1
  --failed_report_wait=3s)
fail_job unscraped
coord=$FL_ROOT/unscraped/coord-1.log
if fl_wait_exit "$FL_COORD_PID" 20; then
  fl_expect "unscraped: the coordinator exited 3" "[[ $FL_RC -eq 3 ]]"
  held=$(fl_sub "$FL_EXIT_TIME" "$FAIL_TIME")
  echo "unscraped: JOB_FAILED -> coordinator exited: +$held s"
  fl_expect "unscraped: ... no sooner than --failed_report_wait (3 s) after the failure, and within 15 s" \
    "awk -v d=$held 'BEGIN { exit !(d >= 3 && d < 15) }'"
else
  fl_expect "unscraped: the coordinator exited within 20 s of the drain" false
fi
grep -E 'coordinator: (the job has failed|signal)' "$coord" | cut -c1-400
fl_expect "unscraped: ... saying that no scrape came" \
  "grep -q 'every member has left; no /metrics scrape within --failed_report_wait=3s of the failure' '$coord'"

# --- signalled: a second SIGTERM exits at once -------------------------------
FL_COORD_FLAGS=(--metrics_port=-1 --metrics_address=127.0.0.1
  --failed_report_wait=60s)
fail_job signalled
coord=$FL_ROOT/signalled/coord-1.log
fl_expect "signalled: the coordinator holds its exit for a scrape" \
  "fl_wait_line '$coord' 'every member has left, but /metrics has not been scraped' 10"
kill -TERM "$FL_COORD_PID"
fl_expect "signalled: a first SIGTERM leaves it waiting" \
  "fl_wait_line '$coord' 'signal received, but /metrics has not been scraped' 10"
t_second=$(fl_now)
kill -TERM "$FL_COORD_PID"
if fl_wait_exit "$FL_COORD_PID" 10; then
  fl_expect "signalled: the second SIGTERM made it exit 3" "[[ $FL_RC -eq 3 ]]"
  echo "signalled: second SIGTERM -> coordinator exited: +$(fl_sub "$FL_EXIT_TIME" "$t_second") s"
else
  fl_expect "signalled: the coordinator exited within 10 s of the second SIGTERM" false
fi
fl_expect "signalled: ... saying so" \
  "grep -q 'second signal received; /metrics not scraped since the failure, exiting with status 3' '$coord'"
fl_finish
