// Worker labels (herd-worker --label KEY=VALUE): what a label may look like,
// shared by the worker's flags, the coordinator's checks of a registration
// and the job spec's placement and sync.islands_by.
//
// A key or value is 1 to 63 characters of letters, digits, '-', '_' and '.',
// beginning and ending with a letter or digit (a DNS label, with '_' and '.'
// allowed as Kubernetes label values allow them). A worker carries at most
// 32 labels. Keys are case-sensitive.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd {

inline constexpr size_t kMaxLabelBytes = 63;
inline constexpr size_t kMaxLabels = 32;

using Labels = std::map<std::string, std::string>;

// INVALID_ARGUMENT "FIELD: ..." naming what is wrong (`field` names where the
// key or value came from, e.g. "--label" or "placement.require").
absl::Status ValidateLabelKey(const std::string& field, const std::string& key);
absl::Status ValidateLabelValue(const std::string& field, const std::string& key, const std::string& value);

// The Prometheus label name a worker label is exported under: "label_" and
// the key with '-' and '.' written as '_' (as kube-state-metrics does).
std::string MetricLabelName(const std::string& key);

// Every key and value valid, no two keys of one MetricLabelName, and at
// most kMaxLabels of them.
absl::Status ValidateLabels(const std::string& field, const Labels& labels);

// "KEY=VALUE" flags into labels; a bad one, or a key given twice, is an
// INVALID_ARGUMENT naming the flag's text.
absl::StatusOr<Labels> ParseLabelFlags(const std::vector<std::string>& flags);

// "k1=v1,k2=v2" in key order ("" for none): how people see a label set.
std::string FormatLabels(const Labels& labels);

}  // namespace herd
