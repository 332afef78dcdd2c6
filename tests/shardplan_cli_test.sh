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
# Memory admission. Rank 0 above with K = 1: 440 B of parameters, 440 of
# gradients, 880 of AdamW state, one 440 B gathered slot and two 440 B
# gradient slots (G = 2: a reduce-scatter in flight while the next gradient
# is written), 220 + 112 B of communicator scratch (shard group: one
# 55-element block; replica group of 2: one 28-element block) and 32 MiB of
# staging: 33557844 B.
small="--world_size=4 --strategy=HYBRID_SHARD --sharding_factor=2 --layers=2 --hidden=10"
out=$("$bin" $small --memory_limit_bytes=33557844 2>&1)
rc=$?
expect "a plan at the budget fits (exit 0)" "[[ $rc -eq 0 ]]"
expect "every rank fits" "[[ \$(grep -c '  fits$' <<<\"\$out\") -eq 4 ]]"
out=$("$bin" $small --memory_limit_bytes=33557843 2>&1)
rc=$?
expect "one byte over the budget does not fit (exit 1)" "[[ $rc -eq 1 ]]"
expect "names the scope" "grep -q 'DOES NOT FIT: planned memory needs' <<<\"\$out\""
expect "names the limit" "grep -q 'from --memory_limit_bytes=33557843' <<<\"\$out\""

# The model of issue #27 against this machine's own limits.
out=$("$bin" --world_size=1 --strategy=NO_SHARD --sharding_factor=1 \
  --layers=4 --hidden=65536 --bias=false --local_limits 2>&1)
rc=$?
expect "272 GiB on one rank does not fit here (exit 1)" "[[ $rc -eq 1 ]]"
expect "reads MemAvailable" "grep -q 'from /proc/meminfo MemAvailable leaves' <<<\"\$out\""
expect "reads the shm directory" "grep -q 'free space of /dev/shm' <<<\"\$out\""
expect "says how much host memory it needs" "grep -q 'host memory needs 272.03 GiB' <<<\"\$out\""

out=$("$bin" $small --local_limits --memory_limit_fraction=0 2>&1)
rc=$?
expect "a fraction of 0 exits 2" "[[ $rc -eq 2 ]]"
expect "names the flag" "grep -q 'memory_limit_fraction' <<<\"\$out\""
exit $fail
