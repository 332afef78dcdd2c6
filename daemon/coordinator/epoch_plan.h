#ifndef SHARDD_DAEMON_COORDINATOR_EPOCH_PLAN_H_
#define SHARDD_DAEMON_COORDINATOR_EPOCH_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

namespace shardd::coordinator {

// What one slot holds, as the plan needs it.
struct PlanSlot {
  int rank = 0;
  // A live member holds the slot (JOINING, RECOVERING or READY).
  bool live = false;
  // The slot's holder (live) or its last holder (not live) held its shard,
  // at `step`.
  bool holds_shard = false;
  int64_t step = 0;
  // An earlier holder of the slot held its shard (only to name the ranks
  // that held a lost shard).
  bool held_before = false;
  // A member of this coordinator held the slot at some time, so the
  // checkpoint fields are its last report (a gone member's replacement
  // finds the same folder).
  bool reported = false;
  // A step the holder prepared and voted on but whose commit decision it
  // never heard (0: none). It applies it at the next epoch when the cluster
  // committed it, so it can reach step + 1 without a copy.
  int64_t pending_step = 0;
  // The member keeps sharded checkpoints (--checkpoint_dir) and these are
  // the steps of its checkpoint files that it verified (every CRC checked),
  // ascending. `checkpoint_problem` says what it found wrong, if anything
  // ("step-6.shardckpt: crc32c mismatch"), for the failure reason.
  bool keeps_checkpoints = false;
  std::vector<int64_t> checkpoints;
  std::string checkpoint_problem;
  // The live holder's shard is exactly what registering the model made at
  // `step` (the initial values, or a saved state RegisterModel imported)
  // and no step was committed on it since: the ranks of a shard without a
  // holder at that step make it again by registering the same model and
  // state (their agreement with the holders checks both).
  bool registration_state = false;
};

struct PlanInput {
  int world_size = 1;       // W
  int sharding_factor = 1;  // F
  // By rank, all W.
  std::vector<PlanSlot> slots;
  // The highest step the coordinator knows committed (commit votes, the
  // members' reports). 0 with no holder anywhere means a job that has not
  // trained yet.
  int64_t committed_step = 0;
  // True when the caller will not wait for more members before deciding a
  // shard lost: every slot is claimed, or long enough has passed since the
  // coordinator started and since the last holder of a shard was removed
  // (a hung holder, or one slow to re-join a restarted coordinator, comes
  // back within that time).
  bool settled = false;
};

enum class PlanKind {
  kWait,      // Not every slot is claimed; nothing is lost yet.
  kNew,       // No member holds a shard: the job starts at step 0.
  kResume,    // Every shard has a holder at `step`: others copy from them.
  kRollback,  // A shard is lost; every member restores checkpoint `step`.
  kFailed,    // A shard is lost and no checkpoint brings every rank back.
};

const char* PlanKindName(PlanKind kind);

// One replacement's copy of its shard (kResume).
struct ShardCopy {
  int target_rank = 0;
  int shard_index = 0;
  // Live members holding the shard at the plan's step, in order of
  // preference (rotated by the target's replica index, so that several
  // replacements spread over the replicas).
  std::vector<int> source_ranks;
};

struct EpochPlan {
  PlanKind kind = PlanKind::kWait;
  // kResume: the step every member is at once the copies are done.
  // kRollback: the checkpoint step every member restores.
  int64_t step = 0;
  std::vector<ShardCopy> copies;
  // kRollback: the ranks that restore (those not already at `step`; a
  // holder at `step` with a later step in doubt drops that step).
  std::vector<int> restores;
  // kFailed: the first lost shard index, the step it was at and the ranks
  // that last held it.
  int lost_shard = -1;
  int64_t lost_step = 0;
  std::vector<int> lost_holders;
  // kResume: shard indices no member holds at `step` that the ranks make
  // again by registering the model (every holder at `step` holds the
  // registration's state): their members report READY without a shard
  // (at step 0) and reach `step` when their trainers register.
  std::vector<int> remade_shards;
  // For the decisions log and, with kFailed, for every client.
  std::string reason;
};

// "rank 1 copies shard 1 at step 5 from rank(s) 3": one copy, as logged
// (at most 8 sources named, then "... (N more)").
std::string CopyReason(const ShardCopy& copy, int64_t step);

// Decides how the members of an epoch reach one common step, from the
// steps they actually hold, whatever order they joined in.
//
// Every shard index i (ranks with rank mod F = i) needs a live holder at
// the target step T, the highest step any live holder is at (or reaches
// by applying an in-doubt step the cluster committed). When every shard
// has one, members without it copy from those holders (kResume). A member
// without a shard never makes the job new while another holds one. When a
// shard has no holder at T, the job can only go back: to the highest
// checkpoint step C that every rank holds verified (or is exactly at), if
// any (kRollback); otherwise it has failed (kFailed): once every slot is
// claimed, or once the input is settled and the live members share no
// checkpoint step (no replacement could change that). Before a step was
// ever committed (T = 0) nothing is lost: a shard at step 0 is its model's
// initial values, which registering the model recreates. Plans that need
// every slot claimed (kNew, kResume, kRollback) are kWait until then.
//
// Pure: a function of its argument only.
EpochPlan DecideEpochPlan(const PlanInput& input);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_EPOCH_PLAN_H_
