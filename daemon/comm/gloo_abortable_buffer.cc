#include "daemon/comm/gloo_abortable_buffer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/comm/status_exception.h"

namespace shardd::comm {

GlooAbortableBuffer::GlooAbortableBuffer(
    std::unique_ptr<gloo::transport::UnboundBuffer> inner,
    GlooAbortSignal* signal, MonoTime deadline)
    : gloo::transport::UnboundBuffer(inner->ptr, inner->size),
      inner_(std::move(inner)),
      signal_(signal),
      deadline_(deadline) {
  signal_->Register(inner_.get());
}

GlooAbortableBuffer::~GlooAbortableBuffer() {
  signal_->Unregister(inner_.get());
}

std::chrono::milliseconds GlooAbortableBuffer::Remaining(
    std::chrono::milliseconds timeout, const char* what) const {
  const absl::Duration left = deadline_ - MonoNow();
  if (left <= absl::ZeroDuration()) {
    throw StatusException(absl::DeadlineExceededError(
        absl::StrCat("timed out waiting for a ", what,
                     " to complete (operation deadline passed)")));
  }
  // Round up so that a wait never ends before the deadline.
  auto ms = std::chrono::milliseconds(
      absl::ToInt64Milliseconds(left + absl::Microseconds(999)));
  if (timeout.count() >= 0) ms = std::min(ms, timeout);
  return std::max(ms, std::chrono::milliseconds(1));
}

bool GlooAbortableBuffer::waitRecv(int* rank,
                                   std::chrono::milliseconds timeout) {
  signal_->ThrowIfAborted();
  if (!inner_->waitRecv(rank, Remaining(timeout, "receive"))) {
    signal_->ThrowIfAborted();
    throw StatusException(absl::AbortedError("receive wait interrupted"));
  }
  return true;
}

bool GlooAbortableBuffer::waitSend(int* rank,
                                   std::chrono::milliseconds timeout) {
  signal_->ThrowIfAborted();
  if (!inner_->waitSend(rank, Remaining(timeout, "send"))) {
    signal_->ThrowIfAborted();
    throw StatusException(absl::AbortedError("send wait interrupted"));
  }
  return true;
}

void GlooAbortableBuffer::abortWaitRecv() { inner_->abortWaitRecv(); }

void GlooAbortableBuffer::abortWaitSend() { inner_->abortWaitSend(); }

void GlooAbortableBuffer::send(int dst_rank, uint64_t slot, size_t offset,
                               size_t nbytes) {
  signal_->ThrowIfAborted();
  inner_->send(dst_rank, slot, offset, nbytes);
}

void GlooAbortableBuffer::recv(int src_rank, uint64_t slot, size_t offset,
                               size_t nbytes) {
  signal_->ThrowIfAborted();
  inner_->recv(src_rank, slot, offset, nbytes);
}

void GlooAbortableBuffer::recv(std::vector<int> src_ranks, uint64_t slot,
                               size_t offset, size_t nbytes) {
  signal_->ThrowIfAborted();
  inner_->recv(std::move(src_ranks), slot, offset, nbytes);
}

}  // namespace shardd::comm
