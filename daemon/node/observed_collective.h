#ifndef SHARDD_DAEMON_NODE_OBSERVED_COLLECTIVE_H_
#define SHARDD_DAEMON_NODE_OBSERVED_COLLECTIVE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"

namespace shardd::node {

// A Collective that reports every collective operation to a NodeObserver
// (the latency histograms and byte counters of /metrics) and otherwise
// forwards to the communicator it wraps. The time reported runs from issue
// to completion, as a trainer waiting on it sees it; bytes follow the
// nccl-tests convention (the whole buffer: all-gather output,
// reduce-scatter input). Send, Recv and Barrier are forwarded unreported.
//
// Thread-safe as the wrapped communicator is. Shares ownership of `inner`;
// `observer` is not owned and must outlive every operation issued.
class ObservedCollective : public comm::Collective {
 public:
  ObservedCollective(std::shared_ptr<comm::Collective> inner, std::string group,
                     metrics::NodeObserver* observer)
      : inner_(std::move(inner)),
        group_(std::move(group)),
        observer_(observer) {}

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
                                   const comm::OpOptions& options) override {
    return inner_->Send(buffer, bytes, peer, tag, options);
  }
  std::shared_ptr<comm::Work> Recv(void* buffer, int64_t bytes, int peer,
                                   uint32_t tag,
                                   const comm::OpOptions& options) override {
    return inner_->Recv(buffer, bytes, peer, tag, options);
  }
  std::shared_ptr<comm::Work> Barrier(const comm::OpOptions& options) override {
    return inner_->Barrier(options);
  }
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }
  absl::Status AsyncError() const override { return inner_->AsyncError(); }
  comm::CollectiveStats Stats() const override { return inner_->Stats(); }
  std::shared_ptr<comm::Work> ReserveScratch(int64_t bytes) override {
    return inner_->ReserveScratch(bytes);
  }
  int64_t scratch_bytes() const override { return inner_->scratch_bytes(); }

 private:
  // `issued`: taken before the inner call, which may run the operation on
  // the calling thread (OpOptions::caller_waits).
  std::shared_ptr<comm::Work> Observe(std::shared_ptr<comm::Work> work,
                                      const char* op, int64_t bytes,
                                      MonoTime issued);

  const std::shared_ptr<comm::Collective> inner_;
  const std::string group_;
  metrics::NodeObserver* const observer_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_OBSERVED_COLLECTIVE_H_
