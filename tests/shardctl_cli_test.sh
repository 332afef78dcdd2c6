#!/usr/bin/env bash
# Runs shardctl as a real process against a socket where no daemon listens
# (and a coordinator port where nothing listens): every subcommand prints
# the "no shardd daemon" (or "no coordinator") line and exits 1; bad usage
# exits 2 naming what was wrong. The live daemon and coordinator:
# tests/node_trainer.
set -uo pipefail
bin="$1"
fail=0
expect() {  # expect DESCRIPTION CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}
dir=$(mktemp -d /tmp/shardctl_test.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for cmd in status units memory members watch; do
  out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" "$cmd" 2>&1)
  rc=$?
  expect "$cmd: daemon down exits 1" "[[ $rc -eq 1 ]]"
  expect "$cmd: says no daemon" "grep -qF 'shardctl: no shardd daemon at unix:$dir/shardd.sock (is it running? --socket to point elsewhere)' <<<\"\$out\""
done

out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" export --path=/tmp/x 2>&1)
expect "export: daemon down exits 1" "[[ $? -eq 1 ]]"

# The default socket: the exact message of the issue (unless a daemon runs).
if [[ ! -S /dev/shm/shardd.sock ]]; then
  out=$(timeout 20 "$bin" status 2>&1)
  rc=$?
  expect "default socket: exits 1" "[[ $rc -eq 1 ]]"
  expect "default socket: exact message" "[[ \"\$out\" == 'shardctl: no shardd daemon at unix:/dev/shm/shardd.sock (is it running? --socket to point elsewhere)' ]]"
fi

out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" frobnicate 2>&1)
expect "unknown command exits 2" "[[ $? -eq 2 ]]"
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" export --path=rel 2>&1)
expect "relative export path exits 2" "[[ $? -eq 2 ]]"
out=$(timeout 20 "$bin" 2>&1)
expect "no command exits 2" "[[ $? -eq 2 ]]"
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" --output=yaml status 2>&1)
expect "--output=yaml exits 2" "[[ $? -eq 2 ]]"
expect "--output=yaml is named" "grep -qF -- \"--output must be text or json, got 'yaml'\" <<<\"\$out\""
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" --output=json status 2>&1)
expect "--output=json, daemon down: exits 1" "[[ $? -eq 1 ]]"
# -o is short for --output, on every command.
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" -o yaml status 2>&1)
expect "-o yaml exits 2 naming --output" \
  "[[ $? -eq 2 ]] && grep -qF -- \"--output must be text or json, got 'yaml'\" <<<\"\$out\""
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" -o json export --path=/tmp/x 2>&1)
expect "-o json export, daemon down: exits 1" "[[ $? -eq 1 ]]"
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" -o json --output=text watch 2>&1)
expect "-o json watch, daemon down: exits 1 saying no daemon" \
  "[[ $? -eq 1 ]] && grep -qF 'shardctl: no shardd daemon at' <<<\"\$out\""
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" -o json --output=yaml status 2>&1)
expect "-o and --output disagreeing exits 2 naming both" \
  "[[ $? -eq 2 ]] && grep -qF -- '-o json and --output=yaml disagree' <<<\"\$out\""

# watch: bad flags exit 2 naming the flag.
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" watch --for=-1s 2>&1)
expect "watch --for=-1s exits 2 naming --for" \
  "[[ $? -eq 2 ]] && grep -qF -- '--for must be >= 0, got -1s' <<<\"\$out\""
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" watch --after=-1 2>&1)
expect "watch --after=-1 exits 2 naming --after" \
  "[[ $? -eq 2 ]] && grep -qF -- '--after must be >= 0, got -1' <<<\"\$out\""
# A value Abseil cannot parse: Abseil's own exit (1), naming the flag.
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" watch --for=soon 2>&1)
expect "watch --for=soon exits non-zero naming --for" \
  "[[ $? -ne 0 ]] && grep -qF -- \"Illegal value 'soon' specified for flag 'for'\" <<<\"\$out\""

# cluster: --coordinator is required; nothing listening is exit 1.
out=$(timeout 20 "$bin" cluster 2>&1)
expect "cluster without --coordinator exits 2 naming it" \
  "[[ $? -eq 2 ]] && grep -qF -- 'cluster needs --coordinator=HOST:PORT' <<<\"\$out\""
out=$(timeout 20 "$bin" cluster --coordinator=127.0.0.1:1 --decisions=-1 2>&1)
expect "cluster --decisions=-1 exits 2 naming it" \
  "[[ $? -eq 2 ]] && grep -qF -- '--decisions must be >= 0, got -1' <<<\"\$out\""
out=$(timeout 20 "$bin" cluster --coordinator=10.255.0.1:4000 2>&1)
expect "cluster in plaintext off this machine exits 2 naming --coordinator" \
  "[[ $? -eq 2 ]] && grep -qF -- '--coordinator=10.255.0.1:4000' <<<\"\$out\""
# A port bound but not listening: nothing answers there.
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
out=$(timeout 20 "$bin" cluster --coordinator=127.0.0.1:"$port" 2>&1)
rc=$?
expect "cluster, coordinator down: exits 1 saying so" \
  "[[ $rc -eq 1 ]] && grep -qF 'shardctl: no coordinator at 127.0.0.1:$port (is it running?' <<<\"\$out\""
out=$(timeout 20 "$bin" -o json cluster --coordinator=127.0.0.1:"$port" 2>&1)
expect "cluster -o json, coordinator down: exits 1" "[[ $? -eq 1 ]]"
out=$(timeout 20 "$bin" --socket="$dir/shardd.sock" frobnicate 2>&1)
expect "unknown command names the commands" \
  "grep -qF 'status|units|memory|members|export|watch|cluster' <<<\"\$out\""
exit $fail
