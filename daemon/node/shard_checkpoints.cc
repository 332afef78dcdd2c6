#include "daemon/node/shard_checkpoints.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/node/proto_convert.h"
#include "daemon/recovery/shard_checkpoint.h"

namespace shardd::node {

ShardCheckpoints::ShardCheckpoints(Options options)
    : options_(std::move(options)) {}

void ShardCheckpoints::Write(const ShardDescription& shard, int64_t step,
                             int64_t epoch) {
  if (!enabled() || shard.engine == nullptr) return;
  const int rank = shard.engine->config().rank;
  v1::ShardHeader header = shard.header;
  header.set_epoch(epoch);
  header.set_step(step);
  header.set_optimizer_step(step);
  absl::StatusOr<std::string> path = recovery::WriteShardCheckpoint(
      options_.dir, rank, header, shard.sources, options_.keep_last,
      *options_.shard_memory);
  if (!path.ok()) {
    std::fprintf(stderr, "shardd: checkpoint of step %lld: %s\n",
                 static_cast<long long>(step),
                 path.status().ToString().c_str());
    if (options_.observer != nullptr)
      options_.observer->CheckpointWriteFailed();
    return;
  }
  options_.catalog->NoteWritten(rank, step);
  // The coordinator plans rollbacks from the members' inventories: tell it
  // now, not at the next heartbeat, so that a failure right after this step
  // rolls back to it.
  (void)options_.membership->SendHeartbeat();
  if (options_.observer != nullptr) {
    options_.observer->CheckpointWritten(absl::Now());
  }
}

absl::StatusOr<ShardCheckpoints::Restore> ShardCheckpoints::Prepare(
    int rank, int64_t step, std::shared_ptr<StepEngine> engine,
    const std::optional<core::ModelConfig>& model,
    const std::function<absl::StatusOr<std::unique_ptr<StepEngine>>(
        const core::ModelConfig&)>& create_engine) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        "no --checkpoint_dir: this daemon keeps no checkpoints");
  }
  Restore restore;
  if (step < 0) {
    absl::StatusOr<std::string> latest =
        recovery::LatestShardCheckpoint(options_.dir, rank);
    if (!latest.ok()) return latest.status();
    restore.path = *latest;
  } else {
    restore.path = recovery::ShardCheckpointPath(options_.dir, rank, step);
  }
  absl::StatusOr<v1::ShardHeader> peek =
      recovery::ReadShardCheckpointHeader(restore.path);
  if (!peek.ok()) return peek.status();
  restore.fresh = engine == nullptr || !model.has_value();
  if (restore.fresh) {
    absl::StatusOr<core::ModelConfig> m =
        ProtoConvert::ModelFromProto(peek->model());
    if (!m.ok()) {
      return absl::Status(
          m.status().code(),
          absl::StrCat(restore.path, ": ", m.status().message()));
    }
    absl::StatusOr<std::unique_ptr<StepEngine>> created = create_engine(*m);
    if (!created.ok()) return created.status();
    restore.engine = std::move(*created);
    restore.model = *std::move(m);
  } else {
    restore.engine = std::move(engine);
    restore.model = *model;
  }
  restore.fingerprint =
      core::Fingerprint(restore.model, core::InitScope::kExclude);
  if (peek->model_fingerprint() != restore.fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        restore.path, ": holds a shard of another model (fingerprint ",
        peek->model_fingerprint(), ", this model ", restore.fingerprint, ")"));
  }
  return restore;
}

absl::StatusOr<int64_t> ShardCheckpoints::Read(const Restore& restore) {
  const std::string& path = restore.path;
  const std::vector<StepEngine::StateSection> mine =
      restore.engine->StateSections();
  v1::ShardHeader header;
  absl::Status read = recovery::ReadShardCheckpoint(
      path,
      [&](const v1::ShardHeader& h, int index) -> absl::StatusOr<uint8_t*> {
        if (static_cast<int>(mine.size()) != h.sections_size()) {
          return absl::FailedPreconditionError(
              absl::StrCat(path, ": ", h.sections_size(),
                           " sections, this rank's shard has ", mine.size()));
        }
        const v1::ShardSection& theirs = h.sections(index);
        if (theirs.unit() != mine[index].unit ||
            theirs.kind() != ToSectionKind(mine[index].kind) ||
            theirs.byte_length() != mine[index].bytes) {
          return absl::FailedPreconditionError(absl::StrCat(
              path, ": section ", index, " does not match this rank's shard"));
        }
        return mine[index].data;
      },
      &header, /*payload_crc_out=*/nullptr, *options_.shard_memory);
  if (!read.ok()) return read;
  if (absl::Status s = restore.engine->InstallState(header.step()); !s.ok()) {
    return s;
  }
  return header.step();
}

}  // namespace shardd::node
