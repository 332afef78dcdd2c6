#ifndef SHARDD_DAEMON_NODE_STEP_ENGINE_H_
#define SHARDD_DAEMON_NODE_STEP_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/adamw.h"
#include "daemon/core/dtype.h"
#include "daemon/core/grad_clip.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/mono_time.h"
#include "daemon/core/sgd.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/unit_layout.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/engine_math.h"

namespace shardd::node {

struct OptimizerSpec {
  core::OptimizerKind kind = core::OptimizerKind::kAdamW;
  core::AdamWOptions adamw;
  core::SgdOptions sgd;  // kSgd / kSgdMomentum (momentum > 0).
};

struct EngineConfig {
  int rank = 0;
  // W, F, strategy; the units are laid out for plan.sharding_factor().
  core::ShardPlan plan;
  std::vector<core::UnitLayout> units;
  core::DType reduce_dtype = core::DType::kFloat32;
  OptimizerSpec optimizer;
  double max_grad_norm = 0.0;  // <= 0: no clipping.
  int64_t max_gathered_units = 1;
  // G: units whose reduce-scatter may be in flight at once (gradient slots,
  // core::GradientSlotCount).
  int64_t max_reducing_units = 2;
  // [unit][tensor]: the optimizer runs on this tensor without weight decay
  // (biases, norms: PyTorch's parameter groups with weight_decay 0). Empty,
  // or a shorter inner vector: every tensor decays.
  std::vector<std::vector<bool>> exclude_from_weight_decay;
  // The device scratch the backend's communicators need
  // (EngineBackend::comm_scratch): planned, and reserved on each epoch's
  // communicators when they are given to the engine.
  core::CommScratch comm_scratch = core::CommScratch::kNone;
};

// Fills elements [offset, offset + n) of unit `unit`'s flat fp32 buffer with
// their initial values. Must give the same values for any sub-range as for
// the whole (each rank initialises only its shard).
using ShardInitializer =
    std::function<void(int unit, int64_t offset, float* out, int64_t n)>;

// Where a trainer finds a unit's data: `bytes` bytes at `offset` into
// `buffer` (gathered parameters or the gradient slot), flat layout of the
// unit (UnitLayout::tensors() gives each tensor's element offset).
struct UnitData {
  memory::ByteBuffer* buffer = nullptr;
  int64_t offset = 0;
  int64_t bytes = 0;
  core::DType dtype = core::DType::kFloat32;
  // Gather: no collective was waited for (the unit was still gathered, or
  // its prefetch had completed).
  bool was_ready = false;
  // Gather: the AllGather was a prefetch's (Prefetch).
  bool was_prefetched = false;
};

struct StepResult {
  int64_t step = 0;
  double grad_norm = 0.0;
  float clip_scale = 1.0f;
};

// The ZeRO step engine of one rank: owns the rank's parameter, gradient
// and optimizer-state shards and runs the unit-level protocol
// Gather -> Release -> ReduceGrad -> Step with the epoch's communicators.
//
//  * Gather all-gathers a unit's shards (fp32 master, or the bf16/fp16 copy
//    for low-precision units) within the shard group into one of K gathered
//    slots; a released unit stays cached in its slot until the slot is
//    needed, the parameters change or it is released with `reshard`. With F = 1
//    the shard is the unit and Gather returns it without a collective.
//  * ReduceGrad reduce-scatters (average) the unit's full gradient, which
//    the trainer wrote into its gradient slot, within the shard group and
//    adds the result to the fp32 gradient shard (gradient accumulation over
//    micro-batches sums). With G > 1 gradient slots (max_reducing_units) it
//    returns once the reduce-scatter is issued: the reduce-scatter runs
//    while the trainer writes the next unit's gradient into another slot,
//    and is finished (waited for, added into the shard) when its slot is
//    needed again or at Step. A failure it meets is returned by the next
//    ReduceGrad or by Step.
//  * With replicas (W/F > 1) the gradient shards are all-reduced (average)
//    across the replica group, each as soon as it can be: a unit's
//    all-reduce starts when the unit and every unit after it are reduced
//    (last unit first, the order of a backward pass, and the same order on
//    every rank whatever order the trainer reduced them in), and runs on
//    the replica group's thread while the trainer computes the next unit's
//    backward (DDP's overlap). It touches only the gradient shard, which
//    nothing reads before Step.
//  * Step waits for those all-reduces (issuing any not yet started),
//    computes the global gradient norm exactly (per-shard partials
//    gathered over the shard group), clips, runs the optimizer on the local
//    shards, refreshes the low-precision copies and commits the step.
//
// All memory is allocated at Create, pre-faulted, and equals
// core::MemoryPlan's figure for this rank to the byte.
//
// The engine never dereferences its buffers: every copy and every
// computation on them goes through its EngineMath, so the same engine runs
// with its memory on the host (HostEngineMath) or on a GPU, where the
// allocators hand out device memory and the communicators are NCCL's. Only
// then does it use one extra buffer outside the plan: F gradient-norm
// partials (a few hundred bytes) for their all-gather.
//
// Thread-safe: calls are serialised by an internal lock (the trainer API is
// one trainer per daemon). Borrows the allocators only during Create; shares
// ownership of the communicators and of the EngineMath.
class StepEngine {
 public:
  // Validates the config (units laid out for F, rank in range, optimizer
  // hyper-parameters) and allocates and initialises every buffer.
  // Buffers a trainer maps (gathered slots, the gradient slot, and with
  // F = 1 the shard Gather hands out) come from `shared`; the rest (the
  // gradient and optimizer shards, parameter shards no trainer maps) from
  // `private_memory`, which may be the same allocator.
  //
  // `math` works on the memory the allocators hand out (HostEngineMath for
  // host memory).
  static absl::StatusOr<std::unique_ptr<StepEngine>> Create(
      EngineConfig config, const ShardInitializer& init,
      memory::BufferAllocator& shared, memory::BufferAllocator& private_memory,
      std::shared_ptr<EngineMath> math);
  // Host memory.
  static absl::StatusOr<std::unique_ptr<StepEngine>> Create(
      EngineConfig config, const ShardInitializer& init,
      memory::BufferAllocator& shared, memory::BufferAllocator& private_memory);
  // Everything from one allocator, host memory.
  static absl::StatusOr<std::unique_ptr<StepEngine>> Create(
      EngineConfig config, const ShardInitializer& init,
      memory::BufferAllocator& allocator) {
    return Create(std::move(config), init, allocator, allocator);
  }

  // Waits for prefetches still writing into the slots.
  ~StepEngine();
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  // The communicators of a new epoch (shard group: size F, rank = shard
  // index; replica group: size W/F, rank = shard group). Gathered slots are
  // kept (parameters do not change with the epoch); a step in progress is
  // abandoned (units no longer count as reduced, accumulations dropped), so
  // the trainer can redo it.
  void SetCommunicators(std::shared_ptr<comm::Collective> shard_group,
                        std::shared_ptr<comm::Collective> replica_group);
  // Counts SetCommunicators calls: an operation of several collectives (an
  // export) takes it at its start and passes it to each, so that none of
  // them runs on a later epoch's communicators, where its peers are not.
  uint64_t communicator_generation() const;

  // NOT_FOUND (unit out of range), RESOURCE_EXHAUSTED (all K slots hold
  // unreleased units), FAILED_PRECONDITION (no communicators), and the
  // collective's error (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED) unchanged.
  absl::StatusOr<UnitData> Gather(int unit, absl::Duration timeout);

  // Starts the AllGather of `unit` on the shard group without waiting (a
  // trainer's prefetch hint), so that a later Gather(unit) finds it done or
  // in flight. A hint, never an error: kStarted when its AllGather started;
  // kNotNeeded when F = 1 or the unit is held, still gathered or already
  // in flight; kDropped when there are no communicators, `max_in_use` units
  // are already held or in flight (FSDP's all-gather rate limit, K), or no
  // slot is free or held by a released unit (or the unit is out of range).
  // Every rank must give the same hints in the same order (the collective
  // order, as for every other call); the decisions above depend only on state
  // that is the same on every rank. A prefetch whose parameters a Step changed
  // before the Gather is gathered again.
  enum class PrefetchResult { kStarted, kNotNeeded, kDropped };
  PrefetchResult Prefetch(int unit, absl::Duration timeout, int64_t max_in_use);

  // FAILED_PRECONDITION when the unit is not gathered (double release).
  // With `reshard` the unit's slot gives up its parameters at once (FSDP's
  // reshard after forward): the next Gather runs the AllGather again, even
  // within the same step. Without it they stay cached (see above). No
  // effect with F = 1 (no slots).
  absl::Status Release(int unit, bool reshard = false);

  // The slot the trainer writes the unit's full gradient into (reduce
  // dtype, the unit's flat layout): one of G, the same one until the unit is
  // reduced; it may wait for an earlier unit's reduce-scatter to free a
  // slot. NOT_FOUND for an unknown unit.
  absl::StatusOr<UnitData> GradientSlot(int unit);

  // Asked before every allocation after Create (the accumulation buffers of
  // ReduceGrad): `what` names the buffer, `bytes` its size and `held_bytes`
  // what the engine holds now (held_bytes()). An error is returned as it is
  // and nothing is allocated. Called with the engine's lock held: it must
  // not call back into the engine. Null (the default): every allocation is
  // tried.
  using GrowthAdmission = std::function<absl::Status(
      absl::string_view what, int64_t bytes, int64_t held_bytes)>;
  void SetGrowthAdmission(GrowthAdmission admit);

  // Reduces the gradient in the slot (see the class comment). With
  // accumulate_only no collective runs: the slot's gradient is added to the
  // unit's private unsharded accumulation buffer (allocated on first use,
  // freed when the unit is reduced), like DDP's no_sync; the next call
  // without accumulate_only reduces slot + accumulated. Each unit is reduced
  // once per step: FAILED_PRECONDITION for a second time.
  // RESOURCE_EXHAUSTED when the growth admission refuses the accumulation
  // buffer or it cannot be allocated (nothing accumulated).
  absl::Status ReduceGrad(int unit, absl::Duration timeout,
                          bool accumulate_only = false);

  // FAILED_PRECONDITION when expected_step is not committed_step() + 1 or a
  // unit has no gradient yet; the collectives' errors unchanged (the step
  // is then not applied: nothing of the optimizer has run).
  //
  // `before_apply`, when set, runs after the gradient collectives and the
  // norm and before the optimizer touches anything (the commit vote): an
  // error from it is returned and the step is not applied.
  //
  // `learning_rate`, when set, is this step's (schedules) and stays the
  // optimizer's until changed again; INVALID_ARGUMENT (nothing applied) if
  // it is negative or not finite.
  absl::StatusOr<StepResult> Step(
      int64_t expected_step, absl::Duration timeout,
      const std::function<absl::Status(const StepResult&)>& before_apply =
          nullptr,
      std::optional<double> learning_rate = std::nullopt);

  // A step whose `before_apply` failed stays prepared (gradients reduced,
  // norm and clip scale known) until resolved, so that a member whose commit
  // vote got no answer (the coordinator died, the epoch moved on) can apply
  // it once it learns that the others committed it, or drop it when they
  // did not. The next Step, a ReduceGrad (it overwrites the gradient shard)
  // or InstallState drops it too.
  // Never blocks (a collective in flight holds the engine's lock).
  std::optional<int64_t> pending_step() const;
  // Applies the pending step as Step would have: FAILED_PRECONDITION when
  // none is pending.
  absl::StatusOr<StepResult> ApplyPending();
  void DropPending();

  // The optimizer's current learning rate.
  double learning_rate() const;

  int64_t committed_step() const;
  // The total time this engine has spent blocked on its collectives: the
  // issue of each one it waits for at once (a backend may run it on the
  // calling thread) and every Wait, prefetches and asynchronous reductions
  // included when something waits for them; GatherState's excepted (it
  // serves export and recovery, not the trainer). Monotonic; the trainer
  // operations report the part of each call (TrainerOps), so a call's wait is
  // the difference across it. Read without the engine's lock.
  absl::Duration collective_wait() const;
  // Changes whenever StateSections' bytes may have: an applied step, an
  // InstallState. A reader that sees the same version before and after
  // reading them read one consistent state.
  uint64_t state_version() const;

  // What a rank's durable state is made of: per unit (in order) its fp32
  // master shard, then its optimizer state (AdamW: exp_avg, exp_avg_sq;
  // SGD with momentum: the momentum buffer), each the shard's stored
  // elements (padding included, always zero). With the committed step this
  // is everything a replica or a checkpoint needs to rebuild the rank.
  enum class StateKind { kParameters, kExpAvg, kExpAvgSq, kMomentum };
  struct StateSection {
    int unit = 0;
    StateKind kind = StateKind::kParameters;
    int64_t numel = 0;
    uint8_t* data = nullptr;  // numel fp32 values in the engine's buffers.
    int64_t bytes = 0;
  };
  // The sections in a fixed order: kind-major (parameters of every unit,
  // then each optimizer state kind of every unit), which is also their
  // order in memory. The pointers stay valid for
  // the engine's life; the caller serialises reading and writing them
  // against Step (NodeManager's op lock).
  std::vector<StateSection> StateSections();

  // The optimizer's state kinds after kParameters, in StateSections order
  // (AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum; plain SGD:
  // none).
  std::vector<StateKind> OptimizerStateKinds() const;

  // The whole unit's `kind` (fp32, the unit's flat layout, padding
  // included): this rank's shard all-gathered over the shard group, like
  // Gather's parameters (a collective: every rank of the group calls it,
  // in the same order). For exports.
  absl::StatusOr<std::vector<float>> GatherState(int unit, StateKind kind,
                                                 absl::Duration timeout);
  // The same into `out`, resized to the unit: an export gathering unit
  // after unit reuses one buffer (fresh memory for every unit costs page
  // faults and zeroing that the write itself does not). With `generation`
  // (communicator_generation() when the export began): ABORTED, nothing
  // issued, once the communicators were replaced since.
  absl::Status GatherStateInto(
      int unit, StateKind kind, absl::Duration timeout, std::vector<float>& out,
      std::optional<uint64_t> generation = std::nullopt);

  // After the sections were overwritten with another rank's or a
  // checkpoint's state at `committed_step`: adopts that step, refreshes the
  // low-precision copies, forgets gathered slots and any step in progress.
  // An error (a failed device call) leaves the step and the slots as they
  // were.
  absl::Status InstallState(int64_t committed_step);

  // True when StateSections' pointers (and UnitData's buffers) are device
  // memory, which the host reads and writes only through math().
  bool memory_on_device() const { return math_->device_memory(); }
  EngineMath& math() const { return *math_; }
  // What the plan says this rank holds, and what it actually holds, per
  // category, from the sizes of the buffers allocated for each (one per
  // category; the gathered slots together). Accumulation buffers
  // (ReduceGrad with accumulate_only) count as unsharded gradients, so held
  // exceeds the plan there while micro-batches accumulate. padding_bytes is
  // the shard padding inside the held shard buffers.
  core::MemoryBreakdown planned_memory() const { return planned_; }
  core::MemoryBreakdown held_memory() const;
  int64_t held_bytes() const { return held_memory().total_bytes; }
  const EngineConfig& config() const { return config_; }

  // Read access to this rank's fp32 master shard of `unit` (tests, export).
  absl::StatusOr<std::vector<float>> MasterShard(int unit) const;

 private:
  struct UnitState {
    int64_t shard_offset = 0;  // Element offset of this rank's shard in the
                               // per-category storage.
    int64_t shard_stored = 0;  // Stored elements (real + padding).
    int64_t shard_real = 0;
    int slot = -1;      // Gathered slot, or -1.
    bool held = false;  // Gathered and not released.
    int64_t gathered_at_step = -1;
    bool reduced = false;  // Reduced in the current step.
    // The gradient slot handed out for the unit (GradientSlot) or holding
    // its reduce-scatter in flight; -1: none.
    int grad_slot = -1;
    // The replica all-reduce of the unit's gradient shard, issued by
    // ReduceGrad and not yet waited for (Step waits).
    std::shared_ptr<comm::Work> replica_reduce;
    // A prefetch AllGather into `slot` not yet waited for, and the step
    // whose parameters it gathers.
    std::shared_ptr<comm::Work> inflight;
    int64_t inflight_step = -1;
    // The element ranges of the shard (from its start) whose tensors are
    // excluded from weight decay, in order; empty when none are.
    std::vector<std::pair<int64_t, int64_t>> no_decay;  // (begin, count)
  };

  StepEngine(EngineConfig config, core::MemoryBreakdown planned,
             std::shared_ptr<EngineMath> math);

  // Waits for the unit's prefetch, if any, and forgets it (its status too:
  // a failed collective breaks the communicator, and the next operation
  // reports it). Before anything reads or writes what it touches: the
  // shard it reads (Step, InstallState), the slot it writes (eviction, a
  // new epoch, destruction).
  void DrainLocked(int unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prefetches and replica all-reduces, their statuses dropped (a new
  // epoch, new state, destruction).
  void DrainAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Issues the replica all-reduces of the reduced units not yet issued,
  // last unit first, stopping at the first unit not reduced yet.
  void IssueReplicaReducesLocked(absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for every issued replica all-reduce: the first error, or OK.
  absl::Status WaitReplicaReducesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gradient slot for `unit`: the one it was handed, else a free one,
  // else the oldest whose reduce-scatter is in flight (finished first),
  // else the least recently handed out (taken from the unit it was handed
  // to, as when one slot served every unit).
  int AcquireGradSlotLocked(int unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint8_t* GradSlotData(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return grad_slot_->data() + slot * grad_slot_bytes_;
  }
  // Gives `slot` back (its unit no longer holds it).
  void FreeGradSlotLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the reduce-scatter in flight in `slot`, adds this rank's
  // block into the unit's gradient shard (the unit is then reduced and its
  // replica all-reduce may start) and frees the slot. A failure is kept in
  // reduce_error_ (ReduceGrad and Step return it).
  void FinishReduceLocked(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every reduce-scatter in flight, oldest first.
  void FinishReducesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReduceGrad with accumulate_only: adds `slot` into the unit's private
  // accumulation buffer (allocated on first use, if admitted).
  absl::Status AccumulateLocked(int unit, const uint8_t* slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ReduceGrad with F > 1: issues the unit's reduce-scatter in `slot`
  // (finished at once with one slot, later with more).
  absl::Status ReduceScatterLocked(int unit, int slot, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A step's reductions start over (nothing reduced, nothing issued).
  void ResetReductionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The optimizer on the local shards for pending_ (then cleared).
  absl::StatusOr<StepResult> ApplyPendingLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resets pending_ and pending_step_.
  void ClearPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the time since `since` to collective_wait_ns_: around the issue
  // of a collective the caller waits for (OpOptions::caller_waits), which
  // the backend may run to completion on the calling thread.
  void CountWait(MonoTime since);
  // work->Wait(), its time added to collective_wait_ns_.
  absl::Status WaitCounted(comm::Work& work);
  // Frees `slot` for `unit`: detaches the unit that held it.
  void TakeSlotLocked(int slot, int unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The least recently used slot of a released unit that is (or is not)
  // being prefetched; -1 if none.
  int LeastRecentlyUsedSlotLocked(bool prefetched) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  core::MemoryBreakdown HeldMemoryLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckUnit(int unit) const;
  float* master(int unit);
  float* grad(int unit);
  void* lowp(int unit);
  std::vector<int64_t> StoredCounts(int unit) const;

  const EngineConfig config_;
  const core::MemoryBreakdown planned_;
  const std::shared_ptr<EngineMath> math_;
  const int shard_index_;
  const bool lowp_units_;

  mutable absl::Mutex mu_;
  std::vector<UnitState> units_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<memory::ByteBuffer> master_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<memory::ByteBuffer> lowp_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<memory::ByteBuffer> grad_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<memory::ByteBuffer> state_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<memory::ByteBuffer>> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int> slot_unit_ ABSL_GUARDED_BY(mu_);  // -1: free.
  std::vector<int64_t> slot_last_use_ ABSL_GUARDED_BY(mu_);
  // G gradient slots of grad_slot_bytes_ each, in one allocation.
  std::unique_ptr<memory::ByteBuffer> grad_slot_ ABSL_GUARDED_BY(mu_);
  int64_t grad_slot_bytes_ = 0;  // Set at Create.
  struct GradSlot {
    int unit = -1;  // Handed out to, or reducing; -1: free.
    // The unit's reduce-scatter in flight in this slot, and its timeout
    // (for the replica all-reduce that follows it).
    std::shared_ptr<comm::Work> reducing;
    absl::Duration timeout;
    int64_t last_use = 0;
  };
  std::vector<GradSlot> grad_slots_ ABSL_GUARDED_BY(mu_);
  // The first failure of a reduce-scatter finished after its ReduceGrad
  // returned; cleared with the step's reductions.
  absl::Status reduce_error_ ABSL_GUARDED_BY(mu_);
  // Device memory only: F gradient-norm partials, for their all-gather
  // (a collective moves engine memory).
  std::unique_ptr<memory::ByteBuffer> norm_scratch_ ABSL_GUARDED_BY(mu_);
  // Per unit, only while micro-batches are accumulated without
  // synchronisation: fp32, the unit's real elements (math_'s scratch).
  // Outside the memory plan by design (opt-in, transient), and counted in
  // held_bytes().
  std::vector<std::unique_ptr<memory::ByteBuffer>> accumulation_
      ABSL_GUARDED_BY(mu_);
  std::shared_ptr<comm::Collective> shard_group_ ABSL_GUARDED_BY(mu_);
  uint64_t communicator_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<comm::Collective> replica_group_ ABSL_GUARDED_BY(mu_);
  GrowthAdmission admit_growth_ ABSL_GUARDED_BY(mu_);
  std::optional<core::AdamW> adamw_;
  std::optional<core::Sgd> sgd_;
  // The same optimizer with weight_decay 0, for excluded tensors (set only
  // when some are).
  std::optional<core::AdamW> adamw_no_decay_;
  std::optional<core::Sgd> sgd_no_decay_;
  std::optional<core::GradClipper> clipper_;
  // Written under mu_; read without it, so that status and probes never
  // wait behind a collective or the commit vote.
  struct PendingStep {
    int64_t step = 0;
    double grad_norm = 0;
    float clip_scale = 1.0f;
    std::optional<double> learning_rate;
  };
  std::optional<PendingStep> pending_ ABSL_GUARDED_BY(mu_);
  // pending_'s step (0: none), readable without mu_: the daemon's re-join
  // reports it from the heartbeat thread while a collective may hold mu_
  // until a dead peer times out, and the epoch driver, which would abort
  // that collective, waits for the same NodeManager lock.
  std::atomic<int64_t> pending_step_{0};
  std::atomic<int64_t> committed_step_{0};
  std::atomic<uint64_t> state_version_{0};
  std::atomic<int64_t> collective_wait_ns_{0};
  int64_t use_counter_ ABSL_GUARDED_BY(mu_) = 0;
  // How many replica all-reduces of this step were issued: they go from
  // the last unit down, so the next is unit N - 1 - replica_issued_.
  int replica_issued_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_STEP_ENGINE_H_
