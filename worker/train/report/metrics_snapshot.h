// The file a trainer leaves its Prometheus metrics in for its worker daemon:
// prometheus-cpp MetricFamily values <-> proto/metrics_snapshot.proto, and
// atomic file writes (a reader never sees a half-written snapshot).
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/metrics_snapshot.pb.h"

namespace herd {

metrics::v1::MetricsSnapshot ToSnapshot(const std::vector<prometheus::MetricFamily>& families);
std::vector<prometheus::MetricFamily> FromSnapshot(const metrics::v1::MetricsSnapshot& snapshot);

// What the daemon would expose must be valid exposition: metric and label
// names Prometheus accepts, counters and bucket counts that are finite and
// >= 0, bucket bounds that rise (no NaN), quantiles in [0, 1], timestamps
// >= 0. Gauge, untyped, sum and quantile values may be NaN or infinite (a
// diverging trainer's loss is NaN). INVALID_ARGUMENT naming the field
// ("families[2].metrics[0].value") and the value.
absl::Status ValidateMetricsSnapshot(const metrics::v1::MetricsSnapshot& snapshot);

// Writes `families` to `path` through a temporary file and a rename.
absl::Status WriteMetricsSnapshot(const std::string& path, const std::vector<prometheus::MetricFamily>& families);
// NotFound when there is no snapshot (yet); DataLoss when it does not parse
// or is not valid (ValidateMetricsSnapshot).
absl::StatusOr<std::vector<prometheus::MetricFamily>> ReadMetricsSnapshot(const std::string& path);

}  // namespace herd
