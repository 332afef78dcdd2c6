# shellcheck shell=bash disable=SC2034  # FS_* globals are for the tests
# The coordinator and one daemon out of file descriptors, for the fault
# tests (sourced after fault_lib.sh):
#
#   fs_start RUN RANK   # cut both limits, flood, wait until both are full
#   ...                 # what must hold during the shortage
#   fs_release RUN      # the flood lets go
#
# The open-file limits of the coordinator and of RANK's daemon are cut
# (prlimit) to what each has open plus 16 (room for what a daemon opens in
# its first seconds: its peers' probes connect in, its own probe channels;
# with 4, a daemon's own growth kept its table full after the flood), and a
# flood fills both tables: 64 connections each to the coordinator's port,
# RANK's Trainer socket and RANK's peer port, held until fs_release.

# fs_fds PID: its open descriptors, by kind (for the logs).
fs_fds() {
  find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' |
    sed 's/:\[.*//; s/^.*\.log$/(log)/' | sort | uniq -c | tr -s ' \n' ' '
  echo
}

declare -A FS_CAP
# fs_full PID: its descriptor table is full.
fs_full() {
  [[ $(find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l) -ge ${FS_CAP[$1]} ]]
}

# fs_wait_full PID: until its table is full (3 s at most).
fs_wait_full() {
  local i
  for ((i = 0; i < 300; i++)); do
    fs_full "$1" && return 0
    sleep 0.01 # poll interval
  done
  return 1
}

# fs_start RUN RANK: FS_COORD_LOG, FS_DAEMON_LOG, FS_PEER_PORT, FS_T0 (when
# the limits were cut); the checks that both tables filled and that both
# processes said so.
fs_start() {
  local run=$1 r=$2 d="$FL_ROOT/$1" pid n
  FS_COORD_LOG="$d/coord-${FL_COORD_N[$run]}.log"
  FS_DAEMON_LOG=$(fl_daemon_log "$run" "$r")
  FS_PEER_PORT=$(grep -Eo "^shardd rank $r listening on .* peer 127\.0\.0\.1:[0-9]+" \
    "$FS_DAEMON_LOG" | grep -Eo '[0-9]+$')
  [[ -n "$FS_PEER_PORT" ]] || fl_die "no peer port in $FS_DAEMON_LOG"
  FS_DAEMON=${FL_DAEMON_PID[$r]}
  for pid in "$FL_COORD_PID" "$FS_DAEMON"; do
    echo "descriptors of $pid before: $(fs_fds "$pid")"
    n=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    FS_CAP[$pid]=$((n + 16))
    prlimit --pid "$pid" --nofile="${FS_CAP[$pid]}:${FS_CAP[$pid]}" ||
      fl_die "prlimit on $pid failed"
  done
  FS_T0=$(fl_now)
  fl_log "$run: open-file limits cut (coordinator ${FS_CAP[$FL_COORD_PID]}," \
    "daemon $r ${FS_CAP[$FS_DAEMON]})"
  python3 - "$FL_PORT" "$FS_PEER_PORT" "$d/s$r.sock" "$d/release" \
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
  FS_FLOOD=$!
  fl_pids+=("$FS_FLOOD")
  fl_wait_line "$d/flood.log" "^flooded" 30 || fl_die "the flood did not connect"
  fl_expect "the coordinator's descriptor table filled up" \
    "fs_wait_full $FL_COORD_PID"
  fl_expect "daemon $r's descriptor table filled up" "fs_wait_full $FS_DAEMON"
  fl_expect "both said their accepts failed for want of descriptors" \
    "fl_wait_line '$FS_COORD_LOG' 'accept on .* failed: Too many open files' 10 &&
     fl_wait_line '$FS_DAEMON_LOG' 'accept on .* failed: Too many open files' 10"
}

# fs_release RUN: the flood closes its connections.
fs_release() {
  touch "$FL_ROOT/$1/release"
  fl_wait_exit "$FS_FLOOD" 30 || fl_die "the flood did not let go"
  fl_log "$1: flood released"
}
