#ifndef SHARDD_CLIENT_EVENT_WATCH_H_
#define SHARDD_CLIENT_EVENT_WATCH_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/event_printer.h"
#include "client/trainer_client.h"
#include "daemon/core/mono_time.h"

namespace shardd::client {

// How a watch ended (EventWatch::Run).
struct WatchEnd {
  enum class Reason {
    kStopped,     // Stop() was called (a signal): a clean end.
    kTimeUp,      // `until` passed: a clean end.
    kNoDaemon,    // Nothing answered: the stream failed before any event.
    kDaemonGone,  // The stream broke after events had arrived.
    kFailed,      // Any other error (the daemon's, or printing's).
  };
  Reason reason = Reason::kFailed;
  // The stream's (or the printer's) status; OK for kStopped and kTimeUp.
  absl::Status status;
  int64_t events = 0;
};

// Follows one daemon's Trainer.WatchEvents stream (shardctl watch) and
// hands each event to an EventPrinter, until `until`, until Stop(), or
// until the stream ends; then says which of these it was, so that the
// caller can tell a clean end (exit 0) from a daemon that went away.
// A daemon's first event is always a snapshot, which is how "no daemon
// there" (no event at all) is told apart from "went away".
//
// Thread-safety: Stop may be called from any thread at any time (before
// Run too: Run then ends at once, which lets a signal handler be installed
// before the client exists); Run from one thread at a time. Borrows
// `printer`, which must outlive it.
class EventWatch {
 public:
  explicit EventWatch(EventPrinter* printer);

  // Follows `client`'s daemon from after `after_sequence` (0: a snapshot
  // first) until `until` (MonoTime::InfiniteFuture(): until stopped).
  WatchEnd Run(TrainerClient& client, int64_t after_sequence, MonoTime until);
  void Stop();

 private:
  EventPrinter* const printer_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  EventStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_EVENT_WATCH_H_
