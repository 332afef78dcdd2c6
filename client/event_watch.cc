#include "client/event_watch.h"

#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/mono_time.h"

namespace shardd::client {

EventWatch::EventWatch(EventPrinter* printer) : printer_(printer) {}

void EventWatch::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  if (stream_ != nullptr) stream_->Cancel();
}

WatchEnd EventWatch::Run(TrainerClient& client, int64_t after_sequence,
                         MonoTime until) {
  WatchEnd end;
  v1::WatchEventsRequest request;
  request.set_after_sequence(after_sequence);
  std::unique_ptr<EventStream> stream = client.WatchEvents(request, until);
  {
    absl::MutexLock lock(&mu_);
    stream_ = stream.get();
    if (stopped_) stream->Cancel();
  }
  absl::Cleanup detach = [this] {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  };
  absl::Status printed;
  v1::TrainerEvent event;
  while (stream->Next(&event)) {
    ++end.events;
    printed = printer_->Print(event);
    if (!printed.ok()) {
      stream->Cancel();
      while (stream->Next(&event)) {
      }
      break;
    }
  }
  const absl::Status finished = stream->Finish();
  printer_->Finish();
  bool stopped;
  {
    absl::MutexLock lock(&mu_);
    stopped = stopped_;
  }
  if (!printed.ok()) {
    end.reason = WatchEnd::Reason::kFailed;
    end.status = printed;
  } else if (stopped) {
    end.reason = WatchEnd::Reason::kStopped;
  } else if (absl::IsDeadlineExceeded(finished) && MonoNow() >= until) {
    end.reason = WatchEnd::Reason::kTimeUp;
  } else if (absl::IsUnavailable(finished) || finished.ok()) {
    // OK: the daemon closed the stream, which it does only when it stops.
    end.reason = end.events == 0 ? WatchEnd::Reason::kNoDaemon
                                 : WatchEnd::Reason::kDaemonGone;
    end.status = finished.ok()
                     ? absl::UnavailableError("the daemon ended the stream")
                     : finished;
  } else {
    end.reason = WatchEnd::Reason::kFailed;
    end.status = finished;
  }
  return end;
}

}  // namespace shardd::client
