// Tests only: what the coordinator's metrics read, straight from the
// registry the coordinator's Metrics were built on.
#pragma once

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <map>
#include <optional>
#include <string>

namespace herd::coordinator {

// The value of the first series of `name` whose labels include `labels`
// (a histogram's: its count of observations); nullopt when there is none,
// e.g. a labelled counter never counted or a series removed.
inline std::optional<double> MetricValue(prometheus::Registry& registry, const std::string& name,
                                         const std::map<std::string, std::string>& labels = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      std::map<std::string, std::string> have;
      for (const auto& label : metric.label) have[label.name] = label.value;
      bool match = true;
      for (const auto& [key, value] : labels) match = match && have.count(key) > 0 && have.at(key) == value;
      if (!match) continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

}  // namespace herd::coordinator
