#include "daemon/node/observed_collective.h"

#include <numeric>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace shardd::node {
namespace {

// Reports once, when the wrapped operation is first seen finished.
class ObservedWork : public comm::Work {
 public:
  ObservedWork(std::shared_ptr<comm::Work> inner,
               metrics::NodeObserver* observer, const char* op,
               const std::string& group, int64_t bytes, MonoTime issued)
      : inner_(std::move(inner)),
        observer_(observer),
        op_(op),
        group_(group),
        bytes_(bytes),
        issued_(issued) {}

  absl::Status Wait() override {
    absl::Status s = inner_->Wait();
    Report(s);
    return s;
  }
  bool Done() const override { return inner_->Done(); }

 private:
  void Report(const absl::Status& s) {
    absl::MutexLock lock(&mu_);
    if (reported_) return;
    reported_ = true;
    observer_->CollectiveDone(op_, group_, bytes_, MonoNow() - issued_, s.ok());
  }

  const std::shared_ptr<comm::Work> inner_;
  metrics::NodeObserver* const observer_;
  const char* const op_;
  const std::string group_;
  const int64_t bytes_;
  const MonoTime issued_;
  absl::Mutex mu_;
  bool reported_ ABSL_GUARDED_BY(mu_) = false;
};

int64_t Total(const std::vector<int64_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

}  // namespace

std::shared_ptr<comm::Work> ObservedCollective::Observe(
    std::shared_ptr<comm::Work> work, const char* op, int64_t bytes,
    MonoTime issued) {
  if (observer_ == nullptr) return work;
  return std::make_shared<ObservedWork>(std::move(work), observer_, op, group_,
                                        bytes, issued);
}

std::shared_ptr<comm::Work> ObservedCollective::AllGather(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, const comm::OpOptions& options) {
  const MonoTime issued = MonoNow();
  return Observe(inner_->AllGather(input, output, counts, dtype, options),
                 metrics::node_labels::kAllGather,
                 Total(counts) * core::DTypeSize(dtype), issued);
}

std::shared_ptr<comm::Work> ObservedCollective::ReduceScatter(
    const void* input, void* output, const std::vector<int64_t>& counts,
    core::DType dtype, comm::ReduceOp op, const comm::OpOptions& options) {
  const MonoTime issued = MonoNow();
  return Observe(
      inner_->ReduceScatter(input, output, counts, dtype, op, options),
      metrics::node_labels::kReduceScatter,
      Total(counts) * core::DTypeSize(dtype), issued);
}

std::shared_ptr<comm::Work> ObservedCollective::AllReduce(
    void* buffer, int64_t count, core::DType dtype, comm::ReduceOp op,
    const comm::OpOptions& options) {
  const MonoTime issued = MonoNow();
  return Observe(inner_->AllReduce(buffer, count, dtype, op, options),
                 metrics::node_labels::kAllReduce,
                 count * core::DTypeSize(dtype), issued);
}

std::shared_ptr<comm::Work> ObservedCollective::Broadcast(
    void* buffer, int64_t count, core::DType dtype, int root,
    const comm::OpOptions& options) {
  const MonoTime issued = MonoNow();
  return Observe(inner_->Broadcast(buffer, count, dtype, root, options),
                 metrics::node_labels::kBroadcast,
                 count * core::DTypeSize(dtype), issued);
}

}  // namespace shardd::node
