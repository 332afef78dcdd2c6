#ifndef SHARDD_DAEMON_COMM_NCCL_NCCL_PLAN_H_
#define SHARDD_DAEMON_COMM_NCCL_NCCL_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"

// How each Collective operation maps onto NCCL calls and CUDA kernels.
//
// Pure logic, no CUDA headers: the NCCL backend (nccl_collective.cc) asks
// for a plan, then executes its calls in order on one CUDA stream. What the
// backend sends is therefore exactly what the CPU tests of this file check.
//
// Mapping (W = group size, `off(r)` = Σ_{q<r} counts[q]):
//   AllGather, equal counts    ncclAllGather
//   AllGather, uneven counts   ncclGroupStart; ncclBroadcast(root r, counts[r],
//                              into output + off(r)) for each r with
//                              counts[r] > 0; ncclGroupEnd
//   ReduceScatter, kFixed      ncclGroupStart; ncclSend(input + off(p),
//                              counts[p], peer p) and ncclRecv(slot p,
//                              counts[rank], peer p) for each p != rank;
//                              ncclGroupEnd; then our add kernels sum the
//                              slots in the fixed order below, and a copy
//                              (or the downcast) writes the output
//   ReduceScatter, kNccl equal ncclReduceScatter(ncclSum)
//   ReduceScatter, kNccl uneven
//                              ncclGroupStart; ncclReduce(root r, counts[r],
//                              input + off(r)) for each r; ncclGroupEnd
//   AllReduce, kFixed          the kFixed reduce-scatter in place on an even
//                              split (the first count % W ranks one more
//                              element, as the Gloo backend splits), then
//                              the all-gather below in place
//   AllReduce, kNccl           ncclAllReduce(ncclSum)
//   Broadcast                  ncclBroadcast (in place)
//   Send / Recv                ncclSend / ncclRecv of bytes (ncclUint8)
//   Barrier                    ncclAllReduce of one fp32 in scratch memory
//
// Why grouped broadcasts for uneven gathers (rather than W−1 send/recv
// pairs per rank): it is what torch's ProcessGroupNCCL does for allgather
// with unequal sizes; each broadcast runs NCCL's pipelined ring/tree
// collective algorithms over the communicator's existing collective
// channels, so no point-to-point connections to every peer (and their
// buffers) are set up lazily on the first uneven gather, and the group moves
// the same bytes per rank as one all-gather. Uneven reduce-scatter uses
// grouped ncclReduce for the same reasons (torch does the same).
//
// Order of summation (ReductionOrder). Invariant 2 of DESIGN.md (a run with
// failures ends bit for bit where the run without them does) needs every
// element summed in the same order on every run. NCCL's own reductions are
// deterministic only for one topology, algorithm and channel count: a
// replacement rank on other hardware, or another NCCL tuning, can change
// the ring it sums along and with it the bits. kFixed (the default) sums
// block b of a reduce-scatter as rank b+1's input, plus b+2's, ..., plus
// b's own, one IEEE fp32 addition at a time: the order of the Gloo
// backend's ring and direct algorithms, independent of NCCL's choices. It
// exchanges blocks with grouped ncclSend/ncclRecv (the same bytes per rank
// as a ring reduce-scatter) and keeps W - 1 receive slots of the rank's
// block in scratch. NCCL connects every pair of ranks that exchange, on
// first use, with its own buffers per peer: memory that grows with W.
// kNccl, NCCL's reductions, can be faster where NCCL has in-network or
// NVLink-switch reduction, and gives up the guarantee.
//
// Reductions. The interface requires bf16/fp16 reductions to accumulate in
// fp32 and round once. NCCL reduces 16-bit types in 16 bits at every hop
// of a ring (one rounding per hop), so 16-bit reductions run as: upcast
// kernel into an fp32 scratch buffer, fp32 NCCL sum in place in scratch,
// (divide), downcast kernel into the output (the only rounding to 16 bits).
// kAverage is ncclSum followed by a divide-by-W kernel, not ncclAvg: for
// floating types NCCL implements ncclAvg by pre-multiplying every input by
// 1/W (ncclDevPreMulSum), which rounds differently from "sum, then divide by
// the group size", which is what the interface (and the Gloo backend) does.
//
// Thread-safety: the functions are pure and thread-safe.
namespace shardd::comm::nccl {

// The rank and size of the group a plan is made for.
struct GroupShape {
  int rank = 0;
  int size = 1;
};

// INVALID_ARGUMENT unless 0 <= rank < size.
absl::Status ValidateGroupShape(const GroupShape& group);

// One step of a plan: an NCCL call, a group bracket, or one of our kernels.
enum class NcclCallKind {
  kGroupStart,     // ncclGroupStart()
  kGroupEnd,       // ncclGroupEnd()
  kAllGather,      // ncclAllGather(send, recv, count)
  kReduceScatter,  // ncclReduceScatter(send, recv, count, ncclSum)
  kAllReduce,      // ncclAllReduce(send, recv, count, ncclSum)
  kBroadcast,      // ncclBroadcast(send, recv, count, root)
  kReduce,         // ncclReduce(send, recv, count, ncclSum, root)
  kSend,           // ncclSend(send, count, peer)
  kRecv,           // ncclRecv(recv, count, peer)
  kUpcast,         // kernel: `count` elements of `dtype` at send -> fp32 recv
  kDowncast,       // kernel: `count` fp32 at send -> `dtype` at recv (RNE)
  kDivide,         // kernel: `count` fp32 at recv /= divisor, in place
  kAdd,            // kernel: `count` fp32 at recv += fp32 at send
  kCopy,           // cudaMemcpyAsync of `count` fp32, send -> recv
};

// See "Order of summation" above.
enum class ReductionOrder {
  kFixed,  // ring order, by our kernels after a grouped exchange
  kNccl,   // NCCL's ncclReduceScatter / ncclReduce / ncclAllReduce
};

absl::string_view ReductionOrderName(ReductionOrder order);
// "fixed" or "nccl" (ReductionOrderName's words); INVALID_ARGUMENT naming
// the accepted words otherwise.
absl::StatusOr<ReductionOrder> ParseReductionOrder(absl::string_view name);

absl::string_view NcclCallKindName(NcclCallKind kind);

// The element type on the wire: one of DType's, or raw bytes.
enum class WireType {
  kFloat32,   // ncclFloat32
  kBFloat16,  // ncclBfloat16
  kFloat16,   // ncclFloat16
  kBytes,     // ncclUint8
};

WireType WireTypeOf(core::DType dtype);
int64_t WireTypeSize(WireType type);
absl::string_view WireTypeName(WireType type);

// Which caller buffer a pointer is based on. For the in-place operations
// (AllReduce, Broadcast) the buffer is kOutput; Send reads kInput, Recv
// writes kOutput.
enum class BufferBase {
  kNone,     // unused argument (nullptr)
  kInput,    // the operation's input
  kOutput,   // the operation's output
  kScratch,  // the communicator's device scratch buffer
};

struct BufferRef {
  BufferBase base = BufferBase::kNone;
  int64_t byte_offset = 0;

  friend bool operator==(const BufferRef&, const BufferRef&) = default;
};

struct NcclCall {
  NcclCallKind kind = NcclCallKind::kGroupStart;
  BufferRef send;
  BufferRef recv;
  int64_t count = 0;  // elements of `type`
  WireType type = WireType::kFloat32;
  int root = -1;    // kBroadcast, kReduce
  int peer = -1;    // kSend, kRecv
  int divisor = 1;  // kDivide

  friend bool operator==(const NcclCall&, const NcclCall&) = default;
};

// One line per call, for test failure messages and logs.
std::string DescribeCall(const NcclCall& call);

// What one Collective operation becomes.
struct NcclPlan {
  OpKind op = OpKind::kBarrier;
  std::vector<NcclCall> calls;  // executed in order on one stream
  // Device scratch the calls need (the communicator keeps one buffer of the
  // largest size seen and reuses it).
  int64_t scratch_bytes = 0;
  // Bytes read from `input` and written to `output`; the executor checks the
  // pointers against them (CheckBuffers).
  int64_t input_bytes = 0;
  int64_t output_bytes = 0;
  // Payload bytes by the nccl-tests convention (OpCounters::bytes).
  int64_t payload_bytes = 0;
};

std::string DescribePlan(const NcclPlan& plan);

// Plans. Every invalid argument is INVALID_ARGUMENT naming the field.
absl::StatusOr<NcclPlan> PlanAllGather(const GroupShape& group,
                                       const std::vector<int64_t>& counts,
                                       core::DType dtype);
absl::StatusOr<NcclPlan> PlanReduceScatter(const GroupShape& group,
                                           const std::vector<int64_t>& counts,
                                           core::DType dtype, ReduceOp op,
                                           ReductionOrder order);
absl::StatusOr<NcclPlan> PlanAllReduce(const GroupShape& group, int64_t count,
                                       core::DType dtype, ReduceOp op,
                                       ReductionOrder order);
absl::StatusOr<NcclPlan> PlanBroadcast(const GroupShape& group, int64_t count,
                                       core::DType dtype, int root);
absl::StatusOr<NcclPlan> PlanSend(const GroupShape& group, int64_t bytes,
                                  int peer);
absl::StatusOr<NcclPlan> PlanRecv(const GroupShape& group, int64_t bytes,
                                  int peer);
absl::StatusOr<NcclPlan> PlanBarrier(const GroupShape& group);

// INVALID_ARGUMENT when the plan reads input or writes output bytes through
// a null pointer.
absl::Status CheckBuffers(const NcclPlan& plan, const void* input,
                          const void* output);

}  // namespace shardd::comm::nccl

#endif  // SHARDD_DAEMON_COMM_NCCL_NCCL_PLAN_H_
