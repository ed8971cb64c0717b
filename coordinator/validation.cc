#include "coordinator/validation.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/incarnation.h"
#include "common/labels.h"
#include "common/control_chars.h"
#include "common/model_files.h"
#include "common/spec_enums.h"

namespace herd::coordinator {
namespace {

constexpr size_t kMaxWorkerIdBytes = 128;
constexpr size_t kMaxAddressBytes = 256;
constexpr size_t kMaxPathBytes = 4096;

constexpr size_t kMaxEvalEntries = 64;
constexpr size_t kMaxEvalNameBytes = 128;
constexpr size_t kMaxWarningBytes = 4096;
constexpr int kMaxFinalModelFiles = 4;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status NonNegative(const std::string& field, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be >= 0, got ", value));
}

absl::Status FiniteNonNegative(const std::string& field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be a finite number >= 0, got ", value));
}

bool IsWorkerIdChar(char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; }

}  // namespace

absl::Status ValidateWorkerId(const std::string& worker_id) {
  if (worker_id.empty() || worker_id.size() > kMaxWorkerIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_id: must be 1 to ", kMaxWorkerIdBytes, " characters, got ", worker_id.size()));
  }
  for (char c : worker_id) {
    if (!IsWorkerIdChar(c)) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker_id: '", worker_id, "' may only contain letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRegistration(const v1::RegisterWorkerRequest& request) {
  if (auto status = ValidateWorkerId(request.worker_id()); !status.ok()) return status;
  if (request.address().empty()) return absl::InvalidArgumentError("address: required (peers connect to it)");
  if (request.address().size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("address: longer than ", kMaxAddressBytes, " characters"));
  }
  // A worker's device kind is a job's device by its YAML name.
  if (auto device = ParseSpecEnum(v1::Device_descriptor(), request.device_kind(), "device_kind"); !device.ok()) {
    return device.status();
  }
  if (request.device_count() < 0) return absl::InvalidArgumentError("device_count: must be >= 0");
  return ValidateLabels("labels", Labels(request.labels().begin(), request.labels().end()));
}

absl::Status ValidateIncarnation(const std::string& incarnation) {
  if (incarnation.size() > kMaxIncarnationBytes ||
      !std::all_of(incarnation.begin(), incarnation.end(), [](char c) { return absl::ascii_isalnum(c); })) {
    return absl::InvalidArgumentError(absl::StrCat("incarnation (", kIncarnationMetadataKey, " metadata): must be at most ",
                                                   kMaxIncarnationBytes, " letters and digits, got '",
                                                   absl::CHexEscape(incarnation.substr(0, 80)), "'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointPath(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("path: required");
  if (path.size() > kMaxPathBytes) {
    return absl::InvalidArgumentError(absl::StrCat("path: longer than ", kMaxPathBytes, " characters"));
  }
  if (path.find('\0') != std::string::npos) return absl::InvalidArgumentError("path: contains a NUL byte");
  if (path.front() == '/') {
    return absl::InvalidArgumentError(absl::StrCat("path: must be relative to the checkpoint root: ", path));
  }
  for (absl::string_view component : absl::StrSplit(path, '/')) {
    if (component == "..") {
      return absl::InvalidArgumentError(absl::StrCat("path: must not contain '..': ", path));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateProgressReport(const v1::ReportProgressRequest& report) {
  const std::pair<const char*, int64_t> counts[] = {{"rank", report.rank()},
                                                    {"step", report.step()},
                                                    {"epoch", report.epoch()},
                                                    {"samples_in_epoch", report.samples_in_epoch()},
                                                    {"total_steps", report.total_steps()}};
  for (const auto& [field, value] : counts) {
    if (auto status = NonNegative(field, value); !status.ok()) return status;
  }
  if (auto status = FiniteNonNegative("samples_per_second", report.samples_per_second()); !status.ok()) return status;
  if (auto status = FiniteNonNegative("learning_rate", report.learning_rate()); !status.ok()) return status;
  if (report.eval_size() > static_cast<int>(kMaxEvalEntries)) {
    return Invalid("eval", absl::StrCat("at most ", kMaxEvalEntries, " entries, got ", report.eval_size()));
  }
  for (const auto& [name, value] : report.eval()) {
    if (name.empty() || name.size() > kMaxEvalNameBytes || HasControlChars(name)) {
      return Invalid("eval", absl::StrCat("names must be 1 to ", kMaxEvalNameBytes,
                                          " characters without control characters, got '", EscapeControlChars(name),
                                          "'"));
    }
  }
  if (report.warning().size() > kMaxWarningBytes) {
    return Invalid("warning", absl::StrCat("longer than ", kMaxWarningBytes, " bytes"));
  }
  if (report.has_straggler()) {
    const v1::Straggler& straggler = report.straggler();
    const std::pair<const char*, int64_t> straggler_counts[] = {{"straggler.rank", straggler.rank()},
                                                                {"straggler.step", straggler.step()}};
    for (const auto& [field, value] : straggler_counts) {
      if (auto status = NonNegative(field, value); !status.ok()) return status;
    }
    const std::pair<const char*, double> seconds[] = {
        {"straggler.compute_seconds_per_step", straggler.compute_seconds_per_step()},
        {"straggler.median_compute_seconds_per_step", straggler.median_compute_seconds_per_step()},
        {"straggler.others_wait_seconds_per_step", straggler.others_wait_seconds_per_step()},
        {"straggler.step_seconds", straggler.step_seconds()},
        {"straggler.holdback_fraction", straggler.holdback_fraction()}};
    for (const auto& [field, value] : seconds) {
      if (auto status = FiniteNonNegative(field, value); !status.ok()) return status;
    }
    if (straggler.holdback_fraction() > 1) {
      return Invalid("straggler.holdback_fraction", absl::StrCat("must be at most 1, got ", straggler.holdback_fraction()));
    }
    if (!straggler.worker_id().empty()) {
      return Invalid("straggler.worker_id", "must be empty: the coordinator fills it in from the members");
    }
  }
  if (report.final_model_size() > kMaxFinalModelFiles) {
    return Invalid("final_model",
                   absl::StrCat("at most ", kMaxFinalModelFiles, " files, got ", report.final_model_size()));
  }
  for (int i = 0; i < report.final_model_size(); ++i) {
    const v1::ModelFile& file = report.final_model(i);
    const std::string prefix = absl::StrCat("final_model[", i, "].");
    if (!IsFinalModelFileName(file.name())) {
      return Invalid(prefix + "name", absl::StrCat("must be ", kFinalSafetensorsFile, " or ", kFinalModelFile,
                                                   ", got '", EscapeControlChars(file.name()), "'"));
    }
    if (auto status = NonNegative(prefix + "size_bytes", file.size_bytes()); !status.ok()) return status;
    if (file.sha256().size() != 64 || !std::all_of(file.sha256().begin(), file.sha256().end(), [](char c) {
          return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
        })) {
      return Invalid(prefix + "sha256", "must be 64 lower-case hex digits");
    }
  }
  for (int i = 0; i < report.ranks_size(); ++i) {
    const v1::RankInterval& rank = report.ranks(i);
    const std::string prefix = absl::StrCat("ranks[", i, "].");
    if (auto status = FiniteNonNegative(prefix + "compute_seconds_per_step", rank.compute_seconds_per_step());
        !status.ok()) {
      return status;
    }
    if (auto status = FiniteNonNegative(prefix + "wait_seconds_per_step", rank.wait_seconds_per_step());
        !status.ok()) {
      return status;
    }
    if (auto status = NonNegative(prefix + "samples_per_step", rank.samples_per_step()); !status.ok()) return status;
    if (auto status = NonNegative(prefix + "batch_share", rank.batch_share()); !status.ok()) return status;
    if (!rank.worker_id().empty()) {
      return Invalid(prefix + "worker_id", "must be empty: the coordinator fills it in from the members");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRanksInWorld(const v1::ReportProgressRequest& report, int64_t world_size) {
  if (report.has_straggler() && report.straggler().rank() >= world_size) {
    return Invalid("straggler.rank",
                   absl::StrCat("must be below the world size ", world_size, ", got ", report.straggler().rank()));
  }
  if (report.ranks_size() != 0 && report.ranks_size() != world_size) {
    return Invalid("ranks", absl::StrCat("must list every rank of the world (", world_size, ") or none, got ",
                                         report.ranks_size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointRecord(const v1::CommitCheckpointRequest& record) {
  const std::pair<const char*, int64_t> counts[] = {{"step", record.step()},
                                                    {"epoch", record.epoch()},
                                                    {"samples_in_epoch", record.samples_in_epoch()},
                                                    {"size_bytes", record.size_bytes()}};
  for (const auto& [field, value] : counts) {
    if (auto status = NonNegative(field, value); !status.ok()) return status;
  }
  if (record.sha256().size() > 64 || HasControlChars(record.sha256())) {
    return Invalid("sha256", absl::StrCat("must be a hex digest, got '", EscapeControlChars(record.sha256()), "'"));
  }
  return absl::OkStatus();
}

}  // namespace herd::coordinator
