#include "daemon/comm/gloo_collective.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/comm/all_gather_algorithm.h"
#include "daemon/comm/all_reduce_algorithm.h"
#include "daemon/comm/collective_transport.h"
#include "daemon/comm/gloo_abort_signal.h"
#include "daemon/comm/gloo_abortable_buffer.h"
#include "daemon/comm/gloo_direct_all_gather.h"
#include "daemon/comm/gloo_direct_reduce_scatter.h"
#include "daemon/comm/gloo_halving_reduce_scatter.h"
#include "daemon/comm/gloo_pair_all_reduce.h"
#include "daemon/comm/gloo_pair_exchange_all_reduce.h"
#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "daemon/comm/gloo_store_adapter.h"
#include "daemon/comm/host_reduce_math.h"
#include "daemon/comm/queued_collective.h"
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
constexpr uint8_t kAllReduceSlotPrefix = 0x54;
constexpr uint8_t kAllGatherSlotPrefix = 0x55;

uint64_t MakeSlot(uint8_t prefix, uint32_t tag) {
  return (static_cast<uint64_t>(prefix) << 56) | tag;
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

// The transport of the CPU communicator over Gloo's TCP pairs
// (QueuedCollective holds the rest). Which algorithm runs each operation:
// - AllGather: one direct exchange (GlooDirectAllGather) or Gloo's ring
//   (gloo::allgather, gloo::allgatherv when uneven), chosen by
//   ChooseAllGatherAlgorithm, in place on the output.
// - ReduceScatter: our own on unbound buffers, chosen by
//   ChooseReduceScatterAlgorithm (direct, pipelined ring, or recursive
//   halving); Gloo 2022 has no uneven reduce-scatter.
// - AllReduce: at W = 2 one exchange of the whole inputs up to 1 MiB
//   (GlooPairExchangeAllReduce) and the fused pair exchange above
//   (GlooPairAllReduce); otherwise that reduce-scatter on an even split,
//   then the all-gather above in place (ChooseAllReduceAlgorithm; the same
//   bits every way at W = 2): the bandwidth of a ring all-reduce, and
//   abortable like every other operation (gloo::allreduce waits on
//   internal buffers an abort cannot reach).
// - Broadcast: gloo::broadcast (binomial tree).
// - Send/Recv: unbound buffers, slot derived from the tag.
// - Barrier: a one-byte-per-rank gloo::allgather.
// Every Gloo buffer is a GlooAbortableBuffer bound to the operation's
// deadline and the abort signal; Gloo's exceptions become statuses here.
//
// Thread-safety: see CollectiveTransport. Owns the device and the context
// (null when size == 1: nothing to connect) and grow-only scratch.
class GlooTransport : public CollectiveTransport {
 public:
  GlooTransport(int rank, int size,
                std::shared_ptr<gloo::transport::Device> device,
                std::shared_ptr<gloo::Context> context)
      : rank_(rank),
        size_(size),
        device_(std::move(device)),
        context_(std::move(context)) {}

  absl::Status AllGather(const void* input, void* output,
                         const std::vector<int64_t>& counts,
                         int64_t element_size, MonoTime deadline) override {
    return Guarded(
        [&] { RunAllGather(input, output, counts, element_size, deadline); });
  }
  absl::Status ReduceScatter(const void* input, void* output,
                             const std::vector<int64_t>& counts, DType dtype,
                             ReduceOp op, MonoTime deadline) override {
    return Guarded(
        [&] { RunReduceScatter(input, output, counts, dtype, op, deadline); });
  }
  absl::Status AllReduce(void* buffer, int64_t count, DType dtype, ReduceOp op,
                         MonoTime deadline) override {
    return Guarded([&] { RunAllReduce(buffer, count, dtype, op, deadline); });
  }
  absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                         MonoTime deadline) override {
    return Guarded([&] { RunBroadcast(buffer, bytes, root, deadline); });
  }
  absl::Status Barrier(MonoTime deadline) override {
    return Guarded([&] { RunBarrier(deadline); });
  }
  absl::StatusOr<PointToPointWait> StartPointToPoint(
      const PointToPoint& op) override;

  void Break(const absl::Status& /*cause*/) override { ClosePairs(); }
  void Abort(const absl::Status& status) override {
    // Interrupt the running operation's waits, then drop the connections so
    // that peers blocked on this rank fail now.
    abort_signal_.Abort(status);
    ClosePairs();
  }

 private:
  // Runs `body`, turning what Gloo (or our buffers) throw into a status.
  template <typename Fn>
  static absl::Status Guarded(Fn&& body) {
    try {
      body();
    } catch (...) {
      return StatusFromException(std::current_exception(), "Gloo");
    }
    return absl::OkStatus();
  }
  // Hard-closes every connection (RST), so that peers blocked on this rank
  // fail at once instead of at their deadlines.
  void ClosePairs();

  // Operation bodies; they throw on failure.
  std::unique_ptr<GlooAbortableBuffer> MakeBuffer(void* ptr, size_t bytes,
                                                  MonoTime deadline);
  // MakeBuffer bound to `deadline`, for our own algorithms.
  GlooBufferFactory BufferFactory(MonoTime deadline);
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
  // The W = 2 all-reduce as one exchange of the whole inputs
  // (GlooPairExchangeAllReduce); each rank sums and finishes every element.
  void PairExchangeAllReduce(void* buffer, int64_t count, DType dtype,
                             ReduceOp op, MonoTime deadline);
  // The W = 2 all-reduce, fused (GlooPairAllReduce); rank 0's half is
  // [0, split).
  void PairAllReduce(void* buffer, int64_t count, int64_t split, DType dtype,
                     ReduceOp op, MonoTime deadline);
  void RunBroadcast(void* buffer, int64_t bytes, int root, MonoTime deadline);
  void RunBarrier(MonoTime deadline);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Grow-only scratch (used by one operation at a time): first touch of fresh
  // memory is slow, so it is allocated once and reused by every later call.
  float* Scratch(std::vector<float>& buffer, int64_t elements);

  const int rank_;
  const int size_;
  const std::shared_ptr<gloo::transport::Device> device_;
  const std::shared_ptr<gloo::Context> context_;
  GlooAbortSignal abort_signal_;

  std::vector<float> input_f32_;
  std::vector<float> output_f32_;
  std::vector<float> ring_;
  std::vector<uint8_t> barrier_bytes_;
};

float* GlooTransport::Scratch(std::vector<float>& buffer, int64_t elements) {
  if (static_cast<int64_t>(buffer.size()) < elements) {
    buffer.resize(static_cast<size_t>(elements));
  }
  return buffer.data();
}

void GlooTransport::ClosePairs() {
  if (context_ == nullptr) return;
  for (int i = 0; i < size_; ++i) {
    if (i == rank_) continue;
    try {
      std::unique_ptr<gloo::transport::Pair>& pair = context_->getPair(i);
      if (pair != nullptr) pair->close();
    } catch (...) {
      // Closing is best effort; a pair that cannot be closed is already
      // unusable.
    }
  }
}

absl::StatusOr<CollectiveTransport::PointToPointWait>
GlooTransport::StartPointToPoint(const PointToPoint& op) {
  std::shared_ptr<GlooAbortableBuffer> buffer;
  absl::Status started = Guarded([&] {
    buffer = MakeBuffer(op.buffer, static_cast<size_t>(op.bytes), op.deadline);
    const uint64_t slot = MakeSlot(kPointToPointSlotPrefix, op.tag);
    if (op.kind == OpKind::kSend) {
      buffer->send(op.peer, slot, 0, static_cast<size_t>(op.bytes));
    } else {
      buffer->recv(op.peer, slot, 0, static_cast<size_t>(op.bytes));
    }
  });
  if (!started.ok()) return started;
  const bool send = op.kind == OpKind::kSend;
  return PointToPointWait([buffer = std::move(buffer), send] {
    return Guarded([&] {
      if (send) {
        buffer->WaitSend();
      } else {
        buffer->WaitRecv();
      }
    });
  });
}

// ---------------------------------------------------------------------------
// Operation bodies.

std::unique_ptr<GlooAbortableBuffer> GlooTransport::MakeBuffer(
    void* ptr, size_t bytes, MonoTime deadline) {
  return std::make_unique<GlooAbortableBuffer>(
      context_->createUnboundBuffer(ptr, bytes), &abort_signal_, deadline);
}

GlooBufferFactory GlooTransport::BufferFactory(MonoTime deadline) {
  return [this, deadline](void* ptr, size_t bytes) {
    return MakeBuffer(ptr, bytes, deadline);
  };
}

void GlooTransport::GatherInPlace(uint8_t* output,
                                  const std::vector<size_t>& byte_counts,
                                  MonoTime deadline) {
  size_t total = 0;
  bool equal = true;
  for (size_t bytes : byte_counts) {
    total += bytes;
    equal = equal && bytes == byte_counts[0];
  }
  if (total == 0) return;
  const size_t max_part =
      *std::max_element(byte_counts.begin(), byte_counts.end());
  if (ChooseAllGatherAlgorithm(size(), static_cast<int64_t>(max_part),
                               ForcedAllGatherAlgorithm()) ==
      AllGatherAlgorithm::kDirect) {
    GlooDirectAllGather(*context_, BufferFactory(deadline), output, byte_counts,
                        MakeSlot(kAllGatherSlotPrefix, 0));
    return;
  }
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

void GlooTransport::RunAllGather(const void* input, void* output,
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

void GlooTransport::ReduceScatterF32(const float* input, float* output,
                                     const std::vector<int64_t>& counts,
                                     MonoTime deadline) {
  const int64_t max_count = *std::max_element(counts.begin(), counts.end());
  // Direct and ring give the same bits (the ring's order of additions);
  // halving sums in a tree. Direct takes one step instead of W - 1 and
  // halving log2(W) with one peer at a time: better while per-message
  // latency dominates (measured with scripts/bench collectives). The choice
  // depends only on W and the counts, the same on every rank and every run
  // (and ShmTransport makes the same one, to give the same bits).
  const ReduceScatterAlgorithm algorithm = ChooseReduceScatterAlgorithm(
      size(), max_count, ForcedReduceScatterAlgorithm());
  const ReduceScatterPipelining pipelining =
      ChooseReduceScatterPipelining(size(), max_count);
  GlooRingReduceScatterArgs args;
  args.input = input;
  args.output = output;
  args.counts = counts;
  args.segment_elements = pipelining.segment_elements;
  args.slot = MakeSlot(kReduceScatterSlotPrefix, 0);
  // A receive slot per peer for every segment of a block, or the window.
  int64_t per_peer = max_count;
  if (algorithm == ReduceScatterAlgorithm::kDirect &&
      pipelining.window_segments > 0) {
    args.window_segments = pipelining.window_segments;
    per_peer = std::min(
        max_count, pipelining.window_segments * pipelining.segment_elements);
  }
  args.scratch = Scratch(ring_, (size() - 1) * per_peer);
  const GlooBufferFactory factory = BufferFactory(deadline);
  if (algorithm == ReduceScatterAlgorithm::kHalving) {
    GlooHalvingReduceScatter(*context_, factory, args);
  } else if (algorithm == ReduceScatterAlgorithm::kDirect) {
    GlooDirectReduceScatter(*context_, factory, args);
  } else {
    GlooRingReduceScatter(*context_, factory, args);
  }
}

void GlooTransport::RunReduceScatter(const void* input, void* output,
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

void GlooTransport::RunAllReduce(void* buffer, int64_t count, DType dtype,
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
  switch (ChooseAllReduceAlgorithm(size(), count * int64_t{sizeof(float)},
                                   ForcedAllReduceAlgorithm())) {
    case AllReduceAlgorithm::kPairExchange:
      PairExchangeAllReduce(buffer, count, dtype, op, deadline);
      return;
    case AllReduceAlgorithm::kPairFused:
      PairAllReduce(buffer, count, counts[0], dtype, op, deadline);
      return;
    case AllReduceAlgorithm::kReduceScatterThenGather:
      break;
  }
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

void GlooTransport::PairAllReduce(void* buffer, int64_t count, int64_t split,
                                  DType dtype, ReduceOp op, MonoTime deadline) {
  const int64_t my_offset = rank() == 0 ? 0 : split;
  const int64_t mine = rank() == 0 ? split : count - split;
  // The reduce-scatter's segments and window at W = 2, from the larger
  // half (rank 0's) as the reduce-scatter's largest block: both ranks must
  // cut the halves into the same segments.
  const ReduceScatterPipelining pipelining =
      ChooseReduceScatterPipelining(size(), split);
  GlooPairAllReduceArgs args;
  args.count = count;
  args.split = split;
  args.output = buffer;
  args.element_size = core::DTypeSize(dtype);
  args.segment_elements = pipelining.segment_elements;
  args.window_segments = pipelining.window_segments;
  const int64_t window =
      pipelining.window_segments > 0
          ? pipelining.window_segments * pipelining.segment_elements
          : mine;
  args.scratch = Scratch(ring_, std::max<int64_t>(std::min(mine, window), 1));
  args.slot = MakeSlot(kAllReduceSlotPrefix, 0);
  const int divisor = op == ReduceOp::kAverage ? size() : 1;
  if (dtype == DType::kFloat32) {
    float* data = static_cast<float*>(buffer);
    args.input = data;
    args.sums = data + my_offset;
    args.finish = [divisor](float* sum, int64_t /*begin*/, int64_t n) {
      if (divisor > 1) DivideInPlace(sum, n, divisor);
    };
  } else {
    // 16-bit: reduce in fp32; each element is rounded once, by its owner,
    // and the peer receives the rounded bits.
    float* in32 = Scratch(input_f32_, count);
    WidenToFloat(buffer, dtype, in32, count);
    args.input = in32;
    args.sums = Scratch(output_f32_, std::max<int64_t>(mine, 1));
    uint16_t* out16 = static_cast<uint16_t*>(buffer);
    args.finish = [divisor, dtype, out16](float* sum, int64_t begin,
                                          int64_t n) {
      if (divisor > 1) DivideInPlace(sum, n, divisor);
      NarrowFromFloat(sum, dtype, out16 + begin, n);
    };
  }
  const GlooBufferFactory factory = BufferFactory(deadline);
  GlooPairAllReduce(*context_, factory, args);
}

void GlooTransport::PairExchangeAllReduce(void* buffer, int64_t count,
                                          DType dtype, ReduceOp op,
                                          MonoTime deadline) {
  GlooPairExchangeAllReduceArgs args;
  args.count = count;
  args.scratch = Scratch(ring_, count);
  args.slot = MakeSlot(kAllReduceSlotPrefix, 0);
  const int divisor = op == ReduceOp::kAverage ? size() : 1;
  if (dtype == DType::kFloat32) {
    float* data = static_cast<float*>(buffer);
    args.input = data;
    args.finish = [divisor, data](float* sum, int64_t begin, int64_t n) {
      if (divisor > 1) DivideInPlace(sum, n, divisor);
      std::memcpy(data + begin, sum, static_cast<size_t>(n) * sizeof(float));
    };
  } else {
    // 16-bit: reduce in fp32; both ranks round each sum once, alike.
    float* in32 = Scratch(input_f32_, count);
    WidenToFloat(buffer, dtype, in32, count);
    args.input = in32;
    uint16_t* out16 = static_cast<uint16_t*>(buffer);
    args.finish = [divisor, dtype, out16](float* sum, int64_t begin,
                                          int64_t n) {
      if (divisor > 1) DivideInPlace(sum, n, divisor);
      NarrowFromFloat(sum, dtype, out16 + begin, n);
    };
  }
  GlooPairExchangeAllReduce(*context_, BufferFactory(deadline), args);
}

void GlooTransport::RunBroadcast(void* buffer, int64_t bytes, int root,
                                 MonoTime deadline) {
  if (size() == 1 || bytes == 0) return;
  gloo::BroadcastOptions opts(context_);
  opts.setOutput<uint8_t>(
      MakeBuffer(buffer, static_cast<size_t>(bytes), deadline));
  opts.setRoot(root);
  opts.setTimeout(MillisecondsLeft(deadline));
  gloo::broadcast(opts);
}

void GlooTransport::RunBarrier(MonoTime deadline) {
  if (size() == 1) return;
  // No rank can finish gathering one byte from every rank before every rank
  // has entered.
  barrier_bytes_.resize(size());
  GatherInPlace(barrier_bytes_.data(), std::vector<size_t>(size(), 1),
                deadline);
}

}  // namespace

QueuedCollective::Identity CommunicatorIdentity(
    const GlooCollectiveOptions& options, std::string transport) {
  QueuedCollective::Identity identity;
  identity.rank = options.rank;
  identity.size = options.size;
  identity.epoch = options.epoch;
  identity.group = options.group;
  identity.transport = std::move(transport);
  identity.job_ranks = options.job_ranks;
  identity.default_op_timeout = options.default_op_timeout;
  return identity;
}

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
  return std::make_unique<QueuedCollective>(
      CommunicatorIdentity(options, "tcp"),
      std::make_unique<GlooTransport>(options.rank, options.size,
                                      std::move(device), std::move(context)));
}

}  // namespace shardd::comm
