#include "common/labels.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"

namespace herd {
namespace {

bool IsLabelChar(char c) { return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.'; }

// Why `text` is not a label key or value, or "" when it is one.
std::string Problem(const std::string& text) {
  if (text.empty()) return "must not be empty";
  if (text.size() > kMaxLabelBytes) return absl::StrCat("is longer than ", kMaxLabelBytes, " characters");
  for (char c : text) {
    if (!IsLabelChar(c)) return "may only contain letters, digits, '-', '_' and '.'";
  }
  if (!absl::ascii_isalnum(text.front()) || !absl::ascii_isalnum(text.back())) {
    return "must begin and end with a letter or digit";
  }
  return "";
}

// Quoted for an error message; control characters escaped so the message
// cannot rewrite a terminal.
std::string Quoted(const std::string& text) { return absl::StrCat("'", EscapeControlChars(text), "'"); }

}  // namespace

absl::Status ValidateLabelKey(const std::string& field, const std::string& key) {
  const std::string problem = Problem(key);
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": label key ", Quoted(key), " ", problem));
}

absl::Status ValidateLabelValue(const std::string& field, const std::string& key, const std::string& value) {
  const std::string problem = Problem(value);
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": value ", Quoted(value), " of label ", Quoted(key), " ", problem));
}

std::string MetricLabelName(const std::string& key) {
  std::string name = absl::StrCat("label_", key);
  for (char& c : name) {
    if (c == '-' || c == '.') c = '_';
  }
  return name;
}

absl::Status ValidateLabels(const std::string& field, const Labels& labels) {
  if (labels.size() > kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", labels.size(), " labels, at most ", kMaxLabels, " allowed"));
  }
  std::map<std::string, std::string> by_metric_name;
  for (const auto& [key, value] : labels) {
    if (auto status = ValidateLabelKey(field, key); !status.ok()) return status;
    if (auto status = ValidateLabelValue(field, key, value); !status.ok()) return status;
    auto [other, inserted] = by_metric_name.emplace(MetricLabelName(key), key);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": label keys ", Quoted(other->second), " and ",
                                                     Quoted(key), " would both be exported as metric label ",
                                                     other->first));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Labels> ParseLabelFlags(const std::vector<std::string>& flags) {
  Labels labels;
  for (const std::string& flag : flags) {
    const std::string field = absl::StrCat("--label ", Quoted(flag));
    const size_t equals = flag.find('=');
    if (equals == std::string::npos) return absl::InvalidArgumentError(absl::StrCat(field, ": expected KEY=VALUE"));
    const std::string key = flag.substr(0, equals);
    const std::string value = flag.substr(equals + 1);
    if (auto status = ValidateLabelKey(field, key); !status.ok()) return status;
    if (auto status = ValidateLabelValue(field, key, value); !status.ok()) return status;
    if (!labels.emplace(key, value).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": label ", Quoted(key), " is given twice"));
    }
  }
  if (auto status = ValidateLabels("--label", labels); !status.ok()) return status;
  return labels;
}

std::string FormatLabels(const Labels& labels) {
  return absl::StrJoin(labels, ",", absl::PairFormatter("="));
}

}  // namespace herd
