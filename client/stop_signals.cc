#include "client/stop_signals.h"

#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <functional>
#include <thread>
#include <utility>

namespace shardd::client {

StopSignals::StopSignals(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  thread_ = std::thread([this] { Loop(); });
}

StopSignals::~StopSignals() {
  stopping_.store(true);
  // Directed at the thread, so that its sigwait (and nobody else) takes it.
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

void StopSignals::Loop() {
  bool signalled = false;
  while (true) {
    int signal_number = 0;
    if (sigwait(&signals_, &signal_number) != 0) continue;
    if (stopping_.load()) return;
    if (signalled) std::_Exit(128 + signal_number);
    signalled = true;
    on_signal_(signal_number);
  }
}

}  // namespace shardd::client
