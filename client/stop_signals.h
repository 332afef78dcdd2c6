#ifndef SHARDD_CLIENT_STOP_SIGNALS_H_
#define SHARDD_CLIENT_STOP_SIGNALS_H_

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace shardd::client {

// Turns SIGINT and SIGTERM into a call of `on_signal` on a thread of its
// own, so that a tool blocked in a call (a gRPC stream's Read) can cancel
// it and end cleanly instead of dying mid-write. A second signal ends the
// process at once (exit status 128 + signal), for a cancel that hangs.
//
// The constructor blocks both signals in the calling thread; threads
// created afterwards inherit that, so construct it before any other thread
// exists (before the first gRPC channel): a thread created earlier would
// still take a signal's default action. The destructor stops the thread
// and leaves the signals blocked (the process is about to end).
//
// Thread-safety: `on_signal` runs on the internal thread, at most once.
// Not copyable or movable; owns its thread.
class StopSignals {
 public:
  explicit StopSignals(std::function<void(int signal_number)> on_signal);
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  ~StopSignals();

 private:
  void Loop();

  const std::function<void(int)> on_signal_;
  sigset_t signals_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_STOP_SIGNALS_H_
