#ifndef SHARDD_DAEMON_COMM_VERIFIED_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_VERIFIED_COLLECTIVE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"

namespace shardd::comm {

// What a rank says it is about to run, for VerifiedCollective. Trivially
// copyable: it travels as bytes.
struct OpDescriptor {
  uint64_t sequence = 0;     // Operations verified on this communicator before.
  int32_t kind = 0;          // OpKind.
  int32_t dtype = 0;         // core::DType (element size for all-gather).
  int32_t reduce_op = -1;    // ReduceOp, or -1.
  int32_t root = -1;         // Broadcast's root, or -1.
  int64_t elements = 0;      // Σ counts, or the count.
  uint64_t counts_hash = 0;  // FNV-1a of the counts vector (0 without one).
  uint64_t tag = 0;          // OpOptions::match_tag.

  bool operator==(const OpDescriptor& other) const;
  // "op #12 all-reduce of 4096 fp32 (sum)", for messages.
  std::string ToString() const;
};

// A communicator that checks, before each collective, that every rank of
// the group is about to run the same one (the same kind, element type,
// counts, reduction, root and OpOptions::match_tag, as the same operation
// of the sequence), in the manner of PyTorch's
// TORCH_DISTRIBUTED_DEBUG=DETAIL.
//
// Why: ranks are matched by order only, so two ranks that issue different
// collectives at the same place of the sequence (a bug of the step
// protocol, e.g. a trainer carrying a step attempt into a new epoch) get
// each other's bytes back as a success. Here every rank all-gathers the
// descriptor of its next collective first; a difference fails that
// operation on every rank with INTERNAL naming both ranks' operations
// (each rank sees all descriptors, so all fail at once), and the
// communicator is aborted, so nothing later runs on it. Send and Recv are
// not checked (they are matched by peer and tag).
//
// The cost is an extra small all-gather per collective, and the caller's
// thread waits for it before the collective is issued, so operations no
// longer overlap their issue: a debugging and testing mode (shardd
// --verify_collectives), not the default.
//
// Thread-safe: checks and issues one operation at a time, so that the
// descriptors and the operations keep one order. Shares ownership of the
// inner communicator.
class VerifiedCollective final : public Collective {
 public:
  // `group` names the communicator in messages.
  VerifiedCollective(std::shared_ptr<Collective> inner, std::string group);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  int64_t epoch() const override { return inner_->epoch(); }

  std::shared_ptr<Work> AllGather(const void* input, void* output,
                                  const std::vector<int64_t>& counts,
                                  core::DType dtype,
                                  const OpOptions& options) override;
  std::shared_ptr<Work> ReduceScatter(const void* input, void* output,
                                      const std::vector<int64_t>& counts,
                                      core::DType dtype, ReduceOp op,
                                      const OpOptions& options) override;
  std::shared_ptr<Work> AllReduce(void* buffer, int64_t count,
                                  core::DType dtype, ReduceOp op,
                                  const OpOptions& options) override;
  std::shared_ptr<Work> Broadcast(void* buffer, int64_t count,
                                  core::DType dtype, int root,
                                  const OpOptions& options) override;
  std::shared_ptr<Work> Send(const void* buffer, int64_t bytes, int peer,
                             uint32_t tag, const OpOptions& options) override {
    return inner_->Send(buffer, bytes, peer, tag, options);
  }
  std::shared_ptr<Work> Recv(void* buffer, int64_t bytes, int peer,
                             uint32_t tag, const OpOptions& options) override {
    return inner_->Recv(buffer, bytes, peer, tag, options);
  }
  std::shared_ptr<Work> Barrier(const OpOptions& options) override;

  void Abort(absl::string_view reason) override { inner_->Abort(reason); }
  absl::Status AsyncError() const override { return inner_->AsyncError(); }
  CollectiveStats Stats() const override { return inner_->Stats(); }
  std::shared_ptr<Work> ReserveScratch(int64_t bytes) override {
    return inner_->ReserveScratch(bytes);
  }
  int64_t scratch_bytes() const override { return inner_->scratch_bytes(); }

  // FNV-1a of `counts` (what OpDescriptor carries).
  static uint64_t HashCounts(const std::vector<int64_t>& counts);
  // OK when every descriptor of `all` (rank order) equals `all[rank]`;
  // otherwise INTERNAL naming this rank's operation and the first rank's
  // that differs. Pure.
  static absl::Status Compare(const std::vector<OpDescriptor>& all, int rank,
                              int64_t epoch, absl::string_view group);

 private:
  template <typename IssueFn>
  std::shared_ptr<Work> Verified(OpDescriptor descriptor,
                                 const OpOptions& options, IssueFn&& issue);

  const std::shared_ptr<Collective> inner_;
  const std::string group_;
  absl::Mutex mu_;
  uint64_t sequence_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_VERIFIED_COLLECTIVE_H_
