#include "daemon/metrics/prometheus_node_observer.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace shardd::metrics {
namespace {

using prometheus::Counter;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Labels;
using prometheus::Registry;

// 100 us .. 30 s: a 4 KiB all-gather on loopback takes ~0.1 ms, a timed-out
// one the collective timeout (30 s by default).
const Histogram::BucketBoundaries& CollectiveBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
  return *b;
}

// 1 ms .. 60 s.
const Histogram::BucketBoundaries& StepBuckets() {
  static const auto* b = new Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,   1,      2.5,   5,    10,    30,   60};
  return *b;
}

Counter* NewCounter(Registry& registry, const std::string& name,
                    const std::string& help) {
  return &prometheus::BuildCounter()
              .Name(name)
              .Help(help)
              .Register(registry)
              .Add({});
}

Gauge* NewGauge(Registry& registry, const std::string& name,
                const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(
      {});
}

BoundedSeries<Counter> NewCounters(
    Registry& registry, const std::string& name, const std::string& help,
    std::vector<std::string> labels,
    std::vector<std::vector<std::string>> known) {
  auto& family =
      prometheus::BuildCounter().Name(name).Help(help).Register(registry);
  return BoundedSeries<Counter>(
      std::move(labels), std::move(known),
      [&family](const Labels& l) -> Counter& { return family.Add(l); });
}

BoundedSeries<Histogram> NewHistograms(
    Registry& registry, const std::string& name, const std::string& help,
    std::vector<std::string> labels,
    std::vector<std::vector<std::string>> known,
    const Histogram::BucketBoundaries& buckets) {
  auto& family =
      prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
  return BoundedSeries<Histogram>(
      std::move(labels), std::move(known),
      [&family, buckets](const Labels& l) -> Histogram& {
        return family.Add(l, buckets);
      });
}

const std::vector<std::string>& Ops() {
  static const auto* v = new std::vector<std::string>{
      node_labels::kAllGather, node_labels::kReduceScatter,
      node_labels::kAllReduce, node_labels::kBroadcast};
  return *v;
}

const std::vector<std::string>& Groups() {
  static const auto* v = new std::vector<std::string>{
      node_labels::kShardGroup, node_labels::kReplicaGroup};
  return *v;
}

}  // namespace

PrometheusNodeObserver::PrometheusNodeObserver(prometheus::Registry& registry,
                                               absl::string_view version)
    : collective_duration_(NewHistograms(
          registry, "shardd_collective_duration_seconds",
          "Time inside each collective that succeeded.", {"op", "group"},
          {Ops(), Groups()}, CollectiveBuckets())),
      collective_bytes_(NewCounters(
          registry, "shardd_collective_bytes_total",
          "Buffer bytes moved by collectives that succeeded (nccl-tests size "
          "convention).",
          {"op", "group"}, {Ops(), Groups()})),
      collective_failures_(NewCounters(registry,
                                       "shardd_collective_failures_total",
                                       "Collectives that returned an error.",
                                       {"op", "group"}, {Ops(), Groups()})),
      steps_aborted_(NewCounters(
          registry, "shardd_steps_aborted_total",
          "Step attempts that returned ABORTED (or INTERNAL: internal_error), "
          "by reason.",
          {"reason"},
          {{node_labels::kPeerFailure, node_labels::kVoteRejected,
            node_labels::kEpochChanged, node_labels::kInternalError}})),
      recovery_bytes_(
          NewCounters(registry, "shardd_recovery_bytes_total",
                      "Shard bytes moved by Peer.FetchShard.", {"direction"},
                      {{node_labels::kSent, node_labels::kReceived}})),
      recovery_transfers_(NewCounters(
          registry, "shardd_recovery_transfers_total",
          "FetchShard transfers, by this daemon's role and the result.",
          {"role", "result"},
          {{node_labels::kSource, node_labels::kTarget}, {"ok", "failed"}})),
      prefetch_hints_(NewCounters(
          registry, "shardd_prefetch_hints_total",
          "Gather prefetch hints, by what became of them.", {"result"},
          {{node_labels::kStarted, node_labels::kNotNeeded,
            node_labels::kDropped}})),
      memory_admissions_(NewCounters(
          registry, "shardd_memory_admissions_total",
          "Memory admission decisions, by request and result.",
          {"request", "result"},
          {{node_labels::kAdmitRegisterModel, node_labels::kAdmitEngine,
            node_labels::kAdmitInitValues, node_labels::kAdmitAccumulation,
            node_labels::kAdmitExport},
           {"admitted", "refused"}})),
      memory_usable_(
          {"scope"},
          {{node_labels::kLimitHost, node_labels::kLimitShm,
            node_labels::kLimitDevice, node_labels::kLimitPlanned}},
          [&family = prometheus::BuildGauge()
                         .Name("shardd_memory_admission_usable_bytes")
                         .Help("What a plan may use, by scope, as the latest "
                               "engine admission found it (the binding limit "
                               "less the safety margin; 0 before the first).")
                         .Register(registry)](const prometheus::Labels& l)
              -> prometheus::Gauge& { return family.Add(l); }),
      // One observation per trainer call (not per step): its _sum over
      // the committed steps is the wait per step, and rate() of its _sum
      // the share of the trainer's time spent waiting (docs/metrics.md).
      trainer_wait_(NewHistograms(
          registry, "shardd_trainer_wait_seconds",
          "Time each trainer call (Gather, ReduceGrad, Step) spent blocked "
          "on collectives, by call.",
          {"call"},
          {{node_labels::kCallGather, node_labels::kCallReduceGrad,
            node_labels::kCallStep}},
          CollectiveBuckets())) {
  auto& shard_bytes = prometheus::BuildGauge()
                          .Name("shardd_shard_bytes")
                          .Help("Bytes of this rank's shards held, by kind.")
                          .Register(registry);
  shard_parameters_ = &shard_bytes.Add({{"kind", "parameters"}});
  shard_lowp_parameters_ = &shard_bytes.Add({{"kind", "lowp_parameters"}});
  shard_gradients_ = &shard_bytes.Add({{"kind", "gradients"}});
  shard_optimizer_state_ = &shard_bytes.Add({{"kind", "optimizer_state"}});
  gathered_bytes_ =
      NewGauge(registry, "shardd_gathered_bytes",
               "Bytes of gathered (unsharded) parameter slots in use.");
  planned_bytes_ = NewGauge(registry, "shardd_planned_bytes",
                            "The memory plan's total for this rank, in bytes.");
  steps_committed_ = NewCounter(registry, "shardd_steps_committed_total",
                                "Steps applied (the commit vote said commit).");
  step_duration_ =
      &prometheus::BuildHistogram()
           .Name("shardd_step_duration_seconds")
           .Help(
               "Duration of committed Step RPCs (all-reduce, vote and "
               "optimizer).")
           .Register(registry)
           .Add({}, StepBuckets());
  committed_step_ = NewGauge(registry, "shardd_committed_step",
                             "The step this daemon last committed.");
  membership_epoch_ =
      NewGauge(registry, "shardd_membership_epoch",
               "The membership epoch of the daemon's communicators.");
  ready_ = NewGauge(registry, "shardd_ready",
                    "1 when the daemon is in a ready epoch, else 0.");
  checkpoints_written_ =
      NewCounter(registry, "shardd_checkpoints_written_total",
                 "Sharded checkpoints written.");
  checkpoint_last_written_ = NewGauge(
      registry, "shardd_checkpoint_last_written_timestamp_seconds",
      "Unix time the newest sharded checkpoint was written (0 before the "
      "first); its age is time() minus this.");
  trainer_last_call_ = NewGauge(
      registry, "shardd_trainer_last_call_timestamp_seconds",
      "Unix time of the trainer's last Gather, Release, ReduceGrad, Step or "
      "WaitReady (0 before the first); when a job stalls, the rank whose "
      "value stopped moving is the one its peers wait for.");
  checkpoint_write_failures_ = NewCounter(
      registry, "shardd_checkpoint_write_failures_total",
      "Sharded checkpoints whose write failed (the daemon's log says why); "
      "training goes on without them.");
  checkpoints_skipped_ = NewCounter(
      registry, "shardd_checkpoints_skipped_total",
      "Asynchronous checkpoints (--async_checkpoints) skipped because the "
      "previous one was still being written: a disk slower than the "
      "checkpoint interval.");
  checkpoint_staging_bytes_ = NewGauge(
      registry, "shardd_checkpoint_staging_bytes",
      "Host bytes held as the staging of asynchronous checkpoints "
      "(--async_checkpoints: one copy of the shard's checkpointed state); "
      "0 without.");
  checkpoint_restores_ =
      NewCounter(registry, "shardd_checkpoint_restores_total",
                 "Shards restored from a checkpoint (no replica had them).");
  prefetch_used_ =
      NewCounter(registry, "shardd_prefetched_gathers_total",
                 "Gathers served by an earlier Gather's prefetch hint.");
  insecure_endpoints_ = NewGauge(
      registry, "shardd_insecure_endpoints",
      "gRPC endpoints of this daemon that carry plaintext beyond its machine "
      "because it runs with --insecure (0 with TLS or loopback only).");
  shm_leftover_bytes_ = NewGauge(
      registry, "shardd_shm_leftover_bytes",
      "Bytes in the shared-memory directory that no live daemon owns (a dead "
      "daemon's leftovers not yet removed, or files of unknown owners), as "
      "the latest sweep found them; they count against the pod's memory. "
      "shardctl status shows them.");
  shm_swept_files_ =
      NewCounter(registry, "shardd_shm_swept_files_total",
                 "Dead daemons' shared-memory files the sweep removed. "
                 "shardctl status shows their bytes.");
  shm_swept_bytes_ =
      NewCounter(registry, "shardd_shm_swept_bytes_total",
                 "Bytes of dead daemons' shared-memory files the sweep "
                 "removed. shardctl status shows them.");
  prometheus::BuildGauge()
      .Name("shardd_build_info")
      .Help("Always 1; the version label names the shardd build.")
      .Register(registry)
      .Add({{"version", std::string(version)}})
      .Set(1);
}

PrometheusNodeObserver::~PrometheusNodeObserver() = default;

void PrometheusNodeObserver::StepCommitted(absl::Duration step_time,
                                           int64_t step) {
  steps_committed_->Increment();
  step_duration_->Observe(absl::ToDoubleSeconds(step_time));
  committed_step_->Set(static_cast<double>(step));
}

void PrometheusNodeObserver::StepAborted(absl::string_view reason) {
  steps_aborted_.Get({reason}).Increment();
}

void PrometheusNodeObserver::CollectiveDone(absl::string_view op,
                                            absl::string_view group,
                                            int64_t bytes, absl::Duration d,
                                            bool ok) {
  if (!ok) {
    collective_failures_.Get({op, group}).Increment();
    return;
  }
  collective_duration_.Get({op, group}).Observe(absl::ToDoubleSeconds(d));
  if (bytes > 0) {
    collective_bytes_.Get({op, group}).Increment(static_cast<double>(bytes));
  }
}

void PrometheusNodeObserver::MemoryHeld(const ShardBytes& bytes) {
  shard_parameters_->Set(static_cast<double>(bytes.parameters));
  shard_lowp_parameters_->Set(static_cast<double>(bytes.lowp_parameters));
  shard_gradients_->Set(static_cast<double>(bytes.gradients));
  shard_optimizer_state_->Set(static_cast<double>(bytes.optimizer_state));
  gathered_bytes_->Set(static_cast<double>(bytes.gathered));
  planned_bytes_->Set(static_cast<double>(bytes.planned));
}

void PrometheusNodeObserver::EpochChanged(int64_t epoch, bool ready) {
  membership_epoch_->Set(static_cast<double>(epoch));
  ready_->Set(ready ? 1 : 0);
}

void PrometheusNodeObserver::RecoveryBytes(absl::string_view direction,
                                           int64_t bytes) {
  if (bytes > 0) {
    recovery_bytes_.Get({direction}).Increment(static_cast<double>(bytes));
  }
}

void PrometheusNodeObserver::RecoveryTransfer(absl::string_view role, bool ok) {
  recovery_transfers_.Get({role, ok ? "ok" : "failed"}).Increment();
}

void PrometheusNodeObserver::PrefetchHint(absl::string_view result) {
  prefetch_hints_.Get({result}).Increment();
}

void PrometheusNodeObserver::PrefetchUsed() { prefetch_used_->Increment(); }

void PrometheusNodeObserver::InsecureEndpoints(int n) {
  insecure_endpoints_->Set(std::max(n, 0));
}

void PrometheusNodeObserver::ShmLeftoverBytes(int64_t bytes) {
  shm_leftover_bytes_->Set(static_cast<double>(std::max<int64_t>(bytes, 0)));
}

void PrometheusNodeObserver::MemoryAdmission(absl::string_view request,
                                             bool admitted) {
  memory_admissions_.Get({request, admitted ? "admitted" : "refused"})
      .Increment();
}

void PrometheusNodeObserver::MemoryLimit(absl::string_view scope,
                                         int64_t usable_bytes) {
  memory_usable_.Get({scope}).Set(
      static_cast<double>(std::max<int64_t>(usable_bytes, 0)));
}

void PrometheusNodeObserver::TrainerWaited(absl::string_view call,
                                           absl::Duration waited) {
  trainer_wait_.Get({call}).Observe(
      absl::ToDoubleSeconds(std::max(waited, absl::ZeroDuration())));
}

void PrometheusNodeObserver::ShmSwept(int64_t files, int64_t bytes) {
  if (files > 0) shm_swept_files_->Increment(static_cast<double>(files));
  if (bytes > 0) shm_swept_bytes_->Increment(static_cast<double>(bytes));
}

void PrometheusNodeObserver::CheckpointWritten(absl::Time when) {
  checkpoints_written_->Increment();
  // The newest: a checkpoint reported late never moves it back.
  const double unix_seconds = absl::ToDoubleSeconds(when - absl::UnixEpoch());
  absl::MutexLock lock(&checkpoint_mu_);
  if (unix_seconds > checkpoint_last_written_->Value()) {
    checkpoint_last_written_->Set(unix_seconds);
  }
}

void PrometheusNodeObserver::TrainerCalled(absl::Time when) {
  trainer_last_call_->Set(absl::ToDoubleSeconds(when - absl::UnixEpoch()));
}

void PrometheusNodeObserver::CheckpointWriteFailed() {
  checkpoint_write_failures_->Increment();
}

void PrometheusNodeObserver::CheckpointSkipped() {
  checkpoints_skipped_->Increment();
}

void PrometheusNodeObserver::CheckpointStagingBytes(int64_t bytes) {
  checkpoint_staging_bytes_->Set(static_cast<double>(bytes));
}

void PrometheusNodeObserver::CheckpointRestored() {
  checkpoint_restores_->Increment();
}

}  // namespace shardd::metrics
