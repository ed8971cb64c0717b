#include "worker/daemon/model_file_path.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/control_chars.h"
#include "common/model_files.h"
#include "worker/daemon/identifiers.h"

namespace herd::worker {

absl::StatusOr<std::string> ModelFilePath(const v1::LogRequest& request, const std::string& worker_id,
                                          const std::string& job_dir, const std::string& checkpoint_root) {
  const std::string& job_id = request.job_id();
  if (!IsValidJobId(job_id))
    return absl::InvalidArgumentError(absl::StrCat("job id '", EscapeControlChars(job_id), "' is not valid"));
  if (!IsPlainFileName(request.file())) {
    return absl::InvalidArgumentError(
        absl::StrCat("file '", EscapeControlChars(request.file()), "' is not a plain file name"));
  }
  std::string folder;
  if (request.checkpoint_path().empty()) {
    if (!IsFinalModelFileName(request.file())) {
      return absl::PermissionDeniedError(
          absl::StrCat("file '", request.file(), "' is not a final model file; only those leave a job's dir"));
    }
    folder = job_dir;
  } else {
    if (!IsCheckpointPathOf(job_id, request.checkpoint_path())) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint path '", EscapeControlChars(request.checkpoint_path()),
                                                     "' is not one of job ", job_id));
    }
    folder = absl::StrCat(checkpoint_root, "/", request.checkpoint_path());
  }
  const std::string what = request.checkpoint_path().empty()
                               ? absl::StrCat(request.file(), " of job ", job_id)
                               : absl::StrCat(request.file(), " of checkpoint ", request.checkpoint_path());
  std::error_code error;
  const std::filesystem::path base = std::filesystem::canonical(folder, error);
  if (error) return absl::NotFoundError(absl::StrCat("worker ", worker_id, " has no ", what));
  const std::filesystem::path file = std::filesystem::canonical(base / request.file(), error);
  if (error || !std::filesystem::is_regular_file(file, error)) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " has no ", what));
  }
  // A link inside the folder must not lead out of it.
  if (file.parent_path() != base) {
    return absl::PermissionDeniedError(absl::StrCat("worker ", worker_id, ": ", what, " leads outside its folder"));
  }
  return file.string();
}

}  // namespace herd::worker
