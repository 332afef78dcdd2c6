#!/usr/bin/env bash
# Fault test: the wall clock of one process steps +60 s and then -60 s in
# the middle of training (issue #26). Leases and deadlines must not move
# with it: they are measured on the monotonic clock.
#
# The step is made with libfaketime (Debian's faketime package, installed
# by scripts/install-deps): the process runs with LD_PRELOAD of
# libfaketime.so.1, FAKETIME_TIMESTAMP_FILE naming a file this test
# rewrites (atomically, by rename), FAKETIME_NO_CACHE=1 so that every
# wall-clock read re-reads it, and FAKETIME_DONT_FAKE_MONOTONIC=1 so that
# CLOCK_MONOTONIC stays real. The file starts at "+0"; when trainer 0
# prints "step 5" it becomes "+60" (the process's wall clock jumps 60 s
# ahead), CS_HOLD_S = 4 s later "-60" (it jumps 120 s back, to 60 s behind
# real time), held for another CS_HOLD_S. Why 4 s: absl::Now() reads
# clock_gettime(CLOCK_REALTIME) only every ~2 s and interpolates with the
# cycle counter in between, so a step shows there up to ~2.1 s late; then
# every lease held at the step (1.5 s) has run out, and a bit. A `date` run
# under the same preload and file shows each new offset, and the faked
# process is checked to have libfaketime mapped. Two runs after this
# target's no-fault reference (FL_STEPS steps), in each: the cluster up,
# trainer 0 at step 5, the clock +60, hold, [coord: the kill], the clock
# -60, hold, training to the end.
#
#   coord:  the coordinator is under libfaketime. After the +60 hold,
#           with the clock still 60 s ahead, rank 2's daemon is SIGKILLed:
#           the coordinator must remove it within the lease (--lease_ms,
#           1.5 s) plus CS_MARGIN_S, measured on the test's clock from the
#           kill to the MEMBER_REMOVED line showing up (polled every 10 ms);
#           a replacement recovers the shard, all ranks get ready, and only
#           then the clock steps back to -60. (The kill comes after the
#           forward step: a lease timed on the wall clock either evicts
#           everyone at that step or, if every member renewed first, is
#           never checked again in time. At -60 every wait libfaketime
#           skews returns at once, see below: detection there proves less.)
#   daemon: rank 1's daemon is under libfaketime (no kill).
#
# What libfaketime cannot fake is the kernel's CLOCK_REALTIME: a wait the
# process hands the kernel as an absolute wall-clock time (the timed waits
# of Debian's abseil Mutex, CondVar and Notification, which gRPC's pollers
# and timer thread use too) would be off by the whole offset for as long
# as it holds: at +60 each sleeps 60 s too long, at -60 each returns at
# once (gRPC's timer thread then spins on a core). No real step does that:
# both clocks move together and only the waits in flight at the step are
# off, once. With that artifact, 1 in 5 runs had every member evicted at
# +60 (all four daemons' heartbeats stopped reaching the coordinator's
# lease table for a whole lease; not seen since the shim) and two runs at
# once slowed the faked processes past 8x the reference at -60.
# So every faked process also preloads futex_clock_shim (see its comment),
# which moves those kernel deadlines with the faked clock; the test checks
# first, with abseil_wait_probe, that an abseil wait under the faked clock
# is skewed without the shim and lasts its timeout with it. What remains
# tested is what a real step does to our code: leases, deadlines and
# timers we own must not read the wall clock.
#
# Checks in each run, for each hold: no coordinator decision at all (no
# MEMBER_REMOVED, EPOCH_STARTED, EPOCH_STALLED, JOB_FAILED ... lines);
# every daemon reports the same epoch (`shardctl status`) before the step
# and at the end of the hold; no trainer aborted a step; trainer 0 kept
# committing steps. Then fault_lib.sh's common ones: every trainer
# finished, final parameters bit-equal to the no-fault run, commit logs
# consistent.
#
# Synchronisation: on trainer log lines and the coordinator's decision
# lines, each with a deadline. The holds are the one timed wait: they are
# what is tested (nothing may happen for a lease with the clock stepped);
# a decision seen during a hold ends it at once.
#
# Knobs (environment): CLOCK_STEP_FORWARD and CLOCK_STEP_BACK (default +60
# and -60) are the two offsets written, CLOCK_STEP_START (default +0) the
# one the processes start with. "+0" for all three is the control run in
# which the clock does not step; the same value for all three is a clock
# that is off by that much from the start but never steps.
# CLOCK_STEP_STEPS (default 300) is FL_STEPS, for a machine that trains
# faster.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
# Enough steps that training spans both holds, the kill and the recovery
# (about 13 s); checked before each step of the clock. 300 at first
# (0.05-0.13 s a step on 2 cores with TCP collectives); a reference run
# faster than CS_MIN_RUN_S (the shared-memory transport on a quiet
# machine: about 0.02 s a step) is redone with proportionally more steps,
# unless CLOCK_STEP_STEPS fixes the count.
FL_STEPS=${CLOCK_STEP_STEPS:-300}
FL_DEADLINE=120
CS_MIN_RUN_S=25
fl_init "$@"

CS_START=${CLOCK_STEP_START:-+0}
CS_FORWARD=${CLOCK_STEP_FORWARD:-+60}
CS_BACK=${CLOCK_STEP_BACK:--60}
CS_LEASE_S=1.5  # the coordinator's --lease_ms default
CS_HOLD_S=4     # each offset is held this long: abseil's lag + a lease
CS_MARGIN_S=1.0 # detection: lease + a tick (lease/4) + polling and load
KILL=2          # the rank killed after the steps in the coord run
FAKED=1         # the rank whose daemon is faked in the daemon run
# Decision lines of the coordinator: "<time> coordinator: epoch N KIND: ..."
CS_DECISION='coordinator: epoch [0-9]+ [A-Z_]+:'

# The preload library: where the Debian package put it, else the usual
# multiarch folders. Missing is a failure: scripts/install-deps installs it.
CS_LIB=$(dpkg -L libfaketime 2>/dev/null | grep -m1 '/libfaketime\.so\.1$')
if [[ -z "$CS_LIB" || ! -r "$CS_LIB" ]]; then
  CS_LIB=""
  for f in /usr/lib/*/faketime/libfaketime.so.1 \
    /usr/lib/faketime/libfaketime.so.1 \
    /usr/local/lib/faketime/libfaketime.so.1; do
    if [[ -r "$f" ]]; then
      CS_LIB=$f
      break
    fi
  done
fi
[[ -n "$CS_LIB" ]] ||
  fl_die "libfaketime.so.1 not found (Debian package faketime): run scripts/install-deps"
echo "libfaketime: $CS_LIB"
# The shim and the probe follow the five binaries (BUILD's _EXTRA); the
# shim's path absolute, as the preload is read in other directories.
[[ -r "${6:-}" && -x "${7:-}" ]] ||
  fl_die "usage: $0 COORDINATOR SHARDD TRAINER COMMIT_LOG_CHECK SHARDCTL SHIM PROBE"
CS_SHIM=$(realpath "$6")
CS_PROBE=$7

# cs_env FILE: the environment that puts a process's wall clock under FILE.
cs_env() {
  CS_ENV=(LD_PRELOAD="$CS_LIB:$CS_SHIM" FAKETIME_TIMESTAMP_FILE="$1"
    FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1)
}

# cs_set RUN FILE OFFSET: the faked wall clock becomes real time + OFFSET;
# checked with `date` under the same preload and file.
cs_set() {
  echo "$3" >"$2.new" && mv -f "$2.new" "$2"
  local faked real offset
  cs_env "$2"
  faked=$(env "${CS_ENV[@]}" date +%s.%N)
  real=$(fl_now)
  offset=$(fl_sub "$faked" "$real")
  fl_expect "$1: the faked wall clock reads real time $3 s (date: $offset s)" \
    "awk -v d='$offset' -v w='$3' 'BEGIN { e = d - w; exit !(e > -2 && e < 2) }'"
}

# cs_decisions RUN: how many decision lines the coordinator logged so far.
cs_decisions() { cat "$FL_ROOT/$1"/coord-*.log | grep -Ec "$CS_DECISION"; }

# cs_epochs RUN: every daemon's epoch by `shardctl status`, "E0 E1 E2 E3".
cs_epochs() {
  local r e out=()
  for ((r = 0; r < FL_W; r++)); do
    e=$("$FL_SHARDCTL" --socket="$FL_ROOT/$1/s$r.sock" status 2>/dev/null |
      awk '$1 == "epoch" { print $2 }')
    out+=("${e:-?}")
  done
  echo "${out[*]}"
}

# cs_wait_more FILE EXTENDED_REGEX N SECONDS: until more than N lines of
# FILE match.
cs_wait_more() {
  local end=$((SECONDS + $4))
  until (($(grep -Ec "$2" "$1") > $3)); do
    ((SECONDS > end)) && return 1
    sleep 0.01  # poll interval
  done
}

# cs_aborts RUN: how many steps the trainers aborted so far.
cs_aborts() { cat "$FL_ROOT/$1"/t*-*.log | grep -Ec '^step [0-9]+ aborted'; }

# cs_hold RUN SECONDS: watches the coordinator for SECONDS; returns 1 at
# the first decision line logged meanwhile (or if trainer 0 exited).
cs_hold() {
  local n0 end
  n0=$(cs_decisions "$1")
  end=$(awk -v t="$(fl_now)" -v s="$2" 'BEGIN { printf "%.3f", t + s }')
  while awk -v t="$(fl_now)" -v e="$end" 'BEGIN { exit !(t < e) }'; do
    (($(cs_decisions "$1") == n0)) || return 1
    fl_exited "${FL_TRAINER_PID[0]}" && return 1
    sleep 0.01  # poll interval
  done
  (($(cs_decisions "$1") == n0))
}

# cs_start RUN WHO: starts the cluster (WHO, "coordinator" or a rank, is
# the faked process) and waits for trainer 0's step 5.
cs_start() {
  local run=$1 who=$2 pid
  fl_start_cluster "$run"
  pid=$FL_COORD_PID
  [[ $who == coordinator ]] || pid=${FL_DAEMON_PID[$who]}
  fl_expect "$run: the faked process ($who, pid $pid) has libfaketime loaded" \
    "grep -q '/libfaketime' /proc/$pid/maps"
  fl_expect "$run: ... and futex_clock_shim" \
    "grep -q '/libfutex_clock_shim\.so' /proc/$pid/maps"
  fl_wait_line "$FL_ROOT/$run/coord-1.log" \
    "EPOCH_READY: epoch [0-9]+ ready: all $FL_W members" 30 ||
    fl_die "$run: the cluster did not get ready within 30 s"
  fl_wait_line "$(fl_trainer_log "$run" 0)" "^step 5 " 60 ||
    fl_die "$run: trainer 0 did not commit step 5 within 60 s"
}

# cs_phase RUN FILE OFFSET: steps the faked clock to OFFSET while training
# runs, holds it CS_HOLD_S s and checks that nothing happened meanwhile.
cs_phase() {
  local run=$1 file=$2 off=$3 epochs0 epochs1 decisions0 aborts0 s0 s1 held
  fl_exited "${FL_TRAINER_PID[0]}" &&
    fl_die "$run: training ended before the clock went to $off s: raise CLOCK_STEP_STEPS"
  epochs0=$(cs_epochs "$run")
  decisions0=$(cs_decisions "$run")
  aborts0=$(cs_aborts "$run")
  s0=$(fl_last_step "$(fl_trainer_log "$run" 0)")
  cs_set "$run" "$file" "$off"
  cs_hold "$run" "$CS_HOLD_S"
  held=$?
  s1=$(fl_last_step "$(fl_trainer_log "$run" 0)")
  epochs1=$(cs_epochs "$run")
  fl_log "$run: clock $off s at step $s0, held to step $s1;" \
    "epochs ($(tr ' ' , <<<"$epochs0")) -> ($(tr ' ' , <<<"$epochs1"))"
  fl_expect "$run: no coordinator decision while the clock read $off s" \
    "[[ $held -eq 0 ]]"
  if [[ $held -ne 0 ]]; then
    cat "$FL_ROOT/$run"/coord-*.log | grep -E "$CS_DECISION" |
      tail -n +"$((decisions0 + 1))" | head -12 | cut -c1-220
  fi
  fl_expect "$run: ... no member removed" \
    "! cat '$FL_ROOT/$run'/coord-*.log | grep -E '$CS_DECISION' |
       tail -n +$((decisions0 + 1)) | grep -q MEMBER_REMOVED"
  fl_expect "$run: ... every daemon kept epoch ${epochs0%% *} ($epochs0 -> $epochs1)" \
    "[[ '$epochs0' == '$epochs1' && ! '$epochs0' =~ [?] ]] &&
     [[ \$(tr ' ' '\n' <<<'$epochs1' | sort -u | wc -l) -eq 1 ]]"
  fl_expect "$run: ... no trainer aborted a step" \
    "[[ \$(cs_aborts '$run') -eq $aborts0 ]]"
  fl_expect "$run: ... trainer 0 kept committing steps ($s0..$s1)" \
    "[[ $s1 -gt $s0 ]] && ! fl_exited ${FL_TRAINER_PID[0]}"
}

# cs_probe OFFSET PRELOAD: how many (monotonic) ms a 300 ms abseil wait
# takes with the faked clock at OFFSET and LD_PRELOAD=PRELOAD.
cs_probe() {
  local file="$FL_ROOT/probe-clock"
  echo "$1" >"$file"
  env LD_PRELOAD="$2" FAKETIME_TIMESTAMP_FILE="$file" FAKETIME_NO_CACHE=1 \
    FAKETIME_DONT_FAKE_MONOTONIC=1 timeout 120 "$CS_PROBE" 300
}
# The fault model: abseil's timed waits are skewed by libfaketime alone
# (60 s behind: the wait returns at once; 60 s ahead it would sleep a
# minute more, not waited for here) and keep their timeout with the shim.
ms=$(cs_probe -60 "$CS_LIB")
fl_expect "probe: a 300 ms abseil wait with the clock 60 s behind, libfaketime alone, returns early ($ms ms)" \
  "[[ '$ms' =~ ^[0-9]+$ ]] && ((ms < 100))"
for off in -60 +60; do
  ms=$(cs_probe "$off" "$CS_LIB:$CS_SHIM")
  fl_expect "probe: ... with the shim, at $off s, it lasts its 300 ms ($ms ms)" \
    "[[ '$ms' =~ ^[0-9]+$ ]] && ((ms >= 250 && ms < 30000))"
done

t_ref=$(fl_now)
fl_reference
ref_s=$(fl_sub "$(fl_now)" "$t_ref")
if [[ -z ${CLOCK_STEP_STEPS:-} ]] &&
  awk -v t="$ref_s" -v m="$CS_MIN_RUN_S" 'BEGIN { exit !(t < m) }'; then
  FL_STEPS=$(awk -v t="$ref_s" -v m="$CS_MIN_RUN_S" -v n="$FL_STEPS" \
    'BEGIN { s = int(n * m / (t > 0.1 ? t : 0.1)) + 1; print (s > 5000 ? 5000 : s) }')
  fl_log "the reference trained in $ref_s s: again with $FL_STEPS steps"
  rm -rf "$FL_ROOT/ref"
  t_ref=$(fl_now)
  fl_reference
  ref_s=$(fl_sub "$(fl_now)" "$t_ref")
fi
# The runs with clock steps train the reference's steps on a machine whose
# load changes from minute to minute: each trainer gets 8x the reference's
# time, at least 120 s. The deadline only guards against a hang (the
# checks are on the results). With the shim each faked run takes about as
# long as the reference (1.0-1.2x, six runs two at a time on the 2-core
# VM); without it, libfaketime's skewed waits made them 2.9-5.6x alone and
# ran a 4x budget out under CI's parallel tests.
FL_DEADLINE=$(awk -v t="$ref_s" -v d="$FL_DEADLINE" \
  'BEGIN { s = int(8 * t) + 1; print (s > d ? s : d) }')
fl_log "the reference trained $FL_STEPS steps in $ref_s s: trainers get $FL_DEADLINE s"

# --- The coordinator's wall clock steps forward; a daemon dies; the clock
# steps back.
run=coord
mkdir -p "$FL_ROOT/$run"
file="$FL_ROOT/$run/clock"
coord="$FL_ROOT/$run/coord-1.log"
cs_set "$run" "$file" "$CS_START"
FL_COORD_ENV=("${CS_ENV[@]}")
cs_start "$run" coordinator
cs_phase "$run" "$file" "$CS_FORWARD"

at=$(fl_last_step "$(fl_trainer_log "$run" 0)")
removed0=$(grep -c "MEMBER_REMOVED: rank $KILL " "$coord")
ready0=$(grep -Ec "EPOCH_READY: .* all $FL_W members" "$coord")
alive=1
if fl_exited "${FL_DAEMON_PID[$KILL]}"; then
  fl_expect "$run: daemon $KILL was still alive before the kill" false
  alive=0
fi
t_kill=$(fl_now)
kill -9 "${FL_DAEMON_PID[$KILL]}" 2>/dev/null
if ((alive)) && cs_wait_more "$coord" "MEMBER_REMOVED: rank $KILL " "$removed0" 10; then
  t_seen=$(fl_now)
  took=$(fl_sub "$t_seen" "$t_kill")
  line=$(grep "MEMBER_REMOVED: rank $KILL " "$coord" | tail -1)
  fl_log "$run: daemon $KILL killed at step $at; removed after $took s:" \
    "$(cut -c1-200 <<<"${line#* }")"
  echo "($run: the coordinator stamped that line" \
    "$(fl_sub "$(fl_coord_time "$line")" "$t_seen") s from real time)"
  fl_expect "$run: the killed rank $KILL was removed within the lease ($CS_LEASE_S s) + $CS_MARGIN_S s: $took s" \
    "awk -v t='$took' -v l='$CS_LEASE_S' -v m='$CS_MARGIN_S' 'BEGIN { exit !(t <= l + m) }'"
else
  fl_expect "$run: the coordinator removed the killed rank $KILL within 10 s" false
fi
fl_wait_exit "${FL_DAEMON_PID[$KILL]}" 10 || fl_die "daemon $KILL survived SIGKILL"
fl_start_daemon "$run" $KILL
fl_expect "$run: the replacement of rank $KILL recovered its shard" \
  "fl_wait_line '$(fl_daemon_log "$run" $KILL)' '^shardd rank $KILL recovered shard' 30"
fl_expect "$run: ... and all $FL_W ranks were ready again" \
  "cs_wait_more '$coord' 'EPOCH_READY: .* all $FL_W members' $ready0 30"
cs_phase "$run" "$file" "$CS_BACK"
fl_wait_trainers "$run"
fl_check_run "$run" "$FL_REF"
fl_expect "$run: only the killed rank $KILL was ever removed" \
  "! grep -E 'MEMBER_REMOVED: rank [0-9]+ ' '$coord' | grep -vq 'MEMBER_REMOVED: rank $KILL '"
fl_kill_all
FL_COORD_ENV=()

# --- Rank FAKED's daemon's wall clock steps forward, then back.
run=daemon
mkdir -p "$FL_ROOT/$run"
file="$FL_ROOT/$run/clock"
cs_set "$run" "$file" "$CS_START"
FL_DAEMON_ENV=("${CS_ENV[@]}")
FL_DAEMON_ENV_RANK=$FAKED
cs_start "$run" $FAKED
cs_phase "$run" "$file" "$CS_FORWARD"
cs_phase "$run" "$file" "$CS_BACK"
fl_wait_trainers "$run"
fl_check_run "$run" "$FL_REF"
fl_expect "$run: no member was ever removed" \
  "! grep -q 'MEMBER_REMOVED' '$FL_ROOT/$run/coord-1.log'"
fl_finish
