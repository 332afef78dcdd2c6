#ifndef SHARDD_DAEMON_COMM_SHM_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_SHM_COLLECTIVE_H_

#include <atomic>
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
#include "daemon/comm/completion_work.h"
#include "daemon/comm/fixed_order_sum.h"
#include "daemon/comm/peer_liveness.h"
#include "daemon/comm/shm_rounds.h"
#include "daemon/comm/shm_segment.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

// The CPU communicator of a group whose ranks all run on one host: the
// collectives move data through one shared-memory segment (ShmRounds:
// per-rank double-buffered slots, futex waits), a copy into the segment
// and a copy out instead of Gloo's trips through the kernel's TCP stack.
// See Collective for the contract; it is GlooCollective's in every
// respect, bits included:
// - AllGather: every rank copies its part into its slot chunk by chunk,
//   and every rank copies every other rank's chunk to its output.
// - ReduceScatter: every rank copies a segment of every block into its
//   slot; each rank sums its own block's segment from all W slots in the
//   order GlooCollective would (FixedOrderSum, with the same
//   ChooseReduceScatterAlgorithm), 16-bit inputs in fp32, rounded once.
// - AllReduce: that reduce-scatter on GlooCollective's even split, each
//   owner rounds its shard, then the all-gather in place.
// - Broadcast: the root's chunks through its slot. Barrier: a round with
//   no data.
// - Send/Recv: delegated, in issue order, to an inner GlooCollective over
//   TCP that this communicator creates (at formation) and owns. They are
//   used only by recovery's shard copy, which relies on Gloo's matching
//   (peer, tag) and on a stream of queued Sends and Recvs being posted
//   together; a per-pair shared-memory channel would cost W × (W - 1)
//   more buffers to match that, for a path that runs once per recovery.
//   A run of Sends and Recvs queued back to back goes to the inner
//   communicator together, as GlooCollective batches them.
// Memory: the segment, 2 × W × slot_bytes plus a header, whatever the
// message size; large operations are pipelined in slot-sized chunks.
//
// Failure: an operation that fails (a peer died: UNAVAILABLE; a peer never
// came: DEADLINE_EXCEEDED) or Abort() poisons the segment (peers fail fast
// with UNAVAILABLE naming this rank) and aborts the inner communicator,
// and every queued and later operation fails with the same error.
//
// Thread-safe; one worker thread runs operations in issue order (or the
// caller's thread for an idle communicator and OpOptions::caller_waits).
// Owns the segment mapping, the liveness watch and the inner communicator.
class ShmCollective : public Collective {
 public:
  struct Parts {
    int rank = 0;
    int size = 1;
    int64_t epoch = 0;
    std::string group;
    absl::Duration default_op_timeout = absl::Seconds(30);
    int64_t slot_bytes = 0;
    std::unique_ptr<ShmSegment> segment;  // Initialised and validated.
    std::unique_ptr<PeerLiveness> liveness;
    std::unique_ptr<Collective> inner;  // For Send and Recv.
  };
  explicit ShmCollective(Parts parts);
  ~ShmCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int64_t epoch() const override { return epoch_; }

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
  // A shared-memory operation's body (worker or waiting caller's thread).
  using Body = std::function<absl::Status(MonoTime deadline)>;
  // A delegated one issues itself on the inner communicator.
  using Delegate = std::function<std::shared_ptr<Work>()>;
  struct Op {
    OpKind kind = OpKind::kBarrier;
    int64_t bytes = 0;
    absl::Duration timeout;
    Body body;
    Delegate delegate;
    std::shared_ptr<CompletionWork> work;
  };
  static constexpr size_t kMaxDelegatedBatch = 256;

  std::shared_ptr<Work> Enqueue(OpKind kind, int64_t bytes,
                                const OpOptions& options, Body body,
                                Delegate delegate = nullptr);
  std::shared_ptr<Work> Reject(OpKind kind, absl::Status status);
  void WorkerLoop();
  absl::Status Run(Op& op);
  void RunDelegated(std::vector<Op>& batch);
  absl::Status Finish(const Op& op, absl::Status status, absl::Duration busy,
                      bool last);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !running_ && (stopping_ || !queue_.empty());
  }
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !running_; }
  std::string Describe() const;
  absl::Status ValidatePointToPoint(const void* buffer, int64_t bytes, int peer,
                                    const OpOptions& options) const;

  // Operation bodies (one at a time).
  absl::Status RunAllGather(const void* input, void* output,
                            const std::vector<int64_t>& counts,
                            int64_t element_size, MonoTime deadline);
  absl::Status GatherInPlace(uint8_t* output,
                             const std::vector<int64_t>& byte_counts,
                             MonoTime deadline);
  absl::Status ReduceBlocks(const void* input, void* output,
                            const std::vector<int64_t>& counts,
                            core::DType dtype, ReduceOp op, MonoTime deadline);
  absl::Status RunAllReduce(void* buffer, int64_t count, core::DType dtype,
                            ReduceOp op, MonoTime deadline);
  absl::Status RunBroadcast(void* buffer, int64_t bytes, int root,
                            MonoTime deadline);
  absl::Status RunBarrier(MonoTime deadline);
  float* Scratch(size_t index, int64_t elements);

  const int rank_;
  const int size_;
  const int64_t epoch_;
  const std::string group_;
  const absl::Duration default_op_timeout_;
  const std::unique_ptr<ShmSegment> segment_;
  const std::unique_ptr<PeerLiveness> liveness_;
  std::atomic<bool> aborted_{false};
  // Used by the running operation only.
  ShmRounds rounds_;
  FixedOrderSum sum_;
  std::vector<std::vector<float>> scratch_;

  mutable absl::Mutex mu_;
  std::deque<Op> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  CollectiveStats stats_ ABSL_GUARDED_BY(mu_);
  // Destroyed after the worker has stopped (declared last but one).
  std::unique_ptr<Collective> inner_;
  std::thread worker_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_SHM_COLLECTIVE_H_
