#!/usr/bin/env bash
# Fault test: the coordinator and a daemon run out of file descriptors
# mid-training.
#
# When rank 1's trainer prints "step 20", the open-file limits of the
# coordinator and of rank 1's daemon are cut (prlimit) to what each has open
# plus 16 (room for what a daemon opens in its first seconds: its peers'
# probes connect in, its own probe channels; with 4, a daemon's own growth
# kept its table full after the flood), and a flood of connections fills
# both tables: 64 each to the coordinator's port, rank 1's Trainer socket
# and rank 1's peer port, held open. Training goes on meanwhile over the
# connections already open: every
# trainer commits 10 more steps, nobody is removed. Then the flood lets go:
# a new client (shardctl) reaches the coordinator and rank 1's daemon, on
# new connections, and training completes. Checks: fault_lib.sh's common
# ones (bit-equal parameters, commit logs), the shortage was real (both
# tables full, both processes said so), no member was removed, both
# listeners said they accept again.
set -uo pipefail
FL_STEPS=${FL_STEPS:-300}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
[[ -n "$FL_SHARDCTL" ]] || fl_die "usage: ... SHARDCTL (fifth argument)"
fl_reference

RANK=1
fl_start_cluster run
d="$FL_ROOT/run"
coord="$d/coord-1.log"
daemon_log=$(fl_daemon_log run $RANK)
fl_wait_line "$(fl_trainer_log run $RANK)" "^step 20 " 60 ||
  fl_die "trainer $RANK did not commit step 20 within 60 s"
peer=$(grep -Eo "^shardd rank $RANK listening on .* peer 127\.0\.0\.1:[0-9]+" \
  "$daemon_log" | grep -Eo '[0-9]+$')
[[ -n "$peer" ]] || fl_die "no peer port in $daemon_log"

fds() { # PID: its open descriptors, by kind
  find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' |
    sed 's/:\[.*//; s/^.*\.log$/(log)/' | sort | uniq -c | tr -s ' \n' ' '
  echo
}
declare -A cap
for pid in "$FL_COORD_PID" "${FL_DAEMON_PID[$RANK]}"; do
  echo "descriptors of $pid before: $(fds "$pid")"
  n=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  cap[$pid]=$((n + 16))
  prlimit --pid "$pid" --nofile="${cap[$pid]}:${cap[$pid]}" ||
    fl_die "prlimit on $pid failed"
done
t_short=$(fl_now)
fl_log "run: open-file limits cut (coordinator ${cap[$FL_COORD_PID]}," \
  "daemon $RANK ${cap[${FL_DAEMON_PID[$RANK]}]})"

# The flood: holds its connections until $d/release exists.
python3 - "$FL_PORT" "$peer" "$d/s$RANK.sock" "$d/release" \
  >"$d/flood.log" 2>&1 <<'EOF' &
import os, socket, sys, time
port, peer, path, release = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
held = []
for _ in range(64):
    for family, address in ((socket.AF_INET, ("127.0.0.1", port)),
                            (socket.AF_INET, ("127.0.0.1", peer)),
                            (socket.AF_UNIX, path)):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.connect(address)
        held.append(s)
print("flooded", len(held), flush=True)
while not os.path.exists(release):
    time.sleep(0.01)  # poll for the release file
for s in held:
    s.close()
print("released", flush=True)
EOF
flood=$!
fl_pids+=("$flood")
fl_wait_line "$d/flood.log" "^flooded" 30 || fl_die "the flood did not connect"

# shellcheck disable=SC2317  # full and wait_full run through fl_expect's eval
full() { # PID: its descriptor table is full
  [[ $(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l) -ge ${cap[$1]} ]]
}
# shellcheck disable=SC2317
wait_full() { # PID: until its table is full (3 s at most)
  local i
  for ((i = 0; i < 300; i++)); do
    full "$1" && return 0
    sleep 0.01 # poll interval
  done
  return 1
}
fl_expect "the coordinator's descriptor table filled up" \
  "wait_full $FL_COORD_PID"
fl_expect "daemon $RANK's descriptor table filled up" \
  "wait_full ${FL_DAEMON_PID[$RANK]}"
fl_expect "both said their accepts failed for want of descriptors" \
  "fl_wait_line '$coord' 'accept on .* failed: Too many open files' 10 &&
   fl_wait_line '$daemon_log' 'accept on .* failed: Too many open files' 10"

# Training goes on over the open connections: 10 more steps everywhere.
for ((r = 0; r < FL_W; r++)); do
  target=$(($(fl_last_step "$(fl_trainer_log run $r)") + 10))
  fl_expect "trainer $r commits step $target during the shortage" \
    "fl_wait_line '$(fl_trainer_log run $r)' '^step $target ' 60"
done
fl_expect "both tables are still full at the end of the shortage" \
  "full $FL_COORD_PID && full ${FL_DAEMON_PID[$RANK]}"

touch "$d/release"
fl_wait_exit "$flood" 30 || fl_die "the flood did not let go"
fl_log "run: flood released"
fl_expect "a new client reaches the coordinator" \
  "'$FL_SHARDCTL' --coordinator=127.0.0.1:$FL_PORT cluster >'$d/cluster.txt'"
fl_expect "a new client reaches daemon $RANK's Trainer socket" \
  "'$FL_SHARDCTL' --socket=$d/s$RANK.sock status >'$d/status.txt'" ||
  echo "descriptors of daemon $RANK now: $(fds "${FL_DAEMON_PID[$RANK]}")"
fl_wait_trainers run
fl_check_run run "$FL_REF"
fl_expect "nobody was removed during the shortage" \
  "! grep -q MEMBER_REMOVED '$coord'"
fl_expect "the coordinator's listener accepts again" \
  "grep -q 'accept on .* works again' '$coord'"
fl_expect "daemon $RANK's listeners accept again" \
  "grep -q 'accept on unix:.* works again' '$daemon_log'"
fl_log "run: shortage from +$(fl_sub "$t_short" "$FL_T0") s"
fl_finish
