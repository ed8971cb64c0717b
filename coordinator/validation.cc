#include "coordinator/validation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/incarnation.h"

namespace herd::coordinator {
namespace {

constexpr size_t kMaxWorkerIdBytes = 128;
constexpr size_t kMaxAddressBytes = 256;
constexpr size_t kMaxPathBytes = 4096;

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
  if (request.device_kind() != "cpu" && request.device_kind() != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device_kind: unknown value '", request.device_kind(), "' (expected one of: cpu, cuda)"));
  }
  if (request.device_count() < 0) return absl::InvalidArgumentError("device_count: must be >= 0");
  return absl::OkStatus();
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

}  // namespace herd::coordinator
