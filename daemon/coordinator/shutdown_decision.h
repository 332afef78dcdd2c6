#ifndef SHARDD_DAEMON_COORDINATOR_SHUTDOWN_DECISION_H_
#define SHARDD_DAEMON_COORDINATOR_SHUTDOWN_DECISION_H_

#include <string>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

// When the coordinator process may exit (coordinator_main polls it).
struct ShutdownOptions {
  // --failed_drain_s: after the job failed, the longest the coordinator
  // keeps serving for members to read the reason and leave.
  absl::Duration failed_drain = absl::Seconds(30);
  // --failed_report_wait: after the job failed, the longest the exit is held
  // for /metrics to be scraped once (so that the SharddJobFailed alert
  // reads shardd_coordinator_job_failed = 1); 0: not held.
  absl::Duration failed_report_wait = absl::Seconds(60);
  // /metrics is served (--metrics_port); without it there is nothing to
  // wait for.
  bool metrics_served = false;
};

// What the coordinator has seen so far.
struct ShutdownInput {
  MonoTime now;
  // SIGTERM and SIGINT received so far.
  int signals = 0;
  // The job has failed; failed_at: when the coordinator first saw it
  // (after the job-failed gauge was set).
  bool failed = false;
  MonoTime failed_at = MonoTime::InfiniteFuture();
  // No member is live.
  bool drained = false;
  // When the newest completed /metrics collection began (InfinitePast:
  // none).
  MonoTime last_scrape = MonoTime::InfinitePast();
};

struct ShutdownDecision {
  bool exit = false;
  int exit_status = 0;
  // Why it may leave: "signal received", "every member has left", "drain
  // time is up", "second signal received"; empty while it has no reason to.
  std::string leave;
  // It would leave but holds the exit for a /metrics scrape (until
  // report_deadline).
  bool awaiting_scrape = false;
  MonoTime report_deadline = MonoTime::InfiniteFuture();
  // On exit, what the log line says after the leave reason (how the failure
  // was reported, or that it may not have been).
  std::string report;
};

// Pure. Before the job fails, a signal exits at once with status 0. Once it
// has failed the coordinator leaves when every member has left, the drain
// time is up, or on a signal, with status 3 (core::kExitJobFailed); but
// first, while /metrics is served and has not been collected since the
// failure, it waits for a scrape, at most until failed_at +
// failed_report_wait. A second signal exits at once.
ShutdownDecision DecideShutdown(const ShutdownOptions& options,
                                const ShutdownInput& in);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_SHUTDOWN_DECISION_H_
