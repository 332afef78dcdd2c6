#ifndef SHARDD_DAEMON_COORDINATOR_FAILURE_DETECTOR_H_
#define SHARDD_DAEMON_COORDINATOR_FAILURE_DETECTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

// What the detector needs to know about one live member.
struct MemberLiveness {
  int rank = 0;
  MonoTime last_heartbeat;
  MonoTime lease_expiry;
};

// One failure report, kept for the accusation window.
struct Accusation {
  int reporter = 0;
  int suspect = 0;
  MonoTime time;
};

struct DetectorOptions {
  // A member that does not renew within this is removed. Members renew
  // every lease / 3, so two lost heartbeats in a row are tolerated.
  absl::Duration lease = absl::Milliseconds(1500);
  // Reports older than this no longer count towards "odd one out".
  absl::Duration accusation_window = absl::Seconds(30);
  // The coordinator is behind when at least max(behind_min_late,
  // behind_late_fraction x live members) members are late at once (no
  // heartbeat for two renewal periods, 2/3 of a lease). Members fail
  // independently, a few at a time; a large share late together means
  // their heartbeats are queued at a coordinator that cannot keep up (a
  // join storm of thousands, a starved host) or lost on its own network
  // link. Expiring them one by one would then evict healthy members, whose
  // rejoins make the backlog worse. The same rule as Kubernetes' node
  // controller, which stops evicting when a whole zone looks down.
  double behind_late_fraction = 0.1;
  int behind_min_late = 16;
  // While the coordinator is behind, expired leases are held for at most
  // this long; a real failure of that many members is then acted on.
  absl::Duration max_expiry_deferral = absl::Seconds(15);
  // How often the caller checks leases while it runs (the coordinator's
  // ticker: lease / 4), or zero when it checks only when told (tests). A gap
  // of more than twice this since the previous check means the coordinator
  // itself did not run meanwhile: the process was stopped, its VM or
  // container frozen, or its host starved it. Its members' heartbeats then
  // sit unread in its sockets, so a lease that ran out during the gap says
  // nothing about the member: it is renewed once instead of removed (a
  // member that did die is removed one lease later). Without this rule a
  // coordinator paused for a few seconds removed every member at once when
  // it resumed.
  absl::Duration check_period = absl::ZeroDuration();
};

// Result of asking the suspect directly (Peer.Probe with a short deadline),
// done by the caller before deciding; the detector itself does no I/O.
enum class ProbeResult {
  kNotProbed,    // No probe was possible: decide on reports and leases.
  kAlive,        // The suspect answered.
  kUnreachable,  // Refused, reset or timed out.
};

struct Removal {
  int rank = 0;
  std::string reason;
};

struct LeaseExpiryDecision {
  // Members to remove now, with a reason each ("rank 2 lease expired 150 ms
  // ago (last heartbeat 1650 ms ago)").
  std::vector<Removal> removals;
  // Live members late now (see DetectorOptions::behind_late_fraction).
  int late = 0;
  // The coordinator is behind: `late` reached the threshold (half of it
  // while a spell lasts, `behind_since` set).
  bool behind = false;
  // Members whose lease ran out but who are kept because the coordinator is
  // behind (within max_expiry_deferral of `behind_since`).
  int deferred = 0;
  // A spell ended within max_expiry_deferral, or the coordinator did not
  // run (`stalled_for`): members whose lease ran out meanwhile get one more
  // lease from `now` (their heartbeats may still be queued) instead of
  // being removed.
  std::vector<int> renewed;
  // How long the coordinator did not check leases, when that was more than
  // twice DetectorOptions::check_period; zero otherwise.
  absl::Duration stalled_for = absl::ZeroDuration();
};

// Which members to remove for leases that ran out by `now`. `behind_since`
// is when the coordinator was first found behind in the current spell
// (nullopt when it was not behind at the last decision); the caller keeps
// it from `behind` of each decision. `last_check` is the `now` of the
// previous decision (InfinitePast before the first). Pure: a function of
// its arguments.
LeaseExpiryDecision DecideLeaseExpiry(
    MonoTime now, const std::vector<MemberLiveness>& live,
    const DetectorOptions& options, std::optional<MonoTime> behind_since,
    MonoTime last_check = MonoTime::InfinitePast());

struct ReportDecision {
  // Members to remove now (the suspect, or a reporter found to be the odd
  // one out); empty when the report is dismissed.
  std::vector<Removal> removals;
  // Why, for the decisions log and the reply.
  std::string reason;
};

// The fast path: a survivor reports that a collective with `suspect` failed.
//
// The suspect is removed at once, unless it is demonstrably alive and the
// reporter is the odd one out. A reporter is the odd one out when, within
// the accusation window, it has accused two or more different members that
// are still alive, or another member has accused it: one sick node (a bad
// NIC, a stuck process) then fails every collective it takes part in and
// would otherwise evict healthy members one by one. Such a reporter is
// removed instead when it has accused two or more live members.
//
// "Alive" means: the probe answered, or, when not probed, the lease is
// still running and the last heartbeat is within a heartbeat period
// (lease / 3) of the report. A suspect whose probe failed or whose lease ran
// out is removed regardless.
//
// `live` holds the live members (reporter and suspect included);
// `recent` holds earlier reports within the window (this one excluded).
// Pure.
ReportDecision DecideReport(MonoTime now, const Accusation& report,
                            const std::vector<MemberLiveness>& live,
                            const std::vector<Accusation>& recent,
                            ProbeResult probe, const DetectorOptions& options);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_FAILURE_DETECTOR_H_
