#!/usr/bin/env bash
# End to end: a coordinator, W shardd daemons and W example trainers as real
# processes on 127.0.0.1 (CPU, Gloo), for W=2 F=2 FULL_SHARD and W=4 F=2
# HYBRID_SHARD. Checks:
#   * every trainer finishes STEPS steps and prints "final loss";
#   * the final parameters (gathered by the trainers, written by rank 0)
#     equal the single-process ReferenceTrainer's on the union of the data
#     within TOLERANCE (fp32; only summation orders differ: measured
#     ~1e-7 after 10 steps);
#   * a second identical run gives bit-identical parameters;
#   * shardctl reads the live daemon (status shows the committed step).
# Every child is SIGKILLed on any exit path (trap).
set -uo pipefail
coordinator="$1"; shardd="$2"; trainer="$3"; compare="$4"; shardctl="$5"
STEPS=10
TOLERANCE=1e-5
fail=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
trap 'cleanup; rm -rf "$root"' EXIT
root=$(mktemp -d /tmp/node_trainer_test.XXXXXX)
expect() {  # expect DESCRIPTION CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}

# run NAME W F STRATEGY: leaves $root/NAME/params.bin
run() {
  local name=$1 w=$2 f=$3 strategy=$4 d="$root/$1"
  mkdir -p "$d"
  "$coordinator" --listen=127.0.0.1:0 --world_size="$w" \
    --sharding_factor="$f" >"$d/coord.log" 2>&1 &
  pids+=($!)
  local port=""
  for _ in $(seq 100); do
    port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$d/coord.log" | cut -d: -f2)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" ]] || { echo "coordinator did not start"; cat "$d/coord.log"; return 1; }
  for r in $(seq 0 $((w - 1))); do
    "$shardd" --coordinator=127.0.0.1:"$port" --identity=node-"$r" \
      --rank="$r" --listen_unix="$d/s$r.sock" --shm_dir="$d" \
      >"$d/d$r.log" 2>&1 &
    pids+=($!)
  done
  local tps=()
  for r in $(seq 0 $((w - 1))); do
    for _ in $(seq 200); do [[ -S "$d/s$r.sock" ]] && break; sleep 0.05; done
    timeout 240 "$trainer" --socket="$d/s$r.sock" --strategy="$strategy" \
      --sharding_factor="$f" --world_size="$w" --rank="$r" --steps=$STEPS \
      --params_out="$d/params.bin" --rpc_timeout_ms=60000 \
      >"$d/t$r.log" 2>&1 &
    tps+=($!)
  done
  local rc=0
  for p in "${tps[@]}"; do wait "$p" || rc=1; done
  for r in $(seq 0 $((w - 1))); do
    expect "$name: trainer $r finished $STEPS steps" \
      "grep -q '^final loss .* steps $STEPS' '$d/t$r.log'" ||
      { cat "$d/t$r.log"; tail -5 "$d/d$r.log"; }
  done
  local st
  st=$("$shardctl" --socket="$d/s0.sock" status 2>&1)
  expect "$name: shardctl status shows step $STEPS" \
    "grep -q 'committed step  $STEPS' <<<\"\$st\""
  cleanup
  return $rc
}

check() {  # check NAME W
  local out
  out=$("$compare" --world_size="$2" --steps=$STEPS \
    --params="$root/$1/params.bin" --tolerance=$TOLERANCE 2>&1)
  local rc=$?
  echo "$out" | tail -1
  expect "$1: final parameters equal the reference within $TOLERANCE" \
    "[[ $rc -eq 0 ]]"
}

for cfg in "w2_full 2 2 FULL_SHARD" "w4_hybrid 4 2 HYBRID_SHARD"; do
  set -- $cfg
  run "$1_a" "$2" "$3" "$4"
  check "$1_a" "$2"
  run "$1_b" "$2" "$3" "$4"
  expect "$1: two runs are bit-identical" \
    "cmp -s '$root/$1_a/params.bin' '$root/$1_b/params.bin'"
done
exit $fail
