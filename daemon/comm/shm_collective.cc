#include "daemon/comm/shm_collective.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/comm/host_reduce_math.h"
#include "daemon/comm/op_validation.h"
#include "daemon/comm/reduce_scatter_algorithm.h"

namespace shardd::comm {
namespace {

using core::DType;

// Bytes of part `length` that fall in the chunk starting at `begin` of at
// most `chunk` bytes (or elements).
int64_t InChunk(int64_t length, int64_t begin, int64_t chunk) {
  return std::clamp<int64_t>(length - begin, 0, chunk);
}

}  // namespace

ShmCollective::ShmCollective(Parts parts)
    : rank_(parts.rank),
      size_(parts.size),
      epoch_(parts.epoch),
      group_(std::move(parts.group)),
      default_op_timeout_(parts.default_op_timeout),
      segment_(std::move(parts.segment)),
      liveness_(std::move(parts.liveness)),
      rounds_(segment_->data(), parts.size, parts.rank, parts.slot_bytes,
              liveness_.get(), &aborted_),
      inner_(std::move(parts.inner)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

ShmCollective::~ShmCollective() {
  bool busy;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    busy = running_ || !queue_.empty();
  }
  // An idle communicator leaves quietly (its peers may still be reading
  // its last round); a busy one aborts, which poisons the segment.
  if (busy) Abort("communicator destroyed");
  worker_.join();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &ShmCollective::Idle));
}

std::string ShmCollective::Describe() const {
  return absl::StrCat("epoch ", epoch_, " group '", group_, "' rank ", rank_,
                      "/", size_, " (shm)");
}

float* ShmCollective::Scratch(size_t index, int64_t elements) {
  if (scratch_.size() <= index) scratch_.resize(index + 1);
  if (static_cast<int64_t>(scratch_[index].size()) < elements) {
    scratch_[index].resize(static_cast<size_t>(elements));
  }
  return scratch_[index].data();
}

// ---------------------------------------------------------------------------
// Queue.

std::shared_ptr<Work> ShmCollective::Reject(OpKind kind, absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    ++stats_.ops[static_cast<int>(kind)].failures;
  }
  auto work = std::make_shared<CompletionWork>();
  work->Complete(absl::InvalidArgumentError(
      absl::StrCat(OpKindName(kind), ": ", status.message())));
  return work;
}

std::shared_ptr<Work> ShmCollective::Enqueue(OpKind kind, int64_t bytes,
                                             const OpOptions& options,
                                             Body body, Delegate delegate) {
  auto work = std::make_shared<CompletionWork>();
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) {
      const absl::Duration timeout = options.timeout > absl::ZeroDuration()
                                         ? options.timeout
                                         : default_op_timeout_;
      Op op{kind, bytes, timeout, std::move(body), std::move(delegate), work};
      if (!options.caller_waits || op.delegate != nullptr || running_ ||
          stopping_ || !queue_.empty()) {
        queue_.push_back(std::move(op));
        return work;
      }
      // Idle, and the caller waits anyway: run it here (see OpOptions).
      running_ = true;
      ++stats_.ops[static_cast<int>(kind)].calls;
      mu_.Unlock();
      work->Complete(Run(op));
      mu_.Lock();
      return work;
    }
    ++stats_.ops[static_cast<int>(kind)].failures;
    error = error_;
  }
  work->Complete(std::move(error));
  return work;
}

void ShmCollective::WorkerLoop() {
  for (;;) {
    Op op;
    std::vector<Op> batch;
    absl::Status early_failure;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &ShmCollective::HasWork));
      if (queue_.empty()) return;  // Stopping, nothing left.
      op = std::move(queue_.front());
      queue_.pop_front();
      if (!error_.ok()) {
        ++stats_.ops[static_cast<int>(op.kind)].failures;
        early_failure = error_;
      } else {
        running_ = true;
        ++stats_.ops[static_cast<int>(op.kind)].calls;
        if (op.delegate != nullptr) {
          batch.push_back(std::move(op));
          while (!queue_.empty() && queue_.front().delegate != nullptr &&
                 batch.size() < kMaxDelegatedBatch) {
            batch.push_back(std::move(queue_.front()));
            queue_.pop_front();
            ++stats_.ops[static_cast<int>(batch.back().kind)].calls;
          }
        }
      }
    }
    if (!early_failure.ok()) {
      op.work->Complete(std::move(early_failure));
    } else if (!batch.empty()) {
      RunDelegated(batch);
    } else {
      op.work->Complete(Run(op));
    }
  }
}

absl::Status ShmCollective::Run(Op& op) {
  const MonoTime start = MonoNow();
  absl::Status status = op.body(start + op.timeout);
  if (!status.ok()) {
    status = absl::Status(status.code(),
                          absl::StrCat(OpKindName(op.kind), " on ", Describe(),
                                       ": ", status.message()));
  }
  return Finish(op, std::move(status), MonoNow() - start, /*last=*/true);
}

void ShmCollective::RunDelegated(std::vector<Op>& batch) {
  // Issued together, so that the inner communicator posts them together;
  // then completed in order as they end.
  std::vector<std::shared_ptr<Work>> issued;
  issued.reserve(batch.size());
  for (Op& op : batch) issued.push_back(op.delegate());
  MonoTime mark = MonoNow();
  bool broken = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    Op& op = batch[i];
    absl::Status status = issued[i]->Wait();
    if (broken && status.ok()) status = AsyncError();
    const MonoTime now = MonoNow();
    status = Finish(op, std::move(status), now - mark, i + 1 == batch.size());
    mark = now;
    broken = broken || !status.ok();
    op.work->Complete(std::move(status));
  }
}

absl::Status ShmCollective::Finish(const Op& op, absl::Status status,
                                   absl::Duration busy, bool last) {
  bool broke = false;
  {
    absl::MutexLock lock(&mu_);
    // Aborted while running: the abort is the cause, whatever the wait saw.
    if (!status.ok() && !abort_status_.ok()) status = abort_status_;
    if (last) running_ = false;
    OpCounters& counters = stats_.ops[static_cast<int>(op.kind)];
    counters.busy += busy;
    if (status.ok()) {
      counters.bytes += op.bytes;
    } else {
      ++counters.failures;
      if (error_.ok()) {
        error_ = absl::Status(status.code(),
                              absl::StrCat("communicator of epoch ", epoch_,
                                           " is broken: ", status.message()));
        broke = true;
      }
    }
  }
  if (broke) {
    // Peers blocked on this rank fail now, in shared memory and over TCP.
    rounds_.Poison();
    inner_->Abort(status.message());
  }
  return status;
}

void ShmCollective::Abort(absl::string_view reason) {
  absl::Status status = absl::AbortedError(
      absl::StrCat("communicator of epoch ", epoch_, " (group '", group_,
                   "', rank ", rank_, ") aborted: ", reason));
  std::deque<Op> queued;
  {
    absl::MutexLock lock(&mu_);
    if (abort_started_) return;
    abort_started_ = true;
    abort_status_ = status;
    if (error_.ok()) error_ = status;
    queued.swap(queue_);
    for (const Op& op : queued) {
      ++stats_.ops[static_cast<int>(op.kind)].failures;
    }
  }
  // Our own waits end at their next check (the flag, then a wake-up);
  // peers' end at the poisoned word. Nothing here waits on a peer.
  aborted_.store(true, std::memory_order_release);
  rounds_.Poison();
  inner_->Abort(reason);
  for (Op& op : queued) op.work->Complete(status);
}

absl::Status ShmCollective::AsyncError() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

CollectiveStats ShmCollective::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

// ---------------------------------------------------------------------------
// Issuing: the same checks as GlooCollective, then queue.

std::shared_ptr<Work> ShmCollective::AllGather(
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
                   return RunAllGather(input, output, counts, element_size, d);
                 });
}

std::shared_ptr<Work> ShmCollective::ReduceScatter(
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
                   return ReduceBlocks(input, output, counts, dtype, op, d);
                 });
}

std::shared_ptr<Work> ShmCollective::AllReduce(void* buffer, int64_t count,
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
                   return RunAllReduce(buffer, count, dtype, op, d);
                 });
}

std::shared_ptr<Work> ShmCollective::Broadcast(void* buffer, int64_t count,
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
    return RunBroadcast(buffer, bytes, root, d);
  });
}

absl::Status ShmCollective::ValidatePointToPoint(
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

std::shared_ptr<Work> ShmCollective::Send(const void* buffer, int64_t bytes,
                                          int peer, uint32_t tag,
                                          const OpOptions& options) {
  constexpr OpKind kind = OpKind::kSend;
  absl::Status status = ValidatePointToPoint(buffer, bytes, peer, options);
  if (!status.ok()) return Reject(kind, std::move(status));
  OpOptions inner_options = options;
  inner_options.caller_waits = false;
  return Enqueue(kind, bytes, options, nullptr,
                 [this, buffer, bytes, peer, tag, inner_options] {
                   return inner_->Send(buffer, bytes, peer, tag, inner_options);
                 });
}

std::shared_ptr<Work> ShmCollective::Recv(void* buffer, int64_t bytes, int peer,
                                          uint32_t tag,
                                          const OpOptions& options) {
  constexpr OpKind kind = OpKind::kRecv;
  absl::Status status = ValidatePointToPoint(buffer, bytes, peer, options);
  if (!status.ok()) return Reject(kind, std::move(status));
  OpOptions inner_options = options;
  inner_options.caller_waits = false;
  return Enqueue(kind, bytes, options, nullptr,
                 [this, buffer, bytes, peer, tag, inner_options] {
                   return inner_->Recv(buffer, bytes, peer, tag, inner_options);
                 });
}

std::shared_ptr<Work> ShmCollective::Barrier(const OpOptions& options) {
  constexpr OpKind kind = OpKind::kBarrier;
  absl::Status status = ValidateTimeout(options);
  if (!status.ok()) return Reject(kind, std::move(status));
  return Enqueue(kind, 0, options,
                 [this](MonoTime d) { return RunBarrier(d); });
}

// ---------------------------------------------------------------------------
// Running: rounds through the segment (see ShmRounds). Every rank runs the
// same rounds for the same operation: their number depends only on the
// counts, W and the slot size.

absl::Status ShmCollective::RunAllGather(const void* input, void* output,
                                         const std::vector<int64_t>& counts,
                                         int64_t element_size,
                                         MonoTime deadline) {
  std::vector<int64_t> byte_counts(counts.size());
  for (int q = 0; q < size_; ++q) byte_counts[q] = counts[q] * element_size;
  int64_t my_offset = 0;
  for (int q = 0; q < rank_; ++q) my_offset += byte_counts[q];
  uint8_t* out = static_cast<uint8_t*>(output);
  // This rank's part goes to its place first (unless it is there), and is
  // copied into the segment from there: in place or not, the same path.
  if (byte_counts[rank_] > 0 && input != out + my_offset) {
    std::memmove(out + my_offset, input, byte_counts[rank_]);
  }
  return GatherInPlace(out, byte_counts, deadline);
}

absl::Status ShmCollective::GatherInPlace(
    uint8_t* output, const std::vector<int64_t>& byte_counts,
    MonoTime deadline) {
  std::vector<int64_t> offsets(size_ + 1, 0);
  int64_t max_bytes = 0;
  for (int q = 0; q < size_; ++q) {
    offsets[q + 1] = offsets[q] + byte_counts[q];
    max_bytes = std::max(max_bytes, byte_counts[q]);
  }
  const int64_t chunk = rounds_.slot_bytes();
  for (int64_t begin = 0; begin < max_bytes; begin += chunk) {
    const int64_t mine = InChunk(byte_counts[rank_], begin, chunk);
    if (mine > 0) {
      absl::StatusOr<uint8_t*> slot = rounds_.BeginWrite(deadline);
      if (!slot.ok()) return slot.status();
      std::memcpy(*slot, output + offsets[rank_] + begin, mine);
    }
    rounds_.Publish();
    // Peers in ring order from this rank, so that ranks start on
    // different slots.
    for (int i = 1; i < size_; ++i) {
      const int q = (rank_ + i) % size_;
      const int64_t n = InChunk(byte_counts[q], begin, chunk);
      if (n == 0) continue;
      absl::StatusOr<const uint8_t*> slot = rounds_.Read(q, deadline);
      if (!slot.ok()) return slot.status();
      std::memcpy(output + offsets[q] + begin, *slot, n);
    }
    rounds_.EndRound();
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::ReduceBlocks(const void* input, void* output,
                                         const std::vector<int64_t>& counts,
                                         DType dtype, ReduceOp op,
                                         MonoTime deadline) {
  const int64_t es = core::DTypeSize(dtype);
  std::vector<int64_t> offsets(size_ + 1, 0);
  int64_t max_count = 0;
  for (int q = 0; q < size_; ++q) {
    offsets[q + 1] = offsets[q] + counts[q];
    max_count = std::max(max_count, counts[q]);
  }
  if (offsets[size_] == 0) return absl::OkStatus();
  // The order of additions GlooCollective would use for these counts.
  const ReduceScatterAlgorithm algorithm = ChooseReduceScatterAlgorithm(
      size_, max_count, ForcedReduceScatterAlgorithm());
  // Each round moves a segment of every block: W segments per slot, each
  // a multiple of 64 bytes.
  const int64_t seg = rounds_.slot_bytes() / (size_ * es) / 32 * 32;
  const uint8_t* in = static_cast<const uint8_t*>(input);
  uint8_t* out = static_cast<uint8_t*>(output);
  const int64_t mine_total = counts[rank_];
  std::vector<const float*> sources(size_);
  for (int64_t begin = 0; begin < max_count; begin += seg) {
    // Copy first, then write the output: the output may alias this rank's
    // block of the input, whose segment is then already in the slot.
    bool any = false;
    for (int b = 0; b < size_; ++b) any = any || InChunk(counts[b], begin, seg);
    if (any) {
      absl::StatusOr<uint8_t*> slot = rounds_.BeginWrite(deadline);
      if (!slot.ok()) return slot.status();
      for (int b = 0; b < size_; ++b) {
        const int64_t n = InChunk(counts[b], begin, seg);
        if (n > 0) {
          std::memcpy(*slot + b * seg * es, in + (offsets[b] + begin) * es,
                      n * es);
        }
      }
    }
    rounds_.Publish();
    const int64_t n = InChunk(mine_total, begin, seg);
    if (n > 0) {
      for (int i = 0; i < size_; ++i) {
        const int q = (rank_ + 1 + i) % size_;
        absl::StatusOr<const uint8_t*> slot = rounds_.Read(q, deadline);
        if (!slot.ok()) return slot.status();
        const uint8_t* part = *slot + rank_ * seg * es;
        if (dtype == DType::kFloat32) {
          sources[q] = reinterpret_cast<const float*>(part);
        } else {
          float* wide = Scratch(q, seg);
          WidenToFloat(part, dtype, wide, n);
          sources[q] = wide;
        }
      }
      float* sum = dtype == DType::kFloat32
                       ? reinterpret_cast<float*>(out + begin * es)
                       : Scratch(size_, seg);
      sum_.Sum(sources, rank_, algorithm, n, sum);
      if (op == ReduceOp::kAverage) DivideInPlace(sum, n, size_);
      if (dtype != DType::kFloat32) {
        NarrowFromFloat(sum, dtype, out + begin * es, n);
      }
    }
    rounds_.EndRound();
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::RunAllReduce(void* buffer, int64_t count,
                                         DType dtype, ReduceOp op,
                                         MonoTime deadline) {
  if (count == 0) return absl::OkStatus();
  // GlooCollective's split: the first count % W ranks get one more.
  std::vector<int64_t> counts(size_);
  std::vector<int64_t> byte_counts(size_);
  int64_t my_offset = 0;
  const int64_t es = core::DTypeSize(dtype);
  for (int q = 0; q < size_; ++q) {
    counts[q] = count / size_ + (q < count % size_ ? 1 : 0);
    byte_counts[q] = counts[q] * es;
    if (q < rank_) my_offset += counts[q];
  }
  uint8_t* data = static_cast<uint8_t*>(buffer);
  // Each element is rounded once, by its owner; the gather copies bits.
  if (absl::Status s = ReduceBlocks(data, data + my_offset * es, counts, dtype,
                                    op, deadline);
      !s.ok()) {
    return s;
  }
  return GatherInPlace(data, byte_counts, deadline);
}

absl::Status ShmCollective::RunBroadcast(void* buffer, int64_t bytes, int root,
                                         MonoTime deadline) {
  uint8_t* data = static_cast<uint8_t*>(buffer);
  const int64_t chunk = rounds_.slot_bytes();
  for (int64_t begin = 0; begin < bytes; begin += chunk) {
    const int64_t n = InChunk(bytes, begin, chunk);
    if (rank_ == root) {
      absl::StatusOr<uint8_t*> slot = rounds_.BeginWrite(deadline);
      if (!slot.ok()) return slot.status();
      std::memcpy(*slot, data + begin, n);
    }
    rounds_.Publish();
    if (rank_ != root) {
      absl::StatusOr<const uint8_t*> slot = rounds_.Read(root, deadline);
      if (!slot.ok()) return slot.status();
      std::memcpy(data + begin, *slot, n);
    }
    rounds_.EndRound();
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::RunBarrier(MonoTime deadline) {
  // No rank can see every other rank's publication of this round before
  // every rank has entered it.
  rounds_.Publish();
  for (int i = 1; i < size_; ++i) {
    absl::StatusOr<const uint8_t*> slot =
        rounds_.Read((rank_ + i) % size_, deadline);
    if (!slot.ok()) return slot.status();
  }
  rounds_.EndRound();
  return absl::OkStatus();
}

}  // namespace shardd::comm
