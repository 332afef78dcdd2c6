#include "daemon/comm/queued_collective.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/comm/op_validation.h"
#include "daemon/comm/scoped_sigpipe_block.h"

namespace shardd::comm {

using core::DType;

QueuedCollective::QueuedCollective(
    Identity identity, std::unique_ptr<CollectiveTransport> transport)
    : id_(std::move(identity)), transport_(std::move(transport)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

QueuedCollective::~QueuedCollective() {
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    busy = running_ || !queue_.empty();
  }
  // An idle communicator leaves quietly (the transport closes gracefully,
  // and peers may still be finishing its last operation); a busy one
  // aborts, which fails queued work and ends the running operation at once.
  if (busy) Abort("communicator destroyed");
  worker_.join();
  // An operation on a caller's thread ends at once after the abort.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &QueuedCollective::Idle));
}

absl::Status QueuedCollective::InContext(OpKind kind,
                                         const absl::Status& status) const {
  const std::string job_ranks =
      id_.job_ranks.empty()
          ? std::string()
          : absl::StrCat(", job ranks [", absl::StrJoin(id_.job_ranks, ", "),
                         "]");
  return absl::Status(
      status.code(),
      absl::StrCat(OpKindName(kind), " on epoch ", id_.epoch, " group '",
                   id_.group, "' rank ", id_.rank, "/", id_.size, " (",
                   id_.transport, job_ranks, "): ", status.message()));
}

// ---------------------------------------------------------------------------
// Issuing: validate, then queue.

std::shared_ptr<Work> QueuedCollective::Reject(OpKind kind,
                                               absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.ops[static_cast<int>(kind)].failures;
  }
  auto work = std::make_shared<CompletionWork>();
  work->Complete(absl::InvalidArgumentError(
      absl::StrCat(OpKindName(kind), ": ", status.message())));
  return work;
}

std::shared_ptr<Work> QueuedCollective::AllGather(
    const void* input, void* output, const std::vector<int64_t>& counts,
    DType dtype, const OpOptions& options) {
  int64_t total = 0;
  if (absl::Status s = ValidateAllGather(input, output, counts, dtype, options,
                                         rank(), size(), &total);
      !s.ok()) {
    return Reject(OpKind::kAllGather, std::move(s));
  }
  const int64_t element_size = core::DTypeSize(dtype);
  Op op;
  op.kind = OpKind::kAllGather;
  op.bytes = total * element_size;
  op.body = [this, input, output, counts, element_size](MonoTime d) {
    return transport_->AllGather(input, output, counts, element_size, d);
  };
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::ReduceScatter(
    const void* input, void* output, const std::vector<int64_t>& counts,
    DType dtype, ReduceOp reduce, const OpOptions& options) {
  int64_t total = 0;
  if (absl::Status s =
          ValidateReduceScatter(input, output, counts, dtype, reduce, options,
                                rank(), size(), &total);
      !s.ok()) {
    return Reject(OpKind::kReduceScatter, std::move(s));
  }
  Op op;
  op.kind = OpKind::kReduceScatter;
  op.bytes = total * core::DTypeSize(dtype);
  op.body = [this, input, output, counts, dtype, reduce](MonoTime d) {
    return transport_->ReduceScatter(input, output, counts, dtype, reduce, d);
  };
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::AllReduce(void* buffer, int64_t count,
                                                  DType dtype, ReduceOp reduce,
                                                  const OpOptions& options) {
  if (absl::Status s = ValidateAllReduce(buffer, count, dtype, reduce, options);
      !s.ok()) {
    return Reject(OpKind::kAllReduce, std::move(s));
  }
  Op op;
  op.kind = OpKind::kAllReduce;
  op.bytes = count * core::DTypeSize(dtype);
  op.body = [this, buffer, count, dtype, reduce](MonoTime d) {
    return transport_->AllReduce(buffer, count, dtype, reduce, d);
  };
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::Broadcast(void* buffer, int64_t count,
                                                  DType dtype, int root,
                                                  const OpOptions& options) {
  if (absl::Status s =
          ValidateBroadcast(buffer, count, dtype, root, size(), options);
      !s.ok()) {
    return Reject(OpKind::kBroadcast, std::move(s));
  }
  const int64_t bytes = count * core::DTypeSize(dtype);
  Op op;
  op.kind = OpKind::kBroadcast;
  op.bytes = bytes;
  op.body = [this, buffer, bytes, root](MonoTime d) {
    return transport_->Broadcast(buffer, bytes, root, d);
  };
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::Send(const void* buffer, int64_t bytes,
                                             int peer, uint32_t tag,
                                             const OpOptions& options) {
  return PointToPointOp(OpKind::kSend, const_cast<void*>(buffer), bytes, peer,
                        tag, options);
}

std::shared_ptr<Work> QueuedCollective::Recv(void* buffer, int64_t bytes,
                                             int peer, uint32_t tag,
                                             const OpOptions& options) {
  return PointToPointOp(OpKind::kRecv, buffer, bytes, peer, tag, options);
}

std::shared_ptr<Work> QueuedCollective::PointToPointOp(
    OpKind kind, void* buffer, int64_t bytes, int peer, uint32_t tag,
    const OpOptions& options) {
  if (absl::Status s =
          ValidatePointToPoint(buffer, bytes, peer, rank(), size(), options);
      !s.ok()) {
    return Reject(kind, std::move(s));
  }
  Op op;
  op.kind = kind;
  op.bytes = bytes;
  op.p2p.kind = kind;
  op.p2p.buffer = buffer;
  op.p2p.bytes = bytes;
  op.p2p.peer = peer;
  op.p2p.tag = tag;
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::Barrier(const OpOptions& options) {
  if (absl::Status s = ValidateTimeout(options); !s.ok()) {
    return Reject(OpKind::kBarrier, std::move(s));
  }
  Op op;
  op.kind = OpKind::kBarrier;
  op.body = [this](MonoTime d) { return transport_->Barrier(d); };
  return Enqueue(std::move(op), options);
}

std::shared_ptr<Work> QueuedCollective::Enqueue(Op op,
                                                const OpOptions& options) {
  auto work = std::make_shared<CompletionWork>();
  op.work = work;
  op.timeout = options.timeout > absl::ZeroDuration() ? options.timeout
                                                      : id_.default_op_timeout;
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) {
      if (!options.caller_waits || running_ || stopping_ || !queue_.empty()) {
        queue_.push_back(std::move(op));
        return work;
      }
      // Idle, and the caller waits anyway: run it here (see OpOptions).
      running_ = true;
      ++stats_.ops[static_cast<int>(op.kind)].calls;
      mu_.Unlock();
      {
        // A transport may write to sockets a peer has closed (as on the
        // worker).
        ScopedSigpipeBlock block_sigpipe;
        std::vector<Op> batch;
        batch.push_back(std::move(op));
        RunBatch(batch);
      }
      mu_.Lock();
      return work;
    }
    ++stats_.ops[static_cast<int>(op.kind)].failures;
    error = error_;
  }
  work->Complete(std::move(error));
  return work;
}

// ---------------------------------------------------------------------------
// Running.

void QueuedCollective::WorkerLoop() {
  // Transports write to sockets a peer may have closed.
  ScopedSigpipeBlock block_sigpipe;
  for (;;) {
    std::vector<Op> batch;
    absl::Status early_failure;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &QueuedCollective::HasWork));
      if (queue_.empty()) return;  // Stopping, nothing left.
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      OpCounters& first = stats_.ops[static_cast<int>(batch[0].kind)];
      if (!error_.ok()) {
        ++first.failures;
        early_failure = error_;
      } else {
        running_ = true;
        ++first.calls;
        // Sends and Recvs queued right behind this one go with it.
        while (batch[0].point_to_point() && !queue_.empty() &&
               queue_.front().point_to_point() &&
               batch.size() < kMaxPointToPointBatch) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
          ++stats_.ops[static_cast<int>(batch.back().kind)].calls;
        }
      }
    }
    if (!early_failure.ok()) {
      batch[0].work->Complete(std::move(early_failure));
      continue;
    }
    RunBatch(batch);
  }
}

void QueuedCollective::RunBatch(std::vector<Op>& batch) {
  if (batch[0].point_to_point()) {
    RunPointToPointBatch(batch);
    return;
  }
  batch[0].work->Complete(Run(batch[0]));
}

absl::Status QueuedCollective::Run(Op& op) {
  const MonoTime start = MonoNow();
  absl::Status status = op.body(start + op.timeout);
  if (!status.ok()) status = InContext(op.kind, status);
  return Finish(op, std::move(status), MonoNow() - start, /*last=*/true);
}

void QueuedCollective::RunPointToPointBatch(std::vector<Op>& batch) {
  const MonoTime start = MonoNow();
  std::vector<CollectiveTransport::PointToPointWait> waits;
  waits.reserve(batch.size());
  absl::Status start_error;
  for (Op& op : batch) {
    op.p2p.timeout = op.timeout;
    op.p2p.deadline = start + op.timeout;
    absl::StatusOr<CollectiveTransport::PointToPointWait> wait =
        transport_->StartPointToPoint(op.p2p);
    if (!wait.ok()) {
      start_error = InContext(op.kind, wait.status());
      break;
    }
    waits.push_back(*std::move(wait));
  }
  // Busy time is counted from one completion to the next, so that the
  // batch's ops add up to its wall time.
  MonoTime mark = start;
  bool broken = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    Op& op = batch[i];
    absl::Status status;
    if (broken) {
      status = AsyncError();  // The communicator's error, as for the queue.
    } else if (i == waits.size()) {
      status = start_error;
    } else {
      status = waits[i]();
      if (!status.ok()) status = InContext(op.kind, status);
    }
    const MonoTime now = MonoNow();
    status = Finish(op, std::move(status), now - mark, i + 1 == batch.size());
    mark = now;
    broken = broken || !status.ok();
    op.work->Complete(std::move(status));
  }
}

absl::Status QueuedCollective::Finish(const Op& op, absl::Status status,
                                      absl::Duration busy, bool last) {
  bool broke = false;
  {
    absl::MutexLock lock(&mu_);
    // Aborted while running: the abort is the cause, whatever the transport
    // saw.
    if (!status.ok() && aborted_) status = abort_status_;
    if (last) running_ = false;
    OpCounters& counters = stats_.ops[static_cast<int>(op.kind)];
    counters.busy += busy;
    if (status.ok()) {
      counters.bytes += op.bytes;
    } else {
      ++counters.failures;
      if (error_.ok()) {
        error_ = absl::Status(status.code(),
                              absl::StrCat("communicator of epoch ", id_.epoch,
                                           " is broken: ", status.message()));
        broke = true;
      }
    }
  }
  if (broke) transport_->Break(status);
  return status;
}

void QueuedCollective::Abort(absl::string_view reason) {
  absl::Status status = absl::AbortedError(
      absl::StrCat("communicator of epoch ", id_.epoch, " (group '", id_.group,
                   "', rank ", id_.rank, ") aborted: ", reason));
  std::deque<Op> queued;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_status_ = status;
    if (error_.ok()) error_ = status;
    queued.swap(queue_);
    for (const Op& op : queued) {
      ++stats_.ops[static_cast<int>(op.kind)].failures;
    }
  }
  // Interrupts the running operation's waits and makes peers blocked on
  // this rank fail now; neither waits on a peer.
  transport_->Abort(status);
  for (Op& op : queued) op.work->Complete(status);
}

absl::Status QueuedCollective::AsyncError() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

CollectiveStats QueuedCollective::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace shardd::comm
