#include "daemon/metrics/accept_retry_collector.h"

#include <utility>

namespace shardd::metrics {
namespace {

prometheus::MetricFamily One(const char* name, const char* help,
                             prometheus::MetricType type, double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

AcceptRetryCollector::AcceptRetryCollector(
    std::function<rpc::AcceptRetry::Counts()> retry,
    std::function<rpc::AcceptPacer::Counts()> pacer)
    : retry_(std::move(retry)), pacer_(std::move(pacer)) {}

std::shared_ptr<AcceptRetryCollector> AcceptRetryCollector::ForThisProcess() {
  return std::make_shared<AcceptRetryCollector>(
      [] { return rpc::AcceptRetry::Process().counts(); },
      [] { return rpc::AcceptPacer::Process().counts(); });
}

std::vector<prometheus::MetricFamily> AcceptRetryCollector::Collect() const {
  const rpc::AcceptRetry::Counts c = retry_();
  const rpc::AcceptPacer::Counts p = pacer_();
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> out;
  out.push_back(One("shardd_accept_shortages_total",
                    "Shortages of file descriptors or socket memory a gRPC "
                    "listener met (connections waited in its queue).",
                    MetricType::Counter, static_cast<double>(c.episodes)));
  out.push_back(
      One("shardd_accept_shortages_open",
          "gRPC listeners short of file descriptors or socket "
          "memory now: new connections wait in their queues.",
          MetricType::Gauge,
          static_cast<double>(c.episodes - c.recovered - c.abandoned)));
  out.push_back(One("shardd_accept_deferred_total",
                    "Accepts that failed for want of file descriptors or "
                    "socket memory and were retried.",
                    MetricType::Counter, static_cast<double>(c.deferred)));
  out.push_back(One("shardd_accept_paced_total",
                    "Accepts of the metrics endpoint that failed for want of "
                    "file descriptors or socket memory and were retried "
                    "after a pause.",
                    MetricType::Counter, static_cast<double>(p.paced)));
  return out;
}

}  // namespace shardd::metrics
