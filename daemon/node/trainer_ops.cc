#include "daemon/node/trainer_ops.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/model_config.h"
#include "daemon/memory/cuda_ipc_name.h"
#include "daemon/memory/shared_memory_segment.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

absl::Status CheckUnitIndex(int unit, int units) {
  if (unit < 0 || unit >= units) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unit: ", unit, " is out of range (the model has ", units, " units)"));
  }
  return absl::OkStatus();
}

v1::DType ToProtoDType(core::DType d) { return static_cast<v1::DType>(d); }

// The learning rate and model fingerprint of a step, which every rank's
// vote must agree on.
uint64_t StepFingerprint(uint64_t model_fingerprint, double lr) {
  uint64_t bits = 0;
  static_assert(sizeof(bits) == sizeof(lr));
  std::memcpy(&bits, &lr, sizeof(lr));
  uint64_t h = model_fingerprint ^ 0x9E3779B97F4A7C15ull;
  h ^= bits + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

constexpr char kGradRequired[] =
    "grad: required (the grad_buffer from Gather, a shared-memory range or "
    "inline bytes)";

}  // namespace

OperationFailure ClassifyFailure(const absl::Status& s) {
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
      absl::IsAborted(s) || absl::IsCancelled(s)) {
    return OperationFailure::kPeer;
  }
  if (absl::IsInternal(s) || absl::IsUnknown(s)) return OperationFailure::kBug;
  return OperationFailure::kRequest;
}

bool IsCollectiveFailure(const absl::Status& s) {
  return ClassifyFailure(s) == OperationFailure::kPeer;
}

TrainerOps::TrainerOps(TrainerOpsOptions options)
    : options_(std::move(options)) {}

void TrainerOps::NewEpoch() {
  absl::MutexLock lock(&mu_);
  ledger_.ResetForEpoch();
}

void TrainerOps::NoteWaitReady() {
  NoteCall();
  absl::MutexLock lock(&mu_);
  ledger_.EndAttempt();
}

uint64_t TrainerOps::NewAttachment() {
  absl::BitGen random;
  uint64_t id = 0;
  while (id == 0) id = absl::Uniform<uint64_t>(random);
  if (options_.presence != nullptr) options_.presence->Registered();
  absl::MutexLock lock(&mu_);
  attachment_ = id;
  return id;
}

absl::Status TrainerOps::CheckAttachment(
    std::optional<uint64_t> attachment) const {
  if (!attachment.has_value()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (*attachment == attachment_) return absl::OkStatus();
  if (attachment_ == 0) {
    // Nothing registered with this process: the attachment is an earlier
    // daemon's, and this one replaced it on the same socket while the
    // trainer was between two calls (the connection it had then broke
    // unseen). Its shard may be here already (copied from a replica), but
    // the trainer's buffers are the old daemon's: it must re-attach, as
    // when nothing answered.
    return absl::UnavailableError(absl::StrFormat(
        "this daemon has no trainer registered: attachment %016x is an "
        "earlier daemon's (this one replaced it since); RegisterModel again "
        "to re-attach, then redo the step",
        *attachment));
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "this trainer's attachment %016x is superseded: another trainer process "
      "registered with this daemon since (attachment %016x), and only the "
      "newest may call; this process should exit",
      *attachment, attachment_));
}

void TrainerOps::NoteCall() {
  if (options_.presence != nullptr) options_.presence->Called();
  if (options_.observer != nullptr)
    options_.observer->TrainerCalled(absl::Now());
}

void TrainerOps::EngineInstalled() {
  absl::MutexLock lock(&mu_);
  ledger_.ResetForEngine();
}

bool TrainerOps::Detach(StepEngine& engine) {
  absl::MutexLock lock(&mu_);
  for (int u : ledger_.TakeHeld()) (void)engine.Release(u);
  return ledger_.TakeInStep();
}

void TrainerOps::NoteCommitted(const v1::StepResponse& response) {
  absl::MutexLock lock(&mu_);
  ledger_.NoteCommitted(response);
}

bool TrainerOps::Idle() const {
  absl::MutexLock lock(&mu_);
  return ledger_.Idle();
}

std::vector<int> TrainerOps::HeldUnits() const {
  absl::MutexLock lock(&mu_);
  return {ledger_.held().begin(), ledger_.held().end()};
}

void TrainerOps::CountAbort(absl::string_view reason) {
  if (options_.observer == nullptr) return;
  bool first = false;
  {
    absl::MutexLock lock(&mu_);
    first = ledger_.MarkAbortCounted();
  }
  if (first) options_.observer->StepAborted(reason);
}

absl::StatusOr<int64_t> TrainerOps::EnterReadyEpoch() {
  absl::StatusOr<int64_t> epoch = options_.host->EnterReadyEpoch();
  if (epoch.ok()) {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = ledger_.EnterAttempt(*epoch); !s.ok()) {
      epoch = s;
    } else {
      ledger_.NoteCollectiveIssued();
    }
  }
  if (!epoch.ok()) CountAbort(metrics::node_labels::kEpochChanged);
  return epoch;
}

absl::StatusOr<std::shared_ptr<StepEngine>> TrainerOps::EngineForUnit(
    int unit) {
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = options_.host->Engine();
  if (!engine.ok()) return engine.status();
  if (absl::Status s = CheckUnitIndex(
          unit, static_cast<int>((*engine)->config().units.size()));
      !s.ok()) {
    return s;
  }
  return engine;
}

absl::StatusOr<v1::GatherResponse> TrainerOps::Gather(
    const v1::GatherRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  (void)deadline;  // Collectives run to the collective timeout.
  NoteCall();
  absl::MutexLock op(&op_mu_);
  if (absl::Status s = CheckAttachment(attachment); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<StepEngine>> engine =
      EngineForUnit(request.unit());
  if (!engine.ok()) return engine.status();
  const int units = static_cast<int>((*engine)->config().units.size());
  const int unit = request.unit();
  for (int i = 0; i < request.prefetch_size(); ++i) {
    if (request.prefetch(i) < 0 || request.prefetch(i) >= units) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefetch[", i, "]: ", request.prefetch(i),
                       " is out of range (the model has ", units, " units)"));
    }
  }
  std::set<int> releasing;
  for (int i = 0; i < request.release_first_size(); ++i) {
    const int r = request.release_first(i).unit();
    if (r < 0 || r >= units) {
      return absl::InvalidArgumentError(
          absl::StrCat("release_first[", i, "].unit: ", r,
                       " is out of range (the model has ", units, " units)"));
    }
    releasing.insert(r);
  }
  bool was_ready = false;
  {
    absl::MutexLock lock(&mu_);
    was_ready = ledger_.IsHeld(unit) && releasing.count(unit) == 0;
    if (absl::Status s = ledger_.CheckGather(
            unit, (*engine)->config().max_gathered_units, releasing);
        !s.ok()) {
      return s;
    }
    // Checked with the rest: from here on the request is carried out.
    for (const v1::ReleaseRequest& r : request.release_first()) {
      absl::StatusOr<bool> released = ReleaseHeld(**engine, r);
      if (!released.ok()) return released.status();
    }
  }
  absl::StatusOr<int64_t> epoch = EnterReadyEpoch();
  if (!epoch.ok()) return epoch.status();
  absl::Cleanup report_wait = [&, before = (*engine)->collective_wait()] {
    ReportWait(metrics::node_labels::kCallGather, **engine, before);
  };
  const absl::Duration timeout = options_.collective_timeout;
  absl::StatusOr<UnitData> data = (*engine)->Gather(unit, timeout);
  if (!data.ok()) {
    return options_.host->OnCollectiveError("Gather", data.status());
  }
  // The hints, in order: their AllGathers start now and run while the
  // trainer computes (at most K units held or in flight; the rest dropped).
  const int64_t k = (*engine)->config().max_gathered_units;
  for (int p : request.prefetch()) {
    const StepEngine::PrefetchResult result =
        (*engine)->Prefetch(p, timeout, k);
    if (options_.observer != nullptr) {
      options_.observer->PrefetchHint(
          result == StepEngine::PrefetchResult::kStarted
              ? metrics::node_labels::kStarted
          : result == StepEngine::PrefetchResult::kNotNeeded
              ? metrics::node_labels::kNotNeeded
              : metrics::node_labels::kDropped);
    }
  }
  if (data->was_prefetched && options_.observer != nullptr) {
    options_.observer->PrefetchUsed();
  }
  {
    absl::MutexLock lock(&mu_);
    ledger_.NoteGathered(unit);
  }
  v1::GatherResponse response;
  *response.mutable_params() =
      MakeRef(**engine, *data, unit, options_.pci_bus_id);
  if (request.pass() == v1::PASS_BACKWARD) {
    absl::StatusOr<UnitData> grad = (*engine)->GradientSlot(unit);
    if (!grad.ok()) return grad.status();
    *response.mutable_grad_buffer() =
        MakeRef(**engine, *grad, unit, options_.pci_bus_id);
  }
  response.set_epoch(options_.host->CurrentEpoch());
  response.set_committed_step((*engine)->committed_step());
  response.set_was_ready(was_ready || data->was_ready);
  response.set_was_prefetched(data->was_prefetched);
  return response;
}

absl::StatusOr<v1::ReleaseResponse> TrainerOps::Release(
    const v1::ReleaseRequest& request, std::optional<uint64_t> attachment) {
  NoteCall();
  absl::MutexLock op(&op_mu_);
  if (absl::Status s = CheckAttachment(attachment); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<StepEngine>> engine =
      EngineForUnit(request.unit());
  if (!engine.ok()) return engine.status();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<bool> released = ReleaseHeld(**engine, request);
  if (!released.ok()) return released.status();
  v1::ReleaseResponse response;
  response.set_was_gathered(*released);
  return response;
}

absl::StatusOr<bool> TrainerOps::ReleaseHeld(
    StepEngine& engine, const v1::ReleaseRequest& request) {
  const int unit = request.unit();
  if (!ledger_.IsHeld(unit)) return false;
  if (absl::Status s = engine.Release(unit, request.reshard()); !s.ok()) {
    return s;
  }
  ledger_.NoteReleased(unit);
  return true;
}

absl::Status TrainerOps::CopyFromSharedMemory(EngineMath& math,
                                              const UnitData& slot,
                                              const v1::DataRef& grad,
                                              uint8_t* dst) {
  const v1::SharedMemoryRef& ref = grad.shared_memory();
  if (ref.byte_length() != grad.byte_length()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad.shared_memory.byte_length: ", ref.byte_length(),
                     " differs from grad.byte_length ", grad.byte_length()));
  }
  if (ref.path() == slot.buffer->name() && ref.byte_offset() == slot.offset) {
    return absl::OkStatus();  // The trainer wrote into the slot: no copy.
  }
  if (ref.byte_offset() < 0 ||
      ref.byte_offset() + ref.byte_length() > ref.segment_bytes()) {
    return absl::InvalidArgumentError(
        "grad.shared_memory: range outside the segment");
  }
  absl::StatusOr<memory::SharedMemorySegment> seg =
      memory::SharedMemorySegment::Open(
          ref.path(), ref.segment_bytes(),
          memory::SharedMemorySegment::Access::kReadOnly);
  if (!seg.ok()) {
    return absl::NotFoundError(
        absl::StrCat("grad.shared_memory.path: ", seg.status().message()));
  }
  return math.Upload(
      dst, static_cast<const uint8_t*>(seg->data()) + ref.byte_offset(),
      grad.byte_length());
}

absl::Status TrainerOps::CheckCudaIpcGradient(EngineMath& math,
                                              const UnitData& slot,
                                              const v1::DataRef& grad) {
  const v1::CudaIpcRef& ref = grad.cuda_ipc();
  if (!math.device_memory()) {
    return absl::InvalidArgumentError(
        "grad.cuda_ipc: this daemon runs on the CPU (shared memory only)");
  }
  absl::StatusOr<memory::CudaIpcName> slot_name =
      memory::ParseCudaIpcName(slot.buffer->name());
  if (!slot_name.ok() || ref.mem_handle() != slot_name->mem_handle ||
      ref.byte_offset() != slot.offset ||
      ref.byte_length() != grad.byte_length()) {
    return absl::InvalidArgumentError(
        "grad.cuda_ipc: must be the gradient slot Gather named (its "
        "handle, byte_offset and byte_length); other device memory is "
        "not accepted");
  }
  return absl::OkStatus();
}

absl::Status TrainerOps::TakeGradient(StepEngine& engine, int unit,
                                      const UnitData& slot,
                                      const v1::DataRef& grad) {
  const int64_t elem = core::DTypeSize(slot.dtype);
  const int64_t real_bytes = engine.config().units[unit].numel() * elem;
  if (grad.location_case() == v1::DataRef::LOCATION_NOT_SET) {
    return absl::InvalidArgumentError(kGradRequired);
  }
  if (grad.dtype() != ToProtoDType(slot.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad.dtype: must be ", v1::DType_Name(ToProtoDType(slot.dtype)),
        " (the reduce dtype), got ", v1::DType_Name(grad.dtype())));
  }
  if (grad.byte_length() != slot.bytes && grad.byte_length() != real_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad.byte_length: must be ", slot.bytes, " (or ", real_bytes,
        " without padding), got ", grad.byte_length()));
  }
  uint8_t* dst = slot.buffer->data() + slot.offset;
  // The gradient slot is engine memory (a GPU's, on a device backend):
  // written through the engine's math.
  EngineMath& math = engine.math();
  switch (grad.location_case()) {
    case v1::DataRef::kSharedMemory:
      if (absl::Status s = CopyFromSharedMemory(math, slot, grad, dst);
          !s.ok()) {
        return s;
      }
      break;
    case v1::DataRef::kInlineData:
      if (static_cast<int64_t>(grad.inline_data().size()) !=
          grad.byte_length()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grad.inline_data: ", grad.inline_data().size(),
            " bytes, but grad.byte_length is ", grad.byte_length()));
      }
      if (absl::Status s =
              math.Upload(dst, grad.inline_data().data(), grad.byte_length());
          !s.ok()) {
        return s;
      }
      break;
    case v1::DataRef::kCudaIpc:
      // Written in place by the trainer; only the slot itself is accepted.
      if (absl::Status s = CheckCudaIpcGradient(math, slot, grad); !s.ok()) {
        return s;
      }
      break;
    default:
      return absl::InvalidArgumentError(kGradRequired);
  }
  if (grad.byte_length() < slot.bytes) {
    return math.Zero(dst + grad.byte_length(), slot.bytes - grad.byte_length());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ReduceGradResponse> TrainerOps::ReduceGrad(
    const v1::ReduceGradRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  (void)deadline;  // Collectives run to the collective timeout.
  NoteCall();
  absl::MutexLock op(&op_mu_);
  if (absl::Status s = CheckAttachment(attachment); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<StepEngine>> engine =
      EngineForUnit(request.unit());
  if (!engine.ok()) return engine.status();
  const int unit = request.unit();
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s =
            ledger_.CheckNotReduced(unit, (*engine)->committed_step() + 1);
        !s.ok()) {
      return s;
    }
  }
  // The slot may be one whose reduce-scatter must finish first.
  absl::Cleanup report_wait = [&, before = (*engine)->collective_wait()] {
    ReportWait(metrics::node_labels::kCallReduceGrad, **engine, before);
  };
  absl::StatusOr<UnitData> slot = (*engine)->GradientSlot(unit);
  if (!slot.ok()) return slot.status();
  if (absl::Status s = TakeGradient(**engine, unit, *slot, request.grad());
      !s.ok()) {
    return s;
  }
  v1::ReduceGradResponse response;
  if (request.accumulate_only()) {
    // Part of the attempt all the same: its sum is reduced in this epoch.
    {
      absl::MutexLock lock(&mu_);
      if (absl::Status s = ledger_.EnterAttempt(options_.host->CurrentEpoch());
          !s.ok()) {
        return s;
      }
    }
    // No collective: the engine adds the slot into the unit's private
    // accumulation buffer (like DDP's no_sync).
    if (absl::Status s = (*engine)->ReduceGrad(
            unit, options_.collective_timeout, /*accumulate_only=*/true);
        !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&mu_);
    response.set_accumulated(ledger_.NoteAccumulated(unit));
    response.set_reduce_started(false);
    return ReleaseAfterReduce(**engine, request, response);
  }
  if (absl::StatusOr<int64_t> epoch = EnterReadyEpoch(); !epoch.ok()) {
    return epoch.status();
  }
  absl::Status reduced =
      (*engine)->ReduceGrad(unit, options_.collective_timeout);
  if (!reduced.ok()) {
    return options_.host->OnCollectiveError("ReduceGrad", reduced);
  }
  absl::MutexLock lock(&mu_);
  response.set_accumulated(ledger_.NoteReduced(unit));
  response.set_reduce_started(true);
  return ReleaseAfterReduce(**engine, request, response);
}

absl::StatusOr<v1::ReduceGradResponse> TrainerOps::ReleaseAfterReduce(
    StepEngine& engine, const v1::ReduceGradRequest& request,
    v1::ReduceGradResponse& response) {
  if (!request.release()) return response;
  v1::ReleaseRequest release;
  release.set_unit(request.unit());
  release.set_pass(v1::PASS_BACKWARD);
  absl::StatusOr<bool> released = ReleaseHeld(engine, release);
  if (!released.ok()) return released.status();
  response.set_released(*released);
  return response;
}

absl::StatusOr<v1::StepResponse> TrainerOps::Step(
    const v1::StepRequest& request, MonoTime deadline,
    std::optional<uint64_t> attachment) {
  (void)deadline;  // Collectives run to the collective timeout.
  NoteCall();
  if (request.step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: must be >= 1, got ", request.step()));
  }
  if (request.has_learning_rate() &&
      !(request.learning_rate() >= 0 &&
        std::isfinite(request.learning_rate()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning_rate: must be finite and >= 0, got ",
                     request.learning_rate()));
  }
  absl::MutexLock op(&op_mu_);
  if (absl::Status s = CheckAttachment(attachment); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<StepEngine>> engine = options_.host->Engine();
  if (!engine.ok()) return engine.status();
  const EngineConfig& config = (*engine)->config();
  // This step's learning rate (schedules), else the configured one; every
  // rank's vote carries it, so ranks that disagree commit nothing.
  const double lr = request.has_learning_rate() ? request.learning_rate()
                    : config.optimizer.kind == core::OptimizerKind::kAdamW
                        ? config.optimizer.adamw.lr
                        : config.optimizer.sgd.lr;
  {
    absl::MutexLock lock(&mu_);
    const int64_t committed = (*engine)->committed_step();
    if (std::optional<v1::StepResponse> again =
            ledger_.Retried(request.step(), committed)) {
      return *again;
    }
    if (absl::Status s = ledger_.CheckStep(
            request.step(), committed, static_cast<int>(config.units.size()));
        !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<int64_t> entered = EnterReadyEpoch();
  if (!entered.ok()) return entered.status();
  const int64_t epoch = *entered;
  absl::Cleanup report_wait = [&, before = (*engine)->collective_wait()] {
    ReportWait(metrics::node_labels::kCallStep, **engine, before);
  };
  const uint64_t fingerprint = options_.host->ModelFingerprint();
  VoteOutcome outcome = VoteOutcome::kNotAsked;
  const auto vote = [&](const StepResult& prepared) {
    return Vote(epoch, StepFingerprint(fingerprint, lr), prepared, outcome);
  };
  const MonoTime step_started = MonoNow();
  absl::StatusOr<StepResult> result =
      (*engine)->Step(request.step(), options_.collective_timeout, vote, lr);
  if (!result.ok()) return StepFailed(**engine, result.status(), outcome);
  options_.host->Committed(**engine, *result, epoch, MonoNow() - step_started);
  v1::StepResponse response;
  response.set_committed_step(result->step);
  response.set_epoch(options_.host->CurrentEpoch());
  response.set_grad_norm(result->grad_norm);
  response.set_clip_scale(result->clip_scale);
  response.set_learning_rate(lr);
  absl::MutexLock lock(&mu_);
  ledger_.NoteCommitted(response);
  return response;
}

void TrainerOps::ReportWait(absl::string_view call, const StepEngine& engine,
                            absl::Duration before) {
  if (options_.observer == nullptr) return;
  options_.observer->TrainerWaited(call, engine.collective_wait() - before);
}

absl::Status TrainerOps::Vote(int64_t epoch, uint64_t step_fingerprint,
                              const StepResult& prepared,
                              VoteOutcome& outcome) {
  SHARDD_FAILPOINT("vote.before");
  absl::StatusOr<v1::ShouldCommitResponse> decision =
      options_.membership->ShouldCommit(
          epoch, prepared.step, /*vote=*/true, "", step_fingerprint,
          MonoNow() + options_.collective_timeout);
  if (SHARDD_FAILPOINT_FAILS("vote.answer")) {
    decision =
        absl::UnavailableError("the answer was lost (fail point vote.answer)");
  }
  if (!decision.ok()) {
    outcome = VoteOutcome::kUnanswered;
    return absl::AbortedError(absl::StrCat("commit vote on step ",
                                           prepared.step, ": ",
                                           decision.status().ToString()));
  }
  if (!decision->commit()) {
    outcome = VoteOutcome::kRejected;
    return absl::AbortedError(
        absl::StrCat("step ", prepared.step,
                     " rejected by the commit vote: ", decision->reason()));
  }
  SHARDD_FAILPOINT("vote.after");
  return absl::OkStatus();
}

absl::Status TrainerOps::StepFailed(StepEngine& engine,
                                    const absl::Status& status,
                                    VoteOutcome outcome) {
  if (outcome == VoteOutcome::kRejected) {
    engine.DropPending();
  } else if (const std::optional<int64_t> pending = engine.pending_step()) {
    std::printf(
        "shardd rank %d: step %lld is in doubt (its commit vote got no "
        "answer: %s); the next epoch's view says whether the others "
        "committed it\n",
        options_.membership->rank(), static_cast<long long>(*pending),
        status.ToString().c_str());
    std::fflush(stdout);
  }
  if (IsCollectiveFailure(status)) {
    CountAbort(outcome == VoteOutcome::kRejected
                   ? metrics::node_labels::kVoteRejected
               : outcome == VoteOutcome::kUnanswered
                   ? metrics::node_labels::kEpochChanged
                   : metrics::node_labels::kPeerFailure);
  }
  return options_.host->OnCollectiveError("Step", status);
}

v1::DataRef TrainerOps::MakeRef(const StepEngine& engine, const UnitData& data,
                                int unit, const std::string& pci_bus_id) {
  v1::DataRef ref;
  // A device backend's buffers are GPU memory exported by CUDA IPC; the
  // CPU backend's are shared-memory segments.
  if (absl::StatusOr<memory::CudaIpcName> ipc =
          memory::ParseCudaIpcName(data.buffer->name());
      ipc.ok()) {
    auto* cuda = ref.mutable_cuda_ipc();
    cuda->set_mem_handle(ipc->mem_handle);
    cuda->set_device_ordinal(ipc->device);
    cuda->set_pci_bus_id(pci_bus_id);
    cuda->set_allocation_bytes(data.buffer->size());
    cuda->set_byte_offset(data.offset);
    cuda->set_byte_length(data.bytes);
  } else {
    auto* shm = ref.mutable_shared_memory();
    shm->set_path(data.buffer->name());
    shm->set_segment_bytes(data.buffer->size());
    shm->set_byte_offset(data.offset);
    shm->set_byte_length(data.bytes);
  }
  ref.set_dtype(ToProtoDType(data.dtype));
  ref.set_byte_length(data.bytes);
  const std::vector<core::TensorView>& tensors =
      engine.config().units[unit].tensors();
  const int64_t elem = core::DTypeSize(data.dtype);
  for (size_t t = 0; t < tensors.size(); ++t) {
    v1::TensorView* view = ref.add_views();
    view->set_name(tensors[t].name);
    for (int64_t d : tensors[t].shape) view->add_shape(d);
    view->set_dtype(ToProtoDType(data.dtype));
    view->set_byte_offset(tensors[t].offset * elem);
    view->set_numel(tensors[t].numel);
  }
  return ref;
}

}  // namespace shardd::node
