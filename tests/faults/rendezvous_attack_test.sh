#!/usr/bin/env bash
# Attack test (issue #29): a process that never joined forges the
# rendezvous while the job forms and trains.
#
# Right after the coordinator starts, before any daemon joins, the
# rendezvous_attacker starts against its port and, round after round until
# the trainers are done, writes "evil" into every key the ranks exchange in
# the current epoch (each rank's model spec, Gloo addresses of the shard and
# replica groups, NCCL unique ids), into keys no rank owns (attacker/probe,
# shard/0/0, the old epoch/<E>/... shapes), with no lease token and with
# made-up ones; reads and waits for those keys; and repeats each live
# member's Join (public identity and incarnation) to get its lease token.
# Checks: fault_lib.sh's common ones (every trainer finished, the final
# parameters equal the run without the attacker bit for bit, commit logs
# consistent, no stalled or failed job), and that the attacker made
# hundreds of attempts and every one was refused with UNAUTHENTICATED
# (rendezvous) or PERMISSION_DENIED (Join), nothing accepted.
set -uo pipefail
# Enough steps that the attack spans many rounds however fast the job
# trains: at fault_lib's 12 steps a run once trained in 0.39 s, the
# attacker (~150 attempts a round) got 3 rounds in and fell short of the
# 500-attempt check below. 120 steps: 3-4 s here.
FL_STEPS=${FL_STEPS:-120}
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
ATTACKER=${6:?usage: $0 COORDINATOR SHARDD TRAINER COMMIT_LOG_CHECK SHARDCTL ATTACKER}
fl_init "${@:1:5}"
fl_reference

# The coordinator of the attacked run, then the attacker at once.
# shellcheck disable=SC2317  # called through FL_START_COORDINATOR
start_coordinator_and_attacker() {
  fl_start_coordinator "$@"
  "$ATTACKER" --coordinator=127.0.0.1:"$FL_PORT" \
    >"$FL_ROOT/$1/attacker.log" 2>&1 &
  ATTACKER_PID=$!
  fl_pids+=($!)
}
FL_START_COORDINATOR=start_coordinator_and_attacker
fl_start_cluster run
FL_START_COORDINATOR=fl_start_coordinator
fl_wait_trainers run
kill -TERM "$ATTACKER_PID"
fl_wait_exit "$ATTACKER_PID" 30 || fl_die "the attacker did not stop within 30 s"
log="$FL_ROOT/run/attacker.log"
echo "attacker (exit $FL_RC):"
grep -E '^(refused|epochs|summary|ACCEPTED)' "$log" | head -40

fl_check_run run "$FL_REF"
fl_expect "the attacker ran and exited cleanly" "[[ $FL_RC -eq 0 ]]"
attempts=$(sed -nE 's/^summary .*attempts=([0-9]+).*/\1/p' "$log")
fl_expect "the attacker made hundreds of attempts (${attempts:-0})" \
  "[[ ${attempts:-0} -ge 500 ]]"
fl_expect "no forged write, read or join was accepted" \
  "grep -q '^summary .* accepted=0\$' '$log' && ! grep -q '^ACCEPTED' '$log'"
trained=$(cat "$FL_ROOT"/run/coord-*.log |
  sed -nE 's/.*EPOCH_READY: epoch ([0-9]+) ready.*/\1/p' | tail -1)
fl_expect "the attacker attacked the epoch the job trained in (${trained:-?})" \
  "[[ -n '$trained' ]] && grep -Eq '^epochs( [0-9]+)* $trained( |\$)' '$log'"
fl_expect "every forged rendezvous call was refused UNAUTHENTICATED" \
  "! grep -E '^refused Rendezvous' '$log' | grep -qv 'code=UNAUTHENTICATED'"
fl_expect "forged writes were refused in every RPC of the store" \
  "grep -q '^refused RendezvousSet code=UNAUTHENTICATED' '$log' &&
   grep -q '^refused RendezvousGet code=UNAUTHENTICATED' '$log' &&
   grep -q '^refused RendezvousWait code=UNAUTHENTICATED' '$log'"
fl_expect "every repeated Join of a live member was refused PERMISSION_DENIED" \
  "grep -q '^refused Join code=PERMISSION_DENIED' '$log' &&
   ! grep -E '^refused Join' '$log' | grep -qv 'code=PERMISSION_DENIED'"
fl_expect "the coordinator logged no join of the attacker's" \
  "! cat '$FL_ROOT'/run/coord-*.log | grep -q 'replaced by a new incarnation'"
fl_finish
