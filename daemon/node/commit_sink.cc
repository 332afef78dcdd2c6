#include "daemon/node/commit_sink.h"

#include <cstdio>
#include <utility>

#include "daemon/core/crc32c.h"
#include "daemon/node/engine_math.h"

namespace shardd::node {

CommitSink::CommitSink(Options options) : options_(std::move(options)) {}

void CommitSink::Committed(StepEngine& engine, int64_t step, double grad_norm,
                           int64_t epoch) {
  Record(engine, recovery::CommitRecord::Kind::kCommit, step, epoch);
  if (options_.events != nullptr) {
    v1::TrainerEvent event;
    event.set_epoch(epoch);
    event.mutable_step_committed()->set_step(step);
    event.mutable_step_committed()->set_grad_norm(grad_norm);
    options_.events->Append(std::move(event));
  }
  if (options_.checkpoint_interval_steps > 0 &&
      step % options_.checkpoint_interval_steps == 0 &&
      options_.write_checkpoint) {
    options_.write_checkpoint(step, epoch);
  }
}

void CommitSink::Record(StepEngine& engine, recovery::CommitRecord::Kind kind,
                        int64_t step, int64_t epoch) {
  if (options_.commit_log == nullptr) return;
  uint32_t crc = 0;
  for (const StepEngine::StateSection& section : engine.StateSections()) {
    absl::Status s = ReadEngineMemory(
        engine.math(), section.data, section.bytes,
        [&](const uint8_t* p, int64_t n) {
          crc = core::Crc32cExtend(crc, p, static_cast<size_t>(n));
          return absl::OkStatus();
        });
    if (!s.ok()) {
      std::fprintf(stderr, "shardd: commit log: %s\n", s.ToString().c_str());
      return;
    }
  }
  const EngineConfig& config = engine.config();
  recovery::CommitRecord record;
  record.kind = kind;
  record.step = step;
  record.epoch = epoch;
  record.rank = config.rank;
  record.shard_index = config.rank % config.plan.sharding_factor();
  record.shard_crc32c = crc;
  if (absl::Status s = options_.commit_log->Append(record); !s.ok()) {
    std::fprintf(stderr, "shardd: commit log: %s\n", s.ToString().c_str());
  }
}

}  // namespace shardd::node
