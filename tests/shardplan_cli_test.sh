#!/usr/bin/env bash
# Runs the shardplan binary as a real process: a valid plan prints the
# placement and the formula; invalid input exits 2 naming the field.
set -uo pipefail
bin="$1"
fail=0
expect() {  # expect DESCRIPTION CONDITION
  if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; fail=1; fi
}

out=$("$bin" --world_size=4 --strategy=HYBRID_SHARD --sharding_factor=2 \
  --layers=2 --hidden=10 2>&1)
rc=$?
expect "valid plan exits 0" "[[ $rc -eq 0 ]]"
expect "says a replica exists" "grep -q '2 replica(s)' <<<\"\$out\""
# 2 units of 110 fp32 elements over F = 2: shards of 55 elements, so rank 0
# holds 2*55*4 = 440 B of parameters and gathers one 440 B unit.
expect "rank 0 parameter shard is 440 B" \
  "grep -E '^0 ' <<<\"\$out\" | grep -q ' 440 B'"
expect "prints the ZeRO formula" "grep -q 'Σψ/F + maxψ = 440 B + 440 B = 880 B' <<<\"\$out\""

out=$("$bin" --world_size=6 --strategy=HYBRID_SHARD --sharding_factor=4 2>&1)
rc=$?
expect "F not dividing W exits 2" "[[ $rc -eq 2 ]]"
expect "names the field" "grep -q 'sharding_factor (4) must divide world_size (6)' <<<\"\$out\""

out=$("$bin" --world_size=2 --sharding_factor=1 --strategy=FULL_SHARD 2>&1)
expect "FULL_SHARD with F != W is refused" "grep -q 'FULL_SHARD' <<<\"\$out\""

out=$("$bin" --world_size=2 --sharding_factor=2 --dtype=int8 2>&1)
rc=$?
expect "unsupported dtype exits 2" "[[ $rc -eq 2 ]]"
expect "names the dtype" "grep -q 'int8' <<<\"\$out\""

out=$("$bin" --world_size=2 --sharding_factor=2 --layers=1 --hidden=0 2>&1)
rc=$?
expect "zero-sized dim exits 2" "[[ $rc -eq 2 ]]"
expect "names the dim" "grep -q \"tensor\\[0\\] 'weight' shape\\[0\\]\" <<<\"\$out\""
exit $fail
