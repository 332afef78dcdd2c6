#include "daemon/coordinator/commit_vote_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::coordinator {

CommitDecision CommitVoteTable::Decide(int64_t epoch, int64_t step,
                                       const std::vector<CommitVote>& votes) {
  CommitDecision d;
  d.epoch = epoch;
  d.step = step;
  // The reference fingerprint: the most common one, the lowest rank's on a
  // tie, so that one odd member is named rather than everyone else.
  std::map<uint64_t, int> count;
  for (const CommitVote& v : votes) ++count[v.fingerprint];
  uint64_t reference = 0;
  int best = -1;
  std::vector<CommitVote> by_rank = votes;
  std::sort(
      by_rank.begin(), by_rank.end(),
      [](const CommitVote& a, const CommitVote& b) { return a.rank < b.rank; });
  for (const CommitVote& v : by_rank) {
    if (count[v.fingerprint] > best) {
      best = count[v.fingerprint];
      reference = v.fingerprint;
    }
  }
  std::vector<std::string> why;
  for (const CommitVote& v : by_rank) {
    if (!v.vote) {
      d.dissenting.push_back(v.rank);
      why.push_back(absl::StrCat("rank ", v.rank, " voted no",
                                 v.reason.empty() ? "" : ": ", v.reason));
    } else if (v.fingerprint != reference) {
      d.dissenting.push_back(v.rank);
      why.push_back(absl::StrCat("rank ", v.rank,
                                 "'s step inputs differ (learning rate or "
                                 "model fingerprint)"));
    }
  }
  d.commit = d.dissenting.empty();
  d.reason = d.commit
                 ? "all members voted yes"
                 : absl::StrCat("step ", step,
                                " not committed: ", absl::StrJoin(why, "; "));
  return d;
}

absl::Status CommitVoteTable::Vote(int64_t epoch, int64_t step,
                                   int64_t committed_step,
                                   const CommitVote& vote) {
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: must be >= 1, got ", step));
  }
  if (vote.rank < 0 || vote.rank >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank: ", vote.rank, " is out of range [0, ", world_size_, ")"));
  }
  const Key key{epoch, step};
  if (decisions_.count(key) > 0) return absl::OkStatus();
  if (step != committed_step + 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("step: ", step, " is not the cluster's next step ",
                     committed_step + 1, " (committed ", committed_step,
                     ") and no decision is recorded for it"));
  }
  std::map<int, CommitVote>& ballot = ballots_[key];
  ballot[vote.rank] = vote;
  if (static_cast<int>(ballot.size()) == world_size_) {
    std::vector<CommitVote> all;
    for (const auto& [rank, v] : ballot) all.push_back(v);
    decisions_[key] = Decide(epoch, step, all);
    ballots_.erase(key);
  }
  return absl::OkStatus();
}

std::optional<CommitDecision> CommitVoteTable::Decision(int64_t epoch,
                                                        int64_t step) const {
  auto it = decisions_.find({epoch, step});
  if (it == decisions_.end()) return std::nullopt;
  return it->second;
}

void CommitVoteTable::DropBefore(int64_t epoch) {
  ballots_.erase(ballots_.begin(), ballots_.lower_bound({epoch, 0}));
  decisions_.erase(decisions_.begin(), decisions_.lower_bound({epoch, 0}));
  // Within the current epoch keep only the latest few decisions: a retry
  // only ever asks for the step just decided.
  while (decisions_.size() > 8) decisions_.erase(decisions_.begin());
}

int CommitVoteTable::votes(int64_t epoch, int64_t step) const {
  auto it = ballots_.find({epoch, step});
  if (it != ballots_.end()) return static_cast<int>(it->second.size());
  return decisions_.count({epoch, step}) > 0 ? world_size_ : 0;
}

}  // namespace shardd::coordinator
