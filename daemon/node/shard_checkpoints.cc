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
    : options_(std::move(options)) {
  if (options_.async && enabled()) {
    stager_ = std::make_unique<CheckpointStager>(CheckpointStager::Options{
        .admit = options_.admit_staging,
        .held =
            [this](int64_t bytes) {
              if (options_.staging_held) options_.staging_held(bytes);
              if (options_.observer != nullptr) {
                options_.observer->CheckpointStagingBytes(bytes);
              }
            },
        .write =
            [this](const CheckpointStager::Job& job) { WriteStaged(job); }});
  }
}

// The stager's thread calls back into this object: it goes first.
ShardCheckpoints::~ShardCheckpoints() { stager_.reset(); }

void ShardCheckpoints::Write(const ShardDescription& shard, int64_t step,
                             int64_t epoch) {
  if (!enabled() || shard.engine == nullptr) return;
  const int rank = shard.engine->config().rank;
  v1::ShardHeader header = HeaderOf(shard, step, epoch);
  if (stager_ == nullptr) {
    (void)WriteNow(std::move(header), shard.sources, *options_.shard_memory,
                   rank, step);
    return;
  }
  const absl::Status staged = stager_->Stage(
      header, shard.sources, *options_.shard_memory, rank, step, epoch);
  if (staged.ok()) {
    // A skipped step written since (after a rollback, say) needs no flush.
    // Write has one caller at a time; Flush runs once it is done.
    if (last_skipped_.load() <= step) last_skipped_.store(-1);
    return;
  }
  switch (staged.code()) {
    case absl::StatusCode::kUnavailable:
      // A disk slower than the interval: skipping keeps the staging at one
      // copy and the step unblocked; the next interval tries again.
      std::fprintf(stderr, "shardd: checkpoint of step %lld skipped: %s\n",
                   static_cast<long long>(step), staged.ToString().c_str());
      if (options_.observer != nullptr) options_.observer->CheckpointSkipped();
      last_skipped_.store(step);
      return;
    case absl::StatusCode::kResourceExhausted:
      std::fprintf(stderr,
                   "shardd: checkpoint of step %lld written synchronously: "
                   "no memory for its staging: %s\n",
                   static_cast<long long>(step), staged.ToString().c_str());
      (void)WriteNow(std::move(header), shard.sources, *options_.shard_memory,
                     rank, step);
      return;
    default:
      std::fprintf(stderr, "shardd: checkpoint of step %lld: staging: %s\n",
                   static_cast<long long>(step), staged.ToString().c_str());
      if (options_.observer != nullptr)
        options_.observer->CheckpointWriteFailed();
  }
}

bool ShardCheckpoints::WriteNow(
    v1::ShardHeader header, const std::vector<recovery::SectionSource>& sources,
    const recovery::ShardMemory& memory, int rank, int64_t step) {
  if (!WriteFile(std::move(header), sources, memory, rank, step)) return false;
  NoteWritten(rank, step);
  return true;
}

bool ShardCheckpoints::WriteFile(
    v1::ShardHeader header, const std::vector<recovery::SectionSource>& sources,
    const recovery::ShardMemory& memory, int rank, int64_t step) {
  // Never prune the newest step every rank holds: it is what a rollback
  // would need, however far this rank has got ahead of a slower one.
  const int64_t keep_step =
      options_.common_step ? options_.common_step() : int64_t{-1};
  absl::StatusOr<std::string> path = recovery::WriteShardCheckpoint(
      options_.dir, rank, std::move(header), sources, options_.keep_last,
      memory, keep_step);
  if (!path.ok()) {
    std::fprintf(stderr, "shardd: checkpoint of step %lld: %s\n",
                 static_cast<long long>(step),
                 path.status().ToString().c_str());
    if (options_.observer != nullptr)
      options_.observer->CheckpointWriteFailed();
    return false;
  }
  return true;
}

void ShardCheckpoints::NoteWritten(int rank, int64_t step) {
  options_.catalog->NoteWritten(rank, step);
  // The coordinator plans rollbacks from the members' inventories: tell it
  // now, not at the next heartbeat, so that a failure right after this step
  // rolls back to it.
  (void)options_.membership->SendHeartbeat();
  if (options_.observer != nullptr) {
    options_.observer->CheckpointWritten(absl::Now());
  }
}

void ShardCheckpoints::WriteStaged(const CheckpointStager::Job& job) {
  if (job.discarded()) return;  // Abandoned before its write began.
  if (!WriteFile(job.header, job.sources, recovery::ShardMemory::Host(),
                 job.rank, job.step)) {
    return;
  }
  if (job.discarded()) {
    // A rollback abandoned the step while it was written: its file goes
    // (AbandonAbove removes files above the rollback's step, but this one
    // may have been renamed after it looked) and nobody hears of it.
    options_.catalog->AbandonAbove(job.rank, job.step - 1);
    return;
  }
  // A rollback that discards the step from now on waits for this call to
  // return (Quiesce), then removes the file.
  NoteWritten(job.rank, job.step);
}

void ShardCheckpoints::AbandonAbove(int rank, int64_t step) {
  if (stager_ != nullptr) {
    if (std::optional<int64_t> discarded = stager_->DiscardAbove(step)) {
      std::printf(
          "shardd rank %d: the rollback to step %lld discards the checkpoint "
          "of step %lld being written\n",
          rank, static_cast<long long>(step),
          static_cast<long long>(*discarded));
      std::fflush(stdout);
    }
    if (absl::Status quiet = Quiesce(); !quiet.ok()) {
      // The write removes its file itself once it ends (discarded).
      std::fprintf(stderr, "shardd: rollback to step %lld: %s\n",
                   static_cast<long long>(step), quiet.ToString().c_str());
    }
  }
  options_.catalog->AbandonAbove(rank, step);
}

absl::Status ShardCheckpoints::Flush(const ShardDescription& shard,
                                     int64_t epoch) {
  if (stager_ == nullptr) return absl::OkStatus();
  // Longer than a rollback's wait: the daemon is stopping anyway, and it
  // would wait for the write as it is destroyed; the caller's deadline is
  // the orchestrator's grace period.
  if (absl::Status quiet = stager_->Quiesce(kStopWait); !quiet.ok()) {
    return quiet;
  }
  if (shard.engine == nullptr) return absl::OkStatus();
  const int64_t step = shard.engine->committed_step();
  if (last_skipped_.load() != step) return absl::OkStatus();
  const int rank = shard.engine->config().rank;
  std::printf(
      "shardd rank %d: writing the checkpoint of step %lld, skipped while "
      "the previous one was written, before stopping\n",
      rank, static_cast<long long>(step));
  std::fflush(stdout);
  if (WriteNow(HeaderOf(shard, step, epoch), shard.sources,
               *options_.shard_memory, rank, step)) {
    last_skipped_.store(-1);
  }
  return absl::OkStatus();
}

v1::ShardHeader ShardCheckpoints::HeaderOf(const ShardDescription& shard,
                                           int64_t step, int64_t epoch) {
  v1::ShardHeader header = shard.header;
  header.set_epoch(epoch);
  header.set_step(step);
  header.set_optimizer_step(step);
  return header;
}

absl::Status ShardCheckpoints::Quiesce() {
  if (stager_ == nullptr) return absl::OkStatus();
  return stager_->Quiesce(options_.quiesce_timeout);
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
  // A write in flight may still prune or add the rank's files.
  if (absl::Status quiet = Quiesce(); !quiet.ok()) return quiet;
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
