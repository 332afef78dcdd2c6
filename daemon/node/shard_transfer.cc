#include "daemon/node/shard_transfer.h"

#include <utility>

#include "daemon/node/proto_convert.h"

namespace shardd::node {

v1::ShardSectionKind ToSectionKind(StepEngine::StateKind kind) {
  switch (kind) {
    case StepEngine::StateKind::kParameters:
      return v1::SHARD_SECTION_KIND_PARAMETERS;
    case StepEngine::StateKind::kExpAvg:
      return v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG;
    case StepEngine::StateKind::kExpAvgSq:
      return v1::SHARD_SECTION_KIND_ADAMW_EXP_AVG_SQ;
    case StepEngine::StateKind::kMomentum:
      return v1::SHARD_SECTION_KIND_SGD_MOMENTUM;
  }
  return v1::SHARD_SECTION_KIND_UNSPECIFIED;
}

void DescribeShard(StepEngine& engine, const core::ModelConfig& model,
                   uint64_t fingerprint, v1::ShardHeader* header,
                   std::vector<recovery::SectionSource>* sources) {
  const EngineConfig& config = engine.config();
  const int f = config.plan.sharding_factor();
  header->set_source_rank(config.rank);
  header->set_shard_index(config.rank % f);
  *header->mutable_model() = ProtoConvert::ModelToProto(model);
  header->set_model_fingerprint(fingerprint);
  header->set_last_learning_rate(engine.learning_rate());
  for (const StepEngine::StateSection& section : engine.StateSections()) {
    recovery::SectionSource source;
    source.section.set_unit(section.unit);
    source.section.set_kind(ToSectionKind(section.kind));
    source.section.set_dtype(v1::DTYPE_FP32);
    source.section.set_numel(section.numel);
    source.section.set_byte_length(section.bytes);
    source.data = section.data;
    sources->push_back(std::move(source));
  }
}

void WaitAll(const std::vector<std::shared_ptr<comm::Work>>& works) {
  for (const std::shared_ptr<comm::Work>& work : works) (void)work->Wait();
}

}  // namespace shardd::node
