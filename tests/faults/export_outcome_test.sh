#!/usr/bin/env bash
# Fault test: every rank of a FULL export ends with the same outcome when
# the export is interrupted (W = 4, F = 2; `shardctl export --sockets` on
# every rank's daemon after training; daemon 0, the writer, sleeps 3 s at
# the fail point export.mid after the first unit so that the fault lands
# mid-export).
#
# 1. coordinator: the coordinator is SIGKILLed and restarted on its port
#    mid-export. The daemons re-join, a new epoch supersedes the old
#    communicators: the writer's shard group (ranks 0, 1) fails its
#    gathers, and ranks 2 and 3, whose own gathers finished, cannot learn
#    rank 0's outcome from the dead epoch. Every rank must report a failure
#    and no file is left; before, ranks 2 and 3 could report "exported".
#    The export run again then succeeds on every rank. Before, it failed
#    on every rank: the writer, waking from the fail point after the new
#    epoch was installed, ran its next gather of the dead export on the new
#    epoch's communicators, where no peer was; the gather timed out and
#    broke them (StepEngine::GatherStateInto now refuses a later epoch's
#    communicators, StateExport passes the ones it began with).
# (A writer that cannot write, a full disk: //daemon/node:state_export_test
# FailedWriteLeavesNoFileAndPeersFinish, where the peer reports rank 0's
# error.)
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
fl_init "$@"
[[ -n "$FL_SHARDCTL" ]] || fl_die "usage: ... SHARDCTL"

# export_all RUN N PATH: shardctl export on every rank's daemon; its
# output (stdout and stderr) in RUN/export-N.out.
export_all() {
  local d="$FL_ROOT/$1" r socks=""
  for r in 0 1 2 3; do socks+="$d/s$r.sock,"; done
  "$FL_SHARDCTL" --sockets="${socks%,}" export --path="$3" \
    --overwrite --deadline=60s >"$d/export-$2.out" 2>&1
}

# same_outcome RUN N WHAT: the N-th export's four ranks all failed (WHAT =
# failed) or all exported (WHAT = exported).
same_outcome() {
  local out="$FL_ROOT/$1/export-$2.out" want=$3 ok failed
  ok=$(grep -c 'exported step' "$out")
  failed=$(grep -c '(rank [0-3]): ' "$out")
  failed=$((failed - ok))
  if [[ $want == exported ]]; then
    fl_expect "$1: export $2: every rank exported" "[[ $ok -eq 4 && $failed -eq 0 ]]" ||
      cat "$out"
  else
    fl_expect "$1: export $2: every rank reported a failure, none exported" \
      "[[ $ok -eq 0 && $failed -eq 4 ]]" || cat "$out"
  fi
}

FL_DAEMON_FLAGS=(--collective_timeout_ms=5000)
run=coordinator
FL_DAEMON_ENV_RANK=0 FL_DAEMON_ENV=(SHARDD_FAILPOINT=export.mid:sleep=3000)
fl_start_cluster "$run"
fl_wait_trainers "$run"
export_all "$run" 1 "$FL_ROOT/$run/out.safetensors" &
exporter=$!
fl_wait_line "$(fl_daemon_log "$run" 0)" '^failpoint export.mid' 30 ||
  fl_die "$run: the writer did not reach export.mid within 30 s"
kill -9 "$FL_COORD_PID"
fl_wait_exit "$FL_COORD_PID" 10 || fl_die "$run: the coordinator survived SIGKILL"
fl_start_coordinator "$run" "$FL_PORT"
wait "$exporter"
same_outcome "$run" 1 failed
fl_expect "$run: no file was left" "[[ ! -e '$FL_ROOT/$run/out.safetensors' ]]"
export_all "$run" 2 "$FL_ROOT/$run/out.safetensors"
same_outcome "$run" 2 exported
fl_expect "$run: the second export wrote the file" \
  "[[ -s '$FL_ROOT/$run/out.safetensors' ]]"
fl_kill_all

fl_finish
