#include "daemon/comm/shm_transport.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/comm/host_reduce_math.h"
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

ShmTransport::ShmTransport(Parts parts)
    : rank_(parts.rank),
      size_(parts.size),
      segment_(std::move(parts.segment)),
      liveness_(std::move(parts.liveness)),
      rounds_(segment_->data(), parts.size, parts.rank, parts.slot_bytes,
              liveness_.get(), &aborted_),
      inner_(std::move(parts.inner)) {}

float* ShmTransport::Scratch(size_t index, int64_t elements) {
  if (scratch_.size() <= index) scratch_.resize(index + 1);
  if (static_cast<int64_t>(scratch_[index].size()) < elements) {
    scratch_[index].resize(static_cast<size_t>(elements));
  }
  return scratch_[index].data();
}

void ShmTransport::Break(const absl::Status& cause) {
  // Peers blocked on this rank fail now, in shared memory and over TCP.
  rounds_.Poison();
  inner_->Abort(cause.message());
}

void ShmTransport::Abort(const absl::Status& status) {
  // Our own waits end at their next check (the flag, then a wake-up);
  // peers' end at the poisoned word. Nothing here waits on a peer.
  aborted_.store(true, std::memory_order_release);
  Break(status);
}

absl::StatusOr<CollectiveTransport::PointToPointWait>
ShmTransport::StartPointToPoint(const PointToPoint& op) {
  // The inner communicator queues it (it starts a run of them together)
  // and the returned wait ends with it.
  OpOptions options;
  options.timeout = op.timeout;
  std::shared_ptr<Work> work =
      op.kind == OpKind::kSend
          ? inner_->Send(op.buffer, op.bytes, op.peer, op.tag, options)
          : inner_->Recv(op.buffer, op.bytes, op.peer, op.tag, options);
  return PointToPointWait([work = std::move(work)] { return work->Wait(); });
}

// ---------------------------------------------------------------------------
// Running: rounds through the segment (see ShmRounds). Every rank runs the
// same rounds for the same operation: their number depends only on the
// counts, W and the slot size.

absl::Status ShmTransport::AllGather(const void* input, void* output,
                                     const std::vector<int64_t>& counts,
                                     int64_t element_size, MonoTime deadline) {
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

absl::Status ShmTransport::GatherInPlace(
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

absl::Status ShmTransport::ReduceScatter(const void* input, void* output,
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

absl::Status ShmTransport::AllReduce(void* buffer, int64_t count, DType dtype,
                                     ReduceOp op, MonoTime deadline) {
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
  // Each element is rounded once, by its owner; the gather copies bits. At
  // W = 2 GlooTransport fuses the two phases instead (AllReduceAlgorithm):
  // the same single addition per element, so the same bits. Here the two
  // phases stay apart; whether fusing them over the shared rounds would
  // pay has not been measured.
  if (absl::Status s = ReduceScatter(data, data + my_offset * es, counts, dtype,
                                     op, deadline);
      !s.ok()) {
    return s;
  }
  return GatherInPlace(data, byte_counts, deadline);
}

absl::Status ShmTransport::Broadcast(void* buffer, int64_t bytes, int root,
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

absl::Status ShmTransport::Barrier(MonoTime deadline) {
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
