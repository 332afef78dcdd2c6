#include "daemon/node/model_registration.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <variant>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/rendezvous_key.h"
#include "daemon/core/shard_plan.h"
#include "daemon/node/device_init_support.h"
#include "daemon/node/init_materializer.h"
#include "daemon/node/model_digest.h"
#include "daemon/node/proto_convert.h"
#include "daemon/node/shared_memory_init_reader.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

// Prefixes a rank's model key after its exchange failed (a serialized
// ModelAgreement never starts with it: 'f' is no field tag of it).
constexpr char kFailedModel[] = "failed:";
// How long one wait for another rank's model lasts before the daemon's
// shutdown is checked again.
constexpr absl::Duration kAgreementSlice = absl::Milliseconds(250);

OptimizerSpec OptimizerOf(const core::ModelConfig& model) {
  OptimizerSpec optimizer;
  if (const auto* a =
          std::get_if<core::AdamWOptions>(&model.config.optimizer)) {
    optimizer.kind = core::OptimizerKind::kAdamW;
    optimizer.adamw = *a;
  } else {
    const auto& s = std::get<core::SgdOptions>(model.config.optimizer);
    optimizer.kind = s.momentum != 0.0 ? core::OptimizerKind::kSgdMomentum
                                       : core::OptimizerKind::kSgd;
    optimizer.sgd = s;
  }
  return optimizer;
}

// Ranks agree on digests of the initial values, never on the values.
absl::StatusOr<v1::ModelAgreement> AgreementOf(
    const v1::ModelSpec& model, const state::StateImport& import) {
  absl::StatusOr<v1::ModelAgreement> agreement = ModelDigest::Agreement(
      model, [](const v1::SharedMemoryRef& ref, const std::string& field) {
        return SharedMemoryInitReader::Checksum(
            {ref.path(), ref.segment_bytes(), ref.byte_offset(),
             ref.byte_length()},
            field);
      });
  if (!agreement.ok()) return agreement.status();
  *agreement->mutable_state_source() = import.source_digest();
  return agreement;
}

}  // namespace

ModelRegistration::ModelRegistration(ModelRegistrationOptions options)
    : options_(std::move(options)),
      device_memory_(options_.backend->math()->device_memory()) {}

absl::StatusOr<v1::RegisterModelResponse> ModelRegistration::RegisterModel(
    const v1::RegisterModelRequest& request, MonoTime deadline) {
  absl::StatusOr<core::ModelConfig> model = Validate(request);
  if (!model.ok()) return model.status();
  // Wait for the coordinator's topology (W and F) and a ready epoch, and
  // only then take the op mutex: a replacement's epoch becomes ready after
  // its epoch thread restored a checkpoint, which takes it (a trainer that
  // re-attached early would otherwise hold it until its deadline).
  absl::StatusOr<int64_t> epoch = options_.host->AwaitReadyEpoch(deadline);
  absl::MutexLock op(&options_.host->TrainerOpMutex());
  const NodeModelState state = options_.host->ModelState();
  if (state.engine != nullptr) return Reattach(state, *model);
  if (!epoch.ok()) {
    if (state.world_size == 0) {
      return absl::UnavailableError(
          "the coordinator has not formed an epoch yet (W unknown)");
    }
    return epoch.status();
  }
  return RegisterNew(request, *model, state, *epoch, deadline);
}

absl::StatusOr<core::ModelConfig> ModelRegistration::Validate(
    const v1::RegisterModelRequest& request) const {
  if (request.transport() == v1::TRANSPORT_CUDA_IPC && !device_memory_) {
    return absl::InvalidArgumentError(
        "transport: CUDA IPC needs a CUDA device; this daemon runs on the "
        "CPU (shared memory)");
  }
  if (request.transport() == v1::TRANSPORT_SHARED_MEMORY && device_memory_) {
    return absl::InvalidArgumentError(
        absl::StrCat("transport: this daemon keeps its buffers on ",
                     options_.backend->name(),
                     " (CUDA IPC); shared memory is the CPU backend's"));
  }
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(request.model());
  if (!model.ok()) return model.status();
  if (absl::Status s = DeviceInitSupport::CheckBackend(*model, device_memory_);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = options_.admission->AdmitInitCopy(*model); !s.ok()) {
    return s;
  }
  return model;
}

absl::StatusOr<v1::RegisterModelResponse> ModelRegistration::Reattach(
    const NodeModelState& state, const core::ModelConfig& model) {
  absl::Status same =
      core::CompareModels(*state.model, model, core::InitScope::kExclude);
  if (!same.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model differs from the one this daemon holds (held vs new): "
        "model.",
        same.message()));
  }
  // A new trainer process: what the old one held is released, and a step
  // it left half-way (peers wait in collectives it will never issue) is
  // abandoned with the epoch, so that every rank redoes it.
  if (options_.host->DetachTrainer(*state.engine)) {
    options_.host->AbandonEpoch(
        "the trainer re-attached in the middle of a step",
        v1::FAILURE_KIND_PROCESS_EXITED, state.epoch);
  }
  v1::RegisterModelResponse response = options_.host->RegisteredModel();
  response.set_reattached(true);
  return response;
}

absl::Status ModelRegistration::CheckTopology(const core::ModelConfig& model,
                                              int world, int factor) {
  if (absl::Status s = core::Validate(model, world); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("model.", s.message()));
  }
  absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
      world, model.config.strategy, model.config.sharding_factor);
  if (!plan.ok()) return plan.status();
  if (plan->sharding_factor() != factor) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model.config.sharding_factor: resolves to ", plan->sharding_factor(),
        " but the coordinator runs the job with F = ", factor));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterModelResponse> ModelRegistration::RegisterNew(
    const v1::RegisterModelRequest& request, const core::ModelConfig& model,
    const NodeModelState& state, int64_t epoch, MonoTime deadline) {
  const int world = state.world_size;
  const int factor = state.sharding_factor;
  if (absl::Status s = CheckTopology(model, world, factor); !s.ok()) return s;
  // Files named as the initial state (load_from, resume_from,
  // TensorInit.file), checked before the ranks agree on the model: a bad
  // one fails this rank's registration, and so every rank's.
  absl::StatusOr<state::StateImport> import =
      state::StateImport::Plan(request, options_.resume_from, model, factor);
  if (!import.ok()) return import.status();
  if (absl::Status s = options_.admission->AdmitModel(
          "RegisterModel", model, world, options_.membership->rank());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<v1::ModelAgreement> agreement =
      AgreementOf(request.model(), *import);
  if (!agreement.ok()) return agreement.status();
  if (absl::Status s = ExchangeModel(epoch, world, *agreement, deadline);
      !s.ok()) {
    return s;
  }
  SHARDD_FAILPOINT("register.agreed");
  absl::StatusOr<Installed> installed = BuildAndInstall(
      model, world, factor, *import, agreement->SerializeAsString());
  if (!installed.ok()) return installed.status();
  const int64_t step = installed->step;
  options_.host->LogCommit(
      step > 0 ? recovery::CommitRecord::Kind::kCheckpointRestored
               : recovery::CommitRecord::Kind::kInit,
      step, installed->epoch);
  if (step > 0) {
    // The coordinator counts steps from its votes: tell it the step the
    // job resumes at, so that it expects the next one.
    if (absl::Status s = options_.membership->SetReady(installed->epoch, step);
        !s.ok()) {
      // The next heartbeat reports the step again; a vote before it is
      // refused and the step redone in the next epoch.
      std::fprintf(stderr, "shardd: telling the coordinator step %lld: %s\n",
                   static_cast<long long>(step), s.ToString().c_str());
    }
  }
  options_.host->ReportMemory(*installed->engine);
  v1::RegisterModelResponse response = options_.host->RegisteredModel();
  response.set_reattached(false);
  return response;
}

absl::StatusOr<ModelRegistration::Installed> ModelRegistration::BuildAndInstall(
    const core::ModelConfig& model, int world, int factor,
    const state::StateImport& import, std::string agreement) {
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, factor);
  if (!layouts.ok()) return layouts.status();
  // Only this rank's shard is materialised (from shared memory: only its
  // slice is read).
  InitMaterializer materializer(model, *layouts);
  absl::StatusOr<std::unique_ptr<StepEngine>> created = CreateEngine(
      model, world, factor,
      [&materializer](int unit, int64_t offset, float* out, int64_t n) {
        materializer.Fill(unit, offset, out, n);
      });
  if (!created.ok()) return created.status();
  if (!materializer.status().ok()) return materializer.status();
  // The files overwrite this rank's shard of the initial values; the
  // engine is not published yet.
  absl::StatusOr<int64_t> imported_step = import.Apply(**created);
  if (!imported_step.ok()) return imported_step.status();
  Installed installed;
  installed.engine = std::move(*created);
  installed.step = *imported_step;
  installed.epoch = options_.host->InstallRegistered(
      installed.engine, model,
      core::Fingerprint(model, core::InitScope::kExclude),
      std::move(agreement));
  return installed;
}

absl::Status ModelRegistration::ExchangeModel(
    int64_t epoch, int world, const v1::ModelAgreement& agreement,
    MonoTime deadline) {
  const int rank = options_.membership->rank();
  std::unique_ptr<comm::Store> store = options_.host->StoreOfEpoch(epoch);
  // The others' keys as this attempt begins (see AwaitAgreement).
  std::vector<std::string> before(world);
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    absl::StatusOr<std::string> v = store->Get(core::ModelKey(r));
    if (v.ok()) {
      before[r] = *std::move(v);
    } else if (!absl::IsNotFound(v.status())) {
      return v.status();
    }
  }
  const std::string mine = agreement.SerializeAsString();
  if (absl::Status s = store->Set(core::ModelKey(rank), mine); !s.ok()) {
    return s;
  }
  // A failed exchange marks this rank's key failed (keeping its model), so
  // that a rank registering again in this epoch does not take it for a
  // current registration.
  auto mark_failed = absl::MakeCleanup([&store, rank, &mine] {
    (void)store->Set(core::ModelKey(rank), absl::StrCat(kFailedModel, mine));
  });
  for (int r = 0; r < world; ++r) {
    if (r == rank) continue;
    if (absl::Status s =
            AwaitAgreement(*store, r, agreement, before[r], deadline);
        !s.ok()) {
      return s;
    }
  }
  std::move(mark_failed).Cancel();
  return absl::OkStatus();
}

absl::Status ModelRegistration::AwaitAgreement(comm::Store& store, int r,
                                               const v1::ModelAgreement& mine,
                                               const std::string& before,
                                               MonoTime deadline) {
  // A failed key that was there before this attempt began is waited past;
  // a failed key written during it still counts as a mismatch when its
  // model differs (the two ranks' attempts met), and is waited past when it
  // agrees (that rank failed against a third). Only an unmarked, agreeing
  // key is agreement.
  const std::string key = core::ModelKey(r);
  std::string seen = before;  // Waited past when failed.
  while (true) {
    if (options_.host->Stopping()) {
      return absl::UnavailableError(
          absl::StrCat("the daemon is shutting down (waiting for rank ", r,
                       " to register the model)"));
    }
    // In slices, so that a shutdown is seen within one.
    const MonoTime slice = std::min(deadline, MonoNow() + kAgreementSlice);
    absl::Status waited =
        store.Wait({key}, std::max(slice - MonoNow(), absl::Milliseconds(1)));
    if (absl::IsDeadlineExceeded(waited) && MonoNow() < deadline) continue;
    if (absl::IsDeadlineExceeded(waited)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waiting for every rank to register the model: ", waited.message()));
    }
    if (!waited.ok()) return waited;
    absl::StatusOr<std::string> theirs = store.Get(key);
    if (!theirs.ok()) return theirs.status();
    const bool failed = absl::StartsWith(*theirs, kFailedModel);
    if (!failed || *theirs != seen) {
      v1::ModelAgreement other;
      if (!other.ParseFromString(
              failed ? theirs->substr(sizeof(kFailedModel) - 1) : *theirs)) {
        return absl::InternalError(
            absl::StrCat("rank ", r, "'s model is corrupt"));
      }
      if (absl::Status same = ModelDigest::Compare(mine, other, r);
          !same.ok()) {
        return same;
      }
      if (!failed) return absl::OkStatus();  // Agreed.
      seen = *theirs;  // Agrees but failed: wait for its next attempt.
    }
    if (MonoNow() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "waiting for every rank to register the model: rank ", r,
          "'s last registration failed and it has not registered again"));
    }
    SleepUntil(MonoNow() + absl::Milliseconds(5));
  }
}

void ModelRegistration::PublishHeld(comm::Store& store, int rank,
                                    const std::string& agreement,
                                    int64_t epoch) {
  if (agreement.empty()) return;
  if (absl::Status s = store.Set(core::ModelKey(rank), agreement); !s.ok()) {
    std::fprintf(stderr,
                 "shardd rank %d: publishing the model it holds in epoch "
                 "%lld: %s\n",
                 rank, static_cast<long long>(epoch), s.ToString().c_str());
  }
}

absl::StatusOr<std::unique_ptr<StepEngine>> ModelRegistration::CreateEngine(
    const core::ModelConfig& model, int world, int factor,
    const ShardInitializer& init) {
  absl::StatusOr<core::ShardPlan> plan = core::ShardPlan::Create(
      world, model.config.strategy, model.config.sharding_factor);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<core::UnitLayout>> layouts =
      core::BuildLayouts(model, factor);
  if (!layouts.ok()) return layouts.status();
  const int rank = options_.membership->rank();
  EngineConfig config{.rank = rank,
                      .plan = *plan,
                      .units = *layouts,
                      .reduce_dtype = core::ToMemoryOptions(model).reduce_dtype,
                      .optimizer = OptimizerOf(model),
                      .max_grad_norm = model.config.max_grad_norm,
                      .max_gathered_units = model.config.max_gathered_units,
                      .max_reducing_units = model.config.max_reducing_units,
                      .exclude_from_weight_decay = {},
                      .comm_scratch = options_.backend->comm_scratch()};
  for (const core::UnitConfig& unit : model.units) {
    std::vector<bool>& excluded =
        config.exclude_from_weight_decay.emplace_back();
    for (const core::TensorConfig& tensor : unit.tensors) {
      excluded.push_back(tensor.exclude_from_weight_decay);
    }
  }
  if (absl::Status s = options_.admission->AdmitModel("allocating the engine",
                                                      model, world, rank);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<StepEngine>> engine = StepEngine::Create(
      std::move(config), init, options_.backend->shared(),
      options_.backend->private_memory(), options_.backend->math());
  if (engine.ok()) {
    (*engine)->SetGrowthAdmission(options_.admission->ForEngineGrowth());
  }
  return engine;
}

}  // namespace shardd::node
