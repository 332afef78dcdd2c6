#include "daemon/coordinator/failure_detector.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::coordinator {
namespace {

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

const MemberLiveness* Find(const std::vector<MemberLiveness>& live, int rank) {
  for (const MemberLiveness& m : live) {
    if (m.rank == rank) return &m;
  }
  return nullptr;
}

// Alive by heartbeats alone: lease running and a heartbeat within one
// heartbeat period. A process that just died still has a running lease, but
// its last heartbeat ages past the period quickly, and a stopped one the
// same.
bool HeartbeatingAt(const MemberLiveness& m, MonoTime now,
                    const DetectorOptions& options) {
  return now < m.lease_expiry && now - m.last_heartbeat <= options.lease / 3;
}

ReportDecision Remove(int rank, std::string reason) {
  ReportDecision d;
  d.reason = reason;
  d.removals.push_back({rank, std::move(reason)});
  return d;
}

}  // namespace

LeaseExpiryDecision DecideLeaseExpiry(MonoTime now,
                                      const std::vector<MemberLiveness>& live,
                                      const DetectorOptions& options,
                                      std::optional<MonoTime> behind_since,
                                      MonoTime last_check) {
  LeaseExpiryDecision d;
  // The coordinator did not run since `last_check`: leases that were still
  // running then and ran out meanwhile are renewed, whatever else holds.
  const bool stalled = options.check_period > absl::ZeroDuration() &&
                       last_check != MonoTime::InfinitePast() &&
                       now - last_check > 2 * options.check_period;
  if (stalled) d.stalled_for = now - last_check;
  auto ran_out_in_stall = [&](const MemberLiveness& m) {
    return stalled && now >= m.lease_expiry && m.lease_expiry > last_check;
  };
  const absl::Duration late_after = options.lease * 2 / 3;
  int expired = 0;
  for (const MemberLiveness& m : live) {
    if (ran_out_in_stall(m)) {
      d.renewed.push_back(m.rank);
      continue;  // Neither late nor expired: its heartbeats were not read.
    }
    if (now - m.last_heartbeat > late_after || now >= m.lease_expiry) ++d.late;
    if (now >= m.lease_expiry) ++expired;
  }
  // Hysteresis: a spell ends when half the threshold is late, not as soon
  // as the first queued heartbeats are served.
  const double threshold =
      std::max<double>(options.behind_min_late,
                       options.behind_late_fraction * live.size()) /
      (behind_since.has_value() ? 2 : 1);
  d.behind = d.late > 0 && d.late >= threshold;
  const MonoTime since = behind_since.value_or(now);
  if (d.behind && now - since < options.max_expiry_deferral) {
    d.deferred = expired;
    return d;
  }
  // A spell that ended in time: the leases it held may belong to members
  // whose heartbeats are still queued, so they get one more lease.
  const bool renew = behind_since.has_value() && !d.behind &&
                     now - since < options.max_expiry_deferral;
  const std::string held =
      d.behind ? absl::StrCat("; expiries held for ", Ms(now - since),
                              " ms while ", d.late, " of ", live.size(),
                              " members were late, the most allowed")
               : std::string();
  for (const MemberLiveness& m : live) {
    if (now < m.lease_expiry || ran_out_in_stall(m)) continue;
    if (renew) {
      d.renewed.push_back(m.rank);
      continue;
    }
    d.removals.push_back(
        {m.rank,
         absl::StrCat("rank ", m.rank, " lease expired ",
                      Ms(now - m.lease_expiry), " ms ago (last heartbeat ",
                      Ms(now - m.last_heartbeat), " ms ago, lease ",
                      Ms(options.lease), " ms)", held)});
  }
  return d;
}

ReportDecision DecideReport(MonoTime now, const Accusation& report,
                            const std::vector<MemberLiveness>& live,
                            const std::vector<Accusation>& recent,
                            ProbeResult probe, const DetectorOptions& options) {
  const std::string who =
      absl::StrCat("rank ", report.reporter, " reported rank ", report.suspect);
  const MemberLiveness* suspect = Find(live, report.suspect);
  if (suspect == nullptr) {
    return {{},
            absl::StrCat(who,
                         "; dismissed: the suspect is no longer a "
                         "member")};
  }
  if (now >= suspect->lease_expiry) {
    return Remove(report.suspect,
                  absl::StrCat(who, "; removed: its lease expired ",
                               Ms(now - suspect->lease_expiry), " ms ago"));
  }
  if (probe == ProbeResult::kUnreachable) {
    return Remove(report.suspect,
                  absl::StrCat(who, "; removed: it did not answer a probe"));
  }

  // Is the reporter the odd one out? Count the live members it accused
  // within the window (this report included) and the accusations against
  // it.
  std::set<int> accused_alive;
  bool reporter_accused = false;
  for (const Accusation& a : recent) {
    if (now - a.time > options.accusation_window) continue;
    if (a.suspect == report.reporter) reporter_accused = true;
    if (a.reporter != report.reporter) continue;
    const MemberLiveness* m = Find(live, a.suspect);
    if (m != nullptr &&
        (probe == ProbeResult::kAlive || HeartbeatingAt(*m, now, options))) {
      accused_alive.insert(a.suspect);
    }
  }
  const bool suspect_alive =
      probe == ProbeResult::kAlive || HeartbeatingAt(*suspect, now, options);
  if (suspect_alive) accused_alive.insert(report.suspect);
  const bool odd_one_out = accused_alive.size() >= 2 || reporter_accused;

  if (suspect_alive && odd_one_out) {
    if (accused_alive.size() >= 2) {
      return Remove(
          report.reporter,
          absl::StrCat(who, "; the reporter is the odd one out: it accused ",
                       accused_alive.size(),
                       " live members within the window; removed instead"));
    }
    return {{},
            absl::StrCat(who,
                         "; dismissed: the suspect is alive and the "
                         "reporter was itself accused within the window")};
  }
  if (probe == ProbeResult::kAlive) {
    // Both answer: the link between them failed, not a member. Nobody is
    // removed; the next epoch rebuilds communicators with the same members.
    return {{},
            absl::StrCat(who,
                         "; dismissed: both alive (probe answered); "
                         "communicators are rebuilt")};
  }
  return Remove(report.suspect,
                absl::StrCat(who, "; removed at once (fast path)"));
}

}  // namespace shardd::coordinator
