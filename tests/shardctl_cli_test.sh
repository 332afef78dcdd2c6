#!/usr/bin/env bash
# Runs shardctl as a real process against a socket where no daemon listens:
# every subcommand prints the "no shardd daemon" line and exits 1; bad usage
# exits 2.
set -uo pipefail
bin="$1"
fail=0
expect() {  # expect DESCRIPTION CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}
dir=$(mktemp -d /tmp/shardctl_test.XXXXXX)
trap 'rm -rf "$dir"' EXIT

for cmd in status units memory members; do
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
exit $fail
