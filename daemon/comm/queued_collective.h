#ifndef SHARDD_DAEMON_COMM_QUEUED_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_QUEUED_COLLECTIVE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/collective_transport.h"
#include "daemon/comm/completion_work.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

// A host communicator: everything of the Collective contract that does not
// depend on how bytes move, around a CollectiveTransport that moves them.
//
// Responsible for: validating each operation's arguments (op_validation;
// INVALID_ARGUMENT without touching the communicator), running operations
// one at a time in issue order on its worker thread (or on the caller's
// thread for OpOptions::caller_waits while idle), starting a run of Sends
// and Recvs queued back to back together and completing them in order,
// the Work handles, the per-kind counters, and the communicator's life
// cycle: the first failure (or Abort) becomes the error of every queued and
// later operation, and the transport is told to Break (or Abort) so that
// peers fail fast.
//
// Thread-safe. Owns the transport and destroys it after its worker has
// stopped; a communicator destroyed while busy aborts first.
class QueuedCollective final : public Collective {
 public:
  struct Identity {
    int rank = 0;
    int size = 1;
    int64_t epoch = 0;
    std::string group;
    // Named in error messages: "tcp", "shm".
    std::string transport;
    // The job rank of each group rank, named in error messages (whose
    // "rank 1 did not reach ..." counts group ranks); empty: not known.
    std::vector<int> job_ranks;
    // Deadline of an operation whose OpOptions leave it unset.
    absl::Duration default_op_timeout = absl::Seconds(30);
  };

  QueuedCollective(Identity identity,
                   std::unique_ptr<CollectiveTransport> transport);
  ~QueuedCollective() override;

  QueuedCollective(const QueuedCollective&) = delete;
  QueuedCollective& operator=(const QueuedCollective&) = delete;

  int rank() const override { return id_.rank; }
  int size() const override { return id_.size; }
  int64_t epoch() const override { return id_.epoch; }

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
                             uint32_t tag, const OpOptions& options) override;
  std::shared_ptr<Work> Recv(void* buffer, int64_t bytes, int peer,
                             uint32_t tag, const OpOptions& options) override;
  std::shared_ptr<Work> Barrier(const OpOptions& options) override;

  void Abort(absl::string_view reason) override;
  absl::Status AsyncError() const override;
  CollectiveStats Stats() const override;

 private:
  using PointToPoint = CollectiveTransport::PointToPoint;
  // A collective's body: the transport call with the operation's deadline.
  using Body = std::function<absl::Status(MonoTime deadline)>;

  struct Op {
    OpKind kind = OpKind::kBarrier;
    int64_t bytes = 0;
    absl::Duration timeout;
    Body body;  // Null for Send and Recv, which use `p2p`.
    PointToPoint p2p;
    std::shared_ptr<CompletionWork> work;
    bool point_to_point() const { return body == nullptr; }
  };
  // The most Sends and Recvs started at once.
  static constexpr size_t kMaxPointToPointBatch = 256;

  std::shared_ptr<Work> Enqueue(Op op, const OpOptions& options);
  std::shared_ptr<Work> Reject(OpKind kind, absl::Status status);
  std::shared_ptr<Work> PointToPointOp(OpKind kind, void* buffer, int64_t bytes,
                                       int peer, uint32_t tag,
                                       const OpOptions& options);
  void WorkerLoop();
  // Runs `batch` (one collective, or a run of Sends and Recvs) and
  // completes every op's Work.
  void RunBatch(std::vector<Op>& batch);
  absl::Status Run(Op& op);
  // Starts every op of `batch`, then waits for each in order and completes
  // its Work at once: the caller sees piece k while k + 1 is still
  // arriving. After a failure the rest fail with the communicator's error.
  void RunPointToPointBatch(std::vector<Op>& batch);
  // Records how `op` ended (counters, the communicator's first error, which
  // breaks the transport) and returns its status. `last`: the
  // communicator is idle afterwards.
  absl::Status Finish(const Op& op, absl::Status status, absl::Duration busy,
                      bool last);
  // "<Op> on epoch E group 'g' rank r/n (transport, job ranks [a, b]):
  // <message>".
  absl::Status InContext(OpKind kind, const absl::Status& status) const;
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_ && (stopping_ || !queue_.empty());
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; }

  const Identity id_;
  const std::unique_ptr<CollectiveTransport> transport_;

  mutable absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  // An operation runs (on the worker or a caller's thread).
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Abort's status once called: it is the cause of whatever the running
  // operation then fails with.
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // The first error, or the abort: what AsyncError() returns and every
  // later operation fails with.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  CollectiveStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread worker_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_QUEUED_COLLECTIVE_H_
