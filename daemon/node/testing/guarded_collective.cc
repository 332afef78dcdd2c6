#include "daemon/node/testing/guarded_collective.h"

#include <numeric>

#include "absl/strings/str_cat.h"
#include "daemon/comm/completion_work.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/core/dtype.h"

namespace shardd::node::testing {
namespace {

std::shared_ptr<comm::Work> NotDeviceMemory(absl::string_view what) {
  auto work = std::make_shared<comm::CompletionWork>();
  work->Complete(absl::InvalidArgumentError(
      absl::StrCat(what, ": the buffer is not device memory")));
  return work;
}

int64_t Sum(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

absl::StatusOr<int64_t> ScratchOf(
    const absl::StatusOr<comm::nccl::NcclPlan>& plan) {
  if (!plan.ok()) return plan.status();
  return plan->scratch_bytes;
}

}  // namespace

std::shared_ptr<comm::Work> GuardedCollective::ReserveScratch(int64_t bytes) {
  auto work = std::make_shared<comm::CompletionWork>();
  if (bytes < 0) {
    work->Complete(absl::InvalidArgumentError(
        absl::StrCat("scratch bytes must be >= 0, got ", bytes)));
    return work;
  }
  int64_t held = reserved_.load();
  while (held < bytes && !reserved_.compare_exchange_weak(held, bytes)) {
  }
  work->Complete(absl::OkStatus());
  return work;
}

std::shared_ptr<comm::Work> GuardedCollective::UnreservedScratch(
    absl::string_view what, const absl::StatusOr<int64_t>& needed) const {
  // Arguments NCCL's planner rejects are the wrapped communicator's to
  // report (it checks them the same way).
  if (!needed.ok() || *needed <= reserved_.load()) return nullptr;
  auto work = std::make_shared<comm::CompletionWork>();
  work->Complete(absl::FailedPreconditionError(absl::StrCat(
      what, " needs ", *needed, " bytes of device scratch but only ",
      reserved_.load(),
      " were reserved: on a GPU it would allocate inside the collective")));
  return work;
}

std::shared_ptr<comm::Work> GuardedCollective::Barrier(
    const comm::OpOptions& options) {
  if (auto failed = UnreservedScratch(
          "barrier", ScratchOf(comm::nccl::PlanBarrier({rank(), size()})));
      failed != nullptr) {
    return failed;
  }
  return inner_->Barrier(options);
}

void* GuardedCollective::Alias(const void* p, int64_t bytes) const {
  if (!arena_->Contains(p, bytes)) return nullptr;
  return arena_->Alias(p);
}

std::shared_ptr<comm::Work> GuardedCollective::AllGather(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, const comm::OpOptions& options) {
  const int64_t elem = core::DTypeSize(dtype);
  const int r = rank();
  const int64_t mine =
      r < static_cast<int>(counts.size()) ? counts[r] * elem : 0;
  void* in = Alias(input, mine);
  void* out = Alias(output, Sum(counts) * elem);
  if (in == nullptr || out == nullptr) return NotDeviceMemory("all-gather");
  return inner_->AllGather(in, out, counts, dtype, options);
}

std::shared_ptr<comm::Work> GuardedCollective::ReduceScatter(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, comm::ReduceOp op, const comm::OpOptions& options) {
  const int64_t elem = core::DTypeSize(dtype);
  const int r = rank();
  const int64_t mine =
      r < static_cast<int>(counts.size()) ? counts[r] * elem : 0;
  void* in = Alias(input, Sum(counts) * elem);
  void* out = Alias(output, mine);
  if (in == nullptr || out == nullptr) return NotDeviceMemory("reduce-scatter");
  if (auto failed = UnreservedScratch("reduce-scatter",
                                      ScratchOf(comm::nccl::PlanReduceScatter(
                                          {r, size()}, counts, dtype, op,
                                          comm::nccl::ReductionOrder::kFixed)));
      failed != nullptr) {
    return failed;
  }
  return inner_->ReduceScatter(in, out, counts, dtype, op, options);
}

std::shared_ptr<comm::Work> GuardedCollective::AllReduce(
    void* buffer, int64_t count, core::DType dtype, comm::ReduceOp op,
    const comm::OpOptions& options) {
  void* b = Alias(buffer, count * core::DTypeSize(dtype));
  if (b == nullptr) return NotDeviceMemory("all-reduce");
  if (auto failed = UnreservedScratch("all-reduce",
                                      ScratchOf(comm::nccl::PlanAllReduce(
                                          {rank(), size()}, count, dtype, op,
                                          comm::nccl::ReductionOrder::kFixed)));
      failed != nullptr) {
    return failed;
  }
  return inner_->AllReduce(b, count, dtype, op, options);
}

std::shared_ptr<comm::Work> GuardedCollective::Broadcast(
    void* buffer, int64_t count, core::DType dtype, int root,
    const comm::OpOptions& options) {
  void* b = Alias(buffer, count * core::DTypeSize(dtype));
  if (b == nullptr) return NotDeviceMemory("broadcast");
  return inner_->Broadcast(b, count, dtype, root, options);
}

std::shared_ptr<comm::Work> GuardedCollective::Send(
    const void* buffer, int64_t bytes, int peer, uint32_t tag,
    const comm::OpOptions& options) {
  void* b = Alias(buffer, bytes);
  if (b == nullptr) return NotDeviceMemory("send");
  return inner_->Send(b, bytes, peer, tag, options);
}

std::shared_ptr<comm::Work> GuardedCollective::Recv(
    void* buffer, int64_t bytes, int peer, uint32_t tag,
    const comm::OpOptions& options) {
  void* b = Alias(buffer, bytes);
  if (b == nullptr) return NotDeviceMemory("recv");
  return inner_->Recv(b, bytes, peer, tag, options);
}

}  // namespace shardd::node::testing
