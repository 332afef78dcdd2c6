#!/usr/bin/env bash
# State import (issue #18): resume a stopped job from its sharded
# checkpoints, at the same and at other W and F, and load our FULL export
# into a new job.
#
# 1. ref: the uninterrupted run, W = 4, F = 2, 12 steps.
# 2. first: the same job stopped after step 7 (checkpoints every 3 steps:
#    3 and 6); every daemon and the coordinator are SIGKILLed.
# 3. resumed: a new cluster (new coordinator, new daemons) with
#    --resume_from=the checkpoint folder: the trainers register at step 6
#    and train to 12; the final parameters equal the reference's bit for
#    bit, and commit_log_check --first_step=6 finds the logs consistent.
# 4. At W = 4, F = 2, at W = 2, F = 2 and at W = 8, F = 4, a new cluster
#    resumes from the same folder without stepping and exports its state
#    (FULL, with AdamW state): every tensor, parameters and moments, equals
#    the W = 4 export bit for bit (only the world_size/sharding_factor
#    metadata differ): each daemon read the ranges it now owns from the
#    files that hold them.
# 5. loaded: a new job whose trainers name that FULL export (step 6, AdamW
#    state) in RegisterModelRequest.load_from trains to 12 and ends
#    bit-equal to the reference.
# 6. A file written by standard-library Python as torch / Hugging Face
#    write a state_dict (F32, BF16, F16) loaded by name: the parameters
#    are its values.
# 7. A load_from naming a truncated file fails registration with DATA_LOSS
#    (the trainer exits 1: not the job's terminal DATA_LOSS)
#    naming the file.
set -uo pipefail
# shellcheck source=fault_lib.sh source-path=SCRIPTDIR
source "$(dirname "$0")/fault_lib.sh"
COMPARE="$(dirname "$0")/compare_safetensors.py"
fl_init "$@"
[[ -n "$FL_SHARDCTL" ]] || fl_die "usage: ... SHARDCTL"
FL_DEADLINE=90
fl_reference

CKPT="$FL_ROOT/ckpt"
fl_checkpointed_job first "$CKPT"
fl_expect "first: rank 3 holds checkpoints of steps 3 and 6" \
  "[[ -s '$CKPT/rank-3/step-6.shardckpt' && -s '$CKPT/rank-3/step-3.shardckpt' ]]"

FL_STEPS=12
FL_DAEMON_FLAGS=(--resume_from="$CKPT")
fl_start_cluster resumed
fl_wait_trainers resumed
for ((r = 0; r < FL_W; r++)); do
  fl_expect "resumed: trainer $r registered at step 6 and exited 0" \
    "[[ ${FL_TRAINER_RC[$r]} -eq 0 ]] &&
     grep -q 'committed step 6\$' '$(fl_trainer_log resumed "$r")' &&
     grep -q '^final loss .* steps 12' '$(fl_trainer_log resumed "$r")'"
done
fl_expect "resumed: final parameters equal the uninterrupted run's bit for bit" \
  "cmp '$FL_REF' '$FL_ROOT/resumed/params.bin'"
# Each rank's commit log: restored at 6 with the shard checksum the first
# job logged when it committed step 6, then steps 7..12 once each.
want='checkpoint_restored step=6 commit step=7 commit step=8 commit step=9'
want+=' commit step=10 commit step=11 commit step=12'
for ((r = 0; r < FL_W; r++)); do
  saved=$(grep '^commit step=6 ' "$FL_ROOT/first/commit-$r-1.log" |
    grep -o 'crc32c=0x[0-9a-f]*')
  restored=$(grep '^checkpoint_restored step=6 ' \
    "$FL_ROOT/resumed/commit-$r-1.log" | grep -o 'crc32c=0x[0-9a-f]*')
  got=$(awk '$1 != "final" { print $1, $2 }' \
    "$FL_ROOT/resumed/commit-$r-1.log" | paste -sd' ')
  fl_expect "resumed: rank $r restored step 6 with the first job's $saved and committed 7..12 once" \
    "[[ -n '$saved' && '$saved' == '$restored' && '$got' == '$want' ]]"
done
out=$("$FL_CHECK" --world_size="$FL_W" --sharding_factor="$FL_F" \
  --first_step=6 --final_step=12 "$FL_ROOT"/resumed/commit-*.log 2>&1)
rc=$?
echo "$out" | head -5
fl_expect "resumed: commit logs consistent from step 6 (replicas agree)" \
  "[[ $rc -eq 0 ]]"
fl_kill_all

# resume_export RUN W F STRATEGY: a cluster resumed from $CKPT that does not
# step, then a FULL export with optimizer state to $FL_ROOT/RUN.safetensors.
resume_export() {
  local run=$1 r
  FL_W=$2 FL_F=$3 FL_STRATEGY=$4 FL_STEPS=6
  fl_start_cluster "$run"
  fl_wait_trainers "$run"
  local pids=()
  # Every rank's shardctl at once, as on W nodes (FULL is collective).
  for ((r = 0; r < FL_W; r++)); do
    "$FL_SHARDCTL" --socket="$FL_ROOT/$run/s$r.sock" export \
      --path="$FL_ROOT/$run.safetensors" --layout=full --optimizer_state \
      --other_ranks_join >"$FL_ROOT/$run/export-$r.log" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [[ -n "${5:-}" ]]; then
    pids=()
    for ((r = 0; r < FL_W; r++)); do
      "$FL_SHARDCTL" --socket="$FL_ROOT/$run/s$r.sock" export \
        --path="$FL_ROOT/$run-sharded" --layout=sharded --optimizer_state \
        >>"$FL_ROOT/$run/export-$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
  fi
  fl_expect "$run: trainers at step 6 exited 0 and the export succeeded" \
    "[[ $rc -eq 0 && -s '$FL_ROOT/$run.safetensors' ]] &&
     grep -q 'exported step 6' '$FL_ROOT/$run/export-0.log'"
  fl_kill_all
}
resume_export w4f2 4 2 HYBRID_SHARD
resume_export w2f2 2 2 FULL_SHARD
resume_export w8f4 8 4 HYBRID_SHARD sharded
for run in w2f2 w8f4; do
  fl_expect "$run: parameters and AdamW state equal the W = 4, F = 2 load's" \
    "/usr/bin/python3 '$COMPARE' '$FL_ROOT/w4f2.safetensors' \
       '$FL_ROOT/$run.safetensors' --ignore-metadata world_size sharding_factor"
done
/usr/bin/python3 "$COMPARE" "$FL_ROOT/w4f2.safetensors" \
  "$FL_ROOT/w2f2.safetensors" --ignore-metadata world_size sharding_factor

# load_run RUN SOURCE: a new W = 4, F = 2 job whose trainers name SOURCE in
# load_from (step 6 with AdamW state) trains to step 12: bit-equal to the
# uninterrupted run.
load_run() {
  local run=$1 source=$2 r
  FL_W=4 FL_F=2 FL_STRATEGY=HYBRID_SHARD FL_STEPS=12 FL_DAEMON_FLAGS=()
  fl_start_coordinator "$run"
  for ((r = 0; r < FL_W; r++)); do fl_start_daemon "$run" "$r"; done
  for ((r = 0; r < FL_W; r++)); do
    fl_wait_started "${FL_DAEMON_PID[$r]}" "$(fl_daemon_log "$run" "$r")" \
      "^shardd rank $r listening" 30 || fl_die "$run: daemon $r did not join"
    fl_start_trainer "$run" "$r" --load_from="$source"
  done
  fl_wait_trainers "$run"
  for ((r = 0; r < FL_W; r++)); do
    fl_expect "$run: trainer $r registered at step 6 and finished" \
      "[[ ${FL_TRAINER_RC[$r]} -eq 0 ]] &&
       grep -q 'committed step 6\$' '$(fl_trainer_log "$run" "$r")'"
  done
  fl_expect "$run: final parameters equal the uninterrupted run's bit for bit" \
    "cmp '$FL_REF' '$FL_ROOT/$run/params.bin'"
  fl_kill_all
}
# Our FULL export (written at W = 4), and our SHARDED export written at
# W = 8, F = 4 (each daemon reads its range from two files).
load_run loaded "$FL_ROOT/w4f2.safetensors"
load_run loaded_sharded "$FL_ROOT/w8f4-sharded"

# A file written the way torch / Hugging Face write a state_dict
# (standard-library Python; F32, BF16 and F16 tensors), loaded by name
# into a new W = 2 job: the parameters are its values.
/usr/bin/python3 "$(dirname "$0")/write_torch_style.py" \
  "$FL_ROOT/torch.safetensors" "$FL_ROOT/torch-params.bin"
FL_W=2 FL_F=2 FL_STRATEGY=FULL_SHARD FL_STEPS=0
fl_start_coordinator torch
for ((r = 0; r < FL_W; r++)); do fl_start_daemon torch "$r"; done
for ((r = 0; r < FL_W; r++)); do
  fl_wait_started "${FL_DAEMON_PID[$r]}" "$(fl_daemon_log torch "$r")" \
    "^shardd rank $r listening" 30 || fl_die "torch: daemon $r did not join"
  fl_start_trainer torch "$r" --load_from="$FL_ROOT/torch.safetensors"
done
fl_wait_trainers torch
fl_expect "torch: the job's parameters are the file's values" \
  "[[ ${FL_TRAINER_RC[0]} -eq 0 && ${FL_TRAINER_RC[1]} -eq 0 ]] &&
   cmp '$FL_ROOT/torch-params.bin' '$FL_ROOT/torch/params.bin'"
fl_kill_all

# A truncated file: DATA_LOSS naming it, and no registration.
head -c 1000 "$FL_ROOT/w4f2.safetensors" >"$FL_ROOT/cut.safetensors"
FL_W=2 FL_F=2 FL_STRATEGY=FULL_SHARD
fl_start_coordinator cut
for ((r = 0; r < FL_W; r++)); do fl_start_daemon cut "$r"; done
for ((r = 0; r < FL_W; r++)); do
  fl_wait_started "${FL_DAEMON_PID[$r]}" "$(fl_daemon_log cut "$r")" \
    "^shardd rank $r listening" 30 || fl_die "cut: daemon $r did not join"
  fl_start_trainer cut "$r" --load_from="$FL_ROOT/cut.safetensors"
done
fl_wait_trainers cut
for ((r = 0; r < FL_W; r++)); do
  # DATA_LOSS of the input, not of the job: exit 1 with the code, never
  # the job-failed exit 3 (the daemon marks only that DATA_LOSS).
  fl_expect "cut: trainer $r's registration fails naming the truncated file (exit 1, not 3)" \
    "[[ ${FL_TRAINER_RC[$r]} -eq 1 ]] &&
     grep -q 'DATA_LOSS: .*$FL_ROOT/cut.safetensors: truncated' '$(fl_trainer_log cut "$r")'"
done
fl_expect "cut: the daemons registered no model" \
  "! grep -q 'registered rank' '$(fl_trainer_log cut 0)'"
fl_finish
