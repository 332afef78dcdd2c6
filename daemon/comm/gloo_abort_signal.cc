#include "daemon/comm/gloo_abort_signal.h"

#include <utility>

#include "daemon/comm/status_exception.h"

namespace shardd::comm {

void GlooAbortSignal::Abort(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return;
  status_ = std::move(status);
  for (gloo::transport::UnboundBuffer* buffer : buffers_) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

absl::Status GlooAbortSignal::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void GlooAbortSignal::ThrowIfAborted() const {
  absl::Status status = this->status();
  if (!status.ok()) throw StatusException(std::move(status));
}

void GlooAbortSignal::Register(gloo::transport::UnboundBuffer* buffer) {
  absl::MutexLock lock(&mu_);
  buffers_.insert(buffer);
  if (!status_.ok()) {
    buffer->abortWaitRecv();
    buffer->abortWaitSend();
  }
}

void GlooAbortSignal::Unregister(gloo::transport::UnboundBuffer* buffer) {
  absl::MutexLock lock(&mu_);
  buffers_.erase(buffer);
}

}  // namespace shardd::comm
