#include "daemon/node/step_ledger.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::node {

absl::Status StepLedger::CheckGather(int unit, int64_t max_gathered,
                                     const std::set<int>& releasing) const {
  int64_t held_after = 0;
  for (int u : held_) held_after += releasing.count(u) == 0 ? 1 : 0;
  const bool held = IsHeld(unit) && releasing.count(unit) == 0;
  if (!held && held_after >= max_gathered) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "max_gathered_units (", max_gathered,
        ") units are gathered and not released: [", absl::StrJoin(held_, ", "),
        "]; release one before gathering unit ", unit));
  }
  return absl::OkStatus();
}

absl::Status StepLedger::CheckNotReduced(int unit, int64_t step) const {
  if (reduced_.count(unit) > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("unit ", unit, " was already reduced in step ", step));
  }
  return absl::OkStatus();
}

int StepLedger::NoteReduced(int unit) {
  reduced_.insert(unit);
  const auto it = accumulated_.find(unit);
  const int covered = (it == accumulated_.end() ? 0 : it->second) + 1;
  if (it != accumulated_.end()) accumulated_.erase(it);
  return covered;
}

std::optional<v1::StepResponse> StepLedger::Retried(int64_t step,
                                                    int64_t committed) const {
  if (step != committed || !last_step_.has_value()) return std::nullopt;
  v1::StepResponse again = *last_step_;
  again.set_already_committed(true);
  return again;
}

absl::Status StepLedger::CheckStep(int64_t step, int64_t committed,
                                   int units) const {
  if (step != committed + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step: ", step, " is neither committed_step + 1 (",
                     committed + 1, ") nor committed_step (", committed, ")"));
  }
  if (!held_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("units still gathered: [", absl::StrJoin(held_, ", "),
                     "]; release them before Step"));
  }
  std::vector<int> missing;
  for (int u = 0; u < units; ++u) {
    if (reduced_.count(u) == 0) missing.push_back(u);
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("units not reduced in step ", step, ": [",
                     absl::StrJoin(missing, ", "), "]"));
  }
  return absl::OkStatus();
}

absl::Status StepLedger::EnterAttempt(int64_t epoch) {
  if (attempt_epoch_ == 0) attempt_epoch_ = epoch;
  if (attempt_epoch_ == epoch) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "this step attempt began in epoch ", attempt_epoch_,
      " and the daemon is in epoch ", epoch,
      " now: the old attempt's collectives and reductions are void (the "
      "trainer was in no call when the epoch changed, or went on after an "
      "ABORTED without WaitReady); WaitReady, then redo the step"));
}

void StepLedger::NoteCommitted(const v1::StepResponse& response) {
  reduced_.clear();
  collectives_in_step_ = 0;
  attempt_epoch_ = 0;
  abort_counted_ = false;
  last_step_ = response;
}

bool StepLedger::MarkAbortCounted() {
  if (abort_counted_) return false;
  abort_counted_ = true;
  return true;
}

void StepLedger::ResetForEpoch() {
  reduced_.clear();
  accumulated_.clear();
  collectives_in_step_ = 0;
  abort_counted_ = false;
}

void StepLedger::ResetForEngine() {
  held_.clear();
  reduced_.clear();
  last_step_.reset();
  collectives_in_step_ = 0;
  attempt_epoch_ = 0;
}

std::vector<int> StepLedger::TakeHeld() {
  std::vector<int> held(held_.begin(), held_.end());
  held_.clear();
  return held;
}

bool StepLedger::TakeInStep() {
  const bool in_step = collectives_in_step_ > 0;
  collectives_in_step_ = 0;
  attempt_epoch_ = 0;  // The new trainer process starts afresh.
  return in_step;
}

}  // namespace shardd::node
