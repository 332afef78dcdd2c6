#include "daemon/coordinator/shutdown_decision.h"

#include "absl/strings/str_cat.h"
#include "daemon/core/exit_status.h"

namespace shardd::coordinator {

ShutdownDecision DecideShutdown(const ShutdownOptions& options,
                                const ShutdownInput& in) {
  ShutdownDecision d;
  if (!in.failed) {
    if (in.signals > 0) {
      d.exit = true;
      d.exit_status = core::kExitOk;
      d.leave = "signal received";
    }
    return d;
  }
  d.exit_status = core::kExitJobFailed;
  if (in.signals > 1) {
    d.exit = true;
    d.leave = "second signal received";
    d.report = in.last_scrape >= in.failed_at
                   ? "/metrics was served since the failure"
                   : "/metrics not scraped since the failure";
    return d;
  }
  if (in.signals == 1) {
    d.leave = "signal received";
  } else if (in.drained) {
    d.leave = "every member has left";
  } else if (in.now - in.failed_at >= options.failed_drain) {
    d.leave = "drain time is up";
  } else {
    return d;
  }
  d.exit = true;
  if (!options.metrics_served ||
      options.failed_report_wait <= absl::ZeroDuration()) {
    return d;
  }
  if (in.last_scrape >= in.failed_at) {
    d.report =
        absl::StrCat("/metrics was served ",
                     absl::FormatDuration(absl::Trunc(
                         in.last_scrape - in.failed_at, absl::Milliseconds(1))),
                     " after the failure");
    return d;
  }
  d.report_deadline = in.failed_at + options.failed_report_wait;
  if (in.now >= d.report_deadline) {
    d.report = absl::StrCat(
        "no /metrics scrape within --failed_report_wait=",
        absl::FormatDuration(options.failed_report_wait),
        " of the failure (the SharddJobFailed alert may not fire: does "
        "Prometheus scrape this coordinator?)");
    return d;
  }
  d.exit = false;
  d.awaiting_scrape = true;
  return d;
}

}  // namespace shardd::coordinator
