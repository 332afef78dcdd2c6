#ifndef SHARDD_DAEMON_NODE_TESTING_GUARDED_COLLECTIVE_H_
#define SHARDD_DAEMON_NODE_TESTING_GUARDED_COLLECTIVE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "daemon/comm/collective.h"
#include "daemon/memory/testing/guarded_arena.h"

namespace shardd::node::testing {

// A communicator over GuardedArena memory, as NCCL's is over GPU memory:
// every buffer must lie in the arena (otherwise the operation fails with
// INVALID_ARGUMENT, as NCCL rejects a host pointer), and the wrapped
// communicator (Gloo, in tests) moves the bytes through the arena's backing
// aliases. Everything else is the wrapped communicator's.
//
// Device scratch as NCCL's backend keeps it (fixed reduction order): every
// reduction and barrier is planned with comm/nccl/nccl_plan.h, and one
// whose plan needs more scratch than ReserveScratch reserved fails with
// FAILED_PRECONDITION instead of running, because on a GPU it would
// allocate inside a collective that peers may have issued already.
//
// Thread-safe as the wrapped one. Shares ownership of both.
class GuardedCollective : public comm::Collective {
 public:
  GuardedCollective(std::shared_ptr<comm::Collective> inner,
                    std::shared_ptr<memory::testing::GuardedArena> arena)
      : inner_(std::move(inner)), arena_(std::move(arena)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int64_t epoch() const override { return inner_->epoch(); }

  std::shared_ptr<comm::Work> AllGather(
      const void* input, void* output, const std::vector<int64_t>& counts,
      core::DType dtype, const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> ReduceScatter(
      const void* input, void* output, const std::vector<int64_t>& counts,
      core::DType dtype, comm::ReduceOp op,
      const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> AllReduce(
      void* buffer, int64_t count, core::DType dtype, comm::ReduceOp op,
      const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> Broadcast(
      void* buffer, int64_t count, core::DType dtype, int root,
      const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> Send(const void* buffer, int64_t bytes, int peer,
                                   uint32_t tag,
                                   const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> Recv(void* buffer, int64_t bytes, int peer,
                                   uint32_t tag,
                                   const comm::OpOptions& options) override;
  std::shared_ptr<comm::Work> Barrier(const comm::OpOptions& options) override;
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }
  absl::Status AsyncError() const override { return inner_->AsyncError(); }
  comm::CollectiveStats Stats() const override { return inner_->Stats(); }
  std::shared_ptr<comm::Work> ReserveScratch(int64_t bytes) override;
  int64_t scratch_bytes() const override { return reserved_.load(); }

 private:
  // The alias of [p, p + bytes), or null when it is not in the arena.
  void* Alias(const void* p, int64_t bytes) const;
  // Null when `plan` fits the reservation, else the failed work.
  std::shared_ptr<comm::Work> UnreservedScratch(
      absl::string_view what, const absl::StatusOr<int64_t>& needed) const;

  const std::shared_ptr<comm::Collective> inner_;
  const std::shared_ptr<memory::testing::GuardedArena> arena_;
  std::atomic<int64_t> reserved_{0};
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_GUARDED_COLLECTIVE_H_
