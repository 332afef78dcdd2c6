#include "daemon/node/peer_reachability.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"

namespace shardd::node {

std::vector<ProbeTarget> GroupPeers(int self, int sharding_factor,
                                    const std::vector<ProbeTarget>& members) {
  std::vector<ProbeTarget> out;
  if (sharding_factor < 1) return out;
  for (const ProbeTarget& m : members) {
    if (m.rank == self) continue;
    if (m.rank / sharding_factor == self / sharding_factor ||
        m.rank % sharding_factor == self % sharding_factor) {
      out.push_back(m);
    }
  }
  return out;
}

PeerReachability::PeerReachability(const PeerReachabilityOptions& options,
                                   Probe probe, Targets targets,
                                   OnChange on_change)
    : options_(options),
      probe_(std::move(probe)),
      targets_(std::move(targets)),
      on_change_(std::move(on_change)) {}

PeerReachability::~PeerReachability() { Stop(); }

void PeerReachability::Start() {
  if (options_.interval <= absl::ZeroDuration() || thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] { Loop(); });
}

void PeerReachability::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void PeerReachability::Loop() {
  while (true) {
    const MonoTime next = MonoNow() + options_.interval;
    RunRound();
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_;
    };
    AwaitUntil(&mu_, absl::Condition(&stopping), next);
    if (stopping_) return;
  }
}

void PeerReachability::RunRound() {
  const std::vector<ProbeTarget> targets = targets_();
  std::vector<std::string> addresses;
  addresses.reserve(targets.size());
  for (const ProbeTarget& t : targets) addresses.push_back(t.address);
  // All at once: a hung or cut-off peer costs its whole timeout, and must
  // not delay the verdict on the others.
  std::vector<absl::Status> results =
      probe_(addresses, MonoNow() + options_.timeout);
  if (results.size() != targets.size()) {
    results.assign(targets.size(),
                   absl::InternalError(absl::StrCat(
                       "the probe returned ", results.size(), " results for ",
                       targets.size(), " peers")));
  }
  std::vector<std::pair<UnreachablePeerReport, bool>> changes;
  {
    absl::MutexLock lock(&mu_);
    std::map<int, Count> next;
    for (size_t i = 0; i < targets.size(); ++i) {
      const ProbeTarget& t = targets[i];
      Count count;
      if (auto it = counts_.find(t.rank);
          it != counts_.end() && it->second.address == t.address &&
          it->second.incarnation == t.incarnation) {
        count = it->second;
      }
      count.address = t.address;
      count.incarnation = t.incarnation;
      const bool was = count.failures >= options_.failures_to_report;
      if (results[i].ok()) {
        count.failures = 0;
        ++count.answered;
      } else {
        ++count.failures;
        count.error = std::string(results[i].message());
      }
      const bool is = count.failures >= options_.failures_to_report;
      if (was != is) {
        changes.push_back(
            {{t.rank, t.address, t.incarnation, count.failures, count.error},
             is});
      }
      next[t.rank] = std::move(count);
    }
    counts_ = std::move(next);
  }
  if (on_change_) {
    for (const auto& [peer, unreachable] : changes) {
      on_change_(peer, unreachable);
    }
  }
}

std::vector<UnreachablePeerReport> PeerReachability::Unreachable() const {
  absl::MutexLock lock(&mu_);
  std::vector<UnreachablePeerReport> out;
  for (const auto& [rank, c] : counts_) {
    if (c.failures >= options_.failures_to_report) {
      out.push_back({rank, c.address, c.incarnation, c.failures, c.error});
    }
  }
  return out;
}

std::vector<PeerProbeState> PeerReachability::Peers() const {
  absl::MutexLock lock(&mu_);
  std::vector<PeerProbeState> out;
  for (const auto& [rank, c] : counts_) {
    out.push_back({rank, c.address, c.incarnation, c.failures, c.answered,
                   c.error, c.failures >= options_.failures_to_report});
  }
  return out;
}

}  // namespace shardd::node
