#include "daemon/node/shard_transfer.h"

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

void WaitAll(const std::vector<std::shared_ptr<comm::Work>>& works) {
  for (const std::shared_ptr<comm::Work>& work : works) (void)work->Wait();
}

}  // namespace shardd::node
