#include "daemon/node/epoch_plan.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/node/plan_action.h"

namespace shardd::node {

bool WantsView(const coordinator::MembershipView& view,
               const EpochCursor& cursor) {
  return view.epoch > cursor.handled &&
         (view.AllLive() || view.epoch > cursor.seen);
}

EpochPlan PlanEpoch(const coordinator::MembershipView& view, int rank,
                    absl::string_view incarnation, const EpochCursor& cursor,
                    const LocalEpochState& local) {
  using Kind = EpochAction::Kind;
  EpochPlan plan;
  plan.next = cursor;
  if (!WantsView(view, cursor)) return plan;
  if (view.epoch > cursor.seen) {
    plan.next.seen = view.epoch;
    plan.actions.emplace_back(Kind::kNoteEpochChanged);
    if (local.comm_epoch < view.epoch) {
      EpochAction supersede(Kind::kSupersedeCommunicators);
      supersede.why =
          absl::StrCat("epoch ", local.comm_epoch, " superseded by ",
                       view.epoch, ": ", view.reason);
      plan.actions.push_back(std::move(supersede));
    }
  }
  if (!view.AllLive()) {
    plan.outcome = EpochPlan::Outcome::kWaitForMembers;
    return plan;
  }
  // Only the process that holds this rank's slot in the epoch builds its
  // communicators: one removed (cut off, or replaced while it hung) still
  // sees the epochs of its successor, and must not publish itself in their
  // rendezvous as that rank.
  plan.next.handled = view.epoch;
  if (!view.HeldBy(rank, std::string(incarnation))) {
    plan.outcome = EpochPlan::Outcome::kNotHeldHere;
    return plan;
  }
  plan.actions.emplace_back(Kind::kAdoptTopology);
  // The coordinator's plan for this epoch, decided from the steps the
  // members hold: a copy from a replica, or a rollback to a checkpoint
  // every rank holds (verified), or nothing to do.
  const PlanAction ordered = PlanActionFor(view.plan, view.epoch, rank);
  if (!ordered.issued) {
    plan.outcome = EpochPlan::Outcome::kWaitForPlan;
    return plan;
  }
  plan.outcome = EpochPlan::Outcome::kAct;
  EpochAction settle(Kind::kSettleInDoubtStep);
  settle.rollback = ordered.rollback;
  settle.step = ordered.step;
  plan.actions.push_back(settle);
  if (ordered.rollback) {
    EpochAction abandon(Kind::kAbandonCheckpointsAbove);
    abandon.step = ordered.step;
    plan.actions.push_back(abandon);
  }
  if (ordered.restore) {
    // Before the communicators: a fresh daemon creates its engine from the
    // checkpoint's model, and peers wait in the rendezvous meanwhile.
    EpochAction restore(Kind::kRestoreCheckpoint);
    restore.step = ordered.step;
    plan.actions.push_back(restore);
  }
  const bool needs_copy = ordered.copy.has_value() && !local.holds_engine;
  plan.copy_refused_holds_engine =
      ordered.copy.has_value() && local.holds_engine;
  EpochAction build(Kind::kBuildCommunicators);
  // A replacement about to copy its shard builds its engine while the
  // communicators form.
  build.prepare_copy = needs_copy && !local.engine_prepared &&
                       ordered.copy->source_ranks_size() > 0;
  plan.actions.push_back(build);
  if (needs_copy) {
    plan.copy = ordered.copy;
    EpochAction copy(Kind::kCopyShard);
    copy.step = ordered.step;
    plan.actions.push_back(copy);
  }
  plan.actions.emplace_back(Kind::kReportReady);
  return plan;
}

absl::string_view EpochActionName(EpochAction::Kind kind) {
  switch (kind) {
    case EpochAction::Kind::kNoteEpochChanged:
      return "note_epoch_changed";
    case EpochAction::Kind::kSupersedeCommunicators:
      return "supersede_communicators";
    case EpochAction::Kind::kAdoptTopology:
      return "adopt_topology";
    case EpochAction::Kind::kSettleInDoubtStep:
      return "settle_in_doubt_step";
    case EpochAction::Kind::kAbandonCheckpointsAbove:
      return "abandon_checkpoints_above";
    case EpochAction::Kind::kRestoreCheckpoint:
      return "restore_checkpoint";
    case EpochAction::Kind::kBuildCommunicators:
      return "build_communicators";
    case EpochAction::Kind::kCopyShard:
      return "copy_shard";
    case EpochAction::Kind::kReportReady:
      return "report_ready";
  }
  return "unknown";
}

}  // namespace shardd::node
