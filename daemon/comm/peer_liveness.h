#ifndef SHARDD_DAEMON_COMM_PEER_LIVENESS_H_
#define SHARDD_DAEMON_COMM_PEER_LIVENESS_H_

#include <sys/types.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardd::comm {

// Tells whether the processes of a group's other ranks are still alive,
// for a communicator whose ranks share a pid namespace.
//
// Responsible for: holding a pidfd per peer (pidfd_open at formation, so a
// reused pid can never pass for the peer, and a dead but unreaped process
// counts as dead), and answering Check() without blocking. Where pidfds
// are unavailable it falls back to kill(pid, 0). Owns the descriptors;
// Check() is thread-safe.
class PeerLiveness {
 public:
  ~PeerLiveness();
  PeerLiveness(const PeerLiveness&) = delete;
  PeerLiveness& operator=(const PeerLiveness&) = delete;

  // pids[r] is group rank r's process; `self` is skipped. UNAVAILABLE
  // naming the rank when a peer is already gone.
  static absl::StatusOr<std::unique_ptr<PeerLiveness>> Create(
      std::vector<pid_t> pids, int self);

  // OK while every peer lives; UNAVAILABLE naming the first dead rank.
  absl::Status Check() const;

 private:
  PeerLiveness(std::vector<pid_t> pids, std::vector<int> pidfds, int self)
      : pids_(std::move(pids)), pidfds_(std::move(pidfds)), self_(self) {}

  const std::vector<pid_t> pids_;
  const std::vector<int> pidfds_;  // -1: self, or kill(pid, 0) instead.
  const int self_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_PEER_LIVENESS_H_
