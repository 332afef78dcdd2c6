#include "daemon/comm/peer_liveness.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::comm {
namespace {

int PidfdOpen(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

absl::Status Dead(int rank, pid_t pid) {
  return absl::UnavailableError(
      absl::StrCat("rank ", rank, " (pid ", pid, ") has exited"));
}

}  // namespace

PeerLiveness::~PeerLiveness() {
  for (int fd : pidfds_) {
    if (fd >= 0) ::close(fd);
  }
}

absl::StatusOr<std::unique_ptr<PeerLiveness>> PeerLiveness::Create(
    std::vector<pid_t> pids, int self) {
  std::vector<int> fds(pids.size(), -1);
  for (size_t r = 0; r < pids.size(); ++r) {
    if (static_cast<int>(r) == self || pids[r] == ::getpid()) continue;
    fds[r] = PidfdOpen(pids[r]);
    if (fds[r] < 0 && errno == ESRCH) {
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);
      }
      return Dead(static_cast<int>(r), pids[r]);
    }
  }
  return std::unique_ptr<PeerLiveness>(
      new PeerLiveness(std::move(pids), std::move(fds), self));
}

absl::Status PeerLiveness::Check() const {
  std::vector<pollfd> polled;
  std::vector<int> ranks;
  for (size_t r = 0; r < pids_.size(); ++r) {
    if (static_cast<int>(r) == self_ || pids_[r] == ::getpid()) continue;
    if (pidfds_[r] >= 0) {
      polled.push_back(pollfd{pidfds_[r], POLLIN, 0});
      ranks.push_back(static_cast<int>(r));
    } else if (::kill(pids_[r], 0) != 0 && errno == ESRCH) {
      return Dead(static_cast<int>(r), pids_[r]);
    }
  }
  if (polled.empty()) return absl::OkStatus();
  // A pidfd polls readable once its process has exited (reaped or not).
  if (::poll(polled.data(), polled.size(), 0) > 0) {
    for (size_t i = 0; i < polled.size(); ++i) {
      if (polled[i].revents != 0) return Dead(ranks[i], pids_[ranks[i]]);
    }
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm
