#!/usr/bin/env bash
# The CPU images, built and run with podman on this host (opt-in: needs
# root, podman, runc and debootstrap, the Debian mirror, and minutes).
#
#   scripts/podman-test            installs what is missing, then runs this
#   SHARDD_PODMAN_TEST=1 bazel test //tests/containers:podman_cluster_test \
#     --test_output=streamed --nocache_test_results
#   SHARDD_PODMAN_TEST=1 tests/containers/podman_cluster_test.sh
#                                  (from the repository root, with the
#                                  binaries in bazel-bin)
#
# Builds (or, through podman's layer cache, reuses) localhost/shardd:test
# and localhost/shardd-coordinator:test with deploy/docker/build-local.sh,
# then runs a job of W = 2, F = 1 (NO_SHARD: each rank's shard has a
# replica on the other) twice, every process its own container on the host
# network: the coordinator, two shardd daemons and two example trainers.
# Daemon r and trainer r share a host directory mounted at /run/shardd
# (the Trainer API socket, the shared-memory segments, the commit log),
# as the two containers of a Kubernetes pod share an emptyDir; each rank
# has its own, because a daemon names its segments after its pid, which is
# the same in every container.
#
#   1. reference: trains STEPS steps;
#   2. failure: the same, with daemon 1's container killed by
#      `podman kill -s KILL` after step KILL_AFTER and a replacement
#      container for rank 1 started on the same directory.
#
# Asserts: every trainer container exits 0 after all steps; the coordinator
# removed the dead member, planned a recovery and made a new epoch ready
# after the kill; the replacement recovered its shard from rank 0; trainer
# 1 re-attached; the commit logs of all three daemon incarnations are
# consistent (commit_log_check); the final parameters equal the
# reference's bit for bit; nothing is left running (every container of the
# test is removed on exit, by label, however it exits).
#
# Knobs: SHARDD_PODMAN_STEPS (default 100), SHARDD_PODMAN_KEEP=1 keeps the
# run directory (logs). Synchronisation is by log lines and container exits,
# each with a deadline.
set -uo pipefail

if [[ "${SHARDD_PODMAN_TEST:-}" != 1 ]]; then
  echo "The podman test is opt-in (root, podman, minutes): run" \
    "scripts/podman-test, or SHARDD_PODMAN_TEST=1 $0"
  exit 1
fi
PATH=$PATH:/usr/sbin:/sbin

if [[ $# -ge 6 ]]; then  # bazel: the binaries' locations, then the script
  coordinator_bin=$1 shardd_bin=$2 trainer_bin=$4 check_bin=$5
  build_local=$6
else
  coordinator_bin=bazel-bin/daemon/coordinator/coordinator
  shardd_bin=bazel-bin/daemon/node/shardd
  trainer_bin=bazel-bin/client/example_trainer
  check_bin=bazel-bin/daemon/recovery/commit_log_check
  build_local=deploy/docker/build-local.sh
fi
# build-local.sh wants a tree laid out like bazel-bin.
bin_root=${shardd_bin%daemon/node/shardd}
bin_root=${bin_root:-.}
for b in "$coordinator_bin" "$trainer_bin" "$check_bin"; do
  [[ -x "$b" ]] || { echo "FAILED: $b is missing (bazel build it)"; exit 1; }
done

here=$(cd "$(dirname "$build_local")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers-local.conf}
W=2
F=1
STEPS=${SHARDD_PODMAN_STEPS:-100}
# Early: `podman kill` itself takes about a second here, 20-30 steps.
KILL_AFTER=5
MODEL=(--in_features=64 --hidden=512 --out_features=16 --layers=4)
SHARDD_IMAGE=localhost/shardd:test
COORD_IMAGE=localhost/shardd-coordinator:test
label=shardd-podman-test=$$
root=$(mktemp -d /tmp/shardd-podman.XXXXXX)
t0=$(date +%s.%N)
fail=0

log() { echo "[$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')s] $*"; }
expect() {  # expect DESCRIPTION CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}
die() { echo "FAILED: $*"; fail=1; exit 1; }

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local rc=$?
  local ids
  ids=$(podman ps -aq --filter label="$label" 2>/dev/null)
  # shellcheck disable=SC2086  # one id per word
  [[ -n "$ids" ]] && podman rm -f -t 0 $ids >/dev/null 2>&1
  if [[ $fail -ne 0 || $rc -ne 0 ]]; then
    local f
    for f in "$root"/*/*.log; do
      [[ -f "$f" && $f != */commit-* ]] || continue
      echo "----- ${f#"$root"/} (last 20 lines)"
      tail -20 "$f" | cut -c1-300
    done
    [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]] &&
      cp -r "$root" "$TEST_UNDECLARED_OUTPUTS_DIR/" 2>/dev/null
    [[ $rc -eq 0 ]] && rc=1
  fi
  if [[ -n "${SHARDD_PODMAN_KEEP:-}" ]]; then
    echo "run directory kept: $root"
  else
    rm -rf "$root"
  fi
  [[ -z "$(podman ps -aq --filter label="$label" 2>/dev/null)" ]] ||
    { echo "FAILED: containers of this test are still there"; rc=1; }
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 3' INT TERM

# --- the images ---------------------------------------------------------------
log "building the images (deploy/docker/build-local.sh)"
"$build_local" --bin "$bin_root" --tag test || die "the images did not build"
log "images ready"

# --- helpers ------------------------------------------------------------------
# Every container: this test's label, the host network, its output in
# RUN/NAME.log (podman's k8s-file format: "TIME STREAM F|P text").
# ctr RUN NAME IMAGE [podman run options --] ARGS...
ctr() {
  local run=$1 name=$2 image=$3
  shift 3
  local opts=()
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  podman run -d --name "shardd-test-$$-$run-$name" --label "$label" \
    --network=host --log-driver=k8s-file \
    --log-opt path="$root/$run/$name.log" "${opts[@]}" "$image" "$@" \
    >/dev/null || die "$run: podman run $name failed"
}
# text RUN NAME: a container's output without podman's prefixes. (Piped
# into grep without -q: an early exit would fail the pipeline, pipefail.)
text() { sed -E 's/^[^ ]+ (stdout|stderr) [FP] //' "$root/$1/$2.log" 2>/dev/null; }
# wait_line RUN NAME EXTENDED_REGEX SECONDS
wait_line() {
  local end=$((SECONDS + $4))
  until text "$1" "$2" | grep -E "$3" >/dev/null; do
    ((SECONDS > end)) && return 1
    sleep 0.05  # poll interval
  done
}
# exit_code RUN NAME SECONDS: waits for the container to exit, prints its
# exit status (124: still running at the deadline).
exit_code() {
  timeout "$3" podman wait "shardd-test-$$-$1-$2" 2>/dev/null || echo 124
}

# start_daemon RUN RANK INCARNATION
start_daemon() {
  ctr "$1" "d$2-$3" "$SHARDD_IMAGE" -v "$root/$1/rank-$2:/run/shardd" -- \
    --coordinator=127.0.0.1:"$port" --identity=node-"$2" --rank="$2" \
    --listen_unix=/run/shardd/shardd.sock --shm_dir=/run/shardd \
    --commit_log="/run/shardd/commit-$2-$3.log"
}

# start_job RUN: coordinator, W daemons, W trainers; sets $port.
start_job() {
  local run=$1 r
  mkdir -p "$root/$run"
  for ((r = 0; r < W; r++)); do
    install -d -o 65532 -g 65532 "$root/$run/rank-$r"
  done
  ctr "$run" coordinator "$COORD_IMAGE" -- --listen=127.0.0.1:0 \
    --world_size=$W --sharding_factor=$F
  wait_line "$run" coordinator 'coordinator listening on 127\.0\.0\.1:[0-9]+' 60 ||
    die "$run: the coordinator did not listen within 60 s"
  port=$(text "$run" coordinator | grep -Eo 'listening on 127\.0\.0\.1:[0-9]+' |
    head -1 | cut -d: -f2)
  for ((r = 0; r < W; r++)); do start_daemon "$run" "$r" 1; done
  for ((r = 0; r < W; r++)); do
    wait_line "$run" "d$r-1" "^shardd rank $r listening" 60 ||
      die "$run: daemon $r did not join within 60 s"
    ctr "$run" "t$r" "$SHARDD_IMAGE" -v "$root/$run/rank-$r:/run/shardd" \
      --entrypoint /usr/local/bin/example_trainer -- \
      --socket=/run/shardd/shardd.sock --strategy=NO_SHARD \
      --sharding_factor=$F --world_size=$W --rank="$r" --steps="$STEPS" \
      --batch_per_rank=32 --lr=3e-3 --params_out=/run/shardd/params.bin \
      "${MODEL[@]}"
  done
  log "$run: coordinator (port $port), $W daemons and $W trainers running"
}

# check_trainers RUN: both trainer containers exit 0 after every step.
check_trainers() {
  local r rc
  for ((r = 0; r < W; r++)); do
    rc=$(exit_code "$1" "t$r" 300)
    expect "$1: trainer container $r exited 0 after $STEPS steps (exit $rc)" \
      "[[ $rc -eq 0 ]] && text $1 t$r | grep '^final loss .* steps $STEPS' >/dev/null"
  done
}

# --- 1. reference ---------------------------------------------------------------
start_job ref
check_trainers ref
grep -h '^final loss' <(text ref t0)
expect "ref: rank 0 wrote the final parameters" "[[ -s $root/ref/rank-0/params.bin ]]"
log "ref: done"

# --- 2. a daemon container killed and replaced -----------------------------------
start_job run
wait_line run t1 "^step $KILL_AFTER " 120 ||
  die "run: trainer 1 did not reach step $KILL_AFTER within 120 s"
killed=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
podman kill -s KILL "shardd-test-$$-run-d1-1" >/dev/null ||
  die "podman kill of daemon 1 failed"
rc=$(exit_code run d1-1 30)
log "run: daemon 1's container killed (podman kill -s KILL once trainer 1" \
  "had committed step $KILL_AFTER; it was at step $(text run t1 |
    grep -Eo '^step [0-9]+ loss' | tail -1 | cut -d' ' -f2) when the" \
  "container had exited, status $rc); starting its replacement"
expect "run: the killed daemon container exited by SIGKILL (137)" "[[ $rc -eq 137 ]]"
start_daemon run 1 2
check_trainers run
log "run: done"

coord=$(text run coordinator)
after_kill=$(awk -v t="$killed" '$1 >= t' <<<"$coord")
killed_ms=$(date -d "$killed" +%s%3N)
# Times from the `podman kill` call (which itself takes about a second).
for event in "MEMBER_REMOVED: .*rank 1[^0-9]" "RECOVERY_PLANNED: rank 1 " \
  "EPOCH_READY: epoch [0-9]+ ready: all $W members READY"; do
  line=$(grep -E -m1 "$event" <<<"$after_kill")
  expect "run: coordinator ${event%%:*} after the kill" "[[ -n '$line' ]]"
  [[ -n "$line" ]] && echo "   +$(($(date -d "${line%% *}" +%s%3N) - killed_ms)) ms: ${line#* }" | cut -c1-200
done
expect "run: no epoch stalled and the job never failed" \
  "! grep -Eq 'EPOCH_STALLED|JOB_FAILED' <<<\"\$coord\""
recovered=$(text run d1-2 | grep -m1 'recovered shard')
expect "run: the replacement recovered its shard from rank 0" \
  "grep -q 'shardd rank 1 recovered shard 0 at step [0-9]* from rank 0' <<<'$recovered'"
echo "   $recovered"
expect "run: trainer 1 re-attached to the replacement" \
  "text run t1 | grep '^re-attached: epoch' >/dev/null"
text run t1 | grep -E 'aborted|re-attach|unavailable' | head -4 | sed 's/^/   /'
out=$("$check_bin" --world_size=$W --sharding_factor=$F --final_step="$STEPS" \
  "$root"/run/rank-*/commit-*.log 2>&1)
crc=$?
echo "$out" | head -5 | sed 's/^/   /'
expect "run: commit logs of the three daemon incarnations are consistent" \
  "[[ $crc -eq 0 ]]"
expect "run: final parameters equal the reference's bit for bit" \
  "cmp -s $root/ref/rank-0/params.bin $root/run/rank-0/params.bin"

if [[ $fail -eq 0 ]]; then log "PASSED"; else log "FAILED"; fi
exit $fail
