#!/usr/bin/env bash
# Fault test: the SOURCE of a shard copy dies mid-transfer, and the copy is
# retried from another replica.
#
# W = 6, F = 2, so every shard has three holders (W/F = 3). Rank 1's daemon
# dies in an all-gather of step 4 (allgather.mid:kill@14); the coordinator
# plans its replacement's copy of shard 1 from ranks 3,5 (in that order).
# Rank 3 runs with --failpoint=transfer.source.mid:kill: it SIGKILLs itself
# once half of the shard's bytes are out (after a piece; the trailer, which
# carries the whole transfer's CRC, is never sent). The replacement must not
# install what it got: its copy from rank 3 fails, it tries rank 5, and it
# installs the shard only once a copy verified. Rank 3 is then replaced in
# turn. Checks: fault_lib.sh's common ones (bit-equal parameters; the
# commit logs of every incarnation: the interrupted source committed
# nothing after step 3), the replacement's failed attempt from rank 3 and
# its recovery from rank 5, and rank 3's replacement's recovery.
set -uo pipefail
# shellcheck shell=bash source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
FL_W=6
fl_init "$@"
fl_reference

run=run
fl_start_cluster $run 1 --failpoint=allgather.mid:kill@14 \
  3 --failpoint=transfer.source.mid:kill

fl_wait_exit "${FL_DAEMON_PID[1]}" 60 ||
  fl_die "$run: daemon 1 (allgather.mid:kill@14) still alive after 60 s"
fl_expect "$run: daemon 1 was SIGKILLed by its fail point allgather.mid" \
  "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint allgather.mid: kill' '$(fl_daemon_log $run 1)'"
died=$(fl_died_in_step $run 1)
fl_expect "daemon 1 died in step 4" "[[ $died -eq 4 ]]"
source_log=$(fl_daemon_log $run 3)
fl_start_daemon $run 1
fl_wait_exit "${FL_DAEMON_PID[3]}" 60 ||
  fl_die "$run: the source, rank 3 (transfer.source.mid:kill), still alive after 60 s"
fl_log "$run: the source rank 3 died (exit $FL_RC)"
fl_expect "the source rank 3 was SIGKILLed mid-transfer" \
  "[[ $FL_RC -eq 137 ]] && grep -q '^failpoint transfer.source.mid: kill' '$source_log'"
fl_start_daemon $run 3
fl_wait_trainers $run
fl_check_run $run "$FL_REF"

step=$((died - 1))
log=$(fl_daemon_log $run 1)
grep -E "copy from rank|recovered shard" "$log" | sed 's/^/replacement 1: /'
fl_expect "the replacement's copy from rank 3 failed and was not installed" \
  "grep -q '^shardd: shard copy from rank 3 failed' '$log' ||
   grep -q '^shardd: recovery in epoch [0-9]* failed' '$log'"
fl_expect "the replacement recovered shard 1 at step $step from rank 5" \
  "grep -q '^shardd rank 1 recovered shard 1 at step $step from rank 5:' '$log'"
fl_expect "it recovered exactly once" \
  "[[ \$(grep -c '^shardd rank 1 recovered shard' '$log') -eq 1 ]]"
log3=$(fl_daemon_log $run 3)
fl_expect "rank 3's replacement recovered shard 1 at step $step" \
  "grep -Eq '^shardd rank 3 recovered shard 1 at step $step from rank (1|5):' '$log3'"
fl_expect "the coordinator planned rank 1's copy from ranks 3 then 5" \
  "cat '$FL_ROOT'/$run/coord-*.log |
     grep -q 'RECOVERY_PLANNED: rank 1 copies shard 1 at step $step from rank(s) 3,5'"
# The replacement's events: its attempt from rank 3 reported bytes (from
# 0), and the attempt that completed, from rank 5, started again from 0.
fl_check_copy_progress $run 1
fl_expect "the replacement's events show its attempt from rank 3 and the one from rank 5" \
  "grep -q '^epoch [0-9]* attempt [0-9]* from rank 3: ' '$FL_ROOT/$run/copy-progress-1.txt' &&
   grep -q '^COMPLETE: epoch [0-9]* attempt [0-9]* from rank 5,' '$FL_ROOT/$run/copy-progress-1.txt'"
fl_check_copy_progress $run 3
fl_finish
