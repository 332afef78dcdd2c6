#include "daemon/node/testing/guarded_engine_backend.h"

#include "daemon/comm/gloo_collective.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/testing/guarded_collective.h"

namespace shardd::node::testing {

absl::StatusOr<std::shared_ptr<GuardedEngineBackend>>
GuardedEngineBackend::Create(int64_t capacity_bytes) {
  absl::StatusOr<std::unique_ptr<memory::testing::GuardedArena>> arena =
      memory::testing::GuardedArena::Create(capacity_bytes);
  if (!arena.ok()) return arena.status();
  return std::shared_ptr<GuardedEngineBackend>(
      new GuardedEngineBackend(std::move(*arena)));
}

GuardedEngineBackend::GuardedEngineBackend(
    std::shared_ptr<memory::testing::GuardedArena> arena)
    : arena_(std::move(arena)),
      math_(std::make_shared<GuardedEngineMath>(arena_)) {}

absl::StatusOr<std::unique_ptr<comm::Collective>>
GuardedEngineBackend::MakeCollective(const GroupSpec& spec,
                                     comm::Store& store) {
  absl::StatusOr<std::unique_ptr<comm::Collective>> inner =
      comm::CreateGlooCollective(ToGlooOptions(spec), store);
  if (!inner.ok()) return inner.status();
  return std::make_unique<GuardedCollective>(std::move(*inner), arena_);
}

}  // namespace shardd::node::testing
