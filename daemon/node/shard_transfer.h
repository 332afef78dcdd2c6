#ifndef SHARDD_DAEMON_NODE_SHARD_TRANSFER_H_
#define SHARDD_DAEMON_NODE_SHARD_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/comm/collective.h"
#include "daemon/core/model_config.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/step_engine.h"
#include "daemon/recovery/shard_stream.h"
#include "shardd/v1/peer.pb.h"

// What both ends of a shard copy (Peer.FetchShard) share: the Send/Recv
// tag of the pieces that go over the replica group, how engine state
// sections are named on the wire, and how the Peer clients are injected.

namespace shardd::node {

// The Send/Recv tag of a shard copy's pieces on the replica group (no other
// point-to-point traffic uses that communicator).
inline constexpr uint32_t kShardTransferTag = 0x53484344;  // "SHCD"

// The wire kind of an engine state section.
v1::ShardSectionKind ToSectionKind(StepEngine::StateKind kind);

// A node's shard described for a copy or a checkpoint (DescribeShard), with
// the engine whose buffers the sections borrow.
struct ShardDescription {
  std::shared_ptr<StepEngine> engine;  // Null: no model registered.
  v1::ShardHeader header;              // Without epoch and step.
  std::vector<recovery::SectionSource> sources;
};

// The header (model, fingerprint, shard index, source rank, learning rate;
// not epoch or step) and the sections of `engine`'s state, for a copy or a
// checkpoint. The sections borrow the engine's buffers, which live as long
// as the engine; reading them needs no lock of the engine's.
void DescribeShard(StepEngine& engine, const core::ModelConfig& model,
                   uint64_t fingerprint, v1::ShardHeader* header,
                   std::vector<recovery::SectionSource>* sources);

// Waits for every work (they end at their deadline or at the abort that
// precedes this call), so that no operation still touches its buffer.
void WaitAll(const std::vector<std::shared_ptr<comm::Work>>& works);

// Streams FetchShard from `peer_address`, handing every message to
// `on_message` (whose error ends the stream). A gRPC client, injected.
using FetchShardFn = std::function<absl::Status(
    const std::string& peer_address, const v1::FetchShardRequest& request,
    MonoTime deadline,
    const std::function<absl::Status(const v1::FetchShardResponse&)>&
        on_message)>;
// Probes a peer's Peer service (with its model when asked).
using ProbePeerFn = std::function<absl::StatusOr<v1::ProbeResponse>(
    const std::string& peer_address, MonoTime deadline, bool include_model)>;

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHARD_TRANSFER_H_
