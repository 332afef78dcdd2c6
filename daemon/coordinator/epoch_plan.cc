#include "daemon/coordinator/epoch_plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::coordinator {
namespace {

// "rank 2", "ranks 0, 2", "no rank".
// At most kListed ranks of a list, then how many more: reasons travel in
// every watch update and the decisions log, and at thousands of ranks a
// full list (the slots a forming job waits for, a shard's 500 replicas)
// would make each of them O(W).
constexpr size_t kListed = 8;

std::string RankList(const std::vector<int>& ranks, absl::string_view sep) {
  if (ranks.size() <= kListed) return absl::StrJoin(ranks, sep);
  return absl::StrCat(
      absl::StrJoin(ranks.begin(), ranks.begin() + kListed, sep), sep, "... (",
      ranks.size() - kListed, " more)");
}

std::string Ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      RankList(ranks, ", "));
}

// Why no checkpoint step is held by every rank, naming each rank's part.
std::string WhyNoCheckpoint(const PlanInput& in) {
  std::vector<int> without_dir;
  std::vector<std::string> parts;
  for (const PlanSlot& s : in.slots) {
    if (!s.live) {
      parts.push_back(absl::StrCat("rank ", s.rank, " has no member"));
      continue;
    }
    if (!s.keeps_checkpoints) {
      without_dir.push_back(s.rank);
      continue;
    }
    std::string part =
        absl::StrCat("rank ", s.rank,
                     s.checkpoints.empty()
                         ? std::string(" holds no verified checkpoint")
                         : absl::StrCat(" holds step(s) ",
                                        absl::StrJoin(s.checkpoints, ",")));
    if (!s.checkpoint_problem.empty()) {
      absl::StrAppend(&part, " (", s.checkpoint_problem, ")");
    }
    parts.push_back(std::move(part));
  }
  std::string why;
  if (!without_dir.empty()) {
    why = absl::StrCat(Ranks(without_dir),
                       without_dir.size() == 1 ? " keeps" : " keep",
                       " no checkpoints (no --checkpoint_dir)");
  }
  if (!parts.empty()) {
    absl::StrAppend(&why, why.empty() ? "" : "; ", absl::StrJoin(parts, "; "));
  }
  return absl::StrCat("no checkpoint step is held by every rank: ", why);
}

}  // namespace

std::string CopyReason(const ShardCopy& copy, int64_t step) {
  return absl::StrCat("rank ", copy.target_rank, " copies shard ",
                      copy.shard_index, " at step ", step, " from rank(s) ",
                      RankList(copy.source_ranks, ","));
}

const char* PlanKindName(PlanKind kind) {
  switch (kind) {
    case PlanKind::kWait:
      return "WAIT";
    case PlanKind::kNew:
      return "NEW";
    case PlanKind::kResume:
      return "RESUME";
    case PlanKind::kRollback:
      return "ROLLBACK";
    case PlanKind::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

EpochPlan DecideEpochPlan(const PlanInput& in) {
  const int w = in.world_size;
  const int f = in.sharding_factor;
  EpochPlan plan;
  std::vector<int> unclaimed;
  bool any_live_holder = false;
  bool ever_held = false;
  int64_t target = 0;
  for (const PlanSlot& s : in.slots) {
    if (!s.live) unclaimed.push_back(s.rank);
    if (s.holds_shard) ever_held = true;
    if (!s.live || !s.holds_shard) continue;
    any_live_holder = true;
    target = std::max(target, s.step);
    // An in-doubt step the cluster committed is applied at the next epoch.
    if (s.pending_step == s.step + 1 && in.committed_step >= s.pending_step) {
      target = std::max(target, s.pending_step);
    }
  }
  const bool all_live = unclaimed.empty();
  // Checkpoints on disk mean the job trained before, even when no member
  // holds a shard (every daemon and the coordinator restarted): it resumes
  // from them, it does not start again and overwrite them.
  int64_t newest_checkpoint = 0;
  for (const PlanSlot& s : in.slots) {
    for (const int64_t c : s.checkpoints) {
      newest_checkpoint = std::max(newest_checkpoint, c);
    }
  }
  if (!any_live_holder && !ever_held && in.committed_step == 0 &&
      newest_checkpoint == 0) {
    if (!all_live) {
      plan.reason = absl::StrCat("a new job: waiting for ", Ranks(unclaimed));
      return plan;
    }
    plan.kind = PlanKind::kNew;
    plan.reason = "a new job: no member holds a shard; all start at step 0";
    return plan;
  }
  if (!any_live_holder) {
    // Every holder is gone: the job trained up to at least this step.
    target = in.committed_step;
    for (const PlanSlot& s : in.slots) {
      if (s.holds_shard) target = std::max(target, s.step);
    }
  }
  // A checkpoint is written only after its step committed, and a rollback
  // removes every file above the step it goes back to: a verified
  // checkpoint proves its step (a restarted coordinator may know less).
  target = std::max(target, newest_checkpoint);
  // The step a live holder is at once the epoch starts: an in-doubt step
  // the cluster committed (its commit reached the coordinator or another
  // member) is applied first.
  auto effective = [&](const PlanSlot& s) {
    return s.pending_step == s.step + 1 &&
                   (in.committed_step >= s.pending_step ||
                    target >= s.pending_step)
               ? s.pending_step
               : s.step;
  };
  auto reaches = [target](const PlanSlot& s) {
    return s.live && s.holds_shard &&
           (s.step == target ||
            (s.step + 1 == target && s.pending_step == target));
  };
  std::vector<std::vector<int>> sources(f);
  for (const PlanSlot& s : in.slots) {
    if (reaches(s)) sources[s.rank % f].push_back(s.rank);
  }
  std::vector<int> lost;
  for (int i = 0; i < f; ++i) {
    if (sources[i].empty()) lost.push_back(i);
  }
  // Before any step is committed a shard is its model's initial values:
  // registering the model makes them again, nothing is lost.
  if (target == 0 && in.committed_step == 0) lost.clear();
  // Likewise a saved state the ranks registered at `target` (imported, and
  // nothing trained since: each holder says so): the ranks without it, a
  // replica group slower to import or killed while registering, make it
  // again by registering the same state. Without this a resumed job failed
  // for good when one replica group took longer to import than a
  // collective timeout.
  if (!lost.empty() && in.committed_step <= target) {
    bool all_registered = true;
    bool any = false;
    for (const PlanSlot& s : in.slots) {
      if (!reaches(s)) continue;
      any = true;
      // At the target itself: a holder one step behind with the target in
      // doubt holds a trained step.
      all_registered =
          all_registered && s.registration_state && s.step == target;
    }
    if (any && all_registered) {
      plan.remade_shards = lost;
      lost.clear();
    }
  }

  if (lost.empty()) {
    if (!all_live) {
      plan.reason = absl::StrCat(
          plan.remade_shards.empty()
              ? "every shard has a holder at step "
              : "every shard has a holder or is made again by registering "
                "the model at step ",
          target, "; waiting for ", Ranks(unclaimed));
      return plan;
    }
    plan.kind = PlanKind::kResume;
    plan.step = target;
    std::vector<std::string> copies;
    for (const PlanSlot& s : in.slots) {
      const int index = s.rank % f;
      if (reaches(s) || sources[index].empty()) continue;
      ShardCopy copy{s.rank, index, sources[index]};
      std::rotate(
          copy.source_ranks.begin(),
          copy.source_ranks.begin() + (s.rank / f) % copy.source_ranks.size(),
          copy.source_ranks.end());
      copies.push_back(CopyReason(copy, target));
      plan.copies.push_back(std::move(copy));
    }
    if (!plan.remade_shards.empty()) {
      copies.push_back(absl::StrCat(
          "shard", plan.remade_shards.size() == 1 ? " " : "s ",
          absl::StrJoin(plan.remade_shards, ", "),
          " made again by registering the model (every holder holds the "
          "state it registered)"));
    }
    plan.reason = absl::StrCat(
        "resume at step ", target, ": ",
        copies.empty() ? std::string("every member holds its shard")
        : copies.size() <= kListed
            ? absl::StrJoin(copies, "; ")
            : absl::StrCat(
                  absl::StrJoin(copies.begin(), copies.begin() + kListed, "; "),
                  "; ... (", copies.size() - kListed, " more copies)"));
    return plan;
  }

  // A shard has no holder at the target step: only a checkpoint every rank
  // holds brings the job back.
  plan.lost_shard = lost.front();
  plan.lost_step = target;
  for (const PlanSlot& s : in.slots) {
    if (s.rank % f == plan.lost_shard && (s.holds_shard || s.held_before)) {
      plan.lost_holders.push_back(s.rank);
    }
  }
  // Steps at which a rank could start without the lost shard's holders:
  // its verified checkpoints, and a live holder's own step.
  auto steps_of = [&](const PlanSlot& s) {
    std::set<int64_t> mine;
    for (const int64_t c : s.checkpoints) {
      if (c <= target) mine.insert(c);
    }
    if (s.live && s.holds_shard) {
      // At its step, or past its in-doubt step once it applies it (a
      // rollback to its step has it drop that step instead).
      mine.insert(s.step);
      mine.insert(effective(s));
    }
    return mine;
  };
  auto meet = [](std::optional<std::set<int64_t>>& acc,
                 const std::set<int64_t>& mine) {
    if (!acc.has_value()) {
      acc = mine;
      return;
    }
    std::set<int64_t> both;
    std::set_intersection(acc->begin(), acc->end(), mine.begin(), mine.end(),
                          std::inserter(both, both.begin()));
    acc = std::move(both);
  };
  std::optional<std::set<int64_t>> live_common;
  // With the last inventories of slots whose member is gone: what their
  // replacements (same folder) would most likely report.
  std::optional<std::set<int64_t>> possible;
  bool any_keeps = false;
  for (const PlanSlot& s : in.slots) {
    if (s.live) {
      meet(live_common, steps_of(s));
      meet(possible, steps_of(s));
      any_keeps |= s.keeps_checkpoints;
    } else if (s.reported) {
      meet(possible, steps_of(s));
    }
  }
  const std::set<int64_t> common = live_common.value_or(std::set<int64_t>());
  std::string lost_what = absl::StrCat(
      "shard ", plan.lost_shard, " at step ", target, " is lost: ",
      plan.lost_holders.empty()
          ? std::string("no member holding it has joined")
          : absl::StrCat("it was held by ", Ranks(plan.lost_holders)),
      " and no live member holds it (W/F = ", w / f, ")");
  if (lost.size() > 1) {
    absl::StrAppend(&lost_what, "; shards ", absl::StrJoin(lost, ","),
                    " are lost in all");
  }
  if (all_live && !common.empty()) {
    plan.kind = PlanKind::kRollback;
    plan.step = *common.rbegin();
    for (const PlanSlot& s : in.slots) {
      if (!(s.holds_shard &&
            (s.step == plan.step || effective(s) == plan.step))) {
        plan.restores.push_back(s.rank);
      }
    }
    // A rank at that step already keeps its state (not in restores).
    plan.reason = absl::StrCat(
        lost_what, "; every rank rolls back to its checkpoint of step ",
        plan.step,
        target > plan.step
            ? absl::StrCat(" (steps ", plan.step + 1, "..", target,
                           " are redone)")
            : std::string(" (no step to redo: ranks at it keep their state)"));
    return plan;
  }
  // Unclaimed slots may still be taken by members holding the checkpoint.
  // Once settled, live members that keep none, or no step that the live
  // members and the gone ones' last reports share, leave nothing to wait
  // for; with no live member at all there is nothing to decide from.
  if (!all_live && (!in.settled || !live_common.has_value() ||
                    (any_keeps && !possible->empty()))) {
    plan.reason = absl::StrCat(
        lost_what, "; waiting for ", Ranks(unclaimed),
        common.empty() ? std::string(" (a holder may come back)")
                       : absl::StrCat(" (the live members share step(s) ",
                                      absl::StrJoin(common, ","), ")"));
    return plan;
  }
  plan.kind = PlanKind::kFailed;
  plan.reason = absl::StrCat(lost_what, "; ", WhyNoCheckpoint(in),
                             ": the job cannot continue");
  return plan;
}

}  // namespace shardd::coordinator
