#include "daemon/comm/gloo_collective.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/comm/completion_work.h"
#include "daemon/comm/gloo_abort_signal.h"
#include "daemon/comm/gloo_abortable_buffer.h"
#include "daemon/comm/gloo_direct_reduce_scatter.h"
#include "daemon/comm/gloo_halving_reduce_scatter.h"
#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "daemon/comm/gloo_store_adapter.h"
#include "daemon/comm/host_reduce_math.h"
#include "daemon/comm/op_validation.h"
#include "daemon/comm/reduce_scatter_algorithm.h"
#include "daemon/comm/scoped_sigpipe_block.h"
#include "daemon/comm/status_exception.h"
#include "daemon/core/mono_time.h"
#include "gloo/allgather.h"
#include "gloo/allgatherv.h"
#include "gloo/broadcast.h"
#include "gloo/context.h"
#include "gloo/rendezvous/context.h"
#include "gloo/transport/device.h"
#include "gloo/transport/pair.h"
#include "gloo/transport/tcp/device.h"

namespace shardd::comm {
namespace {

using core::DType;

// Slots of our own messages. Gloo's algorithms use prefixes 0x01..0x08
// (gloo/types.h); these stay clear of them.
constexpr uint8_t kReduceScatterSlotPrefix = 0x52;
constexpr uint8_t kPointToPointSlotPrefix = 0x53;

uint64_t MakeSlot(uint8_t prefix, uint32_t tag) {
  return (static_cast<uint64_t>(prefix) << 56) | tag;
}

// Ring reduce-scatter segments: at most 1 MiB (large enough for full
// bandwidth over TCP, small enough that reducing one overlaps receiving the
// next), and a quarter of the largest block down to 64 KiB, so that blocks
// of a few MiB still pipeline.
constexpr int64_t kMaxSegmentBytes = int64_t{1} << 20;
constexpr int64_t kMinSegmentBytes = int64_t{256} << 10;
constexpr int64_t kSegmentsPerBlock = 4;
int64_t SegmentElements(int64_t max_count) {
  const int64_t max_elements = kMaxSegmentBytes / sizeof(float);
  const int64_t min_elements = kMinSegmentBytes / sizeof(float);
  return std::clamp((max_count + kSegmentsPerBlock - 1) / kSegmentsPerBlock,
                    min_elements, max_elements);
}

std::chrono::milliseconds MillisecondsLeft(MonoTime deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - MonoNow());
  return std::chrono::milliseconds(std::max<int64_t>(ms, 1));
}

absl::Status ValidateOptions(const GlooCollectiveOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("size must be >= 1, got ", options.size));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is outside [0, size=", options.size, ")"));
  }
  if (options.epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch must be >= 0, got ", options.epoch));
  }
  if (options.group.empty()) {
    return absl::InvalidArgumentError("group must not be empty");
  }
  if (!options.job_ranks.empty()) {
    if (static_cast<int>(options.job_ranks.size()) != options.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("job_ranks has ", options.job_ranks.size(),
                       " entries for a group of size ", options.size));
    }
    std::vector<int> sorted = options.job_ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.front() < 0 ||
        std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return absl::InvalidArgumentError(
          "job_ranks must be distinct ranks >= 0");
    }
  }
  if (options.hostname.empty()) {
    return absl::InvalidArgumentError("hostname must not be empty");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("connect_timeout must be > 0, got ",
                     absl::FormatDuration(options.connect_timeout)));
  }
  if (options.default_op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("default_op_timeout must be > 0, got ",
                     absl::FormatDuration(options.default_op_timeout)));
  }
  return absl::OkStatus();
}

// The CPU communicator: Gloo's TCP transport, one worker thread that runs
// operations in issue order (or the caller's thread, for an operation with
// OpOptions::caller_waits issued while the communicator is idle; never two
// at once). See Collective for the contract.
//
// Which algorithm runs each operation:
// - AllGather: gloo::allgather (equal counts) or gloo::allgatherv (uneven),
//   both rings, in place on the output.
// - ReduceScatter: our pipelined ring on unbound buffers
//   (GlooRingReduceScatter); Gloo 2022 has no uneven reduce-scatter.
// - AllReduce: that ring reduce-scatter on an even split, then the
//   all-gather above in place: the bandwidth of a ring all-reduce, and
//   abortable like every other operation (gloo::allreduce waits on internal
//   buffers an abort cannot reach).
// - Broadcast: gloo::broadcast (binomial tree).
// - Send/Recv: unbound buffers, slot derived from the tag. Consecutive
//   queued Sends and Recvs are posted together and then waited for in
//   order (RunPointToPointBatch), so that a stream of them (a shard copied
//   piece by piece) flows without a pause between pieces.
// - Barrier: a one-byte-per-rank gloo::allgather.
// Every Gloo buffer is a GlooAbortableBuffer bound to the operation's
// deadline and the communicator's abort signal.
class GlooCollective : public Collective {
 public:
  GlooCollective(const GlooCollectiveOptions& options,
                 std::shared_ptr<gloo::transport::Device> device,
                 std::shared_ptr<gloo::Context> context);
  ~GlooCollective() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  int64_t epoch() const override { return options_.epoch; }

  std::shared_ptr<Work> AllGather(const void* input, void* output,
                                  const std::vector<int64_t>& counts,
                                  DType dtype,
                                  const OpOptions& options) override;
  std::shared_ptr<Work> ReduceScatter(const void* input, void* output,
                                      const std::vector<int64_t>& counts,
                                      DType dtype, ReduceOp op,
                                      const OpOptions& options) override;
  std::shared_ptr<Work> AllReduce(void* buffer, int64_t count, DType dtype,
                                  ReduceOp op,
                                  const OpOptions& options) override;
  std::shared_ptr<Work> Broadcast(void* buffer, int64_t count, DType dtype,
                                  int root, const OpOptions& options) override;
  std::shared_ptr<Work> Send(const void* buffer, int64_t bytes, int peer,
                             uint32_t tag, const OpOptions& options) override;
  std::shared_ptr<Work> Recv(void* buffer, int64_t bytes, int peer,
                             uint32_t tag, const OpOptions& options) override;
  std::shared_ptr<Work> Barrier(const OpOptions& options) override;

  void Abort(absl::string_view reason) override;
  absl::Status AsyncError() const override;
  CollectiveStats Stats() const override;

 private:
  // An operation's body runs on the worker and throws on failure.
  using Body = std::function<void(MonoTime deadline)>;
  // Send and Recv also come in two halves, so that several can be posted
  // before the first is waited for: Post starts the transfer and returns
  // its buffer, whose WaitSend/WaitRecv then ends it.
  using Post =
      std::function<std::unique_ptr<GlooAbortableBuffer>(MonoTime deadline)>;

  struct Op {
    OpKind kind;
    int64_t bytes;
    absl::Duration timeout;
    Body body;
    std::shared_ptr<CompletionWork> work;
    Post post;  // Send and Recv only.
  };
  // The most point-to-point operations posted at once.
  static constexpr int kMaxPointToPointBatch = 256;

  std::shared_ptr<Work> Enqueue(OpKind kind, int64_t bytes,
                                const OpOptions& options, Body body,
                                Post post = nullptr);
  std::shared_ptr<Work> Reject(OpKind kind, absl::Status status);
  void WorkerLoop();
  absl::Status Run(Op& op);
  // Posts every op of `batch` (Sends and Recvs), then waits for each in
  // order and completes its Work at once: the caller sees piece k while
  // k + 1 is still arriving. Any failure fails the rest of the batch.
  void RunPointToPointBatch(std::vector<Op>& batch);
  // Records how `op` ended (counters, the communicator's first error) and
  // returns its status. `last`: the worker is idle afterwards.
  absl::Status Finish(const Op& op, absl::Status status, absl::Duration busy,
                      bool last);
  // The worker waits while an operation runs on a caller's thread
  // (OpOptions::caller_waits): operations of one communicator never overlap.
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_ && (stopping_ || !queue_.empty());
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; }
  // Hard-closes every connection (RST), so that peers blocked on this rank
  // fail at once instead of at their deadlines.
  void ClosePairs();
  std::string Describe() const;

  // Operation bodies (the worker's or a waiting caller's thread, one at a
  // time).
  std::unique_ptr<GlooAbortableBuffer> MakeBuffer(void* ptr, size_t bytes,
                                                  MonoTime deadline);
  void GatherInPlace(uint8_t* output, const std::vector<size_t>& byte_counts,
                     MonoTime deadline);
  void ReduceScatterF32(const float* input, float* output,
                        const std::vector<int64_t>& counts, MonoTime deadline);
  void RunAllGather(const void* input, void* output,
                    const std::vector<int64_t>& counts, int64_t element_size,
                    MonoTime deadline);
  void RunReduceScatter(const void* input, void* output,
                        const std::vector<int64_t>& counts, DType dtype,
                        ReduceOp op, MonoTime deadline);
  void RunAllReduce(void* buffer, int64_t count, DType dtype, ReduceOp op,
                    MonoTime deadline);
  void RunBroadcast(void* buffer, int64_t bytes, int root, MonoTime deadline);
  std::unique_ptr<GlooAbortableBuffer> PostSend(const void* buffer,
                                                int64_t bytes, int peer,
                                                uint32_t tag,
                                                MonoTime deadline);
  std::unique_ptr<GlooAbortableBuffer> PostRecv(void* buffer, int64_t bytes,
                                                int peer, uint32_t tag,
                                                MonoTime deadline);
  void RunBarrier(MonoTime deadline);

  // Grow-only scratch (used by one operation at a time): first touch of fresh
  // memory is slow, so it is allocated once and reused by every later call.
  float* Scratch(std::vector<float>& buffer, int64_t elements);
  // Send and Recv take the same arguments and reject the same mistakes.
  absl::Status ValidatePointToPoint(const void* buffer, int64_t bytes, int peer,
                                    const OpOptions& options) const;

  const GlooCollectiveOptions options_;
  // Null when size == 1 (nothing to connect).
  const std::shared_ptr<gloo::transport::Device> device_;
  const std::shared_ptr<gloo::Context> context_;
  GlooAbortSignal abort_signal_;

  mutable absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // The first error, or the abort: what AsyncError() returns and every
  // later operation fails with.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  CollectiveStats stats_ ABSL_GUARDED_BY(mu_);

  std::vector<float> input_f32_;
  std::vector<float> output_f32_;
  std::vector<float> ring_;
  std::vector<uint8_t> barrier_bytes_;

  std::thread worker_;
};

GlooCollective::GlooCollective(const GlooCollectiveOptions& options,
                               std::shared_ptr<gloo::transport::Device> device,
                               std::shared_ptr<gloo::Context> context)
    : options_(options),
      device_(std::move(device)),
      context_(std::move(context)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

GlooCollective::~GlooCollective() {
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    busy = running_ || !queue_.empty();
  }
  // An idle communicator closes its connections gracefully (the context's
  // destructor); a busy one aborts, which fails queued work and ends the
  // running operation at once.
  if (busy) Abort("communicator destroyed");
  worker_.join();
  // An operation on a caller's thread ends at once after the abort.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &GlooCollective::Idle));
}

std::string GlooCollective::Describe() const {
  return absl::StrCat("epoch ", options_.epoch, " group '", options_.group,
                      "' rank ", options_.rank, "/", options_.size);
}

float* GlooCollective::Scratch(std::vector<float>& buffer, int64_t elements) {
  if (static_cast<int64_t>(buffer.size()) < elements) {
    buffer.resize(static_cast<size_t>(elements));
  }
  return buffer.data();
}

std::shared_ptr<Work> GlooCollective::Reject(OpKind kind, absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.ops[static_cast<int>(kind)].failures;
  }
  auto work = std::make_shared<CompletionWork>();
  work->Complete(absl::InvalidArgumentError(
      absl::StrCat(OpKindName(kind), ": ", status.message())));
  return work;
}

std::shared_ptr<Work> GlooCollective::Enqueue(OpKind kind, int64_t bytes,
                                              const OpOptions& options,
                                              Body body, Post post) {
  auto work = std::make_shared<CompletionWork>();
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) {
      const absl::Duration timeout = options.timeout > absl::ZeroDuration()
                                         ? options.timeout
                                         : options_.default_op_timeout;
      Op op{kind, bytes, timeout, std::move(body), work, std::move(post)};
      if (!options.caller_waits || running_ || stopping_ || !queue_.empty()) {
        queue_.push_back(std::move(op));
        return work;
      }
      // Idle, and the caller waits anyway: run it here (see OpOptions).
      running_ = true;
      ++stats_.ops[static_cast<int>(kind)].calls;
      mu_.Unlock();
      {
        ScopedSigpipeBlock block_sigpipe;  // As on the worker.
        work->Complete(Run(op));
      }
      mu_.Lock();
      return work;
    }
    ++stats_.ops[static_cast<int>(kind)].failures;
    error = error_;
  }
  work->Complete(std::move(error));
  return work;
}

void GlooCollective::WorkerLoop() {
  // This thread writes to sockets a peer may have closed.
  ScopedSigpipeBlock block_sigpipe;
  for (;;) {
    Op op;
    std::vector<Op> batch;
    absl::Status early_failure;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &GlooCollective::HasWork));
      if (queue_.empty()) return;  // Stopping, nothing left.
      op = std::move(queue_.front());
      queue_.pop_front();
      if (!error_.ok()) {
        ++stats_.ops[static_cast<int>(op.kind)].failures;
        early_failure = error_;
      } else {
        running_ = true;
        ++stats_.ops[static_cast<int>(op.kind)].calls;
        // Sends and Recvs queued right behind this one go with it.
        if (op.post != nullptr && !queue_.empty() &&
            queue_.front().post != nullptr) {
          batch.push_back(std::move(op));
          while (!queue_.empty() && queue_.front().post != nullptr &&
                 batch.size() < kMaxPointToPointBatch) {
            batch.push_back(std::move(queue_.front()));
            queue_.pop_front();
            ++stats_.ops[static_cast<int>(batch.back().kind)].calls;
          }
        }
      }
    }
    if (!early_failure.ok()) {
      op.work->Complete(std::move(early_failure));
      continue;
    }
    if (!batch.empty()) {
      RunPointToPointBatch(batch);
      continue;
    }
    op.work->Complete(Run(op));
  }
}

absl::Status GlooCollective::Run(Op& op) {
  const MonoTime start = MonoNow();
  const MonoTime deadline = start + op.timeout;
  absl::Status status;
  try {
    op.body(deadline);
  } catch (...) {
    status = StatusFromException(
        std::current_exception(),
        absl::StrCat(OpKindName(op.kind), " on ", Describe()));
  }
  return Finish(op, std::move(status), MonoNow() - start, /*last=*/true);
}

void GlooCollective::RunPointToPointBatch(std::vector<Op>& batch) {
  // SIGPIPE is blocked on the worker (WorkerLoop), the only caller.
  const MonoTime start = MonoNow();
  std::vector<std::unique_ptr<GlooAbortableBuffer>> posted(batch.size());
  size_t posted_count = 0;
  absl::Status post_error;
  try {
    for (; posted_count < batch.size(); ++posted_count) {
      Op& op = batch[posted_count];
      posted[posted_count] = op.post(start + op.timeout);
    }
  } catch (...) {
    post_error = StatusFromException(
        std::current_exception(),
        absl::StrCat(OpKindName(batch[posted_count].kind), " on ", Describe()));
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
    } else if (i == posted_count) {
      status = post_error;
    } else {
      try {
        if (op.kind == OpKind::kSend) {
          posted[i]->WaitSend();
        } else {
          posted[i]->WaitRecv();
        }
      } catch (...) {
        status = StatusFromException(
            std::current_exception(),
            absl::StrCat(OpKindName(op.kind), " on ", Describe()));
      }
    }
    const MonoTime now = MonoNow();
    status = Finish(op, std::move(status), now - mark, i + 1 == batch.size());
    mark = now;
    broken = broken || !status.ok();
    op.work->Complete(std::move(status));
  }
}

absl::Status GlooCollective::Finish(const Op& op, absl::Status status,
                                    absl::Duration busy, bool last) {
  if (!status.ok()) {
    // Aborted while running: the abort is the cause, whatever Gloo said.
    absl::Status aborted = abort_signal_.status();
    if (!aborted.ok()) status = std::move(aborted);
  }
  bool broke = false;
  {
    absl::MutexLock lock(&mu_);
    if (last) running_ = false;
    OpCounters& counters = stats_.ops[static_cast<int>(op.kind)];
    counters.busy += busy;
    if (status.ok()) {
      counters.bytes += op.bytes;
    } else {
      ++counters.failures;
      if (error_.ok()) {
        error_ =
            absl::Status(status.code(),
                         absl::StrCat("communicator of epoch ", options_.epoch,
                                      " is broken: ", status.message()));
        broke = true;
      }
    }
  }
  if (broke) ClosePairs();
  return status;
}

void GlooCollective::ClosePairs() {
  if (context_ == nullptr) return;
  for (int i = 0; i < options_.size; ++i) {
    if (i == options_.rank) continue;
    try {
      std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(i);
      if (pair != nullptr) pair->close();
    } catch (...) {
      // Closing is best effort; a pair that cannot be closed is already
      // unusable.
    }
  }
}

void GlooCollective::Abort(absl::string_view reason) {
  absl::Status status = absl::AbortedError(absl::StrCat(
      "communicator of epoch ", options_.epoch, " (group '", options_.group,
      "', rank ", options_.rank, ") aborted: ", reason));
  std::deque<Op> queued;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    if (error_.ok()) error_ = status;
    queued.swap(queue_);
    for (const Op& op : queued) {
      ++stats_.ops[static_cast<int>(op.kind)].failures;
    }
  }
  // Interrupt the running operation's waits, then drop the connections so
  // that peers blocked on this rank fail now. Neither waits on a peer.
  abort_signal_.Abort(status);
  ClosePairs();
  for (Op& op : queued) op.work->Complete(status);
}

absl::Status GlooCollective::AsyncError() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

CollectiveStats GlooCollective::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

// ---------------------------------------------------------------------------
// Issuing: validate, then queue.

std::shared_ptr<Work> GlooCollective::AllGather(
    const void* input, void* output, const std::vector<int64_t>& counts,
    DType dtype, const OpOptions& options) {
  constexpr OpKind kind = OpKind::kAllGather;
  int64_t total = 0;
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCounts(counts, size(), &total);
  if (!status.ok()) return Reject(kind, std::move(status));
  if (input == nullptr && counts[rank()] > 0) {
    return Reject(kind, absl::InvalidArgumentError(
                            "input is null but this rank's count is > 0"));
  }
  if (output == nullptr && total > 0) {
    return Reject(kind, absl::InvalidArgumentError(
                            "output is null but the counts sum to > 0"));
  }
  const int64_t element_size = core::DTypeSize(dtype);
  return Enqueue(kind, total * element_size, options,
                 [this, input, output, counts, element_size](MonoTime d) {
                   RunAllGather(input, output, counts, element_size, d);
                 });
}

std::shared_ptr<Work> GlooCollective::ReduceScatter(
    const void* input, void* output, const std::vector<int64_t>& counts,
    DType dtype, ReduceOp op, const OpOptions& options) {
  constexpr OpKind kind = OpKind::kReduceScatter;
  int64_t total = 0;
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (status.ok()) status = ValidateCounts(counts, size(), &total);
  if (!status.ok()) return Reject(kind, std::move(status));
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return Reject(kind, absl::InvalidArgumentError("op is not sum or average"));
  }
  if (input == nullptr && total > 0) {
    return Reject(kind, absl::InvalidArgumentError(
                            "input is null but the counts sum to > 0"));
  }
  if (output == nullptr && counts[rank()] > 0) {
    return Reject(kind, absl::InvalidArgumentError(
                            "output is null but this rank's count is > 0"));
  }
  return Enqueue(kind, total * core::DTypeSize(dtype), options,
                 [this, input, output, counts, dtype, op](MonoTime d) {
                   RunReduceScatter(input, output, counts, dtype, op, d);
                 });
}

std::shared_ptr<Work> GlooCollective::AllReduce(void* buffer, int64_t count,
                                                DType dtype, ReduceOp op,
                                                const OpOptions& options) {
  constexpr OpKind kind = OpKind::kAllReduce;
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (!status.ok()) return Reject(kind, std::move(status));
  if (count < 0 || count > INT64_MAX / 4) {
    return Reject(kind, absl::InvalidArgumentError(absl::StrCat(
                            "count is ", count, ", must be >= 0")));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return Reject(kind, absl::InvalidArgumentError("op is not sum or average"));
  }
  if (buffer == nullptr && count > 0) {
    return Reject(kind,
                  absl::InvalidArgumentError("buffer is null but count > 0"));
  }
  return Enqueue(kind, count * core::DTypeSize(dtype), options,
                 [this, buffer, count, dtype, op](MonoTime d) {
                   RunAllReduce(buffer, count, dtype, op, d);
                 });
}

std::shared_ptr<Work> GlooCollective::Broadcast(void* buffer, int64_t count,
                                                DType dtype, int root,
                                                const OpOptions& options) {
  constexpr OpKind kind = OpKind::kBroadcast;
  absl::Status status = ValidateDType(dtype);
  if (status.ok()) status = ValidateTimeout(options);
  if (!status.ok()) return Reject(kind, std::move(status));
  if (count < 0 || count > INT64_MAX / 4) {
    return Reject(kind, absl::InvalidArgumentError(absl::StrCat(
                            "count is ", count, ", must be >= 0")));
  }
  if (root < 0 || root >= size()) {
    return Reject(kind, absl::InvalidArgumentError(absl::StrCat(
                            "root ", root, " is outside [0, ", size(), ")")));
  }
  if (buffer == nullptr && count > 0) {
    return Reject(kind,
                  absl::InvalidArgumentError("buffer is null but count > 0"));
  }
  const int64_t bytes = count * core::DTypeSize(dtype);
  return Enqueue(kind, bytes, options, [this, buffer, bytes, root](MonoTime d) {
    RunBroadcast(buffer, bytes, root, d);
  });
}

absl::Status GlooCollective::ValidatePointToPoint(
    const void* buffer, int64_t bytes, int peer,
    const OpOptions& options) const {
  if (absl::Status status = ValidateTimeout(options); !status.ok()) {
    return status;
  }
  if (peer < 0 || peer >= size() || peer == rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer ", peer, " is not another rank of [0, ", size(), ")"));
  }
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bytes is ", bytes, ", must be >= 0"));
  }
  if (buffer == nullptr && bytes > 0) {
    return absl::InvalidArgumentError("buffer is null but bytes > 0");
  }
  return absl::OkStatus();
}

std::shared_ptr<Work> GlooCollective::Send(const void* buffer, int64_t bytes,
                                           int peer, uint32_t tag,
                                           const OpOptions& options) {
  constexpr OpKind kind = OpKind::kSend;
  absl::Status status = ValidatePointToPoint(buffer, bytes, peer, options);
  if (!status.ok()) return Reject(kind, std::move(status));
  Post post = [this, buffer, bytes, peer, tag](MonoTime d) {
    return PostSend(buffer, bytes, peer, tag, d);
  };
  return Enqueue(
      kind, bytes, options, [post](MonoTime d) { post(d)->WaitSend(); }, post);
}

std::shared_ptr<Work> GlooCollective::Recv(void* buffer, int64_t bytes,
                                           int peer, uint32_t tag,
                                           const OpOptions& options) {
  constexpr OpKind kind = OpKind::kRecv;
  absl::Status status = ValidatePointToPoint(buffer, bytes, peer, options);
  if (!status.ok()) return Reject(kind, std::move(status));
  Post post = [this, buffer, bytes, peer, tag](MonoTime d) {
    return PostRecv(buffer, bytes, peer, tag, d);
  };
  return Enqueue(
      kind, bytes, options, [post](MonoTime d) { post(d)->WaitRecv(); }, post);
}

std::shared_ptr<Work> GlooCollective::Barrier(const OpOptions& options) {
  constexpr OpKind kind = OpKind::kBarrier;
  absl::Status status = ValidateTimeout(options);
  if (!status.ok()) return Reject(kind, std::move(status));
  return Enqueue(kind, 0, options, [this](MonoTime d) { RunBarrier(d); });
}

// ---------------------------------------------------------------------------
// Running (worker thread).

std::unique_ptr<GlooAbortableBuffer> GlooCollective::MakeBuffer(
    void* ptr, size_t bytes, MonoTime deadline) {
  return std::make_unique<GlooAbortableBuffer>(
      context_->createUnboundBuffer(ptr, bytes), &abort_signal_, deadline);
}

void GlooCollective::GatherInPlace(uint8_t* output,
                                   const std::vector<size_t>& byte_counts,
                                   MonoTime deadline) {
  size_t total = 0;
  bool equal = true;
  for (size_t bytes : byte_counts) {
    total += bytes;
    equal = equal && bytes == byte_counts[0];
  }
  if (total == 0) return;
  if (equal) {
    gloo::AllgatherOptions opts(context_);
    opts.setOutput<uint8_t>(MakeBuffer(output, total, deadline));
    opts.setTimeout(MillisecondsLeft(deadline));
    gloo::allgather(opts);
  } else {
    gloo::AllgathervOptions opts(context_);
    opts.setOutput<uint8_t>(MakeBuffer(output, total, deadline), byte_counts);
    opts.setTimeout(MillisecondsLeft(deadline));
    gloo::allgatherv(opts);
  }
}

void GlooCollective::RunAllGather(const void* input, void* output,
                                  const std::vector<int64_t>& counts,
                                  int64_t element_size, MonoTime deadline) {
  std::vector<size_t> byte_counts(counts.size());
  size_t my_offset = 0;
  for (int i = 0; i < size(); ++i) {
    byte_counts[i] = static_cast<size_t>(counts[i] * element_size);
    if (i < rank()) my_offset += byte_counts[i];
  }
  uint8_t* out = static_cast<uint8_t*>(output);
  // Gloo gathers in place: put this rank's part where it belongs unless it
  // is already there.
  if (byte_counts[rank()] > 0 && input != out + my_offset) {
    std::memmove(out + my_offset, input, byte_counts[rank()]);
  }
  if (size() == 1) return;
  GatherInPlace(out, byte_counts, deadline);
}

void GlooCollective::ReduceScatterF32(const float* input, float* output,
                                      const std::vector<int64_t>& counts,
                                      MonoTime deadline) {
  const int64_t max_count = *std::max_element(counts.begin(), counts.end());
  GlooRingReduceScatterArgs args;
  args.input = input;
  args.output = output;
  args.counts = counts;
  args.scratch = Scratch(ring_, (size() - 1) * max_count);
  args.segment_elements = SegmentElements(max_count);
  args.slot = MakeSlot(kReduceScatterSlotPrefix, 0);
  const GlooBufferFactory factory = [this, deadline](void* ptr, size_t bytes) {
    return MakeBuffer(ptr, bytes, deadline);
  };
  // Direct and ring give the same bits (the ring's order of additions);
  // halving sums in a tree. Direct takes one step instead of W - 1 and
  // halving log2(W) with one peer at a time: better while per-message
  // latency dominates (measured with scripts/bench collectives). The choice
  // depends only on W and the counts, the same on every rank and every run
  // (and ShmCollective makes the same one, to give the same bits).
  const ReduceScatterAlgorithm algorithm = ChooseReduceScatterAlgorithm(
      size(), max_count, ForcedReduceScatterAlgorithm());
  if (algorithm == ReduceScatterAlgorithm::kHalving) {
    GlooHalvingReduceScatter(*context_, factory, args);
  } else if (algorithm == ReduceScatterAlgorithm::kDirect) {
    GlooDirectReduceScatter(*context_, factory, args);
  } else {
    GlooRingReduceScatter(*context_, factory, args);
  }
}

void GlooCollective::RunReduceScatter(const void* input, void* output,
                                      const std::vector<int64_t>& counts,
                                      DType dtype, ReduceOp op,
                                      MonoTime deadline) {
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  const int64_t mine = counts[rank()];
  if (size() == 1) {
    // The sum (and average) over one rank is its input, bit for bit.
    if (mine > 0 && input != output) {
      std::memmove(output, input, mine * core::DTypeSize(dtype));
    }
    return;
  }
  if (total == 0) return;
  if (dtype == DType::kFloat32) {
    float* out = static_cast<float*>(output);
    ReduceScatterF32(static_cast<const float*>(input), out, counts, deadline);
    if (op == ReduceOp::kAverage) DivideInPlace(out, mine, size());
    return;
  }
  // 16-bit: reduce in fp32, round once.
  float* in32 = Scratch(input_f32_, total);
  WidenToFloat(input, dtype, in32, total);
  float* out32 = Scratch(output_f32_, mine);
  ReduceScatterF32(in32, out32, counts, deadline);
  if (op == ReduceOp::kAverage) DivideInPlace(out32, mine, size());
  NarrowFromFloat(out32, dtype, output, mine);
}

void GlooCollective::RunAllReduce(void* buffer, int64_t count, DType dtype,
                                  ReduceOp op, MonoTime deadline) {
  if (size() == 1 || count == 0) return;
  // Split evenly (the first count % size ranks get one more element),
  // reduce-scatter, then gather the reduced shards back in place.
  std::vector<int64_t> counts(size());
  std::vector<size_t> byte_counts(size());
  int64_t my_offset = 0;
  const int64_t element_size = core::DTypeSize(dtype);
  for (int i = 0; i < size(); ++i) {
    counts[i] = count / size() + (i < count % size() ? 1 : 0);
    byte_counts[i] = static_cast<size_t>(counts[i] * element_size);
    if (i < rank()) my_offset += counts[i];
  }
  const int64_t mine = counts[rank()];
  if (dtype == DType::kFloat32) {
    float* data = static_cast<float*>(buffer);
    ReduceScatterF32(data, data + my_offset, counts, deadline);
    if (op == ReduceOp::kAverage) DivideInPlace(data + my_offset, mine, size());
  } else {
    float* in32 = Scratch(input_f32_, count);
    WidenToFloat(buffer, dtype, in32, count);
    float* out32 = Scratch(output_f32_, mine);
    ReduceScatterF32(in32, out32, counts, deadline);
    if (op == ReduceOp::kAverage) DivideInPlace(out32, mine, size());
    // Each element is rounded once, by its owner; the gather copies bits.
    NarrowFromFloat(out32, dtype, static_cast<uint16_t*>(buffer) + my_offset,
                    mine);
  }
  GatherInPlace(static_cast<uint8_t*>(buffer), byte_counts, deadline);
}

void GlooCollective::RunBroadcast(void* buffer, int64_t bytes, int root,
                                  MonoTime deadline) {
  if (size() == 1 || bytes == 0) return;
  gloo::BroadcastOptions opts(context_);
  opts.setOutput<uint8_t>(
      MakeBuffer(buffer, static_cast<size_t>(bytes), deadline));
  opts.setRoot(root);
  opts.setTimeout(MillisecondsLeft(deadline));
  gloo::broadcast(opts);
}

std::unique_ptr<GlooAbortableBuffer> GlooCollective::PostSend(
    const void* buffer, int64_t bytes, int peer, uint32_t tag,
    MonoTime deadline) {
  std::unique_ptr<GlooAbortableBuffer> buf = MakeBuffer(
      const_cast<void*>(buffer), static_cast<size_t>(bytes), deadline);
  buf->send(peer, MakeSlot(kPointToPointSlotPrefix, tag), 0,
            static_cast<size_t>(bytes));
  return buf;
}

std::unique_ptr<GlooAbortableBuffer> GlooCollective::PostRecv(
    void* buffer, int64_t bytes, int peer, uint32_t tag, MonoTime deadline) {
  std::unique_ptr<GlooAbortableBuffer> buf =
      MakeBuffer(buffer, static_cast<size_t>(bytes), deadline);
  buf->recv(peer, MakeSlot(kPointToPointSlotPrefix, tag), 0,
            static_cast<size_t>(bytes));
  return buf;
}

void GlooCollective::RunBarrier(MonoTime deadline) {
  if (size() == 1) return;
  // No rank can finish gathering one byte from every rank before every rank
  // has entered.
  barrier_bytes_.resize(size());
  GatherInPlace(barrier_bytes_.data(), std::vector<size_t>(size(), 1),
                deadline);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(
    const GlooCollectiveOptions& options, Store& store) {
  if (absl::Status status = ValidateOptions(options); !status.ok()) {
    return status;
  }
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::Context> context;
  if (options.size > 1) {
    const std::string where =
        absl::StrCat("connecting epoch ", options.epoch, " group '",
                     options.group, "' rank ", options.rank, "/", options.size);
    // The device's event-loop thread inherits this thread's blocked
    // SIGPIPE; connecting writes too.
    ScopedSigpipeBlock block_sigpipe;
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = options.hostname;
      device = gloo::transport::tcp::CreateDevice(attr);
      auto mesh = std::make_shared<gloo::rendezvous::Context>(options.rank,
                                                              options.size);
      // Gloo waits up to 5x its timeout for each pair to connect; the store
      // waits end at the connect deadline (GlooStoreAdapter).
      mesh->setTimeout(std::max(
          std::chrono::milliseconds(1),
          std::chrono::milliseconds(
              absl::ToInt64Milliseconds(options.connect_timeout) / 5)));
      GlooStoreAdapter adapter(store, options.epoch, options.group,
                               options.job_ranks,
                               MonoNow() + options.connect_timeout);
      mesh->connectFullMesh(adapter, device);
      mesh->setTimeout(std::chrono::milliseconds(
          absl::ToInt64Milliseconds(options.default_op_timeout)));
      context = std::move(mesh);
    } catch (...) {
      absl::Status status =
          StatusFromException(std::current_exception(), where);
      if (status.code() == absl::StatusCode::kDeadlineExceeded) {
        return absl::DeadlineExceededError(
            absl::StrCat(where, ": peers did not all arrive within ",
                         absl::FormatDuration(options.connect_timeout), ": ",
                         status.message()));
      }
      return absl::UnavailableError(
          absl::StrCat(where, ": ", status.message()));
    }
  }
  return std::unique_ptr<Collective>(
      new GlooCollective(options, std::move(device), std::move(context)));
}

}  // namespace shardd::comm
