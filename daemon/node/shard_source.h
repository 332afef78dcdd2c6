#ifndef SHARDD_DAEMON_NODE_SHARD_SOURCE_H_
#define SHARDD_DAEMON_NODE_SHARD_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/collective.h"
#include "daemon/core/mono_time.h"
#include "daemon/metrics/node_observer.h"
#include "daemon/node/membership.h"
#include "daemon/node/shard_transfer.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/shard_memory.h"
#include "daemon/recovery/shard_stream.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::node {

// The source side of a shard copy (Peer.FetchShard): streams this node's
// shard (parameters, optimizer state, step) to a replacement that holds the
// same shard index, either inside the stream or, when asked and the epoch's
// replica group is healthy, as Sends on that group while the stream carries
// the header, each piece's CRC and the trailer. A replacement announces its
// copy with a Probe that asks for the model; the pieces' CRCs are then
// computed in the background (StartPrecompute), so that the copy itself
// only moves bytes here.
//
// Thread-safe. Serve's caller keeps trainer operations out while it runs
// (the state must not change under the stream). Not owned: the pointers in
// Options outlive the source. The destructor waits for a CRC computation
// in progress.
class ShardSource {
 public:
  // What a copy of the node's shard needs, read under the node's lock.
  using Snapshot = ShardDescription;
  struct Options {
    const recovery::ShardMemory* shard_memory = nullptr;
    metrics::NodeObserver* observer = nullptr;  // Optional.
    Membership* membership = nullptr;
    std::function<Snapshot()> snapshot;
    // `epoch`'s replica group once this node has built it (waiting until
    // `deadline`) and while it is healthy; null otherwise.
    std::function<std::shared_ptr<comm::Collective>(int64_t epoch,
                                                    MonoTime deadline)>
        replica_group_of;
  };
  explicit ShardSource(Options options);
  ~ShardSource();

  // INVALID_ARGUMENT for a malformed request (checked before anything
  // waits for the node).
  static absl::Status CheckRequest(const v1::FetchShardRequest& request);
  // Streams the shard for `request`, calling `send` per message (false: the
  // receiver went away). Codes as peer.proto documents: INVALID_ARGUMENT
  // for a malformed request, FAILED_PRECONDITION when this node holds no
  // model or another shard or step (a stale plan), ABORTED for another
  // epoch (also when the epoch changes mid-stream), DEADLINE_EXCEEDED,
  // UNAVAILABLE when the receiver closed the stream.
  absl::Status Serve(
      const v1::FetchShardRequest& request, MonoTime deadline,
      const std::function<bool(const v1::FetchShardResponse&)>& send);

  // Starts computing the pieces' CRCs of the current state in the
  // background, unless a computation is under way.
  void StartPrecompute();

  // Whether this node (`rank`, sharding factor `f`, in `epoch`, committed
  // at `step`) can serve `request`: FAILED_PRECONDITION for another shard
  // or step (a stale plan), ABORTED for another epoch.
  static absl::Status CheckServable(const v1::FetchShardRequest& request,
                                    int rank, int f, int64_t epoch,
                                    int64_t step);
  // INVALID_ARGUMENT unless the requester is another member of this node's
  // replica group (of `replica_size` members, this node at `replica_rank`):
  // only there can the payload go over the group.
  static absl::Status CheckRequesterInReplicaGroup(
      const v1::FetchShardRequest& request, int f, int replica_rank,
      int replica_size);
  // What ends a stream between two messages: DEADLINE_EXCEEDED once the
  // deadline passed, ABORTED when the epoch moved on from `epoch`.
  static absl::Status CheckStillServing(bool deadline_passed,
                                        int64_t current_epoch, int64_t epoch,
                                        int64_t bytes_sent, int64_t total);

 private:
  // The CRC-32C of every piece of an out-of-band copy (pieces of
  // recovery::kMaxPieceBytesCap from byte 0), for the engine and state
  // version they were computed from.
  struct PieceCrcs {
    std::weak_ptr<StepEngine> engine;
    uint64_t state_version = 0;
    std::vector<uint32_t> crcs;
  };
  // The writer of the stream for `request`, with the pieces' CRCs computed
  // ahead when they apply; `precomputed` says whether there were some.
  absl::StatusOr<recovery::ShardStreamWriter> OpenWriter(
      const v1::FetchShardRequest& request, Snapshot& snapshot,
      bool out_of_band, MonoTime deadline, bool* precomputed);
  // Sends the writer's messages (and, with `replica`, its pieces to `peer`
  // over the group), reporting the transfer to the observer.
  absl::Status Stream(
      recovery::ShardStreamWriter& writer,
      const std::shared_ptr<comm::Collective>& replica, int peer, int64_t epoch,
      int64_t total, MonoTime deadline,
      const std::function<bool(const v1::FetchShardResponse&)>& send);
  void PrecomputePieceCrcs();
  // The precomputed CRCs if they match the engine's current state (waiting
  // until `deadline` for a computation in progress); else empty.
  std::vector<uint32_t> PieceCrcsFor(const std::shared_ptr<StepEngine>& engine,
                                     MonoTime deadline);

  const Options options_;
  absl::Mutex crc_mu_;
  std::optional<PieceCrcs> piece_crcs_ ABSL_GUARDED_BY(crc_mu_);
  bool crc_running_ ABSL_GUARDED_BY(crc_mu_) = false;
  std::thread crc_thread_;  // Started by StartPrecompute, joined by ~.
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_SOURCE_H_
