#!/usr/bin/env bash
# Fault test: one broken link, which the coordinator cannot attribute.
#
# The topology of partition_test.sh (netns_lib.sh). When rank 1's trainer
# prints "step 4", only the data link between nodes 0 and 1 goes down
# (nl_cut_link: a prohibit route each way); both nodes still reach their
# other peers and the coordinator. Ranks 0 and 1 form a shard group, so
# they probe each other and both report the other unreachable: one link
# down both ways, which removing rank 0 or rank 1 would explain equally
# well. The coordinator must not guess (removing the wrong one would evict
# a healthy node and keep the broken one): it logs PARTITION_UNDECIDED once
# the link has stayed down for a lease and removes nobody; training stalls
# (collectives between 0 and 1 stall, or fail and epochs retry). The test
# waits for that line, checks that nobody was removed, then mends the link
# and training completes (a short cut may not even break the epoch's TCP
# connections: their retransmissions go through once it is mended).
#
# Checks: fault_lib.sh's common ones (bit-equal parameters with the
# reference, every trainer finished, commit logs), PARTITION_UNDECIDED
# names the link 0-1 and why nobody is removed, no member was removed or
# replaced at all, and the link really was the only one down (node 0 did
# not reach node 1's Peer API but reached node 2's). Skipped (JUnit
# <skipped/>, not passed) where network namespaces cannot be created.
set -uo pipefail
FL_STEPS=${FL_STEPS:-20}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
# shellcheck source=netns_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/netns_lib.sh"
fl_init "$@"
nl_setup
# Failed epochs retry every collective timeout: 10 s keeps the stall and
# the recovery after the mend short.
FL_DAEMON_FLAGS=(--collective_timeout_ms=10000)
fl_reference

fl_start_cluster run
fl_wait_line "$(fl_trainer_log run 1)" "^step 4 " 60 ||
  fl_die "trainer 1 did not commit step 4 within 60 s"
nl_cut_link 0 1
t_cut=$NL_CUT_TIME
last=$(fl_last_step "$(fl_trainer_log run 1)")
fl_log "run: link 0-1 cut after trainer 1's step $last of $FL_STEPS"
fl_expect "the cut came mid-training (not after the last step)" \
  "[[ $last -lt $FL_STEPS ]]"
peer1=$(nl_peer_address run 1)
peer2=$(nl_peer_address run 2)
fl_expect "node 0 does not reach rank 1's Peer API ($peer1)" \
  "! nl_reach 0 $peer1"
fl_expect "... but reaches rank 2's ($peer2) and the coordinator" \
  "nl_reach 0 $peer2 && nl_reach 0 $NL_COORD_HOST:$FL_PORT"
coord="$FL_ROOT/run/coord-1.log"
fl_wait_line "$coord" "PARTITION_UNDECIDED: " 60 ||
  fl_expect "the coordinator logged PARTITION_UNDECIDED within 60 s" false
nl_mend_link 0 1
fl_wait_trainers run
t_done=$(fl_now)
fl_check_run run "$FL_REF"
fl_expect "PARTITION_UNDECIDED names link 0-1 and removes nobody" \
  "grep -q 'PARTITION_UNDECIDED: links 0-1 are down both ways; removing any of {0}, {1} would leave the rest connected: cannot tell which side is cut off; nobody is removed' '$coord'"
fl_expect "no member was removed or replaced" \
  "! grep -q 'MEMBER_REMOVED' '$coord' &&
   [[ ! -e '$FL_ROOT/run/d0-2.log' && ! -e '$FL_ROOT/run/d1-2.log' ]]"
fl_report_since run "$t_cut" "cut -> PARTITION_UNDECIDED" "PARTITION_UNDECIDED"
echo "timeline: mend -> trainers done: +$(fl_sub "$t_done" "$NL_MEND_TIME") s"
fl_finish
