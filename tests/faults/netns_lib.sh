# shellcheck shell=bash disable=SC2034  # NL_*/FL_* globals are for the tests
# shellcheck disable=SC2004,SC2154  # FL_*_N: fault_lib.sh's associative arrays
# Network-namespace topology for the fault tests that cut networks
# (tests/faults/partition_test.sh), sourced after fault_lib.sh, not run:
#
#   source "$(dirname "$0")/fault_lib.sh"
#   source "$(dirname "$0")/netns_lib.sh"
#   fl_init "$@"
#   nl_setup            # or: SKIPPED (JUnit <skipped/>) and exit 0
#   fl_reference        # the no-fault run, inside the namespaces
#   fl_start_cluster run
#   nl_partition 2 ... nl_heal 2
#   fl_wait_trainers run; fl_check_run run "$FL_REF"; fl_finish
#
# The topology (names carry a per-process tag, so that tests can run at the
# same time; the addresses are private to the tag's namespaces):
#
#   hub namespace      bridge bctl: control network 10.N.1.0/24, .100 = the
#                      coordinator's address;
#                      bridge bdata: data network 10.N.2.0/24, .100 = the hub
#                      (the coordinator probes daemons' peer services).
#   node namespace K   veth "ctl" in bctl, 10.N.1.(K+1) (coordinator traffic),
#   (K = 0..W-1)       veth "data" in bdata, 10.N.2.(K+1) (Peer API, Gloo).
#   extra node K >= W  the same, added by nl_add_node K (a new machine for a
#                      replacement daemon: nl_start_daemon_on RUN RANK K).
#
# No namespace has a route to the other /24 through the hub (the hub does
# not forward between its bridges and the nodes have no default route), so
# a node whose "data" link is down is cut off from its peers but still
# heartbeats to the coordinator: that is nl_partition. Trainers stay in the
# root namespace: they reach their daemon through a Unix socket path and
# shared-memory files under $FL_ROOT, which do not depend on the network
# namespace. `ip netns exec` execs the command (no fork), so $! is the
# coordinator's or daemon's own pid and fl_kill_all kills it.
#
# Every namespace is deleted on every exit path: nl_setup replaces
# fault_lib's EXIT trap with nl_exit, which kills the processes (a
# namespace with a process in it outlives `ip netns del`), deletes the
# namespaces and then runs fl_exit.

NL_NETNS=()       # namespaces this process created (deleted at exit)
NL_COORD_FLAGS=() # extra flags for every coordinator fl_start_cluster starts

# nl_skip WHY: this host cannot build the topology. The test does not count
# as passed: a JUnit XML with one skipped test case (scripts/test counts
# those apart), "SKIPPED: WHY", exit 0.
nl_skip() {
  local why=$1 name
  name=$(basename "$0" .sh)
  echo "SKIPPED: $name: $why"
  if [[ -n "${XML_OUTPUT_FILE:-}" ]]; then
    local msg=${why//&/&amp;}
    msg=${msg//</&lt;}
    msg=${msg//>/&gt;}
    msg=${msg//\"/&quot;}
    cat >"$XML_OUTPUT_FILE" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<testsuites>
  <testsuite name="$name" tests="1" failures="0" errors="0" skipped="1">
    <testcase name="$name" classname="tests.faults" time="0">
      <skipped message="$msg"/>
    </testcase>
  </testsuite>
</testsuites>
EOF
  fi
  exit 0
}

# nl_ns K: node K's namespace; nl_ctl_ip K, nl_data_ip K: its addresses.
nl_ns() { echo "${NL_TAG}n$1"; }
nl_ctl_ip() { echo "$NL_NET.1.$(($1 + 1))"; }
nl_data_ip() { echo "$NL_NET.2.$(($1 + 1))"; }

# nl_ip ARGS...: one ip(8) command; a failure is fatal.
nl_ip() {
  local err
  err=$(ip "$@" 2>&1) || fl_die "netns: ip $*: $err"
}

# nl_batch NS: the ip(8) commands on stdin (one a line) in namespace NS, in
# one ip process (~30 ms an ip process here); a failure is fatal.
nl_batch() {
  local cmds err
  cmds=$(cat)
  err=$(ip -n "$1" -batch - <<<"$cmds" 2>&1) ||
    fl_die "netns set-up in $1: $err (commands: ${cmds//$'\n'/; })"
}

# nl_reap_stale: deletes namespaces of this naming scheme whose test shell
# is gone (a SIGKILLed test runs no trap). Only names nl<PID>x<TAG>...
# whose PID no longer exists; a live test's namespaces are never touched.
nl_reap_stale() {
  local name pid
  while read -r name _; do
    [[ "$name" =~ ^nl([0-9]+)x[0-9]+(h|n[0-9]+)$ ]] || continue
    pid=${BASH_REMATCH[1]}
    [[ -e /proc/$pid ]] || ip netns del "$name" 2>/dev/null
  done < <(ip netns list 2>/dev/null)
}

# nl_make_node K: node K's namespace (recorded for deletion) with its two
# links and addresses; their hub ends (cK, dK) wait in the hub, unattached:
# nl_hub_ports K prints the hub commands that attach them to the bridges.
nl_make_node() {
  local k=$1 ns err
  ns=$(nl_ns "$k")
  NL_NETNS+=("$ns")
  err=$(ip netns add "$ns" 2>&1) || fl_die "netns set-up: ip netns add $ns: $err"
  nl_batch "$ns" <<EOF
link set lo up
link add ctl type veth peer name c$k netns $NL_HUB
link add data type veth peer name d$k netns $NL_HUB
addr add $(nl_ctl_ip "$k")/24 dev ctl
addr add $(nl_data_ip "$k")/24 dev data
link set ctl up
link set data up
EOF
}
nl_hub_ports() {
  printf 'link set c%s master bctl up\nlink set d%s master bdata up\n' "$1" "$1"
}

# nl_add_node K: one more node namespace after nl_setup, K >= W (with W =
# 4, K = 4 has 10.N.1.5 and 10.N.2.5), on both networks like the others
# (a new machine, e.g. for a replacement: nl_start_daemon_on); deleted at
# exit with them.
nl_add_node() {
  local k=$1 ns
  ns=$(nl_ns "$k")
  ((k >= FL_W && k < 99)) || fl_die "nl_add_node $k: K must be in [$FL_W, 99)"
  [[ " ${NL_NETNS[*]} " != *" $ns "* ]] || fl_die "nl_add_node $k: $ns exists"
  nl_make_node "$k"
  nl_batch "$NL_HUB" < <(nl_hub_ports "$k")
  fl_log "netns: node $k added ($ns): control $(nl_ctl_ip "$k")," \
    "data $(nl_data_ip "$k")"
}

# nl_setup: the hub and W node namespaces (file comment); NL_HUB, NL_NET,
# NL_COORD_HOST. Skips the test (nl_skip) when not root or when a network
# namespace cannot be created. Call after fl_init.
nl_setup() {
  local err k ports=""
  [[ $EUID -eq 0 ]] ||
    nl_skip "needs root for network namespaces (running as uid $EUID)"
  command -v ip >/dev/null || nl_skip "no ip(8) (iproute2) on the PATH"
  nl_reap_stale
  FL_START_COORDINATOR=nl_start_cluster_coordinator
  FL_START_DAEMON=nl_start_daemon
  NL_TAG="nl$$x$((RANDOM % 1000))"
  NL_HUB="${NL_TAG}h"
  NL_NET="10.$((100 + RANDOM % 100))"
  NL_COORD_HOST="$NL_NET.1.100"
  NL_NETNS=("$NL_HUB")
  trap nl_exit EXIT
  err=$(ip netns add "$NL_HUB" 2>&1) ||
    nl_skip "cannot create a network namespace (ip netns add: $err)"
  nl_batch "$NL_HUB" <<EOF
link set lo up
link add bctl type bridge
link add bdata type bridge
addr add $NL_COORD_HOST/24 dev bctl
addr add $NL_NET.2.100/24 dev bdata
link set bctl up
link set bdata up
EOF
  for ((k = 0; k < FL_W; k++)); do
    nl_make_node "$k"
    ports+=$(nl_hub_ports "$k")$'\n'
  done
  nl_batch "$NL_HUB" <<<"$ports"
  fl_log "netns: hub $NL_HUB, nodes $(nl_ns 0)..$(nl_ns $((FL_W - 1))):" \
    "control $NL_NET.1.0/24 (coordinator $NL_COORD_HOST), data $NL_NET.2.0/24"
}

# nl_teardown: deletes every namespace this process created (nodes first).
# Kill the processes in them first (nl_exit does).
nl_teardown() {
  local i
  for ((i = ${#NL_NETNS[@]} - 1; i >= 0; i--)); do
    ip netns del "${NL_NETNS[i]}" 2>/dev/null ||
      [[ ! -e "/run/netns/${NL_NETNS[i]}" ]] ||
      echo "netns teardown: could not delete ${NL_NETNS[i]}" >&2
  done
  NL_NETNS=()
}

nl_return() { return "$1"; }

# nl_exit: the EXIT trap once nl_setup ran: processes killed, namespaces
# deleted, then fault_lib's fl_exit with the script's exit status.
nl_exit() {
  local rc=$?
  fl_kill_all
  nl_teardown
  nl_return "$rc"
  fl_exit
}

# nl_start_coordinator RUN [FLAG...]: fl_start_coordinator in the hub
# namespace, listening on $NL_COORD_HOST: FL_PORT, FL_COORD_PID; log
# coord-N.log. No process outside the hub can hold a port there, so any
# port does; NL_PORT (if set) asks for one (a restart on the same port).
nl_start_coordinator() {
  local run=$1 d="$FL_ROOT/$1" attempt
  shift
  mkdir -p "$d"
  local re="listening on ${NL_COORD_HOST//./\\.}:[0-9]+"
  for ((attempt = 1; attempt <= 5; attempt++)); do
    FL_COORD_N[$run]=$((${FL_COORD_N[$run]:-0} + 1))
    local n=${FL_COORD_N[$run]}
    local log="$d/coord-$n.log" port=${NL_PORT:-$((20000 + RANDOM % 12000))}
    ip netns exec "$NL_HUB" "$FL_COORDINATOR" \
      --listen="$NL_COORD_HOST:$port" --insecure --world_size="$FL_W" \
      --sharding_factor="$FL_F" "$@" >"$log" 2>&1 &
    FL_COORD_PID=$!
    fl_pids+=($!)
    fl_wait_started "$FL_COORD_PID" "$log" "$re|cannot listen" 30
    case $? in
      1) fl_die "$run: coordinator $n exited at start: $(tail -3 "$log")" ;;
      2) fl_die "$run: coordinator $n did not start listening within 30 s" ;;
    esac
    if grep -q 'cannot listen' "$log"; then
      [[ -z "${NL_PORT:-}" ]] || fl_die "$run: coordinator $n: port $port is taken"
      fl_wait_exit "$FL_COORD_PID" 10
      rm -f "$log"
      FL_COORD_N[$run]=$((n - 1))
      continue
    fi
    FL_PORT=$(grep -Eo "$re" "$log" | head -1 | cut -d: -f2)
    return 0
  done
  fl_die "$run: no free coordinator port in 5 attempts"
}

# nl_start_daemon RUN RANK [FLAG...]: fl_start_daemon in RANK's namespace,
# its Peer API and Gloo on its data address: FL_DAEMON_PID[RANK],
# FL_DAEMON_N; incarnation I logs to dRANK-I.log, writes commit-RANK-I.log.
nl_start_daemon() {
  local run=$1 r=$2
  shift 2
  nl_start_daemon_on "$run" "$r" "$r" "$@"
}

# nl_start_daemon_on RUN RANK K [FLAG...]: nl_start_daemon on node K (its
# namespace and data address) with RANK's identity node-RANK, e.g. a
# replacement on a new node (nl_add_node); logs and commit logs named as
# nl_start_daemon's (fl_daemon_log and fl_check_run find them). Its
# trainer socket (NL_SOCKET[RUN/RANK]) is sRANK.sock on node RANK, else
# sRANK-nK.sock: a daemon refuses a path another one serves, and the
# RANK daemon it replaces may live on, cut off.
declare -A NL_SOCKET
nl_start_daemon_on() {
  local run=$1 r=$2 k=$3
  shift 3
  local d="$FL_ROOT/$run" key="$run/$r" sock
  FL_DAEMON_N[$key]=$((${FL_DAEMON_N[$key]:-0} + 1))
  local n=${FL_DAEMON_N[$key]}
  if [[ $k -eq $r ]]; then sock="$d/s$r.sock"; else sock="$d/s$r-n$k.sock"; fi
  NL_SOCKET[$key]=$sock
  ip netns exec "$(nl_ns "$k")" "$FL_SHARDD" \
    --coordinator="$NL_COORD_HOST:$FL_PORT" --insecure \
    --peer_listen="$(nl_data_ip "$k"):0" --identity=node-"$r" \
    --rank="$r" --listen_unix="$sock" --shm_dir="$d" \
    --commit_log="$d/commit-$r-$n.log" "${FL_DAEMON_FLAGS[@]}" "$@" \
    >"$d/d$r-$n.log" 2>&1 &
  FL_DAEMON_PID[r]=$!
  fl_pids+=($!)
}

# nl_start_trainer RUN RANK [FLAG...]: fl_start_trainer (root namespace)
# against the trainer socket of RANK's latest daemon, wherever it runs
# (fl_start_trainer's own --socket is sRANK.sock; with absl flags the last
# --socket given wins).
nl_start_trainer() {
  local run=$1 r=$2
  shift 2
  fl_start_trainer "$run" "$r" --socket="${NL_SOCKET[$run/$r]}" "$@"
}

# fl_start_cluster's coordinator in the hub namespace, with NL_COORD_FLAGS
# (nl_setup makes fl_start_cluster and fl_reference use it and
# nl_start_daemon; their trainers stay in the root namespace).
nl_start_cluster_coordinator() {
  nl_start_coordinator "$1" "${NL_COORD_FLAGS[@]}"
}

# nl_peer_address RUN RANK: the Peer API host:port of RANK's latest daemon
# (from its "listening" line).
nl_peer_address() {
  sed -nE "s/^shardd rank $2 listening on .* peer ([0-9.]+:[0-9]+)\$/\1/p" \
    "$(fl_daemon_log "$1" "$2")" | tail -1
}

# nl_reach K HOST:PORT: whether a TCP connection from node K's namespace
# to HOST:PORT opens within 2 s (then closed at once, nothing sent). A
# destination without a route fails at once; an unanswered one at 2 s.
nl_reach() {
  # shellcheck disable=SC2016  # expanded by the inner bash
  ip netns exec "$(nl_ns "$1")" timeout 2 \
    bash -c 'exec 3<>"/dev/tcp/${1%:*}/${1##*:}"' _ "$2" 2>/dev/null
}

# nl_partition K: node K's data link down: cut off from its peers (and from
# the hub's data address), still on the control network. NL_PARTITION_TIME:
# just before. nl_heal K: the link up again (its connected route comes
# back); NL_HEAL_TIME: just before.
nl_partition() {
  NL_PARTITION_TIME=$(fl_now)
  nl_ip -n "$(nl_ns "$1")" link set data down
  fl_log "netns: node $1 partitioned (data link down)"
}
nl_heal() {
  NL_HEAL_TIME=$(fl_now)
  nl_ip -n "$(nl_ns "$1")" link set data up
  fl_log "netns: node $1 healed (data link up)"
}

# nl_cut_link A B: only the data link between nodes A and B goes down, both
# ways (a "prohibit" route to the other's data address in each namespace:
# sends fail at once, and whatever still arrives cannot be answered); every
# other link, and both nodes' coordinator traffic, stay up.
# NL_CUT_TIME: just before. nl_mend_link A B: both routes removed;
# NL_MEND_TIME: just before.
nl_cut_link() {
  NL_CUT_TIME=$(fl_now)
  nl_ip -n "$(nl_ns "$1")" route add prohibit "$(nl_data_ip "$2")/32"
  nl_ip -n "$(nl_ns "$2")" route add prohibit "$(nl_data_ip "$1")/32"
  fl_log "netns: data link $1-$2 cut"
}
nl_mend_link() {
  NL_MEND_TIME=$(fl_now)
  nl_ip -n "$(nl_ns "$1")" route del prohibit "$(nl_data_ip "$2")/32"
  nl_ip -n "$(nl_ns "$2")" route del prohibit "$(nl_data_ip "$1")/32"
  fl_log "netns: data link $1-$2 mended"
}
