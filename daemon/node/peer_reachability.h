#ifndef SHARDD_DAEMON_NODE_PEER_REACHABILITY_H_
#define SHARDD_DAEMON_NODE_PEER_REACHABILITY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::node {

struct PeerReachabilityOptions {
  // Time between the starts of two rounds (a round lasts at least as long
  // as its slowest probe). Zero: no probing at all.
  absl::Duration interval = absl::Seconds(1);
  // Deadline of each probe.
  absl::Duration timeout = absl::Seconds(2);
  // Consecutive failed probes that make a peer unreachable (reported).
  int failures_to_report = 3;
};

// A member to probe, from the membership view.
struct ProbeTarget {
  int rank = 0;
  std::string address;
  std::string incarnation;
};

// The members `self` exchanges data with: its shard group (same rank / F:
// all-gather, reduce-scatter) and its replica group (same rank % F:
// all-reduce, shard copies), itself excluded. Only those links matter to
// the job, and probing them alone costs F + W/F - 2 probes per round
// instead of W - 1. A member cut off from the others is still found: its
// two groups give it at least two broken links when W/F >= 2 and F >= 2.
std::vector<ProbeTarget> GroupPeers(int self, int sharding_factor,
                                    const std::vector<ProbeTarget>& members);

// A peer whose last `failed_probes` probes all failed.
struct UnreachablePeerReport {
  int rank = 0;
  std::string address;
  std::string incarnation;
  int failed_probes = 0;
  std::string error;  // The last probe's.
};

// A probed peer's counts (PeerReachability::Peers).
struct PeerProbeState {
  int rank = 0;
  std::string address;
  std::string incarnation;
  int consecutive_failures = 0;
  int64_t probes_answered = 0;
  std::string last_error;  // Of the latest failed probe.
  bool reported = false;   // consecutive_failures >= failures_to_report.
};

// This daemon's view of which peers it can reach: every `interval` it
// probes each other member of the current membership (their Peer service),
// all in parallel, and counts consecutive failures per member. Peers with
// at least `failures_to_report` are reported to the coordinator in every
// heartbeat; the coordinator removes a member that its peers cannot reach
// and that cannot reach them (a network partition between the nodes:
// nothing else notices one, since the member still heartbeats).
//
// A count belongs to one process at one address: a member replaced by a
// new incarnation, or gone from the membership, starts again from zero.
//
// Thread-safe. Owns its probing thread (Start/Stop; the destructor stops
// it); `targets` and `probe` are called on it and must stay valid until
// Stop returns. `on_change` (optional) is told when a peer becomes
// unreachable or reachable again, for the daemon's log.
class PeerReachability {
 public:
  // Probes every address at once with `deadline` and returns one status
  // per address, in order (PeerProbePool::ProbeAll in the daemon). A
  // result list of another length fails every probe of the round.
  using Probe = std::function<std::vector<absl::Status>(
      const std::vector<std::string>& addresses, MonoTime deadline)>;
  using Targets = std::function<std::vector<ProbeTarget>()>;
  using OnChange =
      std::function<void(const UnreachablePeerReport& peer, bool unreachable)>;

  PeerReachability(const PeerReachabilityOptions& options, Probe probe,
                   Targets targets, OnChange on_change = nullptr);
  ~PeerReachability();
  PeerReachability(const PeerReachability&) = delete;
  PeerReachability& operator=(const PeerReachability&) = delete;

  // Starts the probing thread (no-op with a zero interval or if started).
  void Start();
  // Stops it and waits for the current round (bounded by the timeout).
  void Stop();

  // One round: probes every target at once and waits for all of them.
  // The thread calls it; tests call it directly.
  void RunRound();

  // The peers with at least failures_to_report consecutive failures, by
  // rank.
  std::vector<UnreachablePeerReport> Unreachable() const;

  // Every peer of the latest round, by rank.
  std::vector<PeerProbeState> Peers() const;

 private:
  struct Count {
    std::string address;
    std::string incarnation;
    int failures = 0;
    std::string error;
    int64_t answered = 0;
  };
  void Loop();

  const PeerReachabilityOptions options_;
  const Probe probe_;
  const Targets targets_;
  const OnChange on_change_;

  mutable absl::Mutex mu_;
  std::map<int, Count> counts_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_PEER_REACHABILITY_H_
