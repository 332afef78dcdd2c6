#ifndef SHARDD_DAEMON_COORDINATOR_COMMIT_VOTE_TABLE_H_
#define SHARDD_DAEMON_COORDINATOR_COMMIT_VOTE_TABLE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace shardd::coordinator {

// One member's vote on committing a step.
struct CommitVote {
  int rank = 0;
  // Its gradient collectives succeeded and it can apply the step.
  bool vote = false;
  std::string reason;  // Why not, when vote is false.
  // A hash of the step's inputs (learning rate, model) that must agree.
  uint64_t fingerprint = 0;
};

// The outcome of a vote, the same for every member.
struct CommitDecision {
  int64_t epoch = 0;
  int64_t step = 0;
  bool commit = false;
  std::string reason;
  // Ranks that voted no or whose fingerprint differed from the majority's
  // (ties: rank order decides which fingerprint is the reference).
  std::vector<int> dissenting;
};

// The coordinator's commit votes (the step-commit protocol of invariant 1):
// members of a ready epoch each vote once per step after their gradient
// collectives and before the optimizer; once all W votes for (epoch, step)
// are in, one decision is made for all (commit iff every vote is yes and
// every fingerprint agrees) and recorded, so that a repeated call returns
// it again.
//
// Pure and deterministic: no clock, no I/O, no locking. The caller checks
// that the voter is a live member of the current, ready epoch; this class
// checks the step against the committed step and keeps the ballots.
//
// Not thread-safe (the coordinator calls it under its lock).
class CommitVoteTable {
 public:
  explicit CommitVoteTable(int world_size) : world_size_(world_size) {}

  // The decision for a complete ballot.
  static CommitDecision Decide(int64_t epoch, int64_t step,
                               const std::vector<CommitVote>& votes);

  // Records `vote` for (epoch, step). INVALID_ARGUMENT for step < 1 or a
  // rank out of range; FAILED_PRECONDITION when the step is neither
  // committed_step + 1 nor a step with a recorded decision in this epoch.
  // A member voting again before the decision replaces its vote (a retried
  // call). When the ballot becomes complete the decision is recorded.
  absl::Status Vote(int64_t epoch, int64_t step, int64_t committed_step,
                    const CommitVote& vote);

  // The recorded decision for (epoch, step), if any.
  std::optional<CommitDecision> Decision(int64_t epoch, int64_t step) const;

  // Drops the ballots and decisions of epochs before `epoch` (they can no
  // longer complete: every waiting voter is told ABORTED).
  void DropBefore(int64_t epoch);

  // Votes received so far for (epoch, step).
  int votes(int64_t epoch, int64_t step) const;

 private:
  using Key = std::pair<int64_t, int64_t>;  // (epoch, step)
  const int world_size_;
  std::map<Key, std::map<int, CommitVote>> ballots_;
  std::map<Key, CommitDecision> decisions_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_COMMIT_VOTE_TABLE_H_
