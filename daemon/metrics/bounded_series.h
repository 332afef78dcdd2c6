#ifndef SHARDD_DAEMON_METRICS_BOUNDED_SERIES_H_
#define SHARDD_DAEMON_METRICS_BOUNDED_SERIES_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "prometheus/family.h"
#include "prometheus/labels.h"

namespace shardd::metrics {

// The label value every unknown label string is recorded under.
inline constexpr char kOtherLabel[] = "other";

// The time series of one metric family whose labels take a bounded set of
// values (docs/metrics.md: "few labels with bounded values").
//
// Every combination of the known values is created at construction, so
// each series is exported, at zero, from the first scrape on (rate() and
// increase() then see the first event). A value outside the known set is
// recorded as "other", so a caller's typo costs one extra series, never an
// unbounded number.
//
// Thread-safe: the known series are looked up in a map that is never
// modified after construction; "other" series go through Family::Add,
// which locks. Borrows the family (owned by a prometheus::Registry that
// must outlive this object).
template <typename T>
class BoundedSeries {
 public:
  // `names[i]` is a label name and `known[i]` its known values. `add`
  // creates (or finds) one series of the family, e.g.
  //   [&](const prometheus::Labels& l) -> T& { return family.Add(l, buckets); }
  BoundedSeries(std::vector<std::string> names,
                std::vector<std::vector<std::string>> known,
                std::function<T&(const prometheus::Labels&)> add)
      : names_(std::move(names)), known_(std::move(known)), add_(add) {
    std::vector<std::string> values(names_.size());
    CreateAll(0, values);
  }

  // The series for these label values (one per label, in the order of the
  // names); unknown values are replaced by "other".
  T& Get(std::initializer_list<absl::string_view> values) const {
    std::vector<std::string> canonical;
    canonical.reserve(names_.size());
    size_t i = 0;
    for (absl::string_view v : values) {
      if (i >= names_.size()) break;
      bool found = false;
      for (const std::string& k : known_[i]) found = found || k == v;
      canonical.emplace_back(found ? std::string(v) : kOtherLabel);
      ++i;
    }
    while (canonical.size() < names_.size())
      canonical.emplace_back(kOtherLabel);
    const auto it = series_.find(absl::StrJoin(canonical, "\x1f"));
    if (it != series_.end()) return *it->second;
    return add_(LabelsOf(canonical));
  }

 private:
  void CreateAll(size_t depth, std::vector<std::string>& values) {
    if (depth == names_.size()) {
      series_[absl::StrJoin(values, "\x1f")] = &add_(LabelsOf(values));
      return;
    }
    for (const std::string& v : known_[depth]) {
      values[depth] = v;
      CreateAll(depth + 1, values);
    }
  }

  prometheus::Labels LabelsOf(const std::vector<std::string>& values) const {
    prometheus::Labels labels;
    for (size_t i = 0; i < names_.size(); ++i) labels[names_[i]] = values[i];
    return labels;
  }

  const std::vector<std::string> names_;
  const std::vector<std::vector<std::string>> known_;
  const std::function<T&(const prometheus::Labels&)> add_;
  absl::flat_hash_map<std::string, T*> series_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_BOUNDED_SERIES_H_
