#ifndef SHARDD_DAEMON_NODE_EXPORT_RECORD_H_
#define SHARDD_DAEMON_NODE_EXPORT_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace shardd::node {

// What a daemon remembers of its FULL exports from one epoch to the next,
// so that every rank of an export ends with rank 0's outcome even when the
// epoch (and its rendezvous store) ends between rank 0 publishing that
// outcome and another rank reading it:
//  - as rank 0 (the writer), the outcome of its last export, which it
//    publishes again in every epoch it becomes ready in;
//  - as any other rank, the attempt whose outcome it did not learn, looked
//    up when its trainer exports the same step again (told ABORTED, it
//    recovers and retries; rank 0, told OK, does not);
//  - as any rank, the outcome of an attempt it took part in that wrote the
//    file ("learned"), until a step is committed: published in every epoch
//    it becomes ready in, so that rank 0's retry at that step (its daemon
//    died after writing the file and before answering; its replacement
//    remembers nothing) finds the file was written.
// Values are ExportRendezvous's (it reads and writes them).
//
// Thread-safe. Owns what it holds.
class ExportRecord {
 public:
  struct Attempt {
    int64_t step = 0;
    std::string attempt;
  };

  // Rank 0: the outcome of its latest export (ExportRendezvous's format).
  void NoteOutcome(std::string outcome);
  // "" until an outcome was noted.
  std::string outcome() const;

  // Another rank: the attempt of `step` whose outcome it did not learn.
  void NoteUnresolved(Attempt attempt);
  // The unresolved attempt when it is of `step`; an export of another step
  // means the trainer moved on, and the attempt is forgotten.
  std::optional<Attempt> Unresolved(int64_t step);
  // Forgets the unresolved attempt: resolved, or a step was committed since
  // (the trainer moved on; a later export at the same step, after a
  // rollback, is a new one).
  void ClearUnresolved();

  // Rank 0's outcome (ExportRendezvous's format) of an attempt that wrote
  // the file; "" when none since the last commit.
  void NoteLearned(std::string outcome);
  std::string learned() const;

  // A step was committed: the unresolved attempt and the learned outcome
  // no longer answer an export at the same step number.
  void NoteCommitted();

 private:
  mutable absl::Mutex mu_;
  std::string outcome_ ABSL_GUARDED_BY(mu_);
  std::optional<Attempt> unresolved_ ABSL_GUARDED_BY(mu_);
  std::string learned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EXPORT_RECORD_H_
