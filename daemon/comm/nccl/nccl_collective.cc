#include "daemon/comm/nccl/nccl_collective.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/comm/nccl/nccl_kernels.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/comm/nccl/nccl_unique_id.h"
#include "daemon/comm/nccl/nccl_watchdog.h"
#include "daemon/core/cuda/cuda_context_api.h"
#include "daemon/core/mono_time.h"
#include "daemon/core/scoped_cuda_device.h"

namespace shardd::comm::nccl {
namespace {

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0),
              "non-blocking communicators need NCCL 2.14 or newer");
static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);
static_assert(static_cast<int>(NcclResultCode::kSuccess) == ncclSuccess);
static_assert(static_cast<int>(NcclResultCode::kUnhandledCudaError) ==
              ncclUnhandledCudaError);
static_assert(static_cast<int>(NcclResultCode::kSystemError) ==
              ncclSystemError);
static_assert(static_cast<int>(NcclResultCode::kInternalError) ==
              ncclInternalError);
static_assert(static_cast<int>(NcclResultCode::kInvalidArgument) ==
              ncclInvalidArgument);
static_assert(static_cast<int>(NcclResultCode::kInvalidUsage) ==
              ncclInvalidUsage);
static_assert(static_cast<int>(NcclResultCode::kRemoteError) ==
              ncclRemoteError);
static_assert(static_cast<int>(NcclResultCode::kInProgress) == ncclInProgress);

// How long a failed operation waits, after ncclCommAbort, for the kernels
// already on its stream (ours and NCCL's aborted ones) to drain before
// Wait() returns; past it the op still fails, with a note in the message.
constexpr absl::Duration kDrainGrace = absl::Seconds(10);

NcclResultCode Code(ncclResult_t result) {
  return static_cast<NcclResultCode>(static_cast<int>(result));
}

absl::Status CudaStatus(cudaError_t error, absl::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), ")");
  if (error == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(message);
  }
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice ||
      error == cudaErrorInvalidDevice) {
    return absl::FailedPreconditionError(message);
  }
  return absl::InternalError(message);
}

ncclDataType_t NcclType(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return ncclFloat32;
    case WireType::kBFloat16:
      return ncclBfloat16;
    case WireType::kFloat16:
      return ncclFloat16;
    case WireType::kBytes:
      break;
  }
  return ncclUint8;
}

cuda::HalfType HalfTypeOf(WireType type) {
  return type == WireType::kBFloat16 ? cuda::HalfType::kBFloat16
                                     : cuda::HalfType::kFloat16;
}

// The handle of one queued operation. Thread-safe.
class NcclWork : public Work {
 public:
  absl::Status Wait() override {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

  bool Done() const override {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  void Finish(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    status_ = std::move(status);
    done_ = true;
  }

 private:
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<Work> FinishedWork(absl::Status status) {
  auto work = std::make_shared<NcclWork>();
  work->Finish(std::move(status));
  return work;
}

// Polls a non-blocking NCCL state (init, finalize, an enqueue that returned
// ncclInProgress) until it leaves ncclInProgress, the deadline, or an abort
// request. `abort_requested` is called on every poll.
template <typename AbortRequested>
absl::Status AwaitNonBlocking(ncclComm_t comm, absl::string_view what,
                              MonoTime started, absl::Duration timeout,
                              AbortRequested abort_requested) {
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t polled = ncclCommGetAsyncError(comm, &state);
    PendingPoll poll;
    poll.started = started;
    poll.timeout = timeout;
    poll.now = MonoNow();
    poll.async_error = polled == ncclSuccess ? Code(state) : Code(polled);
    poll.abort_requested = abort_requested();
    const WatchDecision decision = DecidePending(what, poll);
    if (decision.action == WatchAction::kDone) return absl::OkStatus();
    if (decision.action == WatchAction::kAbort) return decision.status;
    absl::SleepFor(decision.next_poll);
  }
}

// One operation waiting for the worker.
struct PendingOp {
  uint64_t seq = 0;
  // ReserveScratch: only plan.scratch_bytes counts; no call, no counters.
  bool reserve_only = false;
  NcclPlan plan;
  const void* input = nullptr;
  void* output = nullptr;
  absl::Duration timeout;
  std::shared_ptr<NcclWork> work;
};

// Collective over one NCCL communicator (see nccl_collective.h).
//
// Ownership: owns the communicator, its CUDA stream, event and scratch
// buffer, and the worker thread. Only the worker thread makes NCCL and CUDA
// calls on them after construction (so the communicator needs no locking);
// the issuing threads only plan, validate and queue under mu_. Thread-safe.
class NcclCollective : public Collective {
 public:
  NcclCollective(const NcclCollectiveOptions& options, ncclComm_t comm,
                 cudaStream_t stream, cudaEvent_t event)
      : options_(options), comm_(comm), stream_(stream), event_(event) {
    worker_ = std::thread([this] { WorkerLoop(); });
  }

  ~NcclCollective() override {
    {
      absl::MutexLock lock(&mu_);
      // Operations still queued or running would make finalize wait for
      // them (and their peers): abort instead.
      if (!queue_.empty() || running_) {
        AbortLocked("communicator destroyed with operations in flight");
      }
      shutdown_ = true;
    }
    worker_.join();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  int64_t epoch() const override { return options_.epoch; }

  std::shared_ptr<Work> AllGather(const void* input, void* output,
                                  const std::vector<int64_t>& counts,
                                  core::DType dtype,
                                  const OpOptions& options) override {
    return Enqueue(OpKind::kAllGather, PlanAllGather(Shape(), counts, dtype),
                   input, output, options);
  }

  std::shared_ptr<Work> ReduceScatter(const void* input, void* output,
                                      const std::vector<int64_t>& counts,
                                      core::DType dtype, ReduceOp op,
                                      const OpOptions& options) override {
    return Enqueue(
        OpKind::kReduceScatter,
        PlanReduceScatter(Shape(), counts, dtype, op, options_.reduction_order),
        input, output, options);
  }

  std::shared_ptr<Work> AllReduce(void* buffer, int64_t count,
                                  core::DType dtype, ReduceOp op,
                                  const OpOptions& options) override {
    return Enqueue(
        OpKind::kAllReduce,
        PlanAllReduce(Shape(), count, dtype, op, options_.reduction_order),
        buffer, buffer, options);
  }

  std::shared_ptr<Work> Broadcast(void* buffer, int64_t count,
                                  core::DType dtype, int root,
                                  const OpOptions& options) override {
    return Enqueue(OpKind::kBroadcast,
                   PlanBroadcast(Shape(), count, dtype, root), buffer, buffer,
                   options);
  }

  std::shared_ptr<Work> Send(const void* buffer, int64_t bytes, int peer,
                             uint32_t /*tag: see nccl_collective.h*/,
                             const OpOptions& options) override {
    return Enqueue(OpKind::kSend, PlanSend(Shape(), bytes, peer), buffer,
                   nullptr, options);
  }

  std::shared_ptr<Work> Recv(void* buffer, int64_t bytes, int peer,
                             uint32_t /*tag*/,
                             const OpOptions& options) override {
    return Enqueue(OpKind::kRecv, PlanRecv(Shape(), bytes, peer), nullptr,
                   buffer, options);
  }

  std::shared_ptr<Work> Barrier(const OpOptions& options) override {
    return Enqueue(OpKind::kBarrier, PlanBarrier(Shape()), nullptr, nullptr,
                   options);
  }

  void Abort(absl::string_view reason) override {
    absl::MutexLock lock(&mu_);
    AbortLocked(reason);
  }

  absl::Status AsyncError() const override {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  CollectiveStats Stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

  std::shared_ptr<Work> ReserveScratch(int64_t bytes) override {
    if (bytes < 0) {
      return FinishedWork(absl::InvalidArgumentError(
          absl::StrCat("scratch bytes must be >= 0, got ", bytes)));
    }
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return FinishedWork(error_);
    PendingOp op;
    op.seq = next_seq_++;
    op.reserve_only = true;
    op.plan.scratch_bytes = bytes;
    op.timeout = options_.default_op_timeout;
    op.work = std::make_shared<NcclWork>();
    std::shared_ptr<Work> handle = op.work;
    queue_.push_back(std::move(op));
    return handle;
  }

  int64_t scratch_bytes() const override {
    return held_scratch_bytes_.load(std::memory_order_relaxed);
  }

 private:
  GroupShape Shape() const { return {options_.rank, options_.size}; }

  OpCounters& Counters(OpKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stats_.ops[static_cast<int>(kind)];
  }

  std::shared_ptr<Work> Enqueue(OpKind kind, absl::StatusOr<NcclPlan> plan,
                                const void* input, void* output,
                                const OpOptions& options) {
    absl::Status invalid = plan.status();
    if (invalid.ok()) invalid = CheckBuffers(*plan, input, output);
    if (invalid.ok() && options.timeout < absl::ZeroDuration()) {
      invalid = absl::InvalidArgumentError(absl::StrCat(
          "timeout must be >= 0, got ", absl::FormatDuration(options.timeout)));
    }
    absl::MutexLock lock(&mu_);
    OpCounters& counters = Counters(kind);
    ++counters.calls;
    // Invalid arguments fail this operation only (nothing was sent).
    if (!invalid.ok()) {
      ++counters.failures;
      return FinishedWork(std::move(invalid));
    }
    if (!error_.ok()) {
      ++counters.failures;
      return FinishedWork(error_);
    }
    PendingOp op;
    op.seq = next_seq_++;
    op.plan = *std::move(plan);
    op.input = input;
    op.output = output;
    op.timeout = options.timeout == absl::ZeroDuration()
                     ? options_.default_op_timeout
                     : options.timeout;
    op.work = std::make_shared<NcclWork>();
    std::shared_ptr<Work> handle = op.work;
    queue_.push_back(std::move(op));
    return handle;
  }

  // Records the first error, fails everything queued; the worker aborts the
  // communicator (it owns every NCCL call) within one poll interval.
  void AbortLocked(absl::string_view reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (error_.ok()) {
      error_ = absl::AbortedError(absl::StrCat(
          "nccl communicator (epoch ", options_.epoch, ", group ",
          options_.group, ", rank ", options_.rank, ") aborted: ", reason));
    }
    FailQueuedLocked();
  }

  void FailQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!queue_.empty()) {
      PendingOp op = std::move(queue_.front());
      queue_.pop_front();
      ++Counters(op.plan.op).failures;
      op.work->Finish(error_);
    }
  }

  absl::Status ErrorSnapshot() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

  void WorkerLoop() {
    // The worker makes every CUDA call of this communicator: bind the device.
    const cudaError_t set = cudaSetDevice(options_.cuda_device);
    if (set != cudaSuccess) {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = CudaStatus(set, "cudaSetDevice (worker)");
      FailQueuedLocked();
    }
    while (true) {
      PendingOp op;
      bool abort_idle = false;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || shutdown_ || (!error_.ok() && !aborted_);
        };
        mu_.Await(absl::Condition(&ready));
        if (!error_.ok() && !aborted_) {
          // Abort() was called while idle (a failed communicator has an
          // empty queue: Abort and Enqueue see to it).
          abort_idle = true;
        } else if (queue_.empty()) {
          break;  // shutdown_ with nothing left
        } else {
          op = std::move(queue_.front());
          queue_.pop_front();
          running_ = true;
        }
      }
      if (abort_idle) {
        AbortComm();
        continue;
      }
      Run(op);
      absl::MutexLock lock(&mu_);
      running_ = false;
    }
    Close();
  }

  // Runs one operation to completion or failure.
  void Run(PendingOp& op) {
    if (op.reserve_only) {
      RunReserve(op);
      return;
    }
    const MonoTime started = MonoNow();
    const std::string what =
        absl::StrCat("nccl ", OpKindName(op.plan.op), " #", op.seq, " (epoch ",
                     options_.epoch, ", group ", options_.group, ", rank ",
                     options_.rank, "/", options_.size, ")");
    absl::Status status = ErrorSnapshot();
    bool issued = false;
    if (status.ok()) status = EnsureScratch(op.plan.scratch_bytes, what);
    if (status.ok()) {
      issued = true;
      status = Issue(op, what, started);
    }
    if (status.ok() && !op.plan.calls.empty()) {
      status = CudaStatus(cudaEventRecord(event_, stream_),
                          absl::StrCat(what, ": cudaEventRecord"));
    }
    if (status.ok() && !op.plan.calls.empty())
      status = Watch(op, what, started);
    const absl::Duration busy = MonoNow() - started;
    if (!status.ok()) {
      Fail(status, issued);
    }
    absl::MutexLock lock(&mu_);
    OpCounters& counters = Counters(op.plan.op);
    counters.busy += busy;
    if (status.ok()) {
      counters.bytes += op.plan.payload_bytes;
    } else {
      ++counters.failures;
      // The first error ended the communicator; later ones report it.
      if (!error_.ok()) status = error_;
    }
    op.work->Finish(std::move(status));
  }

  // A reservation: grows the scratch now, before any later operation. A
  // failure ends the communicator (nothing was issued: peers learn of it
  // through the epoch, not through a half-issued collective).
  void RunReserve(PendingOp& op) {
    const std::string what = absl::StrCat(
        "nccl scratch reservation (epoch ", options_.epoch, ", group ",
        options_.group, ", rank ", options_.rank, "/", options_.size, ")");
    absl::Status status = ErrorSnapshot();
    if (status.ok()) status = EnsureScratch(op.plan.scratch_bytes, what);
    if (status.ok()) {
      // Allocated stream-ordered: done before the call returns, so that
      // an allocation failure surfaces here and not in a later kernel.
      status = CudaStatus(cudaStreamSynchronize(stream_),
                          absl::StrCat(what, ": cudaStreamSynchronize"));
    }
    if (!status.ok()) {
      Fail(status, /*issued=*/false);
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) status = error_;
    }
    op.work->Finish(std::move(status));
  }

  // Grows the scratch buffer; the previous operation has completed, so the
  // old buffer is idle.
  // Stream-ordered (cudaMallocAsync/cudaFreeAsync on this communicator's
  // stream): cudaFree waits for the whole device, and a daemon has two
  // communicators whose kernels may be waiting on peers that wait on this
  // one, which NCCL documents as a deadlock.
  absl::Status EnsureScratch(int64_t bytes, absl::string_view what) {
    if (bytes <= scratch_bytes_) return absl::OkStatus();
    if (scratch_ != nullptr) {
      cudaFreeAsync(scratch_, stream_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
      held_scratch_bytes_.store(0, std::memory_order_relaxed);
    }
    const cudaError_t error =
        cudaMallocAsync(&scratch_, static_cast<size_t>(bytes), stream_);
    if (error != cudaSuccess) {
      scratch_ = nullptr;
      cudaGetLastError();  // Not sticky: the next call must not see it.
      absl::Status status = CudaStatus(
          error,
          absl::StrCat(what, ": cudaMallocAsync of ", bytes, " scratch bytes"));
      if (error == cudaErrorMemoryAllocation) {
        return absl::ResourceExhaustedError(status.message());
      }
      return status;
    }
    scratch_bytes_ = bytes;
    held_scratch_bytes_.store(bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  void* Resolve(const BufferRef& ref, const PendingOp& op) const {
    char* base = nullptr;
    switch (ref.base) {
      case BufferBase::kNone:
        return nullptr;
      case BufferBase::kInput:
        base = static_cast<char*>(const_cast<void*>(op.input));
        break;
      case BufferBase::kOutput:
        base = static_cast<char*>(op.output);
        break;
      case BufferBase::kScratch:
        base = static_cast<char*>(scratch_);
        break;
    }
    return base + ref.byte_offset;
  }

  absl::Status Issue(const PendingOp& op, absl::string_view what,
                     MonoTime started) {
    int group_depth = 0;
    absl::Status status;
    for (const NcclCall& call : op.plan.calls) {
      status = IssueOne(call, op, what, started, group_depth);
      if (!status.ok()) break;
    }
    // Leave NCCL's thread-local group state balanced even on failure.
    for (; group_depth > 0; --group_depth) ncclGroupEnd();
    return status;
  }

  absl::Status IssueOne(const NcclCall& call, const PendingOp& op,
                        absl::string_view what, MonoTime started,
                        int& group_depth) {
    void* send = Resolve(call.send, op);
    void* recv = Resolve(call.recv, op);
    const size_t count = static_cast<size_t>(call.count);
    const ncclDataType_t type = NcclType(call.type);
    ncclResult_t result = ncclSuccess;
    int cuda_error = 0;
    switch (call.kind) {
      case NcclCallKind::kGroupStart:
        result = ncclGroupStart();
        if (result == ncclSuccess) ++group_depth;
        break;
      case NcclCallKind::kGroupEnd:
        --group_depth;
        result = ncclGroupEnd();
        break;
      case NcclCallKind::kAllGather:
        result = ncclAllGather(send, recv, count, type, comm_, stream_);
        break;
      case NcclCallKind::kReduceScatter:
        result =
            ncclReduceScatter(send, recv, count, type, ncclSum, comm_, stream_);
        break;
      case NcclCallKind::kAllReduce:
        result =
            ncclAllReduce(send, recv, count, type, ncclSum, comm_, stream_);
        break;
      case NcclCallKind::kBroadcast:
        result =
            ncclBroadcast(send, recv, count, type, call.root, comm_, stream_);
        break;
      case NcclCallKind::kReduce:
        result = ncclReduce(send, recv, count, type, ncclSum, call.root, comm_,
                            stream_);
        break;
      case NcclCallKind::kSend:
        result = ncclSend(send, count, type, call.peer, comm_, stream_);
        break;
      case NcclCallKind::kRecv:
        result = ncclRecv(recv, count, type, call.peer, comm_, stream_);
        break;
      case NcclCallKind::kUpcast:
        cuda_error =
            cuda::LaunchUpcast(send, HalfTypeOf(call.type),
                               static_cast<float*>(recv), call.count, stream_);
        break;
      case NcclCallKind::kDowncast:
        cuda_error =
            cuda::LaunchDowncast(static_cast<const float*>(send), recv,
                                 HalfTypeOf(call.type), call.count, stream_);
        break;
      case NcclCallKind::kDivide:
        cuda_error = cuda::LaunchDivide(static_cast<float*>(recv), call.divisor,
                                        call.count, stream_);
        break;
      case NcclCallKind::kAdd:
        cuda_error = cuda::LaunchAdd(static_cast<float*>(recv),
                                     static_cast<const float*>(send),
                                     call.count, stream_);
        break;
      case NcclCallKind::kCopy:
        cuda_error = static_cast<int>(cudaMemcpyAsync(
            recv, send, static_cast<size_t>(call.count) * sizeof(float),
            cudaMemcpyDeviceToDevice, stream_));
        break;
    }
    if (cuda_error != 0) {
      return CudaStatus(static_cast<cudaError_t>(cuda_error),
                        absl::StrCat(what, ": ", DescribeCall(call)));
    }
    if (result == ncclInProgress) {
      // Non-blocking communicator: the call is being enqueued; the next NCCL
      // call may only follow once the communicator leaves ncclInProgress.
      return AwaitNonBlocking(
          comm_, absl::StrCat(what, ": ", DescribeCall(call)), started,
          op.timeout, [this] { return ErrorSnapshot(); });
    }
    if (result != ncclSuccess) {
      return NcclResultToStatus(Code(result),
                                absl::StrCat(what, ": ", DescribeCall(call)));
    }
    return absl::OkStatus();
  }

  // Polls the event recorded after the operation and the communicator's
  // asynchronous error until the watchdog decides.
  absl::Status Watch(const PendingOp& op, absl::string_view what,
                     MonoTime started) {
    while (true) {
      OpPoll poll;
      poll.started = started;
      poll.timeout = op.timeout;
      const cudaError_t query = cudaEventQuery(event_);
      // "Not ready" is recorded as this thread's last error too; clear it so
      // that the next kernel launch's check does not see it.
      if (query == cudaErrorNotReady) cudaGetLastError();
      poll.stream_done = query == cudaSuccess;
      if (query != cudaSuccess && query != cudaErrorNotReady) {
        poll.cuda_error = static_cast<int>(query);
      }
      ncclResult_t async = ncclSuccess;
      const ncclResult_t polled = ncclCommGetAsyncError(comm_, &async);
      poll.async_error = polled == ncclSuccess ? Code(async) : Code(polled);
      poll.abort_requested = ErrorSnapshot();
      poll.now = MonoNow();
      const WatchDecision decision = DecideOp(what, poll);
      if (decision.action == WatchAction::kDone) return absl::OkStatus();
      if (decision.action == WatchAction::kAbort) return decision.status;
      absl::SleepFor(decision.next_poll);
    }
  }

  // Ends the communicator after a failed operation: records the error, fails
  // the queue, aborts NCCL and waits (bounded) for the stream to drain so
  // that the caller's buffers are no longer in use when Wait() returns.
  void Fail(const absl::Status& status, bool issued) {
    {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = status;
      FailQueuedLocked();
    }
    AbortComm();
    if (!issued) return;
    cudaEventRecord(event_, stream_);
    const MonoTime deadline = MonoNow() + kDrainGrace;
    while (cudaEventQuery(event_) == cudaErrorNotReady &&
           MonoNow() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    cudaGetLastError();  // A "not ready" from the loop (see Watch).
  }

  void AbortComm() {
    {
      absl::MutexLock lock(&mu_);
      if (aborted_) return;
      aborted_ = true;
    }
    // Does not wait on peers: it stops this rank's kernels and proxy
    // threads and frees the communicator.
    ncclCommAbort(comm_);
  }

  // The worker's last act: finalize a healthy communicator (bounded), or
  // abort; then free the stream, event and scratch.
  void Close() {
    bool healthy;
    {
      absl::MutexLock lock(&mu_);
      healthy = error_.ok() && !aborted_;
    }
    if (healthy) {
      const MonoTime started = MonoNow();
      ncclResult_t result = ncclCommFinalize(comm_);
      absl::Status finalized =
          result == ncclSuccess || result == ncclInProgress
              ? AwaitNonBlocking(comm_, "ncclCommFinalize", started,
                                 options_.connect_timeout,
                                 [] { return absl::OkStatus(); })
              : NcclResultToStatus(Code(result), "ncclCommFinalize");
      if (finalized.ok()) {
        {
          absl::MutexLock lock(&mu_);
          aborted_ = true;  // the handle is gone either way
        }
        ncclCommDestroy(comm_);
      } else {
        AbortComm();
      }
    } else {
      AbortComm();
    }
    // Bounded: a stream that does not drain (a kernel the abort did not
    // stop) leaks its scratch and stream rather than hang the destructor or
    // free memory a kernel still uses.
    const MonoTime deadline = MonoNow() + kDrainGrace;
    cudaError_t state;
    while ((state = cudaStreamQuery(stream_)) == cudaErrorNotReady &&
           MonoNow() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    cudaGetLastError();  // A "not ready" from the loop (see Watch).
    if (state == cudaErrorNotReady) return;
    if (scratch_ != nullptr) {
      cudaFreeAsync(scratch_, stream_);  // Allocated stream-ordered.
      cudaStreamSynchronize(stream_);
    }
    cudaEventDestroy(event_);
    cudaStreamDestroy(stream_);
  }

  const NcclCollectiveOptions options_;
  const ncclComm_t comm_;
  const cudaStream_t stream_;
  const cudaEvent_t event_;
  // Worker-thread only.
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  // scratch_bytes_ for other threads (memory reports).
  std::atomic<int64_t> held_scratch_bytes_{0};

  mutable absl::Mutex mu_;
  std::deque<PendingOp> queue_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;  // ncclCommAbort was called
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  CollectiveStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread worker_;
};

absl::Status ValidateOptions(const NcclCollectiveOptions& options) {
  if (absl::Status s = ValidateGroupShape({options.rank, options.size});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateGroupName(options.group); !s.ok()) return s;
  if (!options.job_ranks.empty() &&
      static_cast<int>(options.job_ranks.size()) != options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("job_ranks has ", options.job_ranks.size(),
                     " entries for a group of size ", options.size));
  }
  if (options.cuda_device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda_device must be >= 0, got ", options.cuda_device));
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("connect_timeout must be > 0");
  }
  if (options.default_op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("default_op_timeout must be > 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const NcclCollectiveOptions& options, Store& store) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  const MonoTime started = MonoNow();
  const std::string what =
      absl::StrCat("nccl communicator (epoch ", options.epoch, ", group ",
                   options.group, ", rank ", options.rank, "/", options.size,
                   ", cuda device ", options.cuda_device, ")");
  // The caller's thread gets back exactly the context it had (none, on a
  // thread that never chose a device), whatever happens: restoring "the
  // device cudaGetDevice reported" would create GPU 0's context in a daemon
  // of cuda:N (ScopedCudaDevice says why).
  absl::StatusOr<core::ScopedCudaDevice> device = core::ScopedCudaDevice::Bind(
      options.cuda_device, core::cuda::RealCudaContextApi());
  if (!device.ok()) {
    return absl::Status(device.status().code(),
                        absl::StrCat(what, ": ", device.status().message()));
  }

  UniqueIdExchange exchange;
  exchange.rank = options.rank;
  exchange.epoch = options.epoch;
  exchange.group = options.group;
  exchange.timeout = options.connect_timeout;
  exchange.root_job_rank =
      options.job_ranks.empty() ? 0 : options.job_ranks.front();
  absl::StatusOr<NcclUniqueIdBytes> id_bytes =
      ExchangeNcclUniqueId(store, exchange, [] {
        ncclUniqueId id;
        const ncclResult_t result = ncclGetUniqueId(&id);
        if (result != ncclSuccess) {
          return absl::StatusOr<NcclUniqueIdBytes>(
              NcclResultToStatus(Code(result), "ncclGetUniqueId"));
        }
        NcclUniqueIdBytes bytes;
        std::memcpy(bytes.data(), id.internal, bytes.size());
        return absl::StatusOr<NcclUniqueIdBytes>(bytes);
      });
  if (!id_bytes.ok()) return id_bytes.status();
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes->data(), id_bytes->size());

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: init and every call return at once (ncclInProgress), so
  // the deadline is ours to enforce, and ncclCommAbort can end a
  // communicator whose peer never shows up.
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t init =
      ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  if (init != ncclSuccess && init != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return NcclResultToStatus(Code(init),
                              absl::StrCat(what, ": ncclCommInitRankConfig"));
  }
  const absl::Duration remaining =
      options.connect_timeout - (MonoNow() - started);
  if (absl::Status s = AwaitNonBlocking(
          comm, absl::StrCat(what, ": ncclCommInitRankConfig"), MonoNow(),
          remaining, [] { return absl::OkStatus(); });
      !s.ok()) {
    ncclCommAbort(comm);
    return s;
  }

  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  absl::Status made =
      CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                 absl::StrCat(what, ": cudaStreamCreate"));
  if (made.ok()) {
    made = CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                      absl::StrCat(what, ": cudaEventCreate"));
  }
  if (!made.ok()) {
    if (stream != nullptr) cudaStreamDestroy(stream);
    ncclCommAbort(comm);
    return made;
  }
  return std::unique_ptr<Collective>(
      new NcclCollective(options, comm, stream, event));
}

}  // namespace shardd::comm::nccl
