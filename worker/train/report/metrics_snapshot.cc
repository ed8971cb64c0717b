#include "worker/train/report/metrics_snapshot.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace herd {
namespace {

namespace pb = metrics::v1;

pb::MetricType ToProto(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return pb::COUNTER;
    case prometheus::MetricType::Gauge:
      return pb::GAUGE;
    case prometheus::MetricType::Summary:
      return pb::SUMMARY;
    case prometheus::MetricType::Histogram:
      return pb::HISTOGRAM;
    case prometheus::MetricType::Untyped:
      break;
  }
  return pb::UNTYPED;
}

prometheus::MetricType FromProto(pb::MetricType type) {
  switch (type) {
    case pb::COUNTER:
      return prometheus::MetricType::Counter;
    case pb::GAUGE:
      return prometheus::MetricType::Gauge;
    case pb::SUMMARY:
      return prometheus::MetricType::Summary;
    case pb::HISTOGRAM:
      return prometheus::MetricType::Histogram;
    default:
      return prometheus::MetricType::Untyped;
  }
}

// The one value field that matters for the family's type.
double ScalarValue(prometheus::MetricType type, const prometheus::ClientMetric& metric) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return metric.counter.value;
    case prometheus::MetricType::Gauge:
      return metric.gauge.value;
    default:
      return metric.untyped.value;
  }
}

void SetScalarValue(prometheus::MetricType type, double value, prometheus::ClientMetric* metric) {
  switch (type) {
    case prometheus::MetricType::Counter:
      metric->counter.value = value;
      break;
    case prometheus::MetricType::Gauge:
      metric->gauge.value = value;
      break;
    default:
      metric->untyped.value = value;
  }
}

// [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; label names allow no ':'.
bool IsValidName(const std::string& name, bool colons) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && !(colons && c == ':')) return false;
  }
  return true;
}

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status ValidateMetric(const pb::Family& family, const pb::Metric& metric, const std::string& at) {
  for (int l = 0; l < metric.labels_size(); ++l) {
    if (!IsValidName(metric.labels(l).name(), /*colons=*/false)) {
      return Invalid(absl::StrCat(at, ".labels[", l, "].name"),
                     absl::StrCat("not a label name: '", metric.labels(l).name(), "'"));
    }
  }
  if (metric.timestamp_ms() < 0) {
    return Invalid(at + ".timestamp_ms", absl::StrCat("must be >= 0, got ", metric.timestamp_ms()));
  }
  if (family.type() == pb::COUNTER && !(std::isfinite(metric.value()) && metric.value() >= 0)) {
    return Invalid(at + ".value", absl::StrCat("a counter must be finite and >= 0, got ", metric.value()));
  }
  double bound = -std::numeric_limits<double>::infinity();
  uint64_t count = 0;
  for (int b = 0; b < metric.buckets_size(); ++b) {
    const pb::Bucket& bucket = metric.buckets(b);
    if (std::isnan(bucket.upper_bound()) || (b > 0 && bucket.upper_bound() <= bound)) {
      return Invalid(absl::StrCat(at, ".buckets[", b, "].upper_bound"),
                     absl::StrCat("bounds must rise, got ", bucket.upper_bound(), " after ", bound));
    }
    if (bucket.cumulative_count() < count) {
      return Invalid(absl::StrCat(at, ".buckets[", b, "].cumulative_count"),
                     absl::StrCat("counts must not fall, got ", bucket.cumulative_count(), " after ", count));
    }
    bound = bucket.upper_bound();
    count = bucket.cumulative_count();
  }
  for (int q = 0; q < metric.quantiles_size(); ++q) {
    const double quantile = metric.quantiles(q).quantile();
    if (!(quantile >= 0 && quantile <= 1)) {
      return Invalid(absl::StrCat(at, ".quantiles[", q, "].quantile"),
                     absl::StrCat("must be in [0, 1], got ", quantile));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateMetricsSnapshot(const pb::MetricsSnapshot& snapshot) {
  for (int f = 0; f < snapshot.families_size(); ++f) {
    const pb::Family& family = snapshot.families(f);
    const std::string at = absl::StrCat("families[", f, "]");
    if (!IsValidName(family.name(), /*colons=*/true)) {
      return Invalid(at + ".name", absl::StrCat("not a metric name: '", family.name(), "'"));
    }
    for (int m = 0; m < family.metrics_size(); ++m) {
      const std::string metric_at = absl::StrCat(at, ".metrics[", m, "]");
      if (auto status = ValidateMetric(family, family.metrics(m), metric_at); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

pb::MetricsSnapshot ToSnapshot(const std::vector<prometheus::MetricFamily>& families) {
  pb::MetricsSnapshot snapshot;
  for (const prometheus::MetricFamily& family : families) {
    pb::Family* out = snapshot.add_families();
    out->set_name(family.name);
    out->set_help(family.help);
    out->set_type(ToProto(family.type));
    for (const prometheus::ClientMetric& metric : family.metric) {
      pb::Metric* m = out->add_metrics();
      for (const auto& label : metric.label) {
        pb::Label* l = m->add_labels();
        l->set_name(label.name);
        l->set_value(label.value);
      }
      m->set_timestamp_ms(metric.timestamp_ms);
      switch (family.type) {
        case prometheus::MetricType::Histogram:
          m->set_sample_count(metric.histogram.sample_count);
          m->set_sample_sum(metric.histogram.sample_sum);
          for (const auto& bucket : metric.histogram.bucket) {
            pb::Bucket* b = m->add_buckets();
            b->set_cumulative_count(bucket.cumulative_count);
            b->set_upper_bound(bucket.upper_bound);
          }
          break;
        case prometheus::MetricType::Summary:
          m->set_sample_count(metric.summary.sample_count);
          m->set_sample_sum(metric.summary.sample_sum);
          for (const auto& quantile : metric.summary.quantile) {
            pb::Quantile* q = m->add_quantiles();
            q->set_quantile(quantile.quantile);
            q->set_value(quantile.value);
          }
          break;
        default:
          m->set_value(ScalarValue(family.type, metric));
      }
    }
  }
  return snapshot;
}

std::vector<prometheus::MetricFamily> FromSnapshot(const pb::MetricsSnapshot& snapshot) {
  std::vector<prometheus::MetricFamily> families;
  families.reserve(snapshot.families_size());
  for (const pb::Family& in : snapshot.families()) {
    prometheus::MetricFamily& family = families.emplace_back();
    family.name = in.name();
    family.help = in.help();
    family.type = FromProto(in.type());
    for (const pb::Metric& m : in.metrics()) {
      prometheus::ClientMetric& metric = family.metric.emplace_back();
      for (const pb::Label& l : m.labels()) metric.label.push_back({l.name(), l.value()});
      metric.timestamp_ms = m.timestamp_ms();
      switch (family.type) {
        case prometheus::MetricType::Histogram:
          metric.histogram.sample_count = m.sample_count();
          metric.histogram.sample_sum = m.sample_sum();
          for (const pb::Bucket& b : m.buckets())
            metric.histogram.bucket.push_back({b.cumulative_count(), b.upper_bound()});
          break;
        case prometheus::MetricType::Summary:
          metric.summary.sample_count = m.sample_count();
          metric.summary.sample_sum = m.sample_sum();
          for (const pb::Quantile& q : m.quantiles()) metric.summary.quantile.push_back({q.quantile(), q.value()});
          break;
        default:
          SetScalarValue(family.type, m.value(), &metric);
      }
    }
  }
  return families;
}

absl::Status WriteMetricsSnapshot(const std::string& path, const std::vector<prometheus::MetricFamily>& families) {
  std::string bytes;
  if (!ToSnapshot(families).SerializeToString(&bytes)) {
    return absl::InternalError("cannot serialize the metrics snapshot");
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<std::vector<prometheus::MetricFamily>> ReadMetricsSnapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no metrics snapshot at ", path));
  std::stringstream bytes;
  bytes << in.rdbuf();
  pb::MetricsSnapshot snapshot;
  if (!snapshot.ParseFromString(bytes.str())) {
    return absl::DataLossError(absl::StrCat("the metrics snapshot ", path, " does not parse"));
  }
  if (auto status = ValidateMetricsSnapshot(snapshot); !status.ok()) {
    return absl::DataLossError(absl::StrCat("the metrics snapshot ", path, " is refused: ", status.message()));
  }
  return FromSnapshot(snapshot);
}

}  // namespace herd
