#ifndef SHARDD_DAEMON_METRICS_PROMETHEUS_NODE_OBSERVER_H_
#define SHARDD_DAEMON_METRICS_PROMETHEUS_NODE_OBSERVER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/metrics/bounded_series.h"
#include "daemon/metrics/node_observer.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace shardd::metrics {

// The node daemon's metrics (the shardd_* names of docs/metrics.md) as
// Prometheus counters, gauges and histograms on a registry.
//
// Every family, and every series with a known label value, is registered
// at construction, so a scrape shows them (at zero) before the first
// event. Histograms are in seconds: collectives and the trainer's waits on
// them 100 us .. 30 s, steps 1 ms .. 60 s (1-2.5-5 steps per decade).
//
// The last checkpoint is a *_timestamp_seconds gauge (Prometheus'
// convention), not an age: its age is time() - it in a query, and no
// scrape-time computation is needed.
//
// Thread-safe (prometheus-cpp metrics are). Borrows the registry, which
// must outlive this object.
class PrometheusNodeObserver : public NodeObserver {
 public:
  // `version` labels shardd_build_info.
  PrometheusNodeObserver(prometheus::Registry& registry,
                         absl::string_view version);
  ~PrometheusNodeObserver() override;

  PrometheusNodeObserver(const PrometheusNodeObserver&) = delete;
  PrometheusNodeObserver& operator=(const PrometheusNodeObserver&) = delete;

  void StepCommitted(absl::Duration step_time, int64_t step) override;
  void StepAborted(absl::string_view reason) override;
  void CollectiveDone(absl::string_view op, absl::string_view group,
                      int64_t bytes, absl::Duration d, bool ok) override;
  void MemoryHeld(const ShardBytes& bytes) override;
  void EpochChanged(int64_t epoch, bool ready) override;
  void RecoveryBytes(absl::string_view direction, int64_t bytes) override;
  void RecoveryTransfer(absl::string_view role, bool ok) override;
  void CheckpointWritten(absl::Time when) override;
  void TrainerCalled(absl::Time when) override;
  void CheckpointWriteFailed() override;
  void CheckpointSkipped() override;
  void CheckpointStagingBytes(int64_t bytes) override;
  void CheckpointRestored() override;
  void PrefetchHint(absl::string_view result) override;
  void PrefetchUsed() override;
  void ShmLeftoverBytes(int64_t bytes) override;
  void InsecureEndpoints(int n) override;
  void ShmSwept(int64_t files, int64_t bytes) override;
  void MemoryAdmission(absl::string_view request, bool admitted) override;
  void MemoryLimit(absl::string_view scope, int64_t usable_bytes) override;
  void TrainerWaited(absl::string_view call, absl::Duration waited) override;

 private:
  prometheus::Gauge* shard_parameters_;
  prometheus::Gauge* shard_lowp_parameters_;
  prometheus::Gauge* shard_gradients_;
  prometheus::Gauge* shard_optimizer_state_;
  prometheus::Gauge* gathered_bytes_;
  prometheus::Gauge* planned_bytes_;
  BoundedSeries<prometheus::Histogram> collective_duration_;
  BoundedSeries<prometheus::Counter> collective_bytes_;
  BoundedSeries<prometheus::Counter> collective_failures_;
  prometheus::Counter* steps_committed_;
  BoundedSeries<prometheus::Counter> steps_aborted_;
  prometheus::Histogram* step_duration_;
  prometheus::Gauge* committed_step_;
  prometheus::Gauge* membership_epoch_;
  prometheus::Gauge* ready_;
  BoundedSeries<prometheus::Counter> recovery_bytes_;
  BoundedSeries<prometheus::Counter> recovery_transfers_;
  BoundedSeries<prometheus::Counter> prefetch_hints_;
  prometheus::Counter* prefetch_used_;
  prometheus::Counter* checkpoints_written_;
  prometheus::Counter* checkpoint_restores_;
  prometheus::Counter* checkpoint_write_failures_;
  prometheus::Counter* checkpoints_skipped_;
  prometheus::Gauge* checkpoint_staging_bytes_;
  prometheus::Gauge* shm_leftover_bytes_;
  prometheus::Gauge* insecure_endpoints_;
  prometheus::Counter* shm_swept_files_;
  prometheus::Counter* shm_swept_bytes_;
  BoundedSeries<prometheus::Counter> memory_admissions_;
  BoundedSeries<prometheus::Gauge> memory_usable_;
  BoundedSeries<prometheus::Histogram> trainer_wait_;
  // Unix seconds of the newest checkpoint; checkpoint_mu_ makes its
  // read-compare-set one step.
  absl::Mutex checkpoint_mu_;
  prometheus::Gauge* checkpoint_last_written_ ABSL_GUARDED_BY(checkpoint_mu_);
  prometheus::Gauge* trainer_last_call_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_PROMETHEUS_NODE_OBSERVER_H_
