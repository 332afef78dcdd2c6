#include "daemon/comm/nccl/nccl_plan.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::comm::nccl {
namespace {

constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

absl::Status CheckDType(core::DType dtype) {
  if (!core::IsValidDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: unsupported value ", static_cast<int>(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(absl::string_view field, int64_t count,
                        int64_t element_size) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be >= 0, got ", count));
  }
  if (count > kMaxBytes / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", count, " overflows 64-bit byte counts"));
  }
  return absl::OkStatus();
}

absl::Status CheckRank(absl::string_view field, int value,
                       const GroupShape& group) {
  if (value < 0 || value >= group.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", value, " is outside the group of ", group.size, " ranks"));
  }
  return absl::OkStatus();
}

// Validates counts and returns the element offset of every rank's range
// (offsets[size] is the total).
absl::StatusOr<std::vector<int64_t>> CountOffsets(
    const GroupShape& group, const std::vector<int64_t>& counts,
    int64_t element_size) {
  if (counts.size() != static_cast<size_t>(group.size)) {
    return absl::InvalidArgumentError(absl::StrCat("counts has ", counts.size(),
                                                   " entries; the group has ",
                                                   group.size, " ranks"));
  }
  // Every byte offset below is at most 4 * total (fp32 scratch), so the
  // total is bounded by what fits 4-byte elements, whatever the dtype.
  const int64_t limit = kMaxBytes / 4;
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("counts[", r, "] must be >= 0, got ", counts[r]));
    }
    if (counts[r] > limit - offsets[r]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "counts: the total up to counts[", r,
          "] overflows 64-bit byte counts (element size ", element_size, ")"));
    }
    offsets[r + 1] = offsets[r] + counts[r];
  }
  return offsets;
}

bool AllEqual(const std::vector<int64_t>& counts) {
  for (int64_t c : counts) {
    if (c != counts.front()) return false;
  }
  return true;
}

BufferRef At(BufferBase base, int64_t byte_offset = 0) {
  return BufferRef{base, byte_offset};
}

NcclCall Collective(NcclCallKind kind, BufferRef send, BufferRef recv,
                    int64_t count, WireType type, int root = -1) {
  NcclCall call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.type = type;
  call.root = root;
  return call;
}

NcclCall Bracket(NcclCallKind kind) {
  NcclCall call;
  call.kind = kind;
  call.count = 0;
  return call;
}

NcclCall Kernel(NcclCallKind kind, BufferRef src, BufferRef dst, int64_t count,
                WireType type, int divisor = 1) {
  NcclCall call;
  call.kind = kind;
  call.send = src;
  call.recv = dst;
  call.count = count;
  call.type = type;
  call.divisor = divisor;
  return call;
}

// Appends `count` fp32 elements at `where` /= group size, when that changes
// anything.
void AppendAverage(const GroupShape& group, ReduceOp op, BufferRef where,
                   int64_t count, std::vector<NcclCall>* calls) {
  if (op != ReduceOp::kAverage || group.size == 1 || count == 0) return;
  calls->push_back(Kernel(NcclCallKind::kDivide, BufferRef{}, where, count,
                          WireType::kFloat32, group.size));
}

bool IsLowPrecision(core::DType dtype) {
  return dtype == core::DType::kBFloat16 || dtype == core::DType::kFloat16;
}

absl::Status CheckReduceOp(ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError(
        absl::StrCat("op: unsupported reduce op ", static_cast<int>(op)));
  }
  return absl::OkStatus();
}

NcclCall PointToPoint(NcclCallKind kind, BufferRef buffer, int64_t count,
                      int peer) {
  NcclCall call;
  call.kind = kind;
  (kind == NcclCallKind::kSend ? call.send : call.recv) = buffer;
  call.count = count;
  call.type = WireType::kFloat32;
  call.peer = peer;
  return call;
}

BufferRef Plus(BufferRef ref, int64_t bytes) {
  ref.byte_offset += bytes;
  return ref;
}

// The kFixed reduce-scatter of fp32 data (nccl_plan.h): block p of `data`
// (element offsets `offsets`) goes to rank p, this rank's W - 1 receive
// slots of counts[rank] fp32 start at scratch byte `slots_at` (slot i - 1
// for peer rank + i), and the sum is left in the first slot, which is
// returned (nothing is summed when counts[rank] == 0). W >= 2.
BufferRef AppendFixedReduceScatter(const GroupShape& group,
                                   const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& offsets,
                                   BufferRef data, int64_t slots_at,
                                   std::vector<NcclCall>* calls) {
  constexpr int64_t kF32 = 4;
  const int w = group.size;
  const int64_t mine = counts[group.rank];
  auto slot = [&](int i) {
    return At(BufferBase::kScratch, slots_at + (i - 1) * mine * kF32);
  };
  calls->push_back(Bracket(NcclCallKind::kGroupStart));
  for (int i = 1; i < w; ++i) {
    const int peer = (group.rank + i) % w;
    // Every rank skips the same pairs: nothing goes to a rank whose block
    // is empty, and that rank expects nothing.
    if (counts[peer] > 0) {
      calls->push_back(PointToPoint(NcclCallKind::kSend,
                                    Plus(data, offsets[peer] * kF32),
                                    counts[peer], peer));
    }
    if (mine > 0) {
      calls->push_back(PointToPoint(NcclCallKind::kRecv, slot(i), mine, peer));
    }
  }
  calls->push_back(Bracket(NcclCallKind::kGroupEnd));
  const BufferRef sum = slot(1);
  if (mine == 0) return sum;
  // (((in[r+1] + in[r+2]) + ...) + in[r-1]) + in[r].
  for (int i = 2; i < w; ++i) {
    calls->push_back(
        Kernel(NcclCallKind::kAdd, slot(i), sum, mine, WireType::kFloat32));
  }
  calls->push_back(Kernel(NcclCallKind::kAdd,
                          Plus(data, offsets[group.rank] * kF32), sum, mine,
                          WireType::kFloat32));
  return sum;
}

// Gathers every rank's block into `output` (element offsets `offsets`,
// element size `es`), this rank's block read from `own`: one ncclAllGather
// when the counts are equal (in place when `own` is this rank's block of
// the output, as NCCL defines it), else grouped broadcasts.
void AppendGather(const GroupShape& group, const std::vector<int64_t>& counts,
                  const std::vector<int64_t>& offsets, int64_t es,
                  WireType type, BufferRef own, std::vector<NcclCall>* calls) {
  if (AllEqual(counts)) {
    calls->push_back(Collective(NcclCallKind::kAllGather, own,
                                At(BufferBase::kOutput), counts[0], type));
    return;
  }
  calls->push_back(Bracket(NcclCallKind::kGroupStart));
  for (int r = 0; r < group.size; ++r) {
    if (counts[r] == 0) continue;  // every rank skips the same roots
    // Only the root reads its send buffer; the others pass null.
    const BufferRef send = r == group.rank ? own : BufferRef{};
    calls->push_back(Collective(NcclCallKind::kBroadcast, send,
                                At(BufferBase::kOutput, offsets[r] * es),
                                counts[r], type, r));
  }
  calls->push_back(Bracket(NcclCallKind::kGroupEnd));
}

absl::Status CheckPeer(const GroupShape& group, int peer) {
  if (absl::Status s = CheckRank("peer", peer, group); !s.ok()) return s;
  if (peer == group.rank) {
    // Send and Recv are separate operations that run one at a time, so a
    // send to self would wait for a receive queued behind it.
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer,
                     " is this rank; a rank cannot send to or "
                     "receive from itself"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGroupShape(const GroupShape& group) {
  if (group.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("size must be >= 1, got ", group.size));
  }
  if (group.rank < 0 || group.rank >= group.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", group.rank, " is outside [0, ", group.size, ")"));
  }
  return absl::OkStatus();
}

absl::string_view NcclCallKindName(NcclCallKind kind) {
  switch (kind) {
    case NcclCallKind::kGroupStart:
      return "ncclGroupStart";
    case NcclCallKind::kGroupEnd:
      return "ncclGroupEnd";
    case NcclCallKind::kAllGather:
      return "ncclAllGather";
    case NcclCallKind::kReduceScatter:
      return "ncclReduceScatter";
    case NcclCallKind::kAllReduce:
      return "ncclAllReduce";
    case NcclCallKind::kBroadcast:
      return "ncclBroadcast";
    case NcclCallKind::kReduce:
      return "ncclReduce";
    case NcclCallKind::kSend:
      return "ncclSend";
    case NcclCallKind::kRecv:
      return "ncclRecv";
    case NcclCallKind::kUpcast:
      return "upcast";
    case NcclCallKind::kDowncast:
      return "downcast";
    case NcclCallKind::kDivide:
      return "divide";
    case NcclCallKind::kAdd:
      return "add";
    case NcclCallKind::kCopy:
      return "copy";
  }
  return "unknown";
}

absl::StatusOr<ReductionOrder> ParseReductionOrder(absl::string_view name) {
  for (ReductionOrder order : {ReductionOrder::kFixed, ReductionOrder::kNccl}) {
    if (name == ReductionOrderName(order)) return order;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("reduction order '", name, "' is not one of: fixed, nccl"));
}

absl::string_view ReductionOrderName(ReductionOrder order) {
  switch (order) {
    case ReductionOrder::kFixed:
      return "fixed";
    case ReductionOrder::kNccl:
      return "nccl";
  }
  return "unknown";
}

WireType WireTypeOf(core::DType dtype) {
  switch (dtype) {
    case core::DType::kFloat32:
      return WireType::kFloat32;
    case core::DType::kBFloat16:
      return WireType::kBFloat16;
    case core::DType::kFloat16:
      return WireType::kFloat16;
  }
  return WireType::kBytes;
}

int64_t WireTypeSize(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return 4;
    case WireType::kBFloat16:
    case WireType::kFloat16:
      return 2;
    case WireType::kBytes:
      return 1;
  }
  return 1;
}

absl::string_view WireTypeName(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return "fp32";
    case WireType::kBFloat16:
      return "bf16";
    case WireType::kFloat16:
      return "fp16";
    case WireType::kBytes:
      return "bytes";
  }
  return "unknown";
}

std::string DescribeCall(const NcclCall& call) {
  auto ref = [](const BufferRef& b) -> std::string {
    switch (b.base) {
      case BufferBase::kNone:
        return "null";
      case BufferBase::kInput:
        return absl::StrCat("input+", b.byte_offset);
      case BufferBase::kOutput:
        return absl::StrCat("output+", b.byte_offset);
      case BufferBase::kScratch:
        return absl::StrCat("scratch+", b.byte_offset);
    }
    return "?";
  };
  if (call.kind == NcclCallKind::kGroupStart ||
      call.kind == NcclCallKind::kGroupEnd) {
    return std::string(NcclCallKindName(call.kind));
  }
  std::string out = absl::StrCat(NcclCallKindName(call.kind), "(",
                                 ref(call.send), " -> ", ref(call.recv), ", ",
                                 call.count, " x ", WireTypeName(call.type));
  if (call.root >= 0) absl::StrAppend(&out, ", root ", call.root);
  if (call.peer >= 0) absl::StrAppend(&out, ", peer ", call.peer);
  if (call.kind == NcclCallKind::kDivide) {
    absl::StrAppend(&out, ", / ", call.divisor);
  }
  absl::StrAppend(&out, ")");
  return out;
}

std::string DescribePlan(const NcclPlan& plan) {
  std::vector<std::string> lines;
  lines.reserve(plan.calls.size() + 1);
  lines.push_back(absl::StrCat(
      OpKindName(plan.op), ": scratch ", plan.scratch_bytes, " B, input ",
      plan.input_bytes, " B, output ", plan.output_bytes, " B"));
  for (const NcclCall& call : plan.calls) lines.push_back(DescribeCall(call));
  return absl::StrJoin(lines, "\n  ");
}

absl::StatusOr<NcclPlan> PlanAllGather(const GroupShape& group,
                                       const std::vector<int64_t>& counts,
                                       core::DType dtype) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckDType(dtype); !s.ok()) return s;
  const int64_t es = core::DTypeSize(dtype);
  absl::StatusOr<std::vector<int64_t>> offsets =
      CountOffsets(group, counts, es);
  if (!offsets.ok()) return offsets.status();
  const int64_t total = offsets->back();
  const WireType type = WireTypeOf(dtype);

  NcclPlan plan;
  plan.op = OpKind::kAllGather;
  plan.input_bytes = counts[group.rank] * es;
  plan.output_bytes = total * es;
  plan.payload_bytes = total * es;
  if (total == 0) return plan;
  // In place works as NCCL defines it: input == output + rank * count.
  AppendGather(group, counts, *offsets, es, type, At(BufferBase::kInput),
               &plan.calls);
  return plan;
}

absl::StatusOr<NcclPlan> PlanReduceScatter(const GroupShape& group,
                                           const std::vector<int64_t>& counts,
                                           core::DType dtype, ReduceOp op,
                                           ReductionOrder order) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckDType(dtype); !s.ok()) return s;
  if (absl::Status s = CheckReduceOp(op); !s.ok()) return s;
  const int64_t es = core::DTypeSize(dtype);
  absl::StatusOr<std::vector<int64_t>> offsets =
      CountOffsets(group, counts, es);
  if (!offsets.ok()) return offsets.status();
  const int64_t total = offsets->back();
  const int64_t mine = counts[group.rank];

  NcclPlan plan;
  plan.op = OpKind::kReduceScatter;
  plan.input_bytes = total * es;
  plan.output_bytes = mine * es;
  plan.payload_bytes = total * es;
  if (total == 0) return plan;

  // 16-bit inputs reduce in an fp32 copy of the whole input, in place; fp32
  // inputs reduce straight from input to output.
  const bool upcast = IsLowPrecision(dtype);
  constexpr int64_t kF32 = 4;
  // One rank sums nothing: NCCL's single-rank reduce-scatter is a copy.
  if (order == ReductionOrder::kFixed && group.size > 1) {
    const int64_t slots_at = upcast ? total * kF32 : 0;
    plan.scratch_bytes = slots_at + (group.size - 1) * mine * kF32;
    if (upcast) {
      plan.calls.push_back(Kernel(NcclCallKind::kUpcast, At(BufferBase::kInput),
                                  At(BufferBase::kScratch), total,
                                  WireTypeOf(dtype)));
    }
    const BufferRef sum = AppendFixedReduceScatter(
        group, counts, *offsets,
        upcast ? At(BufferBase::kScratch) : At(BufferBase::kInput), slots_at,
        &plan.calls);
    if (mine == 0) return plan;
    AppendAverage(group, op, sum, mine, &plan.calls);
    // The output may be this rank's block of the input (in place): it is
    // written only now, after the block was added.
    plan.calls.push_back(
        Kernel(upcast ? NcclCallKind::kDowncast : NcclCallKind::kCopy, sum,
               At(BufferBase::kOutput), mine,
               upcast ? WireTypeOf(dtype) : WireType::kFloat32));
    return plan;
  }
  auto src = [&](int r) {
    return upcast ? At(BufferBase::kScratch, (*offsets)[r] * kF32)
                  : At(BufferBase::kInput, (*offsets)[r] * es);
  };
  const BufferRef result =
      upcast ? src(group.rank) : At(BufferBase::kOutput, 0);
  if (upcast) {
    plan.scratch_bytes = total * kF32;
    plan.calls.push_back(Kernel(NcclCallKind::kUpcast, At(BufferBase::kInput),
                                At(BufferBase::kScratch), total,
                                WireTypeOf(dtype)));
  }
  if (AllEqual(counts)) {
    plan.calls.push_back(Collective(NcclCallKind::kReduceScatter, src(0),
                                    result, counts[0], WireType::kFloat32));
    if (!upcast) plan.calls.back().type = WireTypeOf(dtype);
  } else {
    plan.calls.push_back(Bracket(NcclCallKind::kGroupStart));
    for (int r = 0; r < group.size; ++r) {
      if (counts[r] == 0) continue;
      // Only root r writes its receive buffer; the others pass null.
      const BufferRef recv = r == group.rank ? result : BufferRef{};
      plan.calls.push_back(Collective(NcclCallKind::kReduce, src(r), recv,
                                      counts[r], WireType::kFloat32, r));
      if (!upcast) plan.calls.back().type = WireTypeOf(dtype);
    }
    plan.calls.push_back(Bracket(NcclCallKind::kGroupEnd));
  }
  AppendAverage(group, op, result, mine, &plan.calls);
  if (upcast && mine > 0) {
    plan.calls.push_back(Kernel(NcclCallKind::kDowncast, result,
                                At(BufferBase::kOutput), mine,
                                WireTypeOf(dtype)));
  }
  return plan;
}

absl::StatusOr<NcclPlan> PlanAllReduce(const GroupShape& group, int64_t count,
                                       core::DType dtype, ReduceOp op,
                                       ReductionOrder order) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckDType(dtype); !s.ok()) return s;
  if (absl::Status s = CheckReduceOp(op); !s.ok()) return s;
  // Bounded by 4-byte elements: 16-bit buffers reduce in fp32 scratch.
  if (absl::Status s = CheckCount("count", count, 4); !s.ok()) return s;
  const int64_t es = core::DTypeSize(dtype);

  NcclPlan plan;
  plan.op = OpKind::kAllReduce;
  plan.input_bytes = 0;
  plan.output_bytes = count * es;
  plan.payload_bytes = count * es;
  if (count == 0) return plan;
  if (order == ReductionOrder::kFixed && group.size > 1) {
    constexpr int64_t kF32 = 4;
    const int w = group.size;
    std::vector<int64_t> counts(w);
    std::vector<int64_t> offsets(w + 1, 0);
    for (int r = 0; r < w; ++r) {
      counts[r] = count / w + (r < count % w ? 1 : 0);
      offsets[r + 1] = offsets[r] + counts[r];
    }
    const int64_t mine = counts[group.rank];
    const bool upcast = IsLowPrecision(dtype);
    const int64_t slots_at = upcast ? count * kF32 : 0;
    plan.scratch_bytes = slots_at + (w - 1) * mine * kF32;
    if (upcast) {
      plan.calls.push_back(
          Kernel(NcclCallKind::kUpcast, At(BufferBase::kOutput),
                 At(BufferBase::kScratch), count, WireTypeOf(dtype)));
    }
    const BufferRef sum = AppendFixedReduceScatter(
        group, counts, offsets,
        upcast ? At(BufferBase::kScratch) : At(BufferBase::kOutput), slots_at,
        &plan.calls);
    const BufferRef own = At(BufferBase::kOutput, offsets[group.rank] * es);
    if (mine > 0) {
      AppendAverage(group, op, sum, mine, &plan.calls);
      // Each element is rounded once, by its owner; the gather copies bits.
      plan.calls.push_back(
          Kernel(upcast ? NcclCallKind::kDowncast : NcclCallKind::kCopy, sum,
                 own, mine, upcast ? WireTypeOf(dtype) : WireType::kFloat32));
    }
    AppendGather(group, counts, offsets, es, WireTypeOf(dtype), own,
                 &plan.calls);
    return plan;
  }
  if (IsLowPrecision(dtype)) {
    const BufferRef scratch = At(BufferBase::kScratch);
    plan.scratch_bytes = count * 4;
    plan.calls.push_back(Kernel(NcclCallKind::kUpcast, At(BufferBase::kOutput),
                                scratch, count, WireTypeOf(dtype)));
    plan.calls.push_back(Collective(NcclCallKind::kAllReduce, scratch, scratch,
                                    count, WireType::kFloat32));
    AppendAverage(group, op, scratch, count, &plan.calls);
    plan.calls.push_back(Kernel(NcclCallKind::kDowncast, scratch,
                                At(BufferBase::kOutput), count,
                                WireTypeOf(dtype)));
    return plan;
  }
  const BufferRef buffer = At(BufferBase::kOutput);
  plan.calls.push_back(Collective(NcclCallKind::kAllReduce, buffer, buffer,
                                  count, WireType::kFloat32));
  AppendAverage(group, op, buffer, count, &plan.calls);
  return plan;
}

absl::StatusOr<NcclPlan> PlanBroadcast(const GroupShape& group, int64_t count,
                                       core::DType dtype, int root) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckDType(dtype); !s.ok()) return s;
  const int64_t es = core::DTypeSize(dtype);
  if (absl::Status s = CheckCount("count", count, es); !s.ok()) return s;
  if (absl::Status s = CheckRank("root", root, group); !s.ok()) return s;

  NcclPlan plan;
  plan.op = OpKind::kBroadcast;
  plan.output_bytes = count * es;
  plan.payload_bytes = count * es;
  if (count == 0) return plan;
  const BufferRef buffer = At(BufferBase::kOutput);
  plan.calls.push_back(Collective(NcclCallKind::kBroadcast, buffer, buffer,
                                  count, WireTypeOf(dtype), root));
  return plan;
}

absl::StatusOr<NcclPlan> PlanSend(const GroupShape& group, int64_t bytes,
                                  int peer) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckCount("bytes", bytes, 1); !s.ok()) return s;
  if (absl::Status s = CheckPeer(group, peer); !s.ok()) return s;
  NcclPlan plan;
  plan.op = OpKind::kSend;
  plan.input_bytes = bytes;
  plan.payload_bytes = bytes;
  if (bytes == 0) return plan;
  NcclCall call;
  call.kind = NcclCallKind::kSend;
  call.send = At(BufferBase::kInput);
  call.count = bytes;
  call.type = WireType::kBytes;
  call.peer = peer;
  plan.calls.push_back(call);
  return plan;
}

absl::StatusOr<NcclPlan> PlanRecv(const GroupShape& group, int64_t bytes,
                                  int peer) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  if (absl::Status s = CheckCount("bytes", bytes, 1); !s.ok()) return s;
  if (absl::Status s = CheckPeer(group, peer); !s.ok()) return s;
  NcclPlan plan;
  plan.op = OpKind::kRecv;
  plan.output_bytes = bytes;
  plan.payload_bytes = bytes;
  if (bytes == 0) return plan;
  NcclCall call;
  call.kind = NcclCallKind::kRecv;
  call.recv = At(BufferBase::kOutput);
  call.count = bytes;
  call.type = WireType::kBytes;
  call.peer = peer;
  plan.calls.push_back(call);
  return plan;
}

absl::StatusOr<NcclPlan> PlanBarrier(const GroupShape& group) {
  if (absl::Status s = ValidateGroupShape(group); !s.ok()) return s;
  NcclPlan plan;
  plan.op = OpKind::kBarrier;
  // NCCL has no barrier: an all-reduce of one float cannot complete on any
  // rank before every rank has entered it (as torch's barrier does).
  plan.scratch_bytes = 4;
  const BufferRef scratch = At(BufferBase::kScratch);
  plan.calls.push_back(Collective(NcclCallKind::kAllReduce, scratch, scratch, 1,
                                  WireType::kFloat32));
  return plan;
}

absl::Status CheckBuffers(const NcclPlan& plan, const void* input,
                          const void* output) {
  if (plan.input_bytes > 0 && input == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        plan.op == OpKind::kSend ? "buffer" : "input", " is null but ",
        OpKindName(plan.op), " reads ", plan.input_bytes, " bytes from it"));
  }
  if (plan.output_bytes > 0 && output == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        plan.op == OpKind::kAllReduce || plan.op == OpKind::kBroadcast ||
                plan.op == OpKind::kRecv
            ? "buffer"
            : "output",
        " is null but ", OpKindName(plan.op), " writes ", plan.output_bytes,
        " bytes to it"));
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm::nccl
