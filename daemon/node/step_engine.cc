#include "daemon/node/step_engine.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/host_engine_math.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

// Every collective here is issued and waited for at once: let the backend
// run it on this thread when it is idle (OpOptions::caller_waits). Not
// while fail points are armed: the *.mid ones fire between issue and Wait,
// and must find the operation still in flight on the worker (the fault
// tests kill a daemon in the middle of a collective).
comm::OpOptions WaitedOptions(absl::Duration timeout) {
  comm::OpOptions options;
  options.timeout = timeout;
  options.caller_waits = !recovery::Failpoints::armed();
  return options;
}

// OpOptions::match_tag of the engine's collectives: what for (high word)
// and which unit (low word), so that --verify_collectives tells apart a
// gather of unit 1 from one of unit 0 of the same size.
enum class MatchPurpose : uint64_t {
  kGatherParams = 1,
  kReduceScatterGrad = 2,
  kReplicaReduceGrad = 3,
  kGradNorm = 4,
  kGatherState = 5,
};
uint64_t MatchTag(MatchPurpose purpose, int unit = 0) {
  return (static_cast<uint64_t>(purpose) << 32) | static_cast<uint32_t>(unit);
}
comm::OpOptions Tagged(comm::OpOptions options, uint64_t tag) {
  options.match_tag = tag;
  return options;
}

using core::DType;

}  // namespace

absl::StatusOr<std::unique_ptr<StepEngine>> StepEngine::Create(
    EngineConfig config, const ShardInitializer& init,
    memory::BufferAllocator& shared, memory::BufferAllocator& private_memory) {
  return Create(std::move(config), init, shared, private_memory,
                HostEngineMath::Get());
}

absl::StatusOr<std::unique_ptr<StepEngine>> StepEngine::Create(
    EngineConfig config, const ShardInitializer& init,
    memory::BufferAllocator& shared, memory::BufferAllocator& private_memory,
    std::shared_ptr<EngineMath> math) {
  if (math == nullptr) {
    return absl::InvalidArgumentError("math: no EngineMath given");
  }
  const int64_t f = config.plan.sharding_factor();
  if (config.rank < 0 || config.rank >= config.plan.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank (", config.rank, ") must be in [0, ",
                     config.plan.world_size(), ")"));
  }
  if (config.units.empty()) {
    return absl::InvalidArgumentError("units: the model has no units");
  }
  core::MemoryOptions memory_options;
  memory_options.optimizer = config.optimizer.kind;
  memory_options.reduce_dtype = config.reduce_dtype;
  memory_options.max_gathered_units = config.max_gathered_units;
  memory_options.max_reducing_units = config.max_reducing_units;
  memory_options.comm_scratch = config.comm_scratch;
  absl::StatusOr<core::MemoryBreakdown> planned = core::MemoryPlan::ForRank(
      config.units, config.plan, config.rank, memory_options);
  if (!planned.ok()) return planned.status();
  const DType lowp_dtype = config.units.front().dtype();
  for (const core::UnitLayout& u : config.units) {
    if (u.dtype() != lowp_dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unit '", u.name(), "': dtype ", core::DTypeName(u.dtype()),
          " differs from the model's ", core::DTypeName(lowp_dtype),
          " (one parameter dtype per model)"));
    }
  }

  auto engine = std::unique_ptr<StepEngine>(
      new StepEngine(std::move(config), *planned, std::move(math)));
  StepEngine& e = *engine;
  bool any_excluded = false;
  for (const std::vector<bool>& unit : e.config_.exclude_from_weight_decay) {
    for (bool excluded : unit) any_excluded = any_excluded || excluded;
  }
  switch (e.config_.optimizer.kind) {
    case core::OptimizerKind::kAdamW: {
      auto a = core::AdamW::Create(e.config_.optimizer.adamw);
      if (!a.ok()) return a.status();
      e.adamw_.emplace(*std::move(a));
      if (any_excluded) {
        core::AdamWOptions o = e.config_.optimizer.adamw;
        o.weight_decay = 0.0;
        e.adamw_no_decay_.emplace(*core::AdamW::Create(o));
      }
      break;
    }
    case core::OptimizerKind::kSgd:
    case core::OptimizerKind::kSgdMomentum: {
      auto s = core::Sgd::Create(e.config_.optimizer.sgd);
      if (!s.ok()) return s.status();
      e.sgd_.emplace(*std::move(s));
      if (any_excluded) {
        core::SgdOptions o = e.config_.optimizer.sgd;
        o.weight_decay = 0.0;
        e.sgd_no_decay_.emplace(*core::Sgd::Create(o));
      }
      break;
    }
  }
  auto clipper = core::GradClipper::Create(e.config_.max_grad_norm);
  if (!clipper.ok()) return clipper.status();
  e.clipper_.emplace(*std::move(clipper));

  absl::MutexLock lock(&e.mu_);
  int64_t total_stored = 0;
  for (size_t u = 0; u < e.config_.units.size(); ++u) {
    const core::ShardRange& shard = e.config_.units[u].shard(e.shard_index_);
    UnitState& st = e.units_[u];
    st.shard_offset = total_stored;
    st.shard_stored = shard.stored();
    st.shard_real = shard.numel;
    total_stored += shard.stored();
    // This shard's pieces of excluded tensors, merged when adjacent.
    const std::vector<bool>* excluded =
        u < e.config_.exclude_from_weight_decay.size()
            ? &e.config_.exclude_from_weight_decay[u]
            : nullptr;
    const std::vector<core::TensorView>& views = e.config_.units[u].tensors();
    for (size_t t = 0; excluded != nullptr && t < views.size(); ++t) {
      if (t >= excluded->size() || !(*excluded)[t]) continue;
      const int64_t lo = std::max(views[t].offset, shard.offset);
      const int64_t hi =
          std::min(views[t].offset + views[t].numel, shard.end());
      if (lo >= hi) continue;
      if (!st.no_decay.empty() &&
          st.no_decay.back().first + st.no_decay.back().second ==
              lo - shard.offset) {
        st.no_decay.back().second += hi - lo;
      } else {
        st.no_decay.emplace_back(lo - shard.offset, hi - lo);
      }
    }
  }
  // One allocation per category, sized exactly as the plan says.
  // A trainer maps the slots and, with F = 1, the shard storage Gather hands
  // out (the low-precision copy for bf16/fp16 units, else the master).
  auto alloc = [&](absl::string_view what, int64_t bytes,
                   std::unique_ptr<memory::ByteBuffer>* out,
                   bool trainer_maps) -> absl::Status {
    if (bytes == 0) return absl::OkStatus();
    memory::BufferAllocator& allocator = trainer_maps ? shared : private_memory;
    absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> b =
        allocator.Allocate(what, bytes);
    if (!b.ok()) return b.status();
    *out = *std::move(b);
    return absl::OkStatus();
  };
  const core::MemoryBreakdown& p = e.planned_;
  if (absl::Status s =
          alloc("param_shards", p.parameter_shard_bytes, &e.master_,
                /*trainer_maps=*/f == 1 && !e.lowp_units_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          alloc("lowp_shards", p.lowp_parameter_shard_bytes, &e.lowp_,
                /*trainer_maps=*/f == 1);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = alloc("grad_shards", p.gradient_shard_bytes, &e.grad_,
                             /*trainer_maps=*/false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          alloc("optimizer_state", p.optimizer_state_bytes, &e.state_,
                /*trainer_maps=*/false);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          alloc("gradient_slot", p.unsharded_gradient_bytes, &e.grad_slot_,
                /*trainer_maps=*/true);
      !s.ok()) {
    return s;
  }
  {
    const int64_t g =
        core::GradientSlotCount(f, static_cast<int64_t>(e.config_.units.size()),
                                e.config_.max_reducing_units);
    e.grad_slot_bytes_ = p.unsharded_gradient_bytes / g;
    e.grad_slots_.resize(g);
  }
  if (f > 1) {
    int64_t largest = 0;
    for (const core::UnitLayout& u : e.config_.units) {
      largest = std::max(largest, u.padded_bytes());
    }
    const bool keep_all =
        e.config_.plan.strategy() == core::ShardingStrategy::kShardGradOp;
    const int64_t n_slots =
        keep_all ? static_cast<int64_t>(e.config_.units.size())
                 : std::min<int64_t>(e.config_.max_gathered_units,
                                     e.config_.units.size());
    for (int64_t i = 0; i < n_slots; ++i) {
      // SHARD_GRAD_OP: one slot per unit, sized for it; else K slots of the
      // largest unit. Either way what MemoryPlan counts.
      const int64_t bytes =
          keep_all ? e.config_.units[i].padded_bytes() : largest;
      std::unique_ptr<memory::ByteBuffer> slot;
      if (absl::Status s = alloc(absl::StrCat("gathered_slot", i), bytes, &slot,
                                 /*trainer_maps=*/true);
          !s.ok()) {
        return s;
      }
      e.slots_.push_back(std::move(slot));
      e.slot_unit_.push_back(-1);
      e.slot_last_use_.push_back(0);
    }
  }
  if (e.math_->device_memory() && f > 1) {
    absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> b =
        e.math_->AllocateScratch(
            "grad_norm_partials",
            f * static_cast<int64_t>(sizeof(core::GradNormPartial)));
    if (!b.ok()) return b.status();
    e.norm_scratch_ = *std::move(b);
  }
  // Initial values of this rank's shards (padding stays zero). Device
  // memory is written from a bounded host staging buffer.
  constexpr int64_t kStagingElements = int64_t{1} << 22;  // 16 MiB
  std::vector<float> staging;
  for (size_t u = 0; u < e.config_.units.size(); ++u) {
    const core::ShardRange& shard = e.config_.units[u].shard(e.shard_index_);
    if (!e.math_->device_memory()) {
      if (shard.numel > 0) {
        init(static_cast<int>(u), shard.offset, e.master(u), shard.numel);
      }
    } else {
      for (int64_t done = 0; done < shard.numel; done += kStagingElements) {
        const int64_t n = std::min(kStagingElements, shard.numel - done);
        staging.resize(static_cast<size_t>(n));
        init(static_cast<int>(u), shard.offset + done, staging.data(), n);
        if (absl::Status s = e.math_->Upload(e.master(u) + done, staging.data(),
                                             n * int64_t{sizeof(float)});
            !s.ok()) {
          return s;
        }
      }
    }
    if (e.lowp_units_) {
      if (absl::Status s = e.math_->ToLowPrecision(
              e.master(u), e.lowp(u), lowp_dtype, e.units_[u].shard_stored);
          !s.ok()) {
        return s;
      }
    }
  }
  return engine;
}

StepEngine::StepEngine(EngineConfig config, core::MemoryBreakdown planned,
                       std::shared_ptr<EngineMath> math)
    : config_(std::move(config)),
      planned_(planned),
      math_(std::move(math)),
      shard_index_(config_.rank % config_.plan.sharding_factor()),
      lowp_units_(config_.units.front().dtype() != DType::kFloat32),
      units_(config_.units.size()),
      accumulation_(config_.units.size()) {}

float* StepEngine::master(int unit) {
  return reinterpret_cast<float*>(master_->data()) + units_[unit].shard_offset;
}
float* StepEngine::grad(int unit) {
  return reinterpret_cast<float*>(grad_->data()) + units_[unit].shard_offset;
}
void* StepEngine::lowp(int unit) {
  return lowp_->data() + units_[unit].shard_offset * 2;
}

std::vector<int64_t> StepEngine::StoredCounts(int unit) const {
  std::vector<int64_t> counts;
  for (const core::ShardRange& s : config_.units[unit].shards()) {
    counts.push_back(s.stored());
  }
  return counts;
}

absl::Status StepEngine::CheckUnit(int unit) const {
  if (unit < 0 || unit >= static_cast<int>(config_.units.size())) {
    return absl::NotFoundError(absl::StrCat("unit ", unit, " does not exist (",
                                            config_.units.size(),
                                            " units registered)"));
  }
  return absl::OkStatus();
}

void StepEngine::SetCommunicators(
    std::shared_ptr<comm::Collective> shard_group,
    std::shared_ptr<comm::Collective> replica_group) {
  absl::MutexLock lock(&mu_);
  // Prefetches of the old epoch still write into slots (its communicators
  // are aborted by now, so they end at once).
  DrainAllLocked();
  ++communicator_generation_;
  shard_group_ = std::move(shard_group);
  replica_group_ = std::move(replica_group);
  // Before any operation of this engine: the communicators' scratch for
  // the largest of them (a failure ends the communicator, which the owner
  // sees through AsyncError; nothing was issued to peers). Not waited for:
  // operations run in issue order behind it.
  if (shard_group_ != nullptr) {
    shard_group_->ReserveScratch(planned_.shard_comm_scratch_bytes);
  }
  if (replica_group_ != nullptr) {
    replica_group_->ReserveScratch(planned_.replica_comm_scratch_bytes);
  }
  // A new epoch abandons the step in progress (its collectives may have
  // failed half-way): the trainer redoes it, so partial reductions and
  // accumulated micro-batches are dropped. Parameters only change in a
  // completed Step, so gathered slots stay valid.
  ResetReductionsLocked();
  for (UnitState& st : units_) {
    // Cached gathers skip their collective, so every rank must agree on
    // what is cached: ranks may have got different distances into the
    // abandoned step, so the new epoch starts with nothing cached.
    st.gathered_at_step = -1;
  }
  for (auto& acc : accumulation_) acc.reset();
}

std::vector<StepEngine::StateSection> StepEngine::StateSections() {
  absl::MutexLock lock(&mu_);
  std::vector<StateSection> out;
  int64_t total_stored = 0;
  for (const UnitState& st : units_) total_stored += st.shard_stored;
  float* state = state_ ? reinterpret_cast<float*>(state_->data()) : nullptr;
  // Kind-major, units in order within a kind: each kind's shards lie back to
  // back in one buffer (and the optimizer's kinds back to back in state_),
  // so consecutive sections are consecutive memory and a shard copy moves
  // them in a few large pieces.
  auto add_all = [&](StateKind kind, float* base) {
    for (size_t u = 0; u < units_.size(); ++u) {
      const UnitState& st = units_[u];
      out.push_back(
          StateSection{static_cast<int>(u), kind, st.shard_stored,
                       reinterpret_cast<uint8_t*>(base + st.shard_offset),
                       st.shard_stored * static_cast<int64_t>(sizeof(float))});
    }
  };
  add_all(StateKind::kParameters,
          master_ ? reinterpret_cast<float*>(master_->data()) : nullptr);
  switch (config_.optimizer.kind) {
    case core::OptimizerKind::kAdamW:
      add_all(StateKind::kExpAvg, state);
      add_all(StateKind::kExpAvgSq, state + total_stored);
      break;
    case core::OptimizerKind::kSgdMomentum:
      add_all(StateKind::kMomentum, state);
      break;
    case core::OptimizerKind::kSgd:
      break;
  }
  return out;
}

std::vector<StepEngine::StateKind> StepEngine::OptimizerStateKinds() const {
  switch (config_.optimizer.kind) {
    case core::OptimizerKind::kAdamW:
      return {StateKind::kExpAvg, StateKind::kExpAvgSq};
    case core::OptimizerKind::kSgdMomentum:
      return {StateKind::kMomentum};
    case core::OptimizerKind::kSgd:
      break;
  }
  return {};
}

absl::StatusOr<std::vector<float>> StepEngine::GatherState(
    int unit, StateKind kind, absl::Duration timeout) {
  std::vector<float> out;
  if (absl::Status s = GatherStateInto(unit, kind, timeout, out); !s.ok()) {
    return s;
  }
  return out;
}

uint64_t StepEngine::communicator_generation() const {
  absl::MutexLock lock(&mu_);
  return communicator_generation_;
}

absl::Status StepEngine::GatherStateInto(int unit, StateKind kind,
                                         absl::Duration timeout,
                                         std::vector<float>& out,
                                         std::optional<uint64_t> generation) {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  // The shard's section, where StateSections says it is (the pointers stay
  // valid for the engine's life).
  const float* mine = nullptr;
  int64_t stored = 0;
  for (const StateSection& section : StateSections()) {
    if (section.unit == unit && section.kind == kind) {
      mine = reinterpret_cast<const float*>(section.data);
      stored = section.numel;
    }
  }
  if (mine == nullptr) {
    return absl::FailedPreconditionError("this optimizer keeps no such state");
  }
  absl::MutexLock lock(&mu_);
  if (generation.has_value() && *generation != communicator_generation_) {
    return absl::AbortedError(
        "the communicators were replaced (a new epoch) since the export "
        "began: its gathers would not meet its peers' there");
  }
  const int64_t f = config_.plan.sharding_factor();
  const std::vector<int64_t> counts = StoredCounts(unit);
  const int64_t total =
      std::accumulate(counts.begin(), counts.end(), int64_t{0});
  out.resize(static_cast<size_t>(total));
  if (f == 1) {
    return math_->Download(out.data(), mine, stored * int64_t{sizeof(float)});
  }
  if (shard_group_ == nullptr) {
    return absl::FailedPreconditionError(
        "no communicators yet: the daemon is not in a ready epoch");
  }
  // A collective writes engine memory: on a device, gather into scratch
  // and download it.
  std::unique_ptr<memory::ByteBuffer> scratch;
  void* gathered = out.data();
  if (math_->device_memory()) {
    absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> b =
        math_->AllocateScratch("gather_state", total * int64_t{sizeof(float)});
    if (!b.ok()) return b.status();
    scratch = *std::move(b);
    gathered = scratch->data();
  }
  absl::Status s =
      shard_group_
          ->AllGather(mine, gathered, counts, DType::kFloat32,
                      Tagged(WaitedOptions(timeout),
                             MatchTag(MatchPurpose::kGatherState, unit)))
          ->Wait();
  if (!s.ok()) return s;
  if (scratch != nullptr) {
    return math_->Download(out.data(), scratch->data(),
                           total * int64_t{sizeof(float)});
  }
  return absl::OkStatus();
}

absl::Status StepEngine::InstallState(int64_t committed_step) {
  absl::MutexLock lock(&mu_);
  DrainAllLocked();
  for (size_t u = 0; lowp_units_ && u < units_.size(); ++u) {
    if (absl::Status s =
            math_->ToLowPrecision(master(u), lowp(u), config_.units[u].dtype(),
                                  units_[u].shard_stored);
        !s.ok()) {
      return s;
    }
  }
  ClearPendingLocked();
  committed_step_ = committed_step;
  state_version_.fetch_add(1);
  ResetReductionsLocked();
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& st = units_[u];
    st.held = false;
    st.gathered_at_step = -1;
  }
  for (size_t i = 0; i < slot_unit_.size(); ++i) slot_unit_[i] = -1;
  for (UnitState& st : units_) st.slot = -1;
  for (auto& acc : accumulation_) acc.reset();
  return absl::OkStatus();
}

absl::StatusOr<UnitData> StepEngine::Gather(int unit, absl::Duration timeout) {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const core::UnitLayout& layout = config_.units[unit];
  UnitState& st = units_[unit];
  const DType dtype = layout.dtype();
  const int64_t elem = core::DTypeSize(dtype);
  if (config_.plan.sharding_factor() == 1) {
    // The shard is the unit: hand out the shard storage itself.
    st.held = true;
    memory::ByteBuffer* b = lowp_units_ ? lowp_.get() : master_.get();
    return UnitData{b, st.shard_offset * elem, st.shard_stored * elem, dtype,
                    /*was_ready=*/true};
  }
  bool was_ready = true;
  bool was_prefetched = false;
  if (st.inflight != nullptr) {
    // Prefetched: wait for it here, as this call's own AllGather would.
    was_ready = st.inflight->Done();
    const absl::Status s = WaitCounted(*st.inflight);
    st.inflight.reset();
    if (!s.ok()) {
      slot_unit_[st.slot] = -1;
      st.slot = -1;
      return s;
    }
    st.gathered_at_step = st.inflight_step;  // Stale if a Step came since.
    was_prefetched = st.gathered_at_step == committed_step_;
  }
  if (st.slot >= 0 && st.gathered_at_step == committed_step_) {
    // Still in its slot and unchanged since: no collective needed.
    st.held = true;
    slot_last_use_[st.slot] = ++use_counter_;
    return UnitData{
        slots_[st.slot].get(), 0, layout.padded_bytes(), dtype, was_ready,
        was_prefetched};
  }
  if (shard_group_ == nullptr) {
    return absl::FailedPreconditionError(
        "no communicators yet: the daemon is not in a ready epoch");
  }
  int slot = st.slot;
  if (config_.plan.strategy() == core::ShardingStrategy::kShardGradOp) {
    slot = unit;  // One slot per unit, sized for it.
  } else if (slot < 0) {
    // A free slot first; else the least recently used slot of a released
    // unit (its cached parameters are given up); else one a prefetch is
    // filling (the hint is given up once it has finished writing).
    for (size_t i = 0; i < slots_.size() && slot < 0; ++i) {
      if (slot_unit_[i] < 0) slot = static_cast<int>(i);
    }
    for (const bool prefetched : {false, true}) {
      if (slot >= 0) break;
      slot = LeastRecentlyUsedSlotLocked(prefetched);
    }
  }
  if (slot < 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all ", slots_.size(),
        " gathered slots hold unreleased units (max_gathered_units); release "
        "one before gathering unit ",
        unit));
  }
  TakeSlotLocked(slot, unit);
  const void* input = lowp_units_ ? lowp(unit) : master(unit);
  const MonoTime issued = MonoNow();
  std::shared_ptr<comm::Work> work = shard_group_->AllGather(
      input, slots_[slot]->data(), StoredCounts(unit), dtype,
      Tagged(WaitedOptions(timeout),
             MatchTag(MatchPurpose::kGatherParams, unit)));
  CountWait(issued);
  SHARDD_FAILPOINT("allgather.mid");
  absl::Status s = WaitCounted(*work);
  if (!s.ok()) return s;
  st.gathered_at_step = committed_step_;
  st.held = true;
  slot_last_use_[slot] = ++use_counter_;
  return UnitData{slots_[slot].get(), 0, layout.padded_bytes(), dtype,
                  /*was_ready=*/false};
}

int StepEngine::LeastRecentlyUsedSlotLocked(bool prefetched) const {
  int best = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slot_unit_[i] < 0) continue;
    const UnitState& other = units_[slot_unit_[i]];
    if (other.held || (other.inflight != nullptr) != prefetched) continue;
    if (best < 0 || slot_last_use_[i] < slot_last_use_[best]) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

void StepEngine::TakeSlotLocked(int slot, int unit) {
  const int previous = slot_unit_[slot];
  if (previous >= 0 && previous != unit) {
    DrainLocked(previous);  // A prefetch may still be writing into it.
    units_[previous].slot = -1;
  }
  slot_unit_[slot] = unit;
  units_[unit].slot = slot;
  units_[unit].gathered_at_step = -1;
}

StepEngine::PrefetchResult StepEngine::Prefetch(int unit,
                                                absl::Duration timeout,
                                                int64_t max_in_use) {
  if (!CheckUnit(unit).ok()) return PrefetchResult::kDropped;
  absl::MutexLock lock(&mu_);
  UnitState& st = units_[unit];
  if (config_.plan.sharding_factor() == 1 || st.held ||
      st.inflight != nullptr ||
      (st.slot >= 0 && st.gathered_at_step == committed_step_)) {
    return PrefetchResult::kNotNeeded;
  }
  if (shard_group_ == nullptr) return PrefetchResult::kDropped;
  int64_t in_use = 0;
  for (const UnitState& other : units_) {
    if (other.held || other.inflight != nullptr) ++in_use;
  }
  if (in_use >= max_in_use) return PrefetchResult::kDropped;
  int slot = st.slot;
  if (config_.plan.strategy() == core::ShardingStrategy::kShardGradOp) {
    slot = unit;
  } else if (slot < 0) {
    // A free slot, else the least recently used one of a released unit
    // that is not being prefetched itself; never a held one.
    for (size_t i = 0; i < slots_.size() && slot < 0; ++i) {
      if (slot_unit_[i] < 0) slot = static_cast<int>(i);
    }
    if (slot < 0) slot = LeastRecentlyUsedSlotLocked(/*prefetched=*/false);
  }
  if (slot < 0) return PrefetchResult::kDropped;
  TakeSlotLocked(slot, unit);
  slot_last_use_[slot] = ++use_counter_;
  const void* input = lowp_units_ ? lowp(unit) : master(unit);
  // Not caller_waits: the point is not to wait.
  comm::OpOptions prefetch;
  prefetch.timeout = timeout;
  prefetch.match_tag = MatchTag(MatchPurpose::kGatherParams, unit);
  st.inflight =
      shard_group_->AllGather(input, slots_[slot]->data(), StoredCounts(unit),
                              config_.units[unit].dtype(), prefetch);
  st.inflight_step = committed_step_;
  return PrefetchResult::kStarted;
}

void StepEngine::DrainLocked(int unit) {
  UnitState& st = units_[unit];
  if (st.inflight == nullptr) return;
  (void)WaitCounted(*st.inflight);
  st.inflight.reset();
  st.gathered_at_step = -1;
  if (st.slot >= 0) {
    slot_unit_[st.slot] = -1;
    st.slot = -1;
  }
}

void StepEngine::DrainAllLocked() {
  for (size_t u = 0; u < units_.size(); ++u) DrainLocked(static_cast<int>(u));
  // Reduce-scatters write into gradient slots the trainer maps; they are
  // waited for, and their units count as not reduced.
  for (size_t s = 0; s < grad_slots_.size(); ++s) {
    if (grad_slots_[s].reducing == nullptr) continue;
    (void)WaitCounted(*grad_slots_[s].reducing);
    FreeGradSlotLocked(static_cast<int>(s));
  }
  (void)WaitReplicaReducesLocked();
}

void StepEngine::IssueReplicaReducesLocked(absl::Duration timeout) {
  if (!config_.plan.has_replica() || replica_group_ == nullptr) return;
  const int n = static_cast<int>(units_.size());
  while (replica_issued_ < n) {
    const int u = n - 1 - replica_issued_;
    UnitState& st = units_[u];
    if (!st.reduced) return;
    // Asynchronous: it runs on the replica group's thread while the
    // trainer computes; Step waits.
    comm::OpOptions options;
    options.timeout = timeout;
    options.match_tag = MatchTag(MatchPurpose::kReplicaReduceGrad, u);
    st.replica_reduce =
        replica_group_->AllReduce(grad(u), st.shard_stored, DType::kFloat32,
                                  comm::ReduceOp::kAverage, options);
    ++replica_issued_;
  }
}

absl::Status StepEngine::WaitReplicaReducesLocked() {
  absl::Status first = absl::OkStatus();
  for (UnitState& st : units_) {
    if (st.replica_reduce == nullptr) continue;
    absl::Status s = WaitCounted(*st.replica_reduce);
    st.replica_reduce.reset();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

void StepEngine::ResetReductionsLocked() {
  for (size_t s = 0; s < grad_slots_.size(); ++s) {
    if (grad_slots_[s].reducing != nullptr) {
      (void)WaitCounted(*grad_slots_[s].reducing);
    }
    FreeGradSlotLocked(static_cast<int>(s));
  }
  (void)WaitReplicaReducesLocked();
  for (UnitState& st : units_) st.reduced = false;
  replica_issued_ = 0;
  reduce_error_ = absl::OkStatus();
}

StepEngine::~StepEngine() {
  absl::MutexLock lock(&mu_);
  DrainAllLocked();
}

absl::Status StepEngine::Release(int unit, bool reshard) {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  UnitState& st = units_[unit];
  if (!st.held) {
    return absl::FailedPreconditionError(
        absl::StrCat("unit ", unit, " is not gathered (released twice?)"));
  }
  st.held = false;
  if (reshard && st.slot >= 0) {
    slot_unit_[st.slot] = -1;
    st.slot = -1;
    st.gathered_at_step = -1;
  }
  return absl::OkStatus();
}

absl::StatusOr<UnitData> StepEngine::GradientSlot(int unit) {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const core::UnitLayout& layout = config_.units[unit];
  const int slot = AcquireGradSlotLocked(unit);
  return UnitData{grad_slot_.get(), slot * grad_slot_bytes_,
                  layout.padded_numel() * core::DTypeSize(config_.reduce_dtype),
                  config_.reduce_dtype};
}

int StepEngine::AcquireGradSlotLocked(int unit) {
  UnitState& st = units_[unit];
  if (st.grad_slot >= 0 && grad_slots_[st.grad_slot].reducing == nullptr) {
    grad_slots_[st.grad_slot].last_use = ++use_counter_;
    return st.grad_slot;
  }
  auto oldest = [&](bool reducing) {
    int best = -1;
    for (size_t s = 0; s < grad_slots_.size(); ++s) {
      const GradSlot& g = grad_slots_[s];
      if (g.unit < 0 || (g.reducing != nullptr) != reducing) continue;
      if (best < 0 || g.last_use < grad_slots_[best].last_use) {
        best = static_cast<int>(s);
      }
    }
    return best;
  };
  int slot = -1;
  for (size_t s = 0; s < grad_slots_.size() && slot < 0; ++s) {
    if (grad_slots_[s].unit < 0) slot = static_cast<int>(s);
  }
  if (slot < 0) {
    slot = oldest(/*reducing=*/true);
    if (slot >= 0) FinishReduceLocked(slot);
  }
  if (slot < 0) {
    // Every slot is handed to a unit not reduced yet: share, as the single
    // slot always was (the trainer writes a unit's gradient right before
    // its ReduceGrad).
    slot = oldest(/*reducing=*/false);
    units_[grad_slots_[slot].unit].grad_slot = -1;
  }
  grad_slots_[slot].unit = unit;
  grad_slots_[slot].last_use = ++use_counter_;
  st.grad_slot = slot;
  return slot;
}

void StepEngine::FreeGradSlotLocked(int slot) {
  GradSlot& g = grad_slots_[slot];
  if (g.unit >= 0 && units_[g.unit].grad_slot == slot) {
    units_[g.unit].grad_slot = -1;
  }
  g.unit = -1;
  g.reducing.reset();
}

void StepEngine::FinishReduceLocked(int slot) {
  GradSlot& g = grad_slots_[slot];
  const int unit = g.unit;
  absl::Status s = WaitCounted(*g.reducing);
  if (s.ok()) {
    const core::UnitLayout& layout = config_.units[unit];
    const int64_t elem = core::DTypeSize(config_.reduce_dtype);
    s = math_->Accumulate(
        grad(unit),
        GradSlotData(slot) + layout.shard(shard_index_).offset * elem,
        config_.reduce_dtype, units_[unit].shard_stored, /*first=*/true);
  }
  const absl::Duration timeout = g.timeout;
  FreeGradSlotLocked(slot);
  if (!s.ok()) {
    if (reduce_error_.ok()) reduce_error_ = s;
    return;
  }
  units_[unit].reduced = true;
  IssueReplicaReducesLocked(timeout);
}

void StepEngine::FinishReducesLocked() {
  for (;;) {
    int next = -1;
    for (size_t s = 0; s < grad_slots_.size(); ++s) {
      const GradSlot& g = grad_slots_[s];
      if (g.reducing == nullptr) continue;
      if (next < 0 || g.last_use < grad_slots_[next].last_use) {
        next = static_cast<int>(s);
      }
    }
    if (next < 0) return;
    FinishReduceLocked(next);
  }
}

absl::Status StepEngine::ReduceGrad(int unit, absl::Duration timeout,
                                    bool accumulate_only) {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  // The gradient shard is about to be overwritten: a step prepared from it
  // can no longer be applied.
  ClearPendingLocked();
  const core::UnitLayout& layout = config_.units[unit];
  UnitState& st = units_[unit];
  const bool reducing =
      st.grad_slot >= 0 && grad_slots_[st.grad_slot].reducing != nullptr;
  if (st.reduced || reducing) {
    return absl::FailedPreconditionError(absl::StrCat(
        "unit ", unit, " ('", layout.name(),
        "') was already reduced in this step; accumulate micro-batches with "
        "accumulate_only"));
  }
  // An earlier unit's reduce-scatter failed after its ReduceGrad returned:
  // the communicator is broken, and the step with it.
  if (!reduce_error_.ok()) return reduce_error_;
  const DType rd = config_.reduce_dtype;
  const int64_t elem = core::DTypeSize(rd);
  const int slot_index = AcquireGradSlotLocked(unit);
  uint8_t* slot = GradSlotData(slot_index);
  const int64_t n = layout.numel();
  std::unique_ptr<memory::ByteBuffer>& acc = accumulation_[unit];
  if (accumulate_only) return AccumulateLocked(unit, slot);
  if (acc != nullptr) {
    // slot += accumulated, rounded once into the reduce dtype.
    if (absl::Status s = math_->AddRounded(
            slot, rd, reinterpret_cast<const float*>(acc->data()), n);
        !s.ok()) {
      return s;
    }
    acc.reset();
  }
  // A slot serves every unit: the trainer writes the real elements;
  // padding must add nothing.
  if (layout.padding_elements() > 0) {
    if (absl::Status s =
            math_->Zero(slot + n * elem, layout.padding_elements() * elem);
        !s.ok()) {
      return s;
    }
  }
  const core::ShardRange& shard = layout.shard(shard_index_);
  if (config_.plan.sharding_factor() > 1) {
    return ReduceScatterLocked(unit, slot_index, timeout);
  }
  absl::Status s = math_->Accumulate(grad(unit), slot + shard.offset * elem, rd,
                                     st.shard_stored, /*first=*/true);
  FreeGradSlotLocked(slot_index);
  if (!s.ok()) return s;
  st.reduced = true;
  IssueReplicaReducesLocked(timeout);
  return absl::OkStatus();
}

absl::Status StepEngine::AccumulateLocked(int unit, const uint8_t* slot) {
  const core::UnitLayout& layout = config_.units[unit];
  const int64_t n = layout.numel();
  std::unique_ptr<memory::ByteBuffer>& acc = accumulation_[unit];
  const bool first = acc == nullptr;
  if (first) {
    const std::string name = absl::StrCat(layout.name(), ".accumulation");
    if (admit_growth_) {
      if (absl::Status s =
              admit_growth_(name, n * 4, HeldMemoryLocked().total_bytes);
          !s.ok()) {
        return s;
      }
    }
    absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> b =
        math_->AllocateScratch(name, n * 4);
    if (!b.ok()) return b.status();
    acc = *std::move(b);
  }
  absl::Status s = math_->Accumulate(reinterpret_cast<float*>(acc->data()),
                                     slot, config_.reduce_dtype, n, first);
  // A first micro-batch that did not land is not an accumulation. The unit
  // keeps its slot for its next micro-batch.
  if (!s.ok() && first) acc.reset();
  return s;
}

absl::Status StepEngine::ReduceScatterLocked(int unit, int slot_index,
                                             absl::Duration timeout) {
  if (shard_group_ == nullptr) {
    return absl::FailedPreconditionError(
        "no communicators yet: the daemon is not in a ready epoch");
  }
  const int64_t elem = core::DTypeSize(config_.reduce_dtype);
  uint8_t* slot = GradSlotData(slot_index);
  const core::ShardRange& shard = config_.units[unit].shard(shard_index_);
  // In place: this rank's block of the slot receives the average. With one
  // slot the caller waits; with more it runs while the trainer writes the
  // next unit's gradient into another slot, and is finished when its slot
  // is needed again or at Step.
  GradSlot& g = grad_slots_[slot_index];
  comm::OpOptions options = Tagged(
      WaitedOptions(timeout), MatchTag(MatchPurpose::kReduceScatterGrad, unit));
  if (grad_slots_.size() > 1) options.caller_waits = false;
  const MonoTime issued = MonoNow();
  g.reducing = shard_group_->ReduceScatter(
      slot, slot + shard.offset * elem, StoredCounts(unit),
      config_.reduce_dtype, comm::ReduceOp::kAverage, options);
  CountWait(issued);
  g.timeout = timeout;
  g.last_use = ++use_counter_;
  SHARDD_FAILPOINT("reducescatter.mid");
  if (grad_slots_.size() > 1) return absl::OkStatus();
  FinishReduceLocked(slot_index);
  absl::Status s = reduce_error_;
  reduce_error_ = absl::OkStatus();
  return s;
}

absl::StatusOr<StepResult> StepEngine::Step(
    int64_t expected_step, absl::Duration timeout,
    const std::function<absl::Status(const StepResult&)>& before_apply,
    std::optional<double> learning_rate) {
  absl::MutexLock lock(&mu_);
  // A new attempt supersedes an unresolved one.
  ClearPendingLocked();
  // A prefetch reads the shards the optimizer is about to change (and its
  // parameters would be stale after this step anyway). The replica
  // all-reduces are waited for below, their errors kept.
  for (size_t u = 0; u < units_.size(); ++u) DrainLocked(static_cast<int>(u));
  // The reduce-scatters still in flight land in the gradient shards (their
  // units become reduced); one that failed fails the step.
  FinishReducesLocked();
  if (!reduce_error_.ok()) return reduce_error_;
  if (expected_step != committed_step_ + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "expected_step ", expected_step, " is not the next step (committed ",
        committed_step_.load(), ")"));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].reduced) {
      return absl::FailedPreconditionError(
          absl::StrCat("step without gradients: unit ", u, " ('",
                       config_.units[u].name(), "') has none"));
    }
  }
  const bool replicas = config_.plan.has_replica();
  const bool sharded = config_.plan.sharding_factor() > 1;
  if ((replicas && replica_group_ == nullptr) ||
      (sharded && shard_group_ == nullptr)) {
    return absl::FailedPreconditionError(
        "no communicators yet: the daemon is not in a ready epoch");
  }
  const comm::OpOptions options =
      Tagged(WaitedOptions(timeout), MatchTag(MatchPurpose::kGradNorm));
  // 1. Average the gradient shards over the replicas (W/F of them): most
  // were issued by ReduceGrad; the rest go now.
  if (replicas) {
    IssueReplicaReducesLocked(timeout);
    SHARDD_FAILPOINT("allreduce.mid");
    if (absl::Status s = WaitReplicaReducesLocked(); !s.ok()) return s;
  }
  // 2. The exact global norm: this shard group's partials, merged in rank
  // order (the F shards of a group cover the model once).
  core::GradNormPartial mine;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (absl::Status s =
            math_->SquaresInto(grad(u), units_[u].shard_real, &mine);
        !s.ok()) {
      return s;
    }
  }
  std::vector<core::GradNormPartial> partials(1, mine);
  if (sharded) {
    const int64_t f = config_.plan.sharding_factor();
    static_assert(sizeof(core::GradNormPartial) % sizeof(float) == 0);
    constexpr int64_t kWords = sizeof(core::GradNormPartial) / sizeof(float);
    partials.assign(f, core::GradNormPartial{});
    constexpr int64_t kBytes = sizeof(core::GradNormPartial);
    // A byte copy: all-gather moves bits, fp32 is only the element size.
    // In engine memory: on a device, through the scratch, in place.
    void* exchange = partials.data();
    const void* input = &mine;
    if (norm_scratch_ != nullptr) {
      exchange = norm_scratch_->data();
      input = norm_scratch_->data() + shard_index_ * kBytes;
      if (absl::Status s = math_->Upload(
              norm_scratch_->data() + shard_index_ * kBytes, &mine, kBytes);
          !s.ok()) {
        return s;
      }
    }
    const MonoTime issued = MonoNow();
    std::shared_ptr<comm::Work> work = shard_group_->AllGather(
        input, exchange, std::vector<int64_t>(f, kWords), DType::kFloat32,
        options);
    CountWait(issued);
    absl::Status s = WaitCounted(*work);
    if (!s.ok()) return s;
    if (norm_scratch_ != nullptr) {
      s = math_->Download(partials.data(), norm_scratch_->data(), f * kBytes);
      if (!s.ok()) return s;
    }
  }
  absl::StatusOr<core::ClipResult> clip = clipper_->Finish(partials);
  if (!clip.ok()) return clip.status();
  // 3. The optimizer on the local shards; nothing above changed parameters,
  // so a failure before this point leaves the step unapplied. The prepared
  // step is kept until resolved: a vote whose answer never arrived leaves
  // it in doubt, and the member applies or drops it when it learns what
  // the others did (ApplyPending / DropPending).
  const int64_t step = committed_step_ + 1;
  pending_ = PendingStep{step, clip->total_norm, clip->scale, learning_rate};
  pending_step_.store(step, std::memory_order_release);
  if (before_apply) {
    if (absl::Status s =
            before_apply(StepResult{step, clip->total_norm, clip->scale});
        !s.ok()) {
      return s;
    }
  }
  return ApplyPendingLocked();
}

std::optional<int64_t> StepEngine::pending_step() const {
  // Without mu_: a collective holds it for as long as a dead peer takes to
  // time out, and the member's re-join asks for this (see pending_step_).
  const int64_t step = pending_step_.load(std::memory_order_acquire);
  if (step == 0) return std::nullopt;
  return step;
}

void StepEngine::ClearPendingLocked() {
  pending_.reset();
  pending_step_.store(0, std::memory_order_release);
}

absl::StatusOr<StepResult> StepEngine::ApplyPending() {
  absl::MutexLock lock(&mu_);
  if (!pending_.has_value()) {
    return absl::FailedPreconditionError("no step is pending");
  }
  return ApplyPendingLocked();
}

void StepEngine::DropPending() {
  absl::MutexLock lock(&mu_);
  ClearPendingLocked();
}

absl::StatusOr<StepResult> StepEngine::ApplyPendingLocked() {
  const PendingStep pending = *pending_;
  ClearPendingLocked();
  const int64_t step = pending.step;
  if (pending.learning_rate.has_value()) {
    // Validated before the vote by the caller; set_lr's check is the last
    // line of defence and changes nothing on error.
    absl::Status s = adamw_ ? adamw_->set_lr(*pending.learning_rate)
                            : sgd_->set_lr(*pending.learning_rate);
    if (!s.ok()) return s;
    if (adamw_no_decay_) (void)adamw_no_decay_->set_lr(*pending.learning_rate);
    if (sgd_no_decay_) (void)sgd_no_decay_->set_lr(*pending.learning_rate);
  }
  float* state = state_ ? reinterpret_cast<float*>(state_->data()) : nullptr;
  int64_t total_stored = 0;
  for (const UnitState& st : units_) total_stored += st.shard_stored;
  for (size_t u = 0; u < units_.size(); ++u) {
    UnitState& st = units_[u];
    const DType lowp_dtype = config_.units[u].dtype();
    void* lowp_out = lowp_units_ ? lowp(u) : nullptr;
    // Elements [begin, begin + n) of the shard, with or without decay.
    auto update = [&](int64_t begin, int64_t n, bool decay) -> absl::Status {
      if (n == 0) return absl::OkStatus();
      void* out = lowp_out == nullptr ? nullptr
                                      : static_cast<uint8_t*>(lowp_out) +
                                            begin * core::DTypeSize(lowp_dtype);
      if (adamw_) {
        const core::AdamW& opt = decay ? *adamw_ : *adamw_no_decay_;
        return math_->AdamW(opt, step, pending.clip_scale, grad(u) + begin,
                            master(u) + begin, state + st.shard_offset + begin,
                            state + total_stored + st.shard_offset + begin, n,
                            lowp_dtype, out);
      }
      float* momentum =
          config_.optimizer.kind == core::OptimizerKind::kSgdMomentum
              ? state + st.shard_offset + begin
              : nullptr;
      const core::Sgd& opt = decay ? *sgd_ : *sgd_no_decay_;
      return math_->Sgd(opt, step, pending.clip_scale, grad(u) + begin,
                        master(u) + begin, momentum, n, lowp_dtype, out);
    };
    absl::Status s;
    int64_t next = 0;  // First element not yet updated.
    for (const auto& [begin, n] : st.no_decay) {
      if (s.ok()) s = update(next, begin - next, /*decay=*/true);
      if (s.ok()) s = update(begin, n, /*decay=*/false);
      next = begin + n;
    }
    if (s.ok()) s = update(next, st.shard_real - next, /*decay=*/true);
    if (!s.ok()) return s;
    st.reduced = false;
    if (u + 1 == (units_.size() + 1) / 2) SHARDD_FAILPOINT("optimizer.mid");
  }
  replica_issued_ = 0;
  committed_step_ = step;
  state_version_.fetch_add(1);
  return StepResult{step, pending.grad_norm, pending.clip_scale};
}

double StepEngine::learning_rate() const {
  absl::MutexLock lock(&mu_);
  return adamw_ ? adamw_->options().lr : sgd_->options().lr;
}

int64_t StepEngine::committed_step() const { return committed_step_.load(); }

absl::Duration StepEngine::collective_wait() const {
  return absl::Nanoseconds(collective_wait_ns_.load());
}

void StepEngine::CountWait(MonoTime since) {
  collective_wait_ns_.fetch_add(absl::ToInt64Nanoseconds(MonoNow() - since));
}

absl::Status StepEngine::WaitCounted(comm::Work& work) {
  const MonoTime start = MonoNow();
  absl::Status s = work.Wait();
  CountWait(start);
  return s;
}

uint64_t StepEngine::state_version() const { return state_version_.load(); }

void StepEngine::SetGrowthAdmission(GrowthAdmission admit) {
  absl::MutexLock lock(&mu_);
  admit_growth_ = std::move(admit);
}

core::MemoryBreakdown StepEngine::held_memory() const {
  absl::MutexLock lock(&mu_);
  return HeldMemoryLocked();
}

core::MemoryBreakdown StepEngine::HeldMemoryLocked() const {
  auto size = [](const std::unique_ptr<memory::ByteBuffer>& b) -> int64_t {
    return b ? static_cast<int64_t>(b->size()) : 0;
  };
  core::MemoryBreakdown m;
  m.parameter_shard_bytes = size(master_);
  m.lowp_parameter_shard_bytes = size(lowp_);
  m.gradient_shard_bytes = size(grad_);
  m.optimizer_state_bytes = size(state_);
  for (const auto& s : slots_) m.gathered_parameter_bytes += size(s);
  m.unsharded_gradient_bytes = size(grad_slot_);
  for (const auto& a : accumulation_) m.unsharded_gradient_bytes += size(a);
  // Held by the communicators for this engine's operations (device backends).
  m.shard_comm_scratch_bytes =
      shard_group_ != nullptr ? shard_group_->scratch_bytes() : 0;
  m.replica_comm_scratch_bytes =
      replica_group_ != nullptr ? replica_group_->scratch_bytes() : 0;
  m.comm_scratch_bytes =
      m.shard_comm_scratch_bytes + m.replica_comm_scratch_bytes;
  // The shard buffers are laid out unit after unit with the same element
  // count, so each padded element costs the same bytes in all of them.
  int64_t stored = 0, padding = 0;
  for (const UnitState& st : units_) {
    stored += st.shard_stored;
    padding += st.shard_stored - st.shard_real;
  }
  const int64_t shard_bytes = m.parameter_shard_bytes +
                              m.lowp_parameter_shard_bytes +
                              m.gradient_shard_bytes + m.optimizer_state_bytes;
  m.shard_padding_bytes = stored > 0 ? shard_bytes / stored * padding : 0;
  m.peak_parameter_bytes = m.parameter_shard_bytes +
                           m.lowp_parameter_shard_bytes +
                           m.gathered_parameter_bytes;
  m.total_bytes = m.peak_parameter_bytes + m.gradient_shard_bytes +
                  m.optimizer_state_bytes + m.unsharded_gradient_bytes +
                  m.comm_scratch_bytes;
  return m;
}

absl::StatusOr<std::vector<float>> StepEngine::MasterShard(int unit) const {
  if (absl::Status s = CheckUnit(unit); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const UnitState& st = units_[unit];
  const float* p =
      reinterpret_cast<const float*>(master_->data()) + st.shard_offset;
  std::vector<float> out(static_cast<size_t>(st.shard_stored));
  if (absl::Status s = math_->Download(
          out.data(), p, st.shard_stored * int64_t{sizeof(float)});
      !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace shardd::node
