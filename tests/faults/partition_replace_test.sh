#!/usr/bin/env bash
# Fault test: a permanent partition; training continues on a replacement
# on another node.
#
# The topology of partition_test.sh (netns_lib.sh: every process in its own
# network namespace, a control and a data network) plus a fifth node
# namespace, node 4, with nothing on it. When rank 2's trainer prints
# "step 4", node 2's data link goes down and never comes up again. The
# daemons' peer probes find node 2 cut off; the coordinator removes rank 2
# and quarantines its peer address (--partition_quarantine_ms, 3 s here),
# refusing the old daemon's re-joins meanwhile. Then, as an operator or a
# scheduler would, the test gives up on node 2: it SIGKILLs rank 2's
# trainer (on the lost node with its daemon) and starts a replacement
# daemon with the same identity (node-2) and rank on node 4, at node 4's
# addresses and with its own trainer socket, and once it listens a new
# trainer against it. The replacement takes the vacant slot at once (its
# address is not quarantined) and copies shard 0 from rank 0, its replica;
# the new trainer attaches to the running job at the step recovered. When
# the quarantine ends the old daemon, still alive on node 2, re-joins: its
# identity is live in slot 2 at another address, the coordinator probes
# that holder, it answers, and the old daemon is refused (ALREADY_EXISTS)
# and exits with status 1.
#
# Checks: fault_lib.sh's common ones (bit-equal parameters with the
# reference, every rank's latest trainer finished, the commit logs of both
# rank-2 daemons and the others), rank 2 was removed as cut off from its
# peers (not by lease expiry), the old daemon's re-join was refused while
# quarantined and then as a second process of a live identity, it exited 1
# naming ALREADY_EXISTS and never re-joined, the replacement joined from
# node 4, recovered shard 0 from rank 0 at the step the coordinator
# planned, and the new trainer attached at that step and ran the rest; and
# that the partition was one: node 2 reached the coordinator but not a
# peer, node 4 reached its peers. Skipped (JUnit <skipped/>, not passed)
# where network namespaces cannot be created (not root).
set -uo pipefail
# As partition_test.sh: steps take ~50-80 ms here and the partition lands
# 1-2 steps after "step 4": 20 steps leave room under load.
FL_STEPS=${FL_STEPS:-20}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
# shellcheck source=netns_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/netns_lib.sh"
fl_init "$@"
nl_setup
RANK=2
NODE=4 # the new node (W = 4: nodes 0..3 carry ranks 0..3)
SHARD=$((RANK % FL_F))
REPLICA=0 # the other replica of shard 0 (ranks 0 and 2)
nl_add_node $NODE
NL_COORD_FLAGS=(--partition_quarantine_ms=3000)
fl_reference

fl_start_cluster run
coord="$FL_ROOT/run/coord-1.log"
old_daemon=${FL_DAEMON_PID[$RANK]}
old_trainer=${FL_TRAINER_PID[$RANK]}
old_log=$(fl_daemon_log run $RANK)
old_tlog=$(fl_trainer_log run $RANK)
old_peer=$(nl_peer_address run $RANK)
peer0=$(nl_peer_address run $REPLICA)
fl_wait_line "$old_tlog" "^step 4 " 60 ||
  fl_die "trainer $RANK did not commit step 4 within 60 s"
nl_partition $RANK
t_part=$NL_PARTITION_TIME
fl_expect "partitioned node $RANK still reaches the coordinator" \
  "nl_reach $RANK $NL_COORD_HOST:$FL_PORT"
fl_expect "... but not rank $REPLICA's Peer API ($peer0)" \
  "! nl_reach $RANK $peer0"
fl_wait_line "$coord" "MEMBER_REMOVED: rank $RANK cut off from its peers" 60 ||
  fl_die "the coordinator did not remove rank $RANK as cut off within 60 s"
removed=$(grep -m1 "MEMBER_REMOVED: rank $RANK cut off" "$coord")
t_removed=$(fl_coord_time "$removed")

# Node 2 is given up: its trainer goes with it, a replacement starts on
# node 4 (the old daemon lives on, cut off, holding s2.sock).
kill -9 "$old_trainer"
fl_wait_exit "$old_trainer" 10 || fl_die "trainer $RANK survived SIGKILL"
last=$(fl_last_step "$old_tlog")
fl_log "run: rank $RANK removed; its trainer killed after step $last of" \
  "$FL_STEPS; a replacement starts on node $NODE"
fl_expect "the partition came mid-training (not after the last step)" \
  "[[ $last -lt $FL_STEPS ]]"
nl_start_daemon_on run $RANK $NODE
new_log=$(fl_daemon_log run $RANK)
fl_wait_started "${FL_DAEMON_PID[$RANK]}" "$new_log" \
  "^shardd rank $RANK listening" 30 ||
  fl_die "the replacement on node $NODE did not join within 30 s (or exited)"
nl_start_trainer run $RANK
new_peer=$(nl_peer_address run $RANK)
fl_log "run: replacement listening (peer $new_peer), new trainer started"
fl_expect "the replacement listens on node $NODE's data address" \
  "[[ '${new_peer%:*}' == '$(nl_data_ip $NODE)' ]]"
fl_expect "node $NODE reaches rank $REPLICA's Peer API" \
  "nl_reach $NODE $peer0"
fl_expect "... and node $RANK does not reach the replacement's ($new_peer)" \
  "! nl_reach $RANK $new_peer"

# Its quarantine ends 3 s after the removal; its next re-join is refused
# and it exits. Not fatal: the training is checked either way.
old_rc=none
if fl_wait_exit "$old_daemon" 30; then
  old_rc=$FL_RC
  fl_log "run: old daemon $RANK exited (status $old_rc)," \
    "$(fl_sub "$FL_EXIT_TIME" "$t_removed") s after its removal"
fi
fl_wait_trainers run
fl_check_run run "$FL_REF"

# Removal and quarantine.
fl_expect "the coordinator removed rank $RANK as cut off from its peers" \
  "grep -q 'MEMBER_REMOVED: rank $RANK cut off from its peers: .*$old_peer is quarantined' '$coord'"
fl_expect "rank $RANK kept heartbeating: never removed by lease expiry" \
  "! grep -Eq 'MEMBER_REMOVED: rank $RANK lease expired|reported rank $RANK; removed: its lease expired|lease expired: rank\(s\) ([0-9]+,)*$RANK(,|\$| )' '$coord'"
fl_expect "the old daemon's re-join was refused while quarantined" \
  "grep -Eq \"JOIN_REJECTED: rank $RANK 'node-$RANK': peer address $old_peer is quarantined\" '$coord'"
# The replacement.
fl_expect "the replacement joined rank $RANK's slot from node $NODE" \
  "sed -n '/MEMBER_REMOVED: rank $RANK /,\$p' '$coord' |
     grep -q \"MEMBER_JOINED: rank $RANK joined: 'node-$RANK' at $new_peer\""
# The replacement's first epoch formed at once: the old daemon, which still
# saw those epochs, did not publish itself in their rendezvous as rank
# $RANK (a peer that connected to it instead sat in a connect until the
# collective timeout, epoch after epoch).
fl_expect "the first epoch with the replacement became ready without a failure" \
  "sed -n \"/MEMBER_JOINED: rank $RANK joined: 'node-$RANK' at $new_peer/,/EPOCH_READY/p\" '$coord' |
     grep -q EPOCH_READY &&
   ! sed -n \"/MEMBER_JOINED: rank $RANK joined: 'node-$RANK' at $new_peer/,/EPOCH_READY/p\" '$coord' |
     grep -Eq 'FAILURE_REPORT|MEMBER_REMOVED'"
line=$(grep -E "^shardd rank $RANK recovered shard" "$new_log")
echo "replacement: ${line:-<no recovered line>}"
step=$(sed -nE 's/^shardd rank [0-9]+ recovered shard [0-9]+ at step ([0-9]+) .*/\1/p' <<<"$line")
step=${step:-0}
fl_expect "the replacement recovered shard $SHARD from rank $REPLICA, at step $step (>= $last)" \
  "grep -Eq '^shardd rank $RANK recovered shard $SHARD at step $step from rank $REPLICA: .*over the replica group)\$' <<<\"\$line\" &&
   [[ $step -ge $last && $step -lt $FL_STEPS ]]"
fl_expect "... into an engine prepared during the rendezvous" \
  "grep -q '^shardd rank $RANK: engine ready for the shard copy (prepared during the rendezvous)' '$new_log'"
fl_expect "... rank $REPLICA sent it (piece CRCs precomputed)" \
  "grep -q ': sending shard $SHARD at step $step to rank $RANK over the replica group (piece CRCs precomputed)' '$(fl_daemon_log run $REPLICA)'"
fl_expect "the coordinator planned rank $RANK's copy of shard $SHARD at step $step" \
  "grep -q 'RECOVERY_PLANNED: rank $RANK copies shard $SHARD at step $step from' '$coord'"
new_tlog=$(fl_trainer_log run $RANK)
fl_expect "the new trainer attached to the running job at step $step" \
  "grep -Eq '^registered rank $RANK of $FL_W .*, committed step $step \(re-attached\)\$' '$new_tlog'"
fl_expect "... and ran steps $((step + 1))..$FL_STEPS only" \
  "[[ \$(grep -c '^step [0-9]* loss' '$new_tlog') -eq $((FL_STEPS - step)) ]] &&
   grep -q '^step $((step + 1)) loss' '$new_tlog'"
# The old daemon, once its quarantine ended.
fl_expect "the old daemon was refused: node-$RANK is live in slot $RANK at $new_peer" \
  "grep -q \"JOIN_REJECTED: .*identity 'node-$RANK' is live in slot $RANK: incarnation .* at $new_peer answers probes, .* at $old_peer) is refused\" '$coord'"
fl_expect "... its membership ended (ALREADY_EXISTS): it said it exits" \
  "grep -q '^shardd: membership ended: ALREADY_EXISTS: .*; exiting\$' '$old_log'"
fl_expect "... and it exited with status 1 within 30 s (status: $old_rc)" \
  "[[ $old_rc == 1 ]]"
fl_expect "the old daemon never re-joined" \
  "! sed -n '/MEMBER_REMOVED: rank $RANK /,\$p' '$coord' |
     grep -q \"MEMBER_JOINED: rank $RANK joined: 'node-$RANK' at $old_peer\""

fl_report_since run "$t_part" "partition -> first detection" \
  "FAILURE_REPORT|MEMBER_REMOVED|cut off"
fl_report_since run "$t_part" "partition -> rank $RANK removed" \
  "MEMBER_REMOVED: rank $RANK "
fl_report_since run "$t_part" "partition -> old daemon's re-join refused (quarantined)" \
  "JOIN_REJECTED: rank $RANK .*quarantined"
fl_report_since run "$t_removed" "removal -> replacement joined" \
  "MEMBER_JOINED: rank $RANK "
fl_report_since run "$t_part" "partition -> replacement joined" \
  "MEMBER_JOINED: rank $RANK "
fl_report_since run "$t_part" "partition -> recovery planned" \
  "RECOVERY_PLANNED: rank $RANK "
fl_report_since run "$t_part" "partition -> all ranks ready again" \
  "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members READY at step [1-9]"
fl_report_since run "$t_removed" "removal -> old daemon refused (slot live)" \
  "JOIN_REJECTED: .*is live in slot $RANK"
fl_finish
