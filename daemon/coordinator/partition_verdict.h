#ifndef SHARDD_DAEMON_COORDINATOR_PARTITION_VERDICT_H_
#define SHARDD_DAEMON_COORDINATOR_PARTITION_VERDICT_H_

#include <string>
#include <utility>
#include <vector>

namespace shardd::coordinator {

// One live member's view of its peers: the ranks whose current holder it
// failed to probe (Peer.Probe) several times in a row. The caller keeps only
// entries about the slot's current holder (same incarnation) and only rows
// of current holders, so that a report about a process that has since been
// replaced never counts.
struct ReachabilityReport {
  int rank = 0;
  std::vector<int> unreachable;
};

enum class PartitionKind {
  kNone,       // No link is reported down from both of its ends.
  kCutOff,     // `cut_off` explains every broken link, and nothing else does.
  kAmbiguous,  // Several equally small sets explain them (e.g. one link).
  kTooMany,    // Explaining them would remove too many members.
};

struct PartitionVerdict {
  PartitionKind kind = PartitionKind::kNone;
  // With kCutOff: the members to remove, ascending.
  std::vector<int> cut_off;
  // Links that both ends report down, (low rank, high rank), ascending.
  std::vector<std::pair<int, int>> broken_links;
  // For the decisions log ("rank 2 cut off from its peers: ...").
  std::string reason;
};

// Decides who, if anyone, is cut off from its peers while still talking to
// the coordinator (a network partition between the nodes, not a dead node:
// dead or hung members lose their lease instead).
//
// A link a-b counts as broken only when both a reports b and b reports a:
// one-sided reports are what a starved or stopped prober produces (its own
// probes time out, or it cannot report at all), and must not evict anyone.
// The verdict is the smallest set of members whose removal leaves every
// remaining pair linked (a minimum vertex cover of the broken links), when
// that set is unique and has at most `max_cut_off` members; callers pass
// (live members - 1) / 2 so that a strict majority always remains. With
// several smallest sets (one broken link between two members: which side is
// at fault?) nothing is decided. Sets larger than 4 are not searched (the
// search is 2^k per broken link): such a network is reported as kTooMany.
//
// Pure: a function of its arguments only.
PartitionVerdict DecidePartition(const std::vector<ReachabilityReport>& reports,
                                 int max_cut_off);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_PARTITION_VERDICT_H_
