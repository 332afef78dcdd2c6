// example_trainer: trains the teacher-student MLP (client/teacher_student.h)
// through a local shardd daemon, one FSDP unit per layer.
//
//   example_trainer --socket=/dev/shm/shardd.sock --world_size=4
//       --strategy=HYBRID_SHARD --sharding_factor=2 --layers=3 --hidden=64
//       --batch_per_rank=16 --steps=20
//
// Per step: forward layer by layer, gathering layer l+1 asynchronously while
// layer l computes (at most two units gathered: the one in use and the
// next), releasing each after use; MSE on this rank's batch; backward in
// reverse order, gathering again (cheap when the daemon still holds the
// unit, i.e. the last K; with --reshard_after_forward every unit is
// released with reshard after its forward, so all are gathered again) with
// layer l-1's Gather overlapping layer l's backward, writing each layer's
// gradient straight into the daemon's gradient slot and ReduceGrad once that
// Gather is done (collectives are matched by order, so no rank may let a Gather
// race its ReduceGrad); then Step(step). An ABORTED call (a peer failed)
// releases what is gathered, waits for the daemon to be ready again and redoes
// the step. Prints "step N loss L grad_norm G" per step (L: mean MSE of this
// rank's batch, before the update; G: the daemon's global gradient norm before
// clipping) and "final loss L steps N" at the end.
//
// --daemon_prefetch: the daemon prefetches instead: each Gather is
// synchronous and names the next unit (l+1 forward, l-1 backward) as its
// prefetch hint, so the daemon starts that AllGather while this trainer
// computes. Prints "gathers N ready M prefetched P" at the end (M: the
// unit's AllGather had finished before the Gather, or none was needed,
// GatherResponse.was_ready; P: a prefetch had started it, was_prefetched).
// Same parameters, bit for bit, as the default.
//
// --params_out=FILE: after training every rank gathers every unit once more
// and rank 0 writes the final parameters, layer after layer, as raw
// little-endian fp32 [weight, bias] (Mlp layout), for comparisons.
//
// --profile: after each "step N" line, prints where that step's wall time
// went, in ms:
//   "profile step=N total_ms=T compute_ms=C gather_ms=G reduce_grad_ms=R
//    step_call_ms=S release_ms=E other_ms=O"
// C: this process's own work (the batch, forward, loss, backward); G: in
// Gather calls (issuing an asynchronous one, and waiting for it); R: in
// ReduceGrad (and the gradient slot's Flush); S: in Step (the daemons'
// vote and optimizer); E: in Release; O = T - C - G - R - S (Release and
// the rest: bookkeeping between the calls). A step that aborted and was
// redone reports its last attempt.
//
// --compute_only: no daemon: the same work per process that a rank of a
// data-parallel run computes, as a floor to set the runs above against:
// ReferenceTrainer (client/reference_trainer.h) with world_size 1 and
// --batch_per_rank samples, i.e. the batch, forward, loss and backward of
// one rank's batch, gradient clipping and AdamW over all the parameters
// (what a DDP rank's optimizer does), from the daemon's initial values.
// Prints the same "step N loss L grad_norm G" lines (and profile lines,
// where all the time is compute_ms) up to --steps; --socket is not used.
//
// A trainer that restarts against the same daemon re-attaches (RegisterModel
// with the same model) and continues from the daemon's committed step.
// --pause_after_step=N (tests) blocks after step N so that a test can
// SIGKILL the trainer at a step boundary; --stop_in_step=N stops it in the
// middle of step N (a trainer stopped or slow between two calls).
//
// Exit codes: 0 done; 1 a call failed (the message says which); 2 bad flags;
// 3 the job has failed (DATA_LOSS from the daemon: a shard was lost with no
// replica and no usable checkpoint, or the job made no progress): the
// reason is printed as "example_trainer: stopping: the job has failed: ..."
// and nothing is retried.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/admission_refusal.h"
#include "client/example_model.h"
#include "client/init_values_file.h"
#include "client/mlp.h"
#include "client/reference_trainer.h"
#include "client/teacher_student.h"
#include "client/trainer_client.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/exit_status.h"
#include "daemon/core/mono_time.h"

ABSL_FLAG(std::string, socket, "/dev/shm/shardd.sock",
          "the local daemon's trainer socket (path, unix:PATH or host:port)");
ABSL_FLAG(int, rank, -1, "rank for the data split (-1: the daemon's)");
ABSL_FLAG(int, world_size, 0, "W for the data split (0: the daemon's)");
ABSL_FLAG(int, layers, 3, "layers (units) of the MLP");
ABSL_FLAG(int64_t, hidden, 64, "width of the hidden layers");
ABSL_FLAG(int64_t, in_features, 32, "input width");
ABSL_FLAG(int64_t, out_features, 8, "output width");
ABSL_FLAG(std::string, widths, "",
          "comma-separated {in,hidden...,out}; overrides --layers/--hidden");
ABSL_FLAG(int64_t, batch_per_rank, 16, "samples per rank per step");
ABSL_FLAG(int64_t, steps, 10, "train until this committed step");
ABSL_FLAG(double, lr, 1e-2, "AdamW learning rate");
ABSL_FLAG(double, weight_decay, 0.0, "AdamW weight decay");
ABSL_FLAG(double, max_grad_norm, 1.0, "global gradient clip norm (0: none)");
ABSL_FLAG(std::string, strategy, "FULL_SHARD",
          "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD");
ABSL_FLAG(int, sharding_factor, 0, "F (0: the strategy's default)");
ABSL_FLAG(int, max_gathered_units, 2, "K: units the daemon gathers at once");
ABSL_FLAG(bool, reshard_after_forward, false,
          "release each unit after its forward with reshard (FSDP's "
          "reshard_after_forward taken literally): backward gathers every "
          "unit again, none is answered from the daemon's cache; every rank "
          "must pass the same value");
ABSL_FLAG(bool, daemon_prefetch, false,
          "Gather synchronously with the next unit as the daemon's prefetch "
          "hint, instead of asynchronous Gathers from this trainer");
ABSL_FLAG(bool, profile, false,
          "print a \"profile step=N ...\" line of per-call timings (ms) "
          "after each step");
ABSL_FLAG(bool, compute_only, false,
          "no daemon: run this rank's compute alone (ReferenceTrainer, "
          "world size 1, --batch_per_rank samples, AdamW over all the "
          "parameters) for --steps steps, as a floor for the other runs");
ABSL_FLAG(uint64_t, seed, 1, "names the task (teacher, data) and the init");
ABSL_FLAG(std::string, init_values_dir, "",
          "write the initial weights to a file in this folder (e.g. /dev/shm) "
          "and register them as shared-memory init values (the same values "
          "as the default NormalInit, read by each daemon slice by slice); "
          "empty: NormalInit");
ABSL_FLAG(int64_t, rpc_timeout_ms, 60000, "deadline of each call");
ABSL_FLAG(int64_t, ready_timeout_ms, 120000,
          "how long to wait for recovery after an aborted step, and at start "
          "for the daemon to listen");
ABSL_FLAG(std::string, params_out, "", "write the final parameters here");
ABSL_FLAG(std::string, load_from, "",
          "RegisterModelRequest.load_from: start from this safetensors file "
          "or SHARDED export directory");
ABSL_FLAG(int64_t, pause_after_step, 0,
          "tests: after committing this step, print \"paused after step N\" "
          "and block (up to --ready_timeout_ms, then exit 1) so that a test "
          "can kill the trainer between steps (0: never)");
ABSL_FLAG(int64_t, stop_in_step, 0,
          "tests: in the first attempt of this step, once the first "
          "ReduceGrad returned, print \"stopping in step N\" and stop "
          "(SIGSTOP to itself) until a test continues it (0: never)");

namespace shardd {
namespace {

using client::GatheredUnit;
using client::PendingGather;
using client::TrainerClient;

struct StepOutcome {
  double loss = 0.0;
  v1::StepResponse response;
};

// Where one step's wall time went (see --profile).
struct StepTimes {
  absl::Duration total;
  absl::Duration compute;
  absl::Duration gather;
  absl::Duration reduce_grad;
  absl::Duration step_call;
  absl::Duration release;
};

// Runs f() and adds its wall time to *into; returns what f returns.
template <typename F>
auto Timed(absl::Duration* into, F&& f) {
  const MonoTime t0 = MonoNow();
  auto result = f();
  *into += MonoNow() - t0;
  return result;
}

void PrintProfile(int64_t step, const StepTimes& t) {
  const absl::Duration other =
      t.total - t.compute - t.gather - t.reduce_grad - t.step_call;
  auto ms = [](absl::Duration d) { return absl::ToDoubleMilliseconds(d); };
  std::printf(
      "profile step=%lld total_ms=%.4f compute_ms=%.4f gather_ms=%.4f "
      "reduce_grad_ms=%.4f step_call_ms=%.4f release_ms=%.4f "
      "other_ms=%.4f\n",
      static_cast<long long>(step), ms(t.total), ms(t.compute), ms(t.gather),
      ms(t.reduce_grad), ms(t.step_call), ms(t.release), ms(other));
}

// Trains through one daemon. Not thread-safe; owns its buffers.
class ExampleTrainer {
 public:
  ExampleTrainer(TrainerClient* client, client::Mlp mlp,
                 const client::TeacherStudent* task, int rank, int world_size,
                 int64_t batch_per_rank, absl::Duration rpc_timeout,
                 bool reshard_after_forward, bool daemon_prefetch)
      : client_(client),
        mlp_(std::move(mlp)),
        task_(task),
        rank_(rank),
        world_size_(world_size),
        batch_(batch_per_rank),
        rpc_timeout_(rpc_timeout),
        reshard_after_forward_(reshard_after_forward),
        daemon_prefetch_(daemon_prefetch) {
    const int L = mlp_.num_layers();
    acts_.resize(L + 1);
    grad_acts_.resize(L + 1);
    for (int l = 0; l <= L; ++l) {
      const int64_t width = mlp_.widths()[l];
      acts_[l].resize(batch_ * width);
      grad_acts_[l].resize(batch_ * width);
    }
  }

  // Runs step `step` once: forward, backward, ReduceGrad, Step.
  absl::StatusOr<StepOutcome> RunStep(int64_t step) {
    times_ = StepTimes();
    const MonoTime start = MonoNow();
    absl::StatusOr<StepOutcome> outcome = RunStepTimed(step);
    times_.total = MonoNow() - start;
    return outcome;
  }

  // The last RunStep's times.
  const StepTimes& times() const { return times_; }

 private:
  // --stop_in_step: stops this process once, in that step.
  void StopInStepOnce(int64_t step) {
    if (stopped_in_step_ || step != absl::GetFlag(FLAGS_stop_in_step)) return;
    stopped_in_step_ = true;
    std::printf("stopping in step %lld\n", static_cast<long long>(step));
    std::fflush(stdout);
    raise(SIGSTOP);
  }

  absl::StatusOr<StepOutcome> RunStepTimed(int64_t step) {
    const int L = mlp_.num_layers();
    absl::StatusOr<client::TaskBatch> batch = Timed(&times_.compute, [&] {
      return task_->Batch(step, rank_, world_size_, batch_);
    });
    if (!batch.ok()) return batch.status();
    acts_[0] = batch->inputs;

    // Forward, prefetching the next layer while this one computes: here
    // (an asynchronous Gather), or in the daemon (--daemon_prefetch).
    PendingGather next;
    if (!daemon_prefetch_) {
      next = Timed(&times_.gather, [&] {
        return client_->GatherAsync(0, v1::PASS_FORWARD, {},
                                    MonoNow() + rpc_timeout_);
      });
    }
    // A release the next synchronous Gather carries (release_first): a
    // round trip less per layer. Gathers issued ahead (without
    // --daemon_prefetch) leave before the release, so it goes on its own.
    std::vector<v1::ReleaseRequest> deferred;
    for (int l = 0; l < L; ++l) {
      absl::StatusOr<GatheredUnit> unit = Timed(&times_.gather, [&] {
        return daemon_prefetch_
                   ? client_->Gather(GatherRequestOf(l, v1::PASS_FORWARD,
                                                     Hint(l + 1), deferred),
                                     MonoNow() + rpc_timeout_)
                   : next.Wait(MonoNow() + rpc_timeout_);
      });
      if (!unit.ok()) return Annotate(unit.status(), "Gather", l);
      CountGather(*unit);
      if (l + 1 < L && !daemon_prefetch_) {
        next = Timed(&times_.gather, [&] {
          return client_->GatherAsync(l + 1, v1::PASS_FORWARD, {},
                                      MonoNow() + rpc_timeout_);
        });
      }
      if (absl::Status s = Timed(&times_.compute,
                                 [&] {
                                   return mlp_.ForwardLayer(
                                       l, unit->params.flat, acts_[l],
                                       absl::MakeSpan(acts_[l + 1]));
                                 });
          !s.ok()) {
        return s;
      }
      v1::ReleaseRequest release;
      release.set_unit(l);
      release.set_pass(v1::PASS_FORWARD);
      release.set_reshard(reshard_after_forward_);
      if (daemon_prefetch_ || l == L - 1) {
        deferred.push_back(release);
        continue;
      }
      if (auto r =
              Timed(&times_.release, [&] { return client_->Release(release); });
          !r.ok()) {
        return Annotate(r.status(), "Release", l);
      }
    }
    absl::StatusOr<double> loss = Timed(&times_.compute, [&] {
      return client::Mlp::MseLoss(acts_[L], batch->targets,
                                  absl::MakeSpan(grad_acts_[L]));
    });
    if (!loss.ok()) return loss.status();

    // Backward in reverse order. The Gather of layer l-1 overlaps layer l's
    // backward, but it must complete before ReduceGrad(l) is issued: the
    // daemon runs collectives in call order, and every rank must issue
    // them in the same order (a Gather racing a ReduceGrad would not be).
    // With --daemon_prefetch, Gather(l) names l-1 and the daemon queues
    // that AllGather before ReduceGrad(l) on every rank; the trainer's own
    // Gather(l-1) then comes after ReduceGrad(l) and finds it.
    absl::StatusOr<GatheredUnit> current = Timed(&times_.gather, [&] {
      return client_->Gather(
          GatherRequestOf(L - 1, v1::PASS_BACKWARD,
                          daemon_prefetch_ ? Hint(L - 2) : std::vector<int>{},
                          deferred),
          MonoNow() + rpc_timeout_);
    });
    for (int l = L - 1; l >= 0; --l) {
      if (!current.ok()) {
        return Annotate(current.status(), "Gather(backward)", l);
      }
      CountGather(*current);
      PendingGather below;
      if (l > 0 && !daemon_prefetch_) {
        below = Timed(&times_.gather, [&] {
          return client_->GatherAsync(l - 1, v1::PASS_BACKWARD, {},
                                      MonoNow() + rpc_timeout_);
        });
      }
      // The gradient goes straight into the daemon's gradient slot.
      absl::Status computed = Timed(&times_.compute, [&] {
        return mlp_.BackwardLayer(
            l, current->params.flat, grad_acts_[l + 1], current->grad->flat,
            l > 0 ? absl::Span<float>(grad_acts_[l]) : absl::Span<float>());
      });
      absl::StatusOr<GatheredUnit> next = Timed(&times_.gather, [&] {
        return l > 0 && !daemon_prefetch_
                   ? below.Wait(MonoNow() + rpc_timeout_)
                   : absl::StatusOr<GatheredUnit>(
                         absl::CancelledError("no layer below"));
      });
      if (!computed.ok()) return computed;
      // A GPU daemon's slot was written on the host: upload it first (a
      // no-op for shared memory).
      if (absl::Status s = Timed(&times_.reduce_grad,
                                 [&] { return current->grad->Flush(); });
          !s.ok()) {
        return Annotate(s, "ReduceGrad", l);
      }
      // Released by the same call.
      v1::ReduceGradRequest reduce;
      reduce.set_unit(l);
      *reduce.mutable_grad() = current->response.grad_buffer();
      reduce.set_release(true);
      if (auto r = Timed(&times_.reduce_grad,
                         [&] { return client_->ReduceGrad(reduce); });
          !r.ok()) {
        return Annotate(r.status(), "ReduceGrad", l);
      }
      StopInStepOnce(step);
      if (l > 0 && daemon_prefetch_) {
        next = Timed(&times_.gather, [&] {
          return client_->Gather(l - 1, v1::PASS_BACKWARD, Hint(l - 2),
                                 MonoNow() + rpc_timeout_);
        });
      }
      current = std::move(next);
    }
    absl::StatusOr<v1::StepResponse> committed =
        Timed(&times_.step_call, [&] { return client_->Step(step); });
    if (!committed.ok()) return Annotate(committed.status(), "Step", -1);
    return StepOutcome{*loss, *committed};
  }

 public:
  // Gather(unit, pass, prefetch) that first releases what `releases` holds
  // (emptied: they are the request's now).
  static v1::GatherRequest GatherRequestOf(
      int unit, v1::Pass pass, const std::vector<int>& prefetch,
      std::vector<v1::ReleaseRequest>& releases) {
    v1::GatherRequest request;
    request.set_unit(unit);
    request.set_pass(pass);
    for (int p : prefetch) request.add_prefetch(p);
    for (v1::ReleaseRequest& r : releases) {
      *request.add_release_first() = std::move(r);
    }
    releases.clear();
    return request;
  }

  int64_t gathers() const { return gathers_; }
  int64_t ready_gathers() const { return ready_gathers_; }
  int64_t prefetched_gathers() const { return prefetched_gathers_; }

  // After a failed step: release whatever may still be gathered.
  void ReleaseAll() {
    for (int l = 0; l < mlp_.num_layers(); ++l) {
      (void)client_->Release(l, v1::PASS_FORWARD);
      (void)client_->Release(l, v1::PASS_BACKWARD);
    }
  }

  // Gathers every unit (a collective: all ranks call it) and copies it out.
  absl::StatusOr<std::vector<std::vector<float>>> FetchParams() {
    std::vector<std::vector<float>> params;
    for (int l = 0; l < mlp_.num_layers(); ++l) {
      absl::StatusOr<GatheredUnit> unit = client_->Gather(l, v1::PASS_FORWARD);
      if (!unit.ok()) return Annotate(unit.status(), "Gather", l);
      const auto flat = unit->params.flat.subspan(0, mlp_.ParamCount(l));
      params.emplace_back(flat.begin(), flat.end());
      if (auto r = client_->Release(l, v1::PASS_FORWARD); !r.ok()) {
        return r.status();
      }
    }
    return params;
  }

 private:
  // The prefetch hint for the unit after this one: {unit} when it exists.
  std::vector<int> Hint(int unit) const {
    if (unit < 0 || unit >= mlp_.num_layers()) return {};
    return {unit};
  }
  void CountGather(const GatheredUnit& unit) {
    ++gathers_;
    if (unit.response.was_ready()) ++ready_gathers_;
    if (unit.response.was_prefetched()) ++prefetched_gathers_;
  }

  // Names the call (and unit) that failed, keeping the client's marks: the
  // job's failure must still read as one (exit 3, not 1).
  static absl::Status Annotate(const absl::Status& s, absl::string_view call,
                               int unit) {
    return TrainerClient::WithContext(
        s, unit >= 0 ? absl::StrCat(call, "(unit ", unit, ")")
                     : std::string(call));
  }

  TrainerClient* client_;
  client::Mlp mlp_;
  const client::TeacherStudent* task_;
  int rank_;
  int world_size_;
  int64_t batch_;
  absl::Duration rpc_timeout_;
  bool reshard_after_forward_;
  bool daemon_prefetch_;
  int64_t gathers_ = 0;
  int64_t ready_gathers_ = 0;
  int64_t prefetched_gathers_ = 0;
  std::vector<std::vector<float>> acts_;
  std::vector<std::vector<float>> grad_acts_;
  StepTimes times_;
  bool stopped_in_step_ = false;
};

absl::StatusOr<std::vector<int64_t>> Widths() {
  std::vector<int64_t> widths;
  const std::string text = absl::GetFlag(FLAGS_widths);
  if (!text.empty()) {
    for (absl::string_view part : absl::StrSplit(text, ',')) {
      int64_t w = 0;
      if (!absl::SimpleAtoi(part, &w)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--widths: '", part, "' is not a number"));
      }
      widths.push_back(w);
    }
    return widths;
  }
  const int layers = absl::GetFlag(FLAGS_layers);
  if (layers < 1) return absl::InvalidArgumentError("--layers must be >= 1");
  widths.push_back(absl::GetFlag(FLAGS_in_features));
  for (int l = 1; l < layers; ++l)
    widths.push_back(absl::GetFlag(FLAGS_hidden));
  widths.push_back(absl::GetFlag(FLAGS_out_features));
  return widths;
}

absl::StatusOr<v1::ShardingStrategy> Strategy() {
  v1::ShardingStrategy strategy;
  const std::string name =
      absl::StrCat("SHARDING_STRATEGY_", absl::GetFlag(FLAGS_strategy));
  if (!v1::ShardingStrategy_Parse(name, &strategy)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy: unknown '", absl::GetFlag(FLAGS_strategy),
                     "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)"));
  }
  return strategy;
}

int Usage(const absl::Status& s) {
  std::fprintf(stderr, "example_trainer: %s\n",
               std::string(s.message()).c_str());
  return 2;
}

int Fail(const absl::Status& s) {
  if (TrainerClient::IsJobFailed(s)) {
    // Terminal: retrying cannot help; the reason names what was lost.
    std::fprintf(stderr, "example_trainer: stopping: %s\n",
                 std::string(s.message()).c_str());
    return core::kExitJobFailed;
  }
  // A memory-admission refusal gives the plan's breakdown and the limits:
  // one per line.
  std::fprintf(stderr, "example_trainer: %s: %s\n",
               absl::StatusCodeToString(s.code()).c_str(),
               client::FormatAdmissionRefusal(s.message()).c_str());
  return 1;
}

// --compute_only: see the file comment. Returns the exit code.
int RunComputeOnly(const client::ExampleModel& model,
                   const client::TeacherStudent& task, int64_t batch_per_rank,
                   int64_t steps) {
  absl::StatusOr<std::vector<std::vector<float>>> initial =
      model.InitialParams();
  if (!initial.ok()) return Fail(initial.status());
  client::ReferenceTrainerOptions options;
  options.world_size = 1;
  options.batch_per_rank = batch_per_rank;
  options.adamw = model.options().adamw;
  options.max_grad_norm = model.options().max_grad_norm;
  absl::StatusOr<client::ReferenceTrainer> trainer =
      client::ReferenceTrainer::Create(&task, options, *std::move(initial));
  if (!trainer.ok()) return Usage(trainer.status());
  std::printf("compute only: no daemon, batch %lld\n",
              static_cast<long long>(batch_per_rank));
  std::fflush(stdout);
  double last_loss = 0.0;
  while (trainer->step() < steps) {
    const MonoTime t0 = MonoNow();
    absl::StatusOr<client::ReferenceStepResult> result = trainer->Step();
    const absl::Duration took = MonoNow() - t0;
    if (!result.ok()) return Fail(result.status());
    last_loss = result->loss;
    std::printf("step %lld loss %.6g grad_norm %.6g\n",
                static_cast<long long>(result->step), result->loss,
                result->grad_norm);
    if (absl::GetFlag(FLAGS_profile)) {
      StepTimes times;
      times.total = times.compute = took;
      PrintProfile(result->step, times);
    }
    std::fflush(stdout);
  }
  std::printf("final loss %.6g steps %lld\n", last_loss,
              static_cast<long long>(trainer->step()));
  return 0;
}

// RegisterModel until the daemon answers it, or `deadline`. Retried: an
// UNAVAILABLE (no daemon listens yet or any more: a sidecar starting, or a
// replacement taking the socket; or the daemon's own, e.g. before it reached
// its coordinator) and an ABORTED (the epoch changed while the ranks were
// registering, e.g. a daemon replaced meanwhile), as trainer.proto says to;
// anything else is the answer.
absl::StatusOr<v1::RegisterModelResponse> RegisterUntilAnswered(
    TrainerClient& client, const v1::RegisterModelRequest& request,
    MonoTime deadline) {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    absl::StatusOr<v1::RegisterModelResponse> registered =
        client.RegisterModel(request, deadline);
    if (registered.ok()) return registered;
    const absl::Status& why = registered.status();
    if ((!absl::IsUnavailable(why) && !absl::IsAborted(why)) ||
        TrainerClient::IsJobFailed(why) || MonoNow() >= deadline) {
      return why;
    }
    if (absl::IsAborted(why)) {
      std::printf("registration interrupted (%s); registering again\n",
                  std::string(why.message()).c_str());
      std::fflush(stdout);
    }
    // Wait for the channel to reconnect rather than sleep: a blocking wait
    // polls the channel, so the new connection's HTTP/2 handshake completes
    // at once. With only fail-fast calls and sleeps in between, nothing
    // polls it but gRPC's 5 s backup poller, and re-attaching took 2-5 s
    // after the replacement was listening.
    (void)client.WaitConnected(std::min(deadline, MonoNow() + backoff));
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

int Run() {
  absl::StatusOr<std::vector<int64_t>> widths = Widths();
  if (!widths.ok()) return Usage(widths.status());
  absl::StatusOr<v1::ShardingStrategy> strategy = Strategy();
  if (!strategy.ok()) return Usage(strategy.status());
  const int64_t batch_per_rank = absl::GetFlag(FLAGS_batch_per_rank);
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  if (batch_per_rank < 1 || steps < 0) {
    return Usage(absl::InvalidArgumentError(
        "--batch_per_rank must be >= 1 and --steps >= 0"));
  }
  const absl::Duration rpc_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  const absl::Duration ready_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_ready_timeout_ms));

  client::ExampleModelOptions model_options;
  model_options.widths = *widths;
  model_options.init_seed = absl::GetFlag(FLAGS_seed);
  model_options.strategy = *strategy;
  model_options.sharding_factor = absl::GetFlag(FLAGS_sharding_factor);
  model_options.adamw.lr = absl::GetFlag(FLAGS_lr);
  model_options.adamw.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  model_options.max_grad_norm = absl::GetFlag(FLAGS_max_grad_norm);
  model_options.max_gathered_units = absl::GetFlag(FLAGS_max_gathered_units);
  absl::StatusOr<client::ExampleModel> model =
      client::ExampleModel::Create(model_options);
  if (!model.ok()) return Usage(model.status());
  absl::StatusOr<client::TeacherStudent> task =
      client::TeacherStudent::Create({*widths, absl::GetFlag(FLAGS_seed)});
  if (!task.ok()) return Usage(task.status());
  if (absl::GetFlag(FLAGS_compute_only)) {
    return RunComputeOnly(*model, *task, batch_per_rank, steps);
  }
  absl::StatusOr<client::Mlp> mlp =
      client::Mlp::Create(*widths, batch_per_rank);
  if (!mlp.ok()) return Usage(mlp.status());

  client::TrainerClientOptions client_options;
  client_options.target = absl::GetFlag(FLAGS_socket);
  client_options.default_timeout = rpc_timeout;
  client_options.register_timeout = std::max(rpc_timeout, ready_timeout);
  absl::StatusOr<std::unique_ptr<TrainerClient>> client =
      TrainerClient::Create(client_options);
  if (!client.ok()) return Usage(client.status());

  // Kept until exit: a re-registration after a daemon restart names it.
  std::optional<client::InitValuesFile> init_values;
  if (const std::string dir = absl::GetFlag(FLAGS_init_values_dir);
      !dir.empty()) {
    absl::StatusOr<client::InitValuesFile> written =
        model->WriteInitialWeights(dir);
    if (!written.ok()) return Usage(written.status());
    init_values = *std::move(written);
  }
  v1::RegisterModelRequest register_request =
      model->RegisterRequest(init_values.has_value() ? &*init_values : nullptr);
  register_request.set_load_from(absl::GetFlag(FLAGS_load_from));
  // The daemon may not listen yet (a sidecar or a supervisor starting both
  // at once, or restarting both after an eviction): wait for it as long as
  // for a ready epoch, instead of failing at the first refused connection.
  if (!(*client)->WaitConnected(MonoNow() + absl::Seconds(1)).ok()) {
    std::printf("waiting for the shardd daemon at %s (up to %s)\n",
                (*client)->target().c_str(),
                absl::FormatDuration(ready_timeout).c_str());
    std::fflush(stdout);
    if (absl::Status up = (*client)->WaitConnected(MonoNow() + ready_timeout);
        !up.ok()) {
      return Fail(up);
    }
  }
  absl::StatusOr<v1::RegisterModelResponse> registered = RegisterUntilAnswered(
      **client, register_request, MonoNow() + client_options.register_timeout);
  if (!registered.ok()) return Fail(registered.status());
  int rank = absl::GetFlag(FLAGS_rank);
  int world_size = absl::GetFlag(FLAGS_world_size);
  if (rank < 0) rank = registered->topology().rank();
  if (world_size <= 0) world_size = registered->topology().world_size();
  std::printf(
      "registered rank %d of %d (F = %d), epoch %lld, committed step %lld%s\n",
      rank, world_size, registered->topology().sharding_factor(),
      static_cast<long long>(registered->epoch()),
      static_cast<long long>(registered->committed_step()),
      registered->reattached() ? " (re-attached)" : "");
  std::fflush(stdout);

  ExampleTrainer trainer(client->get(), std::move(*mlp), &*task, rank,
                         world_size, batch_per_rank, rpc_timeout,
                         absl::GetFlag(FLAGS_reshard_after_forward),
                         absl::GetFlag(FLAGS_daemon_prefetch));
  int64_t committed = registered->committed_step();
  double last_loss = 0.0;
  int aborted = 0;
  // The local daemon died (a sidecar restarts it, or a replacement takes
  // its slot at the same socket): register again until it answers; its
  // state comes from a replica, so training continues from its step.
  const auto reattach = [&](const absl::Status& why) -> absl::Status {
    std::printf("daemon unavailable (%s); re-attaching\n",
                std::string(why.message()).c_str());
    std::fflush(stdout);
    absl::StatusOr<v1::RegisterModelResponse> again = RegisterUntilAnswered(
        **client, register_request, MonoNow() + ready_timeout);
    if (!again.ok()) return again.status();
    std::printf("re-attached: epoch %lld, committed step %lld\n",
                static_cast<long long>(again->epoch()),
                static_cast<long long>(again->committed_step()));
    std::fflush(stdout);
    committed = again->committed_step();
    return absl::OkStatus();
  };
  while (committed < steps) {
    const int64_t step = committed + 1;
    absl::StatusOr<StepOutcome> outcome = trainer.RunStep(step);
    if (!outcome.ok() && absl::IsUnavailable(outcome.status())) {
      ++aborted;
      trainer.ReleaseAll();
      if (absl::Status s = reattach(outcome.status()); !s.ok()) return Fail(s);
      continue;
    }
    if (!outcome.ok()) {
      if (!absl::IsAborted(outcome.status())) return Fail(outcome.status());
      ++aborted;
      std::printf("step %lld aborted (%s); waiting for recovery\n",
                  static_cast<long long>(step),
                  std::string(outcome.status().message()).c_str());
      std::fflush(stdout);
      trainer.ReleaseAll();
      absl::StatusOr<v1::WaitReadyResponse> ready =
          (*client)->WaitReady(0, MonoNow() + ready_timeout);
      if (!ready.ok() && absl::IsUnavailable(ready.status())) {
        if (absl::Status s = reattach(ready.status()); !s.ok()) return Fail(s);
        continue;
      }
      if (!ready.ok()) return Fail(ready.status());
      committed = ready->committed_step();
      continue;
    }
    committed = outcome->response.committed_step();
    last_loss = outcome->loss;
    std::printf("step %lld loss %.6g grad_norm %.6g\n",
                static_cast<long long>(committed), outcome->loss,
                outcome->response.grad_norm());
    if (absl::GetFlag(FLAGS_profile)) PrintProfile(committed, trainer.times());
    std::fflush(stdout);
    if (committed == absl::GetFlag(FLAGS_pause_after_step)) {
      std::printf("paused after step %lld\n",
                  static_cast<long long>(committed));
      std::fflush(stdout);
      SleepUntil(MonoNow() + ready_timeout);  // the test kills this process
      return Fail(absl::DeadlineExceededError(
          "--pause_after_step: not killed within --ready_timeout_ms"));
    }
  }

  const std::string params_out = absl::GetFlag(FLAGS_params_out);
  if (!params_out.empty()) {
    absl::StatusOr<std::vector<std::vector<float>>> params =
        trainer.FetchParams();
    if (!params.ok()) return Fail(params.status());
    if (rank == 0) {
      std::ofstream out(params_out, std::ios::binary | std::ios::trunc);
      for (const auto& layer : *params) {
        out.write(reinterpret_cast<const char*>(layer.data()),
                  static_cast<std::streamsize>(layer.size() * sizeof(float)));
      }
      if (!out.good()) {
        return Fail(absl::InternalError(
            absl::StrCat("cannot write --params_out ", params_out)));
      }
    }
  }
  std::printf("gathers %lld ready %lld prefetched %lld\n",
              static_cast<long long>(trainer.gathers()),
              static_cast<long long>(trainer.ready_gathers()),
              static_cast<long long>(trainer.prefetched_gathers()));
  std::printf("final loss %.6g steps %lld%s\n", last_loss,
              static_cast<long long>(committed),
              aborted > 0
                  ? absl::StrCat(" (", aborted, " aborted attempts)").c_str()
                  : "");
  return 0;
}

}  // namespace
}  // namespace shardd

int main(int argc, char** argv) {
  // gRPC 1.51: once a channel's connection attempts failed while the daemon
  // was down (its replacement starting), the next connection completes only
  // on the client channel's backup poller, every 5 s by default
  // (grpc/grpc#28866), which would delay a trainer's re-attach after a
  // recovery by seconds; a 50 ms backup poll bounds it (bench/recovery
  // times the re-attach). Set before gRPC initialises; an explicit setting
  // wins.
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "50",
         /*overwrite=*/0);
  absl::SetProgramUsageMessage(
      "example_trainer --socket=PATH [--strategy=S --sharding_factor=F ...]");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 1) {
    std::fprintf(stderr, "example_trainer: unexpected argument '%s'\n",
                 args[1]);
    return 2;
  }
  return shardd::Run();
}
