#ifndef SHARDD_DAEMON_COORDINATOR_PROGRESS_WATCH_H_
#define SHARDD_DAEMON_COORDINATOR_PROGRESS_WATCH_H_

#include <optional>
#include <string>
#include <vector>

#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

struct ProgressWatchOptions {
  // Epochs in a row that end without becoming ready (a recovery, or the
  // communicators, failing again and again).
  int max_failed_epochs = 5;
  // Epochs in a row that end without a step committed, ready or not: the
  // members are alive and form epochs, but no step completes (a trainer
  // that exited for good while its daemon lives, one that takes longer than
  // its peers' collective timeout every step).
  int max_epochs_without_commit = 20;
};

// How one epoch ended, as MembershipTable sees it at the next epoch's start.
struct EpochEnd {
  MonoTime time;
  int64_t epoch = 0;
  // The incarnations of every slot's live holder now.
  std::string membership;
  // The epoch's plan went out to every slot (a plan was issued in this
  // epoch); an epoch that never had one is neither counted nor a reset.
  bool planned = false;
  // The membership the plan went out to.
  std::string planned_membership;
  bool ready = false;
  // Peer links were reported broken when it ended: the partition rules own
  // such epochs, which are neither counted nor a reset.
  bool partitioned = false;
  // Why the next epoch starts.
  std::string cause;
};

// The verdict when a bound is reached.
struct Stall {
  // Which bound: false for max_failed_epochs (never ready), true for
  // max_epochs_without_commit.
  bool without_commit = false;
  int epochs = 0;
  // When the first counted epoch of the spell ended.
  MonoTime since;
  // "epoch N: cause" of each counted epoch (at most the first and the last
  // few of a long spell, with how many were left out between them).
  std::vector<std::string> causes;
};

// Whether a job whose members stay the same still makes progress, and when
// to give up on it (EPOCH_STALLED, then JOB_FAILED). A membership change is
// progress of another kind (leases, quarantines and the recovery plan bound
// those) and resets both counts; readiness resets the count of epochs
// never ready; a committed step resets both.
//
// Pure and deterministic (times come in with the calls); not thread-safe:
// MembershipTable owns it and calls it under the coordinator's lock.
class ProgressWatch {
 public:
  explicit ProgressWatch(ProgressWatchOptions options) : options_(options) {}

  // An epoch ended; returns the verdict when that reaches a bound (then
  // again for every later epoch end until a reset).
  std::optional<Stall> EpochEnded(const EpochEnd& end);
  // The current epoch became ready.
  void Ready();
  // A step was committed.
  void Committed();

  int failed_epochs() const { return failed_.epochs; }
  int epochs_without_commit() const { return uncommitted_.epochs; }

 private:
  // One spell of counted epochs with the same membership.
  struct Spell {
    std::string membership;
    int epochs = 0;
    MonoTime since;
    std::vector<std::string> causes;
    void Reset() { *this = Spell(); }
    void Add(const EpochEnd& end);
    Stall Verdict(bool without_commit) const;
  };

  ProgressWatchOptions options_;
  Spell failed_;
  Spell uncommitted_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_PROGRESS_WATCH_H_
