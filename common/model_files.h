// The names of a job's model files on a worker, and the checks that keep a
// fetch (`herd fetch`) inside the job's dir and its checkpoint folders.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace herd {

// Every rank writes the final model into its own job dir in both formats.
constexpr char kFinalModelFile[] = "model-final.pt";
constexpr char kFinalSafetensorsFile[] = "model-final.safetensors";
// A checkpoint folder's list of files with their sizes and SHA-256.
constexpr char kCheckpointManifestFile[] = "MANIFEST";

bool IsFinalModelFileName(absl::string_view name);

// A single file name: not empty, no '/', not "." or "..", no control
// characters, at most 255 bytes.
bool IsPlainFileName(absl::string_view name);

// JOB/step-N, the one form a checkpoint folder's path (relative to a
// checkpoint root) has.
bool IsCheckpointPathOf(absl::string_view job_id, absl::string_view path);

}  // namespace herd
