#ifndef SHARDD_DAEMON_NODE_STEP_LEDGER_H_
#define SHARDD_DAEMON_NODE_STEP_LEDGER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// The Trainer protocol's account of the step under way, as the trainer
// sees it: the units it gathered and has not released, the units it
// reduced, the micro-batches it accumulated per unit, whether it issued a
// collective since the last commit or epoch (a trainer that re-attaches
// mid-step leaves its peers waiting in collectives), the epoch the step
// attempt under way began in, the last committed step's response (a
// retried Step gets it again) and whether an aborted attempt of the step
// was counted. The rules of the protocol (K gathered
// units at most, each unit reduced once per step, Step only with nothing
// gathered and everything reduced) are checked here, with the statuses
// trainer.proto documents.
//
// Thread-compatible: the owner (NodeManager) guards it with its mutex.
class StepLedger {
 public:
  // Whether the trainer holds `unit` gathered.
  bool IsHeld(int unit) const { return held_.count(unit) > 0; }
  // RESOURCE_EXHAUSTED when `unit` is not held and `max_gathered` are.
  // `releasing`: units released first, in the same call (they do not
  // count against max_gathered).
  absl::Status CheckGather(int unit, int64_t max_gathered,
                           const std::set<int>& releasing = {}) const;
  void NoteGathered(int unit) { held_.insert(unit); }
  void NoteReleased(int unit) { held_.erase(unit); }

  // FAILED_PRECONDITION when `unit` was reduced already in `step`.
  absl::Status CheckNotReduced(int unit, int64_t step) const;
  // A micro-batch added to the unit's accumulation (no collective): how
  // many the unit holds now.
  int NoteAccumulated(int unit) { return ++accumulated_[unit]; }
  // The unit's reduction started: the micro-batches it covers (the
  // accumulated ones and this one).
  int NoteReduced(int unit);

  // A collective was issued for the step under way.
  void NoteCollectiveIssued() { ++collectives_in_step_; }

  // A Gather, ReduceGrad or Step of the trainer's step attempt in `epoch`.
  // The first after a commit, a WaitReady or a new engine begins the
  // attempt in that epoch; a later one in another epoch is refused
  // (ABORTED, naming both) until the trainer calls WaitReady. A trainer
  // told nothing of an epoch change (it was in no call: stopped, swapped
  // out, loading data past its peers' collective timeout) would otherwise
  // go on with the old attempt in the new epoch, issuing the rest of its
  // collectives while its peers start the step afresh: collectives that do
  // not match, whose results are garbage.
  absl::Status EnterAttempt(int64_t epoch);
  // The trainer called WaitReady: its next call begins a new attempt.
  void EndAttempt() { attempt_epoch_ = 0; }

  // The answer to a Step of `step` already committed (with committed ==
  // step): the response it had; nullopt otherwise.
  std::optional<v1::StepResponse> Retried(int64_t step,
                                          int64_t committed) const;
  // FAILED_PRECONDITION unless `step` is committed + 1, nothing is
  // gathered and every one of `units` is reduced.
  absl::Status CheckStep(int64_t step, int64_t committed, int units) const;
  // `response`'s step committed: the next step starts empty.
  void NoteCommitted(const v1::StepResponse& response);

  // No unit gathered or reduced: between steps.
  bool Idle() const { return held_.empty() && reduced_.empty(); }
  // The step's abort was not counted yet: it is now (true), else false.
  bool MarkAbortCounted();

  // A new epoch's communicators: the step under way is abandoned (the
  // trainer redoes it from its first ReduceGrad); gathered units stay.
  void ResetForEpoch();
  // A new engine (registered, restored or copied): nothing of the old one
  // counts, including the last committed response.
  void ResetForEngine();
  // A new trainer process re-attached: the units the old one held (to be
  // released) and whether it was in the middle of a step (collectives
  // issued); both are forgotten.
  std::vector<int> TakeHeld();
  bool TakeInStep();

  const std::set<int>& held() const { return held_; }

 private:
  std::set<int> held_;
  std::set<int> reduced_;
  std::map<int, int> accumulated_;
  int64_t collectives_in_step_ = 0;
  // The epoch the attempt under way began in; 0: none under way.
  int64_t attempt_epoch_ = 0;
  std::optional<v1::StepResponse> last_step_;
  bool abort_counted_ = false;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_STEP_LEDGER_H_
