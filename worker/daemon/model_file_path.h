// Where a file `herd fetch` asks for lies on this worker, or why it is
// refused. Only the final model files of a job's dir and the files of that
// job's checkpoint folders are served; nothing that resolves (through "..",
// or a symbolic link) outside the job's dir or its checkpoint folder is.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd::worker {

// `request` is a LogRequest with `file` set. NOT_FOUND (naming the worker,
// the job and the file) when this worker does not hold it; INVALID_ARGUMENT
// or PERMISSION_DENIED for a request that would leave the allowed folders.
absl::StatusOr<std::string> ModelFilePath(const v1::LogRequest& request, const std::string& worker_id,
                                          const std::string& job_dir, const std::string& checkpoint_root);

}  // namespace herd::worker
