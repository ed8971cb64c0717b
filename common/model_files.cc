#include "common/model_files.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace herd {

bool IsFinalModelFileName(absl::string_view name) { return name == kFinalModelFile || name == kFinalSafetensorsFile; }

bool IsPlainFileName(absl::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (char c : name) {
    if (c == '/' || c == '\0' || absl::ascii_iscntrl(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool IsCheckpointPathOf(absl::string_view job_id, absl::string_view path) {
  const std::string prefix = absl::StrCat(job_id, "/step-");
  if (job_id.empty() || !absl::StartsWith(path, prefix) || path.size() == prefix.size()) return false;
  if (!IsPlainFileName(job_id) || job_id.find('/') != absl::string_view::npos) return false;
  for (char c : path.substr(prefix.size())) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace herd
