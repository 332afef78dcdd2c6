#!/usr/bin/env bash
# Runs deadline_waker_wall_offset_check with its wall clock 60 s behind
# (libfaketime, Debian's faketime package, which scripts/install-deps
# installs; CLOCK_MONOTONIC stays real). The check itself asserts that the
# offset is in force (Abseil's own timed wait is skewed) and that our
# monotonic waits are not.
set -euo pipefail
check=$1
lib=""
for candidate in /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
  /usr/lib/*/faketime/libfaketime.so.1; do
  if [[ -f $candidate ]]; then lib=$candidate; break; fi
done
if [[ -z $lib ]]; then
  echo "FAILED: libfaketime.so.1 not found; run scripts/install-deps" >&2
  exit 1
fi
LD_PRELOAD=$lib FAKETIME="-60s" FAKETIME_DONT_FAKE_MONOTONIC=1 \
  SHARDD_WALL_OFFSET_S=-60 "$check"
