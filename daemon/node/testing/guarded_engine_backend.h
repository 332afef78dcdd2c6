#ifndef SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_BACKEND_H_
#define SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/node/engine_backend.h"
#include "daemon/node/testing/guarded_engine_math.h"

namespace shardd::node::testing {

// A device backend for CPU tests of the daemon's GPU path: every engine
// buffer lives in one GuardedArena (the host faults on it), the math is
// GuardedEngineMath, and the communicators are Gloo's wrapped in
// GuardedCollective (device buffers only, as NCCL). Thread-safe.
class GuardedEngineBackend : public EngineBackend {
 public:
  static absl::StatusOr<std::shared_ptr<GuardedEngineBackend>> Create(
      int64_t capacity_bytes);

  std::string name() const override { return "guarded-test-device"; }
  memory::BufferAllocator& shared() override { return *arena_; }
  memory::BufferAllocator& private_memory() override { return *arena_; }
  std::shared_ptr<EngineMath> math() override { return math_; }
  // Its communicators keep device scratch as NCCL's fixed order does.
  core::CommScratch comm_scratch() const override {
    return core::CommScratch::kNcclFixedOrder;
  }
  absl::StatusOr<std::unique_ptr<comm::Collective>> MakeCollective(
      const GroupSpec& spec, comm::Store& store) override;

  int64_t math_calls() const { return math_->calls(); }

 private:
  explicit GuardedEngineBackend(
      std::shared_ptr<memory::testing::GuardedArena> arena);

  const std::shared_ptr<memory::testing::GuardedArena> arena_;
  const std::shared_ptr<GuardedEngineMath> math_;
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_BACKEND_H_
