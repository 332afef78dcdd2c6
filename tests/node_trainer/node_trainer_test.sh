#!/usr/bin/env bash
# End to end: a coordinator, W shardd daemons and W example trainers as real
# processes on 127.0.0.1 (CPU, Gloo), for W=2 F=2 FULL_SHARD, W=4 F=2
# HYBRID_SHARD, W=4 F=1 NO_SHARD and W=4 F=4 SHARD_GRAD_OP. Checks:
#   * every trainer finishes STEPS steps and prints "final loss";
#   * the final parameters (gathered by the trainers, written by rank 0)
#     equal the single-process ReferenceTrainer's on the union of the data
#     within TOLERANCE (fp32; only summation orders differ: measured
#     ~1e-7 after 10 steps);
#   * a second identical run gives bit-identical parameters;
#   * shardctl reads the live daemon (status shows the committed step);
#   * shardctl watch and cluster (W=2 FULL_SHARD, first run): watch, started
#     before the trainers, shows rank 0's snapshot, every committed step
#     and the export's progress (text and JSON lines), and ends with exit 0
#     on SIGTERM; watch --for=1s ends by itself with exit 0, and on a
#     terminal (script) draws the export as a bar; export -o json prints a
#     line per daemon; cluster against the coordinator lists every rank
#     READY, no broken link and the EPOCH_READY decision, and its -o json
#     parses; a watch whose daemon is SIGKILLed exits 1 saying that it went
#     away;
#   * shardctl export: FULL refused on one of W daemons (F > 1), saying what
#     it needs, or written by rank 0 alone (F = 1); driven on every rank
#     with --sockets, with progress lines;
#   * trainer crash and re-attach (W=2 FULL_SHARD): rank 0's trainer pauses
#     after committing step KILL_AT (--pause_after_step), is SIGKILLed, and a
#     new trainer process against the same daemon re-attaches (RegisterModel
#     answers reattached with committed step KILL_AT) and trains to STEPS;
#     the final parameters equal the reference's after STEPS steps. The kill
#     is at a step boundary: a trainer killed in the middle of a step leaves
#     gathered/reduced units in the daemon, which re-attach does not undo.
#   * --reshard_after_forward (W=2 FULL_SHARD): the same parameters bit for
#     bit as the default trainer, with exactly 2 more AllGathers per step
#     (3 layers, K=2: the default answers the last 2 units' backward gathers
#     from the daemon's cache, resharding gathers them again).
#   * --daemon_prefetch (W=2 FULL_SHARD, W=4 HYBRID_SHARD): synchronous
#     Gathers naming the next unit as the daemon's prefetch hint give the
#     same parameters bit for bit as the default trainer's asynchronous
#     Gathers, with the same number of AllGathers, and Gathers do find
#     their unit already gathered by the prefetch (was_ready).
#   * --init_values_dir (W=2 FULL_SHARD, W=4 HYBRID_SHARD): the initial
#     weights registered from the trainers' files (shared-memory init
#     values) give the same parameters bit for bit as NormalInit.
# Every child is SIGKILLed on any exit path (trap).
set -uo pipefail
coordinator="$1"; shardd="$2"; trainer="$3"; compare="$4"; shardctl="$5"
STEPS=10
KILL_AT=4
LIVE_CHECKS=w2_full_a  # The run that checks shardctl watch and cluster.
watch_text=""; watch_json=""
TOLERANCE=1e-5
fail=0
pids=()
trainer_extra=()  # Extra flags of every trainer of the next run.
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

# wait_line FILE PATTERN SECONDS: waits for PATTERN in FILE (deadline)
wait_line() {
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# live_checks NAME W PORT DAEMON0_PID: shardctl watch and cluster against
# the run's live processes; the watches in $d/watch.* were started before
# the trainers. Ends with rank 0's daemon SIGKILLed.
live_checks() {
  local name=$1 w=$2 port=$3 d0=$4 d="$root/$1" out rc
  kill -TERM "$watch_text" "$watch_json"
  wait "$watch_text"; rc=$?
  expect "$name: watch ends with exit 0 on SIGTERM" "[[ $rc -eq 0 ]]" ||
    cat "$d/watch.err"
  wait "$watch_json"; rc=$?
  expect "$name: watch -o json ends with exit 0 on SIGTERM" "[[ $rc -eq 0 ]]" ||
    cat "$d/watch_json.err"
  expect "$name: watch shows the snapshot, then every step committed" \
    "head -1 '$d/watch.txt' | grep -q '  snapshot  rank 0 ' &&
     [[ \$(grep -c '  step_committed  step ' '$d/watch.txt') -eq $STEPS ]] &&
     grep -q '  step_committed  step $STEPS, grad norm ' '$d/watch.txt'" ||
    cat "$d/watch.txt"
  expect "$name: watch shows the export's progress to done" \
    "grep -q '  export_progress  $d/full.safetensors  100%.*done: OK' '$d/watch.txt'" ||
    cat "$d/watch.txt"
  expect "$name: watch has no terminal control characters off a terminal" \
    "! grep -q \$'[\\r\\x1b]' '$d/watch.txt'"
  expect "$name: watch -o json: JSON lines with the steps and the export" \
    "/usr/bin/python3 -c '
import json, sys
events = [json.loads(line) for line in open(sys.argv[1])]
steps = [int(e[\"step_committed\"][\"step\"]) for e in events if \"step_committed\" in e]
done = [e[\"export_progress\"] for e in events if e.get(\"export_progress\", {}).get(\"done\")]
seq = [int(e[\"sequence\"]) for e in events]
sys.exit(0 if \"snapshot\" in events[0] and steps == list(range(1, $STEPS + 1)) and
         done and done[-1][\"status\"] == \"OK\" and seq == sorted(seq) else 1)
' '$d/watch.json'" || head -c 2000 "$d/watch.json"

  # export -o json: one ExportStateResponse per daemon (progress stays on
  # stderr).
  local socks
  socks=$(for r in $(seq 0 $((w - 1))); do printf '%s,' "$d/s$r.sock"; done)
  out=$("$shardctl" --sockets="${socks%,}" -o json export \
    --path="$d/json.safetensors" 2>/dev/null)
  expect "$name: export -o json: a JSON line per daemon, rank 0's file" \
    "/usr/bin/python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
ok = (len(lines) == $w and all(int(l[\"step\"]) == $STEPS for l in lines) and
      lines[0][\"files\"][0][\"path\"] == \"$d/json.safetensors\" and
      int(lines[0][\"files\"][0][\"bytes\"]) > 0)
sys.exit(0 if ok else 1)
' \"\$out\"" || echo "$out"

  local started=$SECONDS
  out=$(timeout 20 "$shardctl" --socket="$d/s0.sock" watch --for=1s 2>&1)
  rc=$?
  expect "$name: watch --for=1s ends by itself with exit 0" \
    "[[ $rc -eq 0 ]] && grep -q 'snapshot  rank 0 READY, epoch [0-9]* ready, committed step $STEPS' <<<\"\$out\"" ||
    echo "rc $rc: $out"
  echo "$name: watch --for=1s took $((SECONDS - started)) s"
  out=$("$shardctl" --socket="$d/s0.sock" watch --after=1 --for=1s -o json 2>&1)
  expect "$name: watch --after=1 resumes after event 1" \
    "/usr/bin/python3 -c 'import json, sys; e = [json.loads(l) for l in sys.argv[1].splitlines()]; sys.exit(0 if e and int(e[0][\"sequence\"]) == 2 else 1)' \"\$out\"" ||
    echo "$out" | head -c 1000

  # On a terminal (script(1) gives it one), the export replayed from the
  # daemon's log (--after=1) is a bar redrawn in place, then its done line.
  script -qec "'$shardctl' --socket='$d/s0.sock' watch --after=1 --for=1s" \
    /dev/null >"$d/tty.txt" 2>&1
  rc=$?
  expect "$name: watch on a terminal draws the export as a progress bar" \
    "[[ $rc -eq 0 ]] && /usr/bin/python3 -c '
import re, sys
t = open(sys.argv[1], \"rb\").read()
bar = re.search(rb\"\\r20[^\\r\\n]*export_progress  \\S+  \\[#+ *\\][^\\r\\n]*\\x1b\\[K\", t)
sys.exit(0 if bar and b\"done: OK\" in t else 1)
' '$d/tty.txt'" || { echo "rc $rc"; cat -v "$d/tty.txt" | head -20; }

  out=$("$shardctl" cluster --coordinator=127.0.0.1:"$port" 2>&1)
  rc=$?
  echo "$out" >"$d/cluster.txt"
  expect "$name: cluster lists all $w ranks READY" \
    "[[ $rc -eq 0 && \$(grep -cE '^[0-9]+ +READY +127\\.0\\.0\\.1:[0-9]+ +node-' <<<\"\$out\") -eq $w ]]" ||
    echo "$out"
  expect "$name: cluster shows no broken link and the epoch's READY decision" \
    "grep -q '^broken links: none' <<<\"\$out\" &&
     grep -qE '^  [0-9T:.-]+Z  epoch [0-9]+ +EPOCH_READY' <<<\"\$out\"" ||
    echo "$out"
  out=$("$shardctl" cluster -o json --coordinator=127.0.0.1:"$port" 2>&1)
  expect "$name: cluster -o json parses: $w READY slots, decisions" \
    "/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
ok = (len(d[\"slots\"]) == $w and
      all(s[\"state\"] == \"MEMBER_STATE_READY\" for s in d[\"slots\"]) and
      d[\"decisions\"] and d[\"broken_links\"] == [])
sys.exit(0 if ok else 1)
' \"\$out\"" || echo "$out" | head -c 2000

  # The daemon going away under a watch: exit 1 saying so.
  "$shardctl" --socket="$d/s0.sock" watch >"$d/gone.txt" 2>&1 &
  local watcher=$!
  pids+=($watcher)
  expect "$name: a watch shows its snapshot" \
    "wait_line '$d/gone.txt' '  snapshot  ' 20"
  kill -9 "$d0"
  wait "$d0" 2>/dev/null
  wait "$watcher"; rc=$?
  expect "$name: a watch whose daemon is killed exits 1 saying so" \
    "[[ $rc -eq 1 ]] && grep -q 'shardctl: the shardd daemon at unix:$d/s0.sock went away' '$d/gone.txt'" ||
    { echo "rc $rc"; cat "$d/gone.txt"; }
}

# run NAME W F STRATEGY [crash]: leaves $root/NAME/params.bin. With "crash",
# rank 0's trainer is SIGKILLed after step KILL_AT and started again.
run() {
  local name=$1 w=$2 f=$3 strategy=$4 crash=${5:-} d="$root/$1" d0=""
  local live=""
  [[ $name == "$LIVE_CHECKS" ]] && live=1
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
    ((r == 0)) && d0=$!
  done
  local tps=()
  for r in $(seq 0 $((w - 1))); do
    for _ in $(seq 200); do [[ -S "$d/s$r.sock" ]] && break; sleep 0.05; done
    if [[ -n "$live" && $r -eq 0 ]]; then
      # Watches from before registration to after the export.
      "$shardctl" --socket="$d/s0.sock" watch >"$d/watch.txt" \
        2>"$d/watch.err" &
      watch_text=$!
      pids+=($!)
      "$shardctl" --socket="$d/s0.sock" -o json watch >"$d/watch.json" \
        2>"$d/watch_json.err" &
      watch_json=$!
      pids+=($!)
      wait_line "$d/watch.txt" '  snapshot  ' 20
      wait_line "$d/watch.json" '"snapshot"' 20
    fi
    local extra=()
    [[ -n "$crash" && $r -eq 0 ]] && extra=(--pause_after_step=$KILL_AT)
    timeout 240 "$trainer" --socket="$d/s$r.sock" --strategy="$strategy" \
      --sharding_factor="$f" --world_size="$w" --rank="$r" --steps=$STEPS \
      --params_out="$d/params.bin" --rpc_timeout_ms=60000 "${extra[@]}" \
      "${trainer_extra[@]}" >"$d/t$r.log" 2>&1 &
    tps+=($!)
    pids+=($!)
  done
  if [[ -n "$crash" ]]; then
    expect "$name: trainer 0 committed step $KILL_AT" \
      "wait_line '$d/t0.log' '^paused after step $KILL_AT\$' 120" ||
      cat "$d/t0.log"
    # timeout(1) runs the trainer as its child: kill the trainer itself.
    local tpid
    tpid=$(pgrep -P "${tps[0]}" -x example_trainer)
    expect "$name: found trainer 0's process" "[[ -n '$tpid' ]]"
    [[ -n "$tpid" ]] && kill -9 "$tpid"
    wait "${tps[0]}"
    mv "$d/t0.log" "$d/t0_killed.log"
    timeout 240 "$trainer" --socket="$d/s0.sock" --strategy="$strategy" \
      --sharding_factor="$f" --world_size="$w" --rank=0 --steps=$STEPS \
      --params_out="$d/params.bin" --rpc_timeout_ms=60000 \
      >"$d/t0.log" 2>&1 &
    tps[0]=$!
    pids+=($!)
  fi
  local rc=0
  for p in "${tps[@]}"; do wait "$p" || rc=1; done
  for r in $(seq 0 $((w - 1))); do
    expect "$name: trainer $r finished $STEPS steps" \
      "grep -q '^final loss .* steps $STEPS' '$d/t$r.log'" ||
      { cat "$d/t$r.log"; tail -5 "$d/d$r.log"; }
  done
  if [[ -n "$crash" ]]; then
    expect "$name: the new trainer re-attached at step $KILL_AT" \
      "grep -q 'committed step $KILL_AT (re-attached)' '$d/t0.log'" ||
      cat "$d/t0.log"
    expect "$name: the new trainer ran steps $((KILL_AT + 1))..$STEPS only" \
      "[[ \$(grep -c '^step ' '$d/t0.log') -eq $((STEPS - KILL_AT)) ]] &&
       grep -q '^step $((KILL_AT + 1)) ' '$d/t0.log'"
  fi
  local st
  st=$("$shardctl" --socket="$d/s0.sock" status 2>&1)
  echo "$st" >"$d/status.txt"
  expect "$name: shardctl status shows step $STEPS" \
    "grep -q 'committed step  $STEPS' <<<\"\$st\""
  local js
  js=$("$shardctl" --socket="$d/s0.sock" --output=json status 2>&1)
  expect "$name: shardctl --output=json status is JSON with step $STEPS" \
    "/usr/bin/python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(0 if int(d[\"committed_step\"]) == $STEPS and d[\"registered\"] else 1)' \"\$js\""
  js=$("$shardctl" --socket="$d/s0.sock" --output=json members 2>&1)
  expect "$name: shardctl --output=json members is the topology (W = $w)" \
    "/usr/bin/python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(0 if d[\"world_size\"] == $w else 1)' \"\$js\""
  if ((w > 1)); then
    # A FULL export is collective: one daemon alone is refused with what it
    # needs; --sockets drives every rank at once, with progress.
    local ex ex_rc socks
    ex=$("$shardctl" --socket="$d/s0.sock" export \
      --path="$d/one.safetensors" 2>&1)
    ex_rc=$?
    if ((f > 1)); then
      expect "$name: FULL export on one of $w daemons exits 1 saying why" \
        "[[ $ex_rc -eq 1 ]] && grep -q 'a FULL export is collective' <<<\"\$ex\"" ||
        echo "$ex"
    else  # F = 1: rank 0 writes from its own copy, nothing gathered.
      expect "$name: FULL export at F = 1 on rank 0 alone writes the file" \
        "[[ $ex_rc -eq 0 && -s '$d/one.safetensors' ]]" || echo "$ex"
    fi
    socks=$(for r in $(seq 0 $((w - 1))); do printf '%s,' "$d/s$r.sock"; done)
    ex=$("$shardctl" --sockets="${socks%,}" export --optimizer_state \
      --path="$d/full.safetensors" 2>&1)
    ex_rc=$?
    expect "$name: shardctl export --sockets=<every rank> writes the file" \
      "[[ $ex_rc -eq 0 && -s '$d/full.safetensors' ]] &&
       grep -q 'exported step $STEPS' <<<\"\$ex\"" || echo "$ex"
    expect "$name: shardctl export shows progress to 100%" \
      "grep -q '^export 100%' <<<\"\$ex\"" || echo "$ex"
  fi
  [[ -n "$live" ]] && live_checks "$name" "$w" "$port" "$d0"
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

for cfg in "w2_full 2 2 FULL_SHARD" "w4_hybrid 4 2 HYBRID_SHARD" \
  "w4_noshard 4 1 NO_SHARD" "w4_gradop 4 4 SHARD_GRAD_OP"; do
  set -- $cfg
  run "$1_a" "$2" "$3" "$4"
  check "$1_a" "$2"
  run "$1_b" "$2" "$3" "$4"
  expect "$1: two runs are bit-identical" \
    "cmp -s '$root/$1_a/params.bin' '$root/$1_b/params.bin'"
done
run w2_crash 2 2 FULL_SHARD crash
check w2_crash 2

# all_gathers NAME: rank 0's AllGather calls in its shard group.
all_gathers() {
  awk '$1 == "ALL_GATHER" && $2 == "SHARD" { print $3 }' "$root/$1/status.txt"
}
trainer_extra=(--reshard_after_forward)
run w2_reshard 2 2 FULL_SHARD
trainer_extra=()
expect "w2_reshard: bit-identical to the default trainer's run" \
  "cmp -s '$root/w2_full_a/params.bin' '$root/w2_reshard/params.bin'"
ag_default=$(all_gathers w2_full_a)
ag_reshard=$(all_gathers w2_reshard)
echo "AllGathers: default $ag_default, --reshard_after_forward $ag_reshard"
expect "w2_reshard: 2 more AllGathers per step than the default trainer" \
  "[[ -n '$ag_default' && '$ag_reshard' -eq \$(( $ag_default + 2 * STEPS )) ]]"

trainer_extra=(--daemon_prefetch)
for cfg in "w2_full 2 2 FULL_SHARD" "w4_hybrid 4 2 HYBRID_SHARD"; do
  set -- $cfg
  run "$1_prefetch" "$2" "$3" "$4"
  expect "$1_prefetch: bit-identical to the default trainer's run" \
    "cmp -s '$root/$1_a/params.bin' '$root/$1_prefetch/params.bin'"
  ag_default=$(all_gathers "$1_a")
  ag_prefetch=$(all_gathers "$1_prefetch")
  sum() { grep -h '^gathers ' "$root/$1"/t*.log | awk -v f="$2" '{ s += $f } END { print s + 0 }'; }
  pf_default=$(sum "$1_a" 6)
  pf=$(sum "$1_prefetch" 6)
  echo "$1: AllGathers default $ag_default, --daemon_prefetch $ag_prefetch;" \
    "Gathers served by a prefetch: default $pf_default, --daemon_prefetch" \
    "$pf; Gathers that found their unit ready: $(sum "$1_prefetch" 4)"
  expect "$1_prefetch: as many AllGathers as the default trainer" \
    "[[ -n '$ag_default' && '$ag_prefetch' -eq '$ag_default' ]]"
  # 3 layers, K = 2: per step and rank, forward Gathers of units 1 and 2
  # and the backward Gather of unit 0 (units 2 and 1 are still cached).
  expect "$1_prefetch: 3 Gathers per step and rank served by a prefetch" \
    "[[ '$pf_default' -eq 0 && '$pf' -eq \$(( 3 * STEPS * $2 )) ]]"
done

# Initial weights from each trainer's own file (--init_values_dir:
# TensorInit.shared_memory, issue #18) instead of NormalInit: the same
# values, so the same parameters bit for bit.
trainer_extra=(--init_values_dir="$root")
for cfg in "w2_full 2 2 FULL_SHARD" "w4_hybrid 4 2 HYBRID_SHARD"; do
  set -- $cfg
  run "$1_init_values" "$2" "$3" "$4"
  expect "$1_init_values: bit-identical to the NormalInit run" \
    "cmp -s '$root/$1_a/params.bin' '$root/$1_init_values/params.bin'"
done
trainer_extra=()
exit $fail
